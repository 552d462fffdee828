//! The end-to-end suite: every test here starts the real `omnisym` binary (or runs its
//! command-line tools) on loopback and talks to it from outside. One module per area,
//! all in one test binary: one link step instead of one per file, and the helpers in
//! one place (`tests/common`, shared with the test binaries kept apart: `load.rs`, which
//! loads the machine on purpose and raises this process's open-file limit, and
//! `fuzz_regressions.rs`, which counts panics process-wide).
//!
//! Run one area with `cargo test --test integration caching::`; scripts/fault-suite.sh
//! and scripts/soak.sh select theirs the same way.

#[path = "../common/mod.rs"]
mod common;

mod apk;
mod bigfiles;
mod caching;
mod cli;
mod conformance;
mod console_api;
mod console_browser;
mod debuginfod;
mod deploy;
mod docker;
mod faults;
mod fleet;
mod hostile_clients;
mod js;
mod jvm;
mod large_files;
mod large_minidump;
mod logging;
mod metrics;
mod minidump;
mod mozilla_api;
mod operations;
mod request_limits;
mod secondary_inputs;
mod self_reporting;
mod sentry_cli;
mod slow_links;
mod soak;
mod sort;
mod source_context;
mod sources;
mod stackwalk;
mod store;
mod symbfile;
mod symbfile_shared;
mod symbfile_store;
mod symbolicate;
mod symcache_http;
mod symstore_proxy;
mod tecken_download;
mod untrusted_sources;
mod uploads;
mod wasm;
