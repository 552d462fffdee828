//! Finding the files `/symbolicate-js` resolves frames with. Frame resolution asks
//! through [`JsLookup`] and gets the types here back, so it never fetches and can be
//! driven by files in memory (its tests, the fuzzer). What implements it for the
//! server is `RequestLookup` (`request.rs`): one request's search in upstream's order
//! (artifact bundles, release files, Sentry's artifact lookup, the request's own
//! sources, scraping) and its scraping attempts. What all requests share, the fetched
//! files, the SourceMapCaches built from them and Sentry's lookup answers, is
//! `JsFiles` (`files.rs`).

mod files;
mod request;
mod scopes;

use std::future::Future;
use std::sync::Arc;

use symbolic::common::DebugId;

use super::discovery::SourceMapUrl;
use super::interface::{CachedFileUri, ResolvedWith};
use super::mapping::JsMapping;
pub use super::text::SourceText;
use crate::error::CacheError;

pub(super) use files::JsFiles;
pub(super) use request::{LookupParams, RequestLookup};

/// Why the lookup has no file to hand over.
#[derive(Debug, Clone)]
pub enum FileError {
    /// Only the web could have had it, and the request does not allow scraping: frames
    /// then report `scraping_disabled` rather than a missing file.
    ScrapingDisabled,
    /// Nowhere had it, or fetching, reading or converting it failed.
    Cache(CacheError),
}

impl From<CacheError> for FileError {
    fn from(err: CacheError) -> Self {
        FileError::Cache(err)
    }
}

/// A file the lookup found, or why not, and where from.
#[derive(Debug, Clone)]
pub struct Found<T> {
    /// `None` when no place had the file and none could be asked for it: a source map
    /// looked for by debug id alone has no URL to scrape.
    pub uri: Option<CachedFileUri>,
    pub entry: Result<T, FileError>,
    pub resolved_with: ResolvedWith,
}

/// A minified file as the lookup found it.
#[derive(Debug, Clone)]
pub struct MinifiedSource {
    /// Empty for Hermes bytecode bundles, which carry no text worth showing.
    pub contents: SourceText,
    /// From the file's headers or its comment (see [`super::discovery`]).
    pub sourcemap_url: Option<SourceMapUrl>,
    pub debug_id: Option<DebugId>,
}

/// Everything the lookup found for one `abs_path`.
#[derive(Debug, Clone)]
pub struct JsModuleFiles {
    pub minified_source: Found<MinifiedSource>,
    /// `None` when the minified file names no source map and has no debug id: the
    /// frame is then left as it is. Otherwise what resolves positions with the
    /// minified file and its map (their SourceMapCache, or the map itself while that
    /// does not exist yet), or why there is none.
    pub mapping: Option<Found<JsMapping>>,
}

impl JsModuleFiles {
    /// What original sources are joined onto: the source map's URL, or for inline and
    /// debug-id-only maps the minified file's own.
    pub fn source_file_base<'a>(&'a self, abs_path: &'a str) -> &'a str {
        match &self.minified_source.entry {
            Ok(MinifiedSource {
                sourcemap_url: Some(SourceMapUrl::Remote(url)),
                ..
            }) => url,
            _ => abs_path,
        }
    }

    /// The URL `data.sourcemap` and errors name: the map's remote URL, else the
    /// minified file's `abs_path`.
    pub fn sourcemap_label(&self, abs_path: &str) -> String {
        match &self.minified_source.entry {
            Ok(source) => source
                .sourcemap_url
                .as_ref()
                .and_then(SourceMapUrl::remote_url)
                .unwrap_or(abs_path)
                .to_owned(),
            Err(_) => abs_path.to_owned(),
        }
    }
}

/// What frame resolution needs from the fetching side. An implementation fetches each
/// file once per request and remembers it (and records `scraping_attempts`).
pub trait JsLookup {
    /// The minified file behind `abs_path` (already without an `async ` prefix), its
    /// source map found by reference or by debug id, and the SourceMapCache of both.
    /// The order of lookups is upstream's (see the module docs of `lookup.rs` there):
    /// bundles by debug id, bundles by candidate URL, individual artifacts, a fresh
    /// artifact-lookup query, then (omnisym's addition) the request's own sources, and
    /// scraping last.
    fn module(&mut self, abs_path: &str) -> impl Future<Output = Arc<JsModuleFiles>> + Send;

    /// An original source file by its absolute URL (a `sources` entry joined onto
    /// [`JsModuleFiles::source_file_base`]), for context when the map carries none.
    fn source_file(
        &mut self,
        abs_path: &str,
    ) -> impl Future<Output = Result<SourceText, FileError>> + Send;
}
