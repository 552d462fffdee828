//! CFI caches: the unwind information of a module (ELF `.eh_frame`/`.debug_frame`,
//! Mach-O compact unwind, PE `.pdata`, PDB frame data, Breakpad `STACK` records) in
//! Breakpad's text form, wrapped in symbolic's `CfiCache` container, which the stack
//! walker evaluates with `minidump_unwind::SymbolFile`.
//!
//! A loaded cache stays memory-mapped: one pass over its text builds an index of where
//! each record is (`index`), and each walk parses only the record covering its address
//! into a `SymbolFile` and lets that walk the frame, so the rules are evaluated by
//! minidump-unwind's own code and the record chosen is the one the whole file would
//! give. Parsing a whole file would keep about twice its text on the heap for as long
//! as it is cached, and take some 5 ms per MiB before the first frame. A text outside
//! what the index reads (not written by symbolic) is parsed whole.

mod frame_data;
mod index;

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use minidump::Module;
use minidump_unwind::{FrameWalker, SymbolFile};
use std::io::Write;

use symbolic::cfi::{
    AsciiCfiWriter, CFICACHE_LATEST_VERSION, CfiCache, CfiErrorKind, FromObjectOptions,
};
use symbolic::common::{ByteView, DebugId};
use symbolic::debuginfo::Object;
use symbolic::debuginfo::breakpad::BreakpadModuleRecord;

use self::index::{CfiIndex, WinKind};
use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose};

/// Unwind rules of one module, ready for the stack walker.
pub struct CfiModule {
    rules: Rules,
    /// The ids the file names in its `MODULE` record; used to fill in what a
    /// minidump's module list lacks.
    pub debug_id: Option<DebugId>,
    pub debug_file: Option<String>,
}

enum Rules {
    /// The mapped cache and where its records are.
    Indexed {
        cache: CfiCache<'static>,
        index: CfiIndex,
    },
    /// A text the index does not read, parsed whole.
    Parsed(Box<SymbolFile>),
}

impl CfiModule {
    /// Whether the rules cover `relative_addr`. A module with rules that do not cover
    /// an address cannot have code there, which is what rejects scanned frames.
    pub fn covers(&self, relative_addr: u64) -> bool {
        match &self.rules {
            Rules::Indexed { index, .. } => {
                index.cfi.is_empty() || index.cfi.find(relative_addr).is_some()
            }
            Rules::Parsed(symbols) => {
                symbols.cfi_stack_info.is_empty()
                    || symbols.cfi_stack_info.get(relative_addr).is_some()
            }
        }
    }

    pub fn walk_frame(&self, module: &dyn Module, walker: &mut dyn FrameWalker) -> Option<()> {
        match &self.rules {
            Rules::Indexed { cache, index } => {
                let relative = walker
                    .get_instruction()
                    .checked_sub(module.base_address())?;
                records_at(cache.as_slice(), index, relative)?.walk_frame(module, walker)
            }
            Rules::Parsed(symbols) => symbols.walk_frame(module, walker),
        }
    }

    /// Heap the item holds beyond its mapping, for the memory factor's test.
    #[cfg(test)]
    fn heap_bytes(&self) -> Option<usize> {
        match &self.rules {
            Rules::Indexed { index, .. } => Some(index.heap_bytes()),
            Rules::Parsed(_) => None,
        }
    }
}

