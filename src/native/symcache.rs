//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module; what every warm `/symbolicate` reads.

use std::io::BufWriter;
use std::sync::Arc;

use futures::future::BoxFuture;
use symbolic::common::{ByteView, SelfCell};
use symbolic::symcache::{SymCache, SymCacheConverter};
use tempfile::NamedTempFile;

use super::objects::{FoundObject, ObjectPurpose, ObjectsActor};
use crate::cache::{CacheError, CacheItemRequest, CacheKind, CacheResult, Cacher, Caches, Scope};
use crate::sources::{FileType, ObjectId, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectFeatures, ObjectUseInfo};

/// Bump when what we write into a SymCache changes; `symbolic`'s own format version is
/// pinned by a test so an upgrade that changes it forces a bump here.
pub const SYMCACHES: CacheKind = CacheKind {
    name: "symcaches",
    version: 1,
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
        Box::pin(async move {
            let handle = self.objects.fetch(&self.found, &self.id).await?;
            let file = temp_file
                .as_file()
                .try_clone()
                .map_err(CacheError::internal)?;
            // Conversion is CPU-bound; keep it off the async workers.
            tokio::task::spawn_blocking(move || {
                let mut converter = SymCacheConverter::new();
                converter
                    .process_object(handle.object())
                    .map_err(|e| CacheError::Malformed(e.to_string()))?;
                let mut writer = BufWriter::new(file);
                converter
                    .serialize(&mut writer)
                    .map_err(CacheError::internal)?;
                writer.into_inner().map_err(CacheError::internal)?;
                Ok(())
            })
            .await
            .map_err(CacheError::internal)?
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| SymCache::parse(unsafe { &*bytes }))
            .map(Arc::new)
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

/// The outcome of looking for a module's SymCache: the cache (or why there is none),
/// every candidate consulted, and the features of the file that was used.
pub struct SymCacheResult {
    pub cache: CacheResult<OwnedSymCache>,
    pub candidates: AllObjectCandidates,
    pub features: ObjectFeatures,
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
    ) -> SymCacheResult {
        let filetypes = FileType::from_object_type(id.object_type);
        let find = self
            .objects
            .find(sources, filetypes, id, scope, ObjectPurpose::Debug)
            .await;
        let mut candidates = find.candidates;
        let Some(found) = find.found else {
            return SymCacheResult {
                cache: Err(CacheError::NotFound),
                candidates,
                features: ObjectFeatures::default(),
            };
        };
        let features = match &found.meta {
            Ok(meta) => meta.features.clone(),
            Err(err) => {
                return SymCacheResult {
                    cache: Err(err.clone()),
                    candidates,
                    features: ObjectFeatures::default(),
                };
            }
        };
        let key = found.key.derived(SYMCACHES.name);
        let (source, location) = (found.file.source_id().clone(), found.file.uri());
        let request = FetchSymCache {
            objects: self.objects.clone(),
            found,
            id: id.clone(),
        };
        let cache = self.symcaches.get(key, request).await;
        let use_info = match &cache {
            Ok(_) => ObjectUseInfo::Ok,
            Err(CacheError::Malformed(_)) => ObjectUseInfo::Malformed,
            Err(err) => ObjectUseInfo::Error {
                details: err.to_string(),
            },
        };
        candidates.set_debug(&source, &location, use_info);
        SymCacheResult {
            cache,
            candidates,
            features,
        }
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
