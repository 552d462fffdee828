//! The fetching side of one `/symbolicate-js` request, in upstream's order: a file is
//! looked for in the artifact bundles found so far (by debug id, then by candidate
//! URL), then among individual release files, then Sentry's artifact-lookup API is
//! asked (bundles it names are downloaded at once, files on demand) and both are tried
//! again; a file with a debug id is also looked for on the request's own `sources` in
//! the unified layout; last, the file is scraped from the web where allowed. Every file
//! is fetched through the shared fetch layer and cache, once per request and once for
//! all requests; every web fetch (or decision not to) is a scraping attempt.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use symbolic::common::{ByteView, DebugId};
use url::Url;

use super::files::{Ahead, JsFiles, LookupResult};
use super::{FileError, Found, JsLookup, JsModuleFiles, MinifiedSource, SourceText};
use crate::cache::{CacheKey, Scope};
use crate::error::CacheError;
use crate::fetch::RemoteFile;
use crate::js::bundle::{ArtifactBundles, NotRemembered};
use crate::js::discovery::{
    SourceMapUrl, discover_debug_id, resolve_sourcemap_url, sourcemap_comment,
};
use crate::js::interface::{
    CachedFileUri, FileKey, JsScrapingAttempt, JsScrapingFailureReason, ResolvedWith,
    ScrapingConfig,
};
use crate::js::mapping::JsMapping;
use crate::js::origins::is_allowed_origin;
use crate::js::paths::{extract_file_stem, release_file_candidate_urls};
use crate::js::sourcemap_cache::SourceMapCacheInput;
use crate::sources::{SentrySourceConfig, SourceConfig, js_artifact_path};

/// A release file the lookup API named; downloaded only when a frame needs it.
struct IndividualArtifact {
    file: RemoteFile,
    /// Header names lower-cased.
    headers: BTreeMap<String, String>,
    resolved_with: ResolvedWith,
}

/// A file as this request found it.
#[derive(Clone)]
struct CachedFile {
    contents: SourceText,
    sourcemap_url: Option<SourceMapUrl>,
    debug_id: Option<DebugId>,
}

type FileEntry = Found<CachedFile>;

/// Scraped files are fetched again after about this long, staggered per URL.
const SCRAPE_EVERY_SECS: u64 = 3600;

pub struct RequestLookup<'a> {
    shared: &'a JsFiles,
    scope: Scope,
    sentry: Option<Arc<SentrySourceConfig>>,
    sources: Arc<[SourceConfig]>,
    release: Option<String>,
    dist: Option<String>,
    scraping: ScrapingConfig,
    debug_ids: HashMap<String, DebugId>,
    bundles: ArtifactBundles,
    artifacts: HashMap<String, IndividualArtifact>,
    /// API queries already made (debug ids, stems), so a miss is asked once.
    queried: BTreeSet<(Option<DebugId>, Option<String>)>,
    modules: HashMap<String, Arc<JsModuleFiles>>,
    files: HashMap<FileKey, FileEntry>,
    scraping_attempts: Vec<JsScrapingAttempt>,
}

/// What a request says about where to look.
pub struct LookupParams {
    pub scope: Scope,
    pub sentry: Option<SentrySourceConfig>,
    pub sources: Arc<[SourceConfig]>,
    pub release: Option<String>,
    pub dist: Option<String>,
    pub scraping: ScrapingConfig,
    pub debug_ids: HashMap<String, DebugId>,
}

impl<'a> RequestLookup<'a> {
    pub fn new(shared: &'a JsFiles, params: LookupParams) -> Self {
        RequestLookup {
            shared,
            scope: params.scope,
            sentry: params.sentry.map(Arc::new),
            sources: params.sources,
            release: params.release,
            dist: params.dist,
            scraping: params.scraping,
            debug_ids: params.debug_ids,
            bundles: ArtifactBundles::new(),
            artifacts: HashMap::new(),
            queried: BTreeSet::new(),
            modules: HashMap::new(),
            files: HashMap::new(),
            scraping_attempts: Vec::new(),
        }
    }

    /// Every web fetch the request made or did without, in the order upstream answers
    /// them: by URL.
    pub fn into_scraping_attempts(self) -> Vec<JsScrapingAttempt> {
        let mut attempts = self.scraping_attempts;
        attempts.sort_by(|a, b| a.url.cmp(&b.url));
        attempts
    }

