//! The cache core: `Cacher<R>` gives every cache kind (downloaded objects, object
//! metadata, SymCaches, ...) the same lifecycle: an in-memory LRU in front of versioned
//! files on disk, one computation per key however many requests wait for it, writes
//! through a temp file and a rename, and negative-cache placeholders for misses and
//! failures. Keys carry the request scope and the source, so nothing crosses scopes.

mod cacher;
mod caches;
mod error;
mod key;

pub use cacher::{CacheItemRequest, CacheKind, CacheStats, Cacher};
pub use caches::Caches;
pub use error::{CacheError, CacheResult};
pub use key::{CacheKey, Scope};
