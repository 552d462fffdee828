//! The wire types of `POST /symbolicate-js`, field for field as upstream Symbolicator
//! reads and writes them.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use symbolic::common::DebugId;

use crate::error::CacheError;
use crate::sources::Headers;
use crate::sources::{SentrySourceConfig, SourceConfig};
use crate::types::FrameOrder;

/// The body of `POST /symbolicate-js`.
#[derive(Debug, Clone, Deserialize)]
pub struct JsSymbolicationRequest {
    #[serde(default, deserialize_with = "platform")]
    pub platform: Option<String>,
    /// Sentry's artifact-lookup endpoint. Upstream requires it; omnisym also serves
    /// requests that only scrape or only use `sources`.
    #[serde(default)]
    pub source: Option<SentrySourceConfig>,
    /// omnisym's extension: plain sources (HTTP, filesystem, buckets) that hold
    /// minified files, source maps and artifact bundles, for JS without Sentry.
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
    #[serde(default)]
    pub stacktraces: Vec<JsStacktrace>,
    #[serde(default)]
    pub modules: Vec<JsModule>,
    #[serde(default)]
    pub release: Option<String>,
    #[serde(default)]
    pub dist: Option<String>,
    /// The older switch for scraping; when `false` it overrides `scraping.enabled`.
    #[serde(default = "default_true")]
    pub allow_scraping: bool,
    #[serde(default)]
    pub scraping: ScrapingConfig,
    #[serde(default)]
    pub options: JsRequestOptions,
}

impl JsSymbolicationRequest {
    /// The scraping settings in force: `allow_scraping: false` turns scraping off
    /// whatever `scraping.enabled` says, as upstream does.
    pub fn effective_scraping(&self) -> ScrapingConfig {
        let mut scraping = self.scraping.clone();
        scraping.enabled &= self.allow_scraping;
        scraping
    }
}

fn default_true() -> bool {
    true
}

/// Upstream parses platforms into an enum that writes `"nodejs"` back as `"node"`;
/// every other value round-trips unchanged.
fn platform<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(
        Option::<String>::deserialize(d)?.map(
            |p| {
                if p == "nodejs" { "node".to_owned() } else { p }
            },
        ),
    )
}

/// Whether and how minified files, source maps and sources may be fetched from the web.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ScrapingConfig {
    pub enabled: bool,
    #[serde(default = "default_true")]
    pub verify_ssl: bool,
    /// Origin patterns (see [`super::origins::is_allowed_origin`]) that may be scraped.
    pub allowed_origins: Vec<String>,
    /// Sent with every scraping request. Upstream requires the key; an absent one
    /// means no headers here.
    #[serde(default)]
    pub headers: Headers,
}

