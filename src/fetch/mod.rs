//! Getting the raw bytes of a source file onto local disk: one backend per source kind
//! (filesystem copies; HTTP, Sentry, S3 and GCS downloads) writing into a caller-owned
//! destination file under the configured size and time limits, with bounded retries, a
//! concurrency limit per source, and refusal of reserved IP ranges unless
//! `connect_to_reserved_ips` is set; listing what a source has for an object (Sentry's
//! search; the directory layouts for the others); and decompression of the downloaded
//! payload (gzip, zstd, zlib, zip, CAB, xz, bzip2) into a temp file. A file is named by
//! a location on a source or by a whole URL (`RemoteFile`). Credentials never reach logs or errors. Errors
//! are reported as [`CacheError`] so callers can store them as negative cache entries.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use crate::error::{CacheError, CacheResult};
use crate::units::FOREVER;

mod decompress;
mod deny_list;
mod filesystem;
mod gcs;
mod http;
mod progress;
mod remote;
mod reserved_ip;
mod s3;
mod sentry;
#[cfg(test)]
mod tests;
mod transfer;

pub use decompress::{DecompressLimits, decompress_bounded, decompress_file};
pub use deny_list::DenyListConfig;
pub(crate) use gcs::{
    GcsAccess, build_gcs_client, gcs_bucket, gcs_credentials, gcs_key_file_credentials,
};
pub use progress::{DownloadObserver, DownloadOutcome, DownloadState};
pub use remote::{RemoteFile, fetch_file};
pub(crate) use s3::{build_client as build_s3_client, http_client as s3_http_client};
pub use transfer::record_download;

/// Limits and identity for outgoing fetches. Field names follow upstream's config keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchConfig {
    /// Time allowed for establishing one TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Time allowed from sending a request until its response headers arrive.
    pub head_timeout: Duration,
    /// Time allowed per GiB of body when the size is announced (never below 10s).
    pub streaming_timeout: Duration,
    /// Upper bound for one whole download, retries included.
    pub max_download_timeout: Duration,
    /// Largest body, and largest decompressed payload, accepted; `u64::MAX` means no limit.
    pub max_download_size: u64,
    /// Largest decompressed/compressed size ratio of a downloaded file; `u64::MAX` means
    /// no limit. Payloads up to `decompression_ratio_floor` bytes are exempt.
    pub max_decompression_ratio: u64,
    pub decompression_ratio_floor: u64,
    /// Whether sources may point at loopback, private and other reserved addresses.
    pub connect_to_reserved_ips: bool,
    /// Whether S3 and GCS sources without credentials that a request names (rather than
    /// the config file) are read with the server's own cloud credentials.
    pub server_credentials_for_request_sources: bool,
    pub user_agent: String,
    /// Downloads from one source (by its whole configuration) running at once; more wait
    /// their turn.
    pub max_concurrent_downloads_per_source: usize,
    /// Sentry search answers kept, how many bytes they may hold together, and for how
    /// long.
    pub sentry_index_capacity: u64,
    pub sentry_index_max_bytes: u64,
    pub sentry_index_ttl: Duration,
    /// Bytes of `000Admin` index segments read for one symstore; a bigger index is not
    /// used (every path is tried instead).
    pub max_symstore_index_size: u64,
    /// S3 clients (one per region, endpoint and credentials) kept.
    pub s3_client_capacity: u64,
    /// GCS clients (one per credentials, endpoint and access) kept; each holds its
    /// credentials' OAuth token, so this bounds the tokens kept too.
    pub gcs_token_capacity: u64,
    /// When an HTTP host that keeps failing is left alone for a while.
    pub deny_list: DenyListConfig,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            // Upstream's defaults.
            connect_timeout: Duration::from_secs(5),
            head_timeout: Duration::from_secs(10),
            // Lets a 4 MB/s connection download 1 GB.
            streaming_timeout: Duration::from_secs(250),
            max_download_timeout: Duration::from_secs(300),
            // Upstream's: real debug files reach several GiB, none 15.
            max_download_size: 15 * 1024 * 1024 * 1024,
            // Debug files compress 3-5 times, text (Breakpad, source maps, sources) 5-10
            // times, small PDBs of mostly empty pages about 20 times; gzip cannot exceed
            // about 1,000 times, while zstd, xz and bzip2 bombs reach a million. 200 leaves
            // real files a wide margin and stops a bomb after writing 200 times its size.
            max_decompression_ratio: 200,
            // A small file of mostly zeros may exceed the ratio; below this size its
            // payload costs nothing worth refusing it for.
            decompression_ratio_floor: 64 * 1024 * 1024,
            connect_to_reserved_ips: false,
            server_credentials_for_request_sources: false,
            user_agent: concat!("omnisym/", env!("CARGO_PKG_VERSION")).to_owned(),
            max_concurrent_downloads_per_source: 32,
            // Upstream's defaults.
            sentry_index_capacity: 100_000,
            // An answer names a few files in some hundred bytes: room for the 100,000
            // answers, and a bound when a hostile endpoint makes them big.
            sentry_index_max_bytes: 64 * 1024 * 1024,
            sentry_index_ttl: Duration::from_secs(3600),
            // A segment line is about 100 bytes: two million files, more than stores
            // that publish an index hold, in memory only while it loads.
            max_symstore_index_size: 256 * 1024 * 1024,
            s3_client_capacity: 100,
            gcs_token_capacity: 100,
            deny_list: DenyListConfig::default(),
        }
    }
}

