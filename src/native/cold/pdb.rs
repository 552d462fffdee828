//! The lazy reader of PDB files.
//!
//! Opening reads the streams every lookup needs (DBI with its module list and section
//! contributions, the address map, the type and id streams the names are formatted
//! from, the string table) and indexes the public symbols by address. A lookup parses
//! only the module (compilation unit) whose section contribution holds the address, and
//! remembers a few parsed modules.
//!
//! The answer is the SymCache's by construction: the module's functions are built into
//! symbolic `Function`s the way symbolic 13.9's `PdbDebugSession` builds them (its
//! `Unit::functions`, mirrored below), and the few of them that can decide the address,
//! plus the public symbols near it, go through a `SymCacheConverter` into a small
//! SymCache that is asked for the address. What the full SymCache would see beyond that
//! window cannot change the answer (see `Window::answer`), except where the PDB breaks
//! the assumptions written down at `Window::lookup`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use ::pdb::{FallibleIterator, SymbolData, SymbolIndex};
use symbolic::common::{Arch, Name};
use symbolic::debuginfo::{FileFormat, Function, LineInfo, Symbol};
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::reader::{LazyLocation, LazySymbolizer, OwnedLazySymbolizer, symcache_answer};
use crate::error::isolate;
use crate::lookup::ObjectHandle;
use crate::native::pdb_read::{Formatter, MappedSource, Streams, module_functions};
use crate::native::symcache::undecorate_win_symbol;

/// Parsed modules kept for later lookups, at most this many...
const MAX_CACHED_MODULES: usize = 16;
/// ...and at most about this many bytes of them (the newest one is kept regardless).
const MAX_CACHED_BYTES: usize = 64 << 20;
/// How many section contributions a lookup walks back over when the address is in one
/// whose module has neither a function nor a public symbol before it.
const MAX_WALK_BACK: usize = 32;
/// The name of the marker symbol (see `Window::answer`); PDB names are NUL-terminated, so
/// none can be this.
const FENCE: &str = "\0fence";

/// A lazy reader for a PDB, or `None` when one of the streams the SymCache conversion
/// needs cannot be read (then the conversion fails too, and the caller waits for it).
/// Streams whose pages are scattered are gathered into spill files in `spill_dir`.
pub fn open(object: &Arc<ObjectHandle>, spill_dir: &Path) -> Option<OwnedLazySymbolizer> {
    Some(Arc::new(PdbSymbolizer::open(object, spill_dir)?))
}

struct PdbSymbolizer {
    arch: Arch,
    state: Mutex<State>,
}

impl PdbSymbolizer {
    fn open(object: &Arc<ObjectHandle>, spill_dir: &Path) -> Option<Self> {
        if object.file_format() != FileFormat::Pdb {
            return None;
        }
        let arch = object.arch();
        let source = MappedSource::new(object.clone(), spill_dir.to_owned());
        let streams = NonNull::from(Box::leak(Box::new(Streams::open(source).ok()?)));
        let mut state = State {
            reader: None,
            streams,
        };
        // SAFETY: the streams live until `State` is dropped, which drops the reader first,
        // and nothing moves or changes them meanwhile (the reader only takes shared
        // references; the `RefCell`s inside are for that). The `'static` never leaves this
        // file: `State` lends the reader out for the duration of a lock only.
        let reader = Reader::new(unsafe { streams.as_ref() }).ok()?;
        // Without section contributions there is no telling which module holds an address;
        // the conversion reads every module instead.
        if reader.pieces.is_empty() && !reader.formatter.modules().is_empty() {
            return None;
        }
        state.reader = Some(reader);
        Some(PdbSymbolizer {
            arch,
            state: Mutex::new(state),
        })
    }
}

struct State {
    /// `None` once a lookup panicked: the parsers' caches may be half-updated then.
    reader: Option<Reader<'static>>,
    /// What `reader` borrows from, owned (a `Box` leaked for as long as `State` lives).
    streams: NonNull<Streams>,
}

impl Drop for State {
    fn drop(&mut self) {
        self.reader = None;
        // SAFETY: leaked in `PdbSymbolizer::open`, and its only borrower is gone.
        drop(unsafe { Box::from_raw(self.streams.as_ptr()) });
    }
}

// SAFETY: the pdb crate's streams are boxed `dyn SourceView`s without a `Send` bound, and
// the type formatter keeps `RefCell`s; nothing in `State` is shared with anything outside
// it, its source and views hold an `Arc<ObjectHandle>` (which is `Send + Sync`) and spill
// files, and the
// `Mutex` lets one thread at a time touch it.
unsafe impl Send for State {}

impl LazySymbolizer for PdbSymbolizer {
    fn arch(&self) -> Arch {
        self.arch
    }

