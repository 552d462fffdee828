//! Caches derived from the best object file for a module (SymCache, PpdbCache, CFI
//! cache): pick the best candidate for the purpose, look for the format's secondary
//! inputs beside it, build or load the derived cache from them, and record on that
//! candidate whether it could be used: at once when the cache exists or was waited
//! for, and through [`UsedCandidate`] when a build that ran on while the file answered
//! turns out to be the answer.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::object_file::{ObjectHandle, ObjectMeta};
use super::objects::{FoundObject, ObjectLookup, ObjectPurpose};
use super::secondary::SecondaryInputs;
use crate::cache::{
    CacheKey, Caches, ConversionBudget, DerivedCache, DerivedFormat, InputFuture, Scope,
};
use crate::error::{CacheError, CacheResult};
use crate::sources::{FileType, ObjectId, ObjectType, SourceConfig, SourceId};
use crate::telemetry::{self, RequestStats};
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
    /// The candidate says the file was usable (it was downloaded and read); whoever
    /// takes `build`'s outcome as the answer records it on `candidate`.
    Building {
        object: Arc<ObjectHandle>,
        build: JoinHandle<CacheResult<T>>,
        candidate: UsedCandidate,
    },
}

/// The candidate a derived cache is built from, and what for: where the outcome of its
/// build is recorded, so the candidates say what the module says.
#[derive(Clone, Debug)]
pub struct UsedCandidate {
    source: SourceId,
    location: String,
    purpose: ObjectPurpose,
}

impl UsedCandidate {
    pub fn new(source: SourceId, location: String, purpose: ObjectPurpose) -> Self {
        UsedCandidate {
            source,
            location,
            purpose,
        }
    }

    /// Records on the candidate whether the cache could be built from it: a failed
    /// build is the file's failure (`malformed` for a conversion that fails), as when
    /// the build was waited for.
    pub fn record<T>(&self, candidates: &mut AllObjectCandidates, outcome: &CacheResult<T>) {
        let info = ObjectUseInfo::from_result(outcome);
        match self.purpose {
            ObjectPurpose::Unwind => candidates.set_unwind(&self.source, &self.location, info),
            _ => candidates.set_debug(&self.source, &self.location, info),
        }
    }
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

/// A derived format built from one object file, and whatever it finds beside it.
pub trait ObjectDerivedFormat: DerivedFormat {
    /// Which candidate wins (debug info, unwind info).
    const PURPOSE: ObjectPurpose;

    /// Files beside the object that change what the cache says; `()` for none.
    type Secondary: SecondaryInputs;

    fn filetypes(object_type: ObjectType) -> &'static [FileType] {
        FileType::from_object_type(object_type)
    }

    /// The conversion's input: the downloaded object and what was found beside it.
    fn input(object: Arc<ObjectHandle>, secondary: Arc<Self::Secondary>) -> Self::Input;
}

type Finder<F> = <<F as ObjectDerivedFormat>::Secondary as SecondaryInputs>::Finder;

/// Finds the best object file for a module and keeps the cache of format `F` built
/// from it.
pub struct ObjectDerived<F: ObjectDerivedFormat> {
    objects: Arc<ObjectLookup>,
    cache: DerivedCache<F>,
    finder: Finder<F>,
}

