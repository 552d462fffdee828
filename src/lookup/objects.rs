//! Finding the best object file for a module: list every candidate location on every
//! source, fetch each candidate's metadata (which downloads it once), pick the best one
//! for the purpose, and report every candidate and what happened to it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{self, BoxFuture};
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::downloads::{Downloads, file_key};
use super::locate::Locator;
use super::object_file::{ObjectFile, ObjectHandle, ObjectHint, ObjectLimits, ObjectMeta};
use crate::cache::kinds;
use crate::cache::{CacheItemRequest, CacheKey, Cacher, Caches, Scope};
use crate::error::{CacheError, CacheResult};
use crate::fetch::RemoteFile;
use crate::sources::{FileType, ObjectId, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectCandidate, ObjectDownloadInfo, ObjectUseInfo};

struct FetchMeta {
    file: RemoteFile,
    key: CacheKey,
    hint: ObjectHint,
    objects: Arc<Downloads<ObjectFile>>,
}

impl CacheItemRequest for FetchMeta {
    type Item = Arc<ObjectMeta>;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            let handle = self
                .objects
                .get_keyed(self.key.clone(), &self.file, self.hint.clone())
                .await?;
            let meta = handle.meta();
            serde_json::to_writer(temp_file.as_file_mut(), &meta).map_err(CacheError::internal)
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        serde_json::from_slice(&data)
            .map(Arc::new)
            .map_err(CacheError::internal)
    }
}

/// What a debug file is wanted for; decides which candidate wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectPurpose {
    Debug,
    Unwind,
    Source,
    /// Any file that is the object, whatever it holds: the symbol-server proxy hands
    /// on whole files (a PE image without symbols is still what a debugger asked for).
    Whole,
}

/// A candidate that was chosen, with its metadata (or the error that is the best we
/// could do).
#[derive(Clone)]
pub struct FoundObject {
    pub file: RemoteFile,
    pub key: CacheKey,
    pub meta: CacheResult<Arc<ObjectMeta>>,
}

#[derive(Clone)]
pub struct FindResult {
    pub found: Option<FoundObject>,
    pub candidates: AllObjectCandidates,
}

/// Everything a `find` depends on besides the caches it reads. Sources are named by
/// their fingerprints (every setting and credential), so two requests share an outcome
/// only if they would have fetched the same files the same way, in the same scope.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FindKey {
    sources: Box<[[u8; 32]]>,
    filetypes: Box<[FileType]>,
    id: ObjectId,
    scope: Scope,
    purpose: ObjectPurpose,
}

pub struct ObjectLookup {
    objects: Arc<Downloads<ObjectFile>>,
    meta: Cacher<FetchMeta>,
    locator: Arc<Locator>,
    limits: ObjectLimits,
    /// Outcomes of recent `find`s, reused for `caches.in_memory.lookup_reuse`. A warm
    /// request otherwise lists every candidate path of every module again, names each
    /// by a SHA-256 key and asks the metadata cache for each: most of the work of a
    /// warm request, for an answer that only changes when a source or a cache entry
    /// does. `None` when reuse is off.
    recent: Option<moka::sync::Cache<FindKey, FindResult>>,
}

impl ObjectLookup {
    pub fn new(caches: &Caches, locator: Arc<Locator>, limits: ObjectLimits) -> Self {
        ObjectLookup {
            objects: Arc::new(Downloads::new(caches, locator.downloader().clone())),
            meta: caches.cacher(kinds::OBJECT_META),
            locator,
            limits,
            recent: recent_finds(caches.lookup_reuse()),
        }
    }

    /// What reading a debug file (and the files beside it) may cost.
    pub fn limits(&self) -> ObjectLimits {
        self.limits
    }

    fn hint(&self, id: &ObjectId) -> ObjectHint {
        ObjectHint {
            id: id.clone(),
            limits: self.limits,
        }
    }

    /// Looks at every candidate and picks the best for `purpose`.
    pub async fn find(
        &self,
        sources: &[SourceConfig],
        filetypes: &[FileType],
        id: &ObjectId,
        scope: &Scope,
        purpose: ObjectPurpose,
    ) -> FindResult {
        let key = FindKey {
            sources: sources.iter().map(SourceConfig::fingerprint).collect(),
            filetypes: filetypes.into(),
            id: id.clone(),
            scope: scope.clone(),
            purpose,
        };
        let Some(recent) = &self.recent else {
            return self.find_afresh(sources, &key).await;
        };
        if let Some(found) = recent.get(&key) {
            return found;
        }
        let found = self.find_afresh(sources, &key).await;
        recent.insert(key, found.clone());
        found
    }

