//! Minidump stackwalking: rust-minidump's processor walks every thread, asking us for
//! unwind rules module by module (CFI caches fetched on demand from the sources); the
//! result is raw stack traces plus the module list with unwind statuses and candidates,
//! ready for ordinary symbolication. A request (or the config) may steer the walk
//! (`UnwindOrder`): this module then takes the frame-pointer steps itself, in the
//! order asked, and ends each stack where the walk leaves real frames behind.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use minidump::format::{MINIDUMP_HANDLE_DESCRIPTOR, MINIDUMP_STREAM_TYPE};
use minidump::system_info::{Cpu, Os};
use minidump::{MinidumpContext, MinidumpModule, MinidumpModuleList, MinidumpSystemInfo, Module};
use minidump_unwind::{
    FileError, FileKind, FillSymbolError, FrameSymbolizer, FrameWalker, SymbolProvider,
};
use symbolic::common::{Arch, ByteView, DebugId};
use tokio::sync::OnceCell;

use super::cfi::{CfiCaches, CfiItem};
use super::cold::{self, AnswerFrom, LazyUnwinder, OwnedLazySymbolizer, Prefer};
use super::interface::{
    CompleteObjectInfo, CompleteStacktrace, CompletedSymbolicationResponse, FrameTrust, HexValue,
    ObjectFileStatus, RawFrame, RawObjectInfo, RawStacktrace, Registers, RewriteRules, SystemInfo,
};
use super::symcache::{OwnedSymCache, SymCaches};
use crate::cache::Scope;
use crate::error::{CacheResult, isolate, isolate_blocking};
use crate::sources::{ObjectId, ObjectType, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectFeatures, UnwindOrder, UnwindStrategy};

pub type Minidump = minidump::Minidump<'static, ByteView<'static>>;

/// Reads a minidump for the stack walker, without a handle data stream that would make
/// rust-minidump (0.27) allocate without bound.
///
/// That stream states its descriptors' size and count, and the crate checks the count
/// against the stream's length by the stated size, which may be 0, before it reserves
/// room for that many descriptors: four bytes of a hostile dump ask for 500 GiB, and the
/// allocator's failure aborts the process, which `isolate` cannot catch. Real
/// descriptors are 32 or 40 bytes (`MINIDUMP_HANDLE_DESCRIPTOR(_2)`). A stream with
/// smaller ones is hidden, the dump is read again from a copy whose directory lists it
/// as unused, which is what the processor makes of a handle stream it cannot read.
pub fn read_minidump(view: ByteView<'static>) -> Result<Minidump, minidump::Error> {
    let minidump = Minidump::read(view.clone())?;
    let handles = MINIDUMP_STREAM_TYPE::HandleDataStream as u32;
    let endian = minidump.endian;
    let read_u32 = |bytes: &[u8], at: usize| -> Option<u32> {
        let word: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(match endian {
            minidump::Endian::Little => u32::from_le_bytes(word),
            minidump::Endian::Big => u32::from_be_bytes(word),
        })
    };
    let min_descriptor = std::mem::size_of::<MINIDUMP_HANDLE_DESCRIPTOR>() as u32;
    let sane = match minidump.get_raw_stream(handles) {
        // The crate gives up on a stream too short for its header, before allocating.
        Ok(stream) => read_u32(stream, 4).is_none_or(|size| size >= min_descriptor),
        Err(_) => true,
    };
    if sane {
        return Ok(minidump);
    }
    tracing::debug!("hiding a minidump's handle data stream with descriptors of impossible size");
    let mut entry = minidump.header.stream_directory_rva as usize;
    let mut data = view.to_vec();
    for _ in 0..minidump.header.stream_count {
        match read_u32(&data, entry) {
            Some(ty) if ty == handles => {
                let unused = MINIDUMP_STREAM_TYPE::UnusedStream as u32;
                let word = match endian {
                    minidump::Endian::Little => unused.to_le_bytes(),
                    minidump::Endian::Big => unused.to_be_bytes(),
                };
                data[entry..entry + 4].copy_from_slice(&word);
            }
            Some(_) => {}
            None => break,
        }
        // A directory entry: the stream type, then its size and offset.
        entry += 12;
    }
    Minidump::read(ByteView::from_vec(data))
}

