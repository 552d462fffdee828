//! Getting the raw bytes of a source file onto local disk. [`Downloader::fetch`] is the
//! one way in for a file on a source: it does what every kind of source shares (a
//! download slot per source, upstream's deny list for HTTP hosts, the size limits, the
//! observer, metrics, and unpacking gzip, zstd, zlib, zip, CAB, xz and bzip2 afterwards)
//! and hands the transfer itself to the backend of the file's source kind, which owns its
//! clients: `http`, `filesystem`, `sentry` (also Sentry's search and API), `s3`, `gcs`.
//! Transfers run under the configured size and time limits with bounded retries
//! (`transfer`), and refuse reserved IP ranges unless `connect_to_reserved_ips` is set
//! (`reserved_ip`). A file is named by a location on a source or by a whole URL
//! (`RemoteFile`); which locations a source has is `lookup`'s business. Credentials never
//! reach logs or errors. Errors are [`CacheError`]s so callers can store them as negative
//! cache entries.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use crate::error::{CacheError, CacheResult};
use crate::sources::{
    FileType, Headers, HttpSourceConfig, ObjectId, SentrySourceConfig, SourceConfig,
};
use crate::units::FOREVER;

mod config;
mod decompress;
mod deny_list;
mod filesystem;
mod gcs;
mod http;
mod ledger;
mod progress;
mod remote;
mod reserved_ip;
mod s3;
mod sentry;
#[cfg(test)]
mod tests;
mod transfer;

pub use config::FetchConfig;
pub use decompress::{DecompressLimits, decompress_bounded, decompress_file, is_compressed};
pub use deny_list::{BlockedHost, DenyListConfig};
pub use http::{Certificates, HttpOptions};
pub use ledger::{DownloadLedger, DownloadRecord, SourceTally};
pub use progress::{DownloadObserver, DownloadOutcome, DownloadProgress, DownloadState, InFlight};
pub use remote::RemoteFile;
pub use transfer::record_download;

use filesystem::FilesystemBackend;
use gcs::GcsBackend;
use http::HttpBackend;
use s3::S3Backend;
use sentry::SentryBackend;
use transfer::Transfer;

/// Fetches source files. Cheap to clone: all clones share one set of connection pools.
#[derive(Debug, Clone)]
pub struct Downloader {
    inner: Arc<Inner>,
}

/// What the backends share is here; what one backend needs, it owns.
struct Inner {
    config: Arc<FetchConfig>,
    /// Keyed by [`RemoteFile::slot_key`]: a source's whole configuration, not its id.
    source_limits: moka::sync::Cache<[u8; 32], Arc<Semaphore>>,
    deny_list: Option<deny_list::HostDenyList>,
    /// Per source and per download, for the console.
    ledger: DownloadLedger,
    /// The transfers running now, with their progress.
    in_flight: Arc<InFlight>,
    observer: Option<Arc<dyn DownloadObserver>>,
    http: HttpBackend,
    filesystem: FilesystemBackend,
    sentry: SentryBackend,
    s3: S3Backend,
    gcs: GcsBackend,
}

// Hand-written so that no cached token or client state can ever be printed.
impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downloader")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Sources a server talks to at once are few; this bounds a flood of made-up source ids.
const MAX_TRACKED_SOURCES: u64 = 10_000;

impl Downloader {
    pub fn new(config: FetchConfig) -> anyhow::Result<Self> {
        Self::build(config, None)
    }

    /// A downloader that tells `observer` about every transfer as it runs.
    pub fn with_observer(
        config: FetchConfig,
        observer: Arc<dyn DownloadObserver>,
    ) -> anyhow::Result<Self> {
        Self::build(config, Some(observer))
    }

    fn build(
        config: FetchConfig,
        observer: Option<Arc<dyn DownloadObserver>>,
    ) -> anyhow::Result<Self> {
        let config = Arc::new(config);
        let http = HttpBackend::new(config.clone())?;
        Ok(Self {
            inner: Arc::new(Inner {
                deny_list: deny_list::HostDenyList::new(&config.deny_list),
                ledger: DownloadLedger::default(),
                in_flight: Arc::default(),
                source_limits: moka::sync::Cache::builder()
                    .max_capacity(MAX_TRACKED_SOURCES)
                    .time_to_idle(Duration::from_secs(600))
                    .build(),
                observer,
                sentry: SentryBackend::new(http.clone(), config.clone()),
                http,
                filesystem: FilesystemBackend,
                s3: S3Backend::new(config.clone()),
                gcs: GcsBackend::new(config.clone()),
                config,
            }),
        })
    }

    /// What the downloads so far came to, per source and one by one.
    pub fn ledger(&self) -> &DownloadLedger {
        &self.inner.ledger
    }

