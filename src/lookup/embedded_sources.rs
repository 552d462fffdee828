//! Sources embedded in DWARF 5 line tables (LLVM's `DW_LNCT_LLVM_source`, written by
//! `clang -gembed-source`). symbolic's debug sessions do not surface them, so they are
//! read here with gimli, the DWARF parser symbolic itself uses.

use std::borrow::Cow;
use std::collections::HashMap;

use gimli::{EndianSlice, RunTimeEndian};
use symbolic::common::join_path;
use symbolic::debuginfo::Object;
use symbolic::debuginfo::dwarf::Dwarf;

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

fn dwarf_of<'o>(object: &'o Object<'_>) -> Option<&'o dyn Dwarf<'o>> {
    Some(match object {
        Object::Elf(o) => o as &dyn Dwarf<'o>,
        Object::MachO(o) => o,
        Object::Wasm(o) => o,
        _ => return None,
    })
}

/// Calls `found(path, source)` for every embedded source until it returns `false`.
fn each_source(object: &Object<'_>, mut found: impl FnMut(String, &[u8]) -> bool) {
    let Some(dwarf) = dwarf_of(object) else {
        return;
    };
    // Without a line table there is nothing to read; skip the section loading.
    if !dwarf.has_section("debug_line") {
        return;
    }
    // symbolic's `Endian` is gimli's `RunTimeEndian`.
    let endian: RunTimeEndian = dwarf.endianity();
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(dwarf
            .section(&id.name()[1..])
            .map(|s| s.data)
            .unwrap_or(Cow::Borrowed(&[])))
    });
    let Ok(sections) = sections else { return };
    let dwarf = sections.borrow(|s| Reader::new(s, endian));
    // A damaged unit or line table just has no sources: this is best effort on top of
    // symbolication, which reports damage on its own.
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let Some(program) = &unit.line_program else {
            continue;
        };
        let header = program.header();
        let comp_dir = unit
            .comp_dir
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        for file in header.file_names() {
            let Some(source) = file.source() else {
                continue;
            };
            let Ok(source) = dwarf.attr_string(&unit, source) else {
                continue;
            };
            if source.is_empty() {
                continue;
            }
            let Ok(name) = dwarf.attr_string(&unit, file.path_name()) else {
                continue;
            };
            let dir = file
                .directory(header)
                .and_then(|d| dwarf.attr_string(&unit, d).ok())
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default();
            let path = join_path(&join_path(&comp_dir, &dir), &name.to_string_lossy());
            if !found(path, source.slice()) {
                return;
            }
        }
    }
}

/// Whether the object carries any embedded source (cheap: stops at the first).
pub fn has_embedded_sources(object: &Object<'_>) -> bool {
    let mut any = false;
    each_source(object, |_, _| {
        any = true;
        false
    });
    any
}

/// Every embedded source by its absolute path, as frames report `abs_path`.
pub fn embedded_sources(object: &Object<'_>) -> HashMap<String, String> {
    let mut sources = HashMap::new();
    each_source(object, |path, text| {
        sources
            .entry(path)
            .or_insert_with(|| String::from_utf8_lossy(text).into_owned());
        true
    });
    sources
}
