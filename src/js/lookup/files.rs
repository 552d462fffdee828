//! What all `/symbolicate-js` requests share: the cache of fetched JS files (release
//! files, artifact bundles, scraped scripts, files from the request's own sources), the
//! SourcemapCaches built from them, and Sentry's artifact-lookup answers (and their
//! shape).

use std::collections::BTreeMap;
use std::sync::Arc;

use symbolic::common::{ByteView, DebugId};
use url::Url;

use serde::Deserialize;

use crate::cache::kinds;
use crate::cache::{CacheKey, CacheKind, Caches, ConversionBudget, DerivedCache, Scope};
use crate::error::{CacheError, CacheResult, isolate_blocking};
use crate::fetch::{Downloader, RemoteFile};
use crate::js::bundle::{
    ArtifactBundle, ArtifactBundles, BundleFileMemo, BundleLimits, FoundInBundle,
};
use crate::js::interface::{FileKey, ResolvedWith, ScrapingConfig};
use crate::js::sourcemap_cache::{OwnedSourceMapCache, SourceMapCacheFormat, SourceMapCacheInput};
use crate::lookup::{Downloads, Plain, PlainFormat};
use crate::sources::{CommonSourceConfig, HttpSourceConfig, Secret, SentrySourceConfig, SourceId};

struct JsFile;

impl PlainFormat for JsFile {
    const KIND: CacheKind = kinds::SOURCEMAP_FILES;
    const MAX_SIZE: u64 = u64::MAX;
}

/// An artifact-lookup answer is a JSON list of a few entries per file; far more is no
/// answer to parse.
const MAX_LOOKUP_ANSWER: usize = 16 * 1024 * 1024;
/// `http::Uri` cannot hold longer URLs; a query past this is refused up front.
const MAX_LOOKUP_URL: usize = u16::MAX as usize - 1;

type LookupAnswers = moka::future::Cache<(Url, Secret), Arc<[LookupResult]>>;

/// A downloaded file's bytes, told apart from every other one alive: the address and
/// length of its view. The value keeps the view, so no other file can be mapped at that
/// address while the key is in use.
type ViewIdentity = (usize, usize);