    /// The transfers running now, with their bytes so far and announced sizes.
    pub fn in_flight(&self) -> Vec<DownloadProgress> {
        self.inner.in_flight.list()
    }

    /// The HTTP hosts the deny list holds back now (none when it is off).
    pub fn blocked_hosts(&self) -> Vec<BlockedHost> {
        self.inner
            .deny_list
            .as_ref()
            .map(deny_list::HostDenyList::blocked)
            .unwrap_or_default()
    }

    pub fn config(&self) -> &FetchConfig {
        &self.inner.config
    }

    /// Downloads `file` into `dest` and unpacks it if it is compressed, so `dest` ends up
    /// holding the plain file. `max_size` caps the payload below the configured
    /// `max_download_size`, for every kind of source while it streams (before its first
    /// byte when the size is known) and again when unpacked.
    pub async fn fetch(
        &self,
        file: &RemoteFile,
        dest: &mut NamedTempFile,
        max_size: u64,
    ) -> CacheResult<()> {
        let mut out =
            tokio::fs::File::from_std(dest.as_file().try_clone().map_err(CacheError::internal)?);
        let permit = self.source_permit(file).await?;
        let started = Instant::now();
        // Boxed: the S3 and GCS clients' futures are tens of kilobytes, and held inline
        // they made the future of everything that may download (every cache lookup) as
        // large, copied each time one is moved, warm lookups that download nothing too.
        let downloaded = Box::pin(self.backend_transfer(file, max_size, &mut out)).await;
        record_download(file.source.type_name(), started, &downloaded);
        self.inner.ledger.record(
            file.source.id().as_str(),
            file.source.type_name(),
            file.uri(),
            started.elapsed(),
            &downloaded,
        );
        downloaded?;
        // Decompression is local work; the slot is for the source's sake.
        drop(permit);
        out.flush().await.map_err(CacheError::internal)?;
        drop(out);
        self.unpack(dest, max_size).await
    }

    /// Hands `file` to the backend of its source's kind.
    async fn backend_transfer(
        &self,
        file: &RemoteFile,
        max_size: u64,
        out: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let inner = &*self.inner;
        let Some(path) = file.path() else {
            // Named by a whole URL: only `RemoteFile::whole_url` makes such a file, and
            // always on an HTTP source.
            return match &file.source {
                SourceConfig::Http(http) => {
                    self.http_source_transfer(&http.url, http, max_size, out)
                        .await
                }
                _ => Err(CacheError::NotFound),
            };
        };
        match &file.source {
            SourceConfig::Http(http) => {
                let Some(url) = http.join_url(path) else {
                    return Err(CacheError::NotFound);
                };
                self.http_source_transfer(&url, http, max_size, out).await
            }
            SourceConfig::Filesystem(fs) => {
                let transfer = self.transfer_to(out, max_size);
                let margin = inner.config.download_disk_margin;
                (inner.filesystem)
                    .fetch(&fs.join_path(path), transfer, margin)
                    .await
            }
            SourceConfig::Sentry(sentry) => {
                let url = match file.sentry_download_url() {
                    Some(url) => url.clone(),
                    None => sentry.download_url(path),
                };
                let transfer = self.transfer_to(out, max_size);
                inner.sentry.fetch(sentry, &url, transfer).await
            }
            SourceConfig::S3(s3) => {
                let transfer = self.transfer_to(out, max_size);
                inner.s3.fetch(s3, &s3.key(path), transfer).await
            }
            SourceConfig::Gcs(gcs) => {
                let transfer = self.transfer_to(out, max_size);
                inner.gcs.fetch(gcs, &gcs.key(path), transfer).await
            }
        }
    }

    /// A file of an HTTP source at `url`, with the source's headers and certificate rule,
    /// unless the host is on the deny list.
    async fn http_source_transfer(
        &self,
        url: &Url,
        http: &HttpSourceConfig,
        max_size: u64,
        out: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let certificates = if http.accept_invalid_certs {
            Certificates::AcceptInvalid
        } else {
            Certificates::Verify
        };
        let options = HttpOptions {
            max_size,
            certificates,
        };
        let download = self.download_http(url, &http.headers, options, out);
        self.unless_denied(url, download).await
    }

