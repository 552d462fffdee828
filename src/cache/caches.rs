use std::path::PathBuf;
use std::sync::Arc;

use super::{CacheItemRequest, CacheKind, Cacher};
use crate::config::{CacheConfig, Config};

/// Builds the `Cacher` of every cache kind from the config: where files go, which
/// lifetime rules apply, and each kind's share of the in-memory budget.
pub struct Caches {
    cache_dir: PathBuf,
    downloaded: CacheConfig,
    derived: CacheConfig,
    memory_capacity: u64,
    /// Identifies this process, so "malformed" verdicts do not outlive a restart.
    boot_id: Arc<str>,
}

impl Caches {
    pub fn from_config(config: &Config) -> Self {
        Caches {
            cache_dir: config.cache_dir.clone(),
            downloaded: config.caches.downloaded.clone(),
            derived: config.caches.derived.clone(),
            memory_capacity: config.caches.in_memory.capacity,
            boot_id: uuid::Uuid::new_v4().to_string().into(),
        }
    }

    /// `num/den` of the in-memory budget, in bytes.
    pub fn memory_share(&self, num: u64, den: u64) -> u64 {
        self.memory_capacity / den * num
    }

    /// A cache of files fetched from sources.
    pub fn downloaded<R: CacheItemRequest>(&self, kind: CacheKind, memory: u64) -> Cacher<R> {
        Cacher::new(
            kind,
            &self.cache_dir,
            self.downloaded.clone(),
            memory,
            self.boot_id.clone(),
        )
    }

    /// A cache of files computed from fetched ones.
    pub fn derived<R: CacheItemRequest>(&self, kind: CacheKind, memory: u64) -> Cacher<R> {
        Cacher::new(
            kind,
            &self.cache_dir,
            self.derived.clone(),
            memory,
            self.boot_id.clone(),
        )
    }
}
