//! A SymCache writer whose anonymous memory does not grow with the debug file.
//!
//! symbolic's `SymCacheConverter` builds the whole cache on the heap before it writes
//! it: its string table, files, functions and call locations in hash sets, and one
//! `BTreeMap` entry per address range. That is about four times a DWARF file's size at
//! the peak (1.1 GiB for a 261 MiB file), so a 4 GiB file needed more memory than a
//! self-hosted machine has. This writer makes the same decisions in the same order, and
//! so writes the same bytes (the differential test checks it on every fixture), but
//! keeps every table in a file (`spill`):
//! - strings, files, functions and call locations are insertion-ordered sets in files;
//! - the ranges, which symbolic inserts into an ordered map as it goes, are logged as
//!   operations in a file, sorted in place by address and order of arrival, and folded
//!   into the map's final state: while the debug session's functions are read, the map
//!   is only written, never read, so only the final state matters.
//!   Public symbols come after and do read it (whether an address already has a real
//!   location), so they go into a second, much smaller map in a file, over the folded
//!   ranges.
//!
//! What stays on the heap is one function (its lines and inlinees) at a time, and what
//! the reader of the debug file holds: for DWARF our own walk (`native::dwarf`) and for
//! Breakpad text our own iterator (`breakpad.rs`), which keep their state in spill files
//! too; for a PDB our own reader over the file's mapping (`native::pdb_read`), one
//! module at a time; for the other formats (PE, .NET) symbolic's debug session.

use std::borrow::Cow;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sourcemap::SourceMap;
use symbolic::common::{Arch, DebugId, Language, Name, NameMangling};
use symbolic::debuginfo::breakpad::BreakpadObject;
use symbolic::debuginfo::{
    DebugSession, FileFormat, FileInfo, Function, LineInfo, Object, ObjectLike, Symbol,
};

use crate::lookup::ObjectHandle;
use crate::native::dwarf::{DwarfFile, SpilledSeenRanges};
use crate::native::pdb_read::{
    Broken, Formatter, MappedSource, SourceServer, Streams, module_functions,
};
use crate::native::spill::{
    FileIndexSet, FileLog, FileStringTable, FileVec, Plain, too_many_names,
};

/// `SYMCACHE_MAGIC` of symbolic's raw format ("SYMC" little-endian).
const MAGIC: u32 = u32::from_le_bytes(*b"SYMC");
const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(C)]
struct RawFile {
    comp_dir_offset: u32,
    directory_offset: u32,
    name_offset: u32,
    srcsrv_name_offset: u32,
    srcsrv_dir_offset: u32,
    srcsrv_revision_offset: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(C)]
struct RawFunction {
    name_offset: u32,
    comp_dir_offset: u32,
    entry_pc: u32,
    lang: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(C)]
struct RawLocation {
    file_idx: u32,
    line: u32,
    function_idx: u32,
    inlined_into_idx: u32,
}

/// Marks the end of a function or symbol: addresses from here on have no location.
const NO_LOCATION: RawLocation = RawLocation {
    file_idx: NONE,
    line: NONE,
    function_idx: NONE,
    inlined_into_idx: NONE,
};

/// One write to the range map, in the order symbolic's converter makes it.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct RangeOp {
    address: u32,
    kind: u32,
    seq: u64,
    location: RawLocation,
}

/// What the folded map holds at an address a symbol asks about (`folded_at_symbols`).
const FOLDED_NOTHING: u8 = 0;
const FOLDED_END: u8 = 1;
const FOLDED_LOCATION: u8 = 2;

/// Writes a function may batch before they go to the log unsorted (a function with
/// more lines than this costs the log's sort instead of more memory).
const MAX_BATCH: usize = 1 << 16;

/// `BTreeMap::insert`: always.
const SET: u32 = 0;
/// symbolic's `insert_source_location`: over nothing or a `NO_LOCATION`.
const SET_OVER_END: u32 = 1;
/// `Entry::Vacant`: over nothing.
const SET_IF_VACANT: u32 = 2;

#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct RangeEntry {
    address: u32,
    location: RawLocation,
}

// SAFETY: `repr(C)` structs of `u32`/`u64` fields, laid out without padding.
unsafe impl Plain for RawFile {}
unsafe impl Plain for RawFunction {}
unsafe impl Plain for RawLocation {}
unsafe impl Plain for RangeOp {}
unsafe impl Plain for RangeEntry {}

/// A function's name as a [`Rewrite`] sees it (symbolic's `transform::Function`, which
/// cannot be built outside symbolic).
pub struct FunctionText<'s> {
    pub name: Cow<'s, str>,
    pub comp_dir: Option<Cow<'s, str>>,
}

