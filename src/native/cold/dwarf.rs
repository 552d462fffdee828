//! The lazy reader for DWARF in ELF, Mach-O (dSYM) and Wasm files.
//!
//! Opening reads the unit headers, each unit's address ranges and the symbol table. A
//! lookup parses only the units whose ranges meet the address (and the nearest symbol
//! below it), turns their functions into symbolic `Function`s the way symbolic's
//! `DwarfDebugSession` does, and feeds those and the symbols around the address to a
//! `SymCacheConverter`: the answer comes from a SymCache of a few functions, so inline
//! chains, names, paths and the way ranges end are the SymCache's by construction. The
//! parts of the walk that symbolic keeps private (line-program preparation, range and
//! name resolution) are followed here from symbolic-debuginfo 13.9's `dwarf.rs`.
//!
//! What a whole-file conversion sees and this one does not: functions of units whose
//! ranges do not meet the address (they cannot own keys at or below it in a linked
//! file), and symbols that start before the nearest one below the address yet end past
//! it (overlapping symbols). `differential.rs` checks the rest address by address.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use gimli::{AttributeValue, constants};
use symbolic::common::{Arch, Language, Name, NameMangling};
use symbolic::debuginfo::dwarf::{Dwarf, Endian};
use symbolic::debuginfo::function_builder::FunctionBuilder;
use symbolic::debuginfo::{FileInfo, Function, Object, ObjectKind, Symbol};
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::reader::{LazyLocation, LazySymbolizer, OwnedLazySymbolizer, symcache_answer};
use crate::lookup::ObjectHandle;

type Slice = gimli::EndianSlice<'static, Endian>;
type Unit = gimli::Unit<Slice>;
type UnitHeader = gimli::UnitHeader<Slice>;
type Die<'a> = gimli::DebuggingInformationEntry<Slice>;
type EntriesRaw<'u> = gimli::EntriesRaw<'u, Slice>;
type UnitOffset = gimli::UnitOffset<usize>;

/// What a reader keeps between lookups (parsed units, prepared line programs, mini
/// SymCaches), in bytes; past it the memo starts over. A cold request's addresses are
/// mostly in different units, so little is lost by starting over, and the reader stays
/// small beside the conversion it runs next to.
const MEMO_MAX_BYTES: usize = 24 << 20;

/// What a parsed unit is counted as: its header, abbreviations and line program header.
const UNIT_BYTES: usize = 16 << 10;

/// The DWARF sections symbolic's debug session reads; the rest stay empty.
pub const SECTIONS: &[gimli::SectionId] = &[
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugAddr,
    gimli::SectionId::DebugAranges,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugNames,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
    gimli::SectionId::DebugRanges,
    gimli::SectionId::DebugRngLists,
];

pub struct DwarfReader {
    arch: Arch,
    kind: ObjectKind,
    /// Subtracted from DWARF addresses to make them relative (symbolic's
    /// `address_offset`: the load address, or minus the code offset for Wasm).
    address_offset: i64,
    dwarf: gimli::Dwarf<Slice>,
    headers: Vec<UnitHeader>,
    /// `(begin, end, unit)` in relative addresses, sorted by `begin`.
    unit_ranges: Vec<(u64, u64, usize)>,
    /// The symbol table in its own order, sorted stably by address, so symbols at one
    /// address reach the converter in the order a whole conversion gives them; the first
    /// at an address is also what symbolic's `SymbolMap` keeps, which names functions.
    symbols: Vec<Symbol<'static>>,
    memo: Mutex<Memo>,
    /// Decompressed sections the slices above point into.
    _owned_sections: Vec<Vec<u8>>,
    /// The file every `'static` above borrows from; dropped last.
    _object: Arc<ObjectHandle>,
}

/// What lookups have built so far. Both maps start over when the caches outgrow
/// `MEMO_MAX_BYTES` (units' functions are counted by their line records).
#[derive(Default)]
struct Memo {
    /// Units parsed for lookups (and for references into them).
    parsed: HashMap<usize, Arc<Unit>>,
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
    language: Language,
    prefer_dwarf_names: bool,
    line_program: Option<LineProgram>,
    /// The subprograms a whole-unit walk would start `parse_function` at, in DIE order.
    functions: Vec<IndexedFunction>,
}

/// A subprogram with ranges, outside any other subprogram with ranges.
struct IndexedFunction {
    offset: UnitOffset,
    /// Lowest start and highest end of its ranges, relative.
    lo: u64,
    hi: u64,
    /// Whether its subtree holds other subprograms, which a walk reads too.
    nested: bool,
}