/// Upstream (and Sentry's ingestion) cut stack traces to this many frames.
const MAX_FRAMES: usize = 256;

/// What the minidump says about the crash, beside its threads and modules.
pub struct MinidumpState {
    timestamp: u64,
    system_info: SystemInfo,
    crashed: bool,
    crash_reason: String,
    assertion: String,
}

impl MinidumpState {
    fn of(state: &minidump_processor::ProcessState) -> Self {
        let info = &state.system_info;
        let cpu_arch = match info.cpu {
            Cpu::X86 => Arch::X86,
            Cpu::X86_64 => Arch::Amd64,
            Cpu::Ppc => Arch::Ppc,
            Cpu::Ppc64 => Arch::Ppc64,
            Cpu::Arm => Arch::Arm,
            Cpu::Arm64 => Arch::Arm64,
            Cpu::Mips => Arch::Mips,
            Cpu::Mips64 => Arch::Mips64,
            _ => Arch::Unknown,
        };
        MinidumpState {
            timestamp: state
                .time
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
            system_info: SystemInfo {
                os_name: os_name(info.os).to_owned(),
                os_version: info.os_version.clone().unwrap_or_default(),
                os_build: info.os_build.clone().unwrap_or_default(),
                cpu_arch,
                device_model: String::new(),
            },
            crashed: state.crashed(),
            crash_reason: state
                .exception_info
                .as_ref()
                .map(|e| format!("{} / {:#x}", e.reason, e.address.0))
                .unwrap_or_default(),
            assertion: state.assertion.clone().unwrap_or_default(),
        }
    }

    pub fn merge_into(mut self, response: &mut CompletedSymbolicationResponse) {
        self.system_info.fill_arch_from(&response.modules);
        response.timestamp = Some(self.timestamp);
        response.system_info = Some(self.system_info);
        response.crashed = Some(self.crashed);
        response.crash_reason = Some(self.crash_reason);
        response.assertion = Some(self.assertion);
    }
}

fn os_name(os: Os) -> &'static str {
    match os {
        Os::Windows => "Windows",
        Os::MacOs => "macOS",
        Os::Ios => "iOS",
        Os::Linux => "Linux",
        Os::Solaris => "Solaris",
        Os::Android => "Android",
        Os::Ps3 => "PS3",
        Os::NaCl => "NaCl",
        Os::Unknown(_) => "",
    }
}

fn object_type_for(os: Os) -> ObjectType {
    match os {
        Os::Windows => ObjectType::Pe,
        Os::MacOs | Os::Ios => ObjectType::Macho,
        Os::Linux | Os::Solaris | Os::Android => ObjectType::Elf,
        _ => ObjectType::Unknown,
    }
}

fn trust(trust: minidump_unwind::FrameTrust) -> FrameTrust {
    use minidump_unwind::FrameTrust as T;
    match trust {
        T::None => FrameTrust::None,
        T::Scan => FrameTrust::Scan,
        T::CfiScan => FrameTrust::CfiScan,
        T::FramePointer => FrameTrust::Fp,
        T::CallFrameInfo => FrameTrust::Cfi,
        T::PreWalked => FrameTrust::PreWalked,
        T::Context => FrameTrust::Context,
    }
}

fn registers(context: &MinidumpContext) -> Registers {
    context
        .valid_registers()
        .map(|(name, value)| (name.to_owned(), HexValue(value)))
        .collect()
}

fn non_empty(name: &str) -> Option<String> {
    (!name.is_empty()).then(|| name.to_owned())
}

/// Modules are told apart by where they are mapped, as the processor sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ModuleKey {
    base: u64,
    size: u64,
}

impl ModuleKey {
    fn of(module: &dyn Module) -> Self {
        ModuleKey {
            base: module.base_address(),
            size: module.size(),
        }
    }
}

/// One computation per module however often (and concurrently) the walker asks.
struct Memo<T>(Mutex<HashMap<ModuleKey, Arc<OnceCell<T>>>>);

impl<T: Clone> Memo<T> {
    fn new() -> Self {
        Memo(Mutex::new(HashMap::new()))
    }

