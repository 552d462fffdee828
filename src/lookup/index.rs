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
use crate::cache::kinds;
use crate::cache::{CacheItemRequest, Cacher, Caches, Scope};
use crate::error::{CacheError, CacheResult};
use crate::fetch::{Downloader, RemoteFile};
use crate::sources::index::{LASTID_PATH, SymstoreIndex, parse_lastid, segment_path};
use crate::sources::{DirectoryLayoutType, SourceConfig};
use crate::telemetry::SYMSTORE_INDEX_UNAVAILABLE;

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
        self.downloader
            .fetch(&file, &mut temp, MAX_SEGMENT_SIZE)
            .await?;
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
        // An index cut short would hide files it lists further on, so one past the limit
        // is not used at all.
        let max_bytes = self.downloader.config().max_symstore_index_size;
        let mut read: u64 = 0;
        let mut segments = stream::iter(1..=lastid.min(MAX_SEGMENTS))
            .map(|id| self.fetch_text(segment_path(id), dir))
            .buffer_unordered(CONCURRENT_SEGMENTS);
        while let Some(segment) = segments.next().await {
            match segment {
                Ok(text) => {
                    read = read.saturating_add(text.len() as u64);
                    if read > max_bytes {
                        return Err(CacheError::TooLarge(format!(
                            "the symstore index exceeds {max_bytes} bytes (max_symstore_index_size)"
                        )));
                    }
                    index.add_segment(&text);
                }
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
            cache: caches.cacher(kinds::SYMSTORE_INDEX),
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cache::CachesConfig;
    use crate::fetch::FetchConfig;

    /// A symstore with two index segments of about 6 KiB each.
    fn store(dir: &Path) -> SourceConfig {
        std::fs::create_dir_all(dir.join("000Admin")).unwrap();
        std::fs::write(dir.join(LASTID_PATH), "0000000002\r\n").unwrap();
        for id in 1..=2u32 {
            let text: String = (0..100)
                .map(|n| format!("\"app{id}.pdb\\{n:032X}1\",\"D:\\build\\app{id}.pdb\"\r\n"))
                .collect();
            std::fs::write(dir.join(segment_path(id)), text).unwrap();
        }
        let json = serde_json::json!({"type": "filesystem", "id": "store", "path": dir,
            "layout": {"type": "symstore"}, "has_index": true});
        serde_json::from_value(json).unwrap()
    }

    async fn index_within(max_bytes: u64) -> Option<Arc<SymstoreIndex>> {
        let (cache, files) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let downloader = Downloader::new(FetchConfig {
            max_symstore_index_size: max_bytes,
            ..FetchConfig::default()
        })
        .unwrap();
        let caches = Caches::new(cache.path(), &CachesConfig::default(), None);
        let indexes = SymstoreIndexes::new(&caches, downloader);
        indexes.get(&store(files.path()), &Scope::Global).await
    }

    #[tokio::test]
    async fn an_index_past_its_byte_limit_is_not_used() {
        let listed = format!("app2.pdb/{:032X}1/app2.pdb", 99);
        let index = index_within(u64::MAX).await.expect("the index loads");
        assert_eq!(index.len(), 200);
        assert!(index.contains(&listed));
        // Room for one segment but not both: rather no index than one that hides files.
        assert!(index_within(8 * 1024).await.is_none());
    }
}
