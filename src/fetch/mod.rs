//! Getting the raw bytes of a source file onto local disk: HTTP downloads and local
//! filesystem copies into a caller-owned destination file, under the configured size and
//! time limits, refusing reserved IP ranges unless `connect_to_reserved_ips` is set; and
//! decompression of the downloaded payload (gzip, zstd, zlib, zip, CAB) into a temp file;
//! and the `000Admin` indexes of symstore sources (`index`).
//! Errors are reported as [`CacheError`] so callers can store them as negative cache entries.

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::cache::CacheError;

mod decompress;
mod filesystem;
mod http;
mod index;
mod remote;
mod reserved_ip;
#[cfg(test)]
mod tests;

pub use decompress::decompress_file;
pub use index::SymstoreIndexes;
pub use remote::{RemoteFile, fetch_file};
pub use reserved_ip::is_reserved_ip;

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
    /// Whether sources may point at loopback, private and other reserved addresses.
    pub connect_to_reserved_ips: bool,
    pub user_agent: String,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            head_timeout: Duration::from_secs(5),
            // Lets a 4 MB/s connection download 1 GB.
            streaming_timeout: Duration::from_secs(250),
            max_download_timeout: Duration::from_secs(300),
            // Upstream has no limit unless one is configured.
            max_download_size: u64::MAX,
            connect_to_reserved_ips: false,
            user_agent: concat!("omnisym/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// Fetches source files. Cheap to clone: all clones share one set of connection pools.
#[derive(Debug, Clone)]
pub struct Downloader {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: FetchConfig,
    client: reqwest::Client,
    /// Only for sources configured with `accept_invalid_certs`.
    insecure_client: reqwest::Client,
}

impl Downloader {
    pub fn new(config: FetchConfig) -> anyhow::Result<Self> {
        let client = http::build_client(&config, false)?;
        let insecure_client = http::build_client(&config, true)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                client,
                insecure_client,
            }),
        })
    }

    pub fn config(&self) -> &FetchConfig {
        &self.inner.config
    }
}

/// Builds the error for a body or payload over the size limit.
fn too_large(detail: impl std::fmt::Display) -> CacheError {
    CacheError::TooLarge(detail.to_string())
}

/// Whether `err` reports a file over `max_download_size`, as opposed to a transfer failure.
pub fn is_too_large(err: &CacheError) -> bool {
    matches!(err, CacheError::TooLarge(_))
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
