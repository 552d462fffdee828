//! omnisym: one process that symbolicates crashes for every platform, speaking the
//! upstream Symbolicator's wire format. See `docs/architecture.md`.

// The request futures nest the AWS SDK's deep future types; proving them `Send` needs
// more than the default 128 levels.
#![recursion_limit = "256"]

pub mod cache;
pub mod cli;
pub mod config;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod fleet;
pub mod js;
pub mod jvm;
pub mod lookup;
pub mod native;
pub mod objstore;
pub mod server;
pub mod service;
pub mod sources;
pub mod store;
pub mod telemetry;
pub mod types;
pub mod units;