    /// `init` makes the computation only on the first call for `key`: the walker asks
    /// again for every frame and every scanned candidate, and the computation (a lookup
    /// on every source, a cache read, opening a file) is a future of tens of kilobytes,
    /// which, held inline, would be moved with each of those calls, most of a warm walk.
    async fn get_or_init<F: Future<Output = T>>(
        &self,
        key: ModuleKey,
        init: impl FnOnce() -> F,
    ) -> T {
        let cell = self.0.lock().unwrap().entry(key).or_default().clone();
        cell.get_or_init(|| Box::pin(init())).await.clone()
    }
}

/// Feeds the stack walker from our caches, for one minidump.
struct Provider<'a> {
    cfi: &'a CfiCaches,
    symcaches: &'a SymCaches,
    scope: &'a Scope,
    sources: &'a [SourceConfig],
    object_type: ObjectType,
    first_module_debug_id: Option<DebugId>,
    rewrite_first_module: &'a RewriteRules,
    cfi_modules: Memo<Arc<ModuleCfi>>,
    symcache_modules: Memo<CacheResult<ModuleSymbols>>,
    /// A steered walk's order, with what its frame-pointer steps need.
    steered: Option<Steered>,
}

/// What a steered walk (see [`UnwindOrder`]) keeps beside the walker.
struct Steered {
    order: UnwindOrder,
    cpu: Cpu,
    /// The dump's modules: a caller found by its frame pointer must return into one.
    modules: MinidumpModuleList,
    /// The callers (return address, stack pointer) that frame pointers found in
    /// `walk_frame`: the walker labels everything `walk_frame` finds as CFI.
    by_frame_pointer: Mutex<HashSet<(u64, u64)>>,
}

/// A frame record's registers per CPU: the frame pointer, the stack pointer, the size
/// of a saved pointer, and the callee-saved registers that a frame-pointer step does not
/// recover (the walker forwards the callee's values of them unless told otherwise).
fn frame_record(cpu: Cpu) -> Option<(&'static str, &'static str, u64, &'static [&'static str])> {
    match cpu {
        Cpu::X86_64 => Some(("rbp", "rsp", 8, &["rbx", "r12", "r13", "r14", "r15"])),
        Cpu::X86 => Some(("ebp", "esp", 4, &["ebx", "esi", "edi"])),
        Cpu::Arm64 => Some((
            "x29",
            "sp",
            8,
            &[
                "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28",
            ],
        )),
        _ => None,
    }
}

/// Where a module's unwind rules come from: the CFI cache (`None`: the file has no
/// unwind information), or the file itself while its CFI cache is built.
type Unwind = AnswerFrom<CfiItem, LazyUnwinder>;

/// A module's unwind rules, with the candidates and features of the lookup.
struct ModuleCfi {
    unwind: CacheResult<Unwind>,
    candidates: AllObjectCandidates,
    features: ObjectFeatures,
}

/// A module's symbols, for telling real frames from scanned garbage: the SymCache, or
/// the debug file itself while its SymCache is built.
type ModuleSymbols = AnswerFrom<OwnedSymCache, OwnedLazySymbolizer>;