impl PreparedUnit {
    fn bytes(&self) -> usize {
        let rows: usize = self
            .line_program
            .iter()
            .flat_map(|p| &p.sequences)
            .map(|s| s.rows.len())
            .sum();
        rows * std::mem::size_of::<Row>()
            + self.functions.len() * std::mem::size_of::<IndexedFunction>()
    }
}

/// Subtracts symbolic's address offset (wrapping, as symbolic does).
fn relative(addr: u64, offset: i64) -> u64 {
    (addr as i64).wrapping_sub(offset) as u64
}

/// A reader for `handle`'s DWARF, or `None` when it has none (or needs a
/// BCSymbolMap, whose hidden names only a whole conversion resolves).
pub fn open(handle: &Arc<ObjectHandle>) -> Option<OwnedLazySymbolizer> {
    // SAFETY: the object borrows the memory-mapped file that `handle` owns; the reader
    // keeps `handle` alive for as long as it holds anything borrowed from it.
    let object: &'static Object<'static> = unsafe { std::mem::transmute(handle.object()) };
    let (dwarf_file, address_offset): (&dyn Dwarf<'static>, i64) = match object {
        Object::Elf(elf) => (elf, elf.load_address() as i64),
        Object::MachO(macho) if !macho.requires_symbolmap() => (macho, macho.load_address() as i64),
        Object::Wasm(wasm) => (wasm, -(wasm.code_offset() as i64)),
        _ => return None,
    };
    if !object.has_debug_info() {
        return None;
    }
    let endian = dwarf_file.endianity();
    let mut owned_sections = Vec::new();
    let mut slices: HashMap<gimli::SectionId, &'static [u8]> = HashMap::new();
    for &id in SECTIONS {
        let Some(section) = dwarf_file.section(&id.name()[1..]) else {
            continue;
        };
        let data: &'static [u8] = match section.data {
            Cow::Borrowed(data) => data,
            Cow::Owned(data) => {
                owned_sections.push(data);
                let data = owned_sections.last().expect("just pushed");
                // SAFETY: a Vec's heap buffer does not move when the Vec is moved into
                // `owned_sections` or that list grows, and the reader keeps the list.
                unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len()) }
            }
        };
        slices.insert(id, data);
    }
    let mut dwarf = gimli::Dwarf::load(|id| {
        Ok::<_, gimli::Error>(Slice::new(slices.get(&id).copied().unwrap_or(&[]), endian))
    })
    .ok()?;
    dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
    let mut headers: Vec<UnitHeader> = Vec::new();
    let mut iter = dwarf.units();
    while let Some(header) = iter.next().ok()? {
        headers.push(header);
    }

    let mut symbols: Vec<Symbol<'static>> = object.symbols().collect();
    symbols.sort_by_key(|s| s.address);
    let mut reader = DwarfReader {
        arch: object.arch(),
        kind: object.kind(),
        address_offset,
        headers,
        dwarf,
        unit_ranges: Vec::new(),
        symbols,
        memo: Mutex::new(Memo::default()),
        _owned_sections: owned_sections,
        _object: handle.clone(),
    };
    reader.unit_ranges = reader.index_units();
    Some(Arc::new(reader))
}

impl DwarfReader {
    /// A parsed unit, kept in the memo: units hold their line program's header and
    /// abbreviations, so only those lookups touch are kept, not all of them.
    fn get_unit(&self, index: usize) -> Option<Arc<Unit>> {
        let memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(unit) = memo.parsed.get(&index) {
            return Some(unit.clone());
        }
        drop(memo);
        let unit = Arc::new(self.dwarf.unit(*self.headers.get(index)?).ok()?);
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        memo.make_room(UNIT_BYTES);
        memo.parsed.insert(index, unit.clone());
        Some(unit)
    }

    /// The address ranges of every unit symbolic would read functions from: the unit's
    /// own ranges, or, when it states none, those of its subprograms.
    fn index_units(&self) -> Vec<(u64, u64, usize)> {
        let mut ranges = Vec::new();
        for (index, header) in self.headers.iter().enumerate() {
            // Parsed for its ranges and dropped: what lookups need they parse again.
            let Ok(unit) = self.dwarf.unit(*header) else {
                continue;
            };
            let unit = &unit;
            let Ok(Some(root)) = unit.entries().next_dfs().map(|e| e.cloned()) else {
                continue;
            };
            // symbolic's `DwarfUnit::from_unit`: a unit the linker eliminated.
            if self.kind != ObjectKind::Relocatable
                && unit.low_pc == 0
                && root.attr(constants::DW_AT_ranges).is_none()
            {
                continue;
            }
            let before = ranges.len();
            if let Ok(mut iter) = self.dwarf.unit_ranges(unit) {
                while let Ok(Some(range)) = iter.next() {
                    self.push_range(&mut ranges, range, index);
                }
            }
            if ranges.len() == before {
                self.index_subprograms(unit, index, &mut ranges);
            }
        }
        ranges.sort_unstable();
        ranges
    }

