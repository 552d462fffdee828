//! Caches computed from one or more parent files: a SymCache from a debug file, a
//! SourcemapCache from a minified script and its source map, a ProGuard cache from a
//! mapping. A format says what it is built from and how; `DerivedCache` gives it the
//! lifecycle of every cache kind (memory, disk, versions, shared cache, one computation
//! per key, negative caching), keyed by its parents' keys.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Mutex;

use futures::future::BoxFuture;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::{CacheItemRequest, CacheKey, CacheKind, Cacher, Caches};
use crate::error::{CacheError, CacheResult, isolate_blocking};

/// One kind of derived cache.
pub trait DerivedFormat: Send + Sync + 'static {
    /// The loaded parent files a cache is built from.
    type Input: Send + 'static;
    type Item: Clone + Send + Sync + 'static;
    const KIND: CacheKind;
    /// See [`CacheItemRequest::MEMORY_FACTOR`].
    const MEMORY_FACTOR: u32 = 1;

    /// Writes the cache for `input`. Runs on a blocking thread: conversions are CPU-bound.
    fn convert(input: Self::Input, out: &mut BufWriter<File>) -> CacheResult<()>;

    /// Turns a cache file (memory-mapped) into the item.
    fn load(data: ByteView<'static>) -> CacheResult<Self::Item>;
}

/// How to get a format's input; only awaited when the cache has to be built.
pub type InputFuture<F> = BoxFuture<'static, CacheResult<<F as DerivedFormat>::Input>>;

pub struct DerivedRequest<F: DerivedFormat> {
    /// Taken by the one computation that runs for this request.
    input: Mutex<Option<InputFuture<F>>>,
}

impl<F: DerivedFormat> CacheItemRequest for DerivedRequest<F> {
    type Item = F::Item;
    const MEMORY_FACTOR: u32 = F::MEMORY_FACTOR;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            let input = self
                .input
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
                .ok_or_else(|| CacheError::internal("derived cache input asked for twice"))?;
            let input = input.await?;
            let file = temp_file
                .as_file()
                .try_clone()
                .map_err(CacheError::internal)?;
            // Converters walk hostile files (DWARF, PDB, source maps, mappings) in
            // dependencies that can panic: that costs this one cache, as `malformed`.
            isolate_blocking(F::KIND.name, move || {
                let mut writer = BufWriter::new(file);
                F::convert(input, &mut writer)?;
                writer.into_inner().map_err(CacheError::internal)?;
                Ok(())
            })
            .await
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        F::load(data)
    }
}

/// The caches of format `F`.
pub struct DerivedCache<F: DerivedFormat> {
    cacher: Cacher<DerivedRequest<F>>,
}

impl<F: DerivedFormat> DerivedCache<F> {
    pub fn new(caches: &Caches) -> Self {
        DerivedCache {
            cacher: caches.derived(F::KIND),
        }
    }

    pub fn kind(&self) -> CacheKind {
        F::KIND
    }

    /// The key of the cache built from the files `parents` name, in that order.
    pub fn key(parents: &[&CacheKey]) -> CacheKey {
        CacheKey::derived_from(parents, F::KIND.name)
    }

    /// The cache built from the files `parents` name; `input` loads them, and is only
    /// awaited when no cache for that key exists yet.
    pub async fn get(&self, parents: &[&CacheKey], input: InputFuture<F>) -> CacheResult<F::Item> {
        let request = DerivedRequest {
            input: Mutex::new(Some(input)),
        };
        self.cacher.get(Self::key(parents), request).await
    }
}
