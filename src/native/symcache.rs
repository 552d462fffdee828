//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module; what every warm `/symbolicate` reads.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;

use symbolic::common::{ByteView, SelfCell};
use symbolic::debuginfo::Object;
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::derived::{DerivedActor, DerivedFormat};
use super::objects::ObjectPurpose;
use crate::cache::{CacheError, CacheKind, CacheResult};

/// Bump when what we write into a SymCache changes; `symbolic`'s own format version is
/// pinned by a test so an upgrade that changes it forces a bump here.
pub const SYMCACHES: CacheKind = CacheKind {
    name: "symcaches",
    version: 1,
    compatible: &[],
};

pub type OwnedSymCache = Arc<SelfCell<ByteView<'static>, SymCache<'static>>>;

pub struct SymCacheFormat;

impl DerivedFormat for SymCacheFormat {
    type Item = OwnedSymCache;
    const KIND: CacheKind = SYMCACHES;
    const PURPOSE: ObjectPurpose = ObjectPurpose::Debug;
    /// What every warm request reads: most of the memory budget.
    const MEMORY_SHARE: (u64, u64) = (3, 4);

    fn convert(object: &Object<'_>, out: &mut BufWriter<File>) -> CacheResult<()> {
        let mut converter = SymCacheConverter::new();
        converter
            .process_object(object)
            .map_err(|e| CacheError::Malformed(e.to_string()))?;
        converter.serialize(out).map_err(CacheError::internal)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| SymCache::parse(unsafe { &*bytes }))
            .map(Arc::new)
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

pub type SymCacheActor = DerivedActor<SymCacheFormat>;

#[cfg(test)]
mod tests {
    #[test]
    fn symcache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the SymCache format: bump SYMCACHES.version.
        assert_eq!(symbolic::symcache::SYMCACHE_VERSION, 9);
    }
}