/// The records `SymbolFile::walk_frame` consults for `relative`, parsed into a file of
/// their own: the frame data entry or else the FPO one, and the CFI block. `None` when
/// there is none, where the whole file's walk gives `None` without touching the walker.
fn records_at(text: &[u8], index: &CfiIndex, relative: u64) -> Option<SymbolFile> {
    let win = index.win(relative);
    let cfi = index.cfi.find(relative);
    let mut symbols = match win {
        Some((kind, span)) => {
            let mut symbols = SymbolFile::from_bytes(span.text(text)?).ok()?;
            let map = match kind {
                WinKind::FrameData => &mut symbols.win_stack_framedata_info,
                WinKind::Fpo => &mut symbols.win_stack_fpo_info,
            };
            // The whole file's parse cuts a record short where the next one of its
            // type starts; the walk does not read the size, but this keeps the record
            // equal to the whole file's.
            for (range, info) in map.as_mut_slice() {
                if let Some(end) = range
                    .start
                    .checked_add(u64::from(span.size).saturating_sub(1))
                {
                    range.end = end;
                    info.size = span.size;
                }
            }
            symbols
        }
        None => SymbolFile::from_bytes(cfi?.text(text)?).ok()?,
    };
    if let (Some(_), Some(span)) = (win, cfi) {
        symbols.cfi_stack_info = SymbolFile::from_bytes(span.text(text)?)
            .ok()?
            .cfi_stack_info;
    }
    Some(symbols)
}

/// `None` when the module's file has no unwind information at all.
pub type CfiItem = Option<Arc<CfiModule>>;

fn parse_cfi(data: ByteView<'static>) -> CacheResult<CfiItem> {
    let malformed = |e: &dyn std::fmt::Display| CacheError::Malformed(e.to_string());
    let cache = CfiCache::from_bytes(data).map_err(|e| malformed(&e))?;
    let text = cache.as_slice();
    if text.is_empty() {
        return Ok(None);
    }
    let first_line = text.split(|b| *b == b'\n').next().unwrap_or_default();
    let record = BreakpadModuleRecord::parse(first_line).ok();
    let debug_id = record.as_ref().and_then(|r| r.id.parse().ok());
    let debug_file = record.map(|r| r.name.to_owned());
    let rules = match index::build(text) {
        Some(index) => Rules::Indexed { cache, index },
        None => Rules::Parsed(Box::new(
            SymbolFile::from_bytes(text).map_err(|e| malformed(&e))?,
        )),
    };
    Ok(Some(Arc::new(CfiModule {
        rules,
        debug_id,
        debug_file,
    })))
}

pub struct CfiFormat;

impl DerivedFormat for CfiFormat {
    type Input = Arc<ObjectHandle>;
    type Item = CfiItem;
    const KIND: CacheKind = kinds::CFICACHES;
    /// The item holds its mapped file, which the kernel can drop and read again, and on
    /// the heap the index: 20 bytes a record, a fifth to a tenth of the record's text.
    /// Weighing the file once covers the index. (A text the index does not read is
    /// parsed whole, about twice its size, but symbolic does not write such texts.) An
    /// overstated factor is not free: it made the large modules of a crash weigh more
    /// than the memory layer's share, so every warm request loaded them again.
    const MEMORY_FACTOR: u32 = 1;

    fn input_size(input: &Arc<ObjectHandle>) -> u64 {
        input.conversion_size()
    }

    fn memory_charge(input: &Arc<ObjectHandle>) -> u64 {
        super::symcache::bounded_charge(input)
    }

    fn convert(
        input: Arc<ObjectHandle>,
        out: &mut BufWriter<File>,
        scratch: &Path,
    ) -> CacheResult<()> {
        let written = if input.file_format() == symbolic::debuginfo::FileFormat::Pdb {
            write_pdb_cfi(&input, scratch, out)
        } else {
            input
                .symbolic_object()
                .and_then(|object| write_cfi(&object, input.limits().cfi_options(), out))
        };
        input.release_pages();
        written
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        parse_cfi(data)
    }
}

impl ObjectDerivedFormat for CfiFormat {
    const PURPOSE: ObjectPurpose = ObjectPurpose::Unwind;
    type Secondary = ();

    fn input(object: Arc<ObjectHandle>, _: Arc<()>) -> Arc<ObjectHandle> {
        object
    }
}

pub type CfiCaches = ObjectDerived<CfiFormat>;

