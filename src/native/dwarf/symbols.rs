//! The symbol table sorted by address, in a spill file: what names DWARF functions
//! (symbolic's `SymbolMap`, which its debug session builds on the heap) and which
//! symbols a lazy lookup feeds its mini SymCache. A large file has a million symbols or
//! more, 50 MiB on the heap as symbolic holds them; here each is a record of offsets
//! into the mapped file, and the records are file-backed.

use std::borrow::Cow;
use std::io;
use std::path::Path;

use symbolic::debuginfo::Symbol;

use crate::native::spill::{FileLog, FileVec, Plain};

/// One symbol: its name as a pointer into the object's mapping (names of ELF, Mach-O
/// and Wasm symbols are borrowed from the file), or, with [`OWNED`] set in `name_len`,
/// an index into the index's few owned names.
#[derive(Clone, Copy)]
#[repr(C)]
struct Record {
    address: u64,
    size: u64,
    /// Position in the symbol table: ties at one address keep the table's order.
    seq: u64,
    name_ptr: u64,
    name_len: u64,
}

// SAFETY: `repr(C)`, five `u64`s.
unsafe impl Plain for Record {}

const NO_NAME: u64 = u64::MAX;
const OWNED: u64 = 1 << 63;

pub struct SymbolIndex {
    records: FileVec<Record>,
    owned: Vec<String>,
}

impl SymbolIndex {
    /// `symbols` in their table's order, sorted stably by address. The names must
    /// outlive the index: the caller keeps the object they borrow from.
    pub fn new_in<'d>(dir: &Path, symbols: impl Iterator<Item = Symbol<'d>>) -> io::Result<Self> {
        // Appended whole, then mapped for the sort: not stored page by page through
        // the mapping (see `FileLog`).
        let mut records = FileLog::new_in(dir)?;
        let mut owned = Vec::new();
        for (seq, symbol) in symbols.enumerate() {
            let (name_ptr, name_len) = match symbol.name {
                None => (0, NO_NAME),
                Some(Cow::Borrowed(name)) => (name.as_ptr() as u64, name.len() as u64),
                Some(Cow::Owned(name)) => {
                    owned.push(name);
                    (owned.len() as u64 - 1, OWNED)
                }
            };
            records.push(Record {
                address: symbol.address,
                size: symbol.size,
                seq: seq as u64,
                name_ptr,
                name_len,
            })?;
        }
        let mut index = SymbolIndex {
            records: records.into_vec()?,
            owned,
        };
        // Unstable on (address, position) is stable on address, without a stable sort's
        // buffer of half the records on the heap.
        index
            .records
            .as_mut_slice()
            .sort_unstable_by_key(|r| (r.address, r.seq));
        Ok(index)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn address(&self, index: usize) -> u64 {
        self.records.get(index).address
    }

    /// The symbol at `index` of the sorted order.
    pub fn get(&self, index: usize) -> Symbol<'static> {
        let record = self.records.get(index);
        let name = match record.name_len {
            NO_NAME => None,
            OWNED => Some(Cow::Owned(self.owned[record.name_ptr as usize].clone())),
            len => {
                // SAFETY: `new_in` took the pointer and length from a `&str` borrowed
                // from the object, which its caller keeps alive as long as this index
                // (see `DwarfFile`, which owns both).
                let bytes = unsafe {
                    std::slice::from_raw_parts(record.name_ptr as *const u8, len as usize)
                };
                Some(Cow::Borrowed(unsafe {
                    std::str::from_utf8_unchecked(bytes)
                }))
            }
        };
        Symbol {
            name,
            address: record.address,
            size: record.size,
        }
    }

    /// How many symbols start below `address` (where it would be inserted).
    pub fn partition_below(&self, address: u64) -> usize {
        self.records
            .as_slice()
            .partition_point(|r| r.address < address)
    }

    /// How many symbols start at or below `address`.
    pub fn partition_at_or_below(&self, address: u64) -> usize {
        self.records
            .as_slice()
            .partition_point(|r| r.address <= address)
    }

    /// The first symbol at exactly `address`: symbolic's `SymbolMap::lookup_exact`,
    /// whose map keeps the first of the table's symbols at an address.
    pub fn exact(&self, address: u64) -> Option<Symbol<'static>> {
        let at = self.partition_below(address);
        (at < self.len() && self.address(at) == address).then(|| self.get(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(name: &'static str, address: u64) -> Symbol<'static> {
        Symbol {
            name: Some(Cow::Borrowed(name)),
            address,
            size: 4,
        }
    }

    #[test]
    fn sorted_by_address_keeping_the_tables_order_at_one_address() {
        let dir = tempfile::tempdir().unwrap();
        let owned = Symbol {
            name: Some(Cow::Owned("owned".to_owned())),
            address: 0x10,
            size: 0,
        };
        let unnamed = Symbol {
            name: None,
            address: 0x5,
            size: 0,
        };
        let table = vec![
            symbol("c", 0x30),
            symbol("b2", 0x20),
            owned,
            symbol("b1", 0x20),
            unnamed,
            symbol("b3", 0x20),
        ];
        let index = SymbolIndex::new_in(dir.path(), table.into_iter()).unwrap();
        let names: Vec<Option<String>> = (0..index.len())
            .map(|i| index.get(i).name.map(|n| n.into_owned()))
            .collect();
        let expected = [
            None,
            Some("owned"),
            Some("b2"),
            Some("b1"),
            Some("b3"),
            Some("c"),
        ];
        assert_eq!(
            names,
            expected.map(|n| n.map(str::to_owned)).to_vec(),
            "ties in table order"
        );
        // symbolic's `SymbolMap` keeps the first of the table's symbols at an address.
        assert_eq!(index.exact(0x20).unwrap().name.unwrap(), "b2");
        assert!(index.exact(0x21).is_none());
        assert_eq!(index.partition_below(0x20), 2);
        assert_eq!(index.partition_at_or_below(0x20), 5);
    }
}
