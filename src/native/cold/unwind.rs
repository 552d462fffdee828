//! Unwinding from a module's own DWARF CFI (`.eh_frame`, `.debug_frame`) while its CFI
//! cache is still being built: gimli finds the one FDE that covers an address and runs
//! its program to that address, and the row is applied to the stack walker the way the
//! CFI cache's Breakpad `STACK CFI` records of the same file would be.
//!
//! The CFI cache is symbolic-cfi's translation of every row into Breakpad text, which
//! minidump-unwind's `SymbolFile::walk_frame` evaluates. To give the same answers, the
//! rules for an address are gathered here exactly as that text accumulates them: a
//! record only states what changed since the previous row, so a register whose rule the
//! DWARF drops (becomes undefined) keeps its last written rule; rules symbolic cannot
//! write (DWARF expressions, unnamed registers) leave the previous one in place; the
//! return address register is `.ra`; and on AArch64 an FDE whose first row says nothing
//! about the return address gets `.ra: x30`. `tests` compares both on every address of
//! real binaries.
//!
//! Where this deliberately differs: a row whose CFA is a DWARF expression (PLT stubs)
//! gives no rules here (the walker falls back to frame pointers or scanning), where the
//! Breakpad text keeps the previous row's CFA; and a file whose CFI symbolic rejects as
//! a whole (one malformed FDE aborts its conversion) is still unwound here, FDE by FDE.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, DebugFrameOffset, EhFrame, EhFrameHdr,
    EhFrameOffset, EndianSlice, FrameDescriptionEntry, Register, RegisterRule, RunTimeEndian,
    UnwindContext, UnwindSection,
};
use minidump::Module;
use minidump_unwind::FrameWalker;
use symbolic::common::CpuFamily;
use symbolic::debuginfo::Object;
use symbolic::debuginfo::dwarf::Dwarf;
use symbolic::debuginfo::elf::ElfObject;

use super::LAZY_READ_SHARE;
use crate::cache::ConversionBudget;
use crate::error::isolate_blocking;
use crate::lookup::ObjectHandle;

type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// FDEs indexed per module when there is no `.eh_frame_hdr` table to search: 32 bytes
/// each, so at most 32 MiB. A module with more is not unwound lazily; its CFI cache is
/// awaited instead.
const MAX_INDEXED_FDES: usize = 1 << 20;

/// Register names by DWARF number, as symbolic-cfi writes them into Breakpad records
/// (its `X86_64` and `ARM64` tables, with the `$` that the walker strips).
static X86_64: &[&str] = &[
    "$rax", "$rdx", "$rcx", "$rbx", "$rsi", "$rdi", "$rbp", "$rsp", "$r8", "$r9", "$r10", "$r11",
    "$r12", "$r13", "$r14", "$r15", "$rip", "$xmm0", "$xmm1", "$xmm2", "$xmm3", "$xmm4", "$xmm5",
    "$xmm6", "$xmm7", "$xmm8", "$xmm9", "$xmm10", "$xmm11", "$xmm12", "$xmm13", "$xmm14", "$xmm15",
    "$st0", "$st1", "$st2", "$st3", "$st4", "$st5", "$st6", "$st7", "$mm0", "$mm1", "$mm2", "$mm3",
    "$mm4", "$mm5", "$mm6", "$mm7", "$rflags", "$es", "$cs", "$ss", "$ds", "$fs", "$gs",
    "$unused1", "$unused2", "$fs.base", "$gs.base", "$unused3", "$unused4", "$tr", "$ldtr",
    "$mxcsr", "$fcw", "$fsw",
];

static ARM64: &[&str] = &[
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14",
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",
    "x28", "x29", "x30", "sp", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "",
    "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "v0", "v1", "v2", "v3", "v4", "v5",
    "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19",
    "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    fn of(family: CpuFamily) -> Option<Self> {
        match family {
            CpuFamily::Amd64 => Some(Arch::Amd64),
            CpuFamily::Arm64 => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// The name the walker knows the register by (Breakpad's, without `$`).
    fn register_name(self, register: Register) -> Option<&'static str> {
        let table = match self {
            Arch::Amd64 => X86_64,
            Arch::Arm64 => ARM64,
        };
        let name = *table.get(usize::from(register.0))?;
        (!name.is_empty()).then(|| name.trim_start_matches('$'))
    }
}

/// Which section an FDE is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frames {
    Debug,
    Eh,
}

/// One FDE of the index: the addresses it covers (SVMAs) and where it is.
#[derive(Clone, Copy, Debug)]
struct IndexedFde {
    start: u64,
    end: u64,
    offset: usize,
    frames: Frames,
}

