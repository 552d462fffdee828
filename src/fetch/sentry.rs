//! Sentry sources: the debug-file search (paginated, its answers cached briefly per query
//! and token so a burst of events asks Sentry once) and downloads by Sentry file id.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, LINK};
use url::Url;

use super::http::{Certificates, HttpBackend};
use super::transfer::{Transfer, retrying, within_download_timeout};
use super::{FetchConfig, lifetime, redact_url};
use crate::error::{CacheError, CacheResult};
use crate::sources::{
    FileType, ObjectId, Secret, SentryFileInfo, SentrySourceConfig, next_page, parse_search_answer,
};

/// Sentry pages by 20 files at most; this many pages is more debug files than any one
/// module has, and stops a server that never ends its `Link` chain.
const MAX_PAGES: usize = 50;
/// All pages of one search together: a page of 20 files is a few KiB of JSON, so this is
/// far more than any answer, and bounds what a hostile server can make one search hold.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// Search answers per (search URL, token), so two projects with the same URL but different
/// tokens never see each other's files.
type SentryIndex = moka::future::Cache<(Url, Secret), Arc<[SentryFileInfo]>>;

/// At most `capacity` answers, together at most `max_bytes`: each answer weighs its
/// bytes, and never less than an even share of the budget, which bounds the count.
fn new_index(capacity: u64, ttl: Duration, max_bytes: u64) -> SentryIndex {
    let share = max_bytes.div_ceil(capacity.max(1)).max(1);
    moka::future::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(move |key: &(Url, Secret), files: &Arc<[SentryFileInfo]>| {
            let bytes = answer_bytes(key, files).max(share);
            u32::try_from(bytes).unwrap_or(u32::MAX)
        })
        .time_to_live(lifetime(ttl))
        .build()
}

/// What one cached answer holds in memory, roughly.
fn answer_bytes((url, token): &(Url, Secret), files: &[SentryFileInfo]) -> u64 {
    let entry = std::mem::size_of::<SentryFileInfo>();
    let ids: usize = files
        .iter()
        .map(|file| entry.saturating_add(file.id.len()))
        .sum();
    let key = url.as_str().len().saturating_add(token.expose().len());
    u64::try_from(ids.saturating_add(key)).unwrap_or(u64::MAX)
}

fn bearer(token: &Secret) -> String {
    format!("Bearer {}", token.expose())
}

/// The source's token as a header that never prints.
fn auth_headers(source: &SentrySourceConfig) -> CacheResult<HeaderMap> {
    let mut auth = HeaderValue::from_str(&bearer(&source.token)).map_err(|_| {
        CacheError::PermissionDenied("the Sentry token is not a valid header value".into())
    })?;
    auth.set_sensitive(true);
    Ok(HeaderMap::from_iter([(AUTHORIZATION, auth)]))
}

/// Sentry sources: the search, whose answers are kept, and downloads and API requests
/// over the HTTP backend's clients with the source's token.
pub(super) struct SentryBackend {
    http: HttpBackend,
    index: SentryIndex,
    config: Arc<FetchConfig>,
}

impl SentryBackend {
    pub fn new(http: HttpBackend, config: Arc<FetchConfig>) -> Self {
        SentryBackend {
            http,
            index: new_index(
                config.sentry_index_capacity,
                config.sentry_index_ttl,
                config.sentry_index_max_bytes,
            ),
            config,
        }
    }

    /// Sentry's ids of the files `source` has for `id`. Failures are not cached, so the
    /// next request asks again.
    pub async fn file_ids(
        &self,
        source: &SentrySourceConfig,
        filetypes: &[FileType],
        id: &ObjectId,
    ) -> CacheResult<Vec<String>> {
        let Some(url) = source.search_url(id, filetypes) else {
            return Ok(Vec::new());
        };
        let key = (url.clone(), source.token.clone());
        let files = self
            .index
            .try_get_with(key, self.search(source, url))
            .await
            .map_err(|err| (*err).clone())?;
        Ok(files.iter().map(|file| file.id.clone()).collect())
    }

    async fn search(
        &self,
        source: &SentrySourceConfig,
        url: Url,
    ) -> CacheResult<Arc<[SentryFileInfo]>> {
        let headers = auth_headers(source)?;
        let mut files = Vec::new();
        let mut next = Some(url);
        let mut pages = 0;
        let mut left = MAX_ANSWER_BYTES;
        while let Some(page) = next.take() {
            pages += 1;
            let what = redact_url(&page);
            let fetch_page = async { retrying!(&what, self.page(&page, &headers, left).await) };
            let (mut batch, link, bytes) =
                within_download_timeout(&self.config, fetch_page).await?;
            left = left.saturating_sub(bytes);
            files.append(&mut batch);
            next = link
                .and_then(|link| page.join(&link).ok())
                .filter(|next| source.same_origin(next));
            if next.is_some() && pages >= MAX_PAGES {
                tracing::warn!(source = %source.id, pages, "Sentry search still paginating; using what was found");
                break;
            }
        }
        tracing::debug!(source = %source.id, files = files.len(), pages, "Sentry search done");
        Ok(files.into())
    }