    fn index_subprograms(&self, unit: &Unit, index: usize, ranges: &mut Vec<(u64, u64, usize)>) {
        let mut entries = unit.entries();
        while let Ok(Some(entry)) = entries.next_dfs() {
            if entry.tag() != constants::DW_TAG_subprogram {
                continue;
            }
            if let Ok(mut iter) = self.dwarf.die_ranges(unit, entry) {
                while let Ok(Some(range)) = iter.next() {
                    self.push_range(ranges, range, index);
                }
            }
        }
    }

    fn push_range(&self, ranges: &mut Vec<(u64, u64, usize)>, range: gimli::Range, unit: usize) {
        // Ranges at 0 are code the linker removed, as symbolic reads them.
        if (range.begin == 0 && self.kind != ObjectKind::Relocatable) || range.begin >= range.end {
            return;
        }
        let begin = relative(range.begin, self.address_offset);
        let end = begin.saturating_add(range.end - range.begin);
        ranges.push((begin, end, unit));
    }

    /// Indices into `symbols` of those at `[lo, hi]`.
    fn symbols_between(&self, lo: u64, hi: u64) -> (usize, usize) {
        let start = self.symbols.partition_point(|s| s.address < lo);
        let end = self.symbols.partition_point(|s| s.address <= hi);
        (start, end.max(start))
    }

    /// The nearest symbol address at or below `addr`, or `addr`.
    fn symbol_at_or_below(&self, addr: u64) -> u64 {
        match self.symbols.partition_point(|s| s.address <= addr) {
            0 => addr,
            n => self.symbols[n - 1].address,
        }
    }

