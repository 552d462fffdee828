//! The lazy reader for Breakpad `.sym` text.
//!
//! Opening makes one pass over the symbol part of the text (everything before the first
//! `STACK` record, which is all a SymCache conversion reads): it checks every line
//! against the grammar below and keeps, per FUNC block, its start, the highest address
//! any of its records reaches, and the byte span of its lines; per PUBLIC record its
//! address and span; the spans of FILE and INLINE_ORIGIN records by id; and the MODULE
//! line. A lookup copies the records that can decide the address into a small `.sym`
//! text (with only the FILE and INLINE_ORIGIN records they name), reads it with
//! symbolic's `BreakpadObject` and converts it with a real `SymCacheConverter`: names,
//! lines, inline chains and the way ranges end are the SymCache's by construction.
//!
//! Which records decide an address (symbolic-symcache 13.9's `writer.rs`): the answer at
//! A is the entry at the greatest key <= A. Functions are processed in file order, each
//! writing keys only in `[start, reach]` (lines and inlinees below the FUNC start are
//! dropped by symbolic's `FunctionBuilder`; line ranges overwrite, entry points and end
//! markers only fill gaps), then PUBLIC records in file order, each writing only its own
//! address if that key is free or an end marker. Every record processed writes or finds
//! a key at its start, so the greatest FUNC or PUBLIC start L <= A is a key of the whole
//! conversion and of any conversion that includes its record. The records whose keys can
//! lie in [L, A] are those starting at or below A and reaching L or beyond; keeping
//! those, in file order, repeats every write at every key in [L, A] in the same order,
//! so both conversions end with the same entry at the greatest key <= A. A block that
//! reaches exactly L is left out too: all it can write at L is an end marker, which
//! the record starting at L replaces or finds the key taken by, in either order (the
//! common case of a function ending where the next starts). Of several PUBLIC records
//! at L only the first can write. The sentinel `serialize` adds at the highest function
//! end never lands: that end already holds a key.
//!
//! The reader reads a strict subset of what symbolic accepts, the text dump_syms
//! writes: MODULE first; INFO and FILE records, then INLINE_ORIGIN records, before the
//! first FUNC; FUNC blocks of line and INLINE records; PUBLIC records anywhere after the
//! FILE records; single spaces between fields, `\n` line ends, valid UTF-8, addresses
//! below 4 GiB (a SymCache's keys are 32-bit). Anything else makes [`open`] answer
//! `None` and the request waits for the conversion, which keeps symbolic's verdict on
//! the file (symbolic silently drops some records this reader refuses, and fails on
//! others). So does a file that would make a lookup convert much more than a few
//! functions (overlapping FUNC records, one huge block), or one with no FUNC record,
//! whose conversion reads only PUBLIC records and is as quick as opening would be.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use memchr::{memchr, memchr_iter};
use symbolic::common::Arch;
use symbolic::debuginfo::Object;
use symbolic::debuginfo::breakpad::BreakpadObject;
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::reader::{LazyLocation, LazySymbolizer, OwnedLazySymbolizer, symcache_answer};
use crate::lookup::ObjectHandle;

/// Longest line read; longer ones (no real name is this long) refuse the file.
const MAX_LINE: usize = 64 * 1024;

/// Most text one lookup may convert: the FUNC blocks that can decide one address. Real
/// files need one or two blocks of a few KiB; past this the file is converted whole.
const MAX_LOOKUP_TEXT: u64 = 4 << 20;

/// Most FUNC blocks that can decide one address, for the same reason.
const MAX_OVERLAPPING: usize = 64;

/// Deepest INLINE record read. The converter recurses once per level, and a hostile
/// file nested deeper could exhaust a blocking thread's stack; real chains are a few
/// dozen deep.
const MAX_INLINE_DEPTH: u64 = 256;

/// Mini SymCaches kept between lookups, in bytes; past it the memo starts over. A
/// request's addresses in one module are mostly in different functions, so little is
/// lost, and the reader stays small beside the conversion running next to it.
const MEMO_MAX_BYTES: usize = 8 << 20;

