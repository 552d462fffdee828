//! Reading DWARF (in ELF, Mach-O and Wasm files) into symbolic's `Function`s, our own
//! way: the walk of symbolic-debuginfo 13.9's `DwarfDebugSession` (`walk.rs`), over a
//! file opened here, with the symbol table that names functions in a spill file
//! (`symbols.rs`).
//!
//! Two readers stand on it:
//! - the SymCache writer walks every unit in order, as symbolic's session does, and so
//!   writes the same bytes; but symbolic's session keeps every unit it has parsed (its
//!   abbreviations and line program header) and every function range it has seen until
//!   the end, which grows with the file (about 100 MiB at 4 GiB of DWARF). Here a unit
//!   is dropped once walked, and the ranges seen go to a spill file.
//! - the cold path's lazy reader (`cold/dwarf.rs`) walks only the functions near the
//!   addresses it is asked for.
//!
//! Units followed into by a reference (`DW_AT_abstract_origin` across units, common
//! with LTO) are kept in a small memo, which starts over when full.

mod symbols;
mod walk;

pub use symbols::SymbolIndex;
pub use walk::{IndexedFunction, Slice, SpilledSeenRanges, Unit, UnitInfo, UnitReader};

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use symbolic::common::Arch;
use symbolic::debuginfo::dwarf::Dwarf;
use symbolic::debuginfo::{Object, ObjectKind};

use crate::lookup::ObjectHandle;

type UnitHeader = gimli::UnitHeader<Slice>;

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

/// Units kept parsed for references into them (each holds its abbreviations and line
/// program header, some KiB); past it the memo starts over.
const MAX_MEMO_UNITS: usize = 256;

/// An object file's DWARF, opened for walking.
pub struct DwarfFile {
    pub arch: Arch,
    pub kind: ObjectKind,
    /// Subtracted from DWARF addresses to make them relative (symbolic's
    /// `address_offset`: the load address, or minus the code offset for Wasm).
    pub address_offset: i64,
    pub dwarf: gimli::Dwarf<Slice>,
    pub headers: Vec<UnitHeader>,
    /// Why the unit headers stop early, if they do: symbolic's session fails the whole
    /// file then, and so does the SymCache writer; the units before it are in `headers`.
    pub headers_error: Option<gimli::Error>,
    /// The symbol table in its own order, sorted stably by address: the first symbol at
    /// an address is what symbolic's `SymbolMap` keeps, which names functions.
    pub symbols: SymbolIndex,
    memo: Mutex<HashMap<usize, Arc<Unit>>>,
    /// Decompressed sections the slices above point into.
    _owned_sections: Vec<Vec<u8>>,
    /// The file every `'static` above borrows from; dropped last.
    _object: Arc<ObjectHandle>,
}

/// Subtracts symbolic's address offset (wrapping, as symbolic does).
pub fn relative(addr: u64, offset: i64) -> u64 {
    (addr as i64).wrapping_sub(offset) as u64
}

impl DwarfFile {
    /// `handle`'s DWARF, or `None` when it has none; `spill_dir` takes the symbol index.
    pub fn open(handle: &Arc<ObjectHandle>, spill_dir: &Path) -> io::Result<Option<Self>> {
        // SAFETY: the object borrows the memory-mapped file that `handle` owns; the
        // file keeps `handle` alive for as long as it holds anything borrowed from it.
        let Some(object) = handle.object() else {
            return Ok(None);
        };
        let object: &'static Object<'static> = unsafe { std::mem::transmute(object) };
        let (dwarf_file, address_offset): (&dyn Dwarf<'static>, i64) = match object {
            Object::Elf(elf) => (elf, elf.load_address() as i64),
            Object::MachO(macho) => (macho, macho.load_address() as i64),
            Object::Wasm(wasm) => (wasm, -(wasm.code_offset() as i64)),
            _ => return Ok(None),
        };
        if !object.has_debug_info() {
            return Ok(None);
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
                    // SAFETY: a Vec's heap buffer does not move when the Vec is moved
                    // into `owned_sections` or that list grows, and the file keeps it.
                    unsafe { std::slice::from_raw_parts(data.as_ptr(), data.len()) }
                }
            };
            slices.insert(id, data);
        }
        let Ok(mut dwarf) = gimli::Dwarf::load(|id| {
            Ok::<_, gimli::Error>(Slice::new(slices.get(&id).copied().unwrap_or(&[]), endian))
        }) else {
            return Ok(None);
        };
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let mut headers = Vec::new();
        let mut headers_error = None;
        let mut iter = dwarf.units();
        loop {
            match iter.next() {
                Ok(Some(header)) => headers.push(header),
                Ok(None) => break,
                Err(e) => {
                    headers_error = Some(e);
                    break;
                }
            }
        }
        let symbols = SymbolIndex::new_in(spill_dir, object.symbols())?;
        Ok(Some(DwarfFile {
            arch: object.arch(),
            kind: object.kind(),
            address_offset,
            dwarf,
            headers,
            headers_error,
            symbols,
            memo: Mutex::default(),
            _owned_sections: owned_sections,
            _object: handle.clone(),
        }))
    }

    /// Unit `index`, parsed once for all readers while it stays in the memo.
    pub fn unit(&self, index: usize) -> Option<Arc<Unit>> {
        let memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(unit) = memo.get(&index) {
            return Some(unit.clone());
        }
        drop(memo);
        let unit = Arc::new(self.dwarf.unit(*self.headers.get(index)?).ok()?);
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.len() >= MAX_MEMO_UNITS {
            memo.clear();
        }
        memo.insert(index, unit.clone());
        Some(unit)
    }

    /// The unit holding a `.debug_info` offset, and the offset within it.
    pub fn find_unit_offset(
        &self,
        offset: gimli::DebugInfoOffset<usize>,
    ) -> Option<(Arc<Unit>, gimli::UnitOffset<usize>)> {
        let section_offset = gimli::UnitSectionOffset(offset.0);
        let index = match self
            .headers
            .binary_search_by_key(&section_offset, |h| h.offset())
        {
            Ok(index) => index,
            Err(0) => return None,
            Err(next) => next - 1,
        };
        let unit = self.unit(index)?;
        let unit_offset = section_offset.to_unit_offset(&unit)?;
        Some((unit, unit_offset))
    }
}
