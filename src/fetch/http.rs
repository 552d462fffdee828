//! HTTP(S) downloads, with upstream's status mapping, timeouts and retries.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{
    ACCEPT_ENCODING, CONTENT_RANGE, ETAG, HeaderMap, HeaderName, HeaderValue, IF_RANGE,
    LAST_MODIFIED, LOCATION, RANGE,
};
use reqwest::{StatusCode, redirect};
use url::Url;

use super::reserved_ip::{ReservedAddress, ReservedIps, resolve_public, url_has_reserved_ip_host};
use super::transfer::{ResumePoint, Running, Transfer, streaming_timeout, with_retries};
use super::{FetchConfig, redact_url};
use crate::error::{CacheError, CacheResult};
use crate::sources::Headers;

const MAX_REDIRECTS: usize = 10;
/// The transfer encodings a file download accepts: those whose magic bytes
/// `decompress_bounded` knows, so that the body it gets is unpacked like a compressed file.
const FILE_ENCODINGS: &str = "gzip, zstd";

/// How [`Downloader::download_http`](super::Downloader::download_http) fetches one URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// Largest body accepted, refused while it streams; `max_download_size` holds too.
    /// Files whose use is smaller than a debug file's (a crash file, a source file) say so
    /// here, so that a huge body is cut off early.
    pub max_size: u64,
    pub certificates: Certificates,
}

impl Default for HttpOptions {
    /// The configured size limit only, and valid certificates.
    fn default() -> Self {
        HttpOptions {
            max_size: u64::MAX,
            certificates: Certificates::Verify,
        }
    }
}

/// Whether a server's TLS certificate must be valid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Certificates {
    #[default]
    Verify,
    /// Only for HTTP sources that set `accept_invalid_certs`.
    AcceptInvalid,
}

/// Resolves through [`resolve_public`].
struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let allowed = resolve_public(&host).await?;
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// What to do with one redirect hop, before the hop limit is applied.
#[derive(Debug, PartialEq, Eq)]
enum Hop {
    Refuse,
    Stop,
    /// To another origin: reqwest would keep every header but a few it knows, so the
    /// answer comes back to [`HttpBackend::send_checked`], which follows it without the
    /// source's headers.
    CrossOrigin,
    Continue,
}

fn check_hop(refuse_reserved: bool, status: StatusCode, next: &Url, previous: &[Url]) -> Hop {
    // The resolver never sees IP literals, so each hop's literal is checked here.
    if refuse_reserved && url_has_reserved_ip_host(next) {
        return Hop::Refuse;
    }
    let Some(from) = previous.last() else {
        return Hop::Continue;
    };
    // Azure DevOps answers unauthenticated requests with a 302 to its login page, which
    // would otherwise be stored as the file; the 302 then maps to PermissionDenied.
    if status == StatusCode::FOUND && from.host_str() == Some("dev.azure.com") {
        return Hop::Stop;
    }
    if from.origin() != next.origin() {
        return Hop::CrossOrigin;
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
            Hop::Stop | Hop::CrossOrigin => attempt.stop(),
            Hop::Continue => limit.redirect(attempt),
        }
    })
}

/// Where `response` redirects to, if reqwest handed it back for being cross-origin.
fn cross_origin_target(response: &reqwest::Response) -> Option<Url> {
    let status = response.status();
    if !status.is_redirection() {
        return None;
    }
    let location = response.headers().get(LOCATION)?.to_str().ok()?;
    let next = response.url().join(location).ok()?;
    let hop = check_hop(false, status, &next, std::slice::from_ref(response.url()));
    (hop == Hop::CrossOrigin).then_some(next)
}

/// The headers that may follow a request to another origin: none of the source's (they
/// are its credentials), only what the download itself asks for (its encodings, and
/// the range of a resumed download, which a Sentry file's storage serves).
fn cross_origin_headers(headers: &HeaderMap) -> HeaderMap {
    [ACCEPT_ENCODING, RANGE, IF_RANGE]
        .into_iter()
        .filter_map(|name| Some((name.clone(), headers.get(&name)?.clone())))
        .collect()
}