impl Provider<'_> {
    fn object_id(&self, module: &dyn Module) -> ObjectId {
        let mut debug_file = module.debug_file().as_deref().and_then(non_empty);
        if module.debug_identifier() == self.first_module_debug_id
            && let Some(renamed) = debug_file
                .as_deref()
                .and_then(|f| self.rewrite_first_module.rewrite(f))
        {
            debug_file = Some(renamed);
        }
        ObjectId {
            debug_id: module.debug_identifier().filter(|id| !id.is_nil()),
            code_id: module.code_identifier().filter(|id| !id.is_nil()),
            debug_file,
            code_file: non_empty(&module.code_file()),
            debug_checksum: None,
            object_type: self.object_type,
        }
    }

    async fn cfi_module(&self, module: &(dyn Module + Sync)) -> Arc<ModuleCfi> {
        self.cfi_modules
            .get_or_init(ModuleKey::of(module), || async {
                let id = self.object_id(module);
                let mut started = self
                    .cfi
                    .fetch_or_start_building(self.sources, &id, self.scope)
                    .await;
                // Opening reads section headers and may index every FDE of a hostile
                // file: on a blocking thread, and a panic there only means "no lazy
                // unwinder".
                let open = |object| LazyUnwinder::open_within(self.cfi.budget(), object);
                let unwind =
                    cold::answer_from(started.cache, &mut started.candidates, open, Prefer::File)
                        .await;
                Arc::new(ModuleCfi {
                    unwind,
                    candidates: started.candidates,
                    features: started.features,
                })
            })
            .await
    }

    async fn symbols(&self, module: &(dyn Module + Sync)) -> CacheResult<ModuleSymbols> {
        self.symcache_modules
            .get_or_init(ModuleKey::of(module), || async {
                let id = self.object_id(module);
                let mut started = self
                    .symcaches
                    .fetch_or_start_building(self.sources, &id, self.scope)
                    .await;
                let budget = self.symcaches.budget();
                let open = move |object| async move {
                    let (reader, _weight) = cold::open_within(budget, object).await?;
                    Some(reader)
                };
                // The walk reports only the CFI lookup's candidates.
                let candidates = &mut started.candidates;
                cold::answer_from(started.cache, candidates, open, Prefer::FinishedBuild).await
            })
            .await
    }

    /// `false` only when we hold unwind rules for the module and they do not cover the
    /// address: then there is no code there, and a scanned frame there is not real.
    async fn plausible_by_cfi(&self, module: &(dyn Module + Sync), addr: u64) -> bool {
        // Addresses come from the dump; one below the module's base is not in it.
        let Some(offset) = addr.checked_sub(module.base_address()) else {
            return false;
        };
        match &self.cfi_module(module).await.unwind {
            Ok(AnswerFrom::Cache(Some(cfi))) => cfi.covers(offset),
            Ok(AnswerFrom::File(unwinder)) => {
                isolate("lazy unwinder", || Ok(unwinder.covers(offset))).unwrap_or(true)
            }
            _ => true,
        }
    }

    /// The same check against the module's symbols.
    async fn plausible_by_symbols(&self, module: &(dyn Module + Sync), addr: u64) -> bool {
        let Some(offset) = addr.checked_sub(module.base_address()) else {
            return false;
        };
        match self.symbols(module).await {
            Ok(AnswerFrom::Cache(symcache)) => symcache.get().lookup(offset).next().is_some(),
            // A lazy reader parses debug info as it goes: on a blocking thread.
            Ok(AnswerFrom::File(reader)) => {
                isolate_blocking("lazy reader", move || Ok(!reader.lookup(offset).is_empty()))
                    .await
                    .unwrap_or(true)
            }
            Err(_) => true,
        }
    }
}