    /// The units that may own a key between the nearest symbol below `addr` and `addr`:
    /// those whose ranges meet that span, in section order.
    fn units_for(&self, addr: u64) -> Vec<usize> {
        let lo = self.symbol_at_or_below(addr);
        let hi = addr.saturating_add(1);
        let mut units: Vec<usize> = self
            .unit_ranges
            .iter()
            .take_while(|(begin, _, _)| *begin < hi)
            .filter(|(_, end, _)| *end > lo)
            .map(|(_, _, unit)| *unit)
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
        let unit = self.get_unit(index)?;
        let prepared = Arc::new(PreparedUnit::new(self, &unit)?);
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
            let (Some(unit), Some(prepared)) = (self.get_unit(index), self.prepared(index)) else {
                continue;
            };
            let reader = UnitReader {
                reader: self,
                unit: &unit,
                language: prepared.language,
                prefer_dwarf_names: prepared.prefer_dwarf_names,
                prepared: Some(&prepared),
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
        converter.set_arch(self.arch);
        for function in functions {
            converter.process_symbolic_function(function);
        }
        for symbol in &self.symbols[first..end] {
            converter.process_symbolic_symbol(symbol);
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
            self.parsed.clear();
            self.units.clear();
            self.caches.clear();
            self.bytes = 0;
        }
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

impl LazySymbolizer for DwarfReader {
    fn arch(&self) -> Arch {
        self.arch
    }

    fn lookup(&self, relative_addr: u64) -> Vec<LazyLocation> {
        let bytes = self.mini_cache(relative_addr);
        let Ok(symcache) = SymCache::parse(&bytes) else {
            return Vec::new();
        };
        symcache_answer(&symcache, relative_addr)
    }
}

/// symbolic's `DwarfRow`: one row of a prepared line program.
struct Row {
    address: u64,
    file_index: u64,
    line: Option<u64>,
    size: Option<u64>,
}

struct Sequence {
    start: u64,
    end: u64,
    rows: Vec<Row>,
}

/// symbolic's `DwarfLineProgram::prepare`: rows at address 0 dropped, rows at one
/// address merged (the last wins), sizes to the next row, sequences sorted.
struct LineProgram {
    header: gimli::LineProgramHeader<Slice>,
    sequences: Vec<Sequence>,
}

impl LineProgram {
    fn prepare(program: gimli::IncompleteLineProgram<Slice>) -> Self {
        let mut sequences = Vec::new();
        let mut rows = Vec::<Row>::new();
        let mut prev_address = 0;
        let mut state_machine = program.rows();
        while let Ok(Some((_, &row))) = state_machine.next_row() {
            let address = row.address();
            if address == 0 {
                continue;
            }
            if let Some(last) = rows.last_mut()
                && address >= last.address
            {
                last.size = Some(address - last.address);
            }
            if row.end_sequence() {
                if !rows.is_empty() {
                    sequences.push(Sequence {
                        start: rows[0].address,
                        end: if address < prev_address {
                            prev_address + 1
                        } else {
                            address
                        },
                        rows: std::mem::take(&mut rows),
                    });
                }
                prev_address = 0;
            } else if address < prev_address {
                // Addresses only increase within a sequence; symbolic drops such rows.
            } else {
                let file_index = row.file_index();
                let line = row.line().map(|v| v.get());
                match rows.last_mut() {
                    Some(last) if last.address == address => {
                        last.file_index = file_index;
                        last.line = line;
                    }
                    _ => rows.push(Row {
                        address,
                        file_index,
                        line,
                        size: None,
                    }),
                }
                prev_address = address;
            }
        }
        if !rows.is_empty() {
            sequences.push(Sequence {
                start: rows[0].address,
                end: prev_address + 1,
                rows,
            });
        }
        sequences.sort_by_key(|s| s.start);
        LineProgram {
            header: state_machine.header().clone(),
            sequences,
        }
    }

    /// symbolic's `get_rows`: the rows of the first sequence that overlaps `range`.
    fn rows(&self, range: &gimli::Range) -> &[Row] {
        for seq in &self.sequences {
            if range.begin >= seq.end || seq.start >= range.end {
                continue;
            }
            let from = match seq.rows.binary_search_by_key(&range.begin, |r| r.address) {
                Ok(index) => index,
                Err(0) => 0,
                Err(next) => next - 1,
            };
            let len = seq.rows[from..]
                .binary_search_by_key(&range.end, |r| r.address)
                .unwrap_or_else(|e| e);
            return &seq.rows[from..from + len];
        }
        &[]
    }
}

/// One unit, read the way symbolic's `DwarfUnit` reads it.
struct UnitReader<'r> {
    reader: &'r DwarfReader,
    unit: &'r Unit,
    language: Language,
    prefer_dwarf_names: bool,
    /// `None` for a unit only followed into by a reference (no lines are read there).
    prepared: Option<&'r PreparedUnit>,
}

#[derive(Default, Clone, Copy)]
struct CallLocation {
    call_file: Option<u64>,
    call_line: Option<u64>,
}

/// The walk recurses once per level of the DIE tree: a hostile file nested deeper would
/// exhaust the thread's stack, which no panic handler catches. Real trees are a few
/// dozen levels deep.
const MAX_DIE_DEPTH: isize = 1024;

/// symbolic's `UnitRef::MAX_ABSTRACT_ORIGIN_DEPTH` (elfutils' limit); also bounds the
/// chains of references followed for a name.
const MAX_ABSTRACT_ORIGIN_DEPTH: u8 = 16;

impl PreparedUnit {
    /// symbolic's `DwarfUnit::from_unit`, plus the index of the unit's functions.
    fn new(reader: &DwarfReader, unit: &Unit) -> Option<Self> {
        let mut entries = unit.entries();
        let root = entries.next_dfs().ok()??;
        let language = match root.attr_value(constants::DW_AT_language) {
            Some(AttributeValue::Language(lang)) => language_from_dwarf(lang),
            _ => Language::Unknown,
        };
        let producer = root
            .attr_value(constants::DW_AT_producer)
            .and_then(|value| value.string_value(&reader.dwarf.debug_str));
        // symbolic trusts DWARF names over the symbol table for Dart's lossy mangling.
        let prefer_dwarf_names = producer.map(|p| p.slice()) == Some(b"Dart VM".as_slice());
        let mut prepared = PreparedUnit {
            language,
            prefer_dwarf_names,
            line_program: unit
                .line_program
                .as_ref()
                .map(|program| LineProgram::prepare(program.clone())),
            functions: Vec::new(),
        };
        let indexer = UnitReader {
            reader,
            unit,
            language,
            prefer_dwarf_names,
            prepared: None,
        };
        let mut entries = unit.entries_raw(None).ok()?;
        let mut ranges = Vec::new();
        // A unit symbolic cannot walk fails its conversion; here it has no functions.
        if indexer
            .index_functions(-1, &mut entries, &mut ranges, &mut prepared.functions)
            .is_err()
        {
            prepared.functions.clear();
        }
        Some(prepared)
    }
}

impl<'r> UnitReader<'r> {
    /// Walks the DIE tree as `parse_functions` does, but only notes where each function
    /// starts and which addresses it spans, skipping its subtree.
    fn index_functions(
        &self,
        depth: isize,
        entries: &mut EntriesRaw<'_>,
        ranges: &mut Vec<gimli::Range>,
        out: &mut Vec<IndexedFunction>,
    ) -> Result<(), WalkError> {
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let next_depth = entries.next_depth();
            if next_depth > MAX_DIE_DEPTH {
                return Err(WalkError::TooDeep);
            }
            if next_depth <= depth {
                return Ok(());
            }
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if abbrev.tag() != constants::DW_TAG_subprogram {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            self.parse_ranges(entries, abbrev, ranges)?;
            ranges.retain(|range| range.begin <= range.end);
            if ranges.is_empty() {
                // `parse_function` walks into a function without ranges for others.
                self.index_functions(next_depth, entries, ranges, out)?;
                continue;
            }
            let address_offset = self.reader.address_offset;
            let lo = ranges
                .iter()
                .map(|r| relative(r.begin, address_offset))
                .min();
            let hi = ranges
                .iter()
                .map(|r| relative(r.begin, address_offset).saturating_add(r.end - r.begin))
                .max();
            let mut nested = false;
            while !entries.is_empty() && entries.next_depth() > next_depth {
                if let Some(abbrev) = entries.read_abbreviation()? {
                    nested |= abbrev.tag() == constants::DW_TAG_subprogram;
                    entries.skip_attributes(abbrev.attributes())?;
                }
            }
            out.push(IndexedFunction {
                offset,
                lo: lo.unwrap_or_default(),
                hi: hi.unwrap_or_default(),
                nested,
            });
        }
        Ok(())
    }

    /// The functions a whole-unit walk makes from the subprogram at `offset` (itself,
    /// and any nested in it).
    fn function_at(
        &self,
        offset: UnitOffset,
        seen_ranges: &mut BTreeSet<(u64, u64)>,
    ) -> Result<Vec<Function<'static>>, WalkError> {
        let mut entries = self.unit.entries_raw(Some(offset))?;
        let mut output = Output {
            functions: Vec::new(),
            range_buf: Vec::new(),
            seen_ranges,
        };
        let depth = entries.next_depth();
        if let Some(abbrev) = entries.read_abbreviation()? {
            self.parse_function(offset, depth, &mut entries, abbrev, &mut output)?;
        }
        Ok(output.functions)
    }

    fn compilation_dir(&self) -> &'static [u8] {
        match self.unit.comp_dir {
            Some(dir) => dir.slice(),
            None => &[],
        }
    }