    /// One page of search results of at most `max_bytes`, the link to the next one, and
    /// the page's size.
    async fn page(
        &self,
        url: &Url,
        headers: &HeaderMap,
        max_bytes: usize,
    ) -> CacheResult<(Vec<SentryFileInfo>, Option<String>, usize)> {
        let response = self.http.get(url, headers).await?;
        let link = response
            .headers()
            .get(LINK)
            .and_then(|value| value.to_str().ok())
            .and_then(next_page)
            .map(str::to_owned);
        let body = self.http.read_capped(response, max_bytes).await?;
        let files = parse_search_answer(&body).map_err(|err| {
            CacheError::DownloadError(format!("invalid Sentry search answer: {err}"))
        })?;
        Ok((files, link, body.len()))
    }

    /// Downloads a file of `source` from `url`. The endpoint usually redirects to
    /// storage; the token follows only same-host redirects (reqwest drops it otherwise),
    /// and is only sent at all to the source's own origin.
    pub async fn fetch(
        &self,
        source: &SentrySourceConfig,
        url: &Url,
        transfer: Transfer<'_>,
    ) -> CacheResult<u64> {
        let mut headers = BTreeMap::new();
        if source.same_origin(url) {
            headers.insert(
                "Authorization".to_owned(),
                Secret::new(bearer(&source.token)),
            );
        }
        self.http
            .fetch(url, &headers, Certificates::Verify, transfer)
            .await
    }

    /// GETs `url`, an API endpoint of `source` (the JavaScript artifact lookup), with the
    /// source's token, retried and within the download timeout. The answer is bounded
    /// by `max_bytes`, and the token is only sent to the source's own origin.
    pub async fn api_get(
        &self,
        source: &SentrySourceConfig,
        url: &Url,
        max_bytes: usize,
    ) -> CacheResult<Vec<u8>> {
        let headers = if source.same_origin(url) {
            auth_headers(source)?
        } else {
            HeaderMap::new()
        };
        let what = redact_url(url);
        let fetch = async { retrying!(&what, self.api_attempt(url, &headers, max_bytes).await) };
        within_download_timeout(&self.config, fetch).await
    }

    async fn api_attempt(
        &self,
        url: &Url,
        headers: &HeaderMap,
        max_bytes: usize,
    ) -> CacheResult<Vec<u8>> {
        let response = self.http.get(url, headers).await?;
        self.http.read_capped(response, max_bytes).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::Router;
    use axum::extract::Query;
    use axum::response::IntoResponse;
    use axum::routing::get;

    use super::*;
    use crate::fetch::Downloader;
    use crate::sources::SourceConfig;

    fn answer(files: usize) -> Arc<[SentryFileInfo]> {
        (0..files)
            .map(|n| SentryFileInfo { id: n.to_string() })
            .collect()
    }

    fn key(n: u32) -> (Url, Secret) {
        let url = Url::parse(&format!("https://sentry.example/search?debug_id={n}")).unwrap();
        (url, Secret::new("token"))
    }

    #[tokio::test]
    async fn kept_answers_are_bounded_in_bytes_and_in_count() {
        let by_bytes = new_index(1000, Duration::from_secs(60), 16 * 1024);
        by_bytes.insert(key(1), answer(2)).await;
        by_bytes.insert(key(2), answer(10_000)).await;
        by_bytes.run_pending_tasks().await;
        assert!(by_bytes.contains_key(&key(1)));
        assert!(
            !by_bytes.contains_key(&key(2)),
            "an answer over the budget stays"
        );

        let by_count = new_index(2, Duration::from_secs(60), 64 * 1024 * 1024);
        for n in 0..10 {
            by_count.insert(key(n), answer(1)).await;
            by_count.run_pending_tasks().await;
        }
        assert!(by_count.entry_count() <= 2, "{}", by_count.entry_count());
    }

    /// Search pages of 1 MiB each, linked nine deep.
    async fn start_big_search() -> std::net::SocketAddr {
        let page = |Query(query): Query<BTreeMap<String, String>>| async move {
            let page: u32 = query.get("page").and_then(|p| p.parse().ok()).unwrap_or(0);
            let files: Vec<_> = (0..80_000)
                .map(|n| serde_json::json!({"id": format!("{page}-{n}")}))
                .collect();
            let link = format!(
                r#"</search?page={}>; rel="next"; results="{}""#,
                page + 1,
                page < 8
            );
            ([("link", link)], serde_json::to_vec(&files).unwrap()).into_response()
        };
        let app = Router::new().route("/search", get(page));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    #[tokio::test]
    async fn a_search_answer_is_bounded_in_bytes_across_its_pages() {
        let addr = start_big_search().await;
        let downloader = Downloader::new(FetchConfig {
            connect_to_reserved_ips: true,
            ..FetchConfig::default()
        })
        .unwrap();
        let json = serde_json::json!({"type": "sentry", "id": "s", "token": "t",
                                      "url": format!("http://{addr}/search")});
        let SourceConfig::Sentry(source) = serde_json::from_value(json).unwrap() else {
            panic!("not a Sentry source")
        };
        let id = ObjectId {
            debug_id: Some("d96fdc6c-1668-6d8a-e479-531b3d99327b".parse().unwrap()),
            ..ObjectId::default()
        };
        let result = downloader.sentry_search(&source, &[], &id).await;
        assert!(
            matches!(&result, Err(CacheError::DownloadError(msg)) if msg.contains("exceeds")),
            "{:?}",
            result.map(|ids| ids.len())
        );
    }
}