/// Bundles opened (or found unusable), by the downloaded bytes they were opened from: a
/// bundle downloaded again (new bytes) is opened again.
type OpenedBundles =
    moka::sync::Cache<ViewIdentity, (ByteView<'static>, CacheResult<ArtifactBundle>)>;

pub struct JsFiles {
    downloader: Downloader,
    /// Opening bundles and reading their files share the conversions' memory budget.
    budget: Arc<ConversionBudget>,
    bundle_limits: BundleLimits,
    files: Downloads<Plain<JsFile>>,
    smcaches: DerivedCache<SourceMapCacheFormat>,
    /// Per lookup URL and token, so two projects never see each other's answers.
    lookups: LookupAnswers,
    opened: OpenedBundles,
    bundle_files: BundleFileMemo,
}

impl JsFiles {
    pub fn new(caches: &Caches, downloader: Downloader, bundle_limits: BundleLimits) -> Self {
        let config = downloader.config();
        let lookups = moka::future::Cache::builder()
            .max_capacity(config.sentry_index_capacity)
            .time_to_live(config.sentry_index_ttl)
            .build();
        let (bundles, bundle_bytes) = caches.artifact_bundles();
        JsFiles {
            opened: moka::sync::Cache::new(bundles),
            bundle_files: BundleFileMemo::new(bundle_bytes),
            files: Downloads::new(caches, downloader.clone()),
            smcaches: DerivedCache::new(caches),
            lookups,
            downloader,
            budget: caches.conversions(),
            bundle_limits,
        }
    }

    /// Opens a downloaded artifact bundle within the limits, on a blocking thread,
    /// holding what opening it costs of the conversion budget.
    pub(super) async fn open_bundle(&self, data: ByteView<'static>) -> CacheResult<ArtifactBundle> {
        let identity = (data.as_ptr() as usize, data.len());
        if let Some((_, opened)) = self.opened.get(&identity) {
            return opened;
        }
        let opened = self
            .open_afresh(data.clone())
            .await
            .map(|bundle| bundle.remembering(&self.bundle_files));
        // A bundle that opens, or never will; anything else may go away on its own.
        if matches!(opened, Ok(_) | Err(CacheError::Malformed(_))) {
            self.opened.insert(identity, (data, opened.clone()));
        }
        opened
    }

    async fn open_afresh(&self, data: ByteView<'static>) -> CacheResult<ArtifactBundle> {
        let limits = self.bundle_limits;
        // The zip's directory only, to learn the manifest's size.
        let size = isolate_blocking("artifact bundle", {
            let data = data.clone();
            move || Ok(ArtifactBundle::open_size(&data, &limits))
        })
        .await?;
        let _permit = self.budget.acquire(size).await;
        isolate_blocking("artifact bundle", move || {
            ArtifactBundle::parse(data, &limits)
        })
        .await
    }

    /// [`ArtifactBundles::find`] on a blocking thread, holding what reading the file it
    /// finds may cost of the conversion budget: inflating a file must not stall the
    /// async workers that answer other requests.
    pub(super) async fn find_in_bundles(
        &self,
        bundles: &ArtifactBundles,
        key: &FileKey,
    ) -> Option<FoundInBundle> {
        if let Ok(found) = bundles.find_remembered(key) {
            return found;
        }
        let (bundles, key) = (bundles.clone(), key.clone());
        let _permit = self.budget.acquire(bundles.largest_entry()).await;
        isolate_blocking("artifact bundle", move || Ok(bundles.find(&key)))
            .await
            .ok()
            .flatten()
    }

    pub(super) async fn fetch_file(
        &self,
        file: &RemoteFile,
        scope: &Scope,
    ) -> CacheResult<ByteView<'static>> {
        self.files.get(file, scope, ()).await
    }

    pub(super) fn scrape_file(&self, url: Url, scraping: &ScrapingConfig) -> RemoteFile {
        RemoteFile::whole_url(scrape_source(url, scraping))
    }

    pub(super) fn reserved_ips_allowed(&self) -> bool {
        self.downloader.config().connect_to_reserved_ips
    }

    pub(super) async fn sourcemap_cache(
        &self,
        minified: &CacheKey,
        sourcemap: &CacheKey,
        input: SourceMapCacheInput,
    ) -> CacheResult<OwnedSourceMapCache> {
        self.smcaches
            .get(&[minified, sourcemap], Box::pin(async move { Ok(input) }))
            .await
    }

    /// Sentry's artifact lookup for one file: bundles and release files that hold
    /// `debug_id`, or (with a release) files whose URL has `stem`. Answers are kept for
    /// the Sentry index lifetime; failures are not kept.
    pub(super) async fn lookup_artifacts(
        &self,
        source: &SentrySourceConfig,
        debug_id: Option<DebugId>,
        stem: Option<&str>,
        release: Option<&str>,
        dist: Option<&str>,
    ) -> CacheResult<Arc<[LookupResult]>> {
        let mut url = source.url.clone();
        {
            let mut query = url.query_pairs_mut();
            if let Some(release) = release {
                query.append_pair("release", release);
                if let Some(stem) = stem {
                    query.append_pair("url", stem);
                }
            }
            if let Some(dist) = dist {
                query.append_pair("dist", dist);
            }
            if let Some(debug_id) = debug_id {
                query.append_pair("debug_id", &debug_id.to_string());
            }
        }
        if url.as_str().len() > MAX_LOOKUP_URL {
            return Err(CacheError::DownloadError("lookup URL too long".into()));
        }
        let key = (url.clone(), source.token.clone());
        self.lookups
            .try_get_with(key, async {
                let body = self
                    .downloader
                    .sentry_api_get(source, &url, MAX_LOOKUP_ANSWER)
                    .await?;
                let results: Vec<LookupResult> = serde_json::from_slice(&body).map_err(|e| {
                    CacheError::DownloadError(format!("invalid artifact lookup answer: {e}"))
                })?;
                Ok(results.into())
            })
            .await
            .map_err(|err: Arc<CacheError>| (*err).clone())
    }
}

/// One answer of Sentry's artifact lookup.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LookupResult {
    Bundle {
        id: String,
        url: Url,
        #[serde(default)]
        resolved_with: ResolvedWith,
    },
    File {
        id: String,
        url: Url,
        abs_path: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        #[serde(default)]
        resolved_with: ResolvedWith,
    },
}

/// The HTTP source a scraped URL is fetched as: the request's scraping headers, and
/// certificate checks unless the request turned them off.
fn scrape_source(url: Url, scraping: &ScrapingConfig) -> HttpSourceConfig {
    HttpSourceConfig {
        id: SourceId::new("web-scraping"),
        url,
        headers: scraping.headers.clone(),
        files: CommonSourceConfig::default(),
        accept_invalid_certs: !scraping.verify_ssl,
        digests: Default::default(),
    }
}