impl Provider<'_> {
    /// The module's unwind rules: its CFI cache, or the file while that is built.
    async fn cfi_step(
        &self,
        module: &(dyn Module + Sync),
        walker: &mut (dyn FrameWalker + Send),
    ) -> Option<()> {
        let cfi = self.cfi_module(module).await;
        match cfi.unwind.as_ref().ok()? {
            AnswerFrom::Cache(cfi) => cfi.as_ref()?.walk_frame(module, walker),
            AnswerFrom::File(unwinder) => {
                // Gimli reads the file here; a panic costs this frame its CFI (the walker
                // falls back to frame pointers and scanning), and leaves only the walker's
                // candidate caller, which it discards, half set.
                let walked = isolate("lazy unwinder", || Ok(unwinder.walk_frame(module, walker)))
                    .ok()
                    .flatten();
                if walked.is_some() {
                    metrics::counter!(crate::telemetry::LAZY_UNWINDS).increment(1);
                }
                walked
            }
        }
    }

    /// Whether `caller_ip` is a return address the walk may take: inside a module, and
    /// in code by the module's rules or its symbols (either is enough, as for a scanned
    /// frame: a module's CFI may cover only some of its functions), or where we hold
    /// neither.
    async fn returns_into_code(&self, steered: &Steered, caller_ip: u64) -> bool {
        let Some(module) = steered.modules.module_at_address(caller_ip) else {
            return false;
        };
        let call = caller_ip.saturating_sub(1);
        self.plausible_by_cfi(module, call).await || self.plausible_by_symbols(module, call).await
    }

    /// The innermost frame's caller when that frame is a leaf without rules: a leaf that
    /// pushed nothing (as gcc builds them even with frame pointers) left its return
    /// address where the call put it, on top of the stack (in the link register on
    /// arm64), and every other register as its caller had it.
    async fn leaf_step(&self, steered: &Steered, walker: &mut (dyn FrameWalker + Send)) -> bool {
        let Some((_, sp, width, _)) = frame_record(steered.cpu) else {
            return false;
        };
        let Some(callee_sp) = walker.get_callee_register(sp) else {
            return false;
        };
        let (caller_ip, caller_sp) = if steered.cpu == Cpu::Arm64 {
            let Some(lr) = walker.get_callee_register("x30") else {
                return false;
            };
            (lr, callee_sp)
        } else {
            let Some(caller_sp) = callee_sp.checked_add(width) else {
                return false;
            };
            let Some(ip) = walker.get_register_at_address(callee_sp) else {
                return false;
            };
            (ip, caller_sp)
        };
        if !self.returns_into_code(steered, caller_ip).await {
            return false;
        }
        if walker.set_ra(caller_ip).is_none() || walker.set_cfa(caller_sp).is_none() {
            return false;
        }
        steered.found_by_frame_pointer(caller_ip, caller_sp);
        true
    }

    /// Finds the caller through the callee's frame record (the saved frame pointer and
    /// return address its frame pointer points at), as the walker's own step does, and
    /// takes it only when the stack grows up to it and it returns into code.
    async fn frame_pointer_step(
        &self,
        steered: &Steered,
        walker: &mut (dyn FrameWalker + Send),
    ) -> bool {
        let Some((fp, sp, width, forgotten)) = frame_record(steered.cpu) else {
            return false;
        };
        let (Some(bp), Some(callee_sp)) = (
            walker.get_callee_register(fp),
            walker.get_callee_register(sp),
        ) else {
            return false;
        };
        let Some(caller_sp) = bp.checked_add(2 * width) else {
            return false;
        };
        if bp < callee_sp || bp % width != 0 {
            return false;
        }
        let (Some(caller_bp), Some(caller_ip)) = (
            walker.get_register_at_address(bp),
            walker.get_register_at_address(bp + width),
        ) else {
            return false;
        };
        // The saved frame pointer is not checked to point further up the stack, as the
        // walker's own step checks it: in a caller built without frame pointers it is
        // any value, and still the one the caller had. The return address is checked.
        if !self.returns_into_code(steered, caller_ip).await {
            return false;
        }
        if walker.set_ra(caller_ip).is_none()
            || walker.set_cfa(caller_sp).is_none()
            || walker.set_caller_register(fp, caller_bp).is_none()
        {
            return false;
        }
        for register in forgotten {
            walker.clear_caller_register(register);
        }
        steered.found_by_frame_pointer(caller_ip, caller_sp);
        true
    }
}

#[async_trait]
impl SymbolProvider for Provider<'_> {
    async fn fill_symbol(
        &self,
        module: &(dyn Module + Sync),
        frame: &mut (dyn FrameSymbolizer + Send),
    ) -> Result<(), FillSymbolError> {
        let addr = frame.get_instruction();
        // We do not name frames here (symbolication does, later). An error means "no
        // opinion", which keeps the scanner going; success without a name makes the
        // scanner drop the candidate frame.
        if self.plausible_by_cfi(module, addr).await
            || self.plausible_by_symbols(module, addr).await
        {
            Err(FillSymbolError {})
        } else {
            Ok(())
        }
    }

    async fn walk_frame(
        &self,
        module: &(dyn Module + Sync),
        walker: &mut (dyn FrameWalker + Send),
    ) -> Option<()> {
        let Some(steered) = &self.steered else {
            return self.cfi_step(module, walker).await;
        };
        // The published walker tries the provider's rules first, then its own
        // frame-pointer step (which wants a coherent chain of frame records, so it loses
        // the caller of every function built without frame pointers), then scans: a
        // steered walk takes both steps here, in its order. The innermost frame is
        // always tried by its rules first: a leaf, a function stopped in its prologue or
        // a system call's wrapper has pushed no frame record, and its frame pointer is
        // still its caller's, whose record would skip that caller.
        let innermost = !walker.has_grand_callee();
        let steps = if steered.order.frame_pointer_first() && !innermost {
            [UnwindStrategy::FramePointer, UnwindStrategy::Cfi]
        } else {
            [UnwindStrategy::Cfi, UnwindStrategy::FramePointer]
        };
        for step in steps {
            if !steered.order.allows(step) {
                continue;
            }
            let found = match step {
                UnwindStrategy::Cfi => self.cfi_step(module, walker).await.is_some(),
                _ => {
                    (innermost && self.leaf_step(steered, walker).await)
                        || self.frame_pointer_step(steered, walker).await
                }
            };
            if found {
                return Some(());
            }
        }
        None
    }

    async fn get_file_path(
        &self,
        _module: &(dyn Module + Sync),
        _kind: FileKind,
    ) -> Result<PathBuf, FileError> {
        Err(FileError::NotFound)
    }
}