/// How FDEs are found.
enum FdeLookup {
    /// `.eh_frame` alone, with a binary search table in `.eh_frame_hdr`.
    EhFrameHdr,
    /// Every FDE of both sections, sorted by address.
    Index(Vec<IndexedFde>),
}

/// How the value of one caller register is recovered, as a Breakpad rule says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recover {
    /// The callee's register of that name (`SameValue`, `Register`).
    Register(&'static str),
    /// `.cfa N +` (`ValOffset`).
    Cfa(i64),
    /// `.cfa N + ^` (`Offset`).
    AtCfa(i64),
}

/// The rules for one address, as `SymbolFile::walk_frame` would assemble them from the
/// `STACK CFI INIT` record and the deltas up to the address.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rules {
    /// Where the FDE (the `STACK CFI INIT` record) starts, relative to the image.
    init_address: u64,
    cfa: Option<(&'static str, i64)>,
    ra: Option<Recover>,
    registers: BTreeMap<&'static str, Recover>,
}

/// A section's bytes, borrowed from the file, or decompressed once and kept.
enum SectionData {
    InFile,
    Owned(Vec<u8>),
}

struct SectionInfo {
    address: u64,
    data: SectionData,
}

impl SectionInfo {
    fn of(elf: &ElfObject<'_>, name: &str) -> Option<Self> {
        let section = elf.section(name)?;
        Some(SectionInfo {
            address: section.address,
            data: match section.data {
                Cow::Borrowed(_) => SectionData::InFile,
                Cow::Owned(bytes) => SectionData::Owned(bytes),
            },
        })
    }

    fn bytes<'a>(&'a self, elf: &ElfObject<'a>, name: &str) -> Option<&'a [u8]> {
        match &self.data {
            SectionData::Owned(bytes) => Some(bytes),
            // Found again each time (a walk over the section headers) rather than kept:
            // the slice borrows from the file, which the handle owns.
            SectionData::InFile => match elf.section(name)?.data {
                Cow::Borrowed(bytes) => Some(bytes),
                Cow::Owned(_) => None,
            },
        }
    }
}