/// Where a record's lines are in the text, final newline included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    offset: u32,
    len: u32,
}

impl Span {
    fn text(self, text: &[u8]) -> &[u8] {
        let start = self.offset as usize;
        text.get(start..start + self.len as usize)
            .unwrap_or_default()
    }
}

/// What opening learns from the text; every address is relative and below 4 GiB.
#[derive(Debug)]
struct Index {
    module: Span,
    /// FUNC blocks of non-zero size (the converter skips the others), sorted by start
    /// and then by place in the file. Struct of arrays: the searches touch only starts.
    starts: Box<[u32]>,
    /// The highest address the block's records name (its end, its lines' and inlinees'
    /// ends): no key it writes is above it. (Lines are cut at their function's or
    /// inlinee's end by symbolic, so theirs only make the bound looser.)
    reaches: Box<[u32]>,
    /// The highest reach of this block and every one before it in `starts`' order,
    /// which stops the walk back from an address.
    reach_so_far: Box<[u32]>,
    blocks: Box<[Span]>,
    /// The first PUBLIC record at each address, sorted by address.
    public_starts: Box<[u32]>,
    publics: Box<[Span]>,
    /// FILE and INLINE_ORIGIN records by id, the last of an id winning as in symbolic's
    /// maps.
    files: Box<[(u64, Span)]>,
    origins: Box<[(u64, Span)]>,
}

/// The records that decide one address: FUNC blocks (indices into `starts`, ascending)
/// and the PUBLIC record at the greatest start, if any.
type Deciding = (Vec<u32>, Option<u32>);

pub struct BreakpadReader {
    arch: Arch,
    index: Index,
    memo: Mutex<Memo>,
    /// The file the spans point into.
    handle: Arc<ObjectHandle>,
}

#[derive(Default)]
struct Memo {
    caches: HashMap<Deciding, Arc<Vec<u8>>>,
    bytes: usize,
}

/// A reader for `handle`'s Breakpad text, or `None` when the text is outside what it
/// reads (see the module doc) or has no FUNC record.
pub fn open(handle: &Arc<ObjectHandle>) -> Option<OwnedLazySymbolizer> {
    let Some(Object::Breakpad(object)) = handle.object() else {
        return None;
    };
    let index = Index::build(object.data());
    // The pass touched the whole symbol part, which lookups read a few pages of. A
    // conversion that finished before this open had already given its pages back, and
    // the handle outlives both in the in-memory cache.
    handle.release_pages();
    let index = index?;
    if index.starts.is_empty() {
        return None;
    }
    Some(Arc::new(BreakpadReader {
        arch: object.arch(),
        index,
        memo: Mutex::default(),
        handle: handle.clone(),
    }))
}

/// Which records may come next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Zone {
    /// MODULE, INFO, FILE: symbolic's file map is the FILE records of this prefix.
    Header,
    /// INLINE_ORIGIN and PUBLIC records before the first FUNC. Origins after it would
    /// name inlinees differently before and after them; dump_syms writes none there.
    Origins,
    /// FUNC blocks and PUBLIC records.
    Body,
}

/// The FUNC block being read.
struct Block {
    start: u64,
    size: u64,
    reach: u64,
    offset: usize,
}

/// An entry of the index's FUNC arrays before sorting.
struct Func {
    start: u32,
    reach: u32,
    span: Span,
}

