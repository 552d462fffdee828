//! Where each unwind record of a CFI cache's Breakpad text is, by address, without
//! parsing its rules.
//!
//! `SymbolFile::from_bytes` of a whole file keeps every rule as an owned string in a
//! range map, about twice the text on the heap; a crash through 160 modules held a
//! quarter of a gigabyte that way. The index keeps, per record the walker can pick, its
//! address range and the byte span of its text (20 bytes), and the walk parses the one
//! record it needs with the same parser.
//!
//! To pick the same record as the parsed file, the index applies the parser's own rules
//! (breakpad-symbols 0.27, `sym_file/parser.rs`): a `STACK CFI INIT` block is the INIT
//! line and the `STACK CFI` lines after it; a record of size 0 or one that runs past the
//! address space is dropped; a `STACK WIN` record that a later one of its type starts
//! inside is cut short there, and one that starts at or before the previous one and
//! overlaps it with another range is dropped (`insert_win_stack_info`); then each kind is
//! sorted by range and an entry that starts inside the previous kept one is dropped
//! (`into_rangemap_safe`). That function merges an overlapping entry with an equal value
//! instead, but values hold their record's address and size, so equal values have equal
//! ranges and merging one leaves what dropping it does.
//!
//! The index reads a strict subset of the grammar: the text symbolic writes. Anything
//! else (another record type, a `\r`, invalid UTF-8, a line or block past the bounds
//! below, no final newline) makes [`build`] answer `None`, and the caller parses the
//! whole file as before, so such a file keeps the parser's verdict and behaviour.

use std::ops::Range;

use memchr::{memchr, memchr_iter};
use minidump_unwind::SymbolFile;

/// Longest line the index reads. The parser discards lines past its 160 KiB buffer
/// instead of reading them, which the index does not imitate.
const MAX_LINE: usize = 64 * 1024;

/// Longest `STACK CFI INIT` block the index takes: every walk through it parses it again,
/// so one block must not cost a frame more than this. Real blocks are a few hundred bytes.
const MAX_BLOCK: usize = 256 * 1024;

/// One kind of record (CFI, WIN frame data, WIN FPO), sorted by address, ranges disjoint.
/// Struct of arrays: the binary search touches only the starts.
#[derive(Default)]
pub(super) struct RangeIndex {
    starts: Box<[u64]>,
    spans: Box<[Span]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    /// Bytes of address space the record covers (for `STACK WIN`, after the parser's fixup).
    pub size: u32,
    offset: u32,
    len: u32,
}

impl Span {
    /// The record's lines in the text the index was built from, final newline included.
    pub fn text(self, text: &[u8]) -> Option<&[u8]> {
        let start = self.offset as usize;
        text.get(start..start.checked_add(self.len as usize)?)
    }
}

impl RangeIndex {
    /// The record covering `addr`, as `RangeMap::get` on the parsed file would find it.
    pub fn find(&self, addr: u64) -> Option<Span> {
        let i = self
            .starts
            .partition_point(|&start| start <= addr)
            .checked_sub(1)?;
        let span = self.spans[i];
        (addr - self.starts[i] < u64::from(span.size)).then_some(span)
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        size_of_val(&*self.starts) + size_of_val(&*self.spans)
    }
}

#[derive(Default)]
pub(super) struct CfiIndex {
    pub cfi: RangeIndex,
    pub framedata: RangeIndex,
    pub fpo: RangeIndex,
}

impl CfiIndex {
    /// The `STACK WIN` record the walk uses at `addr`: frame data before FPO, as
    /// `SymbolFile::walk_frame` prefers it (breakpad's heuristic).
    pub fn win(&self, addr: u64) -> Option<(WinKind, Span)> {
        match self.framedata.find(addr) {
            Some(span) => Some((WinKind::FrameData, span)),
            None => self.fpo.find(addr).map(|span| (WinKind::Fpo, span)),
        }
    }

    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        self.cfi.heap_bytes() + self.framedata.heap_bytes() + self.fpo.heap_bytes()
    }
}

