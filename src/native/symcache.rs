//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module; what every warm `/symbolicate` reads.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;

use symbolic::common::{ByteView, SelfCell};
use symbolic::symcache::{SymCache, SymCacheConverter};

use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose};

pub type OwnedSymCache = Arc<SelfCell<ByteView<'static>, SymCache<'static>>>;

pub struct SymCacheFormat;

impl DerivedFormat for SymCacheFormat {
    type Input = Arc<ObjectHandle>;
    type Item = OwnedSymCache;
    const KIND: CacheKind = kinds::SYMCACHES;

    fn input_size(input: &Arc<ObjectHandle>) -> u64 {
        input.conversion_size()
    }

    fn convert(input: Arc<ObjectHandle>, out: &mut BufWriter<File>) -> CacheResult<()> {
        let object = input.object();
        #[cfg(test)]
        crate::error::delay_if_marked("convert", object.data());
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

impl ObjectDerivedFormat for SymCacheFormat {
    const PURPOSE: ObjectPurpose = ObjectPurpose::Debug;
}

pub type SymCaches = ObjectDerived<SymCacheFormat>;

#[cfg(test)]
mod tests {
    #[test]
    fn symcache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the SymCache format: bump cache::kinds::SYMCACHES.
        assert_eq!(symbolic::symcache::SYMCACHE_VERSION, 9);
    }
}