/// A line's file and number as a [`Rewrite`] sees it (symbolic's
/// `transform::SourceLocation`).
pub struct LocationText<'s> {
    pub name: Cow<'s, str>,
    pub directory: Option<Cow<'s, str>>,
    pub comp_dir: Option<Cow<'s, str>>,
    pub srcsrv_name: Option<Cow<'s, str>>,
    pub srcsrv_dir: Option<Cow<'s, str>>,
    pub srcsrv_revision: Option<Cow<'s, str>>,
    pub line: u32,
}

/// What symbolic's `transform::Transformer` does to each function and line before it is
/// written (BCSymbolMaps, il2cpp line mappings), for this writer.
pub trait Rewrite {
    fn function<'f>(&'f mut self, function: FunctionText<'f>) -> FunctionText<'f> {
        function
    }
    fn location<'f>(&'f mut self, location: LocationText<'f>) -> LocationText<'f> {
        location
    }
    /// Whether `location` reads and writes only the file, never the line: then lines of
    /// one file in a row can share the file's record without asking again.
    fn file_only(&self) -> bool {
        false
    }
}

pub struct SpillingWriter<'a> {
    debug_id: DebugId,
    arch: Arch,
    is_windows_object: bool,
    rewrites: Vec<Box<dyn Rewrite + 'a>>,
    strings: FileStringTable,
    files: FileIndexSet<RawFile>,
    functions: FileIndexSet<RawFunction>,
    call_locations: FileIndexSet<RawLocation>,
    /// Writes to the range map while functions are read (`None` once folded).
    log: Option<FileLog<RangeOp>>,
    /// The current top-level function's writes, sorted before they go to `log`: a
    /// function writes its lines, then its entry and its inlinees' lines below them, but
    /// functions mostly follow one another in address order, so sorted batches leave
    /// the log sorted already, and its sort at `fold_ranges` a check.
    batch: Vec<RangeOp>,
    /// Writes so far, the next write's place in symbolic's order.
    seq: u64,
    /// The folded map, one op per address in address order.
    ops: FileVec<RangeOp>,
    /// The public symbols' writes, which win over the folded ops.
    overlay: Option<RangeOverlay>,
    last_addr: Option<u32>,
    /// Where the tables are.
    dir: PathBuf,
}