/// A record as the parser would push it: its range starts at `start` and has `size` bytes.
#[derive(Clone, Copy)]
struct Record {
    start: u64,
    size: u32,
    offset: u32,
    len: u32,
}

impl Record {
    /// `memory_range()` of the parsed value: `None` for an empty range or one that runs
    /// past the address space.
    fn range(&self) -> Option<Range<u64>> {
        if self.size == 0 {
            return None;
        }
        Some(self.start..self.start.checked_add(u64::from(self.size))?)
    }
}

/// The index of `text`, or `None` when the text is outside what the index reads (see the
/// module doc); then only the whole-file parser can say what it holds.
pub(super) fn build(text: &[u8]) -> Option<CfiIndex> {
    // Offsets are u32; the checks on the whole text are what let the line parsers below
    // skip the parser's per-field UTF-8 checks and its `\r\n` handling.
    if u32::try_from(text.len()).is_err()
        || text.last() != Some(&b'\n')
        || memchr(b'\r', text).is_some()
        || std::str::from_utf8(text).is_err()
    {
        return None;
    }
    let mut cfi = Vec::new();
    let mut framedata = Vec::new();
    let mut fpo = Vec::new();
    let mut block: Option<Record> = None;
    let mut offset = 0usize;
    for newline in memchr_iter(b'\n', text) {
        let line = &text[offset..newline];
        let line_offset = offset;
        offset = newline + 1;
        if line.len() > MAX_LINE {
            return None;
        }
        // Inside a block the parser first tries the line as one of its `STACK CFI`
        // lines; any other line ends the block and is read as a record of its own.
        if let Some(current) = &mut block {
            if is_cfi_delta(line) {
                let len = offset - current.offset as usize;
                if len > MAX_BLOCK {
                    return None;
                }
                current.len = len as u32;
                continue;
            }
            cfi.extend(block.take().filter(|r| r.range().is_some()));
        }
        if line.is_empty() {
            continue;
        }
        let len = line.len() as u32 + 1;
        if let Some(rest) = line.strip_prefix(b"STACK CFI INIT") {
            let (start, size) = cfi_init(rest)?;
            block = Some(Record {
                start,
                size,
                offset: line_offset as u32,
                len,
            });
        } else if let Some(rest) = line.strip_prefix(b"STACK WIN") {
            let (kind, start, size) = stack_win(rest)?;
            let record = Record {
                start,
                size,
                offset: line_offset as u32,
                len,
            };
            match kind {
                Some(WinKind::FrameData) => insert_win(&mut framedata, record),
                Some(WinKind::Fpo) => insert_win(&mut fpo, record),
                // Another type, or one whose program-string flag contradicts its
                // type: the parser reads it and keeps nothing.
                None => {}
            }
        } else if line_offset == 0 && line.starts_with(b"MODULE") {
            // Only the first line may be a MODULE record; the parser reads it alone as
            // it would at the top of the file.
            SymbolFile::from_bytes(&text[..offset]).ok()?;
        } else {
            return None;
        }
    }
    cfi.extend(block.filter(|r| r.range().is_some()));
    Some(CfiIndex {
        cfi: into_index(cfi),
        framedata: into_index(framedata),
        fpo: into_index(fpo),
    })
}

/// The parser's `insert_win_stack_info`, on ranges: records of one type in file order.
fn insert_win(records: &mut Vec<Record>, record: Record) {
    let Some(range) = record.range() else {
        return;
    };
    if let Some(last) = records.last_mut() {
        // Both ranges are valid (only valid records are pushed), so they are non-empty.
        let last_range = last.range().unwrap_or(0..0);
        if range.start < last_range.end && last_range.start < range.end {
            if record.start > last.start {
                // A record that starts inside the previous one marks where that one
                // really ends; the difference is below its u32 size.
                last.size = (record.start - last.start) as u32;
            } else if last_range != range {
                return;
            }
        }
    }
    records.push(record);
}

