//! The lazy reader for DWARF in ELF, Mach-O (dSYM) and Wasm files.
//!
//! Opening reads the unit headers, each unit's address ranges and the symbol table
//! (`native::dwarf`'s [`DwarfFile`]; the ranges and the symbols in spill files, since a
//! large file has a million of each). A lookup parses only the units whose ranges meet
//! the address (and the nearest symbol below it), turns their functions into symbolic
//! `Function`s with `native::dwarf`'s walk, which is symbolic's `DwarfDebugSession`'s,
//! and feeds those and the symbols around the address to a `SymCacheConverter`: the
//! answer comes from a SymCache of a few functions, so inline chains, names, paths and
//! the way ranges end are the SymCache's by construction.
//!
//! What a whole-file conversion sees and this one does not: functions of units whose
//! ranges do not meet the address (they cannot own keys at or below it in a linked
//! file), and symbols that start before the nearest one below the address yet end past
//! it (overlapping symbols). `differential.rs` checks the rest address by address.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use gimli::constants;
use symbolic::common::Arch;
use symbolic::debuginfo::{Function, Object, ObjectKind};
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::reader::{LazyLocation, LazySymbolizer, OwnedLazySymbolizer, symcache_answer};
use crate::lookup::ObjectHandle;
use crate::native::dwarf::{DwarfFile, IndexedFunction, Unit, UnitInfo, UnitReader, relative};
use crate::native::spill::{FileLog, FileVec, Plain};

pub use crate::native::dwarf::SECTIONS;

/// What a reader keeps between lookups (prepared line programs, mini SymCaches), in
/// bytes; past it the memo starts over. A cold request's addresses are mostly in
/// different units, so little is lost by starting over, and the reader stays small
/// beside the conversion it runs next to.
const MEMO_MAX_BYTES: usize = 24 << 20;

/// A unit's address range: `(begin, end, unit)`, relative.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C)]
struct UnitRange {
    begin: u64,
    end: u64,
    unit: u64,
}

// SAFETY: `repr(C)`, three `u64`s.
unsafe impl Plain for UnitRange {}

pub struct DwarfReader {
    file: DwarfFile,
    /// Sorted by `begin`.
    unit_ranges: FileVec<UnitRange>,
    memo: Mutex<Memo>,
}

/// What lookups have built so far. Both maps start over when they outgrow
/// `MEMO_MAX_BYTES` (units' functions are counted by their line records).
#[derive(Default)]
struct Memo {
    /// Units read so far: their line programs and where their functions are.
    units: HashMap<usize, Arc<PreparedUnit>>,
    /// A mini SymCache per set of functions and span of symbols.
    caches: HashMap<MiniSymCacheKey, Arc<Vec<u8>>>,
    bytes: usize,
}

/// The functions (unit, start, size) and the span of symbols a mini SymCache holds.
type MiniSymCacheKey = (Vec<(usize, u64, u64)>, usize, usize);

/// What a unit's lookups share: its line program, prepared as symbolic prepares it,
/// and an index of its functions, so a lookup reads only the functions near its address.
struct PreparedUnit {
    info: UnitInfo,
    /// The subprograms a whole-unit walk would start `parse_function` at, in DIE order.
    functions: Vec<IndexedFunction>,
}

impl PreparedUnit {
    fn new(file: &DwarfFile, unit: &Unit) -> Option<Self> {
        let info = UnitInfo::new(file, unit)?;
        let indexer = UnitReader {
            file,
            unit,
            language: info.language,
            prefer_dwarf_names: info.prefer_dwarf_names,
            info: None,
        };
        let mut functions = Vec::new();
        let mut entries = unit.entries_raw(None).ok()?;
        let mut ranges = Vec::new();
        // A unit symbolic cannot walk fails its conversion; here it has no functions.
        if indexer
            .index_functions(-1, &mut entries, &mut ranges, &mut functions)
            .is_err()
        {
            functions.clear();
        }
        Some(PreparedUnit { info, functions })
    }

    fn bytes(&self) -> usize {
        self.info.line_bytes() + self.functions.len() * std::mem::size_of::<IndexedFunction>()
    }
}

