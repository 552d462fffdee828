//! The fetch section of the config: limits, identity and the per-process caches' bounds.

use std::time::Duration;

use super::deny_list::DenyListConfig;
use crate::units::FOREVER;

/// Limits and identity for outgoing fetches. Field names follow upstream's config keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchConfig {
    /// Time allowed for establishing one TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Time allowed from sending a request until its response headers arrive.
    pub head_timeout: Duration,
    /// Time allowed per GiB of body when the size is announced (never below 10s);
    /// [`FOREVER`] (the default, unlike upstream's 250 s) sets no such limit.
    pub streaming_timeout: Duration,
    /// Upper bound for one whole download, retries included; [`FOREVER`] (the default,
    /// unlike upstream's 5 min) sets none, so a large file on a slow link is not cut off.
    pub max_download_timeout: Duration,
    /// A body that brings no byte for this long fails (and is retried, resuming where
    /// the source allows it). What bounds a download when the limits above are off.
    pub max_download_stall: Duration,
    /// Free space a download leaves on the cache's disk: a file whose announced size
    /// would eat into it is refused before its first byte. At most a 20th of the disk
    /// is kept free, so that a small cache disk still takes files.
    pub download_disk_margin: u64,
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
            // Upstream's 250 s per GiB and 5 min cut off any file that a link under
            // 4 MB/s cannot bring in time; the stall timeout stops a dead transfer
            // instead, whatever the file's size.
            streaming_timeout: FOREVER,
            max_download_timeout: FOREVER,
            // Long enough for a congested link or a server that pauses to read a big
            // file from cold storage; short enough that a dead one is retried soon.
            max_download_stall: Duration::from_secs(60),
            // Room for what is derived from the file (its SymCache, CFI) and for other
            // writers; a download that would leave less fails with a clear error rather
            // than filling the disk.
            download_disk_margin: 1024 * 1024 * 1024,
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

impl FetchConfig {
    /// Whether a bucket source without credentials of its own may be read with the
    /// server's: any client can name a source, and the server's credentials reach what
    /// the operator's do, so only sources of the config file get them unless configured.
    pub(super) fn may_use_server_credentials(&self, from_config_file: bool) -> bool {
        from_config_file || self.server_credentials_for_request_sources
    }
}
