//! SymCaches: the compact, memory-mappable lookup table built from the best debug file
//! of a module and its secondary inputs (`symcache_inputs`); what every warm
//! `/symbolicate` reads.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use symbolic::common::{ByteView, SelfCell};
use symbolic::symcache::{SymCache, SymCacheConverter};

use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{
    ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose, SecondaryInputs,
};

use super::symcache_inputs::SymCacheInputs;

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

    fn convert(input: SymCacheInput, out: &mut BufWriter<File>) -> CacheResult<()> {
        let object = input.object.object();
        #[cfg(test)]
        {
            crate::error::delay_if_marked("convert", object.data());
            crate::error::panic_if_marked("symcache", object.data());
        }
        // symbolic writes a symbol's address as a `u32` relative to the image: one past
        // 4 GiB of it would answer for a wrong, low address. (A function there is left
        // out by symbolic itself: a frame there is unknown, not wrong.)
        if let Some(symbol) = object.symbols().find(|s| s.address > u64::from(u32::MAX)) {
            return Err(CacheError::Malformed(format!(
                "symbol {} at 0x{:x} of the image, past the 4 GiB a SymCache addresses",
                symbol.name().unwrap_or("?"),
                symbol.address
            )));
        }
        let mut converter = SymCacheConverter::new();
        input.secondary.apply(&mut converter)?;
        let processed = converter.process_object(object);
        input.object.release_pages();
        processed.map_err(|e| CacheError::Malformed(e.to_string()))?;
        let mut counted = Counted::new(out);
        converter
            .serialize(&mut counted)
            .map_err(CacheError::internal)?;
        counted.check()
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        SelfCell::try_new(data, |bytes| SymCache::parse(unsafe { &*bytes }))
            .map(|cell| Arc::new(LoadedSymCache::new(cell)))
            .map_err(|e| CacheError::Malformed(e.to_string()))
    }
}

/// What symbolic wrote of a SymCache (version 9): its header, to check the string
/// table against. The table's size and every offset into it are `u32`s, which
/// symbolic's writer cuts (`as u32`) when the names and paths of a file add up to more
/// than 4 GiB: the cache would read back with wrong names.
struct Counted<W> {
    inner: W,
    head: Vec<u8>,
    written: u64,
}

/// `VersionInfo` (magic, version) and `v9::Header`: a debug id of 32 bytes, six `u32`
/// (arch, the four counts, `string_bytes`) and 16 reserved bytes.
const HEAD: usize = 8 + 32 + 6 * 4 + 16;

impl<W: std::io::Write> Counted<W> {
    fn new(inner: W) -> Self {
        Counted {
            inner,
            head: Vec::with_capacity(HEAD),
            written: 0,
        }
    }

    /// Where the string table starts by the header's counts, and its recorded size
    /// (`None` for a head too short to be a SymCache).
    fn layout(&self) -> Option<(u64, u64)> {
        let field = |index: usize| {
            let at = 8 + 32 + 4 * index;
            self.head
                .get(at..at + 4)
                .map(|b| u64::from(u32::from_le_bytes(b.try_into().expect("4 bytes"))))
        };
        let (files, functions, locations, ranges) = (field(1)?, field(2)?, field(3)?, field(4)?);
        let align = |at: u64| at.next_multiple_of(8);
        // Each array starts 8-aligned: files (6 u32), functions and source locations
        // (4 u32), ranges (1 u32).
        let strings = [(files, 24), (functions, 16), (locations, 16), (ranges, 4)]
            .iter()
            .fold(align(HEAD as u64), |at, &(count, size)| {
                align(at + count * size)
            });
        Some((strings, field(5)?))
    }

    /// The cache is refused when its string table is not the size the header says.
    fn check(&self) -> CacheResult<()> {
        match self.layout() {
            Some((start, recorded)) if start + recorded == self.written => Ok(()),
            _ => Err(CacheError::Malformed(format!(
                "the SymCache's names and paths take {} bytes, past the 4 GiB its string \
                 offsets address",
                self.written
                    .saturating_sub(self.layout().map_or(0, |(start, _)| start))
            ))),
        }
    }
}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let room = HEAD.saturating_sub(self.head.len()).min(n);
        self.head.extend_from_slice(&buf[..room]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
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

#[cfg(test)]
mod tests {
    use std::io::Write;
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
        SymCacheFormat::convert(Arc::new(object).into(), &mut writer)?;
        let mut file = writer.into_inner().unwrap();
        let mut bytes = Vec::new();
        std::io::Seek::rewind(&mut file).unwrap();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        Ok(bytes)
    }

    /// The layout the check reads is symbolic's: a real cache of the ELF fixture passes
    /// it, and one whose string table is not the size its header says does not.
    #[test]
    fn the_string_table_check_reads_symbolics_layout() {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/native/elf/crash.debug");
        let bytes = convert(&fixture).unwrap();
        assert!(SymCache::parse(&bytes).is_ok());
        let mut counted = Counted::new(Vec::new());
        counted.write_all(&bytes).unwrap();
        counted.check().unwrap();
        // As symbolic writes a table past 4 GiB: its size cut to the low 32 bits.
        let mut cut = Counted::new(Vec::new());
        cut.write_all(&bytes).unwrap();
        cut.write_all(b"more names").unwrap();
        assert!(matches!(cut.check(), Err(CacheError::Malformed(_))));
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
