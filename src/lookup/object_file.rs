//! Object files (ELF, Mach-O, PE, PDB, Breakpad, Wasm, portable PDB, source bundles) as
//! a downloaded format: checked when they land (one object kept out of a fat archive),
//! parsed on load, and asked for what the lookup needs to rank them (`ObjectMeta`) and
//! for the sources they carry or point to (DWARF 5 embedded sources, SRCSRV links).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::{Deserialize, Serialize};
use symbolic::common::{Arch, ByteView, SelfCell};
use symbolic::debuginfo::{Archive, Object};

use super::downloads::FileFormat;
use super::embedded_sources::{embedded_sources, has_embedded_sources};
use crate::cache::CacheKind;
use crate::error::{CacheError, CacheResult, isolate};
use crate::sources::ObjectId;
use crate::types::{ObjectFeatures, SrcSrvVcs};

pub const OBJECTS: CacheKind = CacheKind {
    name: "objects",
    version: 1,
    compatible: &[],
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
        #[cfg(test)]
        crate::error::panic_if_marked("load", &data);
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
            .get_or_init(|| {
                // A DWARF walk of a downloaded file: if it panics, the file has no
                // embedded sources (and the walk is not tried again).
                isolate("embedded sources", || Ok(embedded_sources(self.object())))
                    .unwrap_or_default()
            })
            .get(path)
            .map(String::as_str)
    }

    /// The URL a PDB's SRCSRV stream gives for the source file `path`, when the stream
    /// says to download it (command-based VCS entries, such as Perforce's, are not
    /// something a server may run).
    pub fn srcsrv_url(&self, path: &str) -> Option<String> {
        let data = self
            .srcsrv
            .get_or_init(|| {
                isolate("srcsrv stream", || Ok(read_srcsrv(self.object()))).unwrap_or(None)
            })
            .as_deref()?;
        let urls = || {
            self.srcsrv_urls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some(url) = urls().get(path) {
            return url.clone();
        }
        // Parsed without the lock held, so a parser that panics cannot poison it.
        let url = isolate("srcsrv stream", || {
            Ok(srcsrv::SrcSrvStream::parse(data)
                .ok()
                .and_then(|stream| stream.source_for_path(path, "").ok().flatten())
                .and_then(|method| match method {
                    srcsrv::SourceRetrievalMethod::Download { url } => Some(url),
                    _ => None,
                }))
        })
        .unwrap_or(None);
        let mut urls = urls();
        // One entry per source path a request asked for; a bound keeps a handle that
        // lives long in the cache from growing with every distinct path.
        if urls.len() < MAX_SRCSRV_PATHS {
            urls.insert(path.to_owned(), url.clone());
        }
        url
    }
}

/// How many SRCSRV answers one handle remembers.
const MAX_SRCSRV_PATHS: usize = 4096;

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
    pub fn of(object: &Object<'_>) -> Self {
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

/// Checks that the file parses. For a multi-object archive (fat Mach-O), returns the
/// bytes of the object that matches the module, since that is all we will ever use.
fn extract_object(path: &Path, id: &ObjectId) -> CacheResult<Option<Vec<u8>>> {
    let view = ByteView::open(path).map_err(CacheError::internal)?;
    #[cfg(test)]
    crate::error::panic_if_marked("prepare", &view);
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

/// The object-file format of downloaded debug files.
pub struct ObjectFile;

impl FileFormat for ObjectFile {
    type Item = Arc<ObjectHandle>;
    type Hint = ObjectId;
    const KIND: CacheKind = OBJECTS;

    fn prepare(path: &Path, id: &ObjectId) -> CacheResult<Option<Vec<u8>>> {
        extract_object(path, id)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        ObjectHandle::parse(data).map(Arc::new)
    }
}
