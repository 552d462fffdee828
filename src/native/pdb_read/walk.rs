//! The functions of one PDB module (compilation unit), as symbolic 13.9's PDB debug
//! session yields them: its `pdb::Unit::functions`, step for step, over our streams.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;

use ::pdb::{
    FallibleIterator, InlineSiteSymbol, Inlinee, LineProgram, ModuleInfo, PdbInternalSectionOffset,
    ProcedureSymbol, RawString, SeparatedCodeSymbol, SymbolData, TypeIndex,
};
use symbolic::common::{Language, Name, NameMangling};
use symbolic::debuginfo::{FileInfo, Function, LineInfo};

use super::{Formatter, Streams};

/// The functions of module `index` in symbolic's order, or none for a module without a
/// stream (symbolic's unit iterator skips those). `Err` where symbolic fails the module,
/// and with it the whole conversion. The module's stream is read here and dropped on
/// return: symbolic keeps every module it has read until its session ends.
pub fn module_functions<'s>(
    streams: &'s Streams,
    formatter: &Formatter<'_>,
    index: usize,
) -> Result<Vec<Function<'s>>, Broken> {
    let Some(module) = formatter.modules().get(index) else {
        return Ok(Vec::new());
    };
    let info = match streams.module_info(module) {
        Ok(Some(info)) => info,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Unit {
        streams,
        formatter,
        module_index: index,
        module: &info,
        files: RefCell::new(BTreeMap::new()),
    }
    .functions()
}

/// Symbolic's PDB reader fails a module (and with it the whole conversion) on these.
#[derive(Debug)]
pub enum Broken {
    /// The file's records.
    File(String),
    /// A spill file (for a scattered stream, or the writer's tables) could not be
    /// written: ours, not the file's.
    Disk(io::Error),
}

impl From<::pdb::Error> for Broken {
    fn from(e: ::pdb::Error) -> Self {
        match e {
            ::pdb::Error::IoError(e) if e.kind() != io::ErrorKind::UnexpectedEof => Broken::Disk(e),
            e => Broken::File(e.to_string()),
        }
    }
}

/// One module being parsed: symbolic 13.9's `pdb::Unit`, step for step, with everything
/// owned.
struct Unit<'s, 'r, 'a> {
    streams: &'s Streams,
    formatter: &'r Formatter<'a>,
    module_index: usize,
    module: &'r ModuleInfo<'static>,
    /// File index to the `FileInfo` symbolic makes of it; the lines of a module name a
    /// few files many times.
    files: RefCell<BTreeMap<u32, FileInfo<'s>>>,
}

impl<'s> Unit<'s, '_, '_> {
    fn collect_lines<I>(
        &self,
        mut line_iter: I,
        program: &LineProgram<'_>,
    ) -> Result<Vec<LineInfo<'s>>, Broken>
    where
        I: FallibleIterator<Item = ::pdb::LineInfo, Error = ::pdb::Error>,
    {
        let address_map = &self.streams.address_map;

        let mut lines = Vec::new();
        while let Some(line_info) = line_iter.next()? {
            let rva = match line_info.offset.to_rva(address_map) {
                Some(rva) => u64::from(rva.0),
                None => continue,
            };

            // skip 0-sized line infos
            let size = line_info.length.map(u64::from);
            if size == Some(0) {
                continue;
            }

            let file = self.file(line_info.file_index, program)?;
            lines.push(LineInfo {
                address: rva,
                size,
                file,
                line: line_info.line_start.into(),
            });
        }
        lines.sort_by_key(|line| line.address);

        lines.dedup_by(|current, prev| {
            let first_end = prev.size.and_then(|size| prev.address.checked_add(size));
            let is_consecutive = first_end == Some(current.address);
            if is_consecutive && prev.file == current.file && prev.line == current.line {
                prev.size = prev
                    .size
                    .map(|first_size| first_size.saturating_add(current.size.unwrap_or(0)));

                return true;
            }
            false
        });

        Ok(lines)
    }