    fn lookup(&self, relative_addr: u64) -> Vec<LazyLocation> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(reader) = state.reader.as_ref() else {
            return Vec::new();
        };
        // The pdb crate indexes into what a hostile file says; a panic only loses this
        // reader, and the SymCache answers once it is built.
        // Through `isolate`, so the panic is logged and counted as every contained one.
        match isolate("lazy PDB reader", || Ok(reader.lookup(relative_addr))) {
            Ok(locations) => locations,
            Err(_) => {
                state.reader = None;
                Vec::new()
            }
        }
    }
}

/// A run of addresses that one module's section contribution covers.
#[derive(Clone, Copy, Debug)]
struct Piece {
    start: u32,
    end: u32,
    module: usize,
}

/// A function of a parsed module, with the addresses it can put into a SymCache.
/// Its file names borrow from the PDB's string table (`'s`).
struct Placed<'s> {
    function: Function<'s>,
    /// The least and greatest address at which converting `function` can insert a range.
    keys: (u32, u32),
}

/// The functions of one module, in the order symbolic yields them; `Err` when symbolic
/// fails on the module (and with it the whole conversion).
type ModuleFunctions<'s> = Result<Arc<Vec<Placed<'s>>>, ()>;

struct Reader<'a> {
    streams: &'a Streams,
    formatter: Formatter<'a>,
    /// Executable section contributions in address order, one module's adjacent ones
    /// merged.
    pieces: Vec<Piece>,
    /// Public symbols in executable sections: address and record, sorted by address, the
    /// first in stream order for each address (the only one a SymCache keeps).
    publics: Vec<(u32, SymbolIndex)>,
    /// Parsed modules with their weight, most recently used first.
    modules: RefCell<Vec<(usize, ModuleFunctions<'a>, usize)>>,
}

/// What a lookup reads: the section contributions, the modules' functions and the public
/// symbols. (A trait so that tests can hand it layouts no fixture has.)
trait Window<'s> {
    /// Executable section contributions in address order.
    fn pieces(&self) -> &[Piece];

    /// The functions of module `index` in the order the full conversion sees them.
    fn module(&self, index: usize) -> ModuleFunctions<'s>;

    /// The public symbol a SymCache keeps at the greatest address at or below `addr`, with
    /// its name as symbolic reads it (before undecorating).
    fn public_at_or_below(&self, addr: u32) -> Option<(u32, String)>;

    /// What the SymCache answers at `addr`.
    ///
    /// The SymCache is a map from start addresses ("keys") to source locations, and an
    /// address gets the location of the greatest key at or below it. Keys come from every
    /// function (its line ranges, its entry, a "nothing here" marker at its end) and every
    /// public symbol. This reader assumes what linkers produce: a module's functions lie
    /// within that module's section contributions, and no two modules' functions overlap.
    /// So the greatest key at or below `addr` comes from the module of the contribution
    /// holding `addr` (or the closest one before it), or from a public symbol, unless that
    /// module has no key between the contribution's start and `addr`; then the previous
    /// contribution's module is asked too, and so on.
    ///
    /// Known differences from the full SymCache, all from PDBs that break the assumption:
    /// where a linker keeps the procedure records of functions folded by `/OPT:ICF` in
    /// every module that had them (lld-link does not: a 36 MB `/opt:ref,icf` PDB showed no
    /// difference), the full SymCache names the module it converts last and this reader
    /// the contribution's owner; procedures of modules without an executable section
    /// contribution are not found; an address whose answer lies more than
    /// `MAX_WALK_BACK` contributions back gets nothing; and where symbolic fails on a
    /// module (and with it the whole conversion) this reader answers nothing for it.
    fn lookup(&self, addr: u64) -> Vec<LazyLocation> {
        let Ok(addr) = u32::try_from(addr) else {
            return Vec::new();
        };
        let mut index = self
            .pieces()
            .partition_point(|p| p.start <= addr)
            .checked_sub(1);
        let mut modules = BTreeSet::new();
        for _ in 0..MAX_WALK_BACK {
            let lower = match index {
                Some(i) => {
                    modules.insert(self.pieces()[i].module);
                    Some(self.pieces()[i].start)
                }
                None => None,
            };
            match self.answer(addr, &modules, lower) {
                Some(locations) => return locations,
                None => index = index.and_then(|i| i.checked_sub(1)),
            }
        }
        Vec::new()
    }

    /// The SymCache's answer at `addr` if `modules` hold every function with a key in
    /// `lower..=addr`, or `None` when it depends on keys below `lower` (without `lower`,
    /// `modules` hold every function that has a key at or below `addr`).
    ///
    /// Only a few functions and one public symbol can decide `addr`: a function's entry
    /// is a key that nothing later empties, so keys below the greatest entry at or below
    /// `addr` do not matter, and neither do those below the greatest public symbol there
    /// (it takes a free address; where it cannot, a function holds the address). Whatever
    /// has no key in what is left changes nothing, so the small SymCache converts only the
    /// rest, in the order of the full conversion (module by module, each module's
    /// functions in symbolic's order, then symbols).
    ///
    /// Whether keys below `lower` matter is found out with a marker symbol (`FENCE`) at
    /// `lower`: symbols only take addresses that are free or hold an end-of-function marker,
    /// so when the answer is the marker, nothing in the window has a key in
    /// `lower..=addr`.
    fn answer(
        &self,
        addr: u32,
        modules: &BTreeSet<usize>,
        lower: Option<u32>,
    ) -> Option<Vec<LazyLocation>> {
        let mut parsed = Vec::with_capacity(modules.len());
        for &module in modules {
            match self.module(module) {
                Ok(functions) => parsed.push(functions),
                // The conversion fails on this module, so the SymCache will not exist.
                Err(()) => return Some(Vec::new()),
            }
        }
        let entry = parsed
            .iter()
            .flat_map(|functions| functions.iter())
            .map(|placed| &placed.function)
            .filter(|f| !f.inline && f.size > 0 && f.address <= u64::from(addr))
            .map(|f| f.address as u32)
            .max();
        let mut from = match (entry, lower) {
            (Some(entry), Some(lower)) => entry.max(lower),
            (entry, lower) => entry.or(lower).unwrap_or(0),
        };
        let fence = lower.filter(|&lower| entry.is_none_or(|entry| entry < lower));
        let public = self
            .public_at_or_below(addr)
            .filter(|&(rva, _)| rva >= from);
        if let Some((rva, _)) = public {
            from = rva;
        }

        let mut converter = SymCacheConverter::new();
        for functions in &parsed {
            for placed in functions.iter() {
                if placed.keys.0 <= addr && placed.keys.1 >= from {
                    converter.process_symbolic_function(&placed.function);
                }
            }
        }
        if let Some((rva, name)) = public {
            converter.process_symbolic_symbol(&Symbol {
                name: Some(Cow::Owned(undecorate_win_symbol(&name).to_owned())),
                address: u64::from(rva),
                size: 0,
            });
        }
        if let Some(lower) = fence {
            converter.process_symbolic_symbol(&Symbol {
                name: Some(Cow::Borrowed(FENCE)),
                address: u64::from(lower),
                size: 0,
            });
        }
        let mut buf = Vec::new();
        if converter.serialize(&mut buf).is_err() {
            return Some(Vec::new());
        }
        let Ok(symcache) = SymCache::parse(&buf) else {
            return Some(Vec::new());
        };
        let locations = symcache_answer(&symcache, u64::from(addr));
        if locations.last().is_some_and(|outer| outer.name == FENCE) {
            return None;
        }
        Some(locations)
    }
}