/// The sections of one lookup, borrowed for its duration.
struct Sections<'a> {
    endian: RunTimeEndian,
    debug_frame: Option<(&'a [u8], u64)>,
    eh_frame: Option<(&'a [u8], u64)>,
    eh_frame_hdr: Option<(&'a [u8], u64)>,
}

impl<'a> Sections<'a> {
    /// What symbolic-cfi gives gimli: only the `.eh_frame` base (each section's own
    /// address), so pointers relative to the text or data base fail alike.
    fn bases(address: u64) -> BaseAddresses {
        BaseAddresses::default().set_eh_frame(address)
    }

    fn debug_frame(&self) -> Option<(DebugFrame<Slice<'a>>, BaseAddresses)> {
        let (data, address) = self.debug_frame?;
        let mut section = DebugFrame::new(data, self.endian);
        // Both architectures `Arch` knows are 64-bit, as symbolic-cfi sets it.
        section.set_address_size(8);
        Some((section, Self::bases(address)))
    }

    fn eh_frame(&self) -> Option<(EhFrame<Slice<'a>>, BaseAddresses)> {
        let (data, address) = self.eh_frame?;
        let mut section = EhFrame::new(data, self.endian);
        section.set_address_size(8);
        Some((section, Self::bases(address)))
    }
}

/// Unwind rules read from one module's file on demand.
pub struct LazyUnwinder {
    object: Arc<ObjectHandle>,
    arch: Arch,
    load_address: u64,
    endian: RunTimeEndian,
    debug_frame: Option<SectionInfo>,
    eh_frame: Option<SectionInfo>,
    eh_frame_hdr: Option<SectionInfo>,
    lookup: FdeLookup,
}

impl LazyUnwinder {
    /// [`open`](Self::open) on a blocking thread (a panic there only means "no
    /// unwinder"), holding its share of the conversion budget while it inflates and
    /// indexes the CFI sections, as `open_within` in `open.rs` does for symbols.
    pub async fn open_within(budget: &ConversionBudget, object: Arc<ObjectHandle>) -> Option<Self> {
        if !matches!(object.object(), Some(Object::Elf(_))) {
            return None;
        }
        let weight =
            (object.size() / LAZY_READ_SHARE).saturating_add(object.inflated_size(Some(&[
                "debug_frame",
                "eh_frame",
                "eh_frame_hdr",
            ])));
        let _permit = budget.acquire(weight).await;
        isolate_blocking("lazy unwinder", move || Ok(Self::open(object)))
            .await
            .ok()
            .flatten()
    }

    /// An unwinder for an ELF file with DWARF CFI for x86_64 or AArch64; `None` for
    /// anything else (the caller waits for the CFI cache then). Reads the section headers
    /// and, without an `.eh_frame_hdr` table, indexes every FDE: call it isolated from
    /// panics, on a blocking thread.
    pub fn open(object: Arc<ObjectHandle>) -> Option<Self> {
        let Some(Object::Elf(elf)) = object.object() else {
            return None;
        };
        let arch = Arch::of(elf.arch().cpu_family())?;
        let (load_address, endian) = (elf.load_address(), elf.endianity());
        let debug_frame = SectionInfo::of(elf, "debug_frame");
        let eh_frame = SectionInfo::of(elf, "eh_frame");
        if debug_frame.is_none() && eh_frame.is_none() {
            return None;
        }
        let eh_frame_hdr = SectionInfo::of(elf, "eh_frame_hdr");
        let mut unwinder = LazyUnwinder {
            object: object.clone(),
            arch,
            load_address,
            endian,
            debug_frame,
            eh_frame,
            eh_frame_hdr,
            lookup: FdeLookup::Index(Vec::new()),
        };
        let lookup = unwinder.with_sections(|sections| {
            if sections.debug_frame.is_none() && usable_hdr(sections) {
                Some(FdeLookup::EhFrameHdr)
            } else {
                index(sections, load_address).map(FdeLookup::Index)
            }
        })??;
        unwinder.lookup = lookup;
        Some(unwinder)
    }

    fn with_sections<T>(&self, f: impl FnOnce(&Sections<'_>) -> T) -> Option<T> {
        let Some(Object::Elf(elf)) = self.object.object() else {
            return None;
        };
        fn get<'a>(
            elf: &'a ElfObject<'a>,
            info: &'a Option<SectionInfo>,
            name: &str,
        ) -> Option<Option<(&'a [u8], u64)>> {
            match info {
                Some(info) => Some(Some((info.bytes(elf, name)?, info.address))),
                None => Some(None),
            }
        }
        let sections = Sections {
            endian: self.endian,
            debug_frame: get(elf, &self.debug_frame, "debug_frame")?,
            eh_frame: get(elf, &self.eh_frame, "eh_frame")?,
            eh_frame_hdr: get(elf, &self.eh_frame_hdr, "eh_frame_hdr")?,
        };
        Some(f(&sections))
    }

    /// Whether an FDE covers `relative_addr`, as the CFI cache's `covers` would say: a
    /// module with CFI that does not cover an address has no code there. A module whose
    /// sections hold no FDE at all has no opinion.
    pub fn covers(&self, relative_addr: u64) -> bool {
        if matches!(&self.lookup, FdeLookup::Index(index) if index.is_empty()) {
            return true;
        }
        let Some(svma) = relative_addr.checked_add(self.load_address) else {
            return false;
        };
        self.with_sections(|sections| self.find(sections, svma).is_some())
            .unwrap_or(false)
    }

    /// Computes the caller's registers for the walker's instruction, like
    /// `SymbolFile::walk_frame` with the CFI cache of this file.
    pub fn walk_frame(&self, module: &dyn Module, walker: &mut dyn FrameWalker) -> Option<()> {
        let relative = walker
            .get_instruction()
            .checked_sub(module.base_address())?;
        let rules = self.rules(relative)?;
        walker.set_cfi_rules_start_address(Some(
            module.base_address().wrapping_add(rules.init_address),
        ));
        let result = apply(&rules, walker);
        // As the Breakpad path does: the address must not leak into another provider's
        // evaluation, even when this one failed.
        walker.set_cfi_rules_start_address(None);
        result
    }

    /// The rules for `relative_addr`, or `None` when no FDE covers it or its row cannot
    /// be expressed as Breakpad rules.
    fn rules(&self, relative_addr: u64) -> Option<Rules> {
        let svma = relative_addr.checked_add(self.load_address)?;
        self.with_sections(|sections| {
            let (fde, frames) = self.find(sections, svma)?;
            match frames {
                Frames::Debug => {
                    let (section, bases) = sections.debug_frame()?;
                    self.rules_in(&section, &bases, &fde, svma)
                }
                Frames::Eh => {
                    let (section, bases) = sections.eh_frame()?;
                    self.rules_in(&section, &bases, &fde, svma)
                }
            }
        })?
    }

    /// The FDE that the CFI cache would use for `svma`.
    fn find<'a>(
        &self,
        sections: &Sections<'a>,
        svma: u64,
    ) -> Option<(FrameDescriptionEntry<Slice<'a>>, Frames)> {
        let (fde, frames) = match &self.lookup {
            FdeLookup::EhFrameHdr => {
                let (eh_frame, bases) = sections.eh_frame()?;
                let (hdr_data, hdr_address) = sections.eh_frame_hdr?;
                let bases = bases.set_eh_frame_hdr(hdr_address);
                let hdr = EhFrameHdr::new(hdr_data, sections.endian)
                    .parse(&bases, 8)
                    .ok()?;
                let pointer = hdr.table()?.lookup(svma, &bases).ok()?.direct().ok()?;
                // gimli's `pointer_to_offset` subtracts unchecked; a hostile table can
                // point below the section.
                let offset = pointer.checked_sub(hdr.eh_frame_ptr().direct().ok()?)?;
                let fde = eh_frame
                    .fde_from_offset(
                        &bases,
                        EhFrameOffset(usize::try_from(offset).ok()?),
                        EhFrame::cie_from_offset,
                    )
                    .ok()?;
                (fde, Frames::Eh)
            }
            FdeLookup::Index(index) => {
                let at = index
                    .partition_point(|fde| fde.start <= svma)
                    .checked_sub(1)?;
                let entry = index[at];
                if svma >= entry.end {
                    return None;
                }
                let fde = match entry.frames {
                    Frames::Debug => {
                        let (section, bases) = sections.debug_frame()?;
                        section
                            .fde_from_offset(
                                &bases,
                                DebugFrameOffset(entry.offset),
                                DebugFrame::cie_from_offset,
                            )
                            .ok()?
                    }
                    Frames::Eh => {
                        let (section, bases) = sections.eh_frame()?;
                        section
                            .fde_from_offset(
                                &bases,
                                EhFrameOffset(entry.offset),
                                EhFrame::cie_from_offset,
                            )
                            .ok()?
                    }
                };
                (fde, entry.frames)
            }
        };
        (emitted(&fde, self.load_address) && fde.contains(svma)).then_some((fde, frames))
    }

    /// Runs the FDE's program up to `svma`, gathering rules as the Breakpad records
    /// written from its rows would state them (see symbolic-cfi's `process_fde`).
    fn rules_in<'a, S: UnwindSection<Slice<'a>>>(
        &self,
        section: &S,
        bases: &BaseAddresses,
        fde: &FrameDescriptionEntry<Slice<'a>>,
        svma: u64,
    ) -> Option<Rules> {
        let ra = fde.cie().return_address_register();
        let mut ctx = UnwindContext::new();
        let mut table = fde.rows(section, bases, &mut ctx).ok()?;
        let mut rules = Rules {
            init_address: fde.initial_address().checked_sub(self.load_address)?,
            cfa: None,
            ra: None,
            registers: BTreeMap::new(),
        };
        let mut cfa_cache = None;
        let mut rule_cache: HashMap<Register, RegisterRule<usize>> = HashMap::new();
        let mut first = true;
        let mut cfa_is_expression = false;
        loop {
            let row = match table.next_row() {
                Ok(Some(row)) => row,
                Ok(None) => break,
                // symbolic-cfi skips these rows and goes on.
                Err(gimli::Error::UnknownCallFrameInstruction(_))
                | Err(gimli::Error::TooManyRegisterRules) => continue,
                Err(_) => return None,
            };
            if row.start_address() > svma {
                break;
            }
            if cfa_cache.as_ref() != Some(row.cfa()) {
                cfa_cache = Some(row.cfa().clone());
                if let CfaRule::RegisterAndOffset { register, offset } = row.cfa()
                    && let Some(name) = self.arch.register_name(*register)
                {
                    rules.cfa = Some((name, *offset));
                }
            }
            cfa_is_expression = matches!(row.cfa(), CfaRule::Expression(_));
            let mut ra_written = false;
            for (register, rule) in row.registers() {
                if rule_cache.get(register) == Some(rule) {
                    continue;
                }
                rule_cache.insert(*register, rule.clone());
                if *register == ra {
                    ra_written = true;
                }
                self.write_rule(&mut rules, *register, rule, ra);
            }
            if first && !ra_written && self.arch == Arch::Arm64 {
                // symbolic-cfi's default for architectures that return through a
                // register.
                if let Some(name) = self.arch.register_name(ra) {
                    rules.ra = Some(Recover::Register(name));
                }
            }
            first = false;
        }
        // A CFA computed by a DWARF expression has no Breakpad form; rather than the
        // stale rule of an earlier row, no rules.
        (!cfa_is_expression).then_some(rules)
    }

    /// symbolic-cfi's `write_register_rule`: the rules it can write replace the
    /// register's previous one; the others leave it.
    fn write_rule(
        &self,
        rules: &mut Rules,
        register: Register,
        rule: &RegisterRule<usize>,
        ra: Register,
    ) {
        let recover = match rule {
            RegisterRule::SameValue => match self.arch.register_name(register) {
                Some(name) => Recover::Register(name),
                None => return,
            },
            RegisterRule::Offset(offset) => Recover::AtCfa(*offset),
            RegisterRule::ValOffset(offset) => Recover::Cfa(*offset),
            RegisterRule::Register(other) => match self.arch.register_name(*other) {
                Some(name) => Recover::Register(name),
                None => return,
            },
            _ => return,
        };
        if register == ra {
            rules.ra = Some(recover);
        } else if let Some(name) = self.arch.register_name(register) {
            rules.registers.insert(name, recover);
        }
    }
}

/// Whether symbolic-cfi writes records for this FDE at all.
fn emitted<R: gimli::Reader>(fde: &FrameDescriptionEntry<R>, load_address: u64) -> bool {
    fde.initial_address() != u64::MAX && fde.initial_address() >= load_address && fde.len() > 0
}

/// Whether `.eh_frame_hdr` has a search table over this `.eh_frame`.
fn usable_hdr(sections: &Sections<'_>) -> bool {
    let (Some((_, eh_address)), Some((hdr_data, hdr_address))) =
        (sections.eh_frame, sections.eh_frame_hdr)
    else {
        return false;
    };
    let bases = Sections::bases(eh_address).set_eh_frame_hdr(hdr_address);
    let Ok(hdr) = EhFrameHdr::new(hdr_data, sections.endian).parse(&bases, 8) else {
        return false;
    };
    // Table offsets are counted from the `.eh_frame` the header points to.
    hdr.table().is_some() && hdr.eh_frame_ptr().direct().ok() == Some(eh_address)
}

/// Every FDE that symbolic-cfi would write, sorted by address, with overlaps resolved
/// as minidump-unwind's symbol file resolves them (the first of overlapping ranges in
/// address order wins; `.debug_frame` before `.eh_frame`). `None` past the cap.
fn index(sections: &Sections<'_>, load_address: u64) -> Option<Vec<IndexedFde>> {
    let mut fdes = Vec::new();
    if let Some((section, bases)) = sections.debug_frame() {
        index_section(&section, &bases, Frames::Debug, load_address, &mut fdes)?;
    }
    if let Some((section, bases)) = sections.eh_frame() {
        index_section(&section, &bases, Frames::Eh, load_address, &mut fdes)?;
    }
    // Stable: for equal ranges, `.debug_frame`'s (written first) wins.
    fdes.sort_by_key(|fde| (fde.start, fde.end));
    let mut kept: Vec<IndexedFde> = Vec::with_capacity(fdes.len());
    for fde in fdes {
        if kept.last().is_some_and(|last| fde.start < last.end) {
            continue;
        }
        kept.push(fde);
    }
    kept.shrink_to_fit();
    Some(kept)
}

fn index_section<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    frames: Frames,
    load_address: u64,
    out: &mut Vec<IndexedFde>,
) -> Option<()> {
    let mut entries = section.entries(bases);
    // symbolic-cfi stops at the first entry it cannot read, keeping what came before.
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            continue;
        };
        if !emitted(&fde, load_address) {
            continue;
        }
        if out.len() >= MAX_INDEXED_FDES {
            return None;
        }
        out.push(IndexedFde {
            start: fde.initial_address(),
            end: fde.end_address(),
            offset: fde.offset(),
            frames,
        });
    }
    Some(())
}