impl Index {
    fn build(text: &[u8]) -> Option<Index> {
        if u32::try_from(text.len()).is_err() || !text.starts_with(b"MODULE ") {
            return None;
        }
        let mut zone = Zone::Header;
        let mut module = None;
        let mut funcs: Vec<Func> = Vec::new();
        let mut publics: Vec<(u32, Span)> = Vec::new();
        let mut files: Vec<(u64, Span)> = Vec::new();
        let mut origins: Vec<(u64, Span)> = Vec::new();
        let mut block: Option<Block> = None;
        let mut offset = 0usize;
        // Where the symbol part ends: the first STACK record, or the end of the text.
        let mut end = None;
        for newline in memchr_iter(b'\n', text) {
            let line = &text[offset..newline];
            let line_offset = offset;
            offset = newline + 1;
            // The prefixes symbolic tests, in its order: STACK, FUNC and PUBLIC end a
            // block before anything else is tried; nothing from the first STACK on is
            // read for symbols.
            if line.starts_with(b"STACK ") {
                end = Some(line_offset);
                break;
            }
            if line.len() > MAX_LINE {
                return None;
            }
            let span = Span {
                offset: line_offset as u32,
                len: (offset - line_offset) as u32,
            };
            if let Some(rest) = line.strip_prefix(b"FUNC ") {
                close(block.take(), line_offset, &mut funcs)?;
                let (start, size) = func_record(rest)?;
                block = Some(Block {
                    start,
                    size,
                    reach: start + size,
                    offset: line_offset,
                });
                zone = Zone::Body;
            } else if let Some(rest) = line.strip_prefix(b"PUBLIC ") {
                close(block.take(), line_offset, &mut funcs)?;
                publics.push((public_record(rest)?, span));
                if zone == Zone::Header {
                    zone = Zone::Origins;
                }
            } else if let Some(rest) = line.strip_prefix(b"INLINE ") {
                let current = block.as_mut()?;
                let record = inline_record(rest)?;
                current.reach = current.reach.max(record.reach);
            } else if let Some(rest) = line.strip_prefix(b"INLINE_ORIGIN ") {
                if zone == Zone::Body {
                    return None;
                }
                zone = Zone::Origins;
                origins.push((inline_origin_record(rest)?, span));
            } else if let Some(rest) = line.strip_prefix(b"FILE ") {
                if zone != Zone::Header {
                    return None;
                }
                files.push((file_record(rest)?, span));
            } else if line.starts_with(b"INFO ") {
                if zone != Zone::Header {
                    return None;
                }
            } else if line_offset == 0 {
                // The MODULE line, which the object was parsed from.
                module = Some(span);
            } else {
                let current = block.as_mut()?;
                let record = line_record(line)?;
                current.reach = current.reach.max(record.reach);
            }
        }
        let end = match end {
            Some(end) => end,
            // Without a final newline the last line would be read, unchecked here.
            None if offset == text.len() => offset,
            None => return None,
        };
        close(block.take(), end, &mut funcs)?;
        // Checked once here rather than per field: symbolic reads each line as UTF-8
        // (failing or dropping the record otherwise) and strips a `\r` before `\n`.
        let symbols = &text[..end];
        if memchr(b'\r', symbols).is_some() || std::str::from_utf8(symbols).is_err() {
            return None;
        }

        funcs.sort_by_key(|f| (f.start, f.span.offset));
        let mut reach_so_far = Vec::with_capacity(funcs.len());
        let mut highest = 0;
        for func in &funcs {
            highest = func.reach.max(highest);
            reach_so_far.push(highest);
        }
        check_overlap(&funcs, &reach_so_far)?;
        // Stable: of equal addresses the first in the file stays first.
        publics.sort_by_key(|(address, _)| *address);
        publics.dedup_by_key(|(address, _)| *address);
        Some(Index {
            module: module?,
            starts: funcs.iter().map(|f| f.start).collect(),
            reaches: funcs.iter().map(|f| f.reach).collect(),
            reach_so_far: reach_so_far.into_boxed_slice(),
            blocks: funcs.iter().map(|f| f.span).collect(),
            public_starts: publics.iter().map(|(address, _)| *address).collect(),
            publics: publics.iter().map(|(_, span)| *span).collect(),
            files: last_by_id(files),
            origins: last_by_id(origins),
        })
    }

    /// The records that decide `addr` (see the module doc); `None` when no record starts
    /// at or below it, where the SymCache has no key either.
    fn deciding(&self, addr: u32) -> Option<Deciding> {
        let funcs = self.starts.partition_point(|&start| start <= addr);
        let publics = self.public_starts.partition_point(|&start| start <= addr);
        let func_start = funcs.checked_sub(1).map(|i| self.starts[i]);
        let public_start = publics.checked_sub(1).map(|i| self.public_starts[i]);
        let floor = func_start.max(public_start)?;
        let mut blocks = Vec::new();
        for i in (0..funcs).rev() {
            if self.reach_so_far[i] <= floor {
                break;
            }
            if self.reaches[i] > floor {
                blocks.push(i as u32);
            }
        }
        blocks.reverse();
        let public = (public_start == Some(floor)).then(|| publics as u32 - 1);
        Some((blocks, public))
    }