impl<'a> Window<'a> for Reader<'a> {
    fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    fn public_at_or_below(&self, addr: u32) -> Option<(u32, String)> {
        let index = self.publics.partition_point(|&(rva, _)| rva <= addr);
        let &(rva, record) = self.publics.get(index.checked_sub(1)?)?;
        let symbol = self.streams.global_symbols.iter_at(record).next().ok()??;
        match symbol.parse() {
            Ok(SymbolData::Public(public)) => Some((rva, public.name.to_string().into_owned())),
            _ => None,
        }
    }

    /// Parsed on first use.
    fn module(&self, index: usize) -> ModuleFunctions<'a> {
        {
            let mut cache = self.modules.borrow_mut();
            if let Some(position) = cache.iter().position(|(i, ..)| *i == index) {
                let entry = cache.remove(position);
                let functions = entry.1.clone();
                cache.insert(0, entry);
                return functions;
            }
        }
        // Parsed without the cache borrowed: the type formatter may ask `Streams` for other
        // modules, but never this cache.
        let functions = self.parse_module(index).map(Arc::new);
        let weight = functions
            .as_ref()
            .map_or(0, |f| f.iter().map(Placed::weight).sum());
        let mut cache = self.modules.borrow_mut();
        cache.insert(0, (index, functions.clone(), weight));
        let mut total = 0;
        let keep = cache
            .iter()
            .enumerate()
            .take_while(|(n, (_, _, weight))| {
                total += weight;
                *n == 0 || (*n < MAX_CACHED_MODULES && total <= MAX_CACHED_BYTES)
            })
            .count();
        cache.truncate(keep);
        functions
    }
}

impl<'a> Reader<'a> {
    fn new(streams: &'a Streams) -> Result<Self, ::pdb::Error> {
        let formatter = streams.formatter()?;
        Ok(Reader {
            pieces: section_pieces(streams)?,
            publics: public_index(streams),
            streams,
            formatter,
            modules: RefCell::new(Vec::new()),
        })
    }

    /// With names undecorated, as the converter stores a Windows object's: the lookup
    /// converts functions one by one, which a converter does not undecorate.
    fn parse_module(&self, index: usize) -> Result<Vec<Placed<'a>>, ()> {
        let functions = module_functions(self.streams, &self.formatter, index).map_err(|_| ())?;
        Ok(functions
            .into_iter()
            .map(|mut function| {
                undecorate(&mut function);
                Placed {
                    keys: key_span(&function),
                    function,
                }
            })
            .collect())
    }
}

