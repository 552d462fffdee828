//! The shared cache: derived caches kept in an object store (GCS, S3 or a directory) for
//! every replica, looked up after the local disk and written behind computing, through
//! a bounded queue that drops rather than waits.

use std::sync::Arc;
use std::time::Duration;

use metrics::Counter;
use serde::Deserialize;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;
use tokio::sync::{Semaphore, mpsc};

use crate::objstore::{ObjectStore, ObjectStoreConfig};
use crate::telemetry::{SHARED_CACHE_FETCHES, SHARED_CACHE_UPLOADED_BYTES, SHARED_CACHE_UPLOADS};

/// Upstream's `shared_cache` block, plus an `s3` backend.
#[derive(Clone, Debug, Deserialize)]
pub struct SharedCacheConfig {
    /// Uploads running at once; they never compete with requests for long.
    #[serde(default = "default_max_concurrent_uploads")]
    pub max_concurrent_uploads: usize,
    /// Uploads waiting for a slot; beyond this they are dropped (and counted), since
    /// a missed upload only costs another replica one computation.
    #[serde(default = "default_max_upload_queue_size")]
    pub max_upload_queue_size: usize,
    #[serde(flatten)]
    pub backend: ObjectStoreConfig,
}

fn default_max_concurrent_uploads() -> usize {
    20
}

fn default_max_upload_queue_size() -> usize {
    400
}

/// The shared cache's counters, registered once (every outcome shows, 0 or not).
struct SharedCacheMetrics {
    uploaded: Counter,
    uploaded_bytes: Counter,
    upload_errors: Counter,
    /// Uploads dropped because the queue was full.
    uploads_dropped: Counter,
    fetch_hits: Counter,
    fetch_misses: Counter,
    fetch_errors: Counter,
}

impl SharedCacheMetrics {
    fn new() -> Self {
        let upload =
            |outcome: &'static str| metrics::counter!(SHARED_CACHE_UPLOADS, "outcome" => outcome);
        let fetch =
            |outcome: &'static str| metrics::counter!(SHARED_CACHE_FETCHES, "outcome" => outcome);
        SharedCacheMetrics {
            uploaded: upload("ok"),
            uploaded_bytes: metrics::counter!(SHARED_CACHE_UPLOADED_BYTES),
            upload_errors: upload("error"),
            uploads_dropped: upload("dropped"),
            fetch_hits: fetch("hit"),
            fetch_misses: fetch("miss"),
            fetch_errors: fetch("error"),
        }
    }
}

struct SharedUpload {
    /// `<kind>/<version>/<scope>/<digest>`, already sanitised by `CacheKey`.
    path: String,
    data: ByteView<'static>,
}

/// Derived caches shared by replicas: looked up after the local disk and before
/// computing, and written after computing through a bounded background queue.
pub struct SharedCache {
    backend: Arc<ObjectStore>,
    queue: mpsc::Sender<SharedUpload>,
    metrics: Arc<SharedCacheMetrics>,
}

