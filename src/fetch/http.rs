//! HTTP(S) downloads, with upstream's status mapping, timeouts and retries.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, redirect};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use url::Url;

use super::reserved_ip::{is_reserved_ip, url_has_reserved_ip_host};
use super::{Downloader, FetchConfig, redact_url, too_large};
use crate::cache::{CacheError, CacheResult};

const MAX_REDIRECTS: usize = 10;
const MAX_TRIES: u32 = 3;
const RETRY_DELAY: Duration = Duration::from_millis(20);
/// Floor of the size-scaled streaming timeout, so small files are not cut off by latency.
const MIN_STREAMING_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection was refused; surfaces as the root cause of the reqwest error.
#[derive(Debug)]
struct ReservedAddress;

const RESERVED_ADDRESS_MSG: &str = "refusing to connect to a reserved IP address";

impl fmt::Display for ReservedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(RESERVED_ADDRESS_MSG)
    }
}

impl StdError for ReservedAddress {}

/// Resolves with the system resolver and drops reserved addresses, so a public name
/// pointing at an internal address (or rebinding to one) cannot be used to reach it.
struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                resolved.partition(|addr| !is_reserved_ip(addr.ip()));
            if !refused.is_empty() {
                tracing::debug!(%host, ?refused, "dropped reserved addresses from resolution");
            }
            if allowed.is_empty() {
                return Err(Box::new(ReservedAddress) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// What to do with one redirect hop, before the hop limit is applied.
#[derive(Debug, PartialEq, Eq)]
enum Hop {
    Refuse,
    Stop,
    Continue,
}

fn check_hop(refuse_reserved: bool, status: StatusCode, next: &Url, previous: &[Url]) -> Hop {
    // The resolver never sees IP literals, so each hop's literal is checked here.
    if refuse_reserved && url_has_reserved_ip_host(next) {
        return Hop::Refuse;
    }
    // Azure DevOps answers unauthenticated requests with a 302 to its login page, which
    // would otherwise be stored as the file; the 302 then maps to PermissionDenied.
    if status == StatusCode::FOUND
        && previous
            .last()
            .and_then(|url| url.host_str())
            .is_some_and(|host| host == "dev.azure.com")
    {
        return Hop::Stop;
    }
    Hop::Continue
}

fn redirect_policy(refuse_reserved: bool) -> redirect::Policy {
    let limit = redirect::Policy::limited(MAX_REDIRECTS);
    redirect::Policy::custom(move |attempt| {
        match check_hop(
            refuse_reserved,
            attempt.status(),
            attempt.url(),
            attempt.previous(),
        ) {
            Hop::Refuse => attempt.error(ReservedAddress),
            Hop::Stop => attempt.stop(),
            Hop::Continue => limit.redirect(attempt),
        }
    })
}

pub(super) fn build_client(
    config: &FetchConfig,
    accept_invalid_certs: bool,
) -> anyhow::Result<reqwest::Client> {
    let refuse_reserved = !config.connect_to_reserved_ips;
    let mut builder = reqwest::Client::builder()
        .user_agent(config.user_agent.clone())
        .connect_timeout(config.connect_timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .gzip(true)
        .zstd(true)
        // The referer would carry the previous URL's query (often a token) to another host.
        .referer(false)
        .tls_danger_accept_invalid_certs(accept_invalid_certs)
        .redirect(redirect_policy(refuse_reserved));
    if refuse_reserved {
        builder = builder.dns_resolver(PublicOnlyResolver);
    }
    Ok(builder.build()?)
}

/// Per-attempt body timeout for a body of `content_length` bytes, as upstream scales it.
pub(super) fn streaming_timeout(content_length: u64, per_gb: Duration) -> Duration {
    let gb = content_length as f64 / (1024.0 * 1024.0 * 1024.0);
    Duration::try_from_secs_f64(per_gb.as_secs_f64() * gb)
        .unwrap_or(Duration::MAX)
        .max(MIN_STREAMING_TIMEOUT)
}

/// Upstream's mapping of a non-success status.
fn status_error(status: StatusCode) -> CacheError {
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        CacheError::PermissionDenied(status.to_string())
    } else if status.is_client_error() {
        // Symbol servers answer missing files with all sorts of 4xx.
        CacheError::NotFound
    } else if status == StatusCode::FOUND {
        CacheError::PermissionDenied("Potential login page detected".to_owned())
    } else {
        CacheError::DownloadError(status.to_string())
    }
}

/// Whether another attempt could plausibly succeed. Upstream retries everything but
/// not-found and permission errors; size and reserved-address refusals are deterministic
/// too, and a local write failure will not heal in 20ms.
fn is_retryable(err: &CacheError) -> bool {
    match err {
        CacheError::Timeout(_) => true,
        CacheError::DownloadError(msg) => msg != RESERVED_ADDRESS_MSG,
        _ => false,
    }
}

fn to_header_map(headers: &BTreeMap<String, String>) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(mut value)) => {
                // Keeps credentials out of reqwest's Debug output.
                value.set_sensitive(true);
                map.insert(name, value);
            }
            // The value is deliberately not logged: source headers carry credentials.
            _ => tracing::warn!(header = %name, "skipping invalid source header"),
        }
    }
    map
}