    /// A `.sym` text of the MODULE line, the records in `deciding` in file order, and the
    /// FILE and INLINE_ORIGIN records their lines name.
    fn mini_text(&self, text: &[u8], (blocks, public): &Deciding) -> Vec<u8> {
        let mut spans: Vec<Span> = blocks.iter().map(|&i| self.blocks[i as usize]).collect();
        spans.sort_by_key(|span| span.offset);
        let mut file_ids = BTreeSet::new();
        let mut origin_ids = BTreeSet::new();
        for span in &spans {
            // The FUNC line first; the rest are line and INLINE records, checked at open.
            for line in span.text(text).split(|&b| b == b'\n').skip(1) {
                if let Some(rest) = line.strip_prefix(b"INLINE ") {
                    if let Some(record) = inline_record(rest) {
                        file_ids.insert(record.file);
                        origin_ids.insert(record.origin);
                    }
                } else if let Some(record) = line_record(line) {
                    file_ids.insert(record.file);
                }
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(self.module.text(text));
        for (ids, records) in [(&file_ids, &self.files), (&origin_ids, &self.origins)] {
            for id in ids {
                // An id without a record names nothing, in the whole file too.
                if let Ok(i) = records.binary_search_by_key(id, |(id, _)| *id) {
                    out.extend_from_slice(records[i].1.text(text));
                }
            }
        }
        for span in spans {
            out.extend_from_slice(span.text(text));
        }
        if let Some(i) = public {
            out.extend_from_slice(self.publics[*i as usize].text(text));
        }
        out
    }
}

/// Ends the block being read at `end` and indexes it if the converter would use it.
fn close(block: Option<Block>, end: usize, funcs: &mut Vec<Func>) -> Option<()> {
    let Some(block) = block else {
        return Some(());
    };
    if block.size == 0 {
        return Some(());
    }
    let len = end - block.offset;
    if len as u64 > MAX_LOOKUP_TEXT {
        return None;
    }
    funcs.push(Func {
        start: u32::try_from(block.start).ok()?,
        reach: u32::try_from(block.reach).ok()?,
        span: Span {
            offset: block.offset as u32,
            len: len as u32,
        },
    });
    Some(())
}

/// Refuses a file where one address could need more than a few blocks: the blocks a
/// lookup walks back over at an address are those from the first whose reach so far
/// passes the start below it.
fn check_overlap(funcs: &[Func], reach_so_far: &[u32]) -> Option<()> {
    let mut first = 0;
    let mut bytes = 0u64;
    for (i, func) in funcs.iter().enumerate() {
        bytes += u64::from(func.span.len);
        // A block's reach is past its start, so `first` never passes `i`.
        while reach_so_far[first] <= func.start {
            bytes -= u64::from(funcs[first].span.len);
            first += 1;
        }
        if i - first >= MAX_OVERLAPPING || bytes > MAX_LOOKUP_TEXT {
            return None;
        }
    }
    Some(())
}

/// Sorted by id, keeping the last record of each id in the file.
fn last_by_id(mut records: Vec<(u64, Span)>) -> Box<[(u64, Span)]> {
    records.reverse();
    records.sort_by_key(|(id, _)| *id);
    records.dedup_by_key(|(id, _)| *id);
    records.into_boxed_slice()
}

impl BreakpadReader {
    fn text(&self) -> &[u8] {
        match self.handle.object() {
            Some(Object::Breakpad(object)) => object.data(),
            _ => &[],
        }
    }

    fn mini_cache(&self, deciding: Deciding) -> Arc<Vec<u8>> {
        let memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hit) = memo.caches.get(&deciding) {
            return hit.clone();
        }
        drop(memo);
        let text = self.index.mini_text(self.text(), &deciding);
        let mut bytes = Vec::new();
        // The text holds records the whole file's conversion reads without error.
        if let Ok(object) = BreakpadObject::parse(&text) {
            let mut converter = SymCacheConverter::new();
            if converter.process_object(&object).is_ok() {
                // Writing to a Vec cannot fail.
                let _ = converter.serialize(&mut bytes);
            }
        }
        let bytes = Arc::new(bytes);
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.bytes.saturating_add(bytes.len()) > MEMO_MAX_BYTES {
            memo.caches.clear();
            memo.bytes = 0;
        }
        memo.bytes += bytes.len();
        memo.caches.insert(deciding, bytes.clone());
        bytes
    }
}

impl LazySymbolizer for BreakpadReader {
    fn arch(&self) -> Arch {
        self.arch
    }