impl<'a> SpillingWriter<'a> {
    /// A writer keeping its tables in unlinked files in `dir`.
    pub fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(SpillingWriter {
            debug_id: DebugId::default(),
            arch: Arch::Unknown,
            is_windows_object: false,
            rewrites: Vec::new(),
            strings: FileStringTable::new_in(dir)?,
            files: FileIndexSet::new_in(dir)?,
            functions: FileIndexSet::new_in(dir)?,
            call_locations: FileIndexSet::new_in(dir)?,
            log: Some(FileLog::new_in(dir)?),
            batch: Vec::new(),
            seq: 0,
            ops: FileVec::new_in(dir)?,
            overlay: Some(RangeOverlay::new_in(dir)?),
            last_addr: None,
            dir: dir.to_owned(),
        })
    }

    pub fn add_rewrite(&mut self, rewrite: impl Rewrite + 'a) {
        self.rewrites.push(Box::new(rewrite));
    }

    /// The whole of `handle`'s object: its DWARF through our own walk, which holds one
    /// unit at a time (symbolic's DWARF session keeps every unit it has read, and every
    /// function range, until it ends: 100 MiB and more for a file of some GiB), Breakpad
    /// text through our own iterator (symbolic's keeps every FILE and INLINE_ORIGIN
    /// record on the heap), other formats through symbolic's debug session. Either way,
    /// symbolic's order.
    pub fn process_handle(
        &mut self,
        handle: &Arc<ObjectHandle>,
        scratch: &Path,
    ) -> io::Result<Result<(), String>> {
        let Some(object) = handle.object() else {
            // The one format a handle holds no symbolic object of.
            return self.process_pdb(handle, scratch);
        };
        if let Object::Breakpad(breakpad) = object {
            let max_inline_depth = handle.limits().parse_options().max_inline_depth;
            return self.process_breakpad(breakpad, max_inline_depth, scratch);
        }
        match DwarfFile::open(handle, scratch)? {
            Some(file) => self.process_dwarf(&file, object, scratch),
            None => self.process_object(object),
        }
    }

    /// A WebAssembly module without DWARF, whose lines are in the source map its
    /// toolchain wrote beside it (Emscripten's `-gsource-map`, dart2wasm): one function
    /// per function body, named from the module's name section, with a line for every
    /// mapped token within the body up to the next token, as the map's own lookup
    /// answers an offset (the greatest token at or below it). Source maps address
    /// instructions by their offset in the module file, as browsers report frames and
    /// as symbolic places the bodies, so no address is moved. Then the symbol table,
    /// as for any object.
    pub fn process_wasm_source_map(
        &mut self,
        object: &Object<'_>,
        map: &SourceMap,
    ) -> io::Result<Result<(), String>> {
        self.arch = object.arch();
        self.debug_id = object.debug_id();
        let mut tokens = map
            .tokens()
            .filter(|token| token.get_dst_line() == 0)
            .peekable();
        for symbol in object.symbols() {
            let (start, end) = (symbol.address, symbol.address.saturating_add(symbol.size));
            while tokens
                .next_if(|t| u64::from(t.get_dst_col()) < start)
                .is_some()
            {}
            let mut lines = Vec::new();
            while let Some(token) = tokens.next_if(|t| u64::from(t.get_dst_col()) < end) {
                let address = u64::from(token.get_dst_col());
                let next = tokens
                    .peek()
                    .map_or(end, |t| u64::from(t.get_dst_col()).min(end));
                let Some(source) = token.get_source() else {
                    continue;
                };
                if next > address {
                    lines.push(LineInfo {
                        address,
                        size: Some(next - address),
                        file: FileInfo::from_path(source.as_bytes()),
                        line: u64::from(token.get_src_line()) + 1,
                    });
                }
            }
            let name = symbol.name.clone().unwrap_or_default();
            let function = Function {
                address: start,
                size: end - start,
                name: Name::new(name, NameMangling::Unknown, Language::Unknown),
                compilation_dir: b"",
                lines,
                inlinees: Vec::new(),
                inline: false,
            };
            self.process_top_function(&function)?;
        }
        self.process_symbols(|| object.symbols())?;
        Ok(Ok(()))
    }

    /// `process_object` for Breakpad text, walked by `breakpad.rs`.
    fn process_breakpad(
        &mut self,
        object: &BreakpadObject<'_>,
        max_inline_depth: Option<u32>,
        scratch: &Path,
    ) -> io::Result<Result<(), String>> {
        self.arch = object.arch();
        self.debug_id = object.debug_id();
        let walked = super::breakpad::functions(object, max_inline_depth, scratch, &mut |f| {
            self.process_top_function(&f)
        })?;
        if let Err(e) = walked {
            return Ok(Err(bad_debug_file(e)));
        }
        self.process_symbols(|| object.symbols())?;
        Ok(Ok(()))
    }

    /// `process_object` for a PDB, read by `native::pdb_read` through the file's mapping
    /// one module at a time (symbolic's session copies every stream it reads onto the
    /// heap and keeps every module until it ends: most of the file).
    fn process_pdb(
        &mut self,
        handle: &Arc<ObjectHandle>,
        scratch: &Path,
    ) -> io::Result<Result<(), String>> {
        let source = MappedSource::new(handle.clone(), scratch.to_owned());
        let streams = match Streams::open(source) {
            Ok(streams) => streams,
            Err(e) => return pdb_failure(e.into()),
        };
        let formatter = match streams.formatter() {
            Ok(formatter) => formatter,
            Err(e) => return pdb_failure(e.into()),
        };
        self.arch = handle.arch();
        self.debug_id = handle.debug_id();
        self.is_windows_object = true;
        // What symbolic's session adds to each file, before any other rewrite sees it.
        let source_server = SourceServer::new(&streams);
        let has_source_server = source_server.is_some();
        if let Some(source_server) = source_server {
            self.rewrites.insert(0, Box::new(source_server));
        }
        let walked = self.process_pdb_modules(&streams, &formatter);
        if has_source_server {
            self.rewrites.remove(0);
        }
        let processed = match walked {
            Ok(()) => self
                .process_symbols(|| streams.public_symbols().map(|public| public.to_symbol()))
                .map(Ok),
            Err(broken) => pdb_failure(broken),
        };
        self.is_windows_object = false;
        processed
    }

    /// Every module's functions, in symbolic's order.
    fn process_pdb_modules(
        &mut self,
        streams: &Streams,
        formatter: &Formatter<'_>,
    ) -> Result<(), Broken> {
        for index in 0..formatter.modules().len() {
            for function in &module_functions(streams, formatter, index)? {
                self.process_top_function(function).map_err(Broken::Disk)?;
            }
        }
        Ok(())
    }

    /// `process_object` for an object with DWARF, walked by `native::dwarf`.
    fn process_dwarf(
        &mut self,
        file: &DwarfFile,
        object: &Object<'_>,
        scratch: &Path,
    ) -> io::Result<Result<(), String>> {
        self.arch = object.arch();
        self.debug_id = object.debug_id();
        let mut seen = SpilledSeenRanges::new_in(scratch)?;
        let mut failed = None;
        let walked = file.functions(&mut seen, &mut |function| {
            if failed.is_none()
                && let Err(e) = self.process_top_function(&function)
            {
                failed = Some(e);
            }
        });
        if let Some(e) = failed.or_else(|| seen.take_error()) {
            return Err(e);
        }
        if let Err(e) = walked {
            return Ok(Err(e.to_string()));
        }
        self.process_symbols(|| object.symbols())?;
        Ok(Ok(()))
    }

    /// symbolic's `SymCacheConverter::process_object`: the debug session's functions,
    /// then the symbol table. `Err` of the outer result is the writer's own (disk),
    /// the inner one the object's.
    pub fn process_object<'d, 'o, O>(&mut self, object: &'o O) -> io::Result<Result<(), String>>
    where
        O: ObjectLike<'d, 'o>,
        O::Error: std::error::Error + Send + Sync + 'static,
    {
        let session = match object.debug_session() {
            Ok(session) => session,
            Err(e) => return Ok(Err(bad_debug_file(e))),
        };
        self.arch = object.arch();
        self.debug_id = object.debug_id();
        self.is_windows_object = matches!(object.file_format(), FileFormat::Pe | FileFormat::Pdb);
        for function in session.functions() {
            match function {
                Ok(function) => self.process_top_function(&function)?,
                Err(e) => return Ok(Err(bad_debug_file(e))),
            }
        }
        self.process_symbols(|| object.symbols())?;
        self.is_windows_object = false;
        Ok(Ok(()))
    }

    /// The symbol table, once every function is in: the functions' ranges are folded
    /// first, since symbols read them. `symbols` gives the table twice: first to learn
    /// what the folded map holds at every address a symbol asks about, in one pass in
    /// address order, then to process the symbols in table order with those answers.
    /// Asking the folded map one symbol at a time was a binary search of a mapped file
    /// of GiBs in table order, a page fault per symbol once the page cache is squeezed
    /// (a 6 GiB file in a 1 GiB container did not finish in 20 minutes).
    fn process_symbols<'d, I>(&mut self, symbols: impl Fn() -> I) -> io::Result<()>
    where
        I: Iterator<Item = Symbol<'d>>,
    {
        self.fold_ranges()?;
        let folded = self.folded_at_symbols(symbols())?;
        let folded = folded.as_slice();
        for (index, symbol) in symbols().enumerate() {
            let at = |n: usize| folded.get(2 * index + n).copied().unwrap_or(FOLDED_NOTHING);
            self.process_symbol(&symbol, at(0), at(1))?;
        }
        Ok(())
    }

    /// For the `index`th symbol, at `2 * index` what the folded map holds at its start,
    /// at `2 * index + 1` at its end (`FOLDED_*`): the addresses are logged with their
    /// index, sorted, and walked beside the folded map, which is in address order.
    fn folded_at_symbols<'d>(
        &self,
        symbols: impl Iterator<Item = Symbol<'d>>,
    ) -> io::Result<FileVec<u8>> {
        let mut asked: FileLog<u64> = FileLog::new_in(&self.dir)?;
        let mut count = 0u64;
        for (index, symbol) in symbols.enumerate() {
            count = index as u64 + 1;
            if symbol.name.is_none() {
                continue;
            }
            // `process_symbol` fails the conversion there.
            let Ok(address) = u32::try_from(symbol.address) else {
                break;
            };
            let slot = 2 * index as u64;
            if slot > u64::from(u32::MAX) {
                return Err(io::Error::other("more symbols than a SymCache can hold"));
            }
            asked.push(u64::from(address) << 32 | slot)?;
            if symbol.size > 0 {
                let end = symbol.address.wrapping_add(symbol.size) as u32;
                asked.push(u64::from(end) << 32 | (slot + 1))?;
            }
        }
        let mut asked = asked.into_vec()?;
        asked.as_mut_slice().sort_unstable();
        let mut answers: FileVec<u8> = FileVec::new_in(&self.dir)?;
        answers.extend_zeroed(usize::try_from(2 * count).map_err(io::Error::other)?)?;
        let ops = self.ops.as_slice();
        let mut op = 0;
        for &key in asked.as_slice() {
            let address = (key >> 32) as u32;
            while op < ops.len() && ops[op].address < address {
                op += 1;
            }
            let found = match ops.get(op) {
                Some(found) if found.address == address && found.location == NO_LOCATION => {
                    FOLDED_END
                }
                Some(found) if found.address == address => FOLDED_LOCATION,
                _ => FOLDED_NOTHING,
            };
            answers.set(key as u32 as usize, found);
        }
        Ok(answers)
    }

    fn log(&mut self, address: u32, kind: u32, location: RawLocation) -> io::Result<()> {
        self.batch.push(RangeOp {
            address,
            kind,
            seq: self.seq,
            location,
        });
        self.seq += 1;
        if self.batch.len() >= MAX_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// Sends the batch to the log, sorted as `fold_ranges` sorts.
    fn flush_batch(&mut self) -> io::Result<()> {
        self.batch.sort_unstable_by_key(|op| (op.address, op.seq));
        let log = self.log.as_mut().expect("functions come before folding");
        for op in self.batch.drain(..) {
            log.push(op)?;
        }
        Ok(())
    }

    /// A top-level function: its writes, with its inlinees', as one sorted batch.
    fn process_top_function(&mut self, function: &Function<'_>) -> io::Result<()> {
        self.process_function(function, &[(0, u32::MAX)])?;
        self.flush_batch()
    }

    /// The same walk as symbolic's `process_symbolic_function_recursive` (13.9), its
    /// comments there explain the cases; only where the results go differs.
    fn process_function(
        &mut self,
        function: &Function<'_>,
        call_locations: &[(u32, u32)],
    ) -> io::Result<()> {
        if function.size == 0 || function.address > u64::from(u32::MAX) {
            return Ok(());
        }
        let comp_dir = std::str::from_utf8(function.compilation_dir).ok();
        let entry_pc = if function.inline {
            u32::MAX
        } else {
            function.address as u32
        };

        let function_idx = {
            let language: Language = function.name.language();
            let name_offset = insert_name(
                &mut self.rewrites,
                &mut self.strings,
                self.is_windows_object,
                FunctionText {
                    name: function.name.as_str().into(),
                    comp_dir: comp_dir.map(Into::into),
                },
            )?;
            self.functions.insert_full(RawFunction {
                name_offset,
                comp_dir_offset: NONE,
                entry_pc,
                lang: language as u32,
            })?
        };

        let mut inlinee_ranges = Vec::new();
        for inlinee in &function.inlinees {
            for line in &inlinee.lines {
                let (start, end) = line_boundaries(line.address, line.size);
                inlinee_ranges.push(start..end);
            }
        }
        inlinee_ranges.sort_unstable_by_key(|range| range.start);

        let mut line_iter = function.lines.iter();
        let mut call_location_iter = call_locations.iter();
        let mut inline_iter = inlinee_ranges.into_iter();
        let mut current_call_location = call_location_iter.next().expect("never empty");
        let mut next_call_location = call_location_iter.next();
        let mut next_line = line_iter.next();
        let mut next_inline = inline_iter.next();
        let mut callee_call_locations = Vec::new();
        let mut last_file: Option<(&FileInfo<'_>, u32)> = None;
        let same_file_same_record = self.rewrites.iter().all(|r| r.file_only());

        while let Some(line) = next_line.take() {
            let (line_range_start, line_range_end) = line_boundaries(line.address, line.size);
            while let Some(next) = next_call_location.filter(|next| next.0 <= line_range_start) {
                current_call_location = next;
                next_call_location = call_location_iter.next();
            }
            let inlined_into_idx = current_call_location.1;

            // A function's lines name few files, mostly the same one in a row: unless a
            // rewrite may move a line to another file, a repeat is the same file
            // record, not six string lookups again.
            let (file_idx, line_number) = match last_file {
                Some((file, file_idx)) if same_file_same_record && *file == line.file => {
                    (file_idx, line.line as u32)
                }
                _ => {
                    let mut text = LocationText {
                        name: line.file.name_str(),
                        directory: Some(line.file.dir_str()),
                        comp_dir: comp_dir.map(Into::into),
                        srcsrv_name: line.file.srcsrv_name_str(),
                        srcsrv_dir: line.file.srcsrv_dir_str(),
                        srcsrv_revision: line.file.srcsrv_revision().map(Into::into),
                        line: line.line as u32,
                    };
                    for rewrite in &mut self.rewrites {
                        text = rewrite.location(text);
                    }
                    let name_offset = self.strings.insert(&text.name)?;
                    let directory_offset =
                        self.strings.insert_optional(text.directory.as_deref())?;
                    let comp_dir_offset = self.strings.insert_optional(text.comp_dir.as_deref())?;
                    let srcsrv_name_offset =
                        self.strings.insert_optional(text.srcsrv_name.as_deref())?;
                    let srcsrv_dir_offset =
                        self.strings.insert_optional(text.srcsrv_dir.as_deref())?;
                    let srcsrv_revision_offset = self
                        .strings
                        .insert_optional(text.srcsrv_revision.as_deref())?;
                    let file_idx = self.files.insert_full(RawFile {
                        comp_dir_offset,
                        directory_offset,
                        name_offset,
                        srcsrv_name_offset,
                        srcsrv_dir_offset,
                        srcsrv_revision_offset,
                    })?;
                    if same_file_same_record {
                        last_file = Some((&line.file, file_idx));
                    }
                    (file_idx, text.line)
                }
            };
            let location = RawLocation {
                file_idx,
                line: line_number,
                function_idx,
                inlined_into_idx,
            };

            let mut current_address = line_range_start;
            while current_address < line_range_end {
                if next_inline
                    .as_ref()
                    .is_none_or(|next| next.start > current_address)
                {
                    self.log(current_address, SET, location)?;
                }
                if let Some(inline_range) =
                    take_if(&mut next_inline, |next| next.start < line_range_end)
                {
                    let call_location_idx = self.call_locations.insert_full(location)?;
                    callee_call_locations.push((inline_range.start, call_location_idx));
                    current_address = inline_range.end;
                    next_inline = inline_iter.next();
                } else {
                    current_address = line_range_end;
                }
            }

            next_line = line_iter.next();
            while next_line
                .as_ref()
                .is_some_and(|next| (next.address as u32) < current_address)
            {
                next_line = line_iter.next();
            }
        }

        if !function.inline {
            let location = RawLocation {
                file_idx: NONE,
                line: 0,
                function_idx,
                inlined_into_idx: NONE,
            };
            self.log(entry_pc, SET_OVER_END, location)?;
        }

        if !callee_call_locations.is_empty() {
            for inlinee in &function.inlinees {
                self.process_function(inlinee, &callee_call_locations)?;
            }
        }

        let function_end = function.end_address() as u32;
        let last_addr = self.last_addr.get_or_insert(0);
        if function_end > *last_addr {
            *last_addr = function_end;
        }
        self.log(function_end, SET_IF_VACANT, NO_LOCATION)
    }

    /// Replays the logged writes: sorted by address and then by when they were made,
    /// each address's writes applied in turn leave what the map would hold.
    fn fold_ranges(&mut self) -> io::Result<()> {
        self.flush_batch()?;
        if let Some(log) = self.log.take() {
            self.ops = log.into_vec()?;
        }
        let ops = self.ops.as_mut_slice();
        // Sorted already when the functions came in address order (a linear check in
        // the standard sort), else sorted here.
        ops.sort_unstable_by_key(|op| (op.address, op.seq));
        // Folding in place: the entries written never overtake the ops read.
        let mut write = 0usize;
        let mut read = 0usize;
        while read < ops.len() {
            let address = ops[read].address;
            let mut value: Option<RawLocation> = None;
            while read < ops.len() && ops[read].address == address {
                let op = ops[read];
                value = match (op.kind, value) {
                    (SET, _) => Some(op.location),
                    (SET_OVER_END, None) => Some(op.location),
                    (SET_OVER_END, Some(v)) if v == NO_LOCATION => Some(op.location),
                    (SET_IF_VACANT, None) => Some(op.location),
                    (_, v) => v,
                };
                read += 1;
            }
            if let Some(location) = value {
                // `write` never passes `read`: each address's ops are read before its
                // one entry is written back in the same array.
                ops[write] = RangeOp {
                    address,
                    kind: SET,
                    seq: 0,
                    location,
                };
                write += 1;
            }
        }
        self.ops.truncate(write);
        Ok(())
    }

    /// The symbols' own write at `address`, which wins over the folded map.
    fn symbol_range_at(&self, address: u32) -> Option<RawLocation> {
        self.overlay.as_ref().and_then(|o| o.get(address))
    }

    fn set_range(&mut self, address: u32, location: RawLocation) -> io::Result<()> {
        self.overlay
            .as_mut()
            .expect("symbols come before serializing")
            .insert(address, location)
    }

    /// symbolic's `process_symbolic_symbol`, with what the folded map holds at the
    /// symbol's start and end (`FOLDED_*`) found beforehand.
    fn process_symbol(
        &mut self,
        symbol: &Symbol<'_>,
        folded_start: u8,
        folded_end: u8,
    ) -> io::Result<()> {
        let name_offset = {
            let Some(name) = &symbol.name else {
                return Ok(());
            };
            insert_name(
                &mut self.rewrites,
                &mut self.strings,
                self.is_windows_object,
                FunctionText {
                    name: name.clone(),
                    comp_dir: None,
                },
            )?
        };
        // symbolic writes a symbol's address cut to a `u32`: one past 4 GiB of the image
        // would answer for a wrong, low address. (A function there is left out, by
        // symbolic too: a frame there is unknown, not wrong.)
        let address = u32::try_from(symbol.address).map_err(|_| {
            io::Error::other(format!(
                "symbol {} at 0x{:x} of the image, past the 4 GiB a SymCache addresses",
                symbol.name().unwrap_or("?"),
                symbol.address
            ))
        })?;
        // Free, or the end of a function or symbol.
        let free = match self.symbol_range_at(address) {
            Some(found) => found == NO_LOCATION,
            None => folded_start != FOLDED_LOCATION,
        };
        if free {
            let function_idx = self.functions.insert_full(RawFunction {
                name_offset,
                comp_dir_offset: NONE,
                entry_pc: address,
                lang: NONE,
            })?;
            let location = RawLocation {
                file_idx: NONE,
                line: 0,
                function_idx,
                inlined_into_idx: NONE,
            };
            self.set_range(address, location)?;
        }
        let last_addr = self.last_addr.get_or_insert(0);
        if address >= *last_addr {
            self.last_addr = None;
        }
        if symbol.size > 0 {
            let end_address = symbol.address.wrapping_add(symbol.size) as u32;
            if self.symbol_range_at(end_address).is_none() && folded_end == FOLDED_NOTHING {
                self.set_range(end_address, NO_LOCATION)?;
            }
        }
        Ok(())
    }

    /// symbolic's `SymCacheConverter::serialize`: the same layout, byte for byte.
    pub fn serialize<W: Write>(mut self, out: &mut W, dir: &Path) -> io::Result<()> {
        let overlay = self.overlay.take().expect("serialized once");
        // The folded ranges and the symbols' writes, merged by address.
        let mut ranges: FileLog<RangeEntry> = FileLog::new_in(dir)?;
        let mut symbols = overlay.into_sorted();
        if let Some(last_addr) = self.last_addr {
            let present = symbols
                .as_slice()
                .binary_search_by_key(&last_addr, |e| e.address)
                .is_ok()
                || self
                    .ops
                    .as_slice()
                    .binary_search_by_key(&last_addr, |op| op.address)
                    .is_ok();
            if !present {
                symbols.push(RangeEntry {
                    address: last_addr,
                    location: NO_LOCATION,
                })?;
                let len = symbols.len();
                let slice = symbols.as_mut_slice();
                let mut i = len - 1;
                while i > 0 && slice[i - 1].address > slice[i].address {
                    slice.swap(i - 1, i);
                    i -= 1;
                }
            }
        }
        {
            let base = self.ops.as_slice();
            let over = symbols.as_slice();
            let (mut b, mut o) = (0, 0);
            while b < base.len() || o < over.len() {
                let take_over =
                    o < over.len() && (b >= base.len() || over[o].address <= base[b].address);
                if take_over {
                    if b < base.len() && base[b].address == over[o].address {
                        b += 1;
                    }
                    ranges.push(over[o])?;
                    o += 1;
                } else {
                    ranges.push(RangeEntry {
                        address: base[b].address,
                        location: base[b].location,
                    })?;
                    b += 1;
                }
            }
        }
        drop(symbols);
        self.ops = FileVec::new_in(dir)?;
        let ranges = ranges.into_vec()?;

        let too_many = || io::Error::other("more than 4 billion SymCache records");
        let count = |n: usize| u32::try_from(n).map_err(|_| too_many());
        let num_files = count(self.files.len())?;
        let num_functions = count(self.functions.len())?;
        let num_ranges = count(ranges.len())?;
        let num_source_locations = count(self.call_locations.len() + ranges.len())?;
        let string_bytes = self.strings.as_bytes();
        let string_len = u32::try_from(string_bytes.len()).map_err(|_| too_many_names())?;

        let mut out = Counting { inner: out, pos: 0 };
        out.write_all(&MAGIC.to_le_bytes())?;
        out.write_all(&symbolic::symcache::SYMCACHE_VERSION.to_le_bytes())?;
        // The v9 header: debug id (a UUID and an appendix), arch, five counts, 16 bytes
        // reserved (72 bytes).
        // SAFETY: `DebugId` is `repr(C, packed)`, 32 bytes of plain fields: the bytes
        // symbolic's header holds it as (it is written from memory there too).
        let debug_id: [u8; 32] = unsafe { std::mem::transmute(self.debug_id) };
        out.write_all(&debug_id)?;
        for value in [
            self.arch as u32,
            num_files,
            num_functions,
            num_source_locations,
            num_ranges,
            string_len,
        ] {
            out.write_all(&value.to_le_bytes())?;
        }
        out.write_all(&[0u8; 16])?;
        out.align_to(8)?;
        out.write_plain(self.files.as_slice())?;
        out.align_to(8)?;
        out.write_plain(self.functions.as_slice())?;
        out.align_to(8)?;
        out.write_plain(self.call_locations.as_slice())?;
        for entry in ranges.as_slice() {
            out.write_plain(std::slice::from_ref(&entry.location))?;
        }
        out.align_to(8)?;
        for entry in ranges.as_slice() {
            out.write_all(&entry.address.to_le_bytes())?;
        }
        out.align_to(8)?;
        out.write_all(string_bytes)?;
        Ok(())
    }
}

/// The public symbols' writes to the range map: few beside the functions' ranges, a
/// map of their own in a file.
struct RangeOverlay {
    entries: FileVec<RangeEntry>,
    /// Addresses, in the order first written; an entry's index is its address's.
    index: FileIndexSet<u64>,
}

impl RangeOverlay {
    fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(RangeOverlay {
            entries: FileVec::new_in(dir)?,
            index: FileIndexSet::new_in(dir)?,
        })
    }

    fn get(&self, address: u32) -> Option<RawLocation> {
        self.index
            .get_index(u64::from(address))
            .map(|at| self.entries.get(at as usize).location)
    }

    fn insert(&mut self, address: u32, location: RawLocation) -> io::Result<()> {
        let at = self.index.insert_full(u64::from(address))? as usize;
        let entry = RangeEntry { address, location };
        if at == self.entries.len() {
            self.entries.push(entry)?;
        } else {
            self.entries.set(at, entry);
        }
        Ok(())
    }

    fn into_sorted(mut self) -> FileVec<RangeEntry> {
        self.entries
            .as_mut_slice()
            .sort_unstable_by_key(|entry| entry.address);
        self.entries
    }
}

