//! Containers whose contents live in a file, not on the heap: what lets the SymCache
//! writer hold tables as large as the debug file it reads, and the DWARF walk and the
//! cold path's readers hold a large file's symbols, unit ranges and seen function
//! ranges, in a fixed amount of anonymous memory. Each is a shared, writable mapping of
//! an unlinked temporary file, so the kernel can write its pages back and drop them
//! under memory pressure (they count as file-backed, like the page cache) instead of
//! the process growing with the input.

use std::fs::File;
use std::hash::{BuildHasher, Hash};
use std::io;
use std::marker::PhantomData;
use std::path::Path;

use memmap2::MmapMut;

/// A type any bit pattern of whose size is a valid value, with no padding: what a
/// mapping of a file can be read as.
///
/// # Safety
/// Implement only for `#[repr(C)]` types of integer fields without padding.
pub unsafe trait Plain: Copy + 'static {}

unsafe impl Plain for u8 {}
unsafe impl Plain for u64 {}

/// A growable array in a temporary file.
pub struct FileVec<T: Plain> {
    file: File,
    map: Option<MmapMut>,
    len: usize,
    capacity: usize,
    _items: PhantomData<T>,
}

impl<T: Plain> FileVec<T> {
    pub fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(FileVec {
            file: tempfile::tempfile_in(dir)?,
            map: None,
            len: 0,
            capacity: 0,
            _items: PhantomData,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn as_slice(&self) -> &[T] {
        match &self.map {
            // SAFETY: the mapping is page-aligned (so aligned for `T`), holds `capacity`
            // items, and `T: Plain` reads any bytes, zeroes of a grown file included.
            Some(map) => unsafe { std::slice::from_raw_parts(map.as_ptr().cast(), self.len) },
            None => &[],
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match &mut self.map {
            // SAFETY: as in `as_slice`; the mapping is ours alone.
            Some(map) => unsafe {
                std::slice::from_raw_parts_mut(map.as_mut_ptr().cast(), self.len)
            },
            None => &mut [],
        }
    }

    pub fn get(&self, index: usize) -> T {
        self.as_slice()[index]
    }

    pub fn set(&mut self, index: usize, value: T) {
        self.as_mut_slice()[index] = value;
    }

    pub fn push(&mut self, value: T) -> io::Result<usize> {
        self.reserve(1)?;
        let index = self.len;
        self.len += 1;
        self.set(index, value);
        Ok(index)
    }

    /// Adds `count` zeroed items (a grown file reads as zeroes).
    pub fn extend_zeroed(&mut self, count: usize) -> io::Result<()> {
        self.reserve(count)?;
        self.len += count;
        Ok(())
    }

    pub fn extend_from_slice(&mut self, values: &[T]) -> io::Result<()> {
        self.reserve(values.len())?;
        let start = self.len;
        self.len += values.len();
        self.as_mut_slice()[start..].copy_from_slice(values);
        Ok(())
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn reserve(&mut self, additional: usize) -> io::Result<()> {
        let needed = self
            .len
            .checked_add(additional)
            .ok_or_else(|| io::Error::other("spill array too large"))?;
        if needed <= self.capacity {
            return Ok(());
        }
        let item = size_of::<T>().max(1);
        // Doubling keeps remapping rare; the first map is one 64 KiB step.
        let capacity = needed.max(self.capacity * 2).max((64 << 10) / item);
        let bytes = capacity
            .checked_mul(item)
            .ok_or_else(|| io::Error::other("spill array too large"))?;
        // The old mapping goes first: its dirty pages are the file's, not lost.
        self.map = None;
        allocate(&self.file, (self.capacity * item) as u64, bytes as u64)?;
        // SAFETY: the file is an unlinked temporary only this value maps or writes.
        self.map = Some(unsafe { MmapMut::map_mut(&self.file)? });
        self.capacity = capacity;
        Ok(())
    }
}

/// An array in a temporary file that is only appended to until it is read: written
/// through a small heap buffer with `write`, not stored through a mapping. A mapped
/// file's new pages are zeroed by the kernel when first touched and then overwritten,
/// which took an eighth of a SymCache conversion's time for its range log; pages that
/// `write` fills whole are not zeroed first. A full disk is an error of `push`, never a
/// fault. [`FileLog::into_vec`] maps what was written for reading.
pub struct FileLog<T: Plain> {
    file: File,
    buffer: Vec<T>,
    len: usize,
}

/// Items buffered before a `write`: 64 KiB of ranges.
const LOG_BUFFER_BYTES: usize = 64 << 10;

impl<T: Plain> FileLog<T> {
    pub fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(FileLog {
            file: tempfile::tempfile_in(dir)?,
            buffer: Vec::with_capacity(LOG_BUFFER_BYTES / size_of::<T>().max(1)),
            len: 0,
        })
    }

    pub fn push(&mut self, value: T) -> io::Result<()> {
        if self.buffer.len() == self.buffer.capacity() {
            self.flush()?;
        }
        self.buffer.push(value);
        self.len += 1;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        use std::io::Write;
        // SAFETY: `T: Plain` has no padding, so its items are initialized bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                self.buffer.as_ptr().cast::<u8>(),
                self.buffer.len() * size_of::<T>(),
            )
        };
        self.file.write_all(bytes)?;
        self.buffer.clear();
        Ok(())
    }

    /// What was pushed, mapped as a [`FileVec`] (which may grow on from there).
    pub fn into_vec(mut self) -> io::Result<FileVec<T>> {
        self.flush()?;
        let mut vec = FileVec {
            file: self.file,
            map: None,
            len: self.len,
            capacity: self.len,
            _items: PhantomData,
        };
        if vec.len > 0 {
            // SAFETY: the file is an unlinked temporary only this value maps or writes,
            // written whole (no holes) by `flush`.
            vec.map = Some(unsafe { MmapMut::map_mut(&vec.file)? });
        }
        Ok(vec)
    }
}

/// Extends `file` to `to` bytes with its blocks allocated, not as a hole: a store
/// through a shared mapping into a hole that the disk has no room for is a SIGBUS that
/// ends the process, where a full disk must only fail this conversion (`ENOSPC` here).
fn allocate(file: &File, from: u64, to: u64) -> io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    match fallocate(file, FallocateFlags::empty(), from, to - from) {
        Ok(()) => Ok(()),
        // A file system without fallocate: the zeros written take the blocks.
        Err(rustix::io::Errno::OPNOTSUPP) => {
            use std::os::unix::fs::FileExt;
            let zeros = vec![0u8; 1 << 20];
            let mut at = from;
            while at < to {
                let n = (to - at).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Slots of an open-addressing table: 0 is empty, else the top 32 bits are the hash's
/// and the low 32 bits are one more than the entry's index (or offset).
struct Slots {
    slots: FileVec<u64>,
    used: usize,
}

impl Slots {
    fn new_in(dir: &Path) -> io::Result<Self> {
        let mut slots = FileVec::new_in(dir)?;
        slots.extend_zeroed(1 << 12)?;
        Ok(Slots { slots, used: 0 })
    }

    fn tag(hash: u64) -> u64 {
        hash & 0xffff_ffff_0000_0000
    }

    /// The slot `hash` probes to whose entry `matches`, or the empty slot to fill.
    fn find(&self, hash: u64, mut matches: impl FnMut(u32) -> bool) -> (usize, Option<u32>) {
        let slots = self.slots.as_slice();
        let mask = slots.len() - 1;
        let tag = Self::tag(hash);
        let mut at = (hash as usize) & mask;
        loop {
            let slot = slots[at];
            if slot == 0 {
                return (at, None);
            }
            if Self::tag(slot) == tag {
                let entry = (slot as u32).wrapping_sub(1);
                if matches(entry) {
                    return (at, Some(entry));
                }
            }
            at = (at + 1) & mask;
        }
    }

    /// Appends `record` to `records` as the entry of the empty slot `at` (as `find`
    /// gave it), `record_hash` giving each record's hash when the table grows.
    fn append<T: Plain>(
        &mut self,
        records: &mut FileVec<T>,
        at: usize,
        hash: u64,
        record: T,
        dir: &Path,
        record_hash: impl Fn(T) -> u64,
    ) -> io::Result<u32> {
        let index = u32::try_from(records.len())
            .ok()
            .filter(|&i| i < u32::MAX - 1)
            .ok_or_else(|| io::Error::other("more than 4 billion records in a spill table"))?;
        records.push(record)?;
        let records = &*records;
        self.fill(at, hash, index, dir, |i| {
            record_hash(records.get(i as usize))
        })?;
        Ok(index)
    }

    /// Fills the empty slot `at`, growing (and rehashing through `rehash`, which gives
    /// an entry's hash) past half full.
    fn fill(
        &mut self,
        at: usize,
        hash: u64,
        entry: u32,
        dir: &Path,
        rehash: impl Fn(u32) -> u64,
    ) -> io::Result<()> {
        self.slots.set(at, Self::tag(hash) | (u64::from(entry) + 1));
        self.used += 1;
        if self.used * 2 > self.slots.len() {
            let mut grown = FileVec::new_in(dir)?;
            grown.extend_zeroed(self.slots.len() * 2)?;
            let mask = grown.len() - 1;
            for &slot in self.slots.as_slice() {
                if slot == 0 {
                    continue;
                }
                let hash = rehash((slot as u32).wrapping_sub(1));
                let mut at = (hash as usize) & mask;
                while grown.get(at) != 0 {
                    at = (at + 1) & mask;
                }
                grown.set(at, slot);
            }
            self.slots = grown;
        }
        Ok(())
    }
}

/// An insertion-ordered set of fixed-size records (`indexmap::IndexSet`'s
/// `insert_full`), the records and the table in files.
pub struct FileIndexSet<T: Plain + Eq + Hash> {
    records: FileVec<T>,
    slots: Slots,
    hasher: foldhash::fast::RandomState,
    dir: std::path::PathBuf,
}

impl<T: Plain + Eq + Hash> FileIndexSet<T> {
    pub fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(FileIndexSet {
            records: FileVec::new_in(dir)?,
            slots: Slots::new_in(dir)?,
            hasher: foldhash::fast::RandomState::default(),
            dir: dir.to_owned(),
        })
    }

    /// The index of `value`, inserted at the end if it is new.
    pub fn insert_full(&mut self, value: T) -> io::Result<u32> {
        let hash = self.hasher.hash_one(value);
        let records = &self.records;
        let (at, found) = self.slots.find(hash, |i| records.get(i as usize) == value);
        if let Some(index) = found {
            return Ok(index);
        }
        let hasher = &self.hasher;
        self.slots
            .append(&mut self.records, at, hash, value, &self.dir, |v| {
                hasher.hash_one(v)
            })
    }

    /// The index of `value`, if it is in the set.
    pub fn get_index(&self, value: T) -> Option<u32> {
        let hash = self.hasher.hash_one(value);
        let records = &self.records;
        self.slots
            .find(hash, |i| records.get(i as usize) == value)
            .1
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn as_slice(&self) -> &[T] {
        self.records.as_slice()
    }
}

/// A map from `u64` keys to text in a mapped file (a pointer and a length): a
/// `BTreeMap<u64, &str>` whose inserts overwrite, with its entries and table in files.
pub struct FileTextMap {
    records: FileVec<TextEntry>,
    slots: Slots,
    hasher: foldhash::fast::RandomState,
    dir: std::path::PathBuf,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct TextEntry {
    key: u64,
    ptr: u64,
    len: u64,
}

// SAFETY: `repr(C)`, three `u64`s.
unsafe impl Plain for TextEntry {}

impl FileTextMap {
    pub fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(FileTextMap {
            records: FileVec::new_in(dir)?,
            slots: Slots::new_in(dir)?,
            hasher: foldhash::fast::RandomState::default(),
            dir: dir.to_owned(),
        })
    }

    /// Maps `key` to `text`, which must outlive the map (its bytes are not copied).
    pub fn insert(&mut self, key: u64, text: &str) -> io::Result<()> {
        let entry = TextEntry {
            key,
            ptr: text.as_ptr() as u64,
            len: text.len() as u64,
        };
        let hash = self.hasher.hash_one(key);
        let records = &self.records;
        let (at, found) = self
            .slots
            .find(hash, |i| records.get(i as usize).key == key);
        if let Some(index) = found {
            self.records.set(index as usize, entry);
            return Ok(());
        }
        let hasher = &self.hasher;
        self.slots
            .append(&mut self.records, at, hash, entry, &self.dir, |e| {
                hasher.hash_one(e.key)
            })
            .map(drop)
    }

    /// The text last inserted for `key`.
    ///
    /// # Safety
    /// The text given to `insert` must still be alive, and `'t` no longer than it.
    pub unsafe fn get<'t>(&self, key: u64) -> Option<&'t str> {
        let hash = self.hasher.hash_one(key);
        let records = &self.records;
        let index = self
            .slots
            .find(hash, |i| records.get(i as usize).key == key)
            .1?;
        let entry = self.records.get(index as usize);
        // SAFETY: `insert` took the pointer and length from a `&str` that the caller
        // keeps alive.
        unsafe {
            let bytes = std::slice::from_raw_parts(entry.ptr as *const u8, entry.len as usize);
            Some(std::str::from_utf8_unchecked(bytes))
        }
    }
}

/// symbolic writes the string table's size and every offset into it as a `u32`, cut
/// when the names and paths of a file add up to more than 4 GiB: its cache would read
/// back with wrong names. Ours refuses the file instead.
pub fn too_many_names() -> io::Error {
    io::Error::other(
        "the SymCache's names and paths take more than the 4 GiB its string offsets address",
    )
}

/// watto's `StringTable` (what symbolic's writer deduplicates strings with): each
/// distinct string once, as a LEB128 length and its bytes, named by its offset.
pub struct FileStringTable {
    bytes: FileVec<u8>,
    slots: Slots,
    hasher: foldhash::fast::RandomState,
    dir: std::path::PathBuf,
}

impl FileStringTable {
    pub fn new_in(dir: &Path) -> io::Result<Self> {
        Ok(FileStringTable {
            bytes: FileVec::new_in(dir)?,
            slots: Slots::new_in(dir)?,
            hasher: foldhash::fast::RandomState::default(),
            dir: dir.to_owned(),
        })
    }

    fn read(bytes: &[u8], offset: u32) -> &[u8] {
        let mut rest = &bytes[offset as usize..];
        let len = leb128::read::unsigned(&mut rest).expect("written by insert") as usize;
        &rest[..len]
    }

    /// The offset of `s`, appended if it is new. Offsets are `u32` in the format: a
    /// table that would pass 4 GiB is an error, not a wrapped offset.
    pub fn insert(&mut self, s: &str) -> io::Result<u32> {
        let hash = self.hasher.hash_one(s.as_bytes());
        let bytes = self.bytes.as_slice();
        let (at, found) = self
            .slots
            .find(hash, |offset| Self::read(bytes, offset) == s.as_bytes());
        if let Some(offset) = found {
            return Ok(offset);
        }
        let offset = u32::try_from(self.bytes.len())
            .ok()
            .filter(|&o| (o as u64) + s.len() as u64 + 10 < u64::from(u32::MAX))
            .ok_or_else(too_many_names)?;
        let mut prefix = Vec::with_capacity(10);
        leb128::write::unsigned(&mut prefix, s.len() as u64)?;
        self.bytes.extend_from_slice(&prefix)?;
        self.bytes.extend_from_slice(s.as_bytes())?;
        let (bytes, hasher) = (&self.bytes, &self.hasher);
        self.slots.fill(at, hash, offset, &self.dir, |o| {
            hasher.hash_one(Self::read(bytes.as_slice(), o))
        })?;
        Ok(offset)
    }

    /// `insert` for a string that may be absent, which the format writes as `u32::MAX`.
    pub fn insert_optional(&mut self, s: Option<&str>) -> io::Result<u32> {
        s.map_or(Ok(u32::MAX), |s| self.insert(s))
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `BTreeMap<u64, &str>`'s answers, inserts overwriting, across table growth.
    #[test]
    fn a_text_map_answers_as_a_btreemap() {
        let dir = tempfile::tempdir().unwrap();
        let texts: Vec<String> = (0..20_000).map(|i| format!("name {i}")).collect();
        let mut ours = FileTextMap::new_in(dir.path()).unwrap();
        let mut theirs = std::collections::BTreeMap::new();
        for (i, text) in texts.iter().enumerate() {
            // Ids repeat (a later record of an id wins) and are far apart.
            let key = ((i % 15_000) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            ours.insert(key, text).unwrap();
            theirs.insert(key, text.as_str());
        }
        for (i, _) in texts.iter().enumerate() {
            let key = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            // SAFETY: `texts` outlives the lookups.
            assert_eq!(unsafe { ours.get(key) }, theirs.get(&key).copied(), "{i}");
        }
    }

    #[test]
    fn index_set_keeps_first_insertion_order_across_growth() {
        let dir = tempfile::tempdir().unwrap();
        let mut set = FileIndexSet::<u64>::new_in(dir.path()).unwrap();
        for round in 0..2 {
            for i in 0..100_000u64 {
                let value = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                assert_eq!(set.insert_full(value).unwrap(), i as u32, "round {round}");
            }
        }
        assert_eq!(set.len(), 100_000);
    }

    #[test]
    fn string_table_matches_wattos_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = FileStringTable::new_in(dir.path()).unwrap();
        let mut theirs = Vec::new();
        let mut seen = std::collections::HashMap::new();
        for i in 0..50_000u32 {
            let s = format!("name_{}", i % 20_000).repeat((i % 7) as usize + 1);
            let offset = ours.insert(&s).unwrap();
            let expected = *seen.entry(s.clone()).or_insert_with(|| {
                let at = theirs.len() as u32;
                leb128::write::unsigned(&mut theirs, s.len() as u64).unwrap();
                theirs.extend_from_slice(s.as_bytes());
                at
            });
            assert_eq!(offset, expected);
        }
        assert_eq!(ours.as_bytes(), &theirs[..]);
    }

    /// On a disk with no room left, growing fails with an error instead of mapping a
    /// hole whose first store would kill the process (tmpfs of 1 MiB).
    #[test]
    fn a_full_disk_fails_the_growth_not_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("tiny");
        std::fs::create_dir(&mount).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (not root)");
            return;
        }
        let result = (|| {
            let mut vec = FileVec::<u64>::new_in(&mount)?;
            for i in 0..(4u64 << 20) {
                vec.push(i)?;
            }
            Ok::<_, io::Error>(())
        })();
        let _ = std::process::Command::new("umount").arg(&mount).status();
        let err = result.expect_err("32 MiB fit in a 1 MiB tmpfs");
        assert_eq!(err.kind(), io::ErrorKind::StorageFull, "{err}");
    }

    #[test]
    fn a_grown_array_keeps_what_it_held() {
        let dir = tempfile::tempdir().unwrap();
        let mut vec = FileVec::<u64>::new_in(dir.path()).unwrap();
        for i in 0..1_000_000u64 {
            vec.push(i * 3).unwrap();
        }
        assert!(
            vec.as_slice()
                .iter()
                .enumerate()
                .all(|(i, &v)| v == i as u64 * 3)
        );
    }
}
