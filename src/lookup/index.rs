//! The `000Admin` index of symstore sources configured with `has_index`, so lookups can
//! skip paths the store says it does not have. A loaded index is a cache item like any
//! other (on disk under `cache_dir`, in memory, counted in `/metrics`), recomputed once
//! it is an hour old because stores keep growing.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::downloads::file_key;
use crate::cache::{CacheItemRequest, CacheKind, Cacher, Caches, Scope};
use crate::error::{CacheError, CacheResult};
use crate::fetch::{Downloader, RemoteFile, fetch_file};
use crate::sources::index::{LASTID_PATH, SymstoreIndex, parse_lastid, segment_path};
use crate::sources::{DirectoryLayoutType, SourceConfig};
use crate::telemetry::SYMSTORE_INDEX_UNAVAILABLE;

pub const SYMSTORE_INDEX: CacheKind = CacheKind {
    name: "symstore_index",
    version: 1,
    compatible: &[],
};

/// How long a loaded index is trusted before the store is asked again.
const INDEX_TTL: Duration = Duration::from_secs(3600);
/// Segments are small text files; anything bigger is not an index.
const MAX_SEGMENT_SIZE: u64 = 16 * 1024 * 1024;
/// Bounds the work one store can cause (Microsoft's own store has a few thousand).
const MAX_SEGMENTS: u32 = 50_000;
const CONCURRENT_SEGMENTS: usize = 8;

struct LoadIndex {
    source: SourceConfig,
    downloader: Downloader,
}

impl CacheItemRequest for LoadIndex {
    type Item = Arc<SymstoreIndex>;
    /// A set of paths costs a few times its text.
    const MEMORY_FACTOR: u32 = 3;
    const MAX_AGE: Option<Duration> = Some(INDEX_TTL);

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            let dir = temp_file
                .path()
                .parent()
                .map(ToOwned::to_owned)
                .ok_or_else(|| CacheError::internal("cache file without a directory"))?;
            let index = self.load(&dir).await?;
            std::io::Write::write_all(temp_file, index.to_lines().as_bytes())
                .map_err(CacheError::internal)
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        let text = std::str::from_utf8(&data).map_err(CacheError::internal)?;
        Ok(Arc::new(SymstoreIndex::from_lines(text)))
    }
}

impl LoadIndex {
    /// Segments land in `dir` (inside `cache_dir`) while they are read.
    async fn fetch_text(&self, path: String, dir: &std::path::Path) -> CacheResult<String> {
        let file = RemoteFile::new(self.source.clone(), path);
        let mut temp = NamedTempFile::new_in(dir).map_err(CacheError::internal)?;
        fetch_file(&self.downloader, &file, &mut temp, MAX_SEGMENT_SIZE).await?;
        let bytes = tokio::fs::read(temp.path())
            .await
            .map_err(CacheError::internal)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn load(&self, dir: &std::path::Path) -> CacheResult<SymstoreIndex> {
        let lastid = self.fetch_text(LASTID_PATH.to_owned(), dir).await?;
        let lastid = parse_lastid(&lastid)
            .ok_or_else(|| CacheError::Malformed("lastid.txt holds no number".to_owned()))?;
        let mut index = SymstoreIndex::default();
        let mut segments = stream::iter(1..=lastid.min(MAX_SEGMENTS))
            .map(|id| self.fetch_text(segment_path(id), dir))
            .buffer_unordered(CONCURRENT_SEGMENTS);
        while let Some(segment) = segments.next().await {
            match segment {
                Ok(text) => index.add_segment(&text),
                // Deleted transactions leave gaps in the numbering.
                Err(CacheError::NotFound) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(index)
    }
}

pub struct SymstoreIndexes {
    downloader: Downloader,
    cache: Cacher<LoadIndex>,
}

impl SymstoreIndexes {
    pub fn new(caches: &Caches, downloader: Downloader) -> Self {
        SymstoreIndexes {
            downloader,
            cache: caches.downloaded(SYMSTORE_INDEX),
        }
    }

    /// Whether `source` is to be filtered by its index.
    pub fn applies_to(source: &SourceConfig) -> bool {
        let files = source.files();
        files.has_index && files.layout.ty == DirectoryLayoutType::Symstore
    }

    /// The index of `source`, loaded at most once an hour however many lookups ask.
    /// `None` when it cannot be loaded: then every path is tried, as without an index.
    pub async fn get(&self, source: &SourceConfig, scope: &Scope) -> Option<Arc<SymstoreIndex>> {
        let key = file_key(
            &RemoteFile::new(source.clone(), LASTID_PATH.to_owned()),
            scope,
        );
        let request = LoadIndex {
            source: source.clone(),
            downloader: self.downloader.clone(),
        };
        match self.cache.get(key, request).await {
            Ok(index) => Some(index),
            Err(err) => {
                tracing::warn!(source = %source.id(), error = %err, "cannot load symstore index; trying every path");
                metrics::counter!(SYMSTORE_INDEX_UNAVAILABLE).increment(1);
                None
            }
        }
    }
}
