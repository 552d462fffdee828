//! Finding the best debug file for a module: list every candidate location on every
//! source, fetch each candidate's metadata (which downloads it once), pick the best one
//! for the purpose, and report every candidate and what happened to it.

use std::collections::HashMap;
use std::io::{Seek, Write};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::{self, BoxFuture};
use serde::{Deserialize, Serialize};
use symbolic::common::{Arch, ByteView, SelfCell};
use symbolic::debuginfo::{Archive, Object};
use tempfile::NamedTempFile;

use super::embedded_sources::{embedded_sources, has_embedded_sources};
use crate::cache::{
    CacheError, CacheItemRequest, CacheKey, CacheKind, CacheResult, Cacher, Caches, Scope,
};
use crate::fetch::{Downloader, RemoteFile, SymstoreIndexes, fetch_file};
use crate::sources::{FileType, ObjectId, SourceConfig};
use crate::types::{
    AllObjectCandidates, ObjectCandidate, ObjectDownloadInfo, ObjectFeatures, ObjectUseInfo,
    SrcSrvVcs,
};

pub const OBJECTS: CacheKind = CacheKind {
    name: "objects",
    version: 1,
    compatible: &[],
};
/// 2: `has_sources` also counts sources embedded in DWARF line tables.
pub const OBJECT_META: CacheKind = CacheKind {
    name: "object_meta",
    version: 2,
    // v1 lacks embedded DWARF sources in `has_sources`; it is served while v2 is built.
    compatible: &[1],
};

/// A parsed debug file, backed by a memory-mapped cache file.
pub struct ObjectHandle {
    inner: SelfCell<ByteView<'static>, Object<'static>>,
    /// Read on first use: most handles are never asked for sources.
    embedded_sources: OnceLock<HashMap<String, String>>,
    /// A PDB's SRCSRV stream, read on first use.
    srcsrv: OnceLock<Option<Vec<u8>>>,
    /// Where SRCSRV says each asked-for path can be downloaded (`None`: nowhere).
    srcsrv_urls: Mutex<HashMap<String, Option<String>>>,
}

impl ObjectHandle {
    fn parse(data: ByteView<'static>) -> CacheResult<Self> {
        let inner = SelfCell::try_new(data, |bytes| Object::parse(unsafe { &*bytes }))
            .map_err(|err| CacheError::Malformed(err.to_string()))?;
        Ok(ObjectHandle {
            inner,
            embedded_sources: OnceLock::new(),
            srcsrv: OnceLock::new(),
            srcsrv_urls: Mutex::new(HashMap::new()),
        })
    }

    pub fn object(&self) -> &Object<'_> {
        self.inner.get()
    }

    /// A source file embedded in the DWARF line table, by absolute path.
    pub fn embedded_source(&self, path: &str) -> Option<&str> {
        self.embedded_sources
            .get_or_init(|| embedded_sources(self.object()))
            .get(path)
            .map(String::as_str)
    }

    /// The URL a PDB's SRCSRV stream gives for the source file `path`, when the stream
    /// says to download it (command-based VCS entries, such as Perforce's, are not
    /// something a server may run).
    pub fn srcsrv_url(&self, path: &str) -> Option<String> {
        let data = self
            .srcsrv
            .get_or_init(|| read_srcsrv(self.object()))
            .as_deref()?;
        let mut urls = self.srcsrv_urls.lock().unwrap();
        if let Some(url) = urls.get(path) {
            return url.clone();
        }
        let url = srcsrv::SrcSrvStream::parse(data)
            .ok()
            .and_then(|stream| stream.source_for_path(path, "").ok().flatten())
            .and_then(|method| match method {
                srcsrv::SourceRetrievalMethod::Download { url } => Some(url),
                _ => None,
            });
        urls.insert(path.to_owned(), url.clone());
        url
    }
}