/// Executable section contributions as address runs, sorted, each module's consecutive
/// runs merged.
fn section_pieces(streams: &Streams) -> Result<Vec<Piece>, ::pdb::Error> {
    let address_map = &streams.address_map;
    let mut pieces = Vec::new();
    let mut contributions = streams.debug_info.section_contributions()?;
    while let Some(contribution) = contributions.next()? {
        let flags = contribution.characteristics;
        let executable =
            streams.is_executable(contribution.offset) || flags.execute() || flags.executable();
        if contribution.size == 0 || !executable {
            continue;
        }
        let Some(start) = contribution.offset.to_internal_rva(address_map) else {
            continue;
        };
        let end = ::pdb::PdbInternalRva(start.0.saturating_add(contribution.size));
        // An OMAP (a reordered image) can scatter one contribution over several runs.
        for range in address_map.rva_ranges(start..end) {
            pieces.push(Piece {
                start: range.start.0,
                end: range.end.0,
                module: contribution.module,
            });
        }
    }
    pieces.sort_unstable_by_key(|piece| (piece.start, piece.end, piece.module));
    let mut merged: Vec<Piece> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match merged.last_mut() {
            Some(last) if last.module == piece.module => last.end = last.end.max(piece.end),
            _ => merged.push(piece),
        }
    }
    merged.shrink_to_fit();
    Ok(merged)
}

/// The public symbols `PdbObject::symbols` yields, by address: it stops at the first
/// record it cannot read, skips those outside executable sections, and of several at one
/// address the SymCache keeps the first.
fn public_index(streams: &Streams) -> Vec<(u32, SymbolIndex)> {
    let mut publics: Vec<_> = streams
        .public_symbols()
        .map(|public| (public.rva, public.index))
        .collect();
    // Stable, so that the first in stream order survives the dedup.
    publics.sort_by_key(|&(rva, _)| rva);
    publics.dedup_by_key(|&mut (rva, _)| rva);
    publics.shrink_to_fit();
    publics
}

fn undecorate(function: &mut Function<'_>) {
    let name = undecorate_win_symbol(function.name.as_str());
    if name.len() != function.name.as_str().len() {
        function.name = Name::new(
            name.to_owned(),
            function.name.mangling(),
            function.name.language(),
        );
    }
    for inlinee in &mut function.inlinees {
        undecorate(inlinee);
    }
}

/// The smallest and greatest address at which converting `function` can insert a range:
/// its entry, its end marker, its lines' starts and ends, and those of its inlinees
/// (clamped and truncated to `u32` as `SymCacheConverter` does).
fn key_span(function: &Function<'_>) -> (u32, u32) {
    fn walk(function: &Function<'_>, span: &mut (u32, u32)) {
        let mut add = |key: u32| {
            span.0 = span.0.min(key);
            span.1 = span.1.max(key);
        };
        add(u32::try_from(function.address).unwrap_or(u32::MAX));
        add(function.end_address() as u32);
        for line in &function.lines {
            let (start, end) = line_boundaries(line.address, line.size);
            add(start);
            add(end);
        }
        for inlinee in &function.inlinees {
            walk(inlinee, span);
        }
    }
    let mut span = (u32::MAX, 0);
    walk(function, &mut span);
    span
}

/// `line_boundaries` of symbolic-symcache's writer.
fn line_boundaries(address: u64, size: Option<u64>) -> (u32, u32) {
    let start = address.try_into().unwrap_or(u32::MAX);
    let end = start.saturating_add(size.unwrap_or(1).try_into().unwrap_or(u32::MAX));
    (start, end)
}

