//! The `caches` section of the config file: lifetime rules per family of cache files,
//! the in-memory budget, the disk budget and how often cleanup runs.

use std::time::Duration;

use serde::Deserialize;

use crate::units::{
    deserialize_duration, deserialize_opt_duration, deserialize_opt_size, deserialize_size,
};

/// Lifetime rules of one family of cache files (see `docs/architecture.md`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct CacheConfig {
    #[serde(deserialize_with = "deserialize_duration")]
    pub max_unused_for: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub retry_misses_after: Duration,
    /// Misses in the global scope (files of public sources): upstream's key.
    #[serde(deserialize_with = "deserialize_duration")]
    pub retry_misses_after_public: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub retry_malformed_after: Duration,
    /// Transient failures (timeouts, 5xx) are remembered only this long, so a flapping
    /// symbol server is not hammered, yet recovers quickly.
    #[serde(deserialize_with = "deserialize_duration")]
    pub retry_errors_after: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_unused_for: Duration::from_secs(7 * 24 * 3600),
            retry_misses_after: Duration::from_secs(3600),
            retry_misses_after_public: Duration::from_secs(24 * 3600),
            retry_malformed_after: Duration::from_secs(24 * 3600),
            retry_errors_after: Duration::from_secs(60),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct InMemoryConfig {
    /// Bytes of parsed cache items (SymCaches, object metadata) kept in memory. The items
    /// are memory-mapped, so this bounds address space and page cache pressure, not heap.
    #[serde(deserialize_with = "deserialize_size")]
    pub capacity: u64,
    /// Sentry debug-file search answers kept (per query and token), their bytes in all
    /// (omnisym only), and how long.
    pub sentry_index_capacity: u64,
    #[serde(deserialize_with = "deserialize_size")]
    pub sentry_index_max_bytes: u64,
    #[serde(deserialize_with = "deserialize_duration")]
    pub sentry_index_ttl: Duration,
    /// S3 clients kept, one per region, endpoint and credentials.
    pub s3_client_capacity: u64,
    /// GCS clients kept, one per credentials, endpoint and access; each holds its token.
    pub gcs_token_capacity: u64,
    /// How long the outcome of looking up a module's files (every candidate, what each
    /// holds, the one chosen) is reused for the same sources, module, scope and
    /// purpose, and how many outcomes are kept (omnisym only). Within that time a
    /// candidate that appears or expires on a source is seen late by at most this much;
    /// `0` looks every module up afresh.
    #[serde(deserialize_with = "deserialize_duration")]
    pub lookup_reuse: Duration,
    pub lookup_reuse_capacity: u64,
    /// Artifact bundles kept opened (their zip directory and manifest parsed), and the
    /// bytes of files read out of them kept inflated (omnisym only). Opening a bundle and
    /// inflating its files for every `/symbolicate-js` request costs a third of its work.
    pub artifact_bundles: u64,
    #[serde(deserialize_with = "deserialize_size")]
    pub artifact_bundle_files: u64,
    /// What native symbolication remembers across requests (omnisym only): the frames
    /// that addresses in SymCaches resolved to, as slots of a direct-mapped table and the
    /// bytes of names and paths they may hold, and the bytes of demangled names. Looking
    /// an address up again (its path joined, its names demangled) is most of a warm
    /// `/symbolicate` request's own work.
    pub native_frames: u64,
    #[serde(deserialize_with = "deserialize_size")]
    pub native_frame_bytes: u64,
    #[serde(deserialize_with = "deserialize_size")]
    pub demangled_names: u64,
}

impl Default for InMemoryConfig {
    fn default() -> Self {
        InMemoryConfig {
            capacity: 2 * 1024 * 1024 * 1024,
            // The next five are `fetch::FetchConfig`'s, whose defaults they repeat (the
            // config's tests hold the two equal): this section is where the file keeps
            // them, and the cache imports nothing of the downloads.
            sentry_index_capacity: 100_000,
            sentry_index_max_bytes: 64 * 1024 * 1024,
            sentry_index_ttl: Duration::from_secs(3600),
            s3_client_capacity: 100,
            gcs_token_capacity: 100,
            lookup_reuse: Duration::from_secs(1),
            lookup_reuse_capacity: 10_000,
            artifact_bundles: 100,
            artifact_bundle_files: 32 * 1024 * 1024,
            native_frames: 64 * 1024,
            native_frame_bytes: 32 * 1024 * 1024,
            demangled_names: 10 * 1024 * 1024,
        }
    }
}

/// Upstream's `caches.diagnostics`: how long crash files kept for diagnosis live. omnisym
/// keeps uploaded crash files only while their request runs (under `cache_dir/tmp`), so
/// `retention` bounds how long a leftover of a killed process may stay there.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct DiagnosticsCacheConfig {
    #[serde(deserialize_with = "deserialize_duration")]
    pub retention: Duration,
}

impl Default for DiagnosticsCacheConfig {
    fn default() -> Self {
        DiagnosticsCacheConfig {
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct CachesConfig {
    pub downloaded: CacheConfig,
    pub derived: CacheConfig,
    pub diagnostics: DiagnosticsCacheConfig,
    pub in_memory: InMemoryConfig,
    /// Disk budget of `cache_dir` (omnisym only); the periodic cleanup evicts the least
    /// recently used files beyond it. `None`: only the time rules apply.
    #[serde(deserialize_with = "deserialize_opt_size")]
    pub max_disk_size: Option<u64>,
    /// How often the server applies the cleanup rules itself; `0` turns it off (then
    /// run `omnisym cleanup` from cron, as upstream requires).
    #[serde(deserialize_with = "deserialize_opt_duration")]
    pub cleanup_interval: Option<Duration>,
    /// Bytes of input files being converted into caches, or read lazily, at once
    /// (omnisym only); see `budget::ConversionBudget`.
    #[serde(deserialize_with = "deserialize_size")]
    pub conversion_budget: u64,
}

impl Default for CachesConfig {
    fn default() -> Self {
        CachesConfig {
            downloaded: CacheConfig::default(),
            derived: CacheConfig::default(),
            diagnostics: DiagnosticsCacheConfig::default(),
            in_memory: InMemoryConfig::default(),
            max_disk_size: None,
            // Upstream's `cache_cleanup_interval`.
            cleanup_interval: Some(Duration::from_secs(900)),
            // Four conversions of a 256 MiB debug file at once, each peaking near 1.3 GiB.
            conversion_budget: 1024 * 1024 * 1024,
        }
    }
}
