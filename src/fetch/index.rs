//! Loads and keeps the `000Admin` index of symstore sources configured with
//! `has_index`, so lookups can skip paths the store says it does not have.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use tempfile::NamedTempFile;

use super::{Downloader, RemoteFile, fetch_file};
use crate::cache::{CacheKey, CacheResult, Scope};
use crate::sources::index::{LASTID_PATH, SymstoreIndex, parse_lastid, segment_path};
use crate::sources::{DirectoryLayoutType, SourceConfig};

/// How long a loaded index is trusted before the store is asked again.
const INDEX_TTL: Duration = Duration::from_secs(3600);
/// A failed load is retried sooner: the store may have been briefly unreachable.
const FAILED_TTL: Duration = Duration::from_secs(60);
/// Segments are small text files; anything bigger is not an index.
const MAX_SEGMENT_SIZE: u64 = 16 * 1024 * 1024;
/// Bounds the work one store can cause (Microsoft's own store has a few thousand).
const MAX_SEGMENTS: u32 = 50_000;
const CONCURRENT_SEGMENTS: usize = 8;

type Loaded = Option<Arc<SymstoreIndex>>;

#[derive(Clone)]
struct Entry {
    index: Loaded,
}

struct EntryExpiry;

impl moka::Expiry<CacheKey, Entry> for EntryExpiry {
    fn expire_after_create(
        &self,
        _: &CacheKey,
        entry: &Entry,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(if entry.index.is_some() {
            INDEX_TTL
        } else {
            FAILED_TTL
        })
    }
}

pub struct SymstoreIndexes {
    downloader: Downloader,
    cache: moka::future::Cache<CacheKey, Entry>,
}

impl SymstoreIndexes {
    pub fn new(downloader: Downloader, memory_capacity: u64) -> Self {
        SymstoreIndexes {
            downloader,
            cache: moka::future::Cache::builder()
                .max_capacity(memory_capacity)
                // Roughly what one path costs in the set.
                .weigher(|_, entry: &Entry| {
                    let paths = entry.index.as_ref().map_or(0, |i| i.len());
                    u32::try_from(paths.saturating_mul(96))
                        .unwrap_or(u32::MAX)
                        .max(1)
                })
                .expire_after(EntryExpiry)
                .build(),
        }
    }

    /// Whether `source` is to be filtered by its index.
    pub fn applies_to(source: &SourceConfig) -> bool {
        let files = source.files();
        files.has_index && files.layout.ty == DirectoryLayoutType::Symstore
    }

    /// The index of `source`, loaded at most once per TTL however many lookups ask.
    /// `None` when it cannot be loaded: then every path is tried, as without an index.
    pub async fn get(&self, source: &SourceConfig, scope: &Scope) -> Loaded {
        let key = RemoteFile::new(source.clone(), LASTID_PATH.to_owned()).cache_key(scope);
        self.cache
            .get_with(key, async {
                let index = match self.load(source).await {
                    Ok(index) => Some(Arc::new(index)),
                    Err(err) => {
                        tracing::warn!(source = %source.id(), error = %err, "cannot load symstore index; trying every path");
                        None
                    }
                };
                Entry { index }
            })
            .await
            .index
    }

    async fn fetch_text(&self, source: &SourceConfig, path: String) -> CacheResult<String> {
        let file = RemoteFile::new(source.clone(), path);
        let mut temp = NamedTempFile::new().map_err(crate::cache::CacheError::internal)?;
        fetch_file(&self.downloader, &file, &mut temp, MAX_SEGMENT_SIZE).await?;
        let bytes = tokio::fs::read(temp.path())
            .await
            .map_err(crate::cache::CacheError::internal)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn load(&self, source: &SourceConfig) -> CacheResult<SymstoreIndex> {
        let lastid = self.fetch_text(source, LASTID_PATH.to_owned()).await?;
        let lastid = parse_lastid(&lastid).ok_or_else(|| {
            crate::cache::CacheError::Malformed("lastid.txt holds no number".to_owned())
        })?;
        let mut index = SymstoreIndex::default();
        let mut segments = stream::iter(1..=lastid.min(MAX_SEGMENTS))
            .map(|id| self.fetch_text(source, segment_path(id)))
            .buffer_unordered(CONCURRENT_SEGMENTS);
        while let Some(segment) = segments.next().await {
            match segment {
                Ok(text) => index.add_segment(&text),
                // Deleted transactions leave gaps in the numbering.
                Err(crate::cache::CacheError::NotFound) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(index)
    }
}