impl Placed<'_> {
    /// Roughly the bytes it holds, for the bound on cached modules.
    fn weight(&self) -> usize {
        fn walk(function: &Function<'_>) -> usize {
            std::mem::size_of::<Function<'_>>()
                + function.name.as_str().len()
                + function
                    .lines
                    .iter()
                    .map(|line| {
                        std::mem::size_of::<LineInfo<'_>>()
                            + line.file.name_str().len()
                            + line.file.dir_str().len()
                    })
                    .sum::<usize>()
                + function.inlinees.iter().map(walk).sum::<usize>()
        }
        walk(&self.function)
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::path::{Path, PathBuf};

    use ::pdb::PDB;
    use symbolic::common::{ByteView, Language, NameMangling};
    use symbolic::debuginfo::FileInfo;

    use super::*;
    use crate::lookup::ObjectLimits;

    fn fixture(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    fn handle(path: &Path) -> Arc<ObjectHandle> {
        let data = ByteView::open(path).unwrap();
        Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap())
    }

    fn hex(value: &serde_json::Value) -> u64 {
        u64::from_str_radix(value.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    }

    /// The PDBs to check, each with the addresses its manifest names (already the ones to
    /// look up: return addresses minus one).
    fn pdbs() -> Vec<(PathBuf, Vec<u64>)> {
        let mut pdbs = Vec::new();

        let text = std::fs::read_to_string(fixture("fixtures/lazy/manifest.json")).unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
        for file in manifest["files"].as_array().unwrap() {
            if file["format"] == "pdb" {
                let addrs = file["return_addresses"].as_array().unwrap();
                let path = fixture("fixtures/lazy").join(file["path"].as_str().unwrap());
                pdbs.push((path, addrs.iter().map(|a| hex(a) - 1).collect()));
            }
        }

        let text = std::fs::read_to_string(fixture("fixtures/native/manifest.json")).unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
        let pe = &manifest["objects"]["pe"];
        let base = hex(&pe["image_vmaddr"]);
        let mut addrs = Vec::new();
        for probe in pe["probes"].as_array().unwrap() {
            addrs.push(hex(&probe["rel_addr"]));
        }
        for frame in pe["crash_stack"].as_array().unwrap() {
            addrs.push(hex(&frame["lookup_addr"]) - base);
        }
        for miss in pe["misses"].as_array().unwrap() {
            addrs.push(hex(&miss["rel_addr"]));
        }
        let path = fixture("fixtures/native").join(pe["files"]["debug"].as_str().unwrap());
        pdbs.push((path, addrs.clone()));
        // The same program with a SRCSRV stream, which symbolic reads into its files.
        pdbs.push((fixture("fixtures/native-srcsrv/crash.pdb"), addrs));

        // A larger PDB to check and time, which is not committed.
        if let Some(path) = std::env::var_os("OMNISYM_LAZY_PDB") {
            pdbs.push((PathBuf::from(path), Vec::new()));
        }

        // Every PDB under fixtures/native is in the list above.
        let mut listed = 0;
        let mut dirs = vec![fixture("fixtures/native")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "pdb") {
                    assert!(pdbs.iter().any(|(p, _)| *p == path), "{}", path.display());
                    listed += 1;
                }
            }
        }
        assert!(listed > 0);
        pdbs
    }

    fn full_symcache(handle: &ObjectHandle) -> Vec<u8> {
        let mut converter = SymCacheConverter::new();
        converter
            .process_object(&*handle.symbolic_object().unwrap())
            .unwrap();
        let mut buf = Vec::new();
        converter.serialize(&mut buf).unwrap();
        buf
    }

    /// The executable sections' addresses, from the PDB's copy of the section headers.
    fn text_range(path: &Path) -> (u64, u64) {
        let data = std::fs::read(path).unwrap();
        let mut pdb = PDB::open(std::io::Cursor::new(data.as_slice())).unwrap();
        let sections = pdb.sections().unwrap().unwrap();
        let text = sections
            .iter()
            .filter(|s| s.characteristics.execute())
            .map(|s| {
                (
                    u64::from(s.virtual_address),
                    u64::from(s.virtual_address + s.virtual_size),
                )
            });
        text.reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))).unwrap()
    }

    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// The lazy reader answers as the SymCache built from the same file, at every address
    /// the manifests name and at random ones in (and a little around) the code.
    #[test]
    fn lazy_pdb_reader_answers_as_the_symcache() {
        let mut failures = Vec::new();
        let mut checked = 0;
        for (path, mut addrs) in pdbs() {
            let handle = handle(&path);
            let buf = full_symcache(&handle);
            let symcache = SymCache::parse(&buf).unwrap();
            let reader = super::super::open(&handle, &std::env::temp_dir())
                .expect("a lazy reader for a PDB");
            assert_eq!(reader.arch(), symcache.arch(), "{}", path.display());

            let (start, end) = text_range(&path);
            let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
            let span = end - start + 128;
            addrs.extend((0..2000).map(|_| start - 64 + rng.next() % span));
            // Every boundary of the code, where one function's end meets the next one.
            addrs.extend([0, start - 1, start, end - 1, end, u64::from(u32::MAX) + 1]);

            let mut answered = 0;
            let mut inlined = 0;
            for &addr in &addrs {
                let expected = symcache_answer(&symcache, addr);
                let got = reader.lookup(addr);
                answered += usize::from(!expected.is_empty());
                inlined += usize::from(expected.len() > 1);
                if got != expected {
                    failures.push(format!(
                        "{} {addr:#x}:\n  lazy:     {got:?}\n  symcache: {expected:?}",
                        path.display()
                    ));
                }
            }
            println!(
                "{}: {} addresses, {answered} answered, {inlined} inline chains",
                path.display(),
                addrs.len()
            );
            checked += addrs.len();
            assert!(answered > addrs.len() / 2, "{}", path.display());
            assert!(inlined > 0, "{}", path.display());
        }
        println!("{checked} addresses checked, {} differ", failures.len());
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// A lookup parses the module that holds the address, not the others.
    #[test]
    fn lazy_pdb_reader_parses_only_the_module_it_needs() {
        let (path, addrs) = pdbs().into_iter().next().unwrap();
        let handle = handle(&path);
        let reader = PdbSymbolizer::open(&handle, &std::env::temp_dir()).unwrap();
        let parsed = || {
            let state = reader.state.lock().unwrap();
            let modules = state.reader.as_ref().unwrap().modules.borrow();
            modules.iter().map(|(index, ..)| *index).collect::<Vec<_>>()
        };
        assert_eq!(parsed(), Vec::<usize>::new());
        assert!(!reader.lookup(addrs[addrs.len() / 2]).is_empty());
        assert_eq!(parsed().len(), 1, "{:?}", parsed());
    }

    /// A made-up PDB: section contributions, each module's functions, public symbols in
    /// stream order.
    struct Synthetic {
        pieces: Vec<Piece>,
        modules: Vec<Arc<Vec<Placed<'static>>>>,
        publics: Vec<(u32, String)>,
        /// `publics` by address, the first of each address.
        by_address: Vec<(u32, String)>,
    }

    impl Window<'static> for Synthetic {
        fn pieces(&self) -> &[Piece] {
            &self.pieces
        }

        fn module(&self, index: usize) -> ModuleFunctions<'static> {
            Ok(self.modules[index].clone())
        }

        fn public_at_or_below(&self, addr: u32) -> Option<(u32, String)> {
            let index = self.by_address.partition_point(|(rva, _)| *rva <= addr);
            self.by_address.get(index.checked_sub(1)?).cloned()
        }
    }

    impl Synthetic {
        /// Code in `16..~3600`: contributions of random modules with gaps between some,
        /// holding zero to three functions (lines with and without sizes, some running past
        /// their function's end, gaps between lines, inlinees two levels deep, functions
        /// of size 0), and public symbols at entries, inside functions, in gaps, several
        /// at one address, and none in some contributions.
        fn generate(seed: u64) -> Self {
            let mut rng = XorShift(seed);
            let mut roll = |n: u64| rng.next() % n;
            let module_count = 1 + roll(5) as usize;
            let mut modules: Vec<Vec<Function<'static>>> = vec![Vec::new(); module_count];
            let mut pieces = Vec::new();
            let mut publics = Vec::new();
            let mut next_name = 0;
            let mut at = 16 + roll(32) as u32;
            while at < 3500 {
                let module = roll(module_count as u64) as usize;
                let len = 4 + roll(160) as u32;
                let (start, end) = (at, at + len);
                pieces.push(Piece { start, end, module });
                let mut cursor = start;
                for _ in 0..roll(4) {
                    cursor += roll(3) as u32 * roll(8) as u32;
                    if cursor >= end {
                        break;
                    }
                    let size = if roll(20) == 0 {
                        0
                    } else {
                        1 + roll(u64::from(end - cursor)) as u32
                    };
                    // Lines of the last function stay in the contribution.
                    let slack = end - cursor - size;
                    let function =
                        random_function(&mut roll, &mut next_name, cursor, size, slack, false, 0);
                    let functions = &mut modules[module];
                    let position = roll(functions.len() as u64 + 1) as usize;
                    functions.insert(position, function);
                    if roll(2) == 0 {
                        publics.push((cursor, format!("pub{}", publics.len())));
                    }
                    if size > 1 && roll(4) == 0 {
                        publics.push((
                            cursor + 1 + roll(u64::from(size - 1)) as u32,
                            format!("mid{}", publics.len()),
                        ));
                    }
                    cursor += size.max(1);
                }
                match roll(6) {
                    0 => publics.push((start, format!("piece{}", publics.len()))),
                    1 => publics.push((
                        start + roll(u64::from(len)) as u32,
                        format!("inside{}", publics.len()),
                    )),
                    _ => {}
                }
                at = end;
                if roll(3) == 0 {
                    let gap = 1 + roll(24) as u32;
                    if roll(3) == 0 {
                        publics.push((
                            at + roll(u64::from(gap)) as u32,
                            format!("gap{}", publics.len()),
                        ));
                    }
                    at += gap;
                }
            }
            publics.push((8, "before".to_owned()));
            publics.push((at + 40, "after".to_owned()));
            // Several names at one address: the first in stream order counts.
            for _ in 0..roll(8) {
                let (rva, _) = publics[roll(publics.len() as u64) as usize].clone();
                let position = roll(publics.len() as u64 + 1) as usize;
                publics.insert(position, (rva, format!("alias{}", publics.len())));
            }

            let mut by_address = publics.clone();
            by_address.sort_by_key(|(rva, _)| *rva);
            by_address.dedup_by_key(|(rva, _)| *rva);
            let mut merged: Vec<Piece> = Vec::new();
            for piece in pieces {
                match merged.last_mut() {
                    Some(last) if last.module == piece.module => last.end = piece.end,
                    _ => merged.push(piece),
                }
            }
            Synthetic {
                pieces: merged,
                modules: modules
                    .into_iter()
                    .map(|functions| {
                        Arc::new(
                            functions
                                .into_iter()
                                .map(|function| Placed {
                                    keys: key_span(&function),
                                    function,
                                })
                                .collect(),
                        )
                    })
                    .collect(),
                publics,
                by_address,
            }
        }

        /// The SymCache of everything, converted in the order of a full conversion.
        fn full_symcache(&self) -> Vec<u8> {
            let mut converter = SymCacheConverter::new();
            for functions in &self.modules {
                for placed in functions.iter() {
                    converter.process_symbolic_function(&placed.function);
                }
            }
            for (rva, name) in &self.publics {
                converter.process_symbolic_symbol(&Symbol {
                    name: Some(Cow::Borrowed(name)),
                    address: u64::from(*rva),
                    size: 0,
                });
            }
            let mut buf = Vec::new();
            converter.serialize(&mut buf).unwrap();
            buf
        }
    }

    /// A function over `start..start + size` whose lines may run `slack` bytes further.
    #[allow(clippy::too_many_arguments)]
    fn random_function(
        roll: &mut impl FnMut(u64) -> u64,
        next_name: &mut usize,
        start: u32,
        size: u32,
        slack: u32,
        inline: bool,
        depth: u32,
    ) -> Function<'static> {
        *next_name += 1;
        let name = if inline {
            format!("inlinee{next_name}")
        } else {
            format!("f{next_name}")
        };
        let files = [&b"a.c"[..], b"b.h", b"c.h"];
        let mut lines = Vec::new();
        let mut inlinees = Vec::new();
        let mut cursor = start;
        let end = start + size;
        while cursor < end {
            if roll(6) == 0 {
                cursor += 1 + roll(4) as u32;
                continue;
            }
            let mut len = 1 + roll(u64::from((end - cursor).min(12))) as u32;
            if cursor + len == end && slack > 0 && roll(4) == 0 {
                len += 1 + roll(u64::from(slack)) as u32;
            }
            let size = if roll(10) == 0 {
                None
            } else {
                Some(u64::from(len))
            };
            lines.push(LineInfo {
                address: u64::from(cursor),
                size,
                file: FileInfo::new(
                    Cow::Borrowed(b"C:\\src"),
                    Cow::Borrowed(files[roll(3) as usize]),
                ),
                line: 1 + roll(40),
            });
            if depth < 2 && len > 2 && roll(3) == 0 {
                let inner_start = cursor + roll(u64::from(len / 2)) as u32;
                let inner_size = 1 + roll(u64::from(cursor + len - inner_start - 1)) as u32;
                let mut inlinee =
                    random_function(roll, next_name, inner_start, inner_size, 0, true, depth + 1);
                // As symbolic makes them: an inlinee spans its lines.
                if let (Some(first), Some(last)) = (inlinee.lines.first(), inlinee.lines.last()) {
                    inlinee.address = first.address;
                    inlinee.size = last.address + last.size.unwrap_or(1) - first.address;
                    inlinees.push(inlinee);
                }
            }
            cursor += len;
        }
        Function {
            address: u64::from(start),
            size: u64::from(size),
            name: Name::new(name, NameMangling::Unmangled, Language::Unknown),
            compilation_dir: &[],
            lines,
            inlinees,
            inline,
        }
    }

    /// The window a lookup reads (the functions and public symbols that can decide an
    /// address, the walk back over contributions) is enough: at every address of made-up
    /// layouts that the fixtures lack (public symbols inside and between functions,
    /// contributions without functions or symbols, several names at one address), the
    /// answer is the one of a SymCache converted from everything.
    #[test]
    fn windowed_lookups_answer_as_a_full_conversion() {
        let mut failures = Vec::new();
        let mut checked = 0;
        let mut from_publics = 0;
        let mut walked_back = 0;
        for seed in 1..=40 {
            let synthetic = Synthetic::generate(seed * 0x9e37_79b9);
            let buf = synthetic.full_symcache();
            let symcache = SymCache::parse(&buf).unwrap();
            let end = synthetic.pieces.last().unwrap().end + 64;
            for addr in 0..end {
                let expected = symcache_answer(&symcache, u64::from(addr));
                let got = synthetic.lookup(u64::from(addr));
                checked += 1;
                from_publics += usize::from(expected.last().is_some_and(|l| l.abs_path.is_empty()));
                let index = synthetic.pieces.partition_point(|p| p.start <= addr);
                if addr % 4 == 0 && index > 0 {
                    let piece = synthetic.pieces[index - 1];
                    let modules = BTreeSet::from([piece.module]);
                    walked_back += usize::from(
                        synthetic
                            .answer(addr, &modules, Some(piece.start))
                            .is_none(),
                    );
                }
                if got != expected {
                    failures.push(format!(
                        "seed {seed} {addr:#x}:\n  lazy:     {got:?}\n  symcache: {expected:?}"
                    ));
                }
            }
        }
        println!(
            "{checked} addresses, {from_publics} answered by public symbols, {walked_back} walked back, {} differ",
            failures.len()
        );
        assert!(from_publics > checked / 20);
        assert!(walked_back > 100, "{walked_back}");
        assert!(
            failures.is_empty(),
            "{}",
            failures[..failures.len().min(20)].join("\n")
        );
    }

    /// A reader of a PDB whose module streams are garbage answers nothing rather than
    /// panicking.
    #[test]
    fn lazy_pdb_reader_survives_garbage() {
        let path = fixture("fixtures/lazy/pe/prog.pdb");
        let original = std::fs::read(&path).unwrap();
        let (start, end) = text_range(&path);
        let mut rng = XorShift(42);
        let (mut opened, mut disabled, mut compared, mut differ) = (0, 0, 0, 0);
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _recording = metrics::set_default_local_recorder(&recorder);
        for _ in 0..20 {
            let mut data = original.clone();
            // Keep the MSF header and stream directory; scramble pages after them.
            for _ in 0..200 {
                let at = 0x3000 + (rng.next() as usize) % (data.len() - 0x3000);
                data[at] = rng.next() as u8;
            }
            let Ok(handle) =
                ObjectHandle::from_bytes(ByteView::from_vec(data), ObjectLimits::default())
            else {
                continue;
            };
            let handle = Arc::new(handle);
            let Some(reader) = PdbSymbolizer::open(&handle, &std::env::temp_dir()) else {
                continue;
            };
            opened += 1;
            // Where the conversion still succeeds, how often the reader agrees with it
            // (for the record: a scrambled file need not keep the layout it relies on).
            let full = catch_unwind(AssertUnwindSafe(|| {
                let mut converter = SymCacheConverter::new();
                converter
                    .process_object(&*handle.symbolic_object().ok()?)
                    .ok()?;
                let mut buf = Vec::new();
                converter.serialize(&mut buf).ok()?;
                Some(buf)
            }))
            .ok()
            .flatten();
            let symcache = full.as_deref().map(|buf| SymCache::parse(buf).unwrap());
            for _ in 0..50 {
                let addr = start + rng.next() % (end - start);
                let got = reader.lookup(addr);
                if let Some(symcache) = &symcache {
                    let expected = symcache_answer(symcache, addr);
                    compared += 1;
                    differ += usize::from(got != expected);
                }
            }
            disabled += usize::from(reader.state.lock().unwrap().reader.is_none());
        }
        println!(
            "scrambled PDBs: {opened} opened, {disabled} lost their reader to a panic; \
             {compared} lookups beside a SymCache that still converted, {differ} differ"
        );
        assert!(opened >= 10, "{opened}");
        // Every panic of a scrambled module was contained by `isolate` (which counts
        // it) and cost exactly its reader; none was swallowed elsewhere or escaped.
        let panics = contained_panics(&snapshotter, "lazy PDB reader");
        assert_eq!(
            panics, disabled as u64,
            "contained panics against lost readers"
        );
    }

    fn contained_panics(snapshotter: &metrics_util::debugging::Snapshotter, what: &str) -> u64 {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| {
                key.key().name() == crate::telemetry::PARSER_PANICS
                    && key
                        .key()
                        .labels()
                        .any(|l| l.key() == "what" && l.value() == what)
            })
            .map(|(.., value)| match value {
                metrics_util::debugging::DebugValue::Counter(n) => n,
                _ => 0,
            })
            .sum()
    }
}