impl Default for ScrapingConfig {
    fn default() -> Self {
        ScrapingConfig {
            enabled: true,
            verify_ssl: true,
            allowed_origins: vec!["*".to_owned()],
            headers: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct JsRequestOptions {
    pub apply_source_context: bool,
    /// JS stack traces come outermost first unless the client says otherwise.
    pub frame_order: FrameOrder,
}

impl Default for JsRequestOptions {
    fn default() -> Self {
        JsRequestOptions {
            apply_source_context: true,
            frame_order: FrameOrder::CallerFirst,
        }
    }
}

/// A minified file the client knows the debug id of (`debug_meta.images`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct JsModule {
    pub r#type: JsModuleType,
    pub code_file: String,
    /// Kept as sent: an unparsable id is ignored (logged), as upstream does, rather
    /// than failing the whole request.
    pub debug_id: String,
}

impl JsModule {
    pub fn parsed_debug_id(&self) -> Option<DebugId> {
        self.debug_id.parse().ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JsModuleType {
    Sourcemap,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct JsStacktrace {
    pub frames: Vec<JsFrame>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct JsFrame {
    #[serde(
        default,
        deserialize_with = "platform",
        skip_serializing_if = "Option::is_none"
    )]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub abs_path: String,
    pub lineno: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colno: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_context: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_line: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_context: Vec<String>,
    /// The name the source map gives the token at this frame's position; the next
    /// (callee) frame may be named after it. Never on the wire.
    #[serde(skip)]
    pub token_name: Option<String>,
    #[serde(default)]
    pub data: JsFrameData,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct JsFrameData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sourcemap: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sourcemap_origin: Option<CachedFileUri>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_with: Option<ResolvedWith>,
    #[serde(default)]
    pub symbolicated: bool,
}

/// How a file (or the bundle holding it) was found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResolvedWith {
    /// In a bundle by debug id, or the bundle was found by debug id.
    DebugId,
    /// In a bundle by URL.
    Url,
    /// The bundle was found through Sentry's database index.
    Index,
    /// Sentry's lookup found it as (part of) an artifact bundle of the release.
    Release,
    /// Sentry's lookup found it as an old-style release file.
    ReleaseOld,
    /// Scraped from the web.
    Scraping,
    #[default]
    Unknown,
}

/// Which file of a bundle was meant: the key a file was asked for by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKey {
    MinifiedSource {
        abs_path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        debug_id: Option<DebugId>,
    },
    SourceMap {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        abs_path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        debug_id: Option<DebugId>,
    },
    Source {
        abs_path: String,
    },
}

impl FileKey {
    pub fn debug_id(&self) -> Option<DebugId> {
        match self {
            FileKey::MinifiedSource { debug_id, .. } | FileKey::SourceMap { debug_id, .. } => {
                *debug_id
            }
            FileKey::Source { .. } => None,
        }
    }

    pub fn abs_path(&self) -> Option<&str> {
        match self {
            FileKey::MinifiedSource { abs_path, .. } | FileKey::Source { abs_path } => {
                Some(abs_path)
            }
            FileKey::SourceMap { abs_path, .. } => abs_path.as_deref(),
        }
    }

    /// The file type a bundle files its entries under.
    pub fn file_type(&self) -> symbolic::debuginfo::sourcebundle::SourceFileType {
        use symbolic::debuginfo::sourcebundle::SourceFileType;
        match self {
            FileKey::MinifiedSource { .. } => SourceFileType::MinifiedSource,
            FileKey::SourceMap { .. } => SourceFileType::SourceMap,
            FileKey::Source { .. } => SourceFileType::Source,
        }
    }
}

/// Where a file came from, as `data.sourcemap_origin` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CachedFileUri {
    /// An individual artifact, by its own URI (`sentry://project_debug_file/<id>`, or
    /// a source location).
    IndividualFile(String),
    /// Scraped from this URL.
    ScrapedFile(String),
    /// Found under this key in the bundle with this URI.
    Bundled(String, FileKey),
    /// A `data:` URL inside the minified file.
    Embedded,
}

impl fmt::Display for CachedFileUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CachedFileUri::IndividualFile(uri) | CachedFileUri::ScrapedFile(uri) => {
                f.write_str(uri)
            }
            CachedFileUri::Bundled(uri, key) => {
                write!(f, "{uri} / {:?}:", key.file_type())?;
                f.write_str(key.abs_path().unwrap_or("-"))?;
                match key.debug_id() {
                    Some(id) => write!(f, " / {id}"),
                    None => f.write_str(" / -"),
                }
            }
            CachedFileUri::Embedded => f.write_str("<embedded>"),
        }
    }
}

/// What went wrong for one `abs_path`; the variants' order is the order `errors` is
/// sorted in, as upstream sorts it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum JsModuleErrorKind {
    InvalidLocation { line: u32, col: Option<u32> },
    InvalidAbsPath,
    NoColumn,
    MissingSourceContent { source: String, sourcemap: String },
    MissingSource,
    MalformedSourcemap { url: String },
    MissingSourcemap,
    InvalidBase64Sourcemap,
    ScrapingDisabled,
}

impl fmt::Display for JsModuleErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsModuleErrorKind::InvalidLocation { line, col: None } => {
                write!(f, "Invalid source location: line:{line}")
            }
            JsModuleErrorKind::InvalidLocation {
                line,
                col: Some(col),
            } => write!(f, "Invalid source location: line:{line}, col:{col}"),
            JsModuleErrorKind::InvalidAbsPath => f.write_str("Invalid absolute path"),
            JsModuleErrorKind::NoColumn => f.write_str("No column information"),
            JsModuleErrorKind::MissingSourceContent { source, sourcemap } => write!(
                f,
                "Missing source contents for source file {source} and sourcemap file {sourcemap}"
            ),
            JsModuleErrorKind::MissingSource => f.write_str("Missing source file"),
            JsModuleErrorKind::MalformedSourcemap { url } => {
                write!(f, "Sourcemap file at {url} is malformed")
            }
            JsModuleErrorKind::MissingSourcemap => f.write_str("Missing sourcemap file"),
            JsModuleErrorKind::InvalidBase64Sourcemap => f.write_str("Invalid base64 sourcemap"),
            JsModuleErrorKind::ScrapingDisabled => {
                f.write_str("Could not download file because scraping is disabled")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub struct JsModuleError {
    pub abs_path: String,
    #[serde(flatten)]
    pub kind: JsModuleErrorKind,
}

/// One attempt to fetch a file from the web (or the note that it was not needed).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct JsScrapingAttempt {
    pub url: String,
    #[serde(flatten)]
    pub result: JsScrapingResult,
}

impl JsScrapingAttempt {
    pub fn success(url: impl Into<String>) -> Self {
        JsScrapingAttempt {
            url: url.into(),
            result: JsScrapingResult::Success,
        }
    }