/// What `CfiCache::from_object_with_opts` and `write_to` write, streamed to `out`:
/// symbolic's way holds the whole text in memory first, as large as the cache (hundreds
/// of MiB for a large module), while the writer itself needs only the record it is
/// writing.
fn write_cfi<W: Write>(
    object: &Object<'_>,
    options: FromObjectOptions,
    out: &mut W,
) -> CacheResult<()> {
    write_cache_header(out)?;
    if let Object::Pe(pe) = object
        && let Some(debug_file) = pe.debug_file_name()
    {
        writeln!(
            out,
            "MODULE windows {} {} {debug_file}",
            object.arch().name(),
            object.debug_id().breakpad(),
        )
        .map_err(CacheError::internal)?;
    }
    AsciiCfiWriter::new(&mut *out)
        .max_unwind_chain_len(options.max_unwind_chain_len)
        .process(object)
        .map_err(|e| match e.kind() {
            CfiErrorKind::WriteFailed => CacheError::internal(e),
            _ => CacheError::Malformed(e.to_string()),
        })
}

/// `write_cfi` for a PDB, whose frame data is read through the file's mapping
/// (`frame_data`), scattered streams spilling to `spill_dir`.
fn write_pdb_cfi<W: Write>(
    handle: &Arc<ObjectHandle>,
    spill_dir: &Path,
    out: &mut W,
) -> CacheResult<()> {
    write_cache_header(out)?;
    frame_data::write(handle, spill_dir, out)
}

/// The header of symbolic's `CfiCache`, which the text follows.
fn write_cache_header<W: Write>(out: &mut W) -> CacheResult<()> {
    out.write_all(&symbolic::cfi::CFICACHE_MAGIC.to_ne_bytes())
        .and_then(|()| out.write_all(&CFICACHE_LATEST_VERSION.to_ne_bytes()))
        .map_err(CacheError::internal)
}

#[cfg(test)]
mod tests {
    use minidump::MinidumpModule;

    use super::*;