    /// `sources` are the ones `key` names by their fingerprints.
    async fn find_afresh(&self, sources: &[SourceConfig], key: &FindKey) -> FindResult {
        let FindKey {
            filetypes,
            id,
            scope,
            purpose,
            ..
        } = key;
        let files = self.locator.list_files(sources, filetypes, id, scope).await;
        let lookups = future::join_all(files.into_iter().map(|file| async move {
            let key = file_key(&file, scope);
            let request = FetchMeta {
                file: file.clone(),
                key: key.clone(),
                hint: self.hint(id),
                objects: self.objects.clone(),
            };
            let meta = self.meta.get(key.clone(), request).await;
            FoundObject { file, key, meta }
        }))
        .await;

        let candidates = create_candidates(sources, &lookups);
        let found = select(lookups, *purpose);
        FindResult { found, candidates }
    }

    /// The parsed file behind a found candidate.
    pub async fn fetch(
        &self,
        found: &FoundObject,
        id: &ObjectId,
    ) -> CacheResult<Arc<ObjectHandle>> {
        self.objects
            .get_keyed(found.key.clone(), &found.file, self.hint(id))
            .await
    }
}

fn recent_finds(
    (reuse, capacity): (Duration, u64),
) -> Option<moka::sync::Cache<FindKey, FindResult>> {
    (!reuse.is_zero() && capacity > 0).then(|| {
        moka::sync::Cache::builder()
            .max_capacity(capacity)
            .time_to_live(reuse)
            .build()
    })
}

/// Lower is better; a later candidate only wins with a strictly better quality.
fn quality(meta: &CacheResult<Arc<ObjectMeta>>, purpose: ObjectPurpose) -> u8 {
    match meta {
        Ok(meta) => match purpose {
            ObjectPurpose::Debug if meta.features.has_debug_info => 0,
            ObjectPurpose::Debug if meta.features.has_symbols => 1,
            ObjectPurpose::Unwind if meta.features.has_unwind_info => 0,
            ObjectPurpose::Source if meta.features.has_sources => 0,
            ObjectPurpose::Whole => 0,
            _ => 2,
        },
        Err(_) => 3,
    }
}

fn is_useful(meta: &ObjectMeta, purpose: ObjectPurpose) -> bool {
    match purpose {
        ObjectPurpose::Debug => meta.features.has_debug_info || meta.features.has_symbols,
        ObjectPurpose::Unwind => meta.features.has_unwind_info,
        ObjectPurpose::Source => meta.features.has_sources,
        ObjectPurpose::Whole => true,
    }
}

fn select(lookups: Vec<FoundObject>, purpose: ObjectPurpose) -> Option<FoundObject> {
    let mut best: Option<(u8, FoundObject)> = None;
    for lookup in lookups {
        // A "not found" says nothing about the module; any other error does, and is
        // the answer when nothing usable turns up.
        match &lookup.meta {
            Ok(meta) if !is_useful(meta, purpose) => continue,
            Err(CacheError::NotFound) => continue,
            _ => {}
        }
        let q = quality(&lookup.meta, purpose);
        if best.as_ref().is_none_or(|(bq, _)| q < *bq) {
            best = Some((q, lookup));
        }
    }
    best.map(|(_, found)| found)
}

fn create_candidates(sources: &[SourceConfig], lookups: &[FoundObject]) -> AllObjectCandidates {
    let mut quiet_sources: Vec<_> = sources.iter().map(|s| s.id().clone()).collect();
    let mut candidates = Vec::with_capacity(lookups.len() + quiet_sources.len());
    for lookup in lookups {
        quiet_sources.retain(|id| id != lookup.file.source_id());
        let download =
            ObjectDownloadInfo::from_result(lookup.meta.as_ref().map(|meta| meta.features.clone()));
        candidates.push(ObjectCandidate {
            source: lookup.file.source_id().clone(),
            location: lookup.file.uri().to_owned(),
            download,
            unwind: ObjectUseInfo::None,
            debug: ObjectUseInfo::None,
        });
    }
    // A source that had nothing to offer for this module still shows up, so a user can
    // see it was consulted.
    for source in quiet_sources {
        candidates.push(ObjectCandidate {
            source,
            location: "No object files listed on this source".into(),
            download: ObjectDownloadInfo::NotFound,
            unwind: ObjectUseInfo::None,
            debug: ObjectUseInfo::None,
        });
    }
    candidates.into()
}