    async fn file(&mut self, key: &FileKey) -> FileEntry {
        if let Some(found) = self.files.get(key) {
            return found.clone();
        }
        // Boxed: finding a file may ask Sentry's API, a bundle or a source, and those
        // clients' futures held inline made every frame's future kilobytes large, copied
        // for each frame of each request although a request finds each file once.
        let found = Box::pin(self.find_file(key)).await;
        self.files.insert(key.clone(), found.clone());
        found
    }

    async fn find_file(&mut self, key: &FileKey) -> FileEntry {
        let mut found = self.in_bundles(key).await;
        if found.is_none() {
            found = self.in_artifacts(key).await;
        }
        if found.is_none() && self.query_api(key).await {
            found = self.in_bundles(key).await;
            if found.is_none() {
                found = self.in_artifacts(key).await;
            }
        }
        if found.is_none() {
            found = self.on_sources(key).await;
        }
        if let Some(found) = found {
            if let Some(url) = key.abs_path() {
                self.scraping_attempts
                    .push(JsScrapingAttempt::not_attempted(url));
            }
            return found;
        }
        match key.abs_path() {
            Some(abs_path) => self.scrape(abs_path).await,
            None => Found {
                uri: None,
                entry: Err(CacheError::NotFound.into()),
                resolved_with: ResolvedWith::Unknown,
            },
        }
    }

    async fn in_bundles(&self, key: &FileKey) -> Option<FileEntry> {
        if self.bundles.is_empty() {
            return None;
        }
        let found = self.shared.find_in_bundles(&self.bundles, key).await?;
        let entry = match found.file.sourcemap_reference.as_deref() {
            Some(reference) => match key.abs_path() {
                // A map never names another map, so only a minified file gets here.
                Some(abs_path) => SourceMapUrl::parse_with_prefix(abs_path, reference).map(Some),
                None => Err(CacheError::Malformed(
                    "a bundled file names a source map but was found without a URL".into(),
                )),
            },
            None => Ok(None),
        }
        .map(|sourcemap_url| CachedFile {
            contents: found.file.contents.clone(),
            sourcemap_url,
            // As upstream: a bundled file's own debug id does not lead anywhere new.
            debug_id: None,
        })
        .map_err(FileError::from);
        Some(Found {
            uri: Some(found.uri),
            entry,
            resolved_with: found.resolved_with,
        })
    }