    pub fn not_attempted(url: impl Into<String>) -> Self {
        JsScrapingAttempt {
            url: url.into(),
            result: JsScrapingResult::NotAttempted,
        }
    }

    pub fn failure(
        url: impl Into<String>,
        reason: JsScrapingFailureReason,
        details: impl Into<String>,
    ) -> Self {
        JsScrapingAttempt {
            url: url.into(),
            result: JsScrapingResult::Failure {
                reason,
                details: details.into(),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum JsScrapingResult {
    /// The file was found by other means, so the web was not asked.
    NotAttempted,
    Success,
    Failure {
        reason: JsScrapingFailureReason,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        details: String,
    },
}

impl From<CacheError> for JsScrapingResult {
    fn from(err: CacheError) -> Self {
        let (reason, details) = match err {
            CacheError::NotFound => (JsScrapingFailureReason::NotFound, String::new()),
            CacheError::PermissionDenied(d) => (JsScrapingFailureReason::PermissionDenied, d),
            CacheError::Timeout(t) => (
                JsScrapingFailureReason::Timeout,
                format!("Timeout after {}", humantime::format_duration(t)),
            ),
            CacheError::DownloadError(d) => (JsScrapingFailureReason::DownloadError, d),
            // Upstream has no "too large" status; a size cap is a download failure.
            CacheError::TooLarge(d) => (JsScrapingFailureReason::DownloadError, d),
            CacheError::Malformed(d) | CacheError::Unsupported(d) => {
                (JsScrapingFailureReason::Other, d)
            }
            CacheError::InternalError => (JsScrapingFailureReason::Other, String::new()),
        };
        JsScrapingResult::Failure { reason, details }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JsScrapingFailureReason {
    NotFound,
    Disabled,
    /// Not an allowed origin, or not an http(s) URL.
    InvalidHost,
    PermissionDenied,
    Timeout,
    DownloadError,
    Other,
}

/// The answer of `POST /symbolicate-js` once it is done.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct CompletedJsSymbolicationResponse {
    pub stacktraces: Vec<JsStacktrace>,
    pub raw_stacktraces: Vec<JsStacktrace>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<JsModuleError>,
    /// Sentry's ids of the artifact bundles that were used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used_artifact_bundles: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scraping_attempts: Vec<JsScrapingAttempt>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_full_request_reads_as_upstream_sends_it() {
        let request: JsSymbolicationRequest = serde_json::from_value(json!({
            "platform": "nodejs",
            "source": {"id": "sentry:project", "url": "http://sentry.test/lookup", "token": "t"},
            "stacktraces": [{"frames": [{
                "abs_path": "http://example.com/app.min.js",
                "lineno": 1, "colno": 12, "function": "a", "in_app": true,
                "platform": "javascript"
            }]}],
            "modules": [{"type": "sourcemap", "code_file": "http://example.com/app.min.js",
                         "debug_id": "5943c33d-70f5-499d-b4e1-9b5d5cac3781"}],
            "release": "1.0", "dist": null,
            "scraping": {"enabled": true, "allowed_origins": ["*.example.com"],
                         "headers": {"Cookie": "a=b"}},
            "options": {"apply_source_context": false, "frame_order": "callee_first"}
        }))
        .unwrap();
        assert_eq!(request.platform.as_deref(), Some("node"));
        assert_eq!(request.source.unwrap().id.as_str(), "sentry:project");
        assert!(request.sources.is_empty());
        let frame = &request.stacktraces[0].frames[0];
        assert_eq!((frame.lineno, frame.colno), (1, Some(12)));
        assert_eq!(frame.platform.as_deref(), Some("javascript"));
        assert!(request.modules[0].parsed_debug_id().is_some());
        assert_eq!(request.release.as_deref(), Some("1.0"));
        assert!(request.scraping.verify_ssl, "verify_ssl defaults to true");
        assert_eq!(request.scraping.headers["Cookie"].expose(), "a=b");
        assert_eq!(
            request.options,
            JsRequestOptions {
                apply_source_context: false,
                frame_order: FrameOrder::CalleeFirst
            }
        );
        // Fields upstream does not know (`in_app`) are not echoed back.
        let echoed = serde_json::to_value(frame).unwrap();
        assert!(echoed.get("in_app").is_none());
    }

    #[test]
    fn defaults_and_the_old_scraping_switch() {
        let request: JsSymbolicationRequest = serde_json::from_value(json!({
            "sources": [{"type": "http", "id": "cdn", "url": "https://cdn.example.com/"}],
            "allow_scraping": false
        }))
        .unwrap();
        assert!(request.source.is_none());
        assert_eq!(request.sources.len(), 1);
        assert!(request.scraping.enabled);
        assert!(!request.effective_scraping().enabled);
        assert_eq!(request.options, JsRequestOptions::default());
        assert_eq!(request.options.frame_order, FrameOrder::CallerFirst);
        assert!(request.options.apply_source_context);
        assert_eq!(request.scraping.allowed_origins, ["*"]);
    }

    #[test]
    fn bad_fields_are_rejected() {
        let bad = [
            json!({"stacktraces": [{"frames": [{"lineno": 1}]}]}),
            json!({"scraping": {"allowed_origins": [], "headers": {}}}),
            json!({"modules": [{"type": "elf", "code_file": "a", "debug_id": "x"}]}),
            json!({"options": {"frame_order": "sideways"}}),
        ];
        for body in bad {
            assert!(
                serde_json::from_value::<JsSymbolicationRequest>(body.clone()).is_err(),
                "{body}"
            );
        }
    }

    #[test]
    fn frames_serialise_only_what_they_have() {
        let frame = JsFrame {
            abs_path: "app:///a.js".into(),
            lineno: 3,
            token_name: Some("hidden".into()),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&frame).unwrap(),
            json!({"abs_path": "app:///a.js", "lineno": 3, "data": {"symbolicated": false}})
        );
    }

    #[test]
    fn origins_serialise_as_upstream() {
        let key = FileKey::SourceMap {
            abs_path: Some("http://example.com/a.js.map".into()),
            debug_id: Some("5943c33d-70f5-499d-b4e1-9b5d5cac3781".parse().unwrap()),
        };
        let data = JsFrameData {
            sourcemap: Some("http://example.com/a.js.map".into()),
            sourcemap_origin: Some(CachedFileUri::Bundled(
                "sentry://project_debug_file/7".into(),
                key,
            )),
            resolved_with: Some(ResolvedWith::DebugId),
            symbolicated: true,
        };
        assert_eq!(
            serde_json::to_value(&data).unwrap(),
            json!({
                "sourcemap": "http://example.com/a.js.map",
                "sourcemap_origin": {"bundled": ["sentry://project_debug_file/7", {"source_map": {
                    "abs_path": "http://example.com/a.js.map",
                    "debug_id": "5943c33d-70f5-499d-b4e1-9b5d5cac3781"
                }}]},
                "resolved_with": "debug-id",
                "symbolicated": true
            })
        );
        let plain = [
            (CachedFileUri::Embedded, json!("embedded")),
            (
                CachedFileUri::IndividualFile("sentry://project_debug_file/2".into()),
                json!({"individual_file": "sentry://project_debug_file/2"}),
            ),
            (
                CachedFileUri::ScrapedFile("http://example.com/a.js".into()),
                json!({"scraped_file": "http://example.com/a.js"}),
            ),
        ];
        for (uri, want) in plain {
            assert_eq!(serde_json::to_value(&uri).unwrap(), want);
        }
        assert_eq!(
            serde_json::to_value(ResolvedWith::ReleaseOld).unwrap(),
            json!("release-old")
        );
    }

    #[test]
    fn errors_and_attempts_serialise_flat() {
        let errors = [
            JsModuleError {
                abs_path: "a".into(),
                kind: JsModuleErrorKind::InvalidLocation {
                    line: 0,
                    col: Some(0),
                },
            },
            JsModuleError {
                abs_path: "b".into(),
                kind: JsModuleErrorKind::MissingSourceContent {
                    source: "s".into(),
                    sourcemap: "m".into(),
                },
            },
            JsModuleError {
                abs_path: "c".into(),
                kind: JsModuleErrorKind::ScrapingDisabled,
            },
        ];
        assert_eq!(
            serde_json::to_value(errors).unwrap(),
            json!([
                {"abs_path": "a", "type": "invalid_location", "line": 0, "col": 0},
                {"abs_path": "b", "type": "missing_source_content", "source": "s", "sourcemap": "m"},
                {"abs_path": "c", "type": "scraping_disabled"}
            ])
        );
        let attempts = [
            JsScrapingAttempt::not_attempted("a"),
            JsScrapingAttempt::success("b"),
            JsScrapingAttempt::failure("c", JsScrapingFailureReason::Disabled, ""),
            JsScrapingAttempt {
                url: "d".into(),
                result: CacheError::Timeout(std::time::Duration::from_secs(5)).into(),
            },
        ];
        assert_eq!(
            serde_json::to_value(attempts).unwrap(),
            json!([
                {"url": "a", "status": "not_attempted"},
                {"url": "b", "status": "success"},
                {"url": "c", "status": "failure", "reason": "disabled"},
                {"url": "d", "status": "failure", "reason": "timeout", "details": "Timeout after 5s"}
            ])
        );
    }

    #[test]
    fn an_empty_response_has_only_the_stack_traces() {
        assert_eq!(
            serde_json::to_value(CompletedJsSymbolicationResponse::default()).unwrap(),
            json!({"stacktraces": [], "raw_stacktraces": []})
        );
    }
}