impl<F: ObjectDerivedFormat> ObjectDerived<F> {
    /// `finder` looks for the format's secondary inputs (`()` when it has none).
    pub fn new(caches: &Caches, objects: Arc<ObjectLookup>, finder: Finder<F>) -> Self {
        ObjectDerived {
            objects,
            cache: DerivedCache::new(caches),
            finder,
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
        let secondary = self.secondary(sources, id, &chosen.found, scope).await;
        let keys = Self::keys(&chosen.found.key, &secondary);
        let input = self.download(&chosen.found, id, secondary);
        let cache = self.cache.get(&parents(&keys), input).await;
        Self::answer(chosen, cache)
    }

    /// Like `fetch_or_build`, but a cache that does not exist yet is not waited for: its
    /// build starts in a task of its own (once per key, however many requests ask) and
    /// the downloaded file comes back beside it, so the caller can answer from the file
    /// while it is built. The build goes on when the caller stops waiting for it.
    ///
    /// With secondary inputs found, the file alone would answer otherwise than the cache
    /// (hidden names, generated C++ lines), so the build is awaited and comes back ready.
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
        let secondary = self.secondary(sources, id, &chosen.found, scope).await;
        let keys = Self::keys(&chosen.found.key, &secondary);
        let from_object_alone = keys.len() == 1;
        let cache = match self.cache.cached(&parents(&keys)).await {
            Some(cached) => cached.map(Progress::Ready),
            None => {
                // A build the answer may not wait for: this request notes its lookup (one
                // that computes) now, and the build notes it nowhere.
                let noted_here = from_object_alone.then_some(F::KIND.name);
                if let Some(kind) = noted_here {
                    telemetry::note_cache_compute(kind);
                    telemetry::note_cache_lookup(kind, Duration::ZERO);
                }
                let build = tokio::spawn({
                    let cache = self.cache.clone();
                    let input = self.download(&chosen.found, id, secondary);
                    RequestStats::carried_except(noted_here, async move {
                        cache.get(&parents(&keys), input).await
                    })
                });
                // The same download the build waits for: one fetch, shared by both.
                let object = match from_object_alone {
                    true => self.objects.fetch(&chosen.found, id).await.ok(),
                    false => None,
                };
                match object {
                    Some(object) => Ok(Progress::Building {
                        object,
                        build,
                        candidate: chosen.used(),
                    }),
                    None => join_build(build).await.map(Progress::Ready),
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
        let filetypes = F::filetypes(id.object_type);
        let mut find = self
            .objects
            .find(sources, filetypes, id, scope, F::PURPOSE)
            .await;
        // Only when the id as sent finds nothing, so that the candidates upstream lists
        // stay as they are wherever upstream finds the module.
        if find.found.is_none() {
            for other in id.lookup_alternates() {
                let more = self
                    .objects
                    .find(sources, filetypes, &other, scope, F::PURPOSE)
                    .await;
                find.candidates.merge(more.candidates);
                if more.found.is_some() {
                    find.found = more.found;
                    break;
                }
            }
        }
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
            purpose: F::PURPOSE,
        })
    }

    /// What the format finds beside the chosen object for this request.
    async fn secondary(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        object: &FoundObject,
        scope: &Scope,
    ) -> Arc<F::Secondary> {
        Arc::new(F::Secondary::find(&self.finder, sources, id, object, scope).await)
    }

    /// The parents of the cache's key: the chosen object, then each secondary input.
    /// Without secondaries that is the object alone, the key caches always had.
    fn keys(object: &CacheKey, secondary: &F::Secondary) -> Vec<CacheKey> {
        let mut keys = vec![object.clone()];
        keys.extend(secondary.keys());
        keys
    }

    /// The download of the chosen file, with what was found beside it, as the input of
    /// its conversion.
    fn download(
        &self,
        found: &FoundObject,
        id: &ObjectId,
        secondary: Arc<F::Secondary>,
    ) -> InputFuture<F> {
        let objects = self.objects.clone();
        let (found, id) = (found.clone(), id.clone());
        Box::pin(async move { Ok(F::input(objects.fetch(&found, &id).await?, secondary)) })
    }

    /// The lookup's answer, with whether the chosen candidate could be used marked on it.
    fn answer<T>(chosen: Chosen, cache: CacheResult<T>) -> Derived<T> {
        let used = chosen.used();
        let Chosen {
            found,
            mut candidates,
            features,
            with_sources,
            ..
        } = chosen;
        let meta = found.meta.as_ref().ok().cloned();
        used.record(&mut candidates, &cache);
        Derived {
            cache,
            candidates,
            features,
            with_sources,
            meta,
        }
    }
}

fn parents(keys: &[CacheKey]) -> Vec<&CacheKey> {
    keys.iter().collect()
}

/// The candidate a derived cache is built from, and what finding it learned.
struct Chosen {
    found: FoundObject,
    candidates: AllObjectCandidates,
    features: ObjectFeatures,
    with_sources: Option<FoundObject>,
    purpose: ObjectPurpose,
}

impl Chosen {
    fn used(&self) -> UsedCandidate {
        let file = &self.found.file;
        UsedCandidate::new(
            file.source_id().clone(),
            file.uri().to_owned(),
            self.purpose,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::symcache::SymCacheFormat;

    type SymCacheSecondary = <SymCacheFormat as ObjectDerivedFormat>::Secondary;

    /// A SymCache of a module without secondary inputs is keyed by its object alone, the
    /// key SymCaches without such inputs have on disk, so they stay warm.
    #[test]
    fn without_secondary_inputs_the_key_is_the_objects_alone() {
        let object = CacheKey::new(Scope::Global, &["source", "ab/cdef/debuginfo"]);
        let none = SymCacheSecondary::default();
        let keys = ObjectDerived::<SymCacheFormat>::keys(&object, &none);
        assert_eq!(keys, std::slice::from_ref(&object));
        assert_eq!(
            DerivedCache::<SymCacheFormat>::key(&parents(&keys)),
            object.derived("symcaches")
        );
    }
}