/// A reader for `handle`'s DWARF, or `None` when it has none (or needs a
/// BCSymbolMap, whose hidden names only a whole conversion resolves). Its index goes
/// to spill files in `spill_dir`.
pub fn open(handle: &Arc<ObjectHandle>, spill_dir: &Path) -> Option<OwnedLazySymbolizer> {
    if let Some(Object::MachO(macho)) = handle.object()
        && macho.requires_symbolmap()
    {
        return None;
    }
    let file = DwarfFile::open(handle, spill_dir).ok()??;
    // The whole file's conversion fails then; the reader answers nothing either.
    if file.headers_error.is_some() {
        return None;
    }
    let unit_ranges = index_units(&file, spill_dir).ok()?;
    Some(Arc::new(DwarfReader {
        file,
        unit_ranges,
        memo: Mutex::new(Memo::default()),
    }))
}

/// The address ranges of every unit symbolic would read functions from: the unit's
/// own ranges, or, when it states none, those of its subprograms.
fn index_units(file: &DwarfFile, spill_dir: &Path) -> std::io::Result<FileVec<UnitRange>> {
    let mut ranges = FileLog::new_in(spill_dir)?;
    for (index, header) in file.headers.iter().enumerate() {
        // Parsed for its ranges and dropped: what lookups need they parse again.
        let Ok(unit) = file.dwarf.unit(*header) else {
            continue;
        };
        let unit = &unit;
        let Ok(Some(root)) = unit.entries().next_dfs().map(|e| e.cloned()) else {
            continue;
        };
        // symbolic's `DwarfUnit::from_unit`: a unit the linker eliminated.
        if file.kind != ObjectKind::Relocatable
            && unit.low_pc == 0
            && root.attr(constants::DW_AT_ranges).is_none()
        {
            continue;
        }
        let mut found = false;
        if let Ok(mut iter) = file.dwarf.unit_ranges(unit) {
            while let Ok(Some(range)) = iter.next() {
                found |= push_range(file, &mut ranges, range, index)?;
            }
        }
        if !found {
            let mut entries = unit.entries();
            while let Ok(Some(entry)) = entries.next_dfs() {
                if entry.tag() != constants::DW_TAG_subprogram {
                    continue;
                }
                if let Ok(mut iter) = file.dwarf.die_ranges(unit, entry) {
                    while let Ok(Some(range)) = iter.next() {
                        push_range(file, &mut ranges, range, index)?;
                    }
                }
            }
        }
    }
    let mut ranges = ranges.into_vec()?;
    ranges.as_mut_slice().sort_unstable();
    Ok(ranges)
}

/// Appends `range` unless symbolic would not read it; whether it was appended.
fn push_range(
    file: &DwarfFile,
    ranges: &mut FileLog<UnitRange>,
    range: gimli::Range,
    unit: usize,
) -> std::io::Result<bool> {
    // Ranges at 0 are code the linker removed, as symbolic reads them.
    if (range.begin == 0 && file.kind != ObjectKind::Relocatable) || range.begin >= range.end {
        return Ok(false);
    }
    let begin = relative(range.begin, file.address_offset);
    let end = begin.saturating_add(range.end - range.begin);
    ranges.push(UnitRange {
        begin,
        end,
        unit: unit as u64,
    })?;
    Ok(true)
}

impl DwarfReader {
    /// Indices into the symbols of those at `[lo, hi]`.
    fn symbols_between(&self, lo: u64, hi: u64) -> (usize, usize) {
        let start = self.file.symbols.partition_below(lo);
        let end = self.file.symbols.partition_at_or_below(hi);
        (start, end.max(start))
    }

    /// The nearest symbol address at or below `addr`, or `addr`.
    fn symbol_at_or_below(&self, addr: u64) -> u64 {
        match self.file.symbols.partition_at_or_below(addr) {
            0 => addr,
            n => self.file.symbols.address(n - 1),
        }
    }

    /// The units that may own a key between the nearest symbol below `addr` and `addr`:
    /// those whose ranges meet that span, in section order.
    fn units_for(&self, addr: u64) -> Vec<usize> {
        let lo = self.symbol_at_or_below(addr);
        let hi = addr.saturating_add(1);
        let mut units: Vec<usize> = self
            .unit_ranges
            .as_slice()
            .iter()
            .take_while(|r| r.begin < hi)
            .filter(|r| r.end > lo)
            .map(|r| r.unit as usize)
            .collect();
        units.sort_unstable();
        units.dedup();
        units
    }

