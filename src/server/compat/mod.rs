//! Compatibility fronts: the protocols of other symbol services, so that their existing
//! clients can talk to this server. Each is a thin adapter in its own file that turns
//! its protocol into the same lookups, fetches and caches the native endpoints use
//! (`native/`, `lookup/`, `cache/`); none looks anything up on its own.
//!
//! - `mozilla`: Mozilla's symbolication API (`POST /symbolicate/v5` and `/v4`), as
//!   Firefox's profiler and crash tools speak it.

pub mod mozilla;
