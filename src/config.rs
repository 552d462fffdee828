//! YAML configuration: keys, defaults and validation. Keys follow the upstream
//! Symbolicator where the concept is the same, so an existing self-hosted config file
//! works unchanged; keys omnisym does not know are accepted with a warning naming them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cache::{CachesConfig, SharedCacheConfig};
use crate::fetch::FetchConfig;
use crate::sources::SourceConfig;
use crate::telemetry::MetricsConfig;
use crate::units::deserialize_duration;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Auto,
    Pretty,
    Simplified,
    Json,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct LoggingConfig {
    pub level: String,
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: "info".into(),
            format: LogFormat::Auto,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct Config {
    pub bind: SocketAddr,
    pub cache_dir: PathBuf,
    pub connect_to_reserved_ips: bool,
    pub max_concurrent_requests: usize,
    /// Largest JSON request body accepted, in bytes (larger: 413).
    pub max_request_body_size: usize,
    /// Largest crash file (minidump, Apple crash report) accepted, in bytes, whether
    /// uploaded or fetched from a `storage_url`, before and after decompression
    /// (larger: 413 for uploads, a `failed` answer for fetched ones).
    pub max_crash_file_size: u64,
    pub logging: LoggingConfig,
    pub metrics: MetricsConfig,
    pub caches: CachesConfig,
    /// A cache of derived files shared by a fleet of replicas.
    pub shared_cache: Option<SharedCacheConfig>,
    /// Sources used when a request carries no `sources` key at all.
    pub sources: Vec<SourceConfig>,
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_timeout: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub head_timeout: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub streaming_timeout: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub max_download_timeout: Duration,
    /// Largest debug file downloaded, in bytes (compressed and decompressed).
    pub max_download_size: u64,
    /// Downloads from one source running at once (omnisym only).
    pub max_concurrent_downloads_per_source: usize,
}

impl Default for Config {
    fn default() -> Self {
        let fetch = FetchConfig::default();
        Config {
            bind: "127.0.0.1:3021".parse().expect("valid default address"),
            cache_dir: PathBuf::from("omnisym-cache"),
            connect_to_reserved_ips: false,
            max_concurrent_requests: 200,
            max_request_body_size: 5 * 1024 * 1024,
            // Upstream accepts 100 MiB bodies on its upload endpoints.
            max_crash_file_size: 100 * 1024 * 1024,
            logging: LoggingConfig::default(),
            metrics: MetricsConfig::default(),
            caches: CachesConfig::default(),
            shared_cache: None,
            sources: Vec::new(),
            connect_timeout: fetch.connect_timeout,
            head_timeout: fetch.head_timeout,
            streaming_timeout: fetch.streaming_timeout,
            max_download_timeout: fetch.max_download_timeout,
            max_download_size: fetch.max_download_size,
            max_concurrent_downloads_per_source: fetch.max_concurrent_downloads_per_source,
        }
    }
}

/// A config that could not be used, with the key and line at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config{location}: key `{key}`: {message}")]
    Invalid {
        key: String,
        location: String,
        message: String,
    },
    #[error("invalid config: {0}")]
    Semantic(String),
}

impl Config {
    /// Parses YAML; returns the config and the keys that were ignored, so the caller
    /// can warn once logging is set up.
    pub fn from_yaml(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
        if text.trim().is_empty() {
            return Ok((Config::default(), Vec::new()));
        }
        let mut ignored = Vec::new();
        let de = serde_yaml::Deserializer::from_str(text);
        let mut on_ignored = |path: serde_ignored::Path<'_>| ignored.push(path.to_string());
        let de = serde_ignored::Deserializer::new(de, &mut on_ignored);
        let config: Config = serde_path_to_error::deserialize(de).map_err(|err| {
            let key = err.path().to_string();
            let inner = err.into_inner();
            let location = inner
                .location()
                .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
                .unwrap_or_default();
            ConfigError::Invalid {
                key,
                location,
                message: strip_location(&inner.to_string()),
            }
        })?;
        config.validate()?;
        Ok((config, ignored))
    }

