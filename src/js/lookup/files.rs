//! What all `/symbolicate-js` requests share: the cache of fetched JS files (release
//! files, artifact bundles, scraped scripts, files from the request's own sources), the
//! SourcemapCaches built from them, and Sentry's artifact-lookup answers (and their
//! shape).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use symbolic::common::{ByteView, DebugId};
use url::Url;

use serde::Deserialize;

use super::scopes::{ScopeParse, ScopeParses};
use crate::cache::kinds;
use crate::cache::{
    CacheKey, CacheKind, Caches, ConversionBudget, DerivedCache, DerivedFormat, Scope,
};
use crate::error::{CacheError, CacheResult, isolate_blocking};
use crate::fetch::{Downloader, RemoteFile};
use crate::js::bundle::{
    ArtifactBundle, ArtifactBundles, BundleFileMemo, BundleLimits, BundleMemory, FoundInBundle,
};
use crate::js::interface::{FileKey, ResolvedWith, ScrapingConfig};
use crate::js::mapping::{DirectMap, JsMapping};
use crate::js::sourcemap_cache::{SourceMapCacheFormat, SourceMapCacheInput};
use crate::js::text::SourceText;
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
    cold: ColdMaps,
    scopes: ScopeParses,
    /// Per lookup URL and token, so two projects never see each other's answers.
    lookups: LookupAnswers,
    opened: OpenedBundles,
    bundle_files: BundleFileMemo,
}

impl JsFiles {
    pub fn new(
        caches: &Caches,
        downloader: Downloader,
        bundle_limits: BundleLimits,
        bundle_memory: BundleMemory,
    ) -> Self {
        let config = downloader.config();
        let lookups = moka::future::Cache::builder()
            .max_capacity(config.sentry_index_capacity)
            .time_to_live(config.sentry_index_ttl)
            .build();
        JsFiles {
            opened: moka::sync::Cache::new(bundle_memory.opened),
            bundle_files: BundleFileMemo::new(bundle_memory.file_bytes),
            files: Downloads::new(caches, downloader.clone()),
            smcaches: DerivedCache::new(caches),
            cold: ColdMaps::default(),
            scopes: ScopeParses::default(),
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

    /// Looks at the SourceMapCache of `minified` (the text of the file keyed `minified`)
    /// and the map keyed `sourcemap` before the map is searched for: the cache when it
    /// exists (the request then does not look it up again), else a parse of the file's
    /// scopes started now, unless a request answers that map directly or builds its
    /// cache already. The parse is the longest step of the first answer, and finding
    /// and decoding the map can run beside it. `sourcemap` is where the map will most
    /// likely be found; a wrong guess costs an unused parse or lookup, never a different
    /// answer (scopes depend on the minified text alone). The caller holds what this
    /// returns until the map is resolved.
    pub(super) async fn look_ahead(
        &self,
        minified: &CacheKey,
        sourcemap: &CacheKey,
        text: &SourceText,
    ) -> Option<Ahead> {
        let parents = [minified, sourcemap];
        if let Some(cached) = self.smcaches.cached(&parents).await {
            return Some(Ahead::Cached(cached.map(JsMapping::Cache)));
        }
        if self
            .cold
            .contains(&DerivedCache::<SourceMapCacheFormat>::key(&parents))
        {
            return None;
        }
        let parse = self
            .scopes
            .start_or_join(minified, text, &self.budget, "ahead");
        Some(Ahead::Parsing { _parse: parse })
    }

    /// What resolves frames of `minified` with `sourcemap`: their SourceMapCache, or
    /// while it does not exist yet, the map itself (see [`ColdMaps`]).
    pub(super) async fn sourcemap_mapping(
        &self,
        minified: &CacheKey,
        sourcemap: &CacheKey,
        input: SourceMapCacheInput,
        minified_text: &SourceText,
    ) -> CacheResult<JsMapping> {
        let parents = [minified, sourcemap];
        if let Some(cached) = self.smcaches.cached(&parents).await {
            return cached.map(JsMapping::Cache);
        }
        let key = DerivedCache::<SourceMapCacheFormat>::key(&parents);
        if let Some(direct) = self
            .cold
            .answer(
                &key,
                &parents,
                &self.smcaches,
                &self.budget,
                &self.scopes,
                &input,
                minified_text,
            )
            .await
        {
            return Ok(JsMapping::Direct(direct));
        }
        self.smcaches
            .get(&parents, Box::pin(async move { Ok(input) }))
            .await
            .map(JsMapping::Cache)
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

/// What [`JsFiles::look_ahead`] found for a minified file before its map was searched.
pub(super) enum Ahead {
    /// The cache of the file and its expected map (or why it cannot be had).
    Cached(CacheResult<JsMapping>),
    /// The file's scopes, being parsed: held, so that the map's decoding joins them.
    Parsing { _parse: Arc<ScopeParse> },
}

/// Source maps asked for before their SourceMapCache exists, by the cache's key. The
/// first request decodes the map and the minified file's scopes (on two threads) and
/// answers from them, which takes about half of what writing the cache does; requests
/// meanwhile share that answer. When the last of them lets go of it, the cache is built
/// (not beside it: both at once would double the peak memory), and requests from then
/// on wait for the build as they always did. An entry lives only while its map is cold.
#[derive(Clone, Default)]
struct ColdMaps(Arc<Mutex<HashMap<CacheKey, ColdMap>>>);

/// The map answered directly, while anyone uses it; empty before the first answer.
type DirectSlot = Arc<tokio::sync::Mutex<Option<Weak<DirectMap>>>>;

enum ColdMap {
    Direct(DirectSlot),
    Building,
}

impl ColdMaps {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, ColdMap>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a request answers `key`'s map directly, or its cache is being built.
    fn contains(&self, key: &CacheKey) -> bool {
        self.lock().contains_key(key)
    }

    /// The map answered directly, or `None` when the cache answers instead: it is being
    /// built already, or the map is one only the cache answers exactly (which starts
    /// its build).
    #[allow(clippy::too_many_arguments)]
    async fn answer(
        &self,
        key: &CacheKey,
        parents: &[&CacheKey; 2],
        smcaches: &DerivedCache<SourceMapCacheFormat>,
        budget: &Arc<ConversionBudget>,
        scopes: &ScopeParses,
        input: &SourceMapCacheInput,
        minified: &SourceText,
    ) -> Option<Arc<DirectMap>> {
        let slot = match self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| ColdMap::Direct(DirectSlot::default()))
        {
            ColdMap::Direct(slot) => slot.clone(),
            ColdMap::Building => return None,
        };
        let mut answered = slot.lock().await;
        if let Some(answer) = answered.as_ref() {
            // Let go of already (and the build started), or left to the cache, when it
            // does not upgrade.
            return answer.upgrade();
        }
        // Dropped unanswered (the request went away), the entry must not stay.
        let unanswered = ForgetUnanswered {
            maps: self,
            key,
            slot: &slot,
        };
        let direct = decode_directly(budget, scopes, parents[0], input, minified).await;
        std::mem::forget(unanswered);
        let build = self.build_later(key, parents, smcaches, input);
        let Some(direct) = direct else {
            *answered = Some(Weak::new());
            build();
            return None;
        };
        metrics::counter!(crate::telemetry::SOURCEMAP_DIRECT_ANSWERS).increment(1);
        let direct = Arc::new(direct.then(build));
        *answered = Some(Arc::downgrade(&direct));
        Some(direct)
    }

    /// What starts the build of `key`'s cache, once called: the entry says so from then
    /// on, and goes when the build is done.
    fn build_later(
        &self,
        key: &CacheKey,
        parents: &[&CacheKey; 2],
        smcaches: &DerivedCache<SourceMapCacheFormat>,
        input: &SourceMapCacheInput,
    ) -> impl FnOnce() + Send + Sync + 'static {
        let (maps, key, smcaches) = (self.clone(), key.clone(), smcaches.clone());
        let parents = parents.map(CacheKey::clone);
        let input = SourceMapCacheInput {
            minified: input.minified.clone(),
            sourcemap: input.sourcemap.clone(),
        };
        let runtime = tokio::runtime::Handle::current();
        move || {
            maps.lock().insert(key.clone(), ColdMap::Building);
            runtime.spawn(async move {
                let [minified, sourcemap] = &parents;
                let built = smcaches
                    .get(&[minified, sourcemap], Box::pin(async move { Ok(input) }))
                    .await;
                if let Err(err) = built {
                    tracing::debug!(error = %err, "sourcemap cache build after a direct answer");
                }
                maps.lock().remove(&key);
            });
        }
    }
}

/// Removes an entry whose first request went away before answering, unless another
/// request waits to answer it.
struct ForgetUnanswered<'a> {
    maps: &'a ColdMaps,
    key: &'a CacheKey,
    slot: &'a DirectSlot,
}

impl Drop for ForgetUnanswered<'_> {
    fn drop(&mut self) {
        let mut maps = self.maps.lock();
        // Two holders: the entry and this request. More means someone waits.
        if Arc::strong_count(self.slot) <= 2 {
            maps.remove(self.key);
        }
    }
}

