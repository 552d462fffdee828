//! The functions of a Breakpad `.sym` text as symbolic 13.9's `BreakpadDebugSession`
//! yields them (its `BreakpadFunctionIterator`, followed step by step), with its two
//! maps in spill files: symbolic keeps every FILE record (read up front) and every
//! INLINE_ORIGIN record (as they come) in `BTreeMap`s on the heap, which grow with the
//! text (a million inline origins and more in a large browser's symbols). Everything
//! else is one function at a time, as there.

use std::io;
use std::path::Path;

use symbolic::common::{Language, Name, NameMangling};
use symbolic::debuginfo::breakpad::{
    BreakpadError, BreakpadFuncRecord, BreakpadInlineOriginRecord, BreakpadInlineRecord,
    BreakpadLineRecord, BreakpadObject, Lines,
};
use symbolic::debuginfo::function_builder::FunctionBuilder;
use symbolic::debuginfo::{FileInfo, Function};

use crate::native::spill::FileTextMap;

/// Each function of `object` to `sink`, in symbolic's order; the inner `Err` is where
/// symbolic's iterator yields one (it ends the conversion), the outer one a spill
/// file's.
pub fn functions<'d>(
    object: &BreakpadObject<'d>,
    max_inline_depth: Option<u32>,
    scratch: &Path,
    sink: &mut dyn FnMut(Function<'d>) -> io::Result<()>,
) -> io::Result<Result<(), BreakpadError>> {
    // `BreakpadObject::file_map`: every readable FILE record, the last of an id winning.
    let mut files = FileTextMap::new_in(scratch)?;
    for file in object.file_records().filter_map(Result::ok) {
        files.insert(file.id, file.name)?;
    }
    let mut origins = FileTextMap::new_in(scratch)?;
    // SAFETY (both maps' `get`): their texts are slices of `object`'s data, which
    // outlives `'d` borrows and this function.
    let file = |files: &FileTextMap, id: u64| -> Option<&'d str> { unsafe { files.get(id) } };

    let mut lines = Lines::new(object.data());
    let mut next_line = lines.next();
    loop {
        // Advance to the next FUNC line.
        let func_line = loop {
            let Some(line) = next_line.take() else {
                return Ok(Ok(()));
            };
            if line.starts_with(b"FUNC ") {
                break line;
            }
            // FUNC records come before STACK records: the first of those ends them.
            if line.starts_with(b"STACK ") {
                return Ok(Ok(()));
            }
            if line.starts_with(b"INLINE_ORIGIN ") {
                let origin = match BreakpadInlineOriginRecord::parse(line) {
                    Ok(record) => record,
                    Err(e) => return Ok(Err(e)),
                };
                origins.insert(origin.id, origin.name)?;
            }
            next_line = lines.next();
        };

        let record = match BreakpadFuncRecord::parse(func_line, Lines::new(&[])) {
            Ok(record) => record,
            Err(e) => return Ok(Err(e)),
        };
        let mut builder = FunctionBuilder::new(
            Name::new(record.name, NameMangling::Unmangled, Language::Unknown),
            b"",
            record.address,
            record.size,
        )
        .max_inline_depth(max_inline_depth);

        for line in lines.by_ref() {
            if line.starts_with(b"FUNC ")
                || line.starts_with(b"PUBLIC ")
                || line.starts_with(b"STACK ")
            {
                next_line = Some(line);
                break;
            }
            if line.starts_with(b"INLINE_ORIGIN ") {
                let origin = match BreakpadInlineOriginRecord::parse(line) {
                    Ok(record) => record,
                    Err(e) => return Ok(Err(e)),
                };
                origins.insert(origin.id, origin.name)?;
                continue;
            }
            if line.starts_with(b"INLINE ") {
                let inline = match BreakpadInlineRecord::parse(line) {
                    Ok(record) => record,
                    Err(e) => return Ok(Err(e)),
                };
                let name = file(&origins, inline.origin_id).unwrap_or_default();
                let call_file = file(&files, inline.call_site_file_id).unwrap_or_default();
                for range in &inline.address_ranges {
                    builder.add_inlinee(
                        inline.inline_depth as u32,
                        Name::new(name, NameMangling::Unmangled, Language::Unknown),
                        range.address,
                        range.size,
                        FileInfo::from_path(call_file.as_bytes()),
                        inline.call_site_line,
                    );
                }
                continue;
            }
            // Empty lines may be anywhere; only this walk has no record name to skip
            // them by.
            if line.is_empty() {
                continue;
            }
            let line_record = match BreakpadLineRecord::parse(line) {
                Ok(record) => record,
                Err(e) => return Ok(Err(e)),
            };
            if line_record.size == 0 {
                continue;
            }
            let filename = file(&files, line_record.file_id).unwrap_or_default();
            builder.add_leaf_line(
                line_record.address,
                Some(line_record.size),
                FileInfo::from_path(filename.as_bytes()),
                line_record.line,
            );
        }
        sink(builder.finish())?;
    }
}
