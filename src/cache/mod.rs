//! The cache core: `Cacher<R>` gives every cache kind (downloaded objects, object
//! metadata, SymCaches, ...) the same lifecycle: an in-memory LRU in front of versioned
//! files on disk (compatible old versions served while recomputed), a shared cache for
//! replicas, one computation per key however many requests wait for it, writes through
//! a temp file and a rename, and negative-cache placeholders for misses and failures.
//! Keys carry the request scope and the source, so nothing crosses scopes. `derived`
//! builds caches from any number of parent files (keyed by theirs). `kinds` is the one
//! table of cache kinds: name, version, family and memory share. `budget` bounds
//! conversions by input size, `config` is the `caches` section of the config file.
//! `cleanup` owns deletion: the time rules, stray temp files, old versions and the disk
//! budget; `usage` measures, read-only, what each kind takes on disk. `shared` is the
//! shared cache, kept in one of `objstore`'s stores; nothing here downloads.

mod budget;
mod cacher;
mod caches;
pub mod cleanup;
mod config;
mod derived;
mod key;
pub mod kinds;
mod shared;
pub mod usage;

pub use budget::{BudgetPermit, ConversionBudget, release_mapped_pages, return_freed_heap};
pub use cacher::{CacheItemRequest, Cacher};
pub use caches::Caches;
pub use config::{CacheConfig, CachesConfig, DiagnosticsCacheConfig, InMemoryConfig};
pub use derived::{ConversionObserver, ConversionState, DerivedCache, DerivedFormat, InputFuture};
pub use key::{CacheKey, Scope};
pub use kinds::{CacheKind, Family};
pub use shared::{SharedCache, SharedCacheConfig};