/// The raw SRCSRV stream of a PDB; symbolic reads it but only exposes the VCS name.
fn read_srcsrv(object: &Object<'_>) -> Option<Vec<u8>> {
    let Object::Pdb(pdb) = object else {
        return None;
    };
    let mut pdb = pdb::PDB::open(std::io::Cursor::new(pdb.data())).ok()?;
    let stream = pdb.named_stream(b"srcsrv").ok()?;
    Some(stream.as_slice().to_vec())
}

/// What we remember about a fetched file without keeping it open: enough to choose
/// between candidates and to report features.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub features: ObjectFeatures,
    pub arch: Arch,
}

impl ObjectMeta {
    fn of(object: &Object<'_>) -> Self {
        ObjectMeta {
            features: ObjectFeatures {
                has_debug_info: object.has_debug_info(),
                has_unwind_info: object.has_unwind_info(),
                has_symbols: object.has_symbols(),
                has_sources: object.has_sources() || has_embedded_sources(object),
                srcsrv_vcs: srcsrv_vcs(object),
            },
            arch: object.arch(),
        }
    }
}

/// Which VCS a PDB's SRCSRV stream names, if it has one.
fn srcsrv_vcs(object: &Object<'_>) -> Option<SrcSrvVcs> {
    let Object::Pdb(pdb) = object else {
        return None;
    };
    match pdb.debug_session() {
        Ok(session) => session
            .srcsrv_vcs_name()
            .map(|name| SrcSrvVcs::from_vcs_name(&name)),
        Err(err) => {
            tracing::debug!(error = %err, "cannot open PDB debug session for SRCSRV");
            None
        }
    }
}

#[derive(Clone)]
struct FetchData {
    file: RemoteFile,
    object_id: ObjectId,
    downloader: Downloader,
    max_size: u64,
}

impl CacheItemRequest for FetchData {
    type Item = Arc<ObjectHandle>;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            fetch_file(&self.downloader, &self.file, temp_file, self.max_size).await?;
            let object_id = self.object_id.clone();
            let path = temp_file.path().to_owned();
            let extracted = tokio::task::spawn_blocking(move || extract_object(&path, &object_id))
                .await
                .map_err(CacheError::internal)??;
            if let Some(bytes) = extracted {
                let file = temp_file.as_file_mut();
                file.set_len(0).map_err(CacheError::internal)?;
                file.rewind().map_err(CacheError::internal)?;
                file.write_all(&bytes).map_err(CacheError::internal)?;
            }
            Ok(())
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        ObjectHandle::parse(data).map(Arc::new)
    }
}