    fn prepared(&self, index: usize) -> Option<Arc<PreparedUnit>> {
        if let Some(unit) = self
            .memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .units
            .get(&index)
        {
            return Some(unit.clone());
        }
        let unit = self.file.unit(index)?;
        let prepared = Arc::new(PreparedUnit::new(&self.file, &unit)?);
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        memo.make_room(prepared.bytes());
        memo.units.insert(index, prepared.clone());
        Some(prepared)
    }

    /// The functions that may own a key in `[lo, hi)`: those of `units` whose span
    /// meets it (its end included: a function's end is a key), read as symbolic reads
    /// them, in the order a whole conversion meets them. Reading more than needed
    /// changes nothing, reading them out of order would.
    fn read_functions(&self, units: &[usize], lo: u64, hi: u64) -> Vec<(usize, Function<'static>)> {
        let mut seen_ranges = BTreeSet::new();
        let mut functions = Vec::new();
        for &index in units {
            let (Some(unit), Some(prepared)) = (self.file.unit(index), self.prepared(index)) else {
                continue;
            };
            let reader = UnitReader {
                file: &self.file,
                unit: &unit,
                language: prepared.info.language,
                prefer_dwarf_names: prepared.info.prefer_dwarf_names,
                info: Some(&prepared.info),
            };
            for function in &prepared.functions {
                if !(function.nested || (function.lo < hi && function.hi >= lo)) {
                    continue;
                }
                // A unit symbolic cannot read fails its whole conversion; here the
                // function contributes nothing and the symbols still answer.
                if let Ok(found) = reader.function_at(function.offset, &mut seen_ranges) {
                    functions.extend(found.into_iter().map(|f| (index, f)));
                }
            }
        }
        functions
    }

    /// A SymCache of `functions` and the symbols at `[first, end)`.
    fn build(&self, functions: &[Function<'static>], (first, end): (usize, usize)) -> Vec<u8> {
        let mut converter = SymCacheConverter::new();
        converter.set_arch(self.file.arch);
        for function in functions {
            converter.process_symbolic_function(function);
        }
        for index in first..end {
            converter.process_symbolic_symbol(&self.file.symbols.get(index));
        }
        let mut bytes = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = converter.serialize(&mut bytes);
        bytes
    }

    /// A SymCache that answers `addr` as the whole file's would: the functions that may
    /// own a key between the nearest symbol at or below `addr` and `addr`, and every
    /// symbol from the lowest of those (or that symbol) up to the highest function end
    /// (or `addr`). Keys above `addr` do not change its answer, so addresses near one
    /// another share one.
    fn mini_cache(&self, addr: u64) -> Arc<Vec<u8>> {
        let below = self.symbol_at_or_below(addr).min(addr);
        let units = self.units_for(addr);
        let found = self.read_functions(&units, below, addr.saturating_add(1));
        let (mut lo, mut hi) = (below, addr);
        for (_, function) in &found {
            lo = lo.min(function.address);
            hi = hi.max(function.end_address());
        }
        let symbols = self.symbols_between(lo, hi);
        let key: MiniSymCacheKey = (
            found
                .iter()
                .map(|(unit, f)| (*unit, f.address, f.size))
                .collect(),
            symbols.0,
            symbols.1,
        );
        if let Some(hit) = self
            .memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .caches
            .get(&key)
        {
            return hit.clone();
        }
        let functions: Vec<Function<'static>> = found.into_iter().map(|(_, f)| f).collect();
        let bytes = Arc::new(self.build(&functions, symbols));
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        memo.make_room(bytes.len());
        memo.caches.insert(key, bytes.clone());
        bytes
    }
}

impl Memo {
    fn make_room(&mut self, bytes: usize) {
        if self.bytes.saturating_add(bytes) > MEMO_MAX_BYTES {
            self.units.clear();
            self.caches.clear();
            self.bytes = 0;
        }
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

impl LazySymbolizer for DwarfReader {
    fn arch(&self) -> Arch {
        self.file.arch
    }

    fn lookup(&self, relative_addr: u64) -> Vec<LazyLocation> {
        let bytes = self.mini_cache(relative_addr);
        let Ok(symcache) = SymCache::parse(&bytes) else {
            return Vec::new();
        };
        symcache_answer(&symcache, relative_addr)
    }
}
