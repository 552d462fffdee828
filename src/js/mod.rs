//! JavaScript symbolication: `/symbolicate-js`. Three parts, each using only the ones
//! after it: `service` wires a request to a lookup and answers; [`symbolicate`]
//! resolves frames with the files a lookup hands over (naming, paths, source context,
//! errors) and never fetches; [`lookup`] finds those files (Sentry's artifact lookup,
//! the request's own sources, scraping) through the shared lookup and fetch layers.
//! Beneath them the pieces without I/O that upstream's rules live in: the wire types
//! ([`interface`]), SourceMapCaches ([`sourcemap_cache`]) and what answers before one
//! exists ([`mapping`]), artifact bundles
//! ([`bundle`]), finding a file's source map and debug id ([`discovery`]), candidate
//! URLs and joining ([`paths`]), allowed origins ([`origins`]) and function names
//! ([`names`]), and the text of a file with its lines ([`text`]).

pub mod bundle;
pub mod discovery;
pub mod interface;
pub mod lookup;
pub mod mapping;
pub mod names;
pub mod origins;
pub mod paths;
mod service;
pub mod sourcemap_cache;
pub mod symbolicate;
pub mod text;

pub use interface::JsSymbolicationRequest;
pub use service::JsService;