    fn lookup(&self, relative_addr: u64) -> Vec<LazyLocation> {
        // A SymCache has no key above 4 GiB.
        let Ok(addr) = u32::try_from(relative_addr) else {
            return Vec::new();
        };
        let Some(deciding) = self.index.deciding(addr) else {
            return Vec::new();
        };
        let bytes = self.mini_cache(deciding);
        let Ok(symcache) = SymCache::parse(&bytes) else {
            return Vec::new();
        };
        symcache_answer(&symcache, relative_addr)
    }
}

// The record grammar: symbolic's nom parsers (`breakpad.rs`, `mod parsing`) narrowed to
// single spaces and no surrounding whitespace. Whatever is accepted here symbolic reads
// to the same numbers; names are never looked at, they are copied whole.

/// One or more hex digits, as symbolic's `num_hex!(u64)` (leading zeros allowed, a value
/// past u64 an error).
fn hex(input: &[u8]) -> Option<(u64, &[u8])> {
    number(input, 16)
}

/// One or more decimal digits, as `num_dec!(u64)`.
fn dec(input: &[u8]) -> Option<(u64, &[u8])> {
    number(input, 10)
}

fn number(input: &[u8], radix: u32) -> Option<(u64, &[u8])> {
    let digits = input
        .iter()
        .take_while(|&&b| (b as char).is_digit(radix))
        .count();
    if digits == 0 {
        return None;
    }
    let mut value = 0u64;
    for &b in &input[..digits] {
        let digit = (b as char).to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))?;
    }
    Some((value, &input[digits..]))
}

fn space(input: &[u8]) -> Option<&[u8]> {
    input.strip_prefix(b" ")
}

/// An address below 4 GiB and the end of `size` bytes from it, also below 4 GiB.
fn range(address: u64, size: u64) -> Option<u64> {
    let end = address.checked_add(size)?;
    (end <= u64::from(u32::MAX)).then_some(end)
}

/// The optional `m ` of FUNC and PUBLIC records.
fn multiple(input: &[u8]) -> &[u8] {
    input.strip_prefix(b"m ").unwrap_or(input)
}

/// After the last number of a FUNC or PUBLIC record: the end, or a space and a name.
fn name(input: &[u8]) -> Option<()> {
    (input.is_empty() || input.starts_with(b" ")).then_some(())
}

/// After `FUNC `: `(m )?<address> <size> <parameter size>( <name>)?`.
fn func_record(rest: &[u8]) -> Option<(u64, u64)> {
    let (address, rest) = hex(multiple(rest))?;
    let (size, rest) = hex(space(rest)?)?;
    let (_parameter_size, rest) = hex(space(rest)?)?;
    name(rest)?;
    range(address, size)?;
    Some((address, size))
}

/// After `PUBLIC `: `(m )?<address> <parameter size>( <name>)?`.
fn public_record(rest: &[u8]) -> Option<u32> {
    let (address, rest) = hex(multiple(rest))?;
    let (_parameter_size, rest) = hex(space(rest)?)?;
    name(rest)?;
    u32::try_from(address).ok()
}

/// After `FILE `: `<id>( <name>)?`.
fn file_record(rest: &[u8]) -> Option<u64> {
    let (id, rest) = dec(rest)?;
    name(rest)?;
    Some(id)
}