/// A PDB found by the `object_file` fuzz target (`fuzz/regressions/object_file/
/// fixed-lazy-pdb-modi-200`): the pdb crate asserts while a lookup reads its module.
/// The panic must be contained by `error::isolate`, which counts it as
/// `parser.panics{what="lazy PDB reader"}`, and the reader answers nothing afterwards.
#[cfg(test)]
mod regression {
    use std::path::Path;
    use std::sync::Arc;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use symbolic::common::ByteView;

    use crate::lookup::{ObjectHandle, ObjectLimits};

    #[test]
    fn a_panicking_module_is_contained_by_isolate() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/regressions/object_file/fixed-lazy-pdb-modi-200");
        let handle = Arc::new(
            ObjectHandle::from_bytes(ByteView::open(path).unwrap(), ObjectLimits::default())
                .unwrap(),
        );
        let reader = super::open(&handle, &std::env::temp_dir()).expect("the streams read fine");
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            // The fuzzer's addresses: the file's symbols and its last bytes, as offsets.
            for addr in (0..0x20_0000u64).step_by(0x40) {
                reader.lookup(addr);
            }
        });
        let panics: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == crate::telemetry::PARSER_PANICS)
            .map(|(.., value)| match value {
                DebugValue::Counter(n) => n,
                _ => 0,
            })
            .sum();
        assert_eq!(
            panics, 1,
            "the panic was not contained by isolate (or not met)"
        );
        assert!(reader.lookup(0x1000).is_empty());
    }
}
