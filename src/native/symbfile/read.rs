//! Reading symbfiles: the framing (magic, then varint-length and varint-type prefixed
//! protobuf records), relative addresses, string tables, and the checks that make an
//! upload valid. Strings of every file read into one [`Records`] are interned once.

use indexmap::IndexSet;
use prost::Message;

use super::proto;
use crate::error::{CacheError, isolate};

/// The first 8 bytes of every symbfile.
pub const MAGIC: &[u8; 8] = b"symbfile";

/// One function instance over `[start, end)`, at `depth` in its inline tree; strings
/// are indexes into [`Records::strings`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
    pub depth: u32,
    pub func: u32,
    pub file: Option<u32>,
    /// Line of the call in the caller; 0 at depth 0.
    pub call_line: u32,
    /// File of the call when it differs from the caller's own file.
    pub call_file: Option<u32>,
    /// `(address, line)` from which a line of this range's own code holds, ascending.
    pub lines: Vec<(u64, u32)>,
}

/// One entry of a return pad's inline chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PadFrame {
    pub func: u32,
    pub file: Option<u32>,
    pub line: u32,
}

/// The inline chain at one return address (minus one), outermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnPad {
    pub addr: u64,
    pub frames: Vec<PadFrame>,
}

/// Everything read from one or more symbfiles of an executable.
#[derive(Default)]
pub struct Records {
    strings: IndexSet<Box<str>>,
    pub ranges: Vec<Range>,
    pub pads: Vec<ReturnPad>,
}

impl Records {
    pub(super) fn intern(&mut self, s: &str) -> u32 {
        let index = match self.strings.get_index_of(s) {
            Some(index) => index,
            None => self.strings.insert_full(s.into()).0,
        };
        // Strings come from files of at most a few GiB; an index past u32 cannot occur.
        u32::try_from(index).unwrap_or(u32::MAX)
    }

    pub fn string(&self, index: u32) -> &str {
        self.strings
            .get_index(index as usize)
            .map_or("", |s| s.as_ref())
    }

    /// Every string read, for the test-only panic markers of the conversion.
    #[cfg(test)]
    pub fn strings(&self) -> impl Iterator<Item = &str> {
        self.strings.iter().map(|s| s.as_ref())
    }
}

/// Why a symbfile cannot be used; says where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not a symbfile: it must start with the 8 bytes \"symbfile\"")]
    BadMagic,
    #[error("malformed symbfile at byte {offset}: {message}")]
    Malformed { offset: usize, message: String },
    #[error(
        "symbfile record at byte {offset} has an inline chain of {depth} functions, deeper \
         than this server accepts ({limit}, symbfile.max_inline_depth)"
    )]
    TooDeep {
        offset: usize,
        depth: u64,
        limit: u32,
    },
}

impl FormatError {
    /// A symbfile that a parse contained by `error::isolate` (the reader's, or the
    /// converter's) could not take, as `err` says: malformed from its start.
    pub fn unreadable(err: &CacheError) -> Self {
        FormatError::Malformed {
            offset: 0,
            message: err.to_string(),
        }
    }
}

/// State that one file carries from record to record; a new magic resets it.
#[derive(Default)]
struct FileState {
    /// The current string table, as interned indexes.
    table: Vec<u32>,
    prev_va: Option<u64>,
}

impl FileState {
    fn string(&self, index: u32) -> Result<u32, String> {
        self.table.get(index as usize).copied().ok_or_else(|| {
            format!(
                "string reference {index} past a table of {}",
                self.table.len()
            )
        })
    }

    fn address(&mut self, absolute: Option<u64>, delta: Option<i64>) -> Result<u64, String> {
        let va = match (absolute, delta) {
            (Some(va), _) => va,
            (None, Some(delta)) => self
                .prev_va
                .ok_or("a relative address without a record before it")?
                .wrapping_add_signed(delta),
            (None, None) => return Err("a record without an address".into()),
        };
        self.prev_va = Some(va);
        Ok(va)
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .data
                .get(self.pos)
                .ok_or("the file ends inside a record prefix")?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], String> {
        let rest = self.data.len() - self.pos;
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= rest)
            .ok_or_else(|| format!("a record of {len} bytes with {rest} left in the file"))?;
        let body = &self.data[self.pos..self.pos + len];
        self.pos += len;
        Ok(body)
    }
}