/// After `INLINE_ORIGIN `: `<id> <name>`, the name required: symbolic fails on a record
/// whose name is only whitespace (it trims the line first).
fn inline_origin_record(rest: &[u8]) -> Option<u64> {
    let (id, rest) = dec(rest)?;
    let name = std::str::from_utf8(space(rest)?).ok()?;
    (!name.trim().is_empty()).then_some(id)
}

/// What a line or INLINE record tells the index and a lookup.
struct Record {
    /// The highest end of its ranges.
    reach: u64,
    /// The FILE id it names (for INLINE records, the call site's).
    file: u64,
    /// For INLINE records, the INLINE_ORIGIN id.
    origin: u64,
}

/// A line record: `<address> <size> <line> <file id>`, the line possibly negative
/// (symbolic reads it as 0).
fn line_record(line: &[u8]) -> Option<Record> {
    let (address, rest) = hex(line)?;
    let (size, rest) = hex(space(rest)?)?;
    let rest = space(rest)?;
    let (_line, rest) = dec(rest.strip_prefix(b"-").unwrap_or(rest))?;
    let (file, rest) = dec(space(rest)?)?;
    if !rest.is_empty() {
        return None;
    }
    Some(Record {
        reach: range(address, size)?,
        file,
        origin: 0,
    })
}