fn build_client(
    config: &FetchConfig,
    reserved: ReservedIps,
    certificates: Certificates,
) -> anyhow::Result<reqwest::Client> {
    let refuse_reserved = reserved.refused();
    let mut builder = reqwest::Client::builder()
        .user_agent(config.user_agent.clone())
        .connect_timeout(config.connect_timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        // The referer would carry the previous URL's query (often a token) to another host.
        .referer(false)
        .tls_danger_accept_invalid_certs(certificates == Certificates::AcceptInvalid)
        .redirect(redirect_policy(refuse_reserved));
    if refuse_reserved {
        // A proxy resolves and connects to the target itself, past the filtering
        // resolver, so a proxy from the environment would reach any internal address.
        builder = builder.dns_resolver(PublicOnlyResolver).no_proxy();
    }
    Ok(builder.build()?)
}

/// The proxy variables reqwest would read, of those set in the environment.
fn proxy_variables() -> Vec<String> {
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
        .into_iter()
        .flat_map(|name| [name.to_owned(), name.to_lowercase()])
        .filter(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
        .collect()
}

/// Says once, at start, that source downloads ignore the proxy the environment names.
fn warn_about_ignored_proxy(reserved: ReservedIps) {
    let set = proxy_variables();
    if reserved.refused() && !set.is_empty() {
        tracing::warn!(
            variables = ?set,
            "source downloads ignore the proxy environment variables: a proxy would \
             connect to reserved addresses on their behalf (set connect_to_reserved_ips \
             to use the proxy)"
        );
    }
}

/// What names the version of a file so that a later request may ask for the rest of
/// it: a strong ETag (RFC 9110 lets If-Range use no weak one), else Last-Modified.
fn validator(headers: &HeaderMap) -> Option<String> {
    let etag = headers.get(ETAG).and_then(|v| v.to_str().ok());
    if let Some(etag) = etag.filter(|etag| etag.starts_with('"')) {
        return Some(etag.to_owned());
    }
    let modified = headers.get(LAST_MODIFIED)?.to_str().ok()?;
    Some(modified.to_owned())
}

/// Whether a 206 answer to a resumed request is the rest of the file on disk: its
/// Content-Range starts where the file ends and, where known, ends where the file does,
/// and an ETag it names is the file's.
fn continues(point: &ResumePoint, response: &reqwest::Response) -> bool {
    let headers = response.headers();
    if let Some(etag) = headers.get(ETAG).and_then(|v| v.to_str().ok())
        && point.validator.starts_with('"')
        && etag != point.validator
    {
        return false;
    }
    let Some(range) = headers.get(CONTENT_RANGE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some((first, last, size)) = parse_content_range(range) else {
        return false;
    };
    let whole = match (size, point.total) {
        (Some(size), Some(total)) => size == total && last.checked_add(1) == Some(size),
        (Some(size), None) => last.checked_add(1) == Some(size),
        (None, _) => true,
    };
    first == point.offset
        && whole
        && response
            .content_length()
            .is_none_or(|len| Some(len) == (last + 1).checked_sub(first))
}

/// `bytes first-last/size` (the size may be `*`).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let (unit, rest) = value.trim().split_once(' ')?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return None;
    }
    let (range, size) = rest.trim().split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last): (u64, u64) = (first.parse().ok()?, last.parse().ok()?);
    let size = match size {
        "*" => None,
        size => Some(size.parse().ok()?),
    };
    (first <= last).then_some((first, last, size))
}

/// Upstream's mapping of a non-success status.
pub(super) fn status_error(status: StatusCode) -> CacheError {
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

fn to_header_map(headers: &Headers) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value.expose()),
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

