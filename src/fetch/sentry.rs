//! Sentry sources: the debug-file search (paginated, its answers cached briefly per query
//! and token so a burst of events asks Sentry once) and downloads by Sentry file id.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, LINK};
use url::Url;

use super::transfer::{read_capped, retrying, within_download_timeout};
use super::{Downloader, redact_url};
use crate::error::{CacheError, CacheResult};
use crate::sources::{
    FileType, ObjectId, Secret, SentryFileInfo, SentrySourceConfig, next_page, parse_search_answer,
};

/// Sentry pages by 20 files at most; this many pages is more debug files than any one
/// module has, and stops a server that never ends its `Link` chain.
const MAX_PAGES: usize = 50;
/// A search page is a small JSON list; anything much bigger is not an answer to parse.
const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// Search answers per (search URL, token), so two projects with the same URL but different
/// tokens never see each other's files.
pub(super) type SentryIndex = moka::future::Cache<(Url, Secret), Arc<[SentryFileInfo]>>;

pub(super) fn new_index(capacity: u64, ttl: Duration) -> SentryIndex {
    moka::future::Cache::builder()
        .max_capacity(capacity)
        .time_to_live(ttl)
        .build()
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

impl Downloader {
    /// Sentry's ids of the files `source` has for `id`. Failures are not cached, so the
    /// next request asks again.
    pub(super) async fn sentry_file_ids(
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
            .inner
            .sentry_index
            .try_get_with(key, self.sentry_search(source, url))
            .await
            .map_err(|err| (*err).clone())?;
        Ok(files.iter().map(|file| file.id.clone()).collect())
    }

    async fn sentry_search(
        &self,
        source: &SentrySourceConfig,
        url: Url,
    ) -> CacheResult<Arc<[SentryFileInfo]>> {
        let headers = auth_headers(source)?;
        let mut files = Vec::new();
        let mut next = Some(url);
        let mut pages = 0;
        while let Some(page) = next.take() {
            pages += 1;
            let what = redact_url(&page);
            let fetch_page = async { retrying!(&what, self.sentry_page(&page, &headers).await) };
            let (mut batch, link) = within_download_timeout(self.config(), fetch_page).await?;
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

    /// One page of search results and the link to the next one.
    async fn sentry_page(
        &self,
        url: &Url,
        headers: &HeaderMap,
    ) -> CacheResult<(Vec<SentryFileInfo>, Option<String>)> {
        let response = self.send_checked(&self.inner.client, url, headers).await?;
        let link = response
            .headers()
            .get(LINK)
            .and_then(|value| value.to_str().ok())
            .and_then(next_page)
            .map(str::to_owned);
        let body = read_capped(self, response, MAX_PAGE_BYTES).await?;
        let files = parse_search_answer(&body).map_err(|err| {
            CacheError::DownloadError(format!("invalid Sentry search answer: {err}"))
        })?;
        Ok((files, link))
    }

    /// Downloads a file of `source` from `url`. The endpoint usually redirects to
    /// storage; the token follows only same-host redirects (reqwest drops it otherwise),
    /// and is only sent at all to the source's own origin.
    pub(super) async fn download_sentry(
        &self,
        source: &SentrySourceConfig,
        url: &Url,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let mut headers = BTreeMap::new();
        if source.same_origin(url) {
            headers.insert("Authorization".to_owned(), bearer(&source.token));
        }
        self.download_http(url, &headers, dest).await
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
        let headers = if source.same_origin(url) {
            auth_headers(source)?
        } else {
            HeaderMap::new()
        };
        let what = redact_url(url);
        let fetch = async {
            retrying!(
                &what,
                self.sentry_api_attempt(url, &headers, max_bytes).await
            )
        };
        within_download_timeout(self.config(), fetch).await
    }

    async fn sentry_api_attempt(
        &self,
        url: &Url,
        headers: &HeaderMap,
        max_bytes: usize,
    ) -> CacheResult<Vec<u8>> {
        let response = self.send_checked(&self.inner.client, url, headers).await?;
        read_capped(self, response, max_bytes).await
    }
}