/// After `INLINE `: `<depth> <call line> <call file id> <origin id> (<address> <size>)+`.
fn inline_record(rest: &[u8]) -> Option<Record> {
    let (depth, rest) = dec(rest)?;
    let (_call_line, rest) = dec(space(rest)?)?;
    let (file, rest) = dec(space(rest)?)?;
    let (origin, mut rest) = dec(space(rest)?)?;
    if depth > MAX_INLINE_DEPTH {
        return None;
    }
    let mut reach = 0;
    loop {
        let (address, after) = hex(space(rest)?)?;
        let (size, after) = hex(space(after)?)?;
        reach = range(address, size)?.max(reach);
        rest = after;
        if rest.is_empty() {
            return Some(Record {
                reach,
                file,
                origin,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"MODULE Linux x86_64 D96FDC6C16686D8AE479531B3D99327B0 crash\n\
        INFO CODE_ID 6CDC6FD968168A6DE479531B3D99327BCA9DC649\n\
        FILE 0 a.c\n\
        INLINE_ORIGIN 0 inlined\n";

    fn index(tail: &[u8]) -> Option<Index> {
        Index::build(&[HEAD, tail].concat())
    }

    #[test]
    fn the_index_keeps_blocks_reaches_and_records() {
        let tail: &[u8] = b"FUNC 1000 10 0 f\nINLINE 0 3 0 0 1004 20\n1000 4 1 0\n1004 30 2 0\n\
            FUNC m 2000 0 0 empty\n2000 4 1 0\nPUBLIC 1800 0 p\nPUBLIC m 1800 0 q\n\
            FUNC 1020 8 0\nSTACK CFI INIT 1000 10 .cfa: $rsp 8 +\nFUNC 9000 1 0 ignored\n";
        let index = index(tail).unwrap();
        assert_eq!(&*index.starts, &[0x1000, 0x1020]);
        assert_eq!(&*index.reaches, &[0x1034, 0x1028]);
        assert_eq!(&*index.reach_so_far, &[0x1034, 0x1034]);
        assert_eq!(&*index.public_starts, &[0x1800]);
        let text = [HEAD, tail].concat();
        let first_public = memchr::memmem::find(&text, b"PUBLIC 1800").unwrap();
        assert_eq!(index.publics[0].offset as usize, first_public);
        assert_eq!(index.files.len(), 1);
        assert_eq!(index.origins.len(), 1);
        // Both blocks may own keys between the second start and the first's reach.
        assert_eq!(index.deciding(0x1024), Some((vec![0, 1], None)));
        assert_eq!(index.deciding(0x1004), Some((vec![0], None)));
        // Past every reach, only the PUBLIC record below decides.
        assert_eq!(index.deciding(0x1900), Some((vec![], Some(0))));
        assert_eq!(index.deciding(0xfff), None);
    }

    #[test]
    fn a_function_ending_where_the_next_starts_does_not_decide_it() {
        let tail = b"FUNC 1000 10 0 f\n1000 10 1 0\nFUNC 1010 10 0 g\n1010 10 2 0\n\
            FUNC 1020 10 0 h\n1020 18 3 0\nFUNC 1030 10 0 i\n";
        let index = index(tail).unwrap();
        assert_eq!(index.deciding(0x1010), Some((vec![1], None)));
        assert_eq!(index.deciding(0x101f), Some((vec![1], None)));
        // h's last line runs into i.
        assert_eq!(index.deciding(0x1030), Some((vec![2, 3], None)));
    }

    #[test]
    fn text_outside_the_grammar_is_refused() {
        let refused: &[&[u8]] = &[
            // Line endings, encoding, final newline.
            b"FUNC 1000 10 0 f\r\n1000 10 1 0\n",
            b"FUNC 1000 10 0 f\xff\n",
            b"FUNC 1000 10 0 f\n1000 10 1 0",
            // Records out of place.
            b"FUNC 1000 10 0 f\nFILE 1 b.c\n",
            b"FUNC 1000 10 0 f\nINLINE_ORIGIN 1 g\n",
            b"FUNC 1000 10 0 f\nINFO x\n",
            b"PUBLIC 1000 0 p\n1000 10 1 0\n",
            b"1000 10 1 0\n",
            b"INLINE 0 1 0 0 1000 10\n",
            b"PUBLIC 1000 0 p\nFILE 1 b.c\n",
            b"FUNC 1000 10 0 f\n\n",
            b"UNKNOWN record\n",
            b"MODULE again\n",
            // Fields.
            b"FUNC 1000  10 0 f\n",
            b"FUNC 1000 10 0\tf\n",
            b"FUNC 0x1000 10 0 f\n",
            b"FUNC 1000 10 0 f\n1000 10 1 0 \n",
            b"FUNC 1000 10 0 f\n1000 10 1\n",
            b"FUNC 1000 10 0 f\nINLINE 0 1 0 0 1000\n",
            b"FUNC 1000 10 0 f\nINLINE 257 1 0 0 1000 10\n",
            b"INLINE_ORIGIN 1 \n",
            b"FUNC 100000000 10 0 f\n",
            b"FUNC ffffffff 10 0 f\n",
            b"FUNC 1000 10 0 f\nffffffff 10 1 0\n",
            b"PUBLIC 100000000 0 p\n",
            b"FUNC 1000 10 0 f\n1000 10 1 18446744073709551616\n",
        ];
        for (i, tail) in refused.iter().enumerate() {
            let shown = String::from_utf8_lossy(tail);
            assert!(index(tail).is_none(), "{i}: {shown:?} was read");
        }
        let read: &[&[u8]] = &[
            b"FUNC m 1000 10 0 f\n1000 10 -1 0\n",
            b"FUNC 1000 10 0\n1000 10 1 0\n",
            b"FUNC 1000 10 0 \n",
            b"FUNC 00000000000000001000 10 0 f\n",
            b"PUBLIC m 1000 0\n",
            b"FUNC 1000 10 0 f\nSTACK CFI INIT x\r\nanything \xff\n",
            b"FUNC 1000 10 0 f\nINLINE 0 1 0 0 1000 4 1008 4\n",
        ];
        for (i, tail) in read.iter().enumerate() {
            let shown = String::from_utf8_lossy(tail);
            assert!(index(tail).is_some(), "{i}: {shown:?} was refused");
        }
    }

    #[test]
    fn a_pile_of_overlapping_blocks_is_refused() {
        let mut tail = String::new();
        for i in 0..MAX_OVERLAPPING as u32 {
            tail += &format!("FUNC {:x} 1000 0 f\n", 0x1000 + i);
        }
        assert!(index(tail.as_bytes()).is_some());
        tail += "FUNC 1fff 10 0 f\n";
        assert!(index(tail.as_bytes()).is_none());
    }
}