/// The parser's `into_rangemap_safe`: sorted by range (stably, so of equal ranges the
/// first in the file is kept), then each entry that starts inside the last kept one is
/// dropped. See the module doc for why value equality does not enter.
fn into_index(mut records: Vec<Record>) -> RangeIndex {
    let range = |r: &Record| r.range().map(|r| (r.start, r.end)).unwrap_or_default();
    records.sort_by_key(range);
    let mut starts = Vec::with_capacity(records.len());
    let mut spans = Vec::with_capacity(records.len());
    let mut last_end = None;
    for record in records {
        let (start, end) = range(&record);
        if last_end.is_some_and(|last_end| start < last_end) {
            continue;
        }
        last_end = Some(end);
        starts.push(start);
        spans.push(Span {
            size: record.size,
            offset: record.offset,
            len: record.len,
        });
    }
    RangeIndex {
        starts: starts.into_boxed_slice(),
        spans: spans.into_boxed_slice(),
    }
}

/// The two kinds of `STACK WIN` record the walker uses, each in a range map of its own.
#[derive(Clone, Copy)]
pub(super) enum WinKind {
    FrameData,
    Fpo,
}

/// nom's `space1`: one or more spaces or tabs.
fn space1(input: &[u8]) -> Option<&[u8]> {
    let n = input
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    (n > 0).then(|| &input[n..])
}

/// The parser's `hex_str`: up to `DIGITS` hex digits (at least one), then a space1 as
/// every use of it here requires. More digits than fit fail, as there.
fn hex<const DIGITS: usize>(input: &[u8]) -> Option<(u64, &[u8])> {
    let digits = input
        .iter()
        .take(DIGITS)
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    if digits == 0 {
        return None;
    }
    let mut value = 0u64;
    for &b in &input[..digits] {
        value = value << 4 | u64::from((b as char).to_digit(16)?);
    }
    Some((value, space1(&input[digits..])?))
}

fn hex32(input: &[u8]) -> Option<(u32, &[u8])> {
    let (value, rest) = hex::<8>(input)?;
    Some((u32::try_from(value).ok()?, rest))
}

/// After `STACK CFI INIT`: the parser's `stack_cfi_init`; the rules may be empty.
fn cfi_init(rest: &[u8]) -> Option<(u64, u32)> {
    let (start, rest) = hex::<16>(space1(rest)?)?;
    let (size, _rules) = hex32(rest)?;
    Some((start, size))
}

/// The parser's `stack_cfi`: a `STACK CFI <address> <rules>` line of the current block.
fn is_cfi_delta(line: &[u8]) -> bool {
    line.strip_prefix(b"STACK CFI")
        .and_then(space1)
        .and_then(hex::<16>)
        .is_some()
}

/// After `STACK WIN`: the parser's `stack_win_line`, what decides where the record goes.
/// The kind is `None` for a record the parser keeps nowhere.
fn stack_win(rest: &[u8]) -> Option<(Option<WinKind>, u64, u32)> {
    let rest = space1(rest)?;
    let (&ty, rest) = rest.split_first()?;
    if !ty.is_ascii_hexdigit() {
        return None;
    }
    let (start, rest) = hex::<16>(space1(rest)?)?;
    let (size, mut rest) = hex32(rest)?;
    // prologue, epilogue, parameter, saved register, local and max stack sizes
    for _ in 0..6 {
        rest = hex32(rest)?.1;
    }
    let (&has_program_string, rest) = rest.split_first()?;
    if !has_program_string.is_ascii_digit() {
        return None;
    }
    space1(rest)?;
    let kind = match (ty, has_program_string == b'1') {
        (b'4', true) => Some(WinKind::FrameData),
        (b'0', false) => Some(WinKind::Fpo),
        _ => None,
    };
    Some((kind, start, size))
}