    /// The streamed writer writes what symbolic's `CfiCache` holds, byte for byte, for
    /// every fixture debug file with unwind information.
    #[test]
    fn streamed_cfi_is_symbolics_bytes_for_every_fixture() {
        fn walk(dir: &std::path::Path, into: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, into)
                } else {
                    into.push(path)
                }
            }
        }
        let mut files = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
            &mut files,
        );
        let (mut compared, mut pdbs) = (0, 0);
        for path in files {
            let Ok(data) = ByteView::open(&path) else {
                continue;
            };
            let Ok(archive) = symbolic::debuginfo::Archive::parse(&data) else {
                continue;
            };
            for object in archive.objects().flatten() {
                let mut options = FromObjectOptions::default();
                options.max_unwind_chain_len = Some(32);
                let Ok(cache) = CfiCache::from_object_with_opts(&object, options) else {
                    continue;
                };
                let mut theirs = Vec::new();
                cache.write_to(&mut theirs).unwrap();
                let mut ours = Vec::new();
                if let symbolic::debuginfo::Object::Pdb(_) = object {
                    let handle = Arc::new(
                        ObjectHandle::from_bytes(data.clone(), Default::default()).unwrap(),
                    );
                    let spill = tempfile::tempdir().unwrap();
                    write_pdb_cfi(&handle, spill.path(), &mut ours).unwrap();
                    pdbs += usize::from(theirs.len() > 8);
                } else {
                    write_cfi(&object, options, &mut ours).unwrap();
                }
                assert!(ours == theirs, "{}: the CFI text differs", path.display());
                if theirs.len() > 8 {
                    compared += 1;
                }
            }
        }
        assert!(
            compared >= 12 && pdbs >= 1,
            "only {compared} files with unwind info compared, {pdbs} of them PDBs"
        );
    }

    #[test]
    fn cficache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the CfiCache format: bump cache::kinds::CFICACHES.
        assert_eq!(symbolic::cfi::CFICACHE_LATEST_VERSION, 2);
    }

    #[test]
    fn breakpad_stack_records_parse_into_rules() {
        let sym = b"MODULE Linux x86_64 C0BCC3F19827FE653058404B2831D9E60 crash\n\
                    STACK CFI INIT 1000 20 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n";
        let object = symbolic::debuginfo::Object::parse(sym).unwrap();
        let cache = CfiCache::from_object(&object).unwrap();
        let mut bytes = Vec::new();
        cache.write_to(&mut bytes).unwrap();
        let module = parse_cfi(ByteView::from_vec(bytes)).unwrap().unwrap();
        assert!(module.covers(0x1010));
        assert!(!module.covers(0x2000));
        // symbolic names the module only for PE files (whose dumps may lack the PDB
        // name); the other formats carry their ids in the dump's module list.
        assert_eq!(module.debug_file, None);
    }

    /// The fixtures with unwind information: DWARF CFI (ELF), PE unwind info and
    /// Breakpad text. None has `STACK WIN` records (the PDB's are x64: none); `TRICKY`
    /// below has.
    const FIXTURES: [&str; 7] = [
        "fixtures/native/elf/crash",
        "fixtures/native/pe/crash.exe",
        "fixtures/native/breakpad/crash.sym",
        "fixtures/native/breakpad/crash_pe.sym",
        "fixtures/minidump/nofp/crash",
        "fixtures/minidump/fp/crash",
        "fixtures/minidump/fp/crash.sym",
    ];

    /// The CFI text symbolic writes for a fixture.
    fn fixture_text(fixture: &str) -> Vec<u8> {
        let path = format!("{}/{fixture}", env!("CARGO_MANIFEST_DIR"));
        let data = std::fs::read(path).unwrap();
        let object = symbolic::debuginfo::Object::parse(&data).unwrap();
        CfiCache::from_object(&object).unwrap().as_slice().to_vec()
    }

    /// `text` loaded as the server loads a cache file.
    fn load(text: &[u8]) -> CacheResult<CfiItem> {
        let mut bytes = symbolic::cfi::CFICACHE_MAGIC.to_ne_bytes().to_vec();
        bytes.extend(symbolic::cfi::CFICACHE_LATEST_VERSION.to_ne_bytes());
        bytes.extend(text);
        parse_cfi(ByteView::from_vec(bytes))
    }

    fn indexed(module: &CfiModule) -> (&[u8], &CfiIndex) {
        match &module.rules {
            Rules::Indexed { cache, index } => (cache.as_slice(), index),
            Rules::Parsed(_) => panic!("the text was parsed whole"),
        }
    }

    #[test]
    fn the_memory_factor_covers_the_index() {
        let mut records = 0;
        for fixture in FIXTURES {
            let text = fixture_text(fixture);
            let module = load(&text).unwrap().unwrap();
            let (_, index) = indexed(&module);
            records += index.cfi.len() + index.framedata.len() + index.fpo.len();
            // A quarter more for the allocator's size classes.
            let weighed = module.heap_bytes().unwrap() * 5 / 4;
            let allowed = text.len() * CfiFormat::MEMORY_FACTOR as usize;
            assert!(weighed <= allowed, "{fixture}: {weighed} > {allowed}");
        }
        assert!(records > 50, "{records}");
    }

    const BASE: u64 = 0x7f00_0000_0000;

    /// What a walk did to the walker.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Walked {
        result: Option<()>,
        set: Vec<(String, u64)>,
        cleared: Vec<String>,
        start_addresses: Vec<Option<u64>>,
    }

    /// A walker whose registers and stack words are derived from their names and
    /// addresses, some unknown, so rules that read different things give different walks.
    struct Recorder {
        instruction: u64,
        walked: Walked,
    }

    fn word(seed: u64) -> u64 {
        seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16
    }

    impl FrameWalker for Recorder {
        fn get_instruction(&self) -> u64 {
            self.instruction
        }
        fn has_grand_callee(&self) -> bool {
            true
        }
        fn get_grand_callee_parameter_size(&self) -> u32 {
            8
        }
        fn get_register_at_address(&self, address: u64) -> Option<u64> {
            (address % 7 != 3).then(|| word(address))
        }
        fn get_callee_register(&self, name: &str) -> Option<u64> {
            let seed = name
                .bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31) + u64::from(b));
            (seed % 5 != 1).then(|| BASE + word(seed) % 0x1_0000)
        }
        fn set_caller_register(&mut self, name: &str, val: u64) -> Option<()> {
            self.walked.set.push((name.to_owned(), val));
            Some(())
        }
        fn clear_caller_register(&mut self, name: &str) {
            self.walked.cleared.push(name.to_owned());
        }
        fn set_cfa(&mut self, val: u64) -> Option<()> {
            self.walked.set.push((".cfa".to_owned(), val));
            Some(())
        }
        fn set_ra(&mut self, val: u64) -> Option<()> {
            self.walked.set.push((".ra".to_owned(), val));
            Some(())
        }
        fn set_cfi_rules_start_address(&mut self, addr: Option<u64>) {
            self.walked.start_addresses.push(addr);
        }
    }

    fn walk(relative: u64, f: impl FnOnce(&mut Recorder) -> Option<()>) -> Walked {
        let mut walker = Recorder {
            instruction: BASE.wrapping_add(relative),
            walked: Walked::default(),
        };
        walker.walked.result = f(&mut walker);
        walker.walked.set.sort();
        walker.walked.cleared.sort();
        walker.walked
    }

    /// Addresses in and around every record of `text`, dropped ones included: read off
    /// its lines loosely, so garbled records give addresses too.
    fn probe_addresses(text: &[u8]) -> Vec<u64> {
        let hex = |token: Option<&str>| token.and_then(|t| u64::from_str_radix(t, 16).ok());
        let mut out = vec![0, 1, u64::MAX];
        for line in String::from_utf8_lossy(text).lines() {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let (start, size) = match tokens.as_slice() {
                ["STACK", "CFI", "INIT", start, size, ..] => (hex(Some(start)), hex(Some(size))),
                ["STACK", "WIN", _, start, size, ..] => (hex(Some(start)), hex(Some(size))),
                ["STACK", "CFI", start, ..] => (hex(Some(start)), Some(1)),
                _ => continue,
            };
            let (Some(start), Some(size)) = (start, size) else {
                continue;
            };
            for at in [0, 1, size / 2, size.wrapping_sub(1), size] {
                out.extend([
                    start.wrapping_add(at),
                    start.wrapping_add(at).wrapping_sub(1),
                ]);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// For every address in and around every record of `text`, the index picks the
    /// records the whole file's parse does and the walk gives the same result. Returns
    /// how many addresses some record covered and how many walks succeeded.
    fn assert_same_as_whole_file(text: &[u8]) -> (usize, usize) {
        let whole = SymbolFile::from_bytes(text).unwrap();
        let item = load(text).unwrap().unwrap();
        let (mapped, index) = indexed(&item);
        let module = MinidumpModule::new(BASE, u32::MAX, "module");
        let (mut covered, mut walked) = (0, 0);
        for relative in probe_addresses(text) {
            let at = format!("{relative:#x}");
            let covers =
                whole.cfi_stack_info.is_empty() || whole.cfi_stack_info.get(relative).is_some();
            assert_eq!(item.covers(relative), covers, "{at}");

            let picked = records_at(mapped, index, relative);
            let framedata = whole.win_stack_framedata_info.get(relative);
            let fpo = whole
                .win_stack_fpo_info
                .get(relative)
                .filter(|_| framedata.is_none());
            let cfi = whole.cfi_stack_info.get(relative);
            match &picked {
                Some(picked) => {
                    assert_eq!(
                        picked.win_stack_framedata_info.get(relative),
                        framedata,
                        "{at}"
                    );
                    assert_eq!(picked.win_stack_fpo_info.get(relative), fpo, "{at}");
                    assert_eq!(picked.cfi_stack_info.get(relative), cfi, "{at}");
                    covered += 1;
                }
                None => assert!(
                    framedata.is_none() && fpo.is_none() && cfi.is_none(),
                    "{at}"
                ),
            }
            // The walker sets registers in the order of a hash map: compare them sorted.
            let expected = walk(relative, |w| whole.walk_frame(&module, w));
            let got = walk(relative, |w| item.walk_frame(&module, w));
            assert_eq!(got, expected, "{at}");
            walked += usize::from(got.result.is_some());
        }
        (covered, walked)
    }

    #[test]
    fn the_index_picks_what_the_whole_file_does_on_the_fixtures() {
        for fixture in FIXTURES {
            let (covered, walked) = assert_same_as_whole_file(&fixture_text(fixture));
            assert!(covered > 20 && walked > 20, "{fixture}: {covered} {walked}");
        }
    }

    /// Breakpad text with every case the parser resolves: overlapping, duplicate and
    /// same-start INIT blocks, empty and overflowing ranges, ADD rules out of order,
    /// `STACK WIN` records of both kinds cut short, dropped, duplicated or of other
    /// types, and all three kinds covering one address.
    const TRICKY: &str = "MODULE windows x86 8E0A63CEE693FDC74C4C44205044422E1 crash.pdb
STACK CFI INIT 1000 100 .cfa: $esp 4 + .ra: .cfa -4 + ^
STACK CFI 1010 .cfa: $esp 8 + $ebp: .cfa -8 + ^
STACK CFI 1040 .cfa: $ebp 8 +
STACK CFI 1020 .cfa: $esp 12 +
STACK CFI INIT 1050 100 .cfa: $esp 16 + .ra: .cfa -4 + ^
STACK CFI INIT 1000 100 .cfa: $esp 4 + .ra: .cfa -4 + ^
STACK CFI 1010 .cfa: $esp 8 + $ebp: .cfa -8 + ^
STACK CFI 1040 .cfa: $ebp 8 +
STACK CFI 1020 .cfa: $esp 12 +
STACK CFI INIT 1000 80 .cfa: $esp 20 + .ra: .cfa -4 + ^
STACK CFI INIT 1100 10 .cfa: $esp 4 + .ra: .cfa -4 + ^

STACK CFI INIT 1110 0 .cfa: $esp 4 + .ra: .cfa -4 + ^
STACK CFI INIT\t1200\t20\t.cfa: $esp 24 + .ra: .cfa -4 + ^
STACK CFI\t1208\t.cfa: $esp 28 +
STACK CFI INIT 1300 20 
STACK CFI INIT 1400 20 .cfa: $nonsense 4 + .ra: .cfa -4 + ^
STACK CFI INIT 1500 10 .cfa: $esp 4 + .ra: .cfa -4 + ^
STACK CFI INIT 150f 10 .cfa: $esp 8 + .ra: .cfa -4 + ^
STACK CFI INIT 1510 10 .cfa: $esp 12 + .ra: .cfa -4 + ^
STACK CFI INIT ffffffffffffff00 100 .cfa: $esp 4 + .ra: .cfa -4 + ^
STACK CFI INIT fffffffffffffe00 100 .cfa: $esp 4 + .ra: .cfa -4 + ^
STACK CFI fffffffffffffe80 .cfa: $esp 8 +
STACK WIN 4 3000 100 4 0 8 4 10 0 1 $T0 $ebp = $eip $T0 4 + ^ = $ebp $T0 ^ = $esp $T0 8 + =
STACK WIN 4 3010 f0 4 0 8 4 10 0 1 $T0 $ebp = $eip $T0 4 + ^ = $ebp $T0 ^ = $esp $T0 12 + =
STACK WIN 4 3040 c0 4 0 8 4 10 0 1 $T0 $ebp = $eip $T0 8 + ^ = $ebp $T0 ^ = $esp $T0 16 + =
STACK WIN 4 3000 10 4 0 8 4 10 0 1 $eip $esp ^ = $esp $esp 4 + =
STACK WIN 4 3040 c0 4 0 8 4 10 0 1 $T0 $ebp = $eip $T0 8 + ^ = $ebp $T0 ^ = $esp $T0 16 + =
STACK WIN 4 3200 10 4 0 8 4 10 0 1 $eip $esp ^ = $esp $esp 4 + =
STACK WIN 4 31f8 20 4 0 8 4 10 0 1 $eip $esp ^ = $esp $esp 8 + =
STACK WIN 4 3300 10 4 0 8 4 10 0 0 0
STACK WIN 0 3300 10 4 0 8 4 10 0 1 $eip $esp ^ =
STACK WIN 2 3400 10 4 0 8 4 10 0 0 1
STACK WIN 0 1000 40 4 0 8 4 10 0 0 1
STACK WIN 0 1020 40 4 0 8 4 10 0 0 0
STACK WIN 0 1010 8 4 0 8 4 10 0 0 1
STACK WIN 0 3500 20 0 0 0 0 0 0 0 0
STACK WIN 4 0 0 4 0 8 4 10 0 1 $eip $esp ^ =
STACK WIN 4 ffffffffffffff80 100 4 0 8 4 10 0 1 $eip $esp ^ =
";

    #[test]
    fn the_index_picks_what_the_whole_file_does_on_tricky_records() {
        let item = load(TRICKY.as_bytes()).unwrap().unwrap();
        let (_, index) = indexed(&item);
        // What the cases above must leave: 1000+80, 1100, 1200, 1300, 1400, 1500, 1510,
        // fe00 of the blocks; 3000 (cut to 10), 3010 (cut to 30), 3040, 3200 of the frame data;
        // 1000 (cut to 20), 1020, 3500 of the FPO records.
        assert_eq!(index.cfi.len(), 8);
        assert_eq!(index.framedata.len(), 4);
        assert_eq!(index.fpo.len(), 3);
        let (covered, walked) = assert_same_as_whole_file(TRICKY.as_bytes());
        assert!(covered > 50 && walked > 50, "{covered} {walked}");
    }

    /// Garbled and truncated texts: loading never panics, a text the parser rejects is
    /// rejected, and whatever loads answers as the whole file would.
    #[test]
    fn garbled_texts_load_as_the_parser_reads_them() {
        let text = TRICKY.as_bytes();
        let mut variants: Vec<Vec<u8>> = Vec::new();
        for end in (0..text.len()).step_by(7) {
            variants.push(text[..end].to_vec());
        }
        let garbage: [&[u8]; 9] = [
            b"\r",
            b"\xff",
            b"\n",
            b"\n\n",
            b" ",
            b"\t",
            b"STACK CFI 10 .cfa: $esp 4 +\n",
            b"0",
            b"MODULE windows x86 00 x\n",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..600 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed % text.len() as u64) as usize;
            let insert = garbage[(seed >> 32) as usize % garbage.len()];
            let mut variant = text.to_vec();
            if seed & 1 == 0 {
                variant.splice(at..at, insert.iter().copied());
            } else {
                variant[at] = insert[0];
            }
            variants.push(variant);
        }
        let (mut indexed_loads, mut rejected) = (0, 0);
        for variant in variants {
            if variant.is_empty() {
                continue;
            }
            let whole = SymbolFile::from_bytes(&variant);
            let loaded = load(&variant);
            let shown = String::from_utf8_lossy(&variant);
            match (whole, loaded) {
                (Err(_), Err(CacheError::Malformed(_))) => rejected += 1,
                (Ok(_), Ok(Some(item))) => {
                    if let Rules::Indexed { .. } = item.rules {
                        indexed_loads += 1;
                        assert_same_as_whole_file(&variant);
                    }
                }
                (whole, loaded) => panic!("{whole:?} vs {:?}: {shown}", loaded.map(|_| ())),
            }
        }
        assert!(
            indexed_loads > 100 && rejected > 100,
            "{indexed_loads} {rejected}"
        );
    }

    #[test]
    fn pe_unwind_info_names_its_pdb() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/native/pe/crash.exe");
        let data = std::fs::read(path).unwrap();
        let object = symbolic::debuginfo::Object::parse(&data).unwrap();
        let cache = CfiCache::from_object(&object).unwrap();
        let mut bytes = Vec::new();
        cache.write_to(&mut bytes).unwrap();
        let module = parse_cfi(ByteView::from_vec(bytes)).unwrap().unwrap();
        assert_eq!(module.debug_file.as_deref(), Some("crash.pdb"));
        assert_eq!(
            module.debug_id.unwrap().to_string(),
            "8e0a63ce-e693-fdc7-4c4c-44205044422e-1"
        );
    }
}
