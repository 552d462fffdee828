//! Compatibility fronts: the protocols clients of other symbol services already speak,
//! each a thin adapter in its own file over the same lookup, fetch and caches as the
//! native endpoints (`native/`, `lookup/`, `cache/`). None of them looks files up or
//! builds caches itself.
//!
//! - `mozilla`: Mozilla's symbolication API (`POST /symbolicate/v5` and `/v4`), as
//!   Firefox's profiler and crash tools speak it.
//! - `proxy`: the symbol-server proxy (`GET`/`HEAD /proxy/<symstore path>`), upstream
//!   Symbolicator's `symstore_proxy` mode.
//! - `symcache_http`: SymCache over HTTP (`GET /symcache/v<version>/<debug_file>/<id>`),
//!   the protocol of Microsoft's SymCache HTTP server for this engine's SymCaches.
//! - `symbfile`: Elastic's profiler symbol uploads (`/api/symbols-ranges`,
//!   `/api/symbols-returnpads`).
//! - `debuginfod`: elfutils' debuginfod protocol (`GET`/`HEAD /buildid/<id>/...`), as
//!   gdb, perf and `debuginfod-find` speak it.
//! - `upload`: uploads into the store in Mozilla Tecken's protocol (`POST /upload/`)
//!   and Breakpad symupload's (`POST /symupload`), authorized by the store's tokens.
//! - `sentry_api`: the part of Sentry's web API that `sentry-cli` uploads debug files,
//!   ProGuard mappings and source map bundles through (chunk upload and assemble),
//!   into the store, authorized by the store's tokens.
//! - `access`: the bearer token and CORS policy in front of the reading fronts (not
//!   `symbfile`, `upload` and `sentry_api`, which have their own keys; the console, not
//!   a front, has its own login, `console/login.rs`).

pub mod access;
pub mod debuginfod;
pub mod mozilla;
pub mod proxy;
pub mod sentry_api;
pub mod symbfile;
pub mod symcache_http;
pub mod upload;

pub use debuginfod::Debuginfod;
pub use proxy::SymstoreProxy;
pub use symcache_http::SymCacheHttp;
