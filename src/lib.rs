//! omnisym: one process that symbolicates crashes for every platform, speaking the
//! upstream Symbolicator's wire format. See `docs/architecture.md`.

pub mod cache;
pub mod config;
pub mod fetch;
pub mod native;
pub mod server;
pub mod service;
pub mod sources;
pub mod types;