/// HTTP(S) transfers, and the requests of the backends built on HTTP (Sentry's). Cheap
/// to clone: the clients are connection pools shared by all clones.
#[derive(Clone)]
pub(super) struct HttpBackend {
    client: reqwest::Client,
    /// Only for sources configured with `accept_invalid_certs`.
    insecure_client: reqwest::Client,
    config: Arc<FetchConfig>,
    reserved: ReservedIps,
}

impl HttpBackend {
    pub fn new(config: Arc<FetchConfig>) -> anyhow::Result<Self> {
        let reserved = ReservedIps::from_config(&config);
        warn_about_ignored_proxy(reserved);
        Ok(HttpBackend {
            client: build_client(&config, reserved, Certificates::Verify)?,
            insecure_client: build_client(&config, reserved, Certificates::AcceptInvalid)?,
            reserved,
            config,
        })
    }

    /// Streams `url` into the transfer's destination, never buffering the whole body in
    /// memory; the destination is emptied before each attempt. Returns the number of bytes
    /// written.
    pub async fn fetch(
        &self,
        url: &Url,
        headers: &Headers,
        certificates: Certificates,
        transfer: Transfer<'_>,
    ) -> CacheResult<u64> {
        let client = match certificates {
            Certificates::Verify => &self.client,
            Certificates::AcceptInvalid => &self.insecure_client,
        };
        let headers = to_header_map(headers);
        let what = redact_url(url);
        with_retries!(transfer, &what, &self.config, |run| {
            self.attempt(client, url, &headers, &mut run).await
        })
    }

    async fn attempt(
        &self,
        client: &reqwest::Client,
        url: &Url,
        headers: &HeaderMap,
        run: &mut Running<'_>,
    ) -> CacheResult<u64> {
        let mut headers = headers.clone();
        // reqwest decodes nothing (its decoders have no output limit): the encoded body
        // lands as it is and is unpacked, by its magic bytes, under the size and ratio
        // limits like any compressed file. Asking for it keeps text files small on the wire.
        if !headers.contains_key(ACCEPT_ENCODING) {
            headers.insert(ACCEPT_ENCODING, HeaderValue::from_static(FILE_ENCODINGS));
        }
        let resume = run.resume_point();
        if let Some(point) = &resume {
            // If-Range: a source whose file changed since answers 200 with the new one
            // whole, rather than the rest of the new one spliced onto the old.
            let range = format!("bytes={}-", point.offset);
            headers.insert(
                RANGE,
                HeaderValue::from_str(&range).map_err(CacheError::internal)?,
            );
            match HeaderValue::from_str(&point.validator) {
                Ok(validator) => headers.insert(IF_RANGE, validator),
                Err(_) => return Err(CacheError::internal("unusable validator")),
            };
        }
        let response = self.send_checked(client, url, &headers).await?;
        let content_length = response.content_length();
        match resume {
            Some(point) if response.status() == StatusCode::PARTIAL_CONTENT => {
                if !continues(&point, &response) {
                    // Not the rest of the same file: the next attempt starts over.
                    run.discard().await?;
                    return Err(CacheError::DownloadError(
                        "the source answered a resumed download with another range".into(),
                    ));
                }
                tracing::debug!(url = %redact_url(url), offset = point.offset, "resuming");
            }
            _ => {
                if resume.is_some() {
                    run.discard().await?;
                }
                run.set_validator(validator(response.headers()));
            }
        }
        let body = response.bytes_stream().map_err(|e| self.reqwest_error(e));
        run.write_body(body, content_length, &self.config).await
    }

    /// Sends one GET with certificates checked (an API request rather than a file
    /// transfer) and returns the response if its status is a success; see
    /// [`Self::send_checked`].
    pub async fn get(&self, url: &Url, headers: &HeaderMap) -> CacheResult<reqwest::Response> {
        self.send_checked(&self.client, url, headers).await
    }

