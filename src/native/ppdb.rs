//! PpdbCaches: line tables of .NET portable PDBs, looked up by method index and IL
//! offset (what .NET stack frames carry instead of addresses).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use symbolic::common::{ByteView, Language, SelfCell, split_path};
use symbolic::debuginfo::Object;
use symbolic::ppdb::{PortablePdbCache, PortablePdbCacheConverter};

use super::interface::{FrameStatus, RawFrame, SymbolicatedFrame};
use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose};
use crate::sources::{FileType, ObjectType};

pub type OwnedPpdbCache = Arc<SelfCell<ByteView<'static>, PortablePdbCache<'static>>>;

pub struct PpdbFormat;

impl DerivedFormat for PpdbFormat {
    type Input = Arc<ObjectHandle>;
    type Item = OwnedPpdbCache;
    const KIND: CacheKind = kinds::PPDB_CACHES;

    fn input_size(input: &Arc<ObjectHandle>) -> u64 {
        input.size()
    }

    fn convert(
        input: Arc<ObjectHandle>,
        out: &mut BufWriter<File>,
        _scratch: &Path,
    ) -> CacheResult<()> {
        let Some(Object::PortablePdb(ppdb)) = input.object() else {
            return Err(CacheError::Unsupported(
                "Only portable PDB files can be used for .NET symbolication".into(),
            ));
        };
        let mut converter = PortablePdbCacheConverter::new();
        converter
            .process_portable_pdb(ppdb.portable_pdb())
            .map_err(|e| CacheError::Malformed(e.to_string()))?;
        converter.serialize(out).map_err(CacheError::internal)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| PortablePdbCache::parse(unsafe { &*bytes }))
            .map(Arc::new)
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

impl ObjectDerivedFormat for PpdbFormat {
    const PURPOSE: ObjectPurpose = ObjectPurpose::Debug;
    type Secondary = ();

    fn input(object: Arc<ObjectHandle>, _: Arc<()>) -> Arc<ObjectHandle> {
        object
    }
    fn filetypes(_: ObjectType) -> &'static [FileType] {
        &[FileType::PortablePdb]
    }
}

pub type PpdbCaches = ObjectDerived<PpdbFormat>;

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