    async fn in_artifacts(&self, key: &FileKey) -> Option<FileEntry> {
        if self.artifacts.is_empty() {
            return None;
        }
        let abs_path = key.abs_path()?;
        let artifact =
            release_file_candidate_urls(abs_path).find_map(|url| self.artifacts.get(&url))?;
        let mut contents = self.shared.fetch_file(&artifact.file, &self.scope).await;
        // Hermes bytecode is uploaded as an empty file with headers: its text is empty.
        if matches!(contents, Err(CacheError::NotFound)) && !artifact.headers.is_empty() {
            contents = Ok(ByteView::from_vec(Vec::new()));
        }
        let entry = contents.and_then(SourceText::new).map(|contents| {
            let headers = artifact
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()));
            CachedFile {
                sourcemap_url: resolve_sourcemap_url(abs_path, headers, contents.as_str()),
                debug_id: discover_debug_id(contents.as_str()),
                contents,
            }
        });
        Some(Found {
            uri: Some(CachedFileUri::IndividualFile(
                artifact.file.uri().to_owned(),
            )),
            entry: entry.map_err(FileError::from),
            resolved_with: artifact.resolved_with,
        })
    }

    /// Asks Sentry for the bundles and files of `key`; `true` if it named anything new.
    async fn query_api(&mut self, key: &FileKey) -> bool {
        let Some(sentry) = self.sentry.clone() else {
            return false;
        };
        let debug_id = key.debug_id();
        let stem = key.abs_path().map(extract_file_stem);
        // A URL only means something together with a release.
        if debug_id.is_none() && (stem.is_none() || self.release.is_none()) {
            return false;
        }
        if !self.queried.insert((debug_id, stem.clone())) {
            return false;
        }
        let results = match self
            .shared
            .lookup_artifacts(
                &sentry,
                debug_id,
                stem.as_deref(),
                self.release.as_deref(),
                self.dist.as_deref(),
            )
            .await
        {
            Ok(results) => results,
            Err(err) => {
                tracing::warn!(source = %sentry.id, error = %err, "Sentry artifact lookup failed");
                return false;
            }
        };
        let mut new = false;
        for result in results.iter() {
            match result {
                LookupResult::File {
                    id,
                    url,
                    abs_path,
                    headers,
                    resolved_with,
                } => {
                    if !self.artifacts.contains_key(abs_path) {
                        let file = RemoteFile::sentry_file(
                            SourceConfig::Sentry(sentry.clone()),
                            id.clone(),
                            url.clone(),
                        );
                        let headers = headers
                            .iter()
                            .map(|(k, v)| (k.to_lowercase(), v.clone()))
                            .collect();
                        self.artifacts.insert(
                            abs_path.clone(),
                            IndividualArtifact {
                                file,
                                headers,
                                resolved_with: *resolved_with,
                            },
                        );
                        new = true;
                    }
                }
                LookupResult::Bundle {
                    id,
                    url,
                    resolved_with,
                } => {
                    let file = RemoteFile::sentry_file(
                        SourceConfig::Sentry(sentry.clone()),
                        id.clone(),
                        url.clone(),
                    );
                    if self.bundles.contains(file.uri()) {
                        continue;
                    }
                    let bundle = match self.shared.fetch_file(&file, &self.scope).await {
                        Ok(data) => self.shared.open_bundle(data).await,
                        Err(err) => Err(err),
                    };
                    new |= self.bundles.insert(file.uri(), bundle, *resolved_with);
                }
            }
        }
        new
    }

    /// A file with a debug id on the request's own sources (omnisym's extension).
    async fn on_sources(&self, key: &FileKey) -> Option<FileEntry> {
        let debug_id = key.debug_id()?;
        let kind = match key {
            FileKey::MinifiedSource { .. } => "minified_source",
            FileKey::SourceMap { .. } => "source_map",
            FileKey::Source { .. } => return None,
        };
        for source in self.sources.iter() {
            if matches!(source, SourceConfig::Sentry(_)) {
                continue;
            }
            let Some(path) = js_artifact_path(source.files(), debug_id, kind) else {
                continue;
            };
            let file = RemoteFile::new(source.clone(), path);
            match self.shared.fetch_file(&file, &self.scope).await {
                Err(CacheError::NotFound) => continue,
                contents => {
                    let entry = contents.and_then(SourceText::new).map(|contents| {
                        let sourcemap_url =
                            match (key.abs_path(), sourcemap_comment(contents.as_str())) {
                                (Some(abs_path), Some(reference)) => {
                                    SourceMapUrl::parse_with_prefix(abs_path, reference).ok()
                                }
                                _ => None,
                            };
                        CachedFile {
                            contents,
                            sourcemap_url,
                            debug_id: Some(debug_id),
                        }
                    });
                    return Some(Found {
                        uri: Some(CachedFileUri::IndividualFile(file.uri().to_owned())),
                        entry: entry.map_err(FileError::from),
                        resolved_with: ResolvedWith::DebugId,
                    });
                }
            }
        }
        None
    }

    async fn scrape(&mut self, abs_path: &str) -> FileEntry {
        let failed = |err: FileError| Found {
            uri: Some(CachedFileUri::ScrapedFile(abs_path.to_owned())),
            entry: Err(err),
            resolved_with: ResolvedWith::Unknown,
        };
        let mut url = match Url::parse(abs_path) {
            Ok(url) => url,
            Err(err) => {
                let err = CacheError::DownloadError(err.to_string());
                return failed(err.into());
            }
        };
        let refuse = |this: &mut Self, details: String| {
            this.scraping_attempts.push(JsScrapingAttempt::failure(
                abs_path,
                JsScrapingFailureReason::InvalidHost,
                details.clone(),
            ));
            failed(CacheError::DownloadError(details).into())
        };
        if !self.scraping.enabled {
            self.scraping_attempts.push(JsScrapingAttempt::failure(
                abs_path,
                JsScrapingFailureReason::Disabled,
                "",
            ));
            return failed(FileError::ScrapingDisabled);
        }
        let scheme = url.scheme().to_owned();
        if scheme != "http" && scheme != "https" {
            return refuse(
                self,
                format!("`{scheme}` is not an allowed download scheme"),
            );
        }
        if !is_allowed_origin(&url, &self.scraping.allowed_origins) {
            return refuse(
                self,
                format!("{abs_path} is not an allowed download origin"),
            );
        }
        match url.host_str() {
            None => return refuse(self, String::new()),
            // The fetch layer refuses every reserved address; these two get a clear word.
            Some(host @ ("localhost" | "127.0.0.1")) if !self.shared.reserved_ips_allowed() => {
                let details = format!("Can't connect to restricted host {host}");
                return refuse(self, details);
            }
            _ => {}
        }
        url.set_fragment(Some(&cache_busting_key(url.as_str()).to_string()));
        let file = self.shared.scrape_file(url, &self.scraping);
        let uri = Some(CachedFileUri::ScrapedFile(file.uri().to_owned()));
        let contents = self
            .shared
            .fetch_file(&file, &self.scope)
            .await
            .and_then(SourceText::new);
        let entry = match contents {
            Ok(contents) => {
                self.scraping_attempts
                    .push(JsScrapingAttempt::success(abs_path));
                Ok(CachedFile {
                    sourcemap_url: sourcemap_comment(contents.as_str())
                        .and_then(|r| SourceMapUrl::parse_with_prefix(abs_path, r).ok()),
                    debug_id: discover_debug_id(contents.as_str()),
                    contents,
                })
            }
            Err(err) => {
                self.scraping_attempts.push(JsScrapingAttempt {
                    url: abs_path.to_owned(),
                    result: err.clone().into(),
                });
                Err(err.into())
            }
        };
        Found {
            uri,
            entry,
            resolved_with: ResolvedWith::Scraping,
        }
    }

    async fn minified_and_sourcemap(&mut self, abs_path: &str) -> JsModuleFiles {
        let debug_id = self.debug_ids.get(abs_path).copied();
        let key = FileKey::MinifiedSource {
            abs_path: abs_path.to_owned(),
            debug_id,
        };
        let minified = self.file(&key).await;
        let (sourcemap_url, own_debug_id) = match &minified.entry {
            Ok(file) => (file.sourcemap_url.clone(), file.debug_id),
            Err(_) => (None, None),
        };
        let debug_id = debug_id.or(own_debug_id);
        let minified_source = Found {
            uri: minified.uri.clone(),
            entry: minified.entry.clone().map(|file| MinifiedSource {
                contents: file.contents,
                sourcemap_url: file.sourcemap_url,
                debug_id: file.debug_id,
            }),
            resolved_with: minified.resolved_with,
        };
        if sourcemap_url.is_none() && debug_id.is_none() {
            return JsModuleFiles {
                minified_source,
                mapping: None,
            };
        }
        // Held until the map is resolved, so that its decoding joins the parse.
        let mut ahead = None;
        let (embedded, abs_path) = match sourcemap_url {
            Some(SourceMapUrl::Data(data)) => (Some(data), None),
            Some(SourceMapUrl::Remote(url)) => (None, Some(url)),
            None => (None, None),
        };
        let sourcemap = if let Some(data) = embedded {
            Found {
                uri: Some(CachedFileUri::Embedded),
                entry: Ok(CachedFile {
                    contents: SourceText::from(data),
                    sourcemap_url: None,
                    debug_id,
                }),
                resolved_with: minified.resolved_with,
            }
        } else {
            let key = FileKey::SourceMap { abs_path, debug_id };
            ahead = self.look_ahead(&minified, &key).await;
            self.file(&key).await
        };
        let mapping = self.mapping(&minified, &sourcemap, ahead.as_ref()).await;
        drop(ahead);
        JsModuleFiles {
            minified_source,
            mapping: Some(Found {
                uri: sourcemap.uri,
                entry: mapping,
                resolved_with: sourcemap.resolved_with,
            }),
        }
    }

    /// The mapping of `minified` with `sourcemap`: what looking `ahead` found, when the
    /// map is where it was expected, else looked up (or answered directly) now.
    async fn mapping(
        &self,
        minified: &FileEntry,
        sourcemap: &FileEntry,
        ahead: Option<&(CachedFileUri, Ahead)>,
    ) -> Result<JsMapping, FileError> {
        let source = minified.entry.as_ref().map_err(Clone::clone)?;
        let map = sourcemap.entry.as_ref().map_err(Clone::clone)?;
        if let Some((expected, Ahead::Cached(cached))) = ahead
            && sourcemap.uri.as_ref() == Some(expected)
        {
            return Ok(cached.clone()?);
        }
        let source_key = self.content_key(minified.uri.as_ref(), &source.contents);
        let map_key = self.content_key(sourcemap.uri.as_ref(), &map.contents);
        let input = SourceMapCacheInput {
            minified: source.contents.bytes().clone(),
            sourcemap: map.contents.bytes().clone(),
        };
        let mapping = self
            .shared
            .sourcemap_mapping(&source_key, &map_key, input, &source.contents);
        Ok(mapping.await?)
    }

    /// What identifies a file's contents: its URI, or for a scraped file (whose URL
    /// may serve anything tomorrow) a hash of the contents, as upstream keys them. A
    /// file without a URI never has contents, but would be known by its hash alike.
    fn content_key(&self, uri: Option<&CachedFileUri>, contents: &SourceText) -> CacheKey {
        uri.and_then(|uri| self.uri_key(uri)).unwrap_or_else(|| {
            let hash = hex::encode(Sha256::digest(contents.bytes().as_slice()));
            CacheKey::new(self.scope.clone(), &["scraped", &hash])
        })
    }

    /// [`Self::content_key`] of a file known by its URI alone: `None` for a scraped one.
    fn uri_key(&self, uri: &CachedFileUri) -> Option<CacheKey> {
        match uri {
            CachedFileUri::ScrapedFile(_) => None,
            uri => Some(CacheKey::new(
                self.scope.clone(),
                &["uri", &uri.to_string()],
            )),
        }
    }

    /// Looks ahead (see [`JsFiles::look_ahead`]) for a minified file found in an
    /// artifact bundle while its map (`map_key`) is still to be found, and says where
    /// the map was expected. Where the bundles' memo knows where the map is, that is its
    /// key; where it knows that no bundle has the map, nothing is done, so a file whose
    /// map is elsewhere or nowhere is not parsed on every request for nothing.
    /// Otherwise the guess is the minified file's own bundle, where the tools that
    /// write bundles put its map. Files from elsewhere are parsed once their map is
    /// found.
    async fn look_ahead(
        &self,
        minified: &FileEntry,
        map_key: &FileKey,
    ) -> Option<(CachedFileUri, Ahead)> {
        let Some(uri @ CachedFileUri::Bundled(bundle, _)) = &minified.uri else {
            return None;
        };
        let file = minified.entry.as_ref().ok()?;
        let map_uri = match self.bundles.find_remembered(map_key) {
            Ok(found) => found?.uri,
            Err(NotRemembered) => CachedFileUri::Bundled(bundle.clone(), map_key.clone()),
        };
        let (source_key, map_key) = (self.uri_key(uri)?, self.uri_key(&map_uri)?);
        let ahead = self
            .shared
            .look_ahead(&source_key, &map_key, &file.contents)
            .await?;
        Some((map_uri, ahead))
    }
}

impl JsLookup for RequestLookup<'_> {
    async fn module(&mut self, abs_path: &str) -> Arc<JsModuleFiles> {
        if let Some(module) = self.modules.get(abs_path) {
            return module.clone();
        }
        // Boxed, as `file`'s search is: found once per request, not per frame.
        let module = Arc::new(Box::pin(self.minified_and_sourcemap(abs_path)).await);
        self.modules.insert(abs_path.to_owned(), module.clone());
        module
    }

    async fn source_file(&mut self, abs_path: &str) -> Result<SourceText, FileError> {
        let key = FileKey::Source {
            abs_path: abs_path.to_owned(),
        };
        self.file(&key).await.entry.map(|file| file.contents)
    }
}

/// Changes once every [`SCRAPE_EVERY_SECS`], at a point in the hour that depends on the
/// URL, so the scraped files of a release do not all expire at once.
fn cache_busting_key(url: &str) -> u64 {
    let offset = u64::from_le_bytes(
        Sha256::digest(url.as_bytes())[..8]
            .try_into()
            .unwrap_or_default(),
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (now.wrapping_add(offset % SCRAPE_EVERY_SECS)) / SCRAPE_EVERY_SECS
}