/// `walk_with_stack_cfi` for rules gathered from DWARF: the CFA first, then the return
/// address, then every other register (one that cannot be computed is cleared).
fn apply(rules: &Rules, walker: &mut dyn FrameWalker) -> Option<()> {
    let (cfa_register, cfa_offset) = rules.cfa?;
    let ra = rules.ra?;
    let cfa = walker
        .get_callee_register(cfa_register)?
        .wrapping_add(cfa_offset as u64);
    let ra = recover(ra, cfa, walker)?;
    walker.set_cfa(cfa)?;
    walker.set_ra(ra)?;
    for (name, rule) in &rules.registers {
        match recover(*rule, cfa, walker) {
            Some(value) => {
                walker.set_caller_register(name, value);
            }
            None => walker.clear_caller_register(name),
        }
    }
    Some(())
}

fn recover(rule: Recover, cfa: u64, walker: &dyn FrameWalker) -> Option<u64> {
    match rule {
        Recover::Register(name) => walker.get_callee_register(name),
        Recover::Cfa(offset) => Some(cfa.wrapping_add(offset as u64)),
        Recover::AtCfa(offset) => walker.get_register_at_address(cfa.wrapping_add(offset as u64)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use minidump::MinidumpModule;
    use symbolic::cfi::CfiCache;
    use symbolic::common::ByteView;

    use super::*;
    use crate::cache::DerivedFormat;
    use crate::lookup::{FileFormat, ObjectFile, ObjectHint, ObjectLimits};
    use crate::native::cfi::{CfiFormat, CfiModule};
    use crate::sources::ObjectId;

    /// Where the fake module is mapped: any base, as long as it is not the file's own
    /// load address, so a mix-up of relative addresses and SVMAs shows.
    const BASE: u64 = 0x5555_5555_4000;

    fn handle(data: Vec<u8>) -> Arc<ObjectHandle> {
        let hint = ObjectHint {
            id: ObjectId::default(),
            limits: ObjectLimits::default(),
        };
        ObjectFile::load(ByteView::from_vec(data), &hint).unwrap()
    }

    fn cfi_cache(handle: &ObjectHandle) -> Arc<CfiModule> {
        let cache = CfiCache::from_object(handle.object().unwrap()).unwrap();
        let mut bytes = Vec::new();
        cache.write_to(&mut bytes).unwrap();
        CfiFormat::load(ByteView::from_vec(bytes))
            .unwrap()
            .expect("the file has CFI")
    }

    /// What a walk did to the walker.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Outcome {
        result: Option<()>,
        cfa: Option<u64>,
        ra: Option<u64>,
        set: BTreeMap<String, u64>,
        cleared: BTreeSet<String>,
        start_addresses: Vec<Option<u64>>,
    }

    /// A walker whose callee registers and stack hold values derived from their names
    /// and addresses, with some registers and some stack words unknown.
    struct FakeWalker {
        instruction: u64,
        registers: HashMap<&'static str, u64>,
        outcome: Outcome,
    }

    impl FakeWalker {
        fn new(arch: Arch, instruction: u64) -> Self {
            let table = match arch {
                Arch::Amd64 => X86_64,
                Arch::Arm64 => ARM64,
            };
            let registers = table
                .iter()
                .map(|name| name.trim_start_matches('$'))
                .filter(|name| !name.is_empty())
                .enumerate()
                // Vector registers and r12/x21 unknown, as in a dump that lacks them.
                .filter(|(_, name)| {
                    !name.starts_with("xmm")
                        && !name.starts_with('v')
                        && !matches!(*name, "r12" | "x21")
                })
                .map(|(i, name)| (name, 0x7ffd_0000_0000 + 0x1000 * i as u64))
                .collect();
            FakeWalker {
                instruction,
                registers,
                outcome: Outcome::default(),
            }
        }
    }

    impl FrameWalker for FakeWalker {
        fn get_instruction(&self) -> u64 {
            self.instruction
        }
        fn has_grand_callee(&self) -> bool {
            false
        }
        fn get_grand_callee_parameter_size(&self) -> u32 {
            0
        }
        fn get_register_at_address(&self, address: u64) -> Option<u64> {
            (!(address >> 3).is_multiple_of(5)).then(|| address.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        }
        fn get_callee_register(&self, name: &str) -> Option<u64> {
            self.registers.get(name).copied()
        }
        fn set_caller_register(&mut self, name: &str, val: u64) -> Option<()> {
            self.outcome.set.insert(name.to_owned(), val);
            Some(())
        }
        fn clear_caller_register(&mut self, name: &str) {
            self.outcome.cleared.insert(name.to_owned());
        }
        fn set_cfa(&mut self, val: u64) -> Option<()> {
            self.outcome.cfa = Some(val);
            Some(())
        }
        fn set_ra(&mut self, val: u64) -> Option<()> {
            self.outcome.ra = Some(val);
            Some(())
        }
        fn set_cfi_rules_start_address(&mut self, addr: Option<u64>) {
            self.outcome.start_addresses.push(addr);
        }
    }

    fn walk(arch: Arch, relative: u64, f: impl FnOnce(&mut FakeWalker) -> Option<()>) -> Outcome {
        let mut walker = FakeWalker::new(arch, BASE + relative);
        walker.outcome.result = f(&mut walker);
        walker.outcome
    }

    /// Relative addresses worth comparing: the first, second, middle and last byte of
    /// every row of every FDE, and whether that row's CFA is a DWARF expression.
    fn row_addresses(unwinder: &LazyUnwinder) -> Vec<(u64, bool)> {
        let load = unwinder.load_address;
        let mut out = Vec::new();
        unwinder
            .with_sections(|sections| {
                let mut rows_of = |fde: &FrameDescriptionEntry<Slice<'_>>, rows: Vec<_>| {
                    if !emitted(fde, load) {
                        return;
                    }
                    for (start, end, expression) in rows {
                        let (start, end): (u64, u64) = (start, end);
                        if start >= end {
                            continue;
                        }
                        for svma in [start, start + 1, start + (end - start) / 2, end - 1] {
                            if svma < end {
                                out.push((svma - load, expression));
                            }
                        }
                    }
                };
                if let Some((section, bases)) = sections.debug_frame() {
                    collect(&section, &bases, &mut rows_of);
                }
                if let Some((section, bases)) = sections.eh_frame() {
                    collect(&section, &bases, &mut rows_of);
                }
            })
            .unwrap();
        out.sort();
        out.dedup();
        out
    }

    fn collect<'a, S: UnwindSection<Slice<'a>>>(
        section: &S,
        bases: &BaseAddresses,
        f: &mut impl FnMut(&FrameDescriptionEntry<Slice<'a>>, Vec<(u64, u64, bool)>),
    ) {
        let mut entries = section.entries(bases);
        let mut ctx = UnwindContext::new();
        while let Some(entry) = entries.next().unwrap() {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let fde = partial.parse(S::cie_from_offset).unwrap();
            let mut table = fde.rows(section, bases, &mut ctx).unwrap();
            let mut rows = Vec::new();
            while let Some(row) = table.next_row().unwrap() {
                let expression = matches!(row.cfa(), CfaRule::Expression(_));
                rows.push((row.start_address(), row.end_address(), expression));
            }
            f(&fde, rows);
        }
    }

    /// Walks every row of every FDE of `data` both ways; returns how many addresses
    /// gave rules and how many rows had a CFA expression.
    fn lazy_matches_cfi_cache(data: Vec<u8>) -> (usize, usize) {
        let handle = handle(data);
        let cache = cfi_cache(&handle);
        let unwinder = LazyUnwinder::open(handle.clone()).expect("an ELF file with CFI");
        let arch = unwinder.arch;
        let module = MinidumpModule::new(BASE, 0x1000_0000, "module");
        let (mut walked, mut expressions) = (0, 0);
        let addresses = row_addresses(&unwinder);
        assert!(!addresses.is_empty());
        for (relative, expression) in addresses {
            assert!(cache.covers(relative), "{relative:#x}");
            assert!(unwinder.covers(relative), "{relative:#x}");
            let lazy = walk(arch, relative, |w| unwinder.walk_frame(&module, w));
            if expression {
                // Breakpad keeps an earlier row's CFA there; we give no rules.
                expressions += 1;
                assert_eq!(lazy.result, None, "{relative:#x}");
                assert_eq!(lazy.cfa, None, "{relative:#x}");
                continue;
            }
            let breakpad = walk(arch, relative, |w| cache.walk_frame(&module, w));
            assert_eq!(lazy, breakpad, "at {relative:#x}");
            if lazy.result.is_some() {
                walked += 1;
            }
        }
        // Around and between the FDEs, coverage agrees everywhere.
        let end = unwinder
            .with_sections(|s| s.eh_frame.map(|(_, a)| a))
            .unwrap();
        let end = end.unwrap_or(0).saturating_sub(unwinder.load_address) + 0x100;
        for relative in (0..end).step_by(if end > 0x10_0000 { 7 } else { 1 }) {
            assert_eq!(
                unwinder.covers(relative),
                cache.covers(relative),
                "covers({relative:#x})"
            );
        }
        (walked, expressions)
    }

    fn fixture(path: &str) -> Vec<u8> {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures")
                .join(path),
        )
        .unwrap()
    }

    #[test]
    fn the_minidump_programs_unwind_as_their_cfi_caches_do() {
        for path in ["minidump/nofp/crash", "minidump/fp/crash"] {
            let (walked, expressions) = lazy_matches_cfi_cache(fixture(path));
            eprintln!("{path}: {walked} addresses walked, {expressions} CFA expressions");
            assert!(walked > 20, "{path}: {walked}");
            // The PLT's stubs compute their CFA with an expression.
            assert!(expressions > 0, "{path}");
        }
    }

    #[test]
    fn static_programs_with_libc_unwind_as_their_cfi_caches_do() {
        // A static non-PIE executable (load address 0x400000) with glibc's own
        // hand-written CFI (signal frames, remember/restore state), and a static PIE.
        for (path, at_least) in [("lazy/elf/prog", 4000), ("native/elf/crash", 50)] {
            let (walked, expressions) = lazy_matches_cfi_cache(fixture(path));
            eprintln!("{path}: {walked} addresses walked, {expressions} CFA expressions");
            assert!(walked >= at_least, "{path}: {walked}");
        }
    }

    /// fixtures/lazy_unwind/rules.s, assembled and linked by gcc.
    fn hand_written_cfi() -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rules.so");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/lazy_unwind/rules.s");
        let status = std::process::Command::new("gcc")
            .args(["-shared", "-nostdlib", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .expect("gcc runs");
        assert!(status.success());
        std::fs::read(out).unwrap()
    }

    #[test]
    fn rules_the_dwarf_drops_or_breakpad_cannot_state_unwind_as_the_cfi_cache_does() {
        let data = hand_written_cfi();
        let (walked, expressions) = lazy_matches_cfi_cache(data.clone());
        // Some walks fail by design (`outermost` has no return address at first, the
        // fake stack has holes); the count shows that most rows were compared.
        assert!(walked >= 20, "{walked}");
        assert_eq!(expressions, 1);

        // The same CFI read as AArch64's: other register names, and `.ra` from the
        // return-address register when an FDE's first row has no rule for it.
        let mut arm64 = data;
        arm64[18..20].copy_from_slice(&183u16.to_le_bytes());
        let unwinder = LazyUnwinder::open(handle(arm64.clone())).unwrap();
        assert_eq!(unwinder.arch, Arch::Arm64);
        let (walked, expressions) = lazy_matches_cfi_cache(arm64);
        assert!(walked >= 20, "{walked}");
        assert_eq!(expressions, 1);
    }

    #[test]
    fn without_eh_frame_hdr_the_fdes_are_indexed() {
        // The same file with its `.eh_frame_hdr` renamed away: the index must find the
        // same FDEs the binary search table does.
        let data = fixture("minidump/nofp/crash");
        let position = data
            .windows(b".eh_frame_hdr\0".len())
            .position(|w| w == b".eh_frame_hdr\0")
            .unwrap();
        let mut renamed = data.clone();
        renamed[position..position + 4].copy_from_slice(b".xh_");
        let unwinder = LazyUnwinder::open(handle(renamed.clone())).unwrap();
        assert!(matches!(&unwinder.lookup, FdeLookup::Index(index) if !index.is_empty()));
        let with_hdr = LazyUnwinder::open(handle(data)).unwrap();
        assert!(matches!(with_hdr.lookup, FdeLookup::EhFrameHdr));
        lazy_matches_cfi_cache(renamed);
    }

    #[test]
    fn files_without_dwarf_cfi_have_no_lazy_unwinder() {
        // A debug file (`.eh_frame` stripped to NOBITS), a PE and a Breakpad file.
        for path in [
            "minidump/nofp/crash.debug",
            "native/pe/crash.exe",
            "minidump/nofp/crash.sym",
        ] {
            assert!(
                LazyUnwinder::open(handle(fixture(path))).is_none(),
                "{path}"
            );
        }
    }

    #[test]
    fn garbage_sections_give_no_rules_and_no_panic() {
        // Every byte of `.eh_frame` and `.eh_frame_hdr` overwritten in turn with
        // patterns: the unwinder may find nothing, never panic or loop.
        let data = fixture("minidump/nofp/crash");
        let handle0 = handle(data.clone());
        let Some(Object::Elf(elf)) = handle0.object() else {
            unreachable!()
        };
        let ranges: Vec<_> = ["eh_frame", "eh_frame_hdr"]
            .iter()
            .map(|name| {
                let s = elf.section(name).unwrap();
                let offset = s.offset as usize;
                offset..offset + s.data.len()
            })
            .collect();
        let module = MinidumpModule::new(BASE, 0x1000_0000, "module");
        for range in ranges {
            for at in range.clone().step_by(3) {
                for byte in [0x00, 0xff, 0x7f, 0x80] {
                    let mut bad = data.clone();
                    bad[at] = byte;
                    let Some(unwinder) = LazyUnwinder::open(handle(bad)) else {
                        continue;
                    };
                    for relative in [0x1000, 0x1139, 0x1150, 0x11a0, 0x1200] {
                        unwinder.covers(relative);
                        walk(Arch::Amd64, relative, |w| unwinder.walk_frame(&module, w));
                    }
                }
            }
        }
    }
}