    /// Sends one GET, following redirects, and returns the response if its status is a
    /// success: the part of an attempt that the head timeout covers (per hop to another
    /// origin). A redirect to another origin is followed without `headers`. Also refuses
    /// reserved IP literals, which the filtering resolver never sees.
    async fn send_checked(
        &self,
        client: &reqwest::Client,
        url: &Url,
        headers: &HeaderMap,
    ) -> CacheResult<reqwest::Response> {
        let mut response = self.send_once(client, url, headers).await?;
        let mut hops = 0;
        while let Some(next) = cross_origin_target(&response) {
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(CacheError::DownloadError("too many redirects".to_owned()));
            }
            tracing::debug!(to = %redact_url(&next), "following a redirect to another origin without the source's headers");
            response = self
                .send_once(client, &next, &cross_origin_headers(headers))
                .await?;
        }
        let status = response.status();
        if !status.is_success() {
            tracing::debug!(url = %redact_url(response.url()), %status, "unsuccessful status");
            return Err(status_error(status));
        }
        Ok(response)
    }

    async fn send_once(
        &self,
        client: &reqwest::Client,
        url: &Url,
        headers: &HeaderMap,
    ) -> CacheResult<reqwest::Response> {
        self.reserved.check_literal(url)?;
        let request = client
            .get(url.clone())
            .headers(headers.clone())
            .build()
            .map_err(|e| self.reqwest_error(e))?;
        let head = self.config.head_timeout;
        match tokio::time::timeout(head, client.execute(request)).await {
            Err(_) => Err(CacheError::Timeout(head)),
            Ok(Err(e)) => Err(self.reqwest_error(e)),
            Ok(Ok(response)) => Ok(response),
        }
    }

    /// Reads a small answer (a search page, an API answer) into memory: at most `cap`
    /// bytes, within the streaming timeout's floor.
    pub async fn read_capped(
        &self,
        response: reqwest::Response,
        cap: usize,
    ) -> CacheResult<Vec<u8>> {
        let timeout = streaming_timeout(0, self.config.streaming_timeout);
        let read = async {
            let mut body = Vec::new();
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.reqwest_error(e))?;
                if body.len().saturating_add(chunk.len()) > cap {
                    return Err(CacheError::DownloadError(format!(
                        "answer exceeds {cap} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| CacheError::Timeout(timeout))?
    }

    /// Converts a transport error, reporting its root cause as upstream does: the outer
    /// layers only say "error sending request", and reqwest's own text embeds the URL,
    /// whose query may hold a token.
    fn reqwest_error(&self, err: reqwest::Error) -> CacheError {
        if err.is_connect() && err.is_timeout() {
            return CacheError::Timeout(self.config.connect_timeout);
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
    use std::net::SocketAddr;

    use super::*;
    use crate::fetch::reserved_ip::RESERVED_ADDRESS_MSG;

    #[test]
    fn content_ranges() {
        assert_eq!(
            parse_content_range("bytes 10-19/20"),
            Some((10, 19, Some(20)))
        );
        assert_eq!(parse_content_range("bytes 10-19/*"), Some((10, 19, None)));
        assert_eq!(parse_content_range("bytes 19-10/20"), None);
        assert_eq!(parse_content_range("items 10-19/20"), None);
        assert_eq!(parse_content_range("bytes */20"), None);
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
        assert_eq!(hop(true, "https://cdn.example.net/b"), Hop::CrossOrigin);
        assert_eq!(hop(true, "https://symbols.example.com/b"), Hop::Continue);
        assert_eq!(hop(true, "http://symbols.example.com/b"), Hop::CrossOrigin);
        assert_eq!(
            hop(true, "https://symbols.example.com:444/b"),
            Hop::CrossOrigin
        );
        assert_eq!(hop(false, "http://127.0.0.1/b"), Hop::CrossOrigin);

        let azure = [Url::parse("https://dev.azure.com/org/file.cs").unwrap()];
        let login = Url::parse("https://login.example.com/").unwrap();
        assert_eq!(
            check_hop(true, StatusCode::FOUND, &login, &azure),
            Hop::Stop
        );
        assert_eq!(
            check_hop(true, StatusCode::MOVED_PERMANENTLY, &login, &azure),
            Hop::CrossOrigin
        );
    }
}
