//! symbolic-debuginfo 13.9's DWARF walk (`DwarfUnit::functions` and what it calls),
//! followed step by step, so a function comes out as symbolic's debug session makes it:
//! names from the symbol table first, inlinees, line rows cut to ranges. What differs
//! is where it keeps things (see `mod.rs`), and that a walk can start at one function
//! (`function_at`, for lazy lookups) as well as run over the whole file
//! ([`DwarfFile::functions`], for the SymCache writer).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;

use gimli::{AttributeValue, constants};
use symbolic::common::{Language, Name, NameMangling};
use symbolic::debuginfo::dwarf::Endian;
use symbolic::debuginfo::function_builder::FunctionBuilder;
use symbolic::debuginfo::{FileInfo, Function, ObjectKind};

use super::{DwarfFile, relative};
use crate::native::spill::{FileIndexSet, Plain};

pub type Slice = gimli::EndianSlice<'static, Endian>;
pub type Unit = gimli::Unit<Slice>;
type Die<'a> = gimli::DebuggingInformationEntry<Slice>;
type EntriesRaw<'u> = gimli::EntriesRaw<'u, Slice>;
type UnitOffset = gimli::UnitOffset<usize>;

/// The function ranges a walk has seen (symbolic's `seen_ranges`): a function whose
/// range was seen before, in this unit or an earlier one, is not made again.
pub trait SeenRanges {
    /// Whether `(address, size)` is new, noting it.
    fn first_time(&mut self, address: u64, size: u64) -> bool;
}

impl SeenRanges for BTreeSet<(u64, u64)> {
    fn first_time(&mut self, address: u64, size: u64) -> bool {
        self.insert((address, size))
    }
}

/// [`SeenRanges`] in a spill file: a whole file's walk sees every function's range, a
/// million and more in a large file.
pub struct SpilledSeenRanges {
    set: FileIndexSet<SeenRange>,
    error: Option<std::io::Error>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
struct SeenRange {
    address: u64,
    size: u64,
}

// SAFETY: `repr(C)`, two `u64`s.
unsafe impl Plain for SeenRange {}

impl SpilledSeenRanges {
    pub fn new_in(dir: &Path) -> std::io::Result<Self> {
        Ok(SpilledSeenRanges {
            set: FileIndexSet::new_in(dir)?,
            error: None,
        })
    }

    /// The first error the spill file gave (the walk went on as if the range were
    /// seen; its result must not be used).
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }
}

impl SeenRanges for SpilledSeenRanges {
    fn first_time(&mut self, address: u64, size: u64) -> bool {
        let before = self.set.len();
        match self.set.insert_full(SeenRange { address, size }) {
            Ok(_) => self.set.len() > before,
            Err(e) => {
                self.error.get_or_insert(e);
                false
            }
        }
    }
}

/// What a unit's walk reads besides its DIEs: symbolic's `DwarfUnit` fields.
pub struct UnitInfo {
    pub language: Language,
    pub prefer_dwarf_names: bool,
    pub line_program: Option<LineProgram>,
}

/// A subprogram with ranges, outside any other subprogram with ranges: where a walk of
/// its unit would start `parse_function`.
pub struct IndexedFunction {
    pub offset: UnitOffset,
    /// Lowest start and highest end of its ranges, relative.
    pub lo: u64,
    pub hi: u64,
    /// Whether its subtree holds other subprograms, which a walk reads too.
    pub nested: bool,
}

