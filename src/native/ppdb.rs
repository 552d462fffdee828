//! PpdbCaches: line tables of .NET portable PDBs, looked up by method index and IL
//! offset (what .NET stack frames carry instead of addresses).

use std::sync::Arc;

use futures::future::BoxFuture;
use symbolic::common::{ByteView, Language, SelfCell, split_path};
use symbolic::debuginfo::Object;
use symbolic::ppdb::{PortablePdbCache, PortablePdbCacheConverter};
use tempfile::NamedTempFile;

use super::derived::{Derived, DerivedLookup, convert_object, fetch_derived};
use super::objects::{FoundObject, ObjectPurpose, ObjectsActor};
use crate::cache::{CacheError, CacheItemRequest, CacheKind, CacheResult, Cacher, Caches, Scope};
use crate::sources::{FileType, ObjectId, SourceConfig};
use crate::types::{FrameStatus, RawFrame, SymbolicatedFrame};

pub const PPDB_CACHES: CacheKind = CacheKind {
    name: "ppdb_caches",
    version: 1,
    compatible: &[],
};

pub type OwnedPpdbCache = Arc<SelfCell<ByteView<'static>, PortablePdbCache<'static>>>;

struct FetchPpdbCache {
    objects: Arc<ObjectsActor>,
    found: FoundObject,
    id: ObjectId,
}

impl CacheItemRequest for FetchPpdbCache {
    type Item = OwnedPpdbCache;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(convert_object(
            &self.objects,
            &self.found,
            &self.id,
            temp_file,
            |object, writer| {
                let Object::PortablePdb(ppdb) = object else {
                    return Err(CacheError::Unsupported(
                        "Only portable PDB files can be used for .NET symbolication".into(),
                    ));
                };
                let mut converter = PortablePdbCacheConverter::new();
                converter
                    .process_portable_pdb(ppdb.portable_pdb())
                    .map_err(|e| CacheError::Malformed(e.to_string()))?;
                converter.serialize(writer).map_err(CacheError::internal)
            },
        ))
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| PortablePdbCache::parse(unsafe { &*bytes }))
            .map(Arc::new)
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

pub struct PpdbCacheActor {
    objects: Arc<ObjectsActor>,
    caches: Cacher<FetchPpdbCache>,
}

impl PpdbCacheActor {
    pub fn new(caches: &Caches, objects: Arc<ObjectsActor>) -> Self {
        PpdbCacheActor {
            objects,
            caches: caches.derived(PPDB_CACHES, caches.memory_share(1, 16)),
        }
    }

    pub async fn fetch(
        &self,
        sources: &[SourceConfig],
        id: &ObjectId,
        scope: &Scope,
    ) -> Derived<OwnedPpdbCache> {
        let lookup = DerivedLookup {
            sources,
            filetypes: &[FileType::PortablePdb],
            id,
            scope,
            purpose: ObjectPurpose::Debug,
        };
        fetch_derived(&self.objects, &self.caches, lookup, |found| {
            FetchPpdbCache {
                objects: self.objects.clone(),
                found,
                id: id.clone(),
            }
        })
        .await
    }
}

/// A .NET frame: `function_id` is the method's index, `instruction_addr` the IL offset.
pub fn symbolicate_dotnet_frame(
    cache: &PortablePdbCache<'_>,
    frame: &RawFrame,
    index: usize,
) -> Result<Vec<SymbolicatedFrame>, FrameStatus> {
    let method = frame.function_id.ok_or(FrameStatus::MissingSymbol)?.0;
    let method = u32::try_from(method).map_err(|_| FrameStatus::MissingSymbol)?;
    let il_offset =
        u32::try_from(frame.instruction_addr.0).map_err(|_| FrameStatus::MissingSymbol)?;
    let line = cache
        .lookup(method, il_offset)
        .ok_or(FrameStatus::MissingSymbol)?;
    let filename = split_path(line.file_name).1;
    Ok(vec![SymbolicatedFrame {
        status: FrameStatus::Symbolicated,
        original_index: Some(index),
        raw: RawFrame {
            lang: (line.file_lang != Language::Unknown).then_some(line.file_lang),
            filename: (!filename.is_empty()).then(|| filename.to_owned()),
            abs_path: (!line.file_name.is_empty()).then(|| line.file_name.to_owned()),
            lineno: Some(line.line),
            ..frame.clone()
        },
    }])
}
