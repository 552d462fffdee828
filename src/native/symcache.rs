//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module and its secondary inputs (`symcache_inputs`); what every warm
//! `/symbolicate` reads.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use symbolic::common::{ByteView, SelfCell};
use symbolic::symcache::{SymCache, SymCacheConverter};

use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{
    ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose, SecondaryInputs,
};

use super::symcache_inputs::SymCacheInputs;

pub type OwnedSymCache = Arc<LoadedSymCache>;

/// A SymCache opened from its file, with an id no other one opened by this process
/// has (memos of what it answered are keyed by it: an address in memory may be
/// reused, an id is not).
pub struct LoadedSymCache {
    cell: SelfCell<ByteView<'static>, SymCache<'static>>,
    id: u64,
}

impl LoadedSymCache {
    fn new(cell: SelfCell<ByteView<'static>, SymCache<'static>>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        LoadedSymCache { cell, id }
    }

    pub fn get(&self) -> &SymCache<'_> {
        self.cell.get()
    }

    /// The file's bytes.
    pub fn owner(&self) -> &[u8] {
        self.cell.owner()
    }

    pub fn id(&self) -> u64 {
        self.id
    }
}

pub struct SymCacheFormat;

/// A debug file and what was found beside it.
pub struct SymCacheInput {
    object: Arc<ObjectHandle>,
    secondary: Arc<SymCacheInputs>,
}

/// The file alone, as a module without secondary inputs has it.
impl From<Arc<ObjectHandle>> for SymCacheInput {
    fn from(object: Arc<ObjectHandle>) -> Self {
        let secondary = Arc::default();
        SymCacheInput { object, secondary }
    }
}

impl DerivedFormat for SymCacheFormat {
    type Input = SymCacheInput;
    type Item = OwnedSymCache;
    const KIND: CacheKind = kinds::SYMCACHES;

    fn input_size(input: &SymCacheInput) -> u64 {
        input
            .object
            .conversion_size()
            .saturating_add(input.secondary.size())
    }

    fn convert(input: SymCacheInput, out: &mut BufWriter<File>) -> CacheResult<()> {
        let object = input.object.object();
        #[cfg(test)]
        {
            crate::error::delay_if_marked("convert", object.data());
            crate::error::panic_if_marked("symcache", object.data());
        }
        let mut converter = SymCacheConverter::new();
        input.secondary.apply(&mut converter)?;
        let processed = converter.process_object(object);
        input.object.release_pages();
        processed.map_err(|e| CacheError::Malformed(e.to_string()))?;
        converter.serialize(out).map_err(CacheError::internal)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| SymCache::parse(unsafe { &*bytes }))
            .map(|cell| Arc::new(LoadedSymCache::new(cell)))
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

impl ObjectDerivedFormat for SymCacheFormat {
    const PURPOSE: ObjectPurpose = ObjectPurpose::Debug;
    type Secondary = SymCacheInputs;

    fn input(object: Arc<ObjectHandle>, secondary: Arc<SymCacheInputs>) -> SymCacheInput {
        SymCacheInput { object, secondary }
    }
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
