//! Caches derived from the best object file for a module (SymCache, PpdbCache, CFI
//! cache): pick the best candidate for the purpose, build or load the derived cache
//! from it, and record on that candidate whether it could be used.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::object_file::{ObjectHandle, ObjectMeta};
use super::objects::{FoundObject, ObjectLookup, ObjectPurpose};
use crate::cache::{Caches, ConversionBudget, DerivedCache, DerivedFormat, InputFuture, Scope};
use crate::error::{CacheError, CacheResult};
use crate::sources::{FileType, ObjectId, ObjectType, SourceConfig};
use crate::telemetry::RequestStats;
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
    /// What the file the cache was built from says about itself.
    pub meta: Option<Arc<ObjectMeta>>,
}

/// Where a derived cache stands when a request asks for it.
pub enum Progress<T> {
    Ready(T),
    /// Being built from `object` in a task of its own; `build` resolves when it is done.
    Building {
        object: Arc<ObjectHandle>,
        build: JoinHandle<CacheResult<T>>,
    },
}

/// The outcome of a build task; a build that panicked outside its isolation (it never
/// should) counts as an internal error, not a crash of the request.
pub async fn join_build<T>(build: JoinHandle<CacheResult<T>>) -> CacheResult<T> {
    build.await.unwrap_or_else(|err| {
        Err(CacheError::internal(format_args!(
            "cache build task: {err}"
        )))
    })
}

impl<T> Derived<T> {
    pub fn map_cache<U>(self, f: impl FnOnce(T) -> U) -> Derived<U> {
        Derived {
            cache: self.cache.map(f),
            candidates: self.candidates,
            features: self.features,
            with_sources: self.with_sources,
            meta: self.meta,
        }
    }
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
    objects: Arc<ObjectLookup>,
    cache: DerivedCache<F>,
}

impl<F: ObjectDerivedFormat> ObjectDerived<F> {
    pub fn new(caches: &Caches, objects: Arc<ObjectLookup>) -> Self {
        ObjectDerived {
            objects,
            cache: DerivedCache::new(caches),
        }
    }

    /// The budget its conversions share with lazy reads of the same files.
    pub fn budget(&self) -> &Arc<ConversionBudget> {
        self.cache.budget()
    }

    /// The cache for `id`, built from the best candidate first if it does not exist yet:
    /// the caller waits for the build.
    pub async fn fetch_or_build(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Derived<F::Item> {
        let chosen = match self.choose(sources, id, scope).await {
            Ok(chosen) => chosen,
            Err(none) => return none,
        };
        let input = self.download(&chosen.found, id);
        let cache = self.cache.get(&[&chosen.found.key], input).await;
        Self::answer(chosen, cache)
    }

    /// Like `fetch_or_build`, but a cache that does not exist yet is not waited for: its
    /// build starts in a task of its own (once per key, however many requests ask) and
    /// the downloaded file comes back beside it, so the caller can answer from the file
    /// while it is built. The build goes on when the caller stops waiting for it.
    pub async fn fetch_or_start_building(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Derived<Progress<F::Item>> {
        let chosen = match self.choose(sources, id, scope).await {
            Ok(chosen) => chosen,
            Err(none) => return none,
        };
        let key = chosen.found.key.clone();
        let cache = match self.cache.cached(&[&key]).await {
            Some(cached) => cached.map(Progress::Ready),
            None => {
                let build = tokio::spawn({
                    let cache = self.cache.clone();
                    let input = self.download(&chosen.found, id);
                    RequestStats::carried(async move { cache.get(&[&key], input).await })
                });
                // The same download the build waits for: one fetch, shared by both.
                match self.objects.fetch(&chosen.found, id).await {
                    Ok(object) => Ok(Progress::Building { object, build }),
                    Err(_) => join_build(build).await.map(Progress::Ready),
                }
            }
        };
        Self::answer(chosen, cache)
    }

    /// The best candidate for `id`, or the answer when there is none to build from.
    async fn choose<T>(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Result<Chosen, Derived<T>> {
        let find = self
            .objects
            .find(sources, F::filetypes(id.object_type), id, scope, F::PURPOSE)
            .await;
        let candidates = find.candidates;
        let Some(found) = find.found else {
            return Err(Derived {
                cache: Err(CacheError::NotFound),
                candidates,
                features: ObjectFeatures::default(),
                with_sources: None,
                meta: None,
            });
        };
        let features = match &found.meta {
            Ok(meta) => meta.features.clone(),
            Err(err) => {
                return Err(Derived {
                    cache: Err(err.clone()),
                    candidates,
                    features: ObjectFeatures::default(),
                    with_sources: None,
                    meta: None,
                });
            }
        };
        let with_sources =
            (features.has_sources || features.srcsrv_vcs.is_some()).then(|| found.clone());
        Ok(Chosen {
            found,
            candidates,
            features,
            with_sources,
        })
    }

    /// The download of the chosen file, as the input of its conversion.
    fn download(&self, found: &FoundObject, id: &ObjectId) -> InputFuture<F> {
        let objects = self.objects.clone();
        let (found, id) = (found.clone(), id.clone());
        Box::pin(async move { objects.fetch(&found, &id).await })
    }

    /// The lookup's answer, with whether the chosen candidate could be used marked on it.
    fn answer<T>(chosen: Chosen, cache: CacheResult<T>) -> Derived<T> {
        let Chosen {
            found,
            mut candidates,
            features,
            with_sources,
        } = chosen;
        let (source, location) = (found.file.source_id(), found.file.uri());
        let meta = found.meta.as_ref().ok().cloned();
        let use_info = ObjectUseInfo::from_result(&cache);
        match F::PURPOSE {
            ObjectPurpose::Unwind => candidates.set_unwind(source, location, use_info),
            _ => candidates.set_debug(source, location, use_info),
        }
        Derived {
            cache,
            candidates,
            features,
            with_sources,
            meta,
        }
    }
}

/// The candidate a derived cache is built from, and what finding it learned.
struct Chosen {
    found: FoundObject,
    candidates: AllObjectCandidates,
    features: ObjectFeatures,
    with_sources: Option<FoundObject>,
}
