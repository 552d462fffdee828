//! What a lazy symbol reader answers, and the answer it is held to: the inline chain a
//! SymCache built from the same file gives for the address (`differential.rs` checks
//! that address by address for every fixture binary).

use std::sync::Arc;

use symbolic::common::{Arch, Language, Name, NameMangling};
use symbolic::symcache::SymCache;

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

/// The inline chain a SymCache gives for `addr`, as `LazyLocation`s: what lazy readers
/// answer with (the DWARF and PDB readers look up their small SymCaches with it) and
/// what they are compared with.
pub fn symcache_answer(symcache: &SymCache<'_>, addr: u64) -> Vec<LazyLocation> {
    symcache
        .lookup(addr)
        .map(|location| {
            let function = location.function();
            LazyLocation {
                name: function.name().to_owned(),
                language: function.language(),
                entry_pc: match function.entry_pc() {
                    u32::MAX => None,
                    pc => Some(u64::from(pc)),
                },
                abs_path: location.file().map(|f| f.full_path()).unwrap_or_default(),
                line: location.line(),
            }
        })
        .collect()
}

/// A debug file that answers lookups without being converted first.
pub trait LazySymbolizer: Send + Sync {
    fn arch(&self) -> Arch;

    /// The inline chain at `relative_addr`, innermost first (the order of
    /// `SymCache::lookup`); empty when nothing covers the address.
    fn lookup(&self, relative_addr: u64) -> Vec<LazyLocation>;
}

pub type OwnedLazySymbolizer = Arc<dyn LazySymbolizer>;