impl Downloader {
    /// Streams `url` into `dest` (a file the caller created, e.g. a `NamedTempFile` in the
    /// cache dir), never buffering the whole body in memory. `dest` is truncated first, and
    /// again before each retry. Returns the number of bytes written.
    pub async fn download_http(
        &self,
        url: &Url,
        headers: &BTreeMap<String, String>,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        self.download_http_with(url, headers, false, dest).await
    }

    /// [`Self::download_http`] for sources that set `accept_invalid_certs`.
    pub async fn download_http_with(
        &self,
        url: &Url,
        headers: &BTreeMap<String, String>,
        accept_invalid_certs: bool,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let config = &self.inner.config;
        let client = if accept_invalid_certs {
            &self.inner.insecure_client
        } else {
            &self.inner.client
        };
        let headers = to_header_map(headers);
        let max = config.max_download_timeout;
        let result =
            match tokio::time::timeout(max, self.retry_http(client, url, &headers, dest)).await {
                Ok(result) => result,
                Err(_) => Err(CacheError::Timeout(max)),
            };
        match &result {
            Ok(bytes) => tracing::debug!(url = %redact_url(url), bytes, "downloaded"),
            Err(err) => tracing::debug!(url = %redact_url(url), error = %err, "download failed"),
        }
        result
    }

    async fn retry_http(
        &self,
        client: &reqwest::Client,
        url: &Url,
        headers: &HeaderMap,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let mut tries = 0;
        loop {
            tries += 1;
            // A failed attempt leaves a partial body behind.
            dest.rewind().await.map_err(CacheError::internal)?;
            dest.set_len(0).await.map_err(CacheError::internal)?;
            let result = self.attempt_http(client, url, headers, dest).await;
            match &result {
                Err(err) if tries < MAX_TRIES && is_retryable(err) => {
                    tracing::debug!(url = %redact_url(url), error = %err, tries, "retrying download");
                    tokio::time::sleep(RETRY_DELAY).await;
                }
                _ => return result,
            }
        }
    }

    async fn attempt_http(
        &self,
        client: &reqwest::Client,
        url: &Url,
        headers: &HeaderMap,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let config = &self.inner.config;
        if !config.connect_to_reserved_ips && url_has_reserved_ip_host(url) {
            return Err(CacheError::DownloadError(RESERVED_ADDRESS_MSG.to_owned()));
        }
        let request = client
            .get(url.clone())
            .headers(headers.clone())
            .build()
            .map_err(|e| self.reqwest_error(e))?;

        let head = config.head_timeout;
        let mut response = match tokio::time::timeout(head, client.execute(request)).await {
            Err(_) => return Err(CacheError::Timeout(head)),
            Ok(Err(e)) => return Err(self.reqwest_error(e)),
            Ok(Ok(response)) => response,
        };

        let status = response.status();
        if !status.is_success() {
            tracing::debug!(url = %redact_url(url), %status, "unsuccessful status");
            return Err(status_error(status));
        }

        let max_size = config.max_download_size;
        let content_length = response.content_length();
        if let Some(len) = content_length
            && len > max_size
        {
            return Err(too_large(format!(
                "Content-Length {len} exceeds the limit of {max_size} bytes"
            )));
        }

        let body = async {
            let mut written: u64 = 0;
            while let Some(chunk) = response.chunk().await.map_err(|e| self.reqwest_error(e))? {
                written += chunk.len() as u64;
                if written > max_size {
                    return Err(too_large(format!(
                        "body exceeds the limit of {max_size} bytes"
                    )));
                }
                dest.write_all(&chunk).await.map_err(CacheError::internal)?;
            }
            dest.flush().await.map_err(CacheError::internal)?;
            Ok(written)
        };

        // Without a known size only the overall download timeout bounds the body, as upstream.
        match content_length {
            Some(len) => {
                let timeout = streaming_timeout(len, config.streaming_timeout);
                tokio::time::timeout(timeout, body)
                    .await
                    .map_err(|_| CacheError::Timeout(timeout))?
            }
            None => body.await,
        }
    }

