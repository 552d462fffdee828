//! The `store` section of the config: which backend keeps uploaded symbols, who may
//! upload and read, how projects map to scopes, how large a file may be and how long
//! files are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::ChunkUploadConfig;
use crate::objstore::{GcsStoreConfig, ObjectStoreConfig, S3StoreConfig};
use crate::sources::Secret;
use crate::units::{
    deserialize_duration, deserialize_limit, deserialize_opt_duration, deserialize_size,
};

/// What a store token allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    /// Upload; implies read.
    Write,
}

/// One token of `store.tokens`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreToken {
    pub token: Secret,
    pub access: Access,
}

/// The backend, tagged by `type` (`filesystem`, `s3`, `gcs`); the same settings as the
/// shared cache's blocks.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum StoreBackend {
    Filesystem { path: PathBuf },
    S3(S3StoreConfig),
    Gcs(GcsStoreConfig),
}

impl StoreBackend {
    pub fn object_store(&self) -> ObjectStoreConfig {
        match self {
            StoreBackend::Filesystem { path } => {
                ObjectStoreConfig::Filesystem { path: path.clone() }
            }
            StoreBackend::S3(s3) => ObjectStoreConfig::S3(s3.clone()),
            StoreBackend::Gcs(gcs) => ObjectStoreConfig::Gcs(gcs.clone()),
        }
    }
}

/// The `store` section. Without a backend there is no store.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct StoreConfig {
    pub backend: Option<StoreBackend>,
    /// Largest file one upload may bring (its objects, or a bundle, whole); past it:
    /// 413. A store on S3 or GCS hands files back through downloads, which
    /// `max_download_size` caps: keep this at or below it.
    #[serde(deserialize_with = "deserialize_size")]
    pub max_file_size: u64,
    /// Tokens of the upload protocols, separate from `fronts.token`.
    pub tokens: Vec<StoreToken>,
    /// sentry-cli's `org/project` to the request scope whose requests see its files
    /// (Sentry sends a project's id as the scope). Unmapped projects share the team's
    /// namespace.
    pub scopes: BTreeMap<String, String>,
    /// Opt-in: files superseded by a better upload, and files older than this, are
    /// removed. `null` (the default): nothing uploaded is ever removed.
    #[serde(deserialize_with = "deserialize_opt_duration")]
    pub retention: Option<Duration>,
    /// How often the retention sweep runs, when `retention` is set.
    #[serde(deserialize_with = "deserialize_duration")]
    pub sweep_interval: Duration,
    /// Files one sweep looks at, at most: a sweep's work is bounded, the next goes on.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_sweep_files: usize,
    /// Hosts Tecken's upload-by-URL may fetch from.
    pub upload_url_hosts: Vec<String>,
    /// Entries of one uploaded zip (a Tecken zip, a sentry-cli artifact bundle),
    /// directories and ignored files included.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_archive_entries: usize,
    /// How many times its compressed size a zip entry over 1 MiB may unpack to.
    pub max_archive_ratio: u64,
    /// Where uploads to an S3 or GCS store wait on local disk before they are
    /// published; default `<cache_dir>/store-staging` (cache cleanup does not touch
    /// it). A directory store stages inside itself.
    pub staging_dir: Option<PathBuf>,
    /// sentry-cli's chunk upload: what the server announces and enforces.
    pub chunk_upload: ChunkUploadConfig,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: None,
            // `max_download_size`'s default: what a bucket store can hand back.
            max_file_size: 15 << 30,
            tokens: Vec::new(),
            scopes: BTreeMap::new(),
            retention: None,
            sweep_interval: Duration::from_secs(3600),
            max_sweep_files: 100_000,
            upload_url_hosts: Vec::new(),
            // Large web apps upload a few thousand files in one bundle, a Firefox
            // build's symbols zip holds about as many.
            max_archive_entries: 100_000,
            // Minified JS compresses about 5:1, source maps up to 20:1, Breakpad text
            // about 10:1; 250 leaves room and still stops a bomb.
            max_archive_ratio: 250,
            staging_dir: None,
            chunk_upload: ChunkUploadConfig::default(),
        }
    }
}

impl StoreConfig {
    /// Why the section cannot work, naming the key, if it cannot.
    pub fn check(&self, cache_dir: &Path, max_download_size: u64) -> Result<(), String> {
        if self.max_file_size == 0 {
            return Err("store.max_file_size must be at least 1 byte".into());
        }
        self.chunk_upload.check()?;
        if self.max_archive_entries == 0 || self.max_archive_ratio == 0 {
            return Err(
                "store.max_archive_entries and store.max_archive_ratio must be at least 1".into(),
            );
        }
        if self.max_sweep_files == 0 {
            return Err("store.max_sweep_files must be at least 1".into());
        }
        if self.retention.is_some() && self.sweep_interval.is_zero() {
            return Err(
                "store.sweep_interval must be longer than 0 when store.retention is set".into(),
            );
        }
        for token in &self.tokens {
            if token.token.is_empty() {
                return Err("store.tokens: a token is empty".into());
            }
        }
        for (project, scope) in &self.scopes {
            let mut parts = project.split('/');
            let well_formed = matches!(
                (parts.next(), parts.next(), parts.next()),
                (Some(org), Some(name), None) if !org.is_empty() && !name.is_empty()
            );
            if !well_formed {
                return Err(format!(
                    "store.scopes: `{project}` is not an org/project pair (one `/` between two names)"
                ));
            }
            if scope.is_empty() || scope == "global" {
                return Err(format!(
                    "store.scopes.{project}: `{scope}` is not a scope (the global scope is the team's namespace)"
                ));
            }
        }
        for host in &self.upload_url_hosts {
            if host.is_empty() || host.contains(['/', ' ']) {
                return Err(format!(
                    "store.upload_url_hosts: `{host}` is not a host name"
                ));
            }
        }
        match &self.backend {
            Some(StoreBackend::Filesystem { path }) => {
                if path.as_os_str().is_empty() {
                    return Err("store.backend.path is empty".into());
                }
                // Cache cleanup owns `cache_dir`'s kinds: a store there could be taken
                // for cache files.
                if path == cache_dir {
                    return Err(
                        "store.backend.path must not be cache_dir itself: the store is not a cache"
                            .into(),
                    );
                }
            }
            Some(StoreBackend::S3(_) | StoreBackend::Gcs(_))
                if self.max_file_size > max_download_size =>
            {
                return Err(format!(
                    "store.max_file_size ({}) is larger than max_download_size ({max_download_size}): \
                     a bucket store could not hand such a file back",
                    self.max_file_size
                ));
            }
            _ => {}
        }
        Ok(())
    }
}
