//! Downloaded files of any format, cached: a file at a location on a source (or at a
//! URL) is fetched once, unpacked, checked by its format and kept on disk under the
//! `downloaded` lifetime rules, however many requests and platforms ask for it.

use std::marker::PhantomData;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use futures::future::BoxFuture;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use crate::cache::{CacheItemRequest, CacheKey, CacheKind, Cacher, Caches, Scope};
use crate::error::{CacheError, CacheResult, isolate_blocking};
use crate::fetch::{Downloader, RemoteFile};

/// What a downloaded file must be, and what it becomes once it is.
pub trait FileFormat: Send + Sync + 'static {
    type Item: Clone + Send + Sync + 'static;
    /// What the check needs to know beyond the file (e.g. which object of a fat
    /// archive the module is).
    type Hint: Clone + Send + Sync + 'static;
    const KIND: CacheKind;
    /// See [`CacheItemRequest::MEMORY_FACTOR`].
    const MEMORY_FACTOR: u32 = 1;
    /// Largest file of this format worth fetching; the configured `max_download_size`
    /// applies below it.
    const MAX_SIZE: u64 = u64::MAX;

    /// [`Self::MAX_SIZE`], for formats whose limit is configured (and comes in the hint).
    fn max_size(_hint: &Self::Hint) -> u64 {
        Self::MAX_SIZE
    }

    /// Checks the unpacked file at `path` on a blocking thread. May return the part of
    /// it to keep instead of the whole file (one object out of a fat archive).
    fn prepare(path: &Path, hint: &Self::Hint) -> CacheResult<Option<Range<u64>>>;

    fn load(data: ByteView<'static>, hint: &Self::Hint) -> CacheResult<Self::Item>;
}

/// The cache key of `file` for a request in `scope`. Public sources share their files
/// across scopes.
pub fn file_key(file: &RemoteFile, scope: &Scope) -> CacheKey {
    let scope = if file.is_public() {
        Scope::Global
    } else {
        scope.clone()
    };
    CacheKey::new(scope, &[file.source_id().as_str(), file.cache_identity()])
}

pub struct DownloadRequest<F: FileFormat> {
    file: RemoteFile,
    hint: F::Hint,
    downloader: Downloader,
    format: PhantomData<fn() -> F>,
}

impl<F: FileFormat> CacheItemRequest for DownloadRequest<F> {
    type Item = F::Item;
    const MEMORY_FACTOR: u32 = F::MEMORY_FACTOR;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            self.downloader
                .fetch(&self.file, temp_file, F::max_size(&self.hint))
                .await?;
            let hint = self.hint.clone();
            let path = temp_file.path().to_owned();
            isolate_blocking(F::KIND.name, move || match F::prepare(&path, &hint)? {
                Some(kept) => keep_only(&path, kept),
                None => Ok(()),
            })
            .await
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        F::load(data, &self.hint)
    }
}

/// Cuts the file at `path` down to the bytes `kept`, moving them to its start a chunk
/// at a time: a slice of a fat file can be gigabytes, which are never all in memory.
fn keep_only(path: &Path, kept: Range<u64>) -> CacheResult<()> {
    const CHUNK: u64 = 1 << 20;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(CacheError::internal)?;
    let len = kept.end.saturating_sub(kept.start);
    let mut buf = vec![0; CHUNK.min(len) as usize];
    let mut done = 0;
    // Front to back: the bytes written (before `done`) were read already, since the
    // slice starts at or after the start of the file.
    while done < len {
        let n = CHUNK.min(len - done) as usize;
        file.read_exact_at(&mut buf[..n], kept.start + done)
            .map_err(CacheError::internal)?;
        file.write_all_at(&buf[..n], done)
            .map_err(CacheError::internal)?;
        done += n as u64;
    }
    file.set_len(len).map_err(CacheError::internal)
}

/// The downloaded files of format `F`.
pub struct Downloads<F: FileFormat> {
    cacher: Cacher<DownloadRequest<F>>,
    downloader: Downloader,
}

impl<F: FileFormat> Downloads<F> {
    pub fn new(caches: &Caches, downloader: Downloader) -> Self {
        Downloads {
            cacher: caches.cacher(F::KIND),
            downloader,
        }
    }

    /// The file at `file`, fetched at most once per key.
    pub async fn get(
        &self,
        file: &RemoteFile,
        scope: &Scope,
        hint: F::Hint,
    ) -> CacheResult<F::Item> {
        self.get_keyed(file_key(file, scope), file, hint).await
    }

    /// [`Self::get`] for a caller that already computed the file's key.
    pub async fn get_keyed(
        &self,
        key: CacheKey,
        file: &RemoteFile,
        hint: F::Hint,
    ) -> CacheResult<F::Item> {
        let request = DownloadRequest {
            file: file.clone(),
            hint,
            downloader: self.downloader.clone(),
            format: PhantomData,
        };
        self.cacher.get(key, request).await
    }
}

/// Files kept as they came, for formats the platform reads itself (source files,
/// scripts, source maps, mapping files): only their cache kind and size limit differ.
pub trait PlainFormat: Send + Sync + 'static {
    const KIND: CacheKind;
    const MAX_SIZE: u64;
}

/// Adapts a [`PlainFormat`] into a [`FileFormat`] whose item is the file's bytes.
pub struct Plain<P>(PhantomData<fn() -> P>);

impl<P: PlainFormat> FileFormat for Plain<P> {
    type Item = ByteView<'static>;
    type Hint = ();
    const KIND: CacheKind = P::KIND;
    const MAX_SIZE: u64 = P::MAX_SIZE;

    fn prepare(_path: &Path, _hint: &()) -> CacheResult<Option<Range<u64>>> {
        Ok(None)
    }

    fn load(data: ByteView<'static>, _hint: &()) -> CacheResult<Self::Item> {
        Ok(data)
    }
}