    /// Converts a transport error, reporting its root cause as upstream does: the outer
    /// layers only say "error sending request", and reqwest's own text embeds the URL,
    /// whose query may hold a token.
    fn reqwest_error(&self, err: reqwest::Error) -> CacheError {
        if err.is_connect() && err.is_timeout() {
            return CacheError::Timeout(self.inner.config.connect_timeout);
        }
        let err = err.without_url();
        let mut root: &dyn StdError = &err;
        while let Some(source) = root.source() {
            root = source;
        }
        CacheError::DownloadError(root.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_timeout_scales_with_size() {
        let per_gb = Duration::from_secs(30);
        let gb = 1024 * 1024 * 1024;
        assert_eq!(streaming_timeout(100, per_gb), MIN_STREAMING_TIMEOUT);
        assert_eq!(streaming_timeout(gb / 2, per_gb), per_gb / 2);
        assert_eq!(streaming_timeout(gb, per_gb), per_gb);
        assert_eq!(streaming_timeout(gb * 3 / 2, per_gb), per_gb.mul_f64(1.5));
        // Must not panic on absurd sizes or settings.
        assert_eq!(streaming_timeout(u64::MAX, Duration::MAX), Duration::MAX);
    }

    #[test]
    fn status_mapping() {
        assert_eq!(status_error(StatusCode::NOT_FOUND), CacheError::NotFound);
        assert_eq!(status_error(StatusCode::GONE), CacheError::NotFound);
        assert_eq!(
            status_error(StatusCode::UNAUTHORIZED),
            CacheError::PermissionDenied("401 Unauthorized".into())
        );
        assert_eq!(
            status_error(StatusCode::FORBIDDEN),
            CacheError::PermissionDenied("403 Forbidden".into())
        );
        assert_eq!(
            status_error(StatusCode::FOUND),
            CacheError::PermissionDenied("Potential login page detected".into())
        );
        assert_eq!(
            status_error(StatusCode::BAD_GATEWAY),
            CacheError::DownloadError("502 Bad Gateway".into())
        );
    }

    #[tokio::test]
    async fn resolver_drops_reserved_addresses() {
        // Numeric names resolve without any DNS traffic.
        let resolve = |name: &str| PublicOnlyResolver.resolve(name.parse().unwrap());
        let addrs: Vec<SocketAddr> = resolve("8.8.8.8").await.unwrap().collect();
        assert_eq!(addrs, vec!["8.8.8.8:0".parse().unwrap()]);
        let err = resolve("127.0.0.1").await.err().unwrap();
        assert_eq!(err.to_string(), RESERVED_ADDRESS_MSG);
        let err = resolve("::ffff:10.0.0.1").await.err().unwrap();
        assert_eq!(err.to_string(), RESERVED_ADDRESS_MSG);
    }

    #[test]
    fn redirect_hops_are_rechecked() {
        // Every server a test can run is on loopback, so a redirect from an allowed host
        // to a reserved one can only be exercised through the hop check.
        let prev = [Url::parse("https://symbols.example.com/a").unwrap()];
        let hop = |refuse: bool, next: &str| {
            check_hop(
                refuse,
                StatusCode::MOVED_PERMANENTLY,
                &Url::parse(next).unwrap(),
                &prev,
            )
        };
        assert_eq!(hop(true, "http://127.0.0.1/b"), Hop::Refuse);
        assert_eq!(hop(true, "http://[::ffff:a9fe:a9fe]/latest"), Hop::Refuse);
        assert_eq!(hop(true, "http://169.254.169.254/latest"), Hop::Refuse);
        assert_eq!(hop(true, "https://cdn.example.net/b"), Hop::Continue);
        assert_eq!(hop(false, "http://127.0.0.1/b"), Hop::Continue);

        let azure = [Url::parse("https://dev.azure.com/org/file.cs").unwrap()];
        let login = Url::parse("https://login.example.com/").unwrap();
        assert_eq!(
            check_hop(true, StatusCode::FOUND, &login, &azure),
            Hop::Stop
        );
        assert_eq!(
            check_hop(true, StatusCode::MOVED_PERMANENTLY, &login, &azure),
            Hop::Continue
        );
    }
}
