//! Minidump stackwalking: rust-minidump's processor walks every thread, asking us for
//! unwind rules module by module (CFI caches fetched on demand from the sources); the
//! result is raw stack traces plus the module list with unwind statuses and candidates,
//! ready for ordinary symbolication.

use std::collections::HashMap;
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
    CompleteObjectInfo, CompletedSymbolicationResponse, FrameTrust, HexValue, ObjectFileStatus,
    RawFrame, RawObjectInfo, RawStacktrace, Registers, RewriteRules, SystemInfo,
};
use super::symcache::{OwnedSymCache, SymCaches};
use crate::cache::Scope;
use crate::error::{CacheResult, isolate, isolate_blocking};
use crate::sources::{ObjectId, ObjectType, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectFeatures};

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

    async fn get_file_path(
        &self,
        _module: &(dyn Module + Sync),
        _kind: FileKind,
    ) -> Result<PathBuf, FileError> {
        Err(FileError::NotFound)
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
                    .map(|frame| RawFrame {
                        instruction_addr: HexValue(frame.resume_address),
                        package: frame.module.and_then(|m| non_empty(&m.code_file())),
                        trust: trust(frame.trust),
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
