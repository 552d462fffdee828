//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module; what every warm `/symbolicate` reads.

use std::sync::Arc;

use futures::future::BoxFuture;
use symbolic::common::{ByteView, SelfCell};
use symbolic::symcache::{SymCache, SymCacheConverter};
use tempfile::NamedTempFile;

use super::derived::{Derived, DerivedLookup, convert_object, fetch_derived};
use super::objects::{FoundObject, ObjectPurpose, ObjectsActor};
use crate::cache::{CacheError, CacheItemRequest, CacheKind, CacheResult, Cacher, Caches, Scope};
use crate::sources::{FileType, ObjectId, SourceConfig};

/// Bump when what we write into a SymCache changes; `symbolic`'s own format version is
/// pinned by a test so an upgrade that changes it forces a bump here.
pub const SYMCACHES: CacheKind = CacheKind {
    name: "symcaches",
    version: 1,
    compatible: &[],
};

pub type OwnedSymCache = Arc<SelfCell<ByteView<'static>, SymCache<'static>>>;

struct FetchSymCache {
    objects: Arc<ObjectsActor>,
    found: FoundObject,
    id: ObjectId,
}

impl CacheItemRequest for FetchSymCache {
    type Item = OwnedSymCache;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(convert_object(
            &self.objects,
            &self.found,
            &self.id,
            temp_file,
            |object, writer| {
                let mut converter = SymCacheConverter::new();
                converter
                    .process_object(object)
                    .map_err(|e| CacheError::Malformed(e.to_string()))?;
                converter.serialize(writer).map_err(CacheError::internal)
            },
        ))
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| SymCache::parse(unsafe { &*bytes }))
            .map(Arc::new)
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

pub struct SymCacheActor {
    objects: Arc<ObjectsActor>,
    symcaches: Cacher<FetchSymCache>,
}

impl SymCacheActor {
    pub fn new(caches: &Caches, objects: Arc<ObjectsActor>) -> Self {
        SymCacheActor {
            objects,
            symcaches: caches.derived(SYMCACHES, caches.memory_share(3, 4)),
        }
    }

    pub async fn fetch(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Derived<OwnedSymCache> {
        let lookup = DerivedLookup {
            sources,
            filetypes: FileType::from_object_type(id.object_type),
            id,
            scope,
            purpose: ObjectPurpose::Debug,
        };
        fetch_derived(&self.objects, &self.symcaches, lookup, |found| {
            FetchSymCache {
                objects: self.objects.clone(),
                found,
                id: id.clone(),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn symcache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the SymCache format: bump SYMCACHES.version.
        assert_eq!(symbolic::symcache::SYMCACHE_VERSION, 9);
    }
}
