//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module and its secondary inputs (`symcache_inputs`); what every warm
//! `/symbolicate` reads. Written by our own writer (`writer`), which makes symbolic's
//! format, byte for byte, in memory that does not grow with the file (`spill`).

mod breakpad;
#[cfg(test)]
mod differential;

mod writer;

pub use writer::{FunctionText, LocationText, Rewrite, undecorate_win_symbol};

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use symbolic::common::{ByteView, SelfCell, clean_path, join_path, split_path};
use symbolic::debuginfo::macho::BcSymbolMap;
use symbolic::symcache::SymCache;

use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{
    ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose, SecondaryInputs,
};

use self::writer::SpillingWriter;
use super::il2cpp_mapping::Il2cppMapping;
use super::pdb_read::SourceServer;
use super::symcache_inputs::SymCacheInputs;

/// What a conversion that streams its output (this writer, the CFI writer) holds in
/// memory at most beside what the debug file's own reader holds: one function or record
/// and the writer's buffers, however large the file. Measured peaks of the whole
/// conversion stay well inside it (docs/operations.md, "Large debug files").
pub const STREAMING_WORKING_SET: u64 = 128 << 20;

/// The conversion budget's charge for converting `object` with a streaming writer: the
/// sections its reader inflates onto the heap, and the working set, or the file's size
/// where that is less. A PDB is read through its mapping (`pdb_read`), one module at a
/// time, so it is charged as the others.
pub fn bounded_charge(object: &ObjectHandle) -> u64 {
    object
        .inflated_size(None)
        .saturating_add(object.size().min(STREAMING_WORKING_SET))
}

/// The writer's own failures: a table past the format's 32-bit limits is the file's
/// (`malformed`, as a file too large for the format), a disk that fails is ours.
fn spill_error(e: std::io::Error) -> CacheError {
    if e.kind() == std::io::ErrorKind::Other {
        CacheError::Malformed(e.to_string())
    } else {
        CacheError::internal(e)
    }
}

pub type OwnedSymCache = Arc<LoadedSymCache>;

/// A SymCache opened from its file, with an id no other one opened by this process
/// has (memos of what it answered are keyed by it: an address in memory may be
/// reused, an id is not).
pub struct LoadedSymCache {
    cell: SelfCell<ByteView<'static>, SymCache<'static>>,
    id: u64,
}

impl LoadedSymCache {
    fn new(cell: SelfCell<ByteView<'static>, SymCache<'static>>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        LoadedSymCache { cell, id }
    }

    pub fn get(&self) -> &SymCache<'_> {
        self.cell.get()
    }

    /// The file's bytes.
    pub fn owner(&self) -> &[u8] {
        self.cell.owner()
    }

    pub fn id(&self) -> u64 {
        self.id
    }
}

pub struct SymCacheFormat;

/// A debug file and what was found beside it.
pub struct SymCacheInput {
    object: Arc<ObjectHandle>,
    secondary: Arc<SymCacheInputs>,
}

/// The file alone, as a module without secondary inputs has it.
impl From<Arc<ObjectHandle>> for SymCacheInput {
    fn from(object: Arc<ObjectHandle>) -> Self {
        let secondary = Arc::default();
        SymCacheInput { object, secondary }
    }
}

impl DerivedFormat for SymCacheFormat {
    type Input = SymCacheInput;
    type Item = OwnedSymCache;
    const KIND: CacheKind = kinds::SYMCACHES;

    fn input_size(input: &SymCacheInput) -> u64 {
        input
            .object
            .conversion_size()
            .saturating_add(input.secondary.size())
    }

    fn memory_charge(input: &SymCacheInput) -> u64 {
        bounded_charge(&input.object).saturating_add(input.secondary.size())
    }

    fn convert(input: SymCacheInput, out: &mut BufWriter<File>, scratch: &Path) -> CacheResult<()> {
        #[cfg(test)]
        {
            let data = input.object.data();
            crate::error::delay_if_marked("convert", data);
            crate::error::panic_if_marked("symcache", data);
        }
        let mut writer = SpillingWriter::new_in(scratch).map_err(CacheError::internal)?;
        let inputs = input.secondary.parse()?;
        if let Some(map) = inputs.bcsymbolmap {
            writer.add_rewrite(HiddenNames(map));
        }
        if let Some(mapping) = inputs.il2cpp {
            writer.add_rewrite(mapping);
        }
        // A module with DWARF answers from it; its source map only stands in for it.
        let processed = match (inputs.wasm_source_map, input.object.object()) {
            (Some(map), Some(object)) if !object.has_debug_info() => {
                writer.process_wasm_source_map(object, &map)
            }
            _ => writer.process_handle(&input.object, scratch),
        };
        input.object.release_pages();
        processed
            .map_err(spill_error)?
            .map_err(CacheError::Malformed)?;
        writer.serialize(out, scratch).map_err(spill_error)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| SymCache::parse(unsafe { &*bytes }))
            .map(|cell| Arc::new(LoadedSymCache::new(cell)))
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

impl ObjectDerivedFormat for SymCacheFormat {
    const PURPOSE: ObjectPurpose = ObjectPurpose::Debug;
    type Secondary = SymCacheInputs;

    fn input(object: Arc<ObjectHandle>, secondary: Arc<SymCacheInputs>) -> SymCacheInput {
        SymCacheInput { object, secondary }
    }
}

pub type SymCaches = ObjectDerived<SymCacheFormat>;

/// A BCSymbolMap restores the names a bitcode build hid as `__hidden#N_`, in function
/// names, file names and their directories, as symbolic's transformer does.
struct HiddenNames<'a>(BcSymbolMap<'a>);