const MT_INVALID: u64 = proto::MessageType::MtInvalid as u64;
const MT_HEADER: u64 = proto::MessageType::MtHeader as u64;
const MT_RANGE: u64 = proto::MessageType::MtRangeV1 as u64;
const MT_RETURN_PAD: u64 = proto::MessageType::MtReturnPadV1 as u64;
const MT_STRING_TABLE: u64 = proto::MessageType::MtStringTableV1 as u64;

/// Reads every record of `data` into `records`. `data` may be several symbfiles one
/// after the other (an upload whose parts were each a whole file): a magic where a
/// record would start begins a new file. That is never a record: its prefix would
/// say 115 bytes of type 121, a type no writer uses.
///
/// No inline chain may hold more than `max_depth` functions (a range's `depth` is below
/// it, a return pad has at most that many frames): the SymCache converter recurses
/// once per level, so the depth an upload may ask for has to be bounded here.
pub fn read_into(data: &[u8], records: &mut Records, max_depth: u32) -> Result<(), FormatError> {
    #[cfg(test)]
    crate::error::panic_if_marked("read", data);
    if !data.starts_with(MAGIC) {
        return Err(FormatError::BadMagic);
    }
    let mut cursor = Cursor { data, pos: 0 };
    let mut file = FileState::default();
    let mut expect_header = false;
    while cursor.pos < data.len() {
        let offset = cursor.pos;
        let malformed = |message: String| FormatError::Malformed { offset, message };
        if data[offset..].starts_with(MAGIC) {
            cursor.pos += MAGIC.len();
            file = FileState::default();
            expect_header = true;
            continue;
        }
        let len = cursor.varint().map_err(malformed)?;
        let ty = cursor.varint().map_err(malformed)?;
        let body = cursor.take(len).map_err(malformed)?;
        let too_deep = |depth: u64| FormatError::TooDeep {
            offset,
            depth,
            limit: max_depth,
        };
        if expect_header {
            if ty != MT_HEADER {
                return Err(malformed(format!("expected the header, found type {ty}")));
            }
            proto::Header::decode(body).map_err(|e| malformed(e.to_string()))?;
            expect_header = false;
            continue;
        }
        match ty {
            MT_INVALID => return Err(malformed("a record of type 0 (invalid)".into())),
            MT_HEADER => return Err(malformed("a second header".into())),
            MT_RANGE => {
                let range = proto::RangeV1::decode(body).map_err(|e| malformed(e.to_string()))?;
                if range.depth >= max_depth {
                    return Err(too_deep(u64::from(range.depth) + 1));
                }
                let range = read_range(range, &mut file, records).map_err(malformed)?;
                records.ranges.push(range);
            }
            MT_RETURN_PAD => {
                let pad = proto::ReturnPadV1::decode(body).map_err(|e| malformed(e.to_string()))?;
                if pad.func.len() > max_depth as usize {
                    return Err(too_deep(pad.func.len() as u64));
                }
                let pad = read_return_pad(pad, &mut file, records).map_err(malformed)?;
                records.pads.push(pad);
            }
            MT_STRING_TABLE => {
                let table =
                    proto::StringTableV1::decode(body).map_err(|e| malformed(e.to_string()))?;
                file.table = table.strings.iter().map(|s| records.intern(s)).collect();
            }
            // Newer writers may add record types; readers skip what they do not know.
            _ => {}
        }
    }
    if expect_header {
        return Err(FormatError::Malformed {
            offset: data.len(),
            message: "the file ends before its header".into(),
        });
    }
    Ok(())
}

/// [`read_into`] of an upload or a stored symbfile, whose bytes are untrusted: a panic
/// in the reader (ours, or prost's) makes the file malformed from its start, and
/// `records` is to be dropped.
pub fn read_isolated(
    data: &[u8],
    records: &mut Records,
    max_depth: u32,
) -> Result<(), FormatError> {
    isolate("symbfile reader", || {
        Ok(read_into(data, records, max_depth))
    })
    .unwrap_or_else(|err| Err(FormatError::unreadable(&err)))
}