impl Provider<'_> {
    /// The strategy that found `frame`; `None` for the frame the dump gave.
    fn strategy(&self, frame: &minidump_unwind::StackFrame) -> Option<UnwindStrategy> {
        use minidump_unwind::FrameTrust as T;
        match frame.trust {
            T::CallFrameInfo => {
                let caller = (
                    frame.context.get_instruction_pointer(),
                    frame.context.get_stack_pointer(),
                );
                let by_frame_pointer = self.steered.as_ref().is_some_and(|steered| {
                    steered.by_frame_pointer.lock().unwrap().contains(&caller)
                });
                Some(if by_frame_pointer {
                    UnwindStrategy::FramePointer
                } else {
                    UnwindStrategy::Cfi
                })
            }
            T::FramePointer => Some(UnwindStrategy::FramePointer),
            T::Scan | T::CfiScan => Some(UnwindStrategy::Scan),
            T::None | T::PreWalked | T::Context => None,
        }
    }
}

impl Steered {
    fn found_by_frame_pointer(&self, caller_ip: u64, caller_sp: u64) {
        let mut found = self.by_frame_pointer.lock().unwrap();
        found.insert((caller_ip, caller_sp));
    }

    /// Whether a steered walk keeps the frame at `index`: the stack ends at a frame found
    /// by a strategy the order leaves out, and at a caller outside every module (no
    /// code is there: the walk has run past the stack's end).
    fn keeps(&self, index: usize, strategy: Option<UnwindStrategy>, in_module: bool) -> bool {
        index == 0 || (in_module && strategy.is_none_or(|s| self.order.allows(s)))
    }
}

/// The functions threads start in: nothing below them is a caller, whatever the stack
/// holds (compared without leading underscores, glibc's `GI_` alias prefix or an x86
/// `@N` suffix).
const ENTRY_POINTS: &[&str] = &[
    // ELF executables; glibc's and bionic's threads.
    "start",
    "clone",
    "clone3",
    // Apple: dyld's entry (before macOS 13, and after), and pthreads' threads.
    "dyld_start",
    "thread_start",
    // Windows: every thread.
    "RtlUserThreadStart",
];

fn is_entry_point(name: &str) -> bool {
    let mut name = name
        .split('@')
        .next()
        .unwrap_or(name)
        .trim_start_matches('_');
    if let Some(rest) = name.strip_prefix("GI_") {
        name = rest.trim_start_matches('_');
    }
    ENTRY_POINTS.contains(&name)
}

/// Ends each stack trace of a steered walk at its first entry point, once symbolication
/// has named the frames.
pub fn end_at_entry_points(stacktraces: &mut [CompleteStacktrace]) {
    for stacktrace in stacktraces {
        let entry = stacktrace.frames.iter().position(|frame| {
            [&frame.raw.symbol, &frame.raw.function]
                .into_iter()
                .flatten()
                .any(|name| is_entry_point(name))
        });
        if let Some(entry) = entry {
            stacktrace.frames.truncate(entry + 1);
        }
    }
}

