//! Lazy readers: answer a few addresses straight from a debug file, parsing only the
//! parts of its debug info those addresses need, while the file's SymCache is built in
//! the background. What a reader returns for an address is what the SymCache built from
//! the same file returns (`tests` in `differential.rs` holds them to that); formats
//! without a lazy reader wait for the SymCache.

use std::sync::Arc;

use symbolic::common::{Arch, Language, Name, NameMangling};
use symbolic::debuginfo::FileFormat;

use crate::lookup::ObjectHandle;

#[cfg(test)]
mod differential;
mod dwarf;
#[cfg(test)]
mod fixtures;

/// One entry of an address's inline chain, as a SymCache `SourceLocation` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LazyLocation {
    /// The function's name as the SymCache stores it (mangled when the debug info has a
    /// linkage name; Windows C names undecorated).
    pub name: String,
    pub language: Language,
    /// The function's entry address relative to the image; `None` for inlined
    /// functions, as in a SymCache (whose `entry_pc` is `u32::MAX` for them).
    pub entry_pc: Option<u64>,
    /// `File::full_path()` of the SymCache: comp dir, directory and name joined and
    /// cleaned; empty when the location has no file (a symbol-table entry).
    pub abs_path: String,
    /// 0 when unknown.
    pub line: u32,
}

impl LazyLocation {
    pub fn name_for_demangling(&self) -> Name<'_> {
        Name::new(self.name.as_str(), NameMangling::Unknown, self.language)
    }
}

/// A debug file that answers lookups without being converted first.
pub trait LazySymbolizer: Send + Sync {
    fn arch(&self) -> Arch;

    /// The inline chain at `relative_addr`, innermost first (the order of
    /// `SymCache::lookup`); empty when nothing covers the address.
    fn lookup(&self, relative_addr: u64) -> Vec<LazyLocation>;
}

pub type OwnedLazySymbolizer = Arc<dyn LazySymbolizer>;

/// A lazy reader for `object`, or `None` when its format has none (the caller waits
/// for the SymCache then).
pub fn open(object: &Arc<ObjectHandle>) -> Option<OwnedLazySymbolizer> {
    match object.object().file_format() {
        FileFormat::Elf | FileFormat::MachO | FileFormat::Wasm => dwarf::open(object),
        _ => None,
    }
}