    fn slice_value(&self, value: AttributeValue<Slice>) -> Option<&'static [u8]> {
        self.reader
            .dwarf
            .attr_string(self.unit, value)
            .map(|reader| reader.slice())
            .ok()
    }

    fn string_value(&self, value: AttributeValue<Slice>) -> Option<Cow<'static, str>> {
        self.slice_value(value).map(String::from_utf8_lossy)
    }

    fn offset(&self) -> gimli::UnitSectionOffset {
        self.unit.header.offset()
    }

    fn parse_functions(
        &self,
        depth: isize,
        entries: &mut EntriesRaw<'_>,
        output: &mut Output<'_>,
    ) -> Result<(), WalkError> {
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let next_depth = entries.next_depth();
            if next_depth > MAX_DIE_DEPTH {
                return Err(WalkError::TooDeep);
            }
            if next_depth <= depth {
                return Ok(());
            }
            if let Some(abbrev) = entries.read_abbreviation()? {
                if abbrev.tag() == constants::DW_TAG_subprogram {
                    self.parse_function(offset, next_depth, entries, abbrev, output)?;
                } else {
                    entries.skip_attributes(abbrev.attributes())?;
                }
            }
        }
        Ok(())
    }

    fn parse_function(
        &self,
        offset: UnitOffset,
        depth: isize,
        entries: &mut EntriesRaw<'_>,
        abbrev: &gimli::Abbreviation,
        output: &mut Output<'_>,
    ) -> Result<(), WalkError> {
        let mut ranges = std::mem::take(&mut output.range_buf);
        self.parse_ranges(entries, abbrev, &mut ranges)?;
        let address_offset = self.reader.address_offset;
        ranges.retain(|range| {
            if range.begin > range.end {
                return false;
            }
            let address = relative(range.begin, address_offset);
            output
                .seen_ranges
                .insert((address, range.end - range.begin))
        });
        if ranges.is_empty() {
            output.range_buf = ranges;
            return self.parse_functions(depth, entries, output);
        }

        let entry = self.unit.entry(offset)?;
        let language = self.resolve_function_language(&entry, self.language);
        let symbol_name = if self.prefer_dwarf_names {
            None
        } else {
            let first = ranges.iter().map(|r| r.begin).min().unwrap_or_default();
            self.resolve_symbol_name(relative(first, address_offset), language)
        };
        let name = symbol_name
            .or_else(|| {
                self.resolve_function_name(&entry, language, None, MAX_ABSTRACT_ORIGIN_DEPTH)
                    .ok()
                    .flatten()
            })
            .unwrap_or_else(|| Name::new("", NameMangling::Unmangled, language));

        let mut builders: Vec<(gimli::Range, FunctionBuilder<'static>)> = ranges
            .iter()
            .map(|range| {
                let address = relative(range.begin, address_offset);
                let builder = FunctionBuilder::new(
                    name.clone(),
                    self.compilation_dir(),
                    address,
                    range.end - range.begin,
                );
                (*range, builder)
            })
            .collect();
        ranges.clear();
        output.range_buf = ranges;

        self.parse_function_children(depth, 0, entries, &mut builders, output, language)?;

        if let Some(program) = self.prepared.and_then(|p| p.line_program.as_ref()) {
            for (range, builder) in &mut builders {
                for row in program.rows(range) {
                    let address = relative(row.address, address_offset);
                    let file = self.resolve_file(row.file_index).unwrap_or_default();
                    builder.add_leaf_line(address, row.size, file, row.line.unwrap_or(0));
                }
            }
        }
        for (_, builder) in builders {
            output.functions.push(builder.finish());
        }
        Ok(())
    }

    fn parse_function_children(
        &self,
        depth: isize,
        inline_depth: u32,
        entries: &mut EntriesRaw<'_>,
        builders: &mut [(gimli::Range, FunctionBuilder<'static>)],
        output: &mut Output<'_>,
        language: Language,
    ) -> Result<(), WalkError> {
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let next_depth = entries.next_depth();
            if next_depth > MAX_DIE_DEPTH {
                return Err(WalkError::TooDeep);
            }
            if next_depth <= depth {
                return Ok(());
            }
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            match abbrev.tag() {
                constants::DW_TAG_subprogram => {
                    self.parse_function(offset, next_depth, entries, abbrev, output)?;
                }
                constants::DW_TAG_inlined_subroutine => {
                    self.parse_inlinee(
                        offset,
                        next_depth,
                        inline_depth,
                        entries,
                        abbrev,
                        builders,
                        output,
                        language,
                    )?;
                }
                _ => entries.skip_attributes(abbrev.attributes())?,
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn parse_inlinee(
        &self,
        offset: UnitOffset,
        depth: isize,
        inline_depth: u32,
        entries: &mut EntriesRaw<'_>,
        abbrev: &gimli::Abbreviation,
        builders: &mut [(gimli::Range, FunctionBuilder<'static>)],
        output: &mut Output<'_>,
        language: Language,
    ) -> Result<(), WalkError> {
        let mut ranges = std::mem::take(&mut output.range_buf);
        let call_location = self.parse_ranges(entries, abbrev, &mut ranges)?;
        ranges.retain(|range| range.end > range.begin);
        if ranges.is_empty() {
            output.range_buf = ranges;
            return self.parse_functions(depth, entries, output);
        }
        let entry = self.unit.entry(offset)?;
        let language = self.resolve_function_language(&entry, language);
        let name = self
            .resolve_function_name(&entry, language, None, MAX_ABSTRACT_ORIGIN_DEPTH)
            .ok()
            .flatten()
            .unwrap_or_else(|| Name::new("", NameMangling::Unmangled, language));
        let call_file = call_location
            .call_file
            .and_then(|index| self.resolve_file(index))
            .unwrap_or_default();
        let call_line = call_location.call_line.unwrap_or(0);
        let address_offset = self.reader.address_offset;
        for range in &ranges {
            let Some((_, builder)) = builders
                .iter_mut()
                .find(|(outer, _)| range.begin >= outer.begin && range.begin < outer.end)
            else {
                continue;
            };
            builder.add_inlinee(
                inline_depth,
                name.clone(),
                relative(range.begin, address_offset),
                range.end - range.begin,
                call_file.clone(),
                call_line,
            );
        }
        ranges.clear();
        output.range_buf = ranges;
        self.parse_function_children(depth, inline_depth + 1, entries, builders, output, language)
    }

    /// symbolic's `parse_ranges`: reads the DIE's attributes, keeping its ranges and
    /// call site.
    fn parse_ranges(
        &self,
        entries: &mut EntriesRaw<'_>,
        abbrev: &gimli::Abbreviation,
        ranges: &mut Vec<gimli::Range>,
    ) -> Result<CallLocation, WalkError> {
        ranges.clear();
        let mut call = CallLocation::default();
        let (mut low_pc, mut high_pc, mut high_pc_rel) = (None, None, None);
        let kind = self.reader.kind;
        let dwarf = &self.reader.dwarf;
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            match attr.name() {
                constants::DW_AT_low_pc => match attr.value() {
                    AttributeValue::Addr(addr) => low_pc = Some(addr),
                    AttributeValue::DebugAddrIndex(index) => {
                        low_pc = Some(dwarf.address(self.unit, index)?)
                    }
                    _ => return Err(gimli::Error::UnsupportedAttributeForm(attr.form()).into()),
                },
                constants::DW_AT_high_pc => match attr.value() {
                    AttributeValue::Addr(addr) => high_pc = Some(addr),
                    AttributeValue::DebugAddrIndex(index) => {
                        high_pc = Some(dwarf.address(self.unit, index)?)
                    }
                    AttributeValue::Udata(size) => high_pc_rel = Some(size),
                    _ => return Err(gimli::Error::UnsupportedAttributeForm(attr.form()).into()),
                },
                constants::DW_AT_call_line => match attr.value() {
                    AttributeValue::Udata(line) => call.call_line = Some(line),
                    _ => return Err(gimli::Error::UnsupportedAttributeForm(attr.form()).into()),
                },
                constants::DW_AT_call_file => match attr.value() {
                    AttributeValue::FileIndex(file) => call.call_file = Some(file),
                    _ => return Err(gimli::Error::UnsupportedAttributeForm(attr.form()).into()),
                },
                constants::DW_AT_ranges
                | constants::DW_AT_rnglists_base
                | constants::DW_AT_start_scope => {
                    if let Some(mut iter) = dwarf.attr_ranges(self.unit, attr.value())? {
                        loop {
                            let range = match iter.next() {
                                Ok(Some(range)) => range,
                                Ok(None) | Err(gimli::Error::InvalidCfiSetLoc(_)) => break,
                                Err(err) => return Err(err.into()),
                            };
                            if range.begin > 0 || kind == ObjectKind::Relocatable {
                                ranges.push(range);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if ranges.is_empty()
            && let Some(range) = convert_pc_range(low_pc, high_pc, high_pc_rel, kind)?
        {
            ranges.push(range);
        }
        Ok(call)
    }

    fn resolve_file(&self, index: u64) -> Option<FileInfo<'static>> {
        let header = &self.prepared?.line_program.as_ref()?.header;
        let file = header.file(index)?;
        Some(FileInfo::new(
            Cow::Borrowed(
                file.directory(header)
                    .and_then(|attr| self.slice_value(attr))
                    .unwrap_or_default(),
            ),
            Cow::Borrowed(self.slice_value(file.path_name()).unwrap_or_default()),
        ))
    }

    fn resolve_symbol_name(&self, address: u64, language: Language) -> Option<Name<'static>> {
        let symbols = &self.reader.symbols;
        let symbol = symbols
            .get(symbols.partition_point(|s| s.address < address))
            .filter(|s| s.address == address)?;
        let name = symbol.name.clone()?;
        Some(Name::new(name, NameMangling::Mangled, language))
    }

    fn resolve_function_language(&self, entry: &Die<'_>, fallback: Language) -> Language {
        self.resolve_entry_language(entry, MAX_ABSTRACT_ORIGIN_DEPTH)
            .ok()
            .flatten()
            .unwrap_or(fallback)
    }

    fn resolve_entry_language(
        &self,
        entry: &Die<'_>,
        depth: u8,
    ) -> Result<Option<Language>, WalkError> {
        if depth == 0 {
            return Ok(None);
        }
        let Some(attr) = entry.attr(constants::DW_AT_abstract_origin) else {
            return Ok(None);
        };
        self.resolve_reference(attr.value(), |target, target_entry| {
            if let Some(lang) = target.resolve_entry_language(target_entry, depth - 1)? {
                return Ok(Some(lang));
            }
            if self.offset() != target.offset() {
                Ok(target.unit_language())
            } else {
                Ok(None)
            }
        })
    }

    fn unit_language(&self) -> Option<Language> {
        let mut entries = self.unit.entries();
        let root = entries.next_dfs().ok()??;
        match root.attr_value(constants::DW_AT_language) {
            Some(AttributeValue::Language(lang)) => Some(language_from_dwarf(lang)),
            _ => None,
        }
    }

    fn resolve_function_name(
        &self,
        entry: &Die<'_>,
        language: Language,
        prior: Option<UnitOffset>,
        depth: u8,
    ) -> Result<Option<Name<'static>>, WalkError> {
        if depth == 0 {
            return Ok(None);
        }
        let mut fallback = None;
        let mut reference = None;
        for attr in entry.attrs() {
            match attr.name() {
                constants::DW_AT_linkage_name | constants::DW_AT_MIPS_linkage_name => {
                    return Ok(self
                        .string_value(attr.value())
                        .map(|n| Name::new(n, NameMangling::Mangled, language)));
                }
                constants::DW_AT_name => fallback = Some(attr.value()),
                constants::DW_AT_abstract_origin | constants::DW_AT_specification => {
                    reference = Some(attr.value())
                }
                _ => {}
            }
        }
        if let Some(value) = fallback {
            return Ok(self
                .string_value(value)
                .map(|n| Name::new(n, NameMangling::Unmangled, language)));
        }
        let Some(value) = reference else {
            return Ok(None);
        };
        let entry_offset = entry.offset();
        self.resolve_reference(value, |target, target_entry| {
            if let Some(prior) = prior
                && self.offset() == target.offset()
                && prior == target_entry.offset()
            {
                return Ok(None);
            }
            if self.offset() != target.offset() || entry_offset != target_entry.offset() {
                target.resolve_function_name(target_entry, language, Some(entry_offset), depth - 1)
            } else {
                Ok(None)
            }
        })
    }

    fn resolve_reference<T>(
        &self,
        value: AttributeValue<Slice>,
        f: impl FnOnce(&UnitReader<'_>, &Die<'_>) -> Result<Option<T>, WalkError>,
    ) -> Result<Option<T>, WalkError> {
        let (target, target_unit);
        let (unit, offset) = match value {
            AttributeValue::UnitRef(offset) => (self, offset),
            AttributeValue::DebugInfoRef(offset) => {
                let Some((unit, offset)) = self.reader.find_unit_offset(offset) else {
                    return Ok(None);
                };
                target_unit = unit;
                target = UnitReader {
                    reader: self.reader,
                    unit: &target_unit,
                    language: self.language,
                    prefer_dwarf_names: self.prefer_dwarf_names,
                    prepared: None,
                };
                (&target, offset)
            }
            _ => return Ok(None),
        };
        let mut entries = unit.unit.entries_at_offset(offset)?;
        entries.next_entry()?;
        match entries.current() {
            Some(entry) => f(unit, entry),
            None => Ok(None),
        }
    }
}

impl DwarfReader {
    /// The unit holding a `.debug_info` offset, and the offset within it.
    fn find_unit_offset(
        &self,
        offset: gimli::DebugInfoOffset<usize>,
    ) -> Option<(Arc<Unit>, UnitOffset)> {
        let section_offset = gimli::UnitSectionOffset(offset.0);
        let index = match self
            .headers
            .binary_search_by_key(&section_offset, |h| h.offset())
        {
            Ok(index) => index,
            Err(0) => return None,
            Err(next) => next - 1,
        };
        let unit = self.get_unit(index)?;
        let unit_offset = section_offset.to_unit_offset(&unit)?;
        Some((unit, unit_offset))
    }
}

/// Why a unit's walk stopped; symbolic would fail the whole conversion for any of them.
#[derive(Debug)]
enum WalkError {
    Dwarf(#[allow(dead_code)] gimli::Error),
    TooDeep,
    InvertedRange,
}

impl From<gimli::Error> for WalkError {
    fn from(err: gimli::Error) -> Self {
        WalkError::Dwarf(err)
    }
}

struct Output<'s> {
    functions: Vec<Function<'static>>,
    range_buf: Vec<gimli::Range>,
    seen_ranges: &'s mut BTreeSet<(u64, u64)>,
}

/// symbolic's `convert_pc_range`.
fn convert_pc_range(
    low_pc: Option<u64>,
    high_pc: Option<u64>,
    high_pc_rel: Option<u64>,
    kind: ObjectKind,
) -> Result<Option<gimli::Range>, WalkError> {
    let low_pc = match low_pc {
        Some(low_pc) if low_pc != 0 || kind == ObjectKind::Relocatable => low_pc,
        _ => return Ok(None),
    };
    let high_pc = match (high_pc, high_pc_rel) {
        (Some(high_pc), _) => high_pc,
        (_, Some(rel)) => low_pc.wrapping_add(rel),
        _ => return Ok(None),
    };
    if low_pc == high_pc || low_pc == u64::MAX || low_pc == u64::MAX - 1 {
        return Ok(None);
    }
    if low_pc > high_pc {
        // symbolic fails the unit (`InvertedFunctionRange`).
        return Err(WalkError::InvertedRange);
    }
    Ok(Some(gimli::Range {
        begin: low_pc,
        end: high_pc,
    }))
}

/// symbolic's `language_from_dwarf`.
fn language_from_dwarf(language: gimli::DwLang) -> Language {
    match language {
        constants::DW_LANG_C
        | constants::DW_LANG_C11
        | constants::DW_LANG_C89
        | constants::DW_LANG_C99 => Language::C,
        constants::DW_LANG_C_plus_plus
        | constants::DW_LANG_C_plus_plus_03
        | constants::DW_LANG_C_plus_plus_11
        | constants::DW_LANG_C_plus_plus_14 => Language::Cpp,
        constants::DW_LANG_D => Language::D,
        constants::DW_LANG_Go => Language::Go,
        constants::DW_LANG_ObjC => Language::ObjC,
        constants::DW_LANG_ObjC_plus_plus => Language::ObjCpp,
        constants::DW_LANG_Rust => Language::Rust,
        constants::DW_LANG_Swift => Language::Swift,
        _ => Language::Unknown,
    }
}
