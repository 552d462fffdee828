//! JavaScript symbolication: everything `/symbolicate-js` needs that does not fetch.
//! The wire types, SourceMapCaches (built from a minified file and its source map),
//! reading artifact bundles, discovering a file's source map and debug id, the URL
//! rules of upstream's lookup (candidate URLs, joining, allowed origins), and resolving
//! frames with the files a lookup found, including function naming and source context.
//! `service`, `lookup` and `files` fetch those files (Sentry's artifact lookup, the request's own
//! sources, scraping) through the shared lookup and fetch layers and hand them over
//! through [`symbolicate::JsLookup`].

pub mod bundle;
pub mod discovery;
mod files;
pub mod interface;
mod lookup;
pub mod names;
pub mod origins;
pub mod paths;
mod service;
pub mod sourcemap_cache;
pub mod symbolicate;

pub use interface::JsSymbolicationRequest;
pub use service::JsService;
