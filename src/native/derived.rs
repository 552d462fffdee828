//! The shared shape of every cache derived from a debug file (SymCache, PpdbCache,
//! CFI caches): pick the best candidate for the purpose, build or load the derived cache
//! from it, and record on that candidate whether it could be used.

use std::fs::File;
use std::io::BufWriter;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use symbolic::common::ByteView;
use symbolic::debuginfo::Object;
use tempfile::NamedTempFile;

use super::objects::{FoundObject, ObjectPurpose, ObjectsActor};
use crate::cache::{CacheError, CacheItemRequest, CacheKind, CacheResult, Cacher, Caches, Scope};
use crate::sources::{FileType, ObjectId, ObjectType, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectFeatures, ObjectUseInfo};

/// A derived cache (or why there is none), every candidate consulted, and the features
/// of the file it was built from.
pub struct Derived<T> {
    pub cache: CacheResult<T>,
    pub candidates: AllObjectCandidates,
    pub features: ObjectFeatures,
    /// The file the cache was built from, when it also carries or points to sources
    /// (embedded in DWARF, a portable PDB, a PDB's SRCSRV stream), so source context
    /// needs no second lookup.
    pub with_sources: Option<FoundObject>,
}

/// One kind of cache derived from a debug file: what it is built from and how.
pub trait DerivedFormat: Send + Sync + 'static {
    type Item: Clone + Send + Sync + 'static;
    const KIND: CacheKind;
    /// Which candidate wins (debug info, unwind info).
    const PURPOSE: ObjectPurpose;
    /// `(numerator, denominator)` of the in-memory budget.
    const MEMORY_SHARE: (u64, u64);
    /// See [`CacheItemRequest::MEMORY_FACTOR`].
    const MEMORY_FACTOR: u32 = 1;

    fn filetypes(object_type: ObjectType) -> &'static [FileType] {
        FileType::from_object_type(object_type)
    }

    /// Writes the derived cache for `object`. Runs on a blocking thread.
    fn convert(object: &Object<'_>, out: &mut BufWriter<File>) -> CacheResult<()>;

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item>;
}

struct DerivedRequest<F> {
    objects: Arc<ObjectsActor>,
    found: FoundObject,
    id: ObjectId,
    format: PhantomData<fn() -> F>,
}

impl<F: DerivedFormat> CacheItemRequest for DerivedRequest<F> {
    type Item = F::Item;
    const MEMORY_FACTOR: u32 = F::MEMORY_FACTOR;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(convert_object(
            &self.objects,
            &self.found,
            &self.id,
            temp_file,
            F::convert,
        ))
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        F::load(data)
    }
}

/// Finds the best debug file for a module and keeps the cache of format `F` built from
/// it.
pub struct DerivedActor<F: DerivedFormat> {
    objects: Arc<ObjectsActor>,
    cacher: Cacher<DerivedRequest<F>>,
}

impl<F: DerivedFormat> DerivedActor<F> {
    pub fn new(caches: &Caches, objects: Arc<ObjectsActor>) -> Self {
        let (num, den) = F::MEMORY_SHARE;
        DerivedActor {
            objects,
            cacher: caches.derived(F::KIND, caches.memory_share(num, den)),
        }
    }

    pub async fn fetch(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Derived<F::Item> {
        let lookup = DerivedLookup {
            sources,
            filetypes: F::filetypes(id.object_type),
            id,
            scope,
            purpose: F::PURPOSE,
        };
        fetch_derived(&self.objects, &self.cacher, lookup, |found| {
            DerivedRequest {
                objects: self.objects.clone(),
                found,
                id: id.clone(),
                format: PhantomData,
            }
        })
        .await
    }
}

struct DerivedLookup<'a> {
    sources: &'a [SourceConfig],
    filetypes: &'a [FileType],
    id: &'a ObjectId,
    scope: &'a Scope,
    purpose: ObjectPurpose,
}

async fn fetch_derived<R: CacheItemRequest>(
    objects: &ObjectsActor,
    cacher: &Cacher<R>,
    lookup: DerivedLookup<'_>,
    request: impl FnOnce(FoundObject) -> R,
) -> Derived<R::Item> {
    let find = objects
        .find(
            lookup.sources,
            lookup.filetypes,
            lookup.id,
            lookup.scope,
            lookup.purpose,
        )
        .await;
    let mut candidates = find.candidates;
    let found = match find.found {
        Some(found) => found,
        None => {
            return Derived {
                cache: Err(CacheError::NotFound),
                candidates,
                features: ObjectFeatures::default(),
                with_sources: None,
            };
        }
    };
    let features = match &found.meta {
        Ok(meta) => meta.features.clone(),
        Err(err) => {
            return Derived {
                cache: Err(err.clone()),
                candidates,
                features: ObjectFeatures::default(),
                with_sources: None,
            };
        }
    };
    let with_sources =
        (features.has_sources || features.srcsrv_vcs.is_some()).then(|| found.clone());
    let key = found.key.derived(cacher.kind().name);
    let (source, location) = (found.file.source_id().clone(), found.file.uri().to_owned());
    let cache = cacher.get(key, request(found)).await;
    let use_info = match &cache {
        Ok(_) => ObjectUseInfo::Ok,
        Err(CacheError::Malformed(_)) => ObjectUseInfo::Malformed,
        Err(err) => ObjectUseInfo::Error {
            details: err.to_string(),
        },
    };
    match lookup.purpose {
        ObjectPurpose::Unwind => candidates.set_unwind(&source, &location, use_info),
        _ => candidates.set_debug(&source, &location, use_info),
    }
    Derived {
        cache,
        candidates,
        features,
        with_sources,
    }
}

/// Fetches the debug file behind `found` and runs `convert` on it off the async workers
/// (conversion is CPU-bound), writing its output into `temp_file`.
async fn convert_object(
    objects: &ObjectsActor,
    found: &FoundObject,
    id: &ObjectId,
    temp_file: &mut NamedTempFile,
    convert: impl FnOnce(&Object<'_>, &mut BufWriter<File>) -> CacheResult<()> + Send + 'static,
) -> CacheResult<()> {
    let handle = objects.fetch(found, id).await?;
    let file = temp_file
        .as_file()
        .try_clone()
        .map_err(CacheError::internal)?;
    tokio::task::spawn_blocking(move || {
        let mut writer = BufWriter::new(file);
        convert(handle.object(), &mut writer)?;
        writer.into_inner().map_err(CacheError::internal)?;
        Ok(())
    })
    .await
    .map_err(CacheError::internal)?
}
