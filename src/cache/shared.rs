//! The shared cache: derived caches kept in GCS, S3 or a directory for every replica,
//! looked up after the local disk and written behind computing, through a bounded
//! queue that drops rather than waits.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use metrics::Counter;
use serde::Deserialize;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;
use tokio::sync::{OnceCell, Semaphore, mpsc};

use url::Url;

use crate::fetch::{
    Downloader, FetchConfig, GcsAccess, build_gcs_client, build_s3_client, gcs_bucket,
    gcs_credentials, gcs_key_file_credentials, s3_http_client,
};
use crate::sources::{GcsAuth, S3Region, Secret};
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
    pub backend: SharedCacheBackendConfig,
}

fn default_max_concurrent_uploads() -> usize {
    20
}

fn default_max_upload_queue_size() -> usize {
    400
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SharedCacheBackendConfig {
    /// A directory every replica mounts (NFS, a shared volume).
    Filesystem { path: PathBuf },
    /// An S3 bucket, or any store speaking S3 (MinIO, Ceph). `region: [name, endpoint]`
    /// as for S3 sources.
    S3(S3SharedCacheConfig),
    /// A GCS bucket.
    Gcs(GcsSharedCacheConfig),
}

#[derive(Clone, Debug, Deserialize)]
pub struct GcsSharedCacheConfig {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    /// A service account key file (JSON). Without one: application-default credentials
    /// (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, or the metadata server), or none
    /// for an emulator.
    #[serde(default)]
    pub service_account_path: Option<PathBuf>,
    /// Another JSON-API endpoint, e.g. an emulator (omnisym only; also taken from
    /// `STORAGE_EMULATOR_HOST`). An emulator without credentials is used anonymously.
    #[serde(default)]
    pub endpoint: Option<Url>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct S3SharedCacheConfig {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    pub region: S3Region,
    /// Empty: the server's own AWS credentials (default chain).
    #[serde(default)]
    pub access_key: String,
    #[serde(default)]
    pub secret_key: Secret,
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

enum Backend {
    Filesystem(PathBuf),
    S3(Box<S3Backend>),
    Gcs(Box<GcsBackend>),
}

struct GcsBackend {
    /// The crate's name for it.
    bucket: String,
    prefix: String,
    endpoint: Option<Url>,
    credentials: google_cloud_auth::credentials::Credentials,
    /// Built on first use: building needs the runtime.
    client: OnceCell<google_cloud_storage::client::Storage>,
}

struct S3Backend {
    config: S3SharedCacheConfig,
    /// Built on first use: the default credential chain needs the runtime.
    client: OnceCell<aws_sdk_s3::Client>,
    http: aws_sdk_s3::config::SharedHttpClient,
    connect_timeout: std::time::Duration,
}

struct SharedUpload {
    /// `<kind>/<version>/<scope>/<digest>`, already sanitised by `CacheKey`.
    path: String,
    data: ByteView<'static>,
}

/// Derived caches shared by replicas: looked up after the local disk and before
/// computing, and written after computing through a bounded background queue.
pub struct SharedCache {
    backend: Arc<Backend>,
    queue: mpsc::Sender<SharedUpload>,
    metrics: Arc<SharedCacheMetrics>,
}

impl SharedCache {
    /// Starts the upload worker on the current tokio runtime.
    pub fn new(config: &SharedCacheConfig, downloader: &Downloader) -> anyhow::Result<Self> {
        let fetch = downloader.config();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| anyhow::anyhow!("the shared cache needs a tokio runtime"))?;
        let backend = Arc::new(match &config.backend {
            SharedCacheBackendConfig::Filesystem { path } => {
                std::fs::create_dir_all(path).map_err(|err| {
                    anyhow::anyhow!("cannot create shared cache {}: {err}", path.display())
                })?;
                Backend::Filesystem(path.clone())
            }
            SharedCacheBackendConfig::S3(s3) => Backend::S3(Box::new(S3Backend {
                config: s3.clone(),
                client: OnceCell::new(),
                // The shared cache is the operator's own infrastructure, typically on a
                // private network: the reserved-IP rule protects against request data only.
                http: s3_http_client(&FetchConfig {
                    connect_to_reserved_ips: true,
                    ..fetch.clone()
                }),
                connect_timeout: fetch.connect_timeout,
            })),
            SharedCacheBackendConfig::Gcs(gcs) => {
                let endpoint = gcs
                    .endpoint
                    .clone()
                    .or_else(|| downloader.gcs_emulator().cloned());
                Backend::Gcs(Box::new(GcsBackend {
                    bucket: gcs_bucket(&gcs.bucket),
                    prefix: gcs.prefix.clone(),
                    credentials: gcs_shared_credentials(gcs, endpoint.as_ref())?,
                    endpoint,
                    client: OnceCell::new(),
                }))
            }
        });
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
    backend: Arc<Backend>,
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

impl Backend {
    async fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        match self {
            Backend::Filesystem(root) => {
                return match std::fs::metadata(root.join(path)) {
                    Ok(meta) => Ok(Some(meta.len())),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(err) => Err(err.into()),
                };
            }
            Backend::Gcs(gcs) => return gcs.size(path).await,
            Backend::S3(_) => {}
        }
        let (client, config) = self.s3_client().await.expect("not a filesystem backend");
        let answer = client
            .head_object()
            .bucket(&config.bucket)
            .key(object_key(&config.prefix, path))
            .send()
            .await;
        match answer {
            Ok(head) => Ok(Some(head.content_length().unwrap_or(0).max(0) as u64)),
            Err(err) if is_s3_missing(&err) => Ok(None),
            Err(err) => Err(anyhow::anyhow!(
                "{}",
                aws_sdk_s3::error::DisplayErrorContext(err)
            )),
        }
    }

    async fn remove(&self, path: &str) -> anyhow::Result<()> {
        match self {
            Backend::Filesystem(root) => {
                return match std::fs::remove_file(root.join(path)) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
                    _ => Ok(()),
                };
            }
            // The crate deletes only through its gRPC control client; an empty object
            // reads as none (see `SharedCache::size`), and the bucket's lifecycle rules
            // collect it.
            Backend::Gcs(gcs) => return gcs.store(path, ByteView::from_slice(&[])).await,
            Backend::S3(_) => {}
        }
        let (client, config) = self.s3_client().await.expect("not a filesystem backend");
        client
            .delete_object()
            .bucket(&config.bucket)
            .key(object_key(&config.prefix, path))
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{}", aws_sdk_s3::error::DisplayErrorContext(err)))?;
        Ok(())
    }

    async fn s3_client(&self) -> Option<(&aws_sdk_s3::Client, &S3SharedCacheConfig)> {
        let Backend::S3(s3) = self else {
            return None;
        };
        let S3Backend {
            config,
            client,
            http,
            connect_timeout,
        } = s3.as_ref();
        let client = client
            .get_or_init(|| async {
                let keys = (!config.access_key.is_empty())
                    .then_some((config.access_key.as_str(), &config.secret_key));
                build_s3_client(
                    &config.region.name,
                    config.region.endpoint.as_ref(),
                    keys,
                    http.clone(),
                    *connect_timeout,
                )
                .await
            })
            .await;
        Some((client, config))
    }

    async fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        match self {
            Backend::Filesystem(root) => {
                return match std::fs::copy(root.join(path), dest.path()) {
                    Ok(_) => Ok(true),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
                    Err(err) => Err(err.into()),
                };
            }
            Backend::Gcs(gcs) => return gcs.fetch(path, dest).await,
            Backend::S3(_) => {}
        }
        let (client, config) = self.s3_client().await.expect("not a filesystem backend");
        let answer = client
            .get_object()
            .bucket(&config.bucket)
            .key(object_key(&config.prefix, path))
            .send()
            .await;
        let mut output = match answer {
            Ok(output) => output,
            Err(err) => {
                return if is_s3_missing(&err) {
                    Ok(false)
                } else {
                    Err(anyhow::anyhow!(
                        "{}",
                        aws_sdk_s3::error::DisplayErrorContext(err)
                    ))
                };
            }
        };
        let mut file = tokio::fs::File::from_std(dest.reopen()?);
        let mut len = 0;
        while let Some(chunk) = output.body.next().await {
            let chunk = chunk?;
            len += chunk.len();
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        // Stores may answer a missing key with an empty object; no cache file is empty.
        Ok(len > 0)
    }

    async fn store(&self, path: &str, data: ByteView<'static>) -> anyhow::Result<()> {
        match self {
            Backend::Filesystem(root) => return write_atomically(&root.join(path), &data),
            Backend::Gcs(gcs) => return gcs.store(path, data).await,
            Backend::S3(_) => {}
        }
        let (client, config) = self.s3_client().await.expect("not a filesystem backend");
        client
            .put_object()
            .bucket(&config.bucket)
            .key(object_key(&config.prefix, path))
            // The mapped file itself, not a copy: original debug files run to gigabytes.
            .body(ByteStream::from(bytes::Bytes::from_owner(data)))
            .send()
            .await
            .map_err(|err| anyhow::anyhow!("{}", aws_sdk_s3::error::DisplayErrorContext(err)))?;
        Ok(())
    }
}

/// Whether S3 answered that there is no such object.
fn is_s3_missing<E>(
    err: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> bool {
    err.raw_response()
        .is_some_and(|r| r.status().as_u16() == 404)
}

/// The shared cache is the operator's own store: the same credentials read and write.
fn gcs_shared_credentials(
    config: &GcsSharedCacheConfig,
    endpoint: Option<&Url>,
) -> anyhow::Result<google_cloud_auth::credentials::Credentials> {
    match &config.service_account_path {
        Some(path) => gcs_key_file_credentials(path, GcsAccess::Write),
        None => Ok(gcs_credentials(
            &GcsAuth::Default,
            endpoint,
            GcsAccess::Write,
        )?),
    }
}

impl GcsBackend {
    async fn client(&self) -> anyhow::Result<&google_cloud_storage::client::Storage> {
        // The store is the operator's (often on a private network, so the reserved-IP rule
        // does not apply), and a lost lookup or upload only costs a computation: the
        // crate's own retries are welcome here.
        self.client
            .get_or_try_init(|| {
                build_gcs_client(self.credentials.clone(), self.endpoint.as_ref(), true)
            })
            .await
    }

    async fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        let answer = self
            .client()
            .await?
            .read_object(&self.bucket, object_key(&self.prefix, path))
            .send()
            .await;
        let mut response = match answer {
            Ok(response) => response,
            Err(err) if err.http_status_code() == Some(404) => return Ok(false),
            Err(err) => return Err(err.into()),
        };
        let mut file = tokio::fs::File::from_std(dest.reopen()?);
        let mut len = 0;
        while let Some(chunk) = response.next().await.transpose()? {
            len += chunk.len();
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        Ok(len > 0)
    }

    /// The object's size, as GCS states it when sending the first byte; a store that
    /// does not state it (emulators) has the object counted as it is read through.
    async fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        use google_cloud_storage::model_ext::ReadRange;
        let client = self.client().await?;
        let key = object_key(&self.prefix, path);
        let answer = client
            .read_object(&self.bucket, &key)
            .set_read_range(ReadRange::head(1))
            .send()
            .await;
        match answer {
            Ok(response) if response.object().size > 0 => Ok(Some(response.object().size as u64)),
            Ok(_) => {
                let mut response = client.read_object(&self.bucket, &key).send().await?;
                let mut size = 0;
                while let Some(chunk) = response.next().await.transpose()? {
                    size += chunk.len() as u64;
                }
                Ok(Some(size))
            }
            Err(err) if err.http_status_code() == Some(404) => Ok(None),
            // The range of an empty object is not satisfiable.
            Err(err) if err.http_status_code() == Some(416) => Ok(Some(0)),
            Err(err) => Err(err.into()),
        }
    }

    async fn store(&self, path: &str, data: ByteView<'static>) -> anyhow::Result<()> {
        self.client()
            .await?
            .write_object(
                &self.bucket,
                object_key(&self.prefix, path),
                bytes::Bytes::from_owner(data),
            )
            // Buffered, the crate sends the checksums ahead of the data rather than in a
            // trailing multipart part, which emulators (fake-gcs-server) take for data.
            .send_buffered()
            .await?;
        Ok(())
    }
}

fn object_key(prefix: &str, path: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        path.to_owned()
    } else {
        format!("{prefix}/{path}")
    }
}

/// Other replicas read the same directory: they must never see a partial file.
fn write_atomically(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().expect("shared cache paths have a parent");
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    temp.write_all(data)?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::recorded;

    fn filesystem(dir: &Path, queue: usize) -> SharedCache {
        let config = SharedCacheConfig {
            max_concurrent_uploads: 1,
            max_upload_queue_size: queue,
            backend: SharedCacheBackendConfig::Filesystem {
                path: dir.to_owned(),
            },
        };
        let downloader = Downloader::new(FetchConfig::default()).unwrap();
        SharedCache::new(&config, &downloader).unwrap()
    }

    // Credentials start their token refresher on the runtime.
    #[tokio::test]
    async fn gcs_credentials_come_from_the_service_account_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = |path: Option<PathBuf>| GcsSharedCacheConfig {
            bucket: "b".into(),
            prefix: String::new(),
            service_account_path: path,
            endpoint: None,
        };
        let emulator = Url::parse("http://127.0.0.1:4443").unwrap();
        assert!(gcs_shared_credentials(&config(None), Some(&emulator)).is_ok());
        let pem = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gcs/test-key.pem"),
        )
        .unwrap();
        let key = dir.path().join("key.json");
        let json = serde_json::json!({"type": "service_account", "client_email": "sa@p.iam",
            "private_key": pem, "private_key_id": "k1", "project_id": "p"});
        std::fs::write(&key, json.to_string()).unwrap();
        assert!(gcs_shared_credentials(&config(Some(key)), None).is_ok());

        let missing = dir.path().join("missing.json");
        let err = gcs_shared_credentials(&config(Some(missing)), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.json"), "{err}");
        let not_a_key = dir.path().join("not-a-key.json");
        std::fs::write(&not_a_key, r#"{"type": "service_account"}"#).unwrap();
        let err = gcs_shared_credentials(&config(Some(not_a_key)), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no service account key"), "{err}");
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