/// A function's or symbol's name as written: rewritten, undecorated for a Windows
/// object, then interned.
fn insert_name<'t>(
    rewrites: &'t mut [Box<dyn Rewrite + '_>],
    strings: &mut FileStringTable,
    windows: bool,
    mut text: FunctionText<'t>,
) -> io::Result<u32> {
    for rewrite in rewrites.iter_mut() {
        text = rewrite.function(text);
    }
    let name = if windows {
        undecorate_win_symbol(&text.name)
    } else {
        &text.name
    };
    strings.insert(name)
}

/// A PDB that could not be read: the file's (`bad debug file`), or our disk's.
fn pdb_failure(broken: Broken) -> io::Result<Result<(), String>> {
    match broken {
        Broken::Disk(e) => Err(e),
        Broken::File(e) => Ok(Err(bad_debug_file(io::Error::other(e)))),
    }
}

/// What symbolic's converter says of a file its debug session cannot read (its
/// `ErrorKind::BadDebugFile`), with the reason for the log.
fn bad_debug_file(e: impl std::error::Error) -> String {
    tracing::debug!(error = %e, "bad debug file");
    "bad debug file".to_owned()
}

struct Counting<'w, W: Write> {
    inner: &'w mut W,
    pos: u64,
}

impl<W: Write> Counting<'_, W> {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn write_plain<T: Plain>(&mut self, items: &[T]) -> io::Result<()> {
        // SAFETY: `Plain` types have no padding; their bytes are their fields'.
        let bytes = unsafe {
            std::slice::from_raw_parts(items.as_ptr().cast::<u8>(), std::mem::size_of_val(items))
        };
        self.write_all(bytes)
    }

    fn align_to(&mut self, align: u64) -> io::Result<()> {
        let pad = (align - self.pos % align) % align;
        self.write_all(&[0u8; 8][..pad as usize])
    }
}