/// Fetches source files. Cheap to clone: all clones share one set of connection pools.
#[derive(Debug, Clone)]
pub struct Downloader {
    inner: Arc<Inner>,
}

struct Inner {
    config: FetchConfig,
    client: reqwest::Client,
    /// Only for sources configured with `accept_invalid_certs`.
    insecure_client: reqwest::Client,
    /// Keyed by [`RemoteFile::slot_key`]: a source's whole configuration, not its id.
    source_limits: moka::sync::Cache<[u8; 32], Arc<Semaphore>>,
    deny_list: Option<deny_list::HostDenyList>,
    sentry_index: sentry::SentryIndex,
    s3_http: aws_sdk_s3::config::SharedHttpClient,
    s3_clients: s3::S3Clients,
    gcs_clients: gcs::GcsClients,
    gcs_emulator: Option<Url>,
    observer: Option<Arc<dyn DownloadObserver>>,
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
        http::warn_about_ignored_proxy(&config);
        let client = http::build_client(&config, false)?;
        let insecure_client = http::build_client(&config, true)?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                insecure_client,
                deny_list: deny_list::HostDenyList::new(&config.deny_list),
                source_limits: moka::sync::Cache::builder()
                    .max_capacity(MAX_TRACKED_SOURCES)
                    .time_to_idle(Duration::from_secs(600))
                    .build(),
                sentry_index: sentry::new_index(
                    config.sentry_index_capacity,
                    config.sentry_index_ttl,
                    config.sentry_index_max_bytes,
                ),
                s3_http: s3::http_client(&config),
                s3_clients: moka::future::Cache::new(config.s3_client_capacity),
                // A client keeps refreshing its token while it lives, and keeps a
                // credential's lasting failure: neither should outlive its use for long.
                gcs_clients: moka::future::Cache::builder()
                    .max_capacity(config.gcs_token_capacity)
                    .time_to_idle(Duration::from_secs(3600))
                    .build(),
                gcs_emulator: gcs::emulator_from_env(),
                observer,
                config,
            }),
        })
    }

    pub fn config(&self) -> &FetchConfig {
        &self.inner.config
    }

    /// Whether a bucket source without credentials of its own may be read with the
    /// server's: any client can name a source, and the server's credentials reach what
    /// the operator's do, so only sources of the config file get them unless configured.
    fn may_use_server_credentials(&self, from_config_file: bool) -> bool {
        from_config_file || self.inner.config.server_credentials_for_request_sources
    }

    /// The emulator named by `STORAGE_EMULATOR_HOST`, if any.
    pub(crate) fn gcs_emulator(&self) -> Option<&Url> {
        self.inner.gcs_emulator.as_ref()
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