/// Decodes the map while the minified file's scopes are parsed (or joins a parse
/// started ahead, see [`JsFiles::parse_scopes_ahead`]), each within the conversion
/// budget and isolated as conversions are; `None` when only the cache answers exactly
/// (or the inputs are unusable: the build says how).
async fn decode_directly(
    budget: &Arc<ConversionBudget>,
    parses: &ScopeParses,
    minified_key: &CacheKey,
    input: &SourceMapCacheInput,
    minified: &SourceText,
) -> Option<DirectMap> {
    let started = Instant::now();
    let parse = parses.start_or_join(minified_key, minified, budget, "with_map");
    // Holding the map's share while the parse still waits for its own could stall
    // every decode once such shares filled the budget; a running parse waits for none.
    parse.running().await;
    let _permit = budget.acquire(input.sourcemap.len() as u64).await;
    let (sourcemap, text) = (input.sourcemap.clone(), minified.clone());
    let map = isolate_blocking(SourceMapCacheFormat::KIND.name, move || {
        let map = DirectMap::decode(&sourcemap, text)?;
        Ok((map, started.elapsed()))
    });
    let scopes = async {
        let scopes = parse.scopes().await;
        (scopes, started.elapsed())
    };
    let (map, (scopes, scopes_waited)) = tokio::join!(map, scopes);
    let ((map, decode_took), scopes) = (map.ok()?, scopes?);
    let direct = isolate_blocking(SourceMapCacheFormat::KIND.name, move || {
        Ok(DirectMap::new(map, scopes))
    })
    .await
    .ok()
    .flatten();
    tracing::debug!(
        input_bytes = SourceMapCacheFormat::input_size(input),
        decode_ms = decode_took.as_millis() as u64,
        scopes_ms = scopes_waited.as_millis() as u64,
        took_ms = started.elapsed().as_millis() as u64,
        direct = direct.is_some(),
        "source map decoded to answer directly"
    );
    direct
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