fn read_range(
    range: proto::RangeV1,
    file: &mut FileState,
    records: &mut Records,
) -> Result<Range, String> {
    use proto::range_v1::{CallFile, ElfVa, File, Func};
    let start = match range.elf_va {
        Some(ElfVa::SetElfVa(va)) => file.address(Some(va), None)?,
        Some(ElfVa::DeltaElfVa(delta)) => file.address(None, Some(delta))?,
        None => file.address(None, None)?,
    };
    let end = start
        .checked_add(range.length)
        .ok_or("a range past the end of the address space")?;
    let func = match range.func {
        Some(Func::FuncStr(s)) => records.intern(&s),
        Some(Func::FuncRef(index)) => file.string(index)?,
        None => return Err("a range without a function".into()),
    };
    let file_name = match range.file {
        Some(File::FileStr(s)) => Some(records.intern(&s)),
        Some(File::FileRef(index)) => Some(file.string(index)?),
        None => None,
    };
    let call_file = match range.call_file {
        Some(CallFile::CallFileStr(s)) => Some(records.intern(&s)),
        Some(CallFile::CallFileRef(index)) => Some(file.string(index)?),
        None => None,
    };
    let mut lines = Vec::new();
    if let Some(table) = range.line_table {
        if table.offset.len() != table.line_number.len() {
            return Err(format!(
                "a line table of {} offsets and {} lines",
                table.offset.len(),
                table.line_number.len()
            ));
        }
        let mut addr = start;
        for (offset, line) in table.offset.into_iter().zip(table.line_number) {
            addr = addr
                .checked_add(u64::from(offset))
                .ok_or("a line past the end of the address space")?;
            lines.push((addr, line));
        }
    }
    Ok(Range {
        start,
        end,
        depth: range.depth,
        func,
        file: file_name,
        call_line: range.call_line,
        call_file,
        lines,
    })
}