/// Checks that the file parses. For a multi-object archive (fat Mach-O), returns the
/// bytes of the object that matches the module, since that is all we will ever use.
fn extract_object(path: &std::path::Path, id: &ObjectId) -> CacheResult<Option<Vec<u8>>> {
    let view = ByteView::open(path).map_err(CacheError::internal)?;
    let archive = Archive::parse(&view).map_err(|e| CacheError::Malformed(e.to_string()))?;
    if !archive.is_multi() {
        return match archive.object_by_index(0) {
            Ok(Some(_)) => Ok(None),
            Ok(None) => Err(CacheError::Malformed("no object in file".into())),
            Err(e) => Err(CacheError::Malformed(e.to_string())),
        };
    }
    let mut first_error = None;
    for object in archive.objects() {
        match object {
            Ok(object) if object_matches_id(&object, id) => {
                return Ok(Some(object.data().to_vec()));
            }
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(match first_error {
        Some(e) => CacheError::Malformed(e.to_string()),
        None => CacheError::NotFound,
    })
}

fn object_matches_id(object: &Object<'_>, id: &ObjectId) -> bool {
    if let Some(debug_id) = id.debug_id {
        let found = object.debug_id();
        // Symbol servers may serve a newer age of the same PDB for an older request.
        return found.uuid() == debug_id.uuid() && found.appendix() >= debug_id.appendix();
    }
    match (&id.code_id, object.code_id()) {
        (Some(wanted), Some(found)) => *wanted == found,
        _ => true,
    }
}

struct FetchMeta {
    data: FetchData,
    key: CacheKey,
    data_cache: Arc<Cacher<FetchData>>,
}

impl CacheItemRequest for FetchMeta {
    type Item = Arc<ObjectMeta>;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            let handle = self
                .data_cache
                .get(self.key.clone(), self.data.clone())
                .await?;
            let meta = ObjectMeta::of(handle.object());
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectPurpose {
    Debug,
    Unwind,
    Source,
}

/// A candidate that was chosen, with its metadata (or the error that is the best we
/// could do).
#[derive(Clone)]
pub struct FoundObject {
    pub file: RemoteFile,
    pub key: CacheKey,
    pub meta: CacheResult<Arc<ObjectMeta>>,
}

pub struct FindResult {
    pub found: Option<FoundObject>,
    pub candidates: AllObjectCandidates,
}

pub struct ObjectsActor {
    data: Arc<Cacher<FetchData>>,
    meta: Cacher<FetchMeta>,
    downloader: Downloader,
    max_download_size: u64,
    indexes: SymstoreIndexes,
}

impl ObjectsActor {
    pub fn new(caches: &Caches, downloader: Downloader, max_download_size: u64) -> Self {
        ObjectsActor {
            // Downloaded files are big and parsed on demand: they get a small share of
            // memory; what is hot lives in the derived caches.
            data: Arc::new(caches.downloaded(OBJECTS, caches.memory_share(1, 8))),
            meta: caches.derived(OBJECT_META, caches.memory_share(1, 64)),
            indexes: SymstoreIndexes::new(downloader.clone(), caches.memory_share(1, 64)),
            downloader,
            max_download_size,
        }
    }

    /// Every location where a file for `id` could be, in the order upstream tries
    /// them: sources in request order, then file types, then each layout's paths from
    /// the most to the least preferred (Sentry sources: their search's order). Sources
    /// with a symstore index only offer what their index lists.
    async fn list_files(
        &self,
        sources: &[SourceConfig],
        filetypes: &[FileType],
        id: &ObjectId,
        scope: &Scope,
    ) -> Vec<RemoteFile> {
        future::join_all(sources.iter().map(|source| async move {
            let mut files = self.downloader.list_files(source, filetypes, id).await;
            if SymstoreIndexes::applies_to(source)
                && !files.is_empty()
                && let Some(index) = self.indexes.get(source, scope).await
            {
                files.retain(|file| index.contains(&file.path));
            }
            files
        }))
        .await
        .into_iter()
        .flatten()
        .collect()
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
        let files = self.list_files(sources, filetypes, id, scope).await;
        let lookups = future::join_all(files.into_iter().map(|file| async move {
            let key = file.cache_key(scope);
            let request = FetchMeta {
                data: FetchData {
                    file: file.clone(),
                    object_id: id.clone(),
                    downloader: self.downloader.clone(),
                    max_size: self.max_download_size,
                },
                key: key.clone(),
                data_cache: self.data.clone(),
            };
            let meta = self.meta.get(key.clone(), request).await;
            FoundObject { file, key, meta }
        }))
        .await;

        let candidates = create_candidates(sources, &lookups);
        let found = select(lookups, purpose);
        FindResult { found, candidates }
    }

    /// The parsed file behind a found candidate.
    pub async fn fetch(
        &self,
        found: &FoundObject,
        id: &ObjectId,
    ) -> CacheResult<Arc<ObjectHandle>> {
        let request = FetchData {
            file: found.file.clone(),
            object_id: id.clone(),
            downloader: self.downloader.clone(),
            max_size: self.max_download_size,
        };
        self.data.get(found.key.clone(), request).await
    }
}

/// Lower is better; a later candidate only wins with a strictly better quality.
fn quality(meta: &CacheResult<Arc<ObjectMeta>>, purpose: ObjectPurpose) -> u8 {
    match meta {
        Ok(meta) => match purpose {
            ObjectPurpose::Debug if meta.features.has_debug_info => 0,
            ObjectPurpose::Debug if meta.features.has_symbols => 1,
            ObjectPurpose::Unwind if meta.features.has_unwind_info => 0,
            ObjectPurpose::Source if meta.features.has_sources => 0,
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
