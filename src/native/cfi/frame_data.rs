//! A PDB's frame data as `STACK WIN` records: symbolic 13.9's `AsciiCfiWriter::process_pdb`,
//! step for step, over `native::pdb_read`'s source. symbolic's writer needs a `PdbObject`,
//! which copies the public symbol records onto the heap (4.5 % of the file) before it
//! reads the frame table, and reads every stream through a copying source.

use std::io::Write;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ::pdb::{FallibleIterator, FrameData, PDB, Rva, StringTable};
use symbolic::cfi::CfiError;

use crate::error::{CacheError, CacheResult};
use crate::lookup::ObjectHandle;
use crate::native::pdb_read::MappedSource;

/// Writes the `STACK WIN` records of the PDB `handle` to `out`; scattered streams are
/// gathered in `spill_dir` where they cannot be mapped.
pub fn write<W: Write>(
    handle: &Arc<ObjectHandle>,
    spill_dir: &Path,
    out: &mut W,
) -> CacheResult<()> {
    // What `write_cfi` makes of symbolic's errors: a broken file is malformed.
    let malformed = |e: ::pdb::Error| CacheError::Malformed(CfiError::from(e).to_string());
    let source = MappedSource::new(handle.clone(), spill_dir.to_owned());
    let mut pdb = PDB::open(source).map_err(malformed)?;
    let frame_table = pdb.frame_table().map_err(malformed)?;
    let address_map = pdb.address_map().map_err(malformed)?;
    // See `PdbDebugSession::build`.
    let string_table = match pdb.string_table() {
        Ok(string_table) => Some(string_table),
        Err(::pdb::Error::StreamNameNotFound) => None,
        Err(e) => return Err(malformed(e)),
    };

    let mut frames = frame_table.iter();
    let mut last_frame: Option<FrameData> = None;
    while let Some(frame) = frames.next().map_err(malformed)? {
        // Code sizes near `u32::MAX` (`0xffffff6e`) are not code sizes; symbolic skips
        // them, as it does a frame that repeats the last one.
        if frame.code_size > i32::MAX as u32 {
            continue;
        }
        if let Some(last) = &last_frame
            && frame.ty == last.ty
            && frame.code_start == last.code_start
            && frame.code_size == last.code_size
            && frame.prolog_size == last.prolog_size
        {
            continue;
        }
        // The prolog and the code are translated to RVAs apart: either may have been
        // moved or split on its own.
        let prolog_end = frame.code_start + u32::from(frame.prolog_size);
        let code_end = frame.code_start + frame.code_size;
        let mut prolog_ranges: Vec<Range<Rva>> = address_map
            .rva_ranges(frame.code_start..prolog_end)
            .collect();
        let mut code_ranges: Vec<Range<Rva>> =
            address_map.rva_ranges(prolog_end..code_end).collect();
        let is_contiguous = prolog_ranges.len() == 1
            && code_ranges.len() == 1
            && prolog_ranges[0].end == code_ranges[0].start;
        let string_table = string_table.as_ref();
        if is_contiguous {
            write_stack_info(
                out,
                string_table,
                &frame,
                prolog_ranges[0].start,
                code_ranges[0].end,
                prolog_ranges[0].end - prolog_ranges[0].start,
            )?;
        } else {
            prolog_ranges.sort_unstable_by_key(|range| range.start);
            code_ranges.sort_unstable_by_key(|range| range.start);
            for Range { start, end } in prolog_ranges {
                write_stack_info(out, string_table, &frame, start, end, end - start)?;
            }
            for Range { start, end } in code_ranges {
                write_stack_info(out, string_table, &frame, start, end, 0)?;
            }
        }
        last_frame = Some(frame);
    }
    Ok(())
}

/// symbolic's `write_pdb_stackinfo`.
fn write_stack_info<W: Write>(
    out: &mut W,
    string_table: Option<&StringTable<'_>>,
    frame: &FrameData,
    start: Rva,
    end: Rva,
    prolog_size: u32,
) -> CacheResult<()> {
    let code_size = end - start;
    let has_program = frame.program.is_some() && string_table.is_some();
    write!(
        out,
        "STACK WIN {:x} {:x} {:x} {:x} {:x} {:x} {:x} {:x} {:x} {} ",
        frame.ty as u8,
        start.0,
        code_size,
        prolog_size,
        0, // epilog_size
        frame.params_size,
        frame.saved_regs_size,
        frame.locals_size,
        frame.max_stack_size.unwrap_or(0),
        i32::from(has_program)
    )
    .map_err(CacheError::internal)?;
    let written = match (&frame.program, string_table) {
        (Some(program), Some(string_table)) => {
            let program = program
                .to_string_lossy(string_table)
                .map_err(|e| CacheError::Malformed(CfiError::from(e).to_string()))?;
            writeln!(out, "{}", program.trim())
        }
        (Some(_), None) => writeln!(out),
        (None, _) => writeln!(out, "{}", i32::from(frame.uses_base_pointer)),
    };
    written.map_err(CacheError::internal)
}