impl DwarfFile {
    /// Every function of the file, in the order symbolic's
    /// `DwarfDebugSession::functions` yields them, one unit parsed at a time. An error
    /// is where symbolic's iterator would yield one (it ends the SymCache conversion).
    pub fn functions(
        &self,
        seen: &mut dyn SeenRanges,
        sink: &mut dyn FnMut(Function<'static>),
    ) -> Result<(), WalkError> {
        if let Some(error) = self.headers_error {
            return Err(error.into());
        }
        for header in &self.headers {
            // symbolic's `get_unit`: a unit without its top DIE is empty.
            let unit = match self.dwarf.unit(*header) {
                Ok(unit) => unit,
                Err(gimli::Error::MissingUnitDie) => continue,
                Err(error) => return Err(error.into()),
            };
            let root_ranges = {
                let mut entries = unit.entries();
                match entries.next_dfs()? {
                    Some(root) => root.attr(constants::DW_AT_ranges).is_some(),
                    None => return Err(gimli::Error::MissingUnitDie.into()),
                }
            };
            // symbolic's `DwarfUnit::from_unit`: a unit the linker eliminated.
            if self.kind != ObjectKind::Relocatable && unit.low_pc == 0 && !root_ranges {
                continue;
            }
            let info = UnitInfo::new(self, &unit).ok_or(gimli::Error::MissingUnitDie)?;
            let reader = UnitReader {
                file: self,
                unit: &unit,
                language: info.language,
                prefer_dwarf_names: info.prefer_dwarf_names,
                info: Some(&info),
            };
            let mut entries = unit.entries_raw(None)?;
            let mut output = Output {
                sink: &mut *sink,
                range_buf: Vec::new(),
                seen_ranges: &mut *seen,
            };
            reader.parse_functions(-1, &mut entries, &mut output)?;
        }
        Ok(())
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
pub struct LineProgram {
    header: gimli::LineProgramHeader<Slice>,
    sequences: Vec<Sequence>,
}

impl LineProgram {
    pub fn prepare(program: gimli::IncompleteLineProgram<Slice>) -> Self {
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
pub struct UnitReader<'r> {
    pub file: &'r DwarfFile,
    pub unit: &'r Unit,
    pub language: Language,
    pub prefer_dwarf_names: bool,
    /// `None` for a unit only followed into by a reference (no lines are read there).
    pub info: Option<&'r UnitInfo>,
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

impl UnitInfo {
    /// symbolic's `DwarfUnit::from_unit`: `None` for a unit without a root entry.
    pub fn new(file: &DwarfFile, unit: &Unit) -> Option<Self> {
        let mut entries = unit.entries();
        let root = entries.next_dfs().ok()??;
        let language = match root.attr_value(constants::DW_AT_language) {
            Some(AttributeValue::Language(lang)) => language_from_dwarf(lang),
            _ => Language::Unknown,
        };
        let producer = root
            .attr_value(constants::DW_AT_producer)
            .and_then(|value| value.string_value(&file.dwarf.debug_str));
        // symbolic trusts DWARF names over the symbol table for Dart's lossy mangling.
        let prefer_dwarf_names = producer.map(|p| p.slice()) == Some(b"Dart VM".as_slice());
        Some(UnitInfo {
            language,
            prefer_dwarf_names,
            line_program: unit
                .line_program
                .as_ref()
                .map(|program| LineProgram::prepare(program.clone())),
        })
    }

    /// Bytes of its prepared line program, for what a memo of it weighs.
    pub fn line_bytes(&self) -> usize {
        self.line_program
            .iter()
            .flat_map(|p| &p.sequences)
            .map(|s| s.rows.len() * std::mem::size_of::<Row>())
            .sum::<usize>()
    }
}

impl<'r> UnitReader<'r> {
    /// Walks the DIE tree as `parse_functions` does, but only notes where each function
    /// starts and which addresses it spans, skipping its subtree.
    pub fn index_functions(
        &self,
        depth: isize,
        entries: &mut EntriesRaw<'_>,
        ranges: &mut Vec<gimli::Range>,
        out: &mut Vec<IndexedFunction>,
    ) -> Result<(), WalkError> {
        while let Some((offset, next_depth, abbrev)) = next_child(entries, depth)? {
            let Some(abbrev) = abbrev else {
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
            let address_offset = self.file.address_offset;
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
    pub fn function_at(
        &self,
        offset: UnitOffset,
        seen_ranges: &mut dyn SeenRanges,
    ) -> Result<Vec<Function<'static>>, WalkError> {
        let mut entries = self.unit.entries_raw(Some(offset))?;
        let mut functions = Vec::new();
        let mut sink = |function| functions.push(function);
        let mut output = Output {
            sink: &mut sink,
            range_buf: Vec::new(),
            seen_ranges,
        };
        let depth = entries.next_depth();
        if let Some(abbrev) = entries.read_abbreviation()? {
            self.parse_function(offset, depth, &mut entries, abbrev, &mut output)?;
        }
        Ok(functions)
    }

    fn compilation_dir(&self) -> &'static [u8] {
        match self.unit.comp_dir {
            Some(dir) => dir.slice(),
            None => &[],
        }
    }

    fn slice_value(&self, value: AttributeValue<Slice>) -> Option<&'static [u8]> {
        self.file
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
        while let Some((offset, next_depth, abbrev)) = next_child(entries, depth)? {
            if let Some(abbrev) = abbrev {
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
        let address_offset = self.file.address_offset;
        ranges.retain(|range| {
            if range.begin > range.end {
                return false;
            }
            let address = relative(range.begin, address_offset);
            output
                .seen_ranges
                .first_time(address, range.end - range.begin)
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

        if let Some(program) = self.info.and_then(|p| p.line_program.as_ref()) {
            for (range, builder) in &mut builders {
                for row in program.rows(range) {
                    let address = relative(row.address, address_offset);
                    let file = self.resolve_file(row.file_index).unwrap_or_default();
                    builder.add_leaf_line(address, row.size, file, row.line.unwrap_or(0));
                }
            }
        }
        for (_, builder) in builders {
            (output.sink)(builder.finish());
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
        while let Some((offset, next_depth, abbrev)) = next_child(entries, depth)? {
            let Some(abbrev) = abbrev else {
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
        let address_offset = self.file.address_offset;
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
        let kind = self.file.kind;
        let dwarf = &self.file.dwarf;
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
        let header = &self.info?.line_program.as_ref()?.header;
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
        let name = self.file.symbols.exact(address)?.name?;
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
                let Some((unit, offset)) = self.file.find_unit_offset(offset) else {
                    return Ok(None);
                };
                target_unit = unit;
                target = UnitReader {
                    file: self.file,
                    unit: &target_unit,
                    language: self.language,
                    prefer_dwarf_names: self.prefer_dwarf_names,
                    info: None,
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

/// A DIE as a walk meets it: offset, depth, abbreviation (`None` for a null entry).
type Child<'u> = (UnitOffset, isize, Option<&'u gimli::Abbreviation>);

/// The next DIE of the subtree below `depth`: its offset, depth and abbreviation
/// (`None` for a null entry); `None` past the subtree's end. Each walk's loop.
fn next_child<'u>(
    entries: &mut EntriesRaw<'u>,
    depth: isize,
) -> Result<Option<Child<'u>>, WalkError> {
    if entries.is_empty() {
        return Ok(None);
    }
    let offset = entries.next_offset();
    let next_depth = entries.next_depth();
    if next_depth > MAX_DIE_DEPTH {
        return Err(WalkError::TooDeep);
    }
    if next_depth <= depth {
        return Ok(None);
    }
    Ok(Some((offset, next_depth, entries.read_abbreviation()?)))
}

/// Why a unit's walk stopped; symbolic would fail the whole conversion for any of them.
#[derive(Debug)]
pub enum WalkError {
    Dwarf(gimli::Error),
    TooDeep,
    InvertedRange,
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::Dwarf(error) => write!(f, "bad DWARF: {error}"),
            WalkError::TooDeep => write!(f, "DWARF entries nested deeper than {MAX_DIE_DEPTH}"),
            WalkError::InvertedRange => write!(f, "a function's range ends before it starts"),
        }
    }
}

impl From<gimli::Error> for WalkError {
    fn from(err: gimli::Error) -> Self {
        WalkError::Dwarf(err)
    }
}

struct Output<'s> {
    /// Takes each outer function as it is finished, in symbolic's order.
    sink: &'s mut dyn FnMut(Function<'static>),
    range_buf: Vec<gimli::Range>,
    seen_ranges: &'s mut dyn SeenRanges,
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
