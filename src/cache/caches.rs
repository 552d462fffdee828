//! `Caches`: the one place that turns the config into each kind's `Cacher` (directory,
//! lifetime rules, memory share, shared cache) and holds what all conversions share
//! (the conversion budget, an observer of conversions).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::budget::ConversionBudget;
use super::derived::ConversionObserver;
use super::kinds::{CacheKind, Family};
use super::shared::SharedCache;
use super::{CacheConfig, CachesConfig};
use super::{CacheItemRequest, Cacher};

/// Builds the `Cacher` of every cache kind from the config: where files go, which
/// lifetime rules apply, and each kind's share of the in-memory budget.
pub struct Caches {
    cache_dir: PathBuf,
    downloaded: CacheConfig,
    derived: CacheConfig,
    memory_capacity: u64,
    /// `caches.in_memory.lookup_reuse` and its capacity.
    lookup_reuse: (Duration, u64),
    /// Identifies this process, so "malformed" verdicts do not outlive a restart.
    boot_id: Arc<str>,
    shared: Option<Arc<SharedCache>>,
    conversions: Arc<ConversionBudget>,
    conversion_observer: Option<Arc<dyn ConversionObserver>>,
}

impl Caches {
    /// `shared`: the derived kinds and original debug files are shared with it too.
    pub fn new(cache_dir: &Path, config: &CachesConfig, shared: Option<SharedCache>) -> Self {
        Caches {
            cache_dir: cache_dir.to_owned(),
            downloaded: config.downloaded.clone(),
            derived: config.derived.clone(),
            memory_capacity: config.in_memory.capacity,
            lookup_reuse: (
                config.in_memory.lookup_reuse,
                config.in_memory.lookup_reuse_capacity,
            ),
            boot_id: uuid::Uuid::new_v4().to_string().into(),
            shared: shared.map(Arc::new),
            conversions: Arc::new(
                ConversionBudget::new(config.conversion_budget)
                    .with_spill_dir(cache_dir.join(super::cleanup::TMP_DIR)),
            ),
            conversion_observer: None,
        }
    }

    /// Caches whose conversions are reported to `observer` (the server installs none).
    pub fn with_conversion_observer(mut self, observer: Arc<dyn ConversionObserver>) -> Self {
        self.conversion_observer = Some(observer);
        self
    }

    /// The cache of `kind`, one of the table in [`kinds`](super::kinds): its family picks
    /// the lifetime rules, [`CacheKind::is_shared`] whether the shared cache holds it too.
    pub fn cacher<R: CacheItemRequest>(&self, kind: CacheKind) -> Cacher<R> {
        let config = match kind.family {
            Family::Downloaded => &self.downloaded,
            Family::Derived => &self.derived,
        };
        let shared = self.shared.clone().filter(|_| kind.is_shared());
        Cacher::new(
            kind,
            &self.cache_dir,
            config.clone(),
            kind.memory(self.memory_capacity),
            self.boot_id.clone(),
        )
        .with_shared(shared)
    }

    /// How long a module's lookup outcome is reused, and how many are kept
    /// (`caches.in_memory.lookup_reuse`).
    pub fn lookup_reuse(&self) -> (Duration, u64) {
        self.lookup_reuse
    }

    /// The store replicas share, when one is configured (for what is not a cache kind:
    /// uploads that a fleet receives).
    pub fn shared(&self) -> Option<Arc<SharedCache>> {
        self.shared.clone()
    }

    /// The one budget every conversion and lazy read takes its memory from.
    pub fn conversions(&self) -> Arc<ConversionBudget> {
        self.conversions.clone()
    }

    pub fn conversion_observer(&self) -> Option<Arc<dyn ConversionObserver>> {
        self.conversion_observer.clone()
    }
}