    /// A transfer into `dest` of at most `max_size` bytes, and never more than the
    /// configured limit, reported to the observer.
    fn transfer_to<'a>(&self, dest: &'a mut tokio::fs::File, max_size: u64) -> Transfer<'a> {
        let max_size = max_size.min(self.inner.config.max_download_size);
        Transfer::new(
            dest,
            max_size,
            self.inner.observer.clone(),
            self.inner.in_flight.clone(),
        )
    }

    /// Runs `download` from `url` unless its host is on the deny list; the outcome counts
    /// toward blocking it. As upstream, only HTTP hosts are blocked: the other kinds are
    /// few, configured by the operator, and their failures are rarely the host's.
    async fn unless_denied(
        &self,
        url: &Url,
        download: impl Future<Output = CacheResult<u64>>,
    ) -> CacheResult<u64> {
        let Some(deny_list) = &self.inner.deny_list else {
            return download.await;
        };
        let host = url.host_str().unwrap_or_default();
        deny_list.check(host)?;
        let result = download.await;
        deny_list.record(host, &result);
        result
    }

    /// Replaces `dest` with its unpacked payload if it is compressed, within the size
    /// and ratio limits.
    async fn unpack(&self, dest: &mut NamedTempFile, max_size: u64) -> CacheResult<()> {
        let config = self.config();
        let limits = DecompressLimits {
            max_size: max_size.min(config.max_download_size),
            max_ratio: config.max_decompression_ratio,
            ratio_floor: config.decompression_ratio_floor,
        };
        let path = dest.path().to_owned();
        let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
        let unpacked =
            tokio::task::spawn_blocking(move || decompress_bounded(&path, &dir, &limits))
                .await
                .map_err(CacheError::internal)??;
        if let Some(unpacked) = unpacked {
            *dest = unpacked;
        }
        Ok(())
    }

    /// Waits for a download slot of the source of `file`. A semaphore evicted while in use
    /// only means that a few more downloads than the limit may run for a moment.
    async fn source_permit(&self, file: &RemoteFile) -> CacheResult<OwnedSemaphorePermit> {
        // A semaphore panics past its maximum; more slots than that are no limit anyway.
        let limit = self
            .inner
            .config
            .max_concurrent_downloads_per_source
            .clamp(1, Semaphore::MAX_PERMITS);
        let semaphore = self
            .inner
            .source_limits
            .get_with(file.slot_key(), || Arc::new(Semaphore::new(limit)));
        semaphore
            .acquire_owned()
            .await
            .map_err(CacheError::internal)
    }

    /// Streams `url` into `dest` (a file the caller created, e.g. a `NamedTempFile` in the
    /// cache dir), never buffering the whole body in memory. `dest` is emptied first, and
    /// again before each retry. Returns the number of bytes written. Neither a source's
    /// download slot nor the deny list applies, and nothing is unpacked: for a URL that is
    /// no source's (a crash file's `storage_url`).
    pub async fn download_http(
        &self,
        url: &Url,
        headers: &Headers,
        options: HttpOptions,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let transfer = self.transfer_to(dest, options.max_size);
        self.inner
            .http
            .fetch(url, headers, options.certificates, transfer)
            .await
    }

    /// Sentry's ids of the files `source` has for `id`, most preferred first. Answers are
    /// kept briefly per query and token, so a burst of events asks Sentry once.
    pub async fn sentry_search(
        &self,
        source: &SentrySourceConfig,
        filetypes: &[FileType],
        id: &ObjectId,
    ) -> CacheResult<Vec<String>> {
        self.inner.sentry.file_ids(source, filetypes, id).await
    }

    /// GETs `url`, an API endpoint of `source` (the JavaScript artifact lookup), with the
    /// source's token, retried and within the download timeout. The answer is bounded
    /// by `max_bytes`, and the token is only sent to the source's own origin.
    pub async fn sentry_api_get(
        &self,
        source: &SentrySourceConfig,
        url: &Url,
        max_bytes: usize,
    ) -> CacheResult<Vec<u8>> {
        self.inner.sentry.api_get(source, url, max_bytes).await
    }
}

/// A configured lifetime as the in-memory caches take it: they panic past 1,000 years,
/// and a config may say more (or `null`, which is [`FOREVER`]).
fn lifetime(configured: Duration) -> Duration {
    configured.min(FOREVER)
}

/// Builds the error for a body or payload over the size limit.
fn too_large(detail: impl std::fmt::Display) -> CacheError {
    CacheError::TooLarge(detail.to_string())
}

/// `url` as a candidate report shows it: without userinfo, and, with `redact_query`, with
/// the value of every query parameter replaced. A source's base URL is where tokens live
/// (`?token=`, a signature's `?sig=`, a function key's `?code=`), and no parameter name
/// tells a harmless value apart; the names stay, so a reader sees what was sent.
fn shown_url(url: &Url, redact_query: bool) -> String {
    let mut url = url.clone();
    // Fails only for URLs that cannot carry credentials anyway.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    if redact_query && url.query().is_some() {
        let query: Vec<String> = url
            .query_pairs()
            .map(|(name, _)| {
                let name: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
                format!("{name}=[redacted]")
            })
            .collect();
        url.set_query(Some(&query.join("&")));
    }
    url.to_string()
}

/// `url` without userinfo, query and fragment, for logs: those are where tokens live.
pub fn redact_url(url: &Url) -> String {
    let mut url = url.clone();
    // Fails only for URLs that cannot carry credentials anyway.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}