fn module_info(ty: ObjectType, module: &MinidumpModule) -> RawObjectInfo {
    RawObjectInfo {
        ty,
        code_id: module
            .code_identifier()
            .filter(|id| !id.is_nil())
            .map(|id| id.to_string().to_lowercase()),
        code_file: non_empty(&module.code_file()),
        debug_id: module
            .debug_identifier()
            .filter(|id| !id.is_nil())
            .map(|id| id.to_string()),
        debug_file: module.debug_file().as_deref().and_then(non_empty),
        debug_checksum: None,
        image_addr: HexValue(module.base_address()),
        image_size: match module.size() {
            0 => None,
            size => Some(size),
        },
        file_id: None,
    }
}

/// A walked minidump, before symbolication.
pub struct Walked {
    pub modules: Vec<CompleteObjectInfo>,
    pub stacktraces: Vec<RawStacktrace>,
    pub state: MinidumpState,
}

pub struct Stackwalk<'a> {
    pub cfi: &'a CfiCaches,
    pub symcaches: &'a SymCaches,
    pub scope: &'a Scope,
    pub sources: &'a [SourceConfig],
    pub rewrite_first_module: &'a RewriteRules,
    /// A steered walk's order; `None`: upstream's walk.
    pub order: Option<UnwindOrder>,
}

