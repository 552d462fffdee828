//! Caches derived from the best object file for a module (SymCache, PpdbCache, CFI
//! cache): pick the best candidate for the purpose, build or load the derived cache
//! from it, and record on that candidate whether it could be used.

use std::sync::Arc;

use super::object_file::ObjectHandle;
use super::objects::{FoundObject, ObjectPurpose, ObjectsActor};
use crate::cache::{Caches, DerivedCache, DerivedFormat, Scope};
use crate::error::{CacheError, CacheResult};
use crate::sources::{FileType, ObjectId, ObjectType, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectFeatures, ObjectUseInfo};

/// A derived cache (or why there is none), every candidate consulted, and the features
/// of the file it was built from.
pub struct Derived<T> {
    pub cache: CacheResult<T>,
    pub candidates: AllObjectCandidates,
    pub features: ObjectFeatures,
    /// The file the cache was built from, when it also carries or points to sources
    /// (embedded in DWARF, a portable PDB, a PDB's SRCSRV stream), so source context
    /// needs no second lookup.
    pub with_sources: Option<FoundObject>,
}

/// A derived format built from one object file.
pub trait ObjectDerivedFormat: DerivedFormat<Input = Arc<ObjectHandle>> {
    /// Which candidate wins (debug info, unwind info).
    const PURPOSE: ObjectPurpose;

    fn filetypes(object_type: ObjectType) -> &'static [FileType] {
        FileType::from_object_type(object_type)
    }
}

/// Finds the best object file for a module and keeps the cache of format `F` built
/// from it.
pub struct ObjectDerived<F: ObjectDerivedFormat> {
    objects: Arc<ObjectsActor>,
    cache: DerivedCache<F>,
}

impl<F: ObjectDerivedFormat> ObjectDerived<F> {
    pub fn new(caches: &Caches, objects: Arc<ObjectsActor>) -> Self {
        ObjectDerived {
            objects,
            cache: DerivedCache::new(caches),
        }
    }

    pub async fn fetch(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Derived<F::Item> {
        let find = self
            .objects
            .find(sources, F::filetypes(id.object_type), id, scope, F::PURPOSE)
            .await;
        let mut candidates = find.candidates;
        let Some(found) = find.found else {
            return Derived {
                cache: Err(CacheError::NotFound),
                candidates,
                features: ObjectFeatures::default(),
                with_sources: None,
            };
        };
        let features = match &found.meta {
            Ok(meta) => meta.features.clone(),
            Err(err) => {
                return Derived {
                    cache: Err(err.clone()),
                    candidates,
                    features: ObjectFeatures::default(),
                    with_sources: None,
                };
            }
        };
        let with_sources =
            (features.has_sources || features.srcsrv_vcs.is_some()).then(|| found.clone());
        let (source, location) = (found.file.source_id().clone(), found.file.uri().to_owned());
        let key = found.key.clone();
        let input = {
            let objects = self.objects.clone();
            let id = id.clone();
            Box::pin(async move { objects.fetch(&found, &id).await })
        };
        let cache = self.cache.get(&[&key], input).await;
        let use_info = ObjectUseInfo::from_result(&cache);
        match F::PURPOSE {
            ObjectPurpose::Unwind => candidates.set_unwind(&source, &location, use_info),
            _ => candidates.set_debug(&source, &location, use_info),
        }
        Derived {
            cache,
            candidates,
            features,
            with_sources,
        }
    }
}