    pub fn from_file(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_concurrent_requests == 0 {
            return Err(ConfigError::Semantic(
                "max_concurrent_requests must be at least 1".into(),
            ));
        }
        if self.max_concurrent_downloads_per_source == 0 {
            return Err(ConfigError::Semantic(
                "max_concurrent_downloads_per_source must be at least 1".into(),
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for source in &self.sources {
            if !ids.insert(source.id().to_string()) {
                return Err(ConfigError::Semantic(format!(
                    "sources: duplicate source id `{}`",
                    source.id()
                )));
            }
        }
        Ok(())
    }

    pub fn fetch_config(&self) -> FetchConfig {
        FetchConfig {
            connect_timeout: self.connect_timeout,
            head_timeout: self.head_timeout,
            streaming_timeout: self.streaming_timeout,
            max_download_timeout: self.max_download_timeout,
            max_download_size: self.max_download_size,
            connect_to_reserved_ips: self.connect_to_reserved_ips,
            max_concurrent_downloads_per_source: self.max_concurrent_downloads_per_source,
            sentry_index_capacity: self.caches.in_memory.sentry_index_capacity,
            sentry_index_ttl: self.caches.in_memory.sentry_index_ttl,
            s3_client_capacity: self.caches.in_memory.s3_client_capacity,
            gcs_token_capacity: self.caches.in_memory.gcs_token_capacity,
            ..FetchConfig::default()
        }
    }
}

/// serde_yaml appends "at line X column Y" itself; we report the location separately.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(idx) => message[..idx].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::parse_size;

    #[test]
    fn empty_config_is_default() {
        let (config, ignored) = Config::from_yaml("").unwrap();
        assert_eq!(config.bind.port(), 3021);
        assert_eq!(config.max_concurrent_requests, 200);
        assert!(ignored.is_empty());
    }

    #[test]
    fn upstream_keys_and_durations() {
        let yaml = "bind: 0.0.0.0:3021\ncache_dir: /data\nsentry_dsn: https://x@y/1\ncaches:\n  downloaded:\n    max_unused_for: 1w\n    retry_misses_after: 5m\n  derived:\n    retry_malformed_after: 3600\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert_eq!(ignored, vec!["sentry_dsn".to_string()]);
        assert_eq!(
            config.caches.downloaded.max_unused_for,
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(
            config.caches.downloaded.retry_misses_after,
            Duration::from_secs(300)
        );
        assert_eq!(
            config.caches.derived.retry_malformed_after,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn source_fetch_keys() {
        let yaml = "max_concurrent_downloads_per_source: 4\ncaches:\n  in_memory:\n    sentry_index_ttl: 5m\n    s3_client_capacity: 7\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let fetch = config.fetch_config();
        assert_eq!(fetch.max_concurrent_downloads_per_source, 4);
        assert_eq!(fetch.sentry_index_ttl, Duration::from_secs(300));
        assert_eq!(fetch.s3_client_capacity, 7);
        assert_eq!(fetch.gcs_token_capacity, 100);
        let err = Config::from_yaml("max_concurrent_downloads_per_source: 0\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("max_concurrent_downloads_per_source")
        );
    }

    #[test]
    fn cache_lifecycle_keys() {
        let yaml = "caches:\n  downloaded:\n    max_unused_for: {days: 3, hours: 2}\n  diagnostics:\n    retention: 1w\n  max_disk_size: 50GB\n  cleanup_interval: 5m\n  in_memory:\n    capacity: 512MiB\nshared_cache:\n  max_upload_queue_size: 7\n  s3:\n    bucket: b\n    region: [local, \"http://127.0.0.1:9000\"]\n    access_key: k\n    secret_key: s\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let caches = &config.caches;
        assert_eq!(
            caches.downloaded.max_unused_for,
            Duration::from_secs(3 * 86400 + 7200)
        );
        assert_eq!(caches.diagnostics.retention, Duration::from_secs(7 * 86400));
        assert_eq!(caches.max_disk_size, Some(50_000_000_000));
        assert_eq!(caches.cleanup_interval, Some(Duration::from_secs(300)));
        assert_eq!(caches.in_memory.capacity, 512 << 20);
        let shared = config.shared_cache.unwrap();
        assert_eq!(shared.max_upload_queue_size, 7);
        assert_eq!(shared.max_concurrent_uploads, 20);
        assert!(matches!(
            shared.backend,
            crate::cache::SharedCacheBackendConfig::S3(ref s3) if s3.bucket == "b"
        ));

        let (config, _) = Config::from_yaml("caches:\n  cleanup_interval: 0\n").unwrap();
        assert_eq!(config.caches.cleanup_interval, None);
        assert_eq!(
            Config::default().caches.cleanup_interval,
            Some(Duration::from_secs(3600))
        );
        let err = Config::from_yaml("caches:\n  max_disk_size: 5 parsecs\n").unwrap_err();
        assert!(err.to_string().contains("caches.max_disk_size"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("50GB"), Ok(50_000_000_000));
        assert_eq!(parse_size("1.5 kb"), Ok(1500));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("123"), Ok(123));
        assert!(parse_size("GB").is_err());
        assert!(parse_size("1 XB").is_err());
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let yaml = "bind: 127.0.0.1:1\ncaches:\n  derived:\n    max_unused_for: soon\n";
        let err = Config::from_yaml(yaml).unwrap_err().to_string();
        assert!(err.contains("caches.derived.max_unused_for"), "{err}");
        assert!(err.contains("line 4"), "{err}");

        let err = Config::from_yaml("max_concurrent_requests: many\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_concurrent_requests"), "{err}");
    }
}