    /// `program.get_file_info` and `PdbDebugInfo::file_info`. The SRCSRV path and
    /// revision symbolic adds here are the SymCache writer's to add (`SourceServer`):
    /// they are a function of the path, so they do not change which lines compare equal
    /// below, and the cold reader's answers have no place for them.
    fn file(
        &self,
        index: ::pdb::FileIndex,
        program: &LineProgram<'_>,
    ) -> Result<FileInfo<'s>, Broken> {
        if let Some(file) = self.files.borrow().get(&index.0) {
            return Ok(file.clone());
        }
        let file_info = program.get_file_info(index)?;
        // Borrowed from the string table, as symbolic's are: a module has many lines.
        let path: RawString<'s> = match &self.streams.string_table {
            Some(string_table) => file_info.name.to_raw_string(string_table)?,
            None => "".into(),
        };
        let file = FileInfo::from_path(path.as_bytes());
        self.files.borrow_mut().insert(index.0, file.clone());
        Ok(file)
    }

    fn sanitize_lines(func: &mut Function<'_>) {
        let fn_start = func.address;
        let fn_end = func.end_address();
        func.lines.retain(|line| {
            if line.address >= fn_end {
                return false;
            }
            let line_end = match line.size {
                Some(size) => line.address.saturating_add(size),
                None => return true,
            };
            line_end > fn_start
        });
    }

    fn handle_function(
        &self,
        offset: PdbInternalSectionOffset,
        len: u32,
        name: RawString<'_>,
        type_index: TypeIndex,
        program: &LineProgram<'_>,
    ) -> Result<Option<Function<'s>>, Broken> {
        let address = match offset.to_rva(&self.streams.address_map) {
            Some(addr) => u64::from(addr.0),
            None => return Ok(None),
        };

        let name = name.to_string();
        let name = self
            .formatter
            .format_function(&name, self.module_index, type_index)
            .map(Cow::Owned)
            .unwrap_or(name);

        let line_iter = program.lines_for_symbol(offset);
        let lines = self.collect_lines(line_iter, program)?;

        Ok(Some(Function {
            address,
            size: len.into(),
            name: session_name(&name),
            compilation_dir: &[],
            lines,
            inlinees: Vec::new(),
            inline: false,
        }))
    }

    fn handle_procedure(
        &self,
        proc: &ProcedureSymbol<'_>,
        program: &LineProgram<'_>,
    ) -> Result<Option<Function<'s>>, Broken> {
        self.handle_function(proc.offset, proc.len, proc.name, proc.type_index, program)
    }

    fn handle_separated_code(
        &self,
        proc: &ProcedureSymbol<'_>,
        sepcode: &SeparatedCodeSymbol,
        program: &LineProgram<'_>,
    ) -> Result<Option<Function<'s>>, Broken> {
        self.handle_function(
            sepcode.offset,
            sepcode.len,
            proc.name,
            proc.type_index,
            program,
        )
    }

    fn handle_inlinee(
        &self,
        inline_site: InlineSiteSymbol<'_>,
        parent_offset: PdbInternalSectionOffset,
        inlinee: &Inlinee<'_>,
        program: &LineProgram<'_>,
    ) -> Result<Option<Function<'s>>, Broken> {
        let line_iter = inlinee.lines(parent_offset, &inline_site);
        let lines = self.collect_lines(line_iter, program)?;

        let start = match lines.first().map(|line| line.address) {
            Some(address) => address,
            None => return Ok(None),
        };

        let end = match lines
            .last()
            .map(|line| line.address + line.size.unwrap_or(1))
        {
            Some(address) => address,
            None => return Ok(None),
        };

        let name = self
            .formatter
            .format_id(self.module_index, inline_site.inlinee)
            .map_err(|e| Broken::File(e.to_string()))?;

        Ok(Some(Function {
            address: start,
            size: end - start,
            name: session_name(&name),
            compilation_dir: &[],
            lines,
            inlinees: Vec::new(),
            inline: true,
        }))
    }

    fn functions(&self) -> Result<Vec<Function<'s>>, Broken> {
        let program = self.module.line_program()?;
        let mut symbols = self.module.symbols()?;

        let inlinees: BTreeMap<_, _> = self
            .module
            .inlinees()?
            .map(|i| Ok((i.index(), i)))
            .collect()?;

        let mut depth: isize = 0;
        let mut inc_next = false;
        let mut skipped_depth = None;

        let mut functions = Vec::new();
        let mut stack = FunctionStack::default();
        let mut proc_offsets: Vec<(isize, PdbInternalSectionOffset)> = Vec::new();
        let mut last_proc = None;

        while let Some(symbol) = symbols.next()? {
            if inc_next {
                depth += 1;
            }

            inc_next = symbol.starts_scope();
            if symbol.ends_scope() {
                depth -= 1;

                if proc_offsets.last().is_some_and(|&(d, _)| d >= depth) {
                    proc_offsets.pop();
                }
            }

            match skipped_depth {
                Some(skipped) if depth > skipped => continue,
                _ => skipped_depth = None,
            }

            if symbol.ends_scope() {
                stack.flush(depth, &mut functions);
            }

            let function = match symbol.parse() {
                Ok(SymbolData::Procedure(proc)) => {
                    proc_offsets.push((depth, proc.offset));
                    let function = self.handle_procedure(&proc, &program)?;
                    last_proc = Some(proc);
                    function
                }
                Ok(SymbolData::SeparatedCode(sepcode)) => match last_proc.as_ref() {
                    Some(last_proc) if last_proc.offset == sepcode.parent_offset => {
                        self.handle_separated_code(last_proc, &sepcode, &program)?
                    }
                    _ => continue,
                },
                Ok(SymbolData::InlineSite(site)) => {
                    let parent_offset =
                        proc_offsets
                            .last()
                            .map(|&(_, offset)| offset)
                            .ok_or_else(|| {
                                Broken::File("unexpected inline function without parent".into())
                            })?;

                    // Symbolic skips inlinees it cannot read rather than the module.
                    if let Some(inlinee) = inlinees.get(&site.inlinee) {
                        self.handle_inlinee(site, parent_offset, inlinee, &program)
                            .ok()
                            .flatten()
                    } else {
                        None
                    }
                }
                _ => continue,
            };

            match function {
                Some(mut function) => {
                    Self::sanitize_lines(&mut function);
                    stack.push(depth, function)
                }
                None => skipped_depth = Some(depth),
            }
        }

        stack.flush(0, &mut functions);

        Ok(functions)
    }
}

/// A function's name as symbolic's PDB session gives it.
fn session_name<'s>(name: &str) -> Name<'s> {
    Name::new(name.to_owned(), NameMangling::Unmangled, Language::Unknown)
}

/// symbolic-debuginfo's `FunctionStack` (crate-private there): assembles inlinee trees
/// from the flat, depth-tagged symbol list.
#[derive(Default)]
struct FunctionStack<'s>(Vec<(isize, Function<'s>)>);

impl<'s> FunctionStack<'s> {
    fn push(&mut self, depth: isize, function: Function<'s>) {
        self.0.push((depth, function));
    }

    fn flush(&mut self, depth: isize, destination: &mut Vec<Function<'s>>) {
        let mut inlinee: Option<Function<'s>> = None;
        while let Some((fn_depth, mut function)) = self.0.pop() {
            if let Some(inlinee) = inlinee.take() {
                function.inlinees.push(inlinee);
            }
            if fn_depth < depth {
                self.0.push((fn_depth, function));
                return;
            }

            if function.inline {
                inlinee = Some(function);
            } else {
                function.inlinees.sort_by_key(|func| func.address);
                destination.push(function);
            }
        }
    }
}
