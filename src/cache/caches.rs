use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::budget::{ConversionBudget, memory_share};
use super::shared::SharedCache;
use super::{CacheConfig, CachesConfig, SharedCacheConfig};
use super::{CacheItemRequest, CacheKind, Cacher};
use crate::fetch::Downloader;

/// Whether files of a kind came from sources or were computed from such files; decides
/// which lifetime rules apply, what goes to the shared cache, and what a full disk
/// gives up first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Downloaded,
    Derived,
}

/// A cache kind some `Cacher` serves.
#[derive(Clone)]
pub struct RegisteredKind {
    pub kind: CacheKind,
    pub family: Family,
}

/// Builds the `Cacher` of every cache kind from the config: where files go, which
/// lifetime rules apply, and each kind's share of the in-memory budget. Remembers every
/// kind it built, so cleanup knows the live versions.
pub struct Caches {
    cache_dir: PathBuf,
    downloaded: CacheConfig,
    derived: CacheConfig,
    memory_capacity: u64,
    /// Identifies this process, so "malformed" verdicts do not outlive a restart.
    boot_id: Arc<str>,
    shared: Option<Arc<SharedCache>>,
    kinds: Mutex<Vec<RegisteredKind>>,
    conversions: Arc<ConversionBudget>,
}

impl Caches {
    /// Needs a tokio runtime when a shared cache is configured (its upload worker).
    pub fn new(
        cache_dir: &Path,
        config: &CachesConfig,
        shared_cache: Option<&SharedCacheConfig>,
        downloader: &Downloader,
    ) -> anyhow::Result<Self> {
        let shared = match shared_cache {
            Some(shared) => Some(Arc::new(SharedCache::new(shared, downloader)?)),
            None => None,
        };
        Ok(Caches {
            cache_dir: cache_dir.to_owned(),
            downloaded: config.downloaded.clone(),
            derived: config.derived.clone(),
            memory_capacity: config.in_memory.capacity,
            boot_id: uuid::Uuid::new_v4().to_string().into(),
            shared,
            kinds: Mutex::new(Vec::new()),
            conversions: Arc::new(ConversionBudget::new(config.conversion_budget)),
        })
    }

    /// A cache of files fetched from sources. They stay local: they are large, and any
    /// replica can fetch them from the source as cheaply as from a shared store.
    pub fn downloaded<R: CacheItemRequest>(&self, kind: CacheKind) -> Cacher<R> {
        self.build(kind, Family::Downloaded)
    }

    /// A cache of files computed from fetched ones; shared between replicas when a
    /// shared cache is configured.
    pub fn derived<R: CacheItemRequest>(&self, kind: CacheKind) -> Cacher<R> {
        self.build(kind, Family::Derived)
    }

    /// Every kind's share of the memory budget comes from one table ([`memory_share`]).
    fn build<R: CacheItemRequest>(&self, kind: CacheKind, family: Family) -> Cacher<R> {
        let memory = memory_share(self.memory_capacity, kind.name);
        let (config, shared) = match family {
            Family::Downloaded => (&self.downloaded, None),
            Family::Derived => (&self.derived, self.shared.clone()),
        };
        let cacher = Cacher::new(
            kind,
            &self.cache_dir,
            config.clone(),
            memory,
            self.boot_id.clone(),
        )
        .with_shared(shared);
        self.kinds
            .lock()
            .unwrap()
            .push(RegisteredKind { kind, family });
        cacher
    }

    /// The one budget every conversion and lazy read takes its memory from.
    pub fn conversions(&self) -> Arc<ConversionBudget> {
        self.conversions.clone()
    }

    /// Every kind built so far.
    pub fn kinds(&self) -> Vec<RegisteredKind> {
        self.kinds.lock().unwrap().clone()
    }
}