fn read_return_pad(
    pad: proto::ReturnPadV1,
    file: &mut FileState,
    records: &Records,
) -> Result<ReturnPad, String> {
    use proto::return_pad_v1::ElfVa;
    let addr = match pad.elf_va {
        Some(ElfVa::SetElfVa(va)) => file.address(Some(va), None)?,
        Some(ElfVa::DeltaElfVa(delta)) => file.address(None, Some(delta))?,
        None => file.address(None, None)?,
    };
    if pad.func.len() != pad.file.len() || pad.func.len() != pad.line.len() {
        return Err(format!(
            "a return pad of {} functions, {} files and {} lines",
            pad.func.len(),
            pad.file.len(),
            pad.line.len()
        ));
    }
    let frames = (pad.func.iter().zip(&pad.file).zip(&pad.line))
        .map(|((&func, &file_index), &line)| {
            let file_name = file.string(file_index)?;
            Ok(PadFrame {
                func: file.string(func)?,
                file: (!records.string(file_name).is_empty()).then_some(file_name),
                line,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(ReturnPad { addr, frames })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const DEPTH: u32 = 128;

    /// A record as the framing has it: length, type, body.
    pub(crate) fn record(ty: proto::MessageType, message: &impl Message) -> Vec<u8> {
        let body = message.encode_to_vec();
        let mut out = Vec::new();
        prost::encoding::encode_varint(body.len() as u64, &mut out);
        prost::encoding::encode_varint(ty as u64, &mut out);
        out.extend(body);
        out
    }

    /// A symbfile of `records`, after the magic and the header.
    pub(crate) fn file(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend(record(proto::MessageType::MtHeader, &proto::Header {}));
        for r in records {
            out.extend(r);
        }
        out
    }

    /// A range of 16 bytes at `va`, of `func`.
    pub(crate) fn range(va: proto::range_v1::ElfVa, func: &str) -> Vec<u8> {
        record(
            proto::MessageType::MtRangeV1,
            &proto::RangeV1 {
                elf_va: Some(va),
                length: 0x10,
                func: Some(proto::range_v1::Func::FuncStr(func.into())),
                line_table: Some(proto::LineTable {
                    offset: vec![0, 4],
                    line_number: vec![7, 9],
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn relative_addresses_line_offsets_and_concatenated_files() {
        use proto::range_v1::ElfVa;
        let one = file(&[
            range(ElfVa::SetElfVa(0x1000), "a"),
            range(ElfVa::DeltaElfVa(-0x10), "b"),
        ]);
        let mut data = one.clone();
        data.extend(file(&[range(ElfVa::SetElfVa(0x2000), "a")]));
        let mut records = Records::default();
        read_into(&data, &mut records, DEPTH).unwrap();
        let starts: Vec<_> = records.ranges.iter().map(|r| r.start).collect();
        assert_eq!(starts, [0x1000, 0xff0, 0x2000]);
        assert_eq!(records.ranges[1].lines, [(0xff0, 7), (0xff4, 9)]);
        // "a" is stored once for both files.
        assert_eq!(records.ranges[0].func, records.ranges[2].func);
        assert_eq!(records.string(records.ranges[1].func), "b");

        // A relative address does not reach back into the previous file.
        let mut data = one;
        data.extend(file(&[range(ElfVa::DeltaElfVa(4), "c")]));
        let err = read_into(&data, &mut Records::default(), DEPTH).unwrap_err();
        assert!(err.to_string().contains("relative address"), "{err}");
    }

    #[test]
    fn string_tables_and_return_pads() {
        let table = record(
            proto::MessageType::MtStringTableV1,
            &proto::StringTableV1 {
                strings: vec!["main".into(), "".into(), "inner".into(), "a.c".into()],
            },
        );
        let pad = |func: Vec<u32>| {
            record(
                proto::MessageType::MtReturnPadV1,
                &proto::ReturnPadV1 {
                    elf_va: Some(proto::return_pad_v1::ElfVa::SetElfVa(0x40)),
                    file: vec![3, 1],
                    line: vec![5, 6],
                    func,
                },
            )
        };
        let mut records = Records::default();
        read_into(
            &file(&[table.clone(), pad(vec![0, 2])]),
            &mut records,
            DEPTH,
        )
        .unwrap();
        let frames = &records.pads[0].frames;
        assert_eq!(records.string(frames[1].func), "inner");
        assert_eq!(frames[0].file.map(|f| records.string(f)), Some("a.c"));
        assert_eq!(frames[1].file, None, "an empty file name is no file");

        let err = read_into(
            &file(&[table.clone(), pad(vec![0])]),
            &mut Records::default(),
            DEPTH,
        );
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("1 functions, 2 files")
        );
        let err = read_into(
            &file(&[table, pad(vec![0, 9])]),
            &mut Records::default(),
            DEPTH,
        );
        assert!(err.unwrap_err().to_string().contains("string reference 9"));
    }

    #[test]
    fn inline_chains_deeper_than_the_limit_are_refused() {
        let table = record(
            proto::MessageType::MtStringTableV1,
            &proto::StringTableV1 {
                strings: vec!["f".into()],
            },
        );
        let pad = |frames: usize| {
            record(
                proto::MessageType::MtReturnPadV1,
                &proto::ReturnPadV1 {
                    elf_va: Some(proto::return_pad_v1::ElfVa::SetElfVa(0x40)),
                    func: vec![0; frames],
                    file: vec![0; frames],
                    line: vec![1; frames],
                },
            )
        };
        let deep_range = |depth: u32| {
            record(
                proto::MessageType::MtRangeV1,
                &proto::RangeV1 {
                    elf_va: Some(proto::range_v1::ElfVa::SetElfVa(0x40)),
                    length: 1,
                    func: Some(proto::range_v1::Func::FuncStr("f".into())),
                    depth,
                    ..Default::default()
                },
            )
        };
        let mut records = Records::default();
        read_into(
            &file(&[table.clone(), pad(3), deep_range(2)]),
            &mut records,
            3,
        )
        .unwrap();
        assert_eq!(records.pads[0].frames.len(), 3);

        let data = file(&[table.clone(), pad(4)]);
        let err = read_into(&data, &mut Records::default(), 3).unwrap_err();
        assert_eq!(
            err,
            FormatError::TooDeep {
                // After the magic, the header and the string table.
                offset: 15,
                depth: 4,
                limit: 3
            }
        );
        assert!(
            err.to_string().contains("symbfile.max_inline_depth"),
            "{err}"
        );
        let err = read_into(&file(&[deep_range(3)]), &mut Records::default(), 3).unwrap_err();
        assert!(
            matches!(err, FormatError::TooDeep { depth: 4, .. }),
            "{err}"
        );
    }

    #[test]
    fn framing_errors() {
        assert_eq!(
            read_into(b"symbfilX\x00\x01", &mut Records::default(), DEPTH),
            Err(FormatError::BadMagic)
        );
        let truncated = &file(&[range(proto::range_v1::ElfVa::SetElfVa(1), "f")])[..20];
        let err = read_into(truncated, &mut Records::default(), DEPTH).unwrap_err();
        assert!(
            matches!(err, FormatError::Malformed { offset: 10, .. }),
            "{err}"
        );
        // The first record must be the header.
        let mut no_header = MAGIC.to_vec();
        no_header.extend(range(proto::range_v1::ElfVa::SetElfVa(1), "f"));
        assert!(read_into(&no_header, &mut Records::default(), DEPTH).is_err());
        assert!(read_into(MAGIC, &mut Records::default(), DEPTH).is_err());
        // Unknown record types are skipped.
        let mut unknown = file(&[]);
        unknown.extend([2, 9, 0xaa, 0xbb]);
        read_into(&unknown, &mut Records::default(), DEPTH).unwrap();
    }
}