impl HiddenNames<'_> {
    fn resolve<'f>(&'f self, s: Cow<'f, str>) -> Cow<'f, str> {
        match s {
            Cow::Borrowed(inner) => Cow::Borrowed(self.0.resolve(inner)),
            Cow::Owned(inner) => Cow::Owned(self.0.resolve(&inner).to_owned()),
        }
    }
}

impl Rewrite for HiddenNames<'_> {
    fn file_only(&self) -> bool {
        true
    }

    fn function<'f>(&'f mut self, f: FunctionText<'f>) -> FunctionText<'f> {
        let this: &'f Self = self;
        FunctionText {
            name: this.resolve(f.name),
            comp_dir: f.comp_dir.map(|dir| this.resolve(dir)),
        }
    }

    fn location<'f>(&'f mut self, l: LocationText<'f>) -> LocationText<'f> {
        let this: &'f Self = self;
        LocationText {
            name: this.resolve(l.name),
            directory: l.directory.map(|dir| this.resolve(dir)),
            comp_dir: l.comp_dir.map(|dir| this.resolve(dir)),
            ..l
        }
    }
}

/// A PDB's SRCSRV stream adds each file's place on the source server, as symbolic's
/// PDB session does to the files it reads: from the file's path as read, before any
/// other rewrite.
impl Rewrite for SourceServer {
    fn location<'f>(&'f mut self, mut l: LocationText<'f>) -> LocationText<'f> {
        let path = clean_path(&join_path(
            l.directory.as_deref().unwrap_or_default(),
            &l.name,
        ))
        .into_owned();
        if let Some(info) = self.info(&path) {
            let (dir, name) = split_path(&info.path);
            l.srcsrv_name = Some(Cow::Owned(name.to_owned()));
            l.srcsrv_dir = dir.map(|dir| Cow::Owned(dir.to_owned()));
            l.srcsrv_revision = info.revision.map(Cow::Owned);
        }
        l
    }

    fn file_only(&self) -> bool {
        true
    }
}

/// An il2cpp line mapping moves lines of generated C++ to the C# they came from.
impl Rewrite for Il2cppMapping {
    fn location<'f>(&'f mut self, mut l: LocationText<'f>) -> LocationText<'f> {
        let this: &'f Self = self;
        let found = this.remap(
            l.comp_dir.as_deref(),
            l.directory.as_deref(),
            &l.name,
            l.line,
        );
        if let Some((cs_file, cs_line)) = found {
            l.name = Cow::Borrowed(cs_file);
            l.comp_dir = None;
            l.directory = None;
            l.line = cs_line;
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::lookup::ObjectLimits;

    #[test]
    fn symcache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the SymCache format: bump cache::kinds::SYMCACHES.
        assert_eq!(symbolic::symcache::SYMCACHE_VERSION, 9);
    }

    fn convert(path: &std::path::Path) -> CacheResult<Vec<u8>> {
        let data = ByteView::open(path).unwrap();
        let object = ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap();
        let out = tempfile::tempfile().unwrap();
        let mut writer = BufWriter::new(out);
        let scratch = tempfile::tempdir().unwrap();
        SymCacheFormat::convert(Arc::new(object).into(), &mut writer, scratch.path())?;
        let mut file = writer.into_inner().unwrap();
        let mut bytes = Vec::new();
        std::io::Seek::rewind(&mut file).unwrap();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        Ok(bytes)
    }

    /// A PDB of 8 KiB pages (lld-link `/pdbpagesize:8192`, fixtures/large_files), the
    /// page size a PDB past 4 GiB needs: the pdb crate reads page sizes from 256 bytes
    /// to 8 MiB, with 64-bit file offsets.
    #[test]
    fn a_pdb_of_8_kib_pages_converts() {
        let pdb = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/large_files/pdb8k/prog.pdb");
        assert_eq!(
            &std::fs::read(&pdb).unwrap()[0x20..0x24],
            &8192u32.to_le_bytes()
        );
        let bytes = convert(&pdb).unwrap();
        let cache = SymCache::parse(&bytes).unwrap();
        let names: Vec<String> = cache.functions().map(|f| f.name().to_owned()).collect();
        assert!(names.iter().any(|n| n.starts_with("work(")), "{names:?}");
    }

    /// A symbol 5 GiB past the image's start (gcc, a section placed there by the
    /// linker): symbolic would record it at 1 GiB, so the conversion is refused.
    #[test]
    fn a_symbol_past_4_gib_of_the_image_is_malformed_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("far.c");
        std::fs::write(
            &source,
            "__attribute__((section(\".far\"), noinline)) int far_away(int x) { return x + 1; }\n\
             void _start(void) { far_away(1); for (;;) {} }\n",
        )
        .unwrap();
        let out = dir.path().join("far");
        let built = Command::new("gcc")
            .args([
                "-O1",
                "-nostdlib",
                "-static",
                "-no-pie",
                "-mcmodel=large",
                "-fno-asynchronous-unwind-tables",
                "-Wl,--section-start=.far=0x140400000",
                "-o",
            ])
            .arg(&out)
            .arg(&source)
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let err = convert(&out).unwrap_err();
        assert!(
            matches!(&err, CacheError::Malformed(m) if m.contains("far_away")),
            "{err:?}"
        );
    }
}