impl Stackwalk<'_> {
    pub async fn walk(&self, minidump: &Minidump) -> anyhow::Result<Walked> {
        let system_info = minidump
            .get_stream::<MinidumpSystemInfo>()
            .map_err(|_| minidump_processor::ProcessError::MissingSystemInfo)?;
        let object_type = object_type_for(system_info.os);
        let first_module_debug_id = minidump
            .get_stream::<MinidumpModuleList>()
            .ok()
            .and_then(|modules| modules.by_addr().next()?.debug_identifier());
        let provider = Provider {
            cfi: self.cfi,
            symcaches: self.symcaches,
            scope: self.scope,
            sources: self.sources,
            object_type,
            first_module_debug_id,
            rewrite_first_module: self.rewrite_first_module,
            cfi_modules: Memo::new(),
            symcache_modules: Memo::new(),
            steered: match self.order {
                Some(order) => Some(Steered {
                    order,
                    cpu: system_info.cpu,
                    modules: minidump
                        .get_stream::<MinidumpModuleList>()
                        .unwrap_or_default(),
                    by_frame_pointer: Mutex::default(),
                }),
                None => None,
            },
        };
        let process_state = minidump_processor::process_minidump(minidump, &provider).await?;
        let state = MinidumpState::of(&process_state);

        let requesting = process_state.requesting_thread;
        let stacktraces = process_state
            .threads
            .into_iter()
            .enumerate()
            .map(|(index, thread)| RawStacktrace {
                thread_id: Some(thread.thread_id.into()),
                thread_name: thread.thread_name,
                is_requesting: requesting.map(|r| r == index),
                registers: thread
                    .frames
                    .first()
                    .map(|f| registers(&f.context))
                    .unwrap_or_default(),
                frames: thread
                    .frames
                    .into_iter()
                    .take(MAX_FRAMES)
                    .map(|frame| (provider.strategy(&frame), frame))
                    .enumerate()
                    .take_while(|(index, (strategy, frame))| {
                        provider.steered.as_ref().is_none_or(|steered| {
                            steered.keeps(*index, *strategy, frame.module.is_some())
                        })
                    })
                    .map(|(_, (strategy, frame))| RawFrame {
                        instruction_addr: HexValue(frame.resume_address),
                        package: frame.module.and_then(|m| non_empty(&m.code_file())),
                        trust: match strategy {
                            Some(UnwindStrategy::FramePointer) => FrameTrust::Fp,
                            _ => trust(frame.trust),
                        },
                        ..RawFrame::default()
                    })
                    .collect(),
            })
            .collect();

        // Every module the walker asked about has an entry in `cfi_modules`; the others
        // are listed only when they have an id to go by.
        let cfi_modules = provider.cfi_modules.0.into_inner().unwrap();
        let mut modules = Vec::new();
        for module in process_state.modules.by_addr() {
            let cfi = cfi_modules
                .get(&ModuleKey::of(module))
                .and_then(|cell| cell.get());
            if cfi.is_none()
                && module.debug_identifier().is_none()
                && module.code_identifier().is_none()
            {
                continue;
            }
            let mut info = CompleteObjectInfo::from(module_info(object_type, module));
            info.unwind_status = Some(match cfi {
                Some(cfi) => {
                    info.features.merge(&cfi.features);
                    info.candidates = cfi.candidates.clone();
                    if let Ok(AnswerFrom::Cache(Some(rules))) = &cfi.unwind {
                        // The unwind file names the debug file a stripped dump may lack.
                        if info.raw.debug_id.is_none() {
                            info.raw.debug_id = rules.debug_id.map(|id| id.to_string());
                        }
                        if info.raw.debug_file.is_none() {
                            info.raw.debug_file.clone_from(&rules.debug_file);
                        }
                    }
                    ObjectFileStatus::from_result(&cfi.unwind)
                }
                None => ObjectFileStatus::Unused,
            });
            modules.push(info);
        }
        Ok(Walked {
            modules,
            stacktraces,
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use minidump::{MinidumpHandleDataStream, MinidumpThreadList};

    use super::*;

    #[test]
    fn entry_points_are_known_under_their_aliases() {
        for name in [
            "_start",
            "start",
            "clone3",
            "__clone3",
            "__GI___clone3",
            "_dyld_start",
            "__dyld_start",
            "thread_start",
            "RtlUserThreadStart",
            "_RtlUserThreadStart@8",
        ] {
            assert!(is_entry_point(name), "{name}");
        }
        for name in [
            "main",
            "start_thread",
            "Foo::start",
            "__libc_start_main",
            "restart",
            "",
        ] {
            assert!(!is_entry_point(name), "{name}");
        }
    }

    #[test]
    fn a_steered_walk_keeps_the_context_and_ends_where_the_order_says() {
        let steered = |order: &[UnwindStrategy]| Steered {
            order: UnwindOrder::new(order).unwrap(),
            cpu: Cpu::X86_64,
            modules: MinidumpModuleList::default(),
            by_frame_pointer: Mutex::default(),
        };
        let no_scan = steered(&[UnwindStrategy::Cfi, UnwindStrategy::FramePointer]);
        assert!(no_scan.keeps(0, None, false), "the dump's own frame stays");
        assert!(no_scan.keeps(1, Some(UnwindStrategy::FramePointer), true));
        assert!(!no_scan.keeps(1, Some(UnwindStrategy::Scan), true));
        assert!(
            !no_scan.keeps(1, Some(UnwindStrategy::Cfi), false),
            "outside every module"
        );
        let cfi_only = steered(&[UnwindStrategy::Cfi]);
        assert!(!cfi_only.keeps(2, Some(UnwindStrategy::FramePointer), true));
    }

    fn fixture_dump() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/minidump/nofp/crash.dmp"
        );
        std::fs::read(path).unwrap()
    }

    /// Where the (little-endian) fixture's handle data stream starts.
    fn handle_stream(data: &[u8]) -> usize {
        let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
        let (count, directory) = (u32_at(8), u32_at(12) as usize);
        (0..count as usize)
            .map(|i| directory + 12 * i)
            .find(|&entry| u32_at(entry) == MINIDUMP_STREAM_TYPE::HandleDataStream as u32)
            .map(|entry| u32_at(entry + 8) as usize)
            .expect("the fixture has a handle data stream")
    }

    #[test]
    fn a_handle_stream_of_zero_sized_descriptors_is_hidden() {
        // Found by fuzzing (fuzz/fuzz_targets/minidump.rs): descriptors of size 0 and a
        // count of 2^32 - 1 made rust-minidump reserve about 500 GiB.
        let mut data = fixture_dump();
        let stream = handle_stream(&data);
        data[stream + 4..stream + 12].copy_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        let minidump = read_minidump(ByteView::from_vec(data)).unwrap();
        assert_eq!(
            minidump
                .get_raw_stream(MINIDUMP_STREAM_TYPE::HandleDataStream as u32)
                .err(),
            Some(minidump::Error::StreamNotFound)
        );
        assert!(minidump.get_stream::<MinidumpThreadList>().is_ok());
    }

    #[test]
    fn a_sound_handle_stream_is_kept() {
        let minidump = read_minidump(ByteView::from_vec(fixture_dump())).unwrap();
        let handles = minidump.get_stream::<MinidumpHandleDataStream>().unwrap();
        assert_eq!(handles.handles.len(), 5);
    }
}