/// symbolic's `undecorate_win_symbol` (from dump_syms): strips the C decorations of
/// `__cdecl`, `__stdcall`, `__fastcall` and `__vectorcall` names. symbolic applies it to
/// Windows objects' names in `process_object` only (so the lazy PDB reader applies it
/// itself). Kept as it is, down to the `split_at(1)` that panics on a name starting with
/// a non-ASCII character: symbolic's conversion panics on such a name too.
pub fn undecorate_win_symbol(name: &str) -> &str {
    if name.starts_with('?') || name.contains([':', '(', '<']) {
        return name;
    }
    if let Some((name, param_size)) = name.rsplit_once("@@")
        && param_size.parse::<u32>().is_ok()
    {
        return name;
    }
    if !name.is_empty()
        && let ("@" | "_", rest) = name.split_at(1)
    {
        if let Some((name, param_size)) = rest.rsplit_once('@')
            && param_size.parse::<u32>().is_ok()
        {
            return name;
        }
        if let Some(name) = name.strip_prefix('_') {
            return name;
        }
    }
    name
}

fn line_boundaries(address: u64, size: Option<u64>) -> (u32, u32) {
    let start = address.try_into().unwrap_or(u32::MAX);
    let end = start.saturating_add(size.unwrap_or(1).try_into().unwrap_or(u32::MAX));
    (start, end)
}

fn take_if<T>(opt: &mut Option<T>, predicate: impl FnOnce(&mut T) -> bool) -> Option<T> {
    if opt.as_mut().is_some_and(predicate) {
        opt.take()
    } else {
        None
    }
}