impl SharedCache {
    /// Starts the upload worker on the current tokio runtime. `connect_timeout` bounds
    /// connecting to an S3 store.
    pub fn new(config: &SharedCacheConfig, connect_timeout: Duration) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the shared cache needs a tokio runtime"))?;
        let backend = ObjectStore::new(&config.backend, connect_timeout)
            .map_err(|err| anyhow::anyhow!("shared cache: {err}"))?;
        let backend = Arc::new(backend);
        let metrics = Arc::new(SharedCacheMetrics::new());
        let (queue, rx) = mpsc::channel(config.max_upload_queue_size.max(1));
        runtime.spawn(upload_worker(
            rx,
            backend.clone(),
            metrics.clone(),
            config.max_concurrent_uploads.max(1),
        ));
        Ok(SharedCache {
            backend,
            queue,
            metrics,
        })
    }

    /// Copies the shared file at `path` into `dest`; `false` when there is none (or the
    /// store failed, which only costs a computation).
    pub async fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> bool {
        match self.backend.fetch(path, dest).await {
            Ok(true) => {
                self.metrics.fetch_hits.increment(1);
                true
            }
            Ok(false) => {
                self.metrics.fetch_misses.increment(1);
                false
            }
            Err(err) => {
                self.metrics.fetch_errors.increment(1);
                tracing::warn!(%path, error = %err, "shared cache lookup failed");
                false
            }
        }
    }

    /// Copies the shared file at `path` into `dest` and says whether there was one, or
    /// why the store could not tell: for files that are not a cache of something else.
    pub async fn try_fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        self.backend.fetch(path, dest).await
    }

    /// The size of the shared file at `path`; `None` when there is none. An empty file
    /// counts as none, as in [`Self::fetch`]: a store that cannot delete empties.
    pub async fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        Ok(self.backend.size(path).await?.filter(|&size| size > 0))
    }

    /// Writes `data` at `path` now, for what must not be lost: the caller learns
    /// whether it is stored.
    pub async fn put(&self, path: &str, data: ByteView<'static>) -> anyhow::Result<()> {
        self.backend.store(path, data).await
    }

    /// Removes the shared file at `path`, if there is one.
    pub async fn remove(&self, path: &str) -> anyhow::Result<()> {
        self.backend.remove(path).await
    }

    /// Queues an upload; never waits.
    pub fn store(&self, path: String, data: ByteView<'static>) {
        if self.queue.try_send(SharedUpload { path, data }).is_err() {
            self.metrics.uploads_dropped.increment(1);
        }
    }
}

async fn upload_worker(
    mut rx: mpsc::Receiver<SharedUpload>,
    backend: Arc<ObjectStore>,
    metrics: Arc<SharedCacheMetrics>,
    max_concurrent: usize,
) {
    let slots = Arc::new(Semaphore::new(max_concurrent));
    while let Some(upload) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (backend, metrics) = (backend.clone(), metrics.clone());
        tokio::spawn(async move {
            let bytes = upload.data.len() as u64;
            match backend.store(&upload.path, upload.data).await {
                Ok(()) => {
                    metrics.uploaded.increment(1);
                    metrics.uploaded_bytes.increment(bytes);
                }
                Err(err) => {
                    tracing::warn!(path = %upload.path, error = %err, "shared cache upload failed");
                    metrics.upload_errors.increment(1);
                }
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::telemetry::recorded;

    fn filesystem(dir: &Path, queue: usize) -> SharedCache {
        let config = SharedCacheConfig {
            max_concurrent_uploads: 1,
            max_upload_queue_size: queue,
            backend: ObjectStoreConfig::Filesystem {
                path: dir.to_owned(),
            },
        };
        SharedCache::new(&config, Duration::from_secs(5)).unwrap()
    }

    // A current-thread runtime: the worker cannot take anything off the queue until
    // the test yields, so what a full queue does is deterministic.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_drops_and_counts_and_uploads_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, metrics) = recorded(|| filesystem(dir.path(), 1));
        let uploads = |outcome| metrics.counter(SHARED_CACHE_UPLOADS, &[("outcome", outcome)]);
        for n in 0..3 {
            let data = ByteView::from_vec(format!("item {n}").into_bytes());
            shared.store(format!("kind/1/global/{n}"), data);
        }
        assert_eq!(uploads("dropped"), 2);
        for _ in 0..100 {
            if uploads("ok") == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(uploads("ok"), 1);
        assert_eq!(metrics.counter(SHARED_CACHE_UPLOADED_BYTES, &[]), 6);

        let mut temp = NamedTempFile::new().unwrap();
        assert!(shared.fetch("kind/1/global/0", &mut temp).await);
        assert_eq!(std::fs::read(temp.path()).unwrap(), b"item 0");
        let mut temp = NamedTempFile::new().unwrap();
        assert!(!shared.fetch("kind/1/global/1", &mut temp).await);
        let fetches = |outcome| metrics.counter(SHARED_CACHE_FETCHES, &[("outcome", outcome)]);
        assert_eq!(
            (fetches("hit"), fetches("miss"), fetches("error")),
            (1, 1, 0)
        );
    }
}
