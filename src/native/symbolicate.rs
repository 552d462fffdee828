//! Native symbolication of stack traces: map each frame to its module, fetch the
//! SymCaches of the modules that frames reference, look up addresses (with the
//! instruction-address adjustment rules), expand inlined frames, demangle.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future;
use symbolic::common::{Arch, InstructionInfo, Language, split_path};
use symbolic::symcache::SymCache;

use super::cold::{self, AnswerFrom, LazySymbolizer, OwnedLazySymbolizer, Prefer};
use super::demangle::DemangleCache;
use super::frame_memo::{Chain, FrameMemo, Resolved};
use super::interface::{
    AddrMode, CompleteObjectInfo, CompleteStacktrace, FileSays, FrameStatus, FrameTrust, HexValue,
    ObjectFileStatus, RawFrame, RawObjectInfo, RawStacktrace, Registers, RewriteRules, Signal,
    SymbolicatedFrame,
};
use super::ppdb::{OwnedPpdbCache, PpdbCaches, symbolicate_dotnet_frame};
use super::symbfile::{FileId, SymbfileStore};
use super::symcache::{OwnedSymCache, SymCaches};
use crate::cache::Scope;
use crate::error::{CacheError, CacheResult, panicked};
use crate::lookup::{FoundObject, ObjectHandle, Progress};
use crate::sources::{ObjectId, ObjectType, SourceConfig};

/// An id the client sent that does not parse makes the module unusable; upstream
/// silently drops such ids, we report the module as malformed instead.
enum Ids {
    Valid(ObjectId, Option<FileId>),
    Invalid(String),
}

fn parse_ids(raw: &RawObjectInfo) -> Ids {
    let file_id = match raw.file_id.as_deref() {
        None | Some("") => None,
        Some(s) => match s.parse() {
            Ok(id) => Some(id),
            Err(err) => return Ids::Invalid(format!("{err}")),
        },
    };
    let debug_id = match raw.debug_id.as_deref() {
        None | Some("") => None,
        Some(s) => match s.parse() {
            Ok(id) => Some(id),
            Err(_) => return Ids::Invalid(format!("invalid debug_id {s:?}")),
        },
    };
    let code_id = match raw.code_id.as_deref() {
        None | Some("") => None,
        Some(s) => match s.parse() {
            Ok(id) => Some(id),
            Err(_) => return Ids::Invalid(format!("invalid code_id {s:?}")),
        },
    };
    Ids::Valid(
        ObjectId {
            debug_id,
            code_id,
            debug_file: raw.debug_file.clone(),
            code_file: raw.code_file.clone(),
            debug_checksum: raw.debug_checksum.clone(),
            object_type: raw.ty,
        },
        file_id,
    )
}

/// The lookup table of a module: native modules have a SymCache (or, while it is being
/// built, a lazy reader of the debug file), .NET modules a PpdbCache.
enum ModuleCache {
    SymCache(OwnedSymCache),
    Lazy {
        reader: OwnedLazySymbolizer,
        /// What it holds and reads, for the conversion budget (`cold::budget_weight`).
        weight: u64,
    },
    Ppdb(OwnedPpdbCache),
}

pub(super) struct ModuleEntry {
    /// Position in the request's module list (what `rel:N` refers to).
    pub(super) index: usize,
    pub(super) info: CompleteObjectInfo,
    pub(super) ids: Result<ObjectId, String>,
    /// Elastic's id of the executable, for symbols uploaded as symbfiles.
    file_id: Option<FileId>,
    cache: CacheResult<ModuleCache>,
    /// A file with sources (source bundle, embedded sources), if one was found.
    pub(super) sources: Option<Arc<ObjectHandle>>,
    /// The debug file, when it carries sources itself.
    pub(super) debug_file_with_sources: Option<FoundObject>,
}

/// The request's modules, sorted by address for lookups.
pub struct ModuleLookup {
    pub(super) modules: Vec<ModuleEntry>,
}

struct ModuleHit<'a> {
    entry: &'a ModuleEntry,
    /// Address relative to the module; `None` when it lies below the image.
    relative_addr: Option<u64>,
}

impl ModuleHit<'_> {
    fn preferred_addr_mode(&self) -> AddrMode {
        if self.entry.info.supports_absolute_addresses() {
            AddrMode::Abs
        } else {
            AddrMode::Rel(self.entry.index)
        }
    }

    fn expose_addr(&self, addr: u64) -> u64 {
        if self.entry.info.supports_absolute_addresses() {
            self.entry.info.rel_to_abs_addr(addr).unwrap_or(0)
        } else {
            addr
        }
    }
}

impl ModuleLookup {
    /// `rewrite_first_module` renames the debug file of the lowest-addressed module for
    /// the lookup only; the response keeps the name the client sent.
    pub fn new(modules: Vec<CompleteObjectInfo>, rewrite_first_module: &RewriteRules) -> Self {
        let mut modules: Vec<ModuleEntry> = modules
            .into_iter()
            .enumerate()
            .map(|(index, mut info)| {
                let (ids, file_id) = match parse_ids(&info.raw) {
                    Ids::Valid(id, file_id) => {
                        // Normalise ids to their canonical spelling, as upstream echoes them.
                        info.raw.debug_id = id.debug_id.map(|d| d.to_string());
                        info.raw.code_id = id.code_id.as_ref().map(|c| c.to_string());
                        (Ok(id), file_id)
                    }
                    Ids::Invalid(msg) => (Err(msg), None),
                };
                ModuleEntry {
                    index,
                    info,
                    ids,
                    file_id,
                    cache: Err(CacheError::NotFound),
                    sources: None,
                    debug_file_with_sources: None,
                }
            })
            .collect();
        modules.sort_by_key(|m| m.info.raw.image_addr.0);
        // A module without a size spans up to the next one (the event schema says so).
        for i in 0..modules.len().saturating_sub(1) {
            let next = modules[i + 1].info.raw.image_addr.0;
            let info = &mut modules[i].info.raw;
            if info.image_size.unwrap_or(0) == 0 {
                info.image_size = Some(next - info.image_addr.0);
            }
        }
        if let Some(Ok(id)) = modules.first_mut().map(|m| &mut m.ids)
            && let Some(renamed) = id
                .debug_file
                .as_deref()
                .and_then(|f| rewrite_first_module.rewrite(f))
        {
            id.debug_file = Some(renamed);
        }
        ModuleLookup { modules }
    }

    pub(super) fn entry_for(&self, addr: u64, addr_mode: AddrMode) -> Option<&ModuleEntry> {
        match addr_mode {
            AddrMode::Abs => {
                let idx = match self
                    .modules
                    .binary_search_by_key(&addr, |m| m.info.raw.image_addr.0)
                {
                    Ok(idx) => idx,
                    Err(0) => return None,
                    Err(idx) => idx - 1,
                };
                let entry = &self.modules[idx];
                let start = entry.info.raw.image_addr.0;
                let size = entry.info.raw.image_size.unwrap_or(0);
                let end = start.checked_add(size)?;
                // Size 0 means "unknown, open-ended". The end itself still counts, as
                // upstream has it: a return address can point just past a module.
                if size != 0 && end < addr {
                    return None;
                }
                Some(entry)
            }
            AddrMode::Rel(index) => self.modules.iter().find(|m| m.index == index),
        }
    }

    fn lookup(&self, addr: u64, addr_mode: AddrMode) -> Option<ModuleHit<'_>> {
        let entry = self.entry_for(addr, addr_mode)?;
        let relative_addr = match addr_mode {
            AddrMode::Abs => entry.info.abs_to_rel_addr(addr),
            AddrMode::Rel(_) => Some(addr),
        };
        Some(ModuleHit {
            entry,
            relative_addr,
        })
    }

    /// The request indexes of the modules that `frames` point into.
    pub(super) fn referenced<'a>(
        &self,
        frames: impl Iterator<Item = &'a RawFrame>,
    ) -> HashSet<usize> {
        frames
            .filter_map(|frame| self.entry_for(frame.instruction_addr.0, frame.addr_mode))
            .map(|entry| entry.index)
            .collect()
    }

    /// Fetches SymCaches for the modules that frames point into; the others stay
    /// `unused`. A module with a `file_id` whose symbols were uploaded uses those;
    /// the configured sources are asked only when there are none.
    pub async fn fetch_caches(
        &mut self,
        symbfiles: &SymbfileStore,
        symcaches: &SymCaches,
        ppdb_caches: &PpdbCaches,
        sources: &[SourceConfig],
        scope: &Scope,
        stacktraces: &[RawStacktrace],
    ) {
        let referenced = self.referenced(stacktraces.iter().flat_map(|s| &s.frames));
        let jobs = self
            .modules
            .iter_mut()
            .filter(|m| referenced.contains(&m.index))
            .map(|m| async move {
                match &m.ids {
                    Ok(id) if id.object_type == ObjectType::PeDotnet => {
                        let result = ppdb_caches.fetch_or_build(sources, id, scope).await;
                        m.info.features.merge(&result.features);
                        m.info.candidates.merge(result.candidates);
                        m.info.debug_status = ObjectFileStatus::from_result(&result.cache);
                        m.cache = result.cache.map(ModuleCache::Ppdb);
                    }
                    Ok(id) => {
                        let uploaded = match m.file_id {
                            Some(file_id) => symbfiles.find(file_id).await,
                            None => None,
                        };
                        let mut result = match uploaded {
                            Some(result) => result.map_cache(Progress::Ready),
                            None => symcaches.fetch_or_start_building(sources, id, scope).await,
                        };
                        m.debug_file_with_sources = result.with_sources;
                        m.info.debug_file_says = result.meta.map(|meta| FileSays {
                            debug_id: meta.debug_id,
                            breakpad_name: meta.breakpad_name.clone(),
                        });
                        m.info.features.merge(&result.features);
                        let open = |object| cold::open_within(symcaches.budget(), object);
                        let answer = cold::answer_from(
                            result.cache,
                            &mut result.candidates,
                            open,
                            Prefer::FinishedBuild,
                        )
                        .await;
                        m.info.candidates.merge(result.candidates);
                        let cache = answer.map(|answer| match answer {
                            AnswerFrom::Cache(symcache) => ModuleCache::SymCache(symcache),
                            AnswerFrom::File((reader, weight)) => {
                                // Here rather than in the rule: the stack walker opens
                                // symbol readers too, for its scan check, but answers no
                                // frames with them.
                                metrics::counter!(crate::telemetry::LAZY_ANSWERS).increment(1);
                                ModuleCache::Lazy { reader, weight }
                            }
                        });
                        m.info.debug_status = ObjectFileStatus::from_result(&cache);
                        match &cache {
                            Ok(ModuleCache::SymCache(symcache)) => {
                                m.info.arch = symcache.get().arch()
                            }
                            Ok(ModuleCache::Lazy { reader, .. }) => m.info.arch = reader.arch(),
                            _ => {}
                        }
                        m.cache = cache;
                    }
                    Err(msg) => {
                        m.info.debug_status = ObjectFileStatus::Malformed;
                        m.cache = Err(CacheError::Malformed(msg.clone()));
                    }
                }
            });
        future::join_all(jobs).await;
    }

    /// What the lazy readers of the modules weigh on the conversion budget, when any
    /// module has one.
    pub fn lazy_bytes(&self) -> Option<u64> {
        self.modules
            .iter()
            .filter_map(|m| match &m.cache {
                Ok(ModuleCache::Lazy { weight, .. }) => Some(*weight),
                _ => None,
            })
            .fold(None, |sum: Option<u64>, size| {
                Some(sum.unwrap_or(0).saturating_add(size))
            })
    }

    /// The modules in the order the client sent them.
    pub fn into_modules(mut self) -> Vec<CompleteObjectInfo> {
        self.modules.sort_by_key(|m| m.index);
        self.modules.into_iter().map(|m| m.info).collect()
    }
}

/// Whether a frame's address is a return address that must step back into the call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Adjust {
    Yes,
    No,
    Auto,
}

fn adjustment_for(frame: &RawFrame, default: Adjust) -> Adjust {
    match frame.adjust_instruction_addr {
        Some(true) => Adjust::Yes,
        Some(false) => Adjust::No,
        None => default,
    }
}

fn caller_relative_addr(
    arch: Arch,
    lookup: &ModuleHit<'_>,
    registers: &Registers,
    signal: Option<Signal>,
    index: usize,
    adjust: Adjust,
) -> Result<u64, FrameStatus> {
    let addr = lookup.relative_addr.ok_or(FrameStatus::MissingSymbol)?;
    // The heuristics need absolute addresses; modules at 0 (Wasm) have none.
    let Some(absolute) = lookup.entry.info.rel_to_abs_addr(addr) else {
        return Ok(addr);
    };
    let is_crashing_frame = index == 0;
    let ip_register_value = if is_crashing_frame {
        arch.cpu_family()
            .ip_register_name()
            .and_then(|name| registers.get(name))
            .map(|v| v.0)
    } else {
        None
    };
    let mut info = InstructionInfo::new(arch, absolute);
    info.is_crashing_frame(is_crashing_frame)
        .signal(signal.map(|s| s.0))
        .ip_register_value(ip_register_value);
    let caller = match adjust {
        Adjust::Yes => info.previous_address(),
        Adjust::No => info.aligned_address(),
        Adjust::Auto => info.caller_address(),
    };
    lookup
        .entry
        .info
        .abs_to_rel_addr(caller)
        .ok_or(FrameStatus::MissingSymbol)
}

/// What every frame of one stack trace is symbolicated with.
struct Trace<'a> {
    memos: &'a Memos,
    modules: &'a ModuleLookup,
    registers: &'a Registers,
    signal: Option<Signal>,
}

fn symbolicate_frame(
    trace: &Trace<'_>,
    frame: &mut RawFrame,
    index: usize,
    adjust: Adjust,
    out: &mut Vec<SymbolicatedFrame>,
) -> Result<(), FrameStatus> {
    let memos = trace.memos;
    let lookup = trace
        .modules
        .lookup(frame.instruction_addr.0, frame.addr_mode)
        .ok_or(FrameStatus::UnknownImage)?;
    frame.package.clone_from(&lookup.entry.info.raw.code_file);
    let table = match &lookup.entry.cache {
        Ok(ModuleCache::SymCache(cache)) => Table::SymCache(cache.get(), cache.id()),
        Ok(ModuleCache::Lazy { reader, .. }) => Table::Lazy(reader.as_ref()),
        Ok(ModuleCache::Ppdb(cache)) => {
            out.extend(symbolicate_dotnet_frame(cache.get(), frame, index)?);
            return Ok(());
        }
        Err(err) => return Err(FrameStatus::from_module_error(err)),
    };
    let relative_addr = caller_relative_addr(
        table.arch(),
        &lookup,
        trace.registers,
        trace.signal,
        index,
        adjust,
    )?;

    let instruction_addr = HexValue(lookup.expose_addr(relative_addr));
    // Frames go straight into the trace's list: a frame is a few hundred bytes, and
    // every move of a thousand of them shows in a large answer's profile.
    let first = out.len();
    let mut sym_addr = None;
    let mut push = |location: Location<'_>| {
        let filename = split_path(location.abs_path).1;
        sym_addr = Some(HexValue(lookup.expose_addr(location.entry_pc)));
        out.push(SymbolicatedFrame {
            status: FrameStatus::Symbolicated,
            original_index: Some(index),
            raw: RawFrame {
                platform: frame.platform.clone(),
                addr_mode: lookup.preferred_addr_mode(),
                instruction_addr,
                adjust_instruction_addr: frame.adjust_instruction_addr,
                function_id: frame.function_id,
                package: lookup.entry.info.raw.code_file.clone(),
                lang: match location.language {
                    Language::Unknown => None,
                    lang => Some(lang),
                },
                symbol: Some(location.symbol.to_owned()),
                sym_addr: None,
                function: Some(location.demangled.unwrap_or(location.symbol).to_owned()),
                filename: if filename.is_empty() {
                    frame.filename.clone()
                } else {
                    Some(filename.to_owned())
                },
                abs_path: if location.abs_path.is_empty() {
                    frame.abs_path.clone()
                } else {
                    Some(location.abs_path.to_owned())
                },
                lineno: Some(location.line),
                in_app: frame.in_app,
                trust: frame.trust,
                ..Default::default()
            },
        });
    };
    match table {
        Table::SymCache(symcache, id) => {
            let chain = match memos.frames.get(id, relative_addr) {
                Some(chain) => chain,
                None => {
                    let chain: Chain = symcache
                        .lookup(relative_addr)
                        .map(|location| {
                            let func = location.function();
                            Resolved {
                                symbol: func.name().into(),
                                demangled: memos
                                    .demangle
                                    .demangle(&func.name_for_demangling())
                                    .map(Into::into),
                                language: func.language(),
                                entry_pc: u64::from(func.entry_pc()),
                                abs_path: location
                                    .file()
                                    .map(|f| f.full_path())
                                    .unwrap_or_default()
                                    .into(),
                                line: location.line(),
                            }
                        })
                        .collect();
                    memos.frames.put(id, relative_addr, chain.clone());
                    chain
                }
            };
            for resolved in chain.iter() {
                push(Location {
                    symbol: &resolved.symbol,
                    demangled: resolved.demangled.as_deref(),
                    language: resolved.language,
                    entry_pc: resolved.entry_pc,
                    abs_path: &resolved.abs_path,
                    line: resolved.line,
                });
            }
        }
        Table::Lazy(reader) => {
            for location in reader.lookup(relative_addr) {
                let demangled = memos.demangle.demangle(&location.name_for_demangling());
                push(Location {
                    symbol: &location.name,
                    demangled: demangled.as_deref(),
                    language: location.language,
                    // What a SymCache stores for an inlinee; only the outermost is used.
                    entry_pc: location.entry_pc.unwrap_or(u64::from(u32::MAX)),
                    abs_path: &location.abs_path,
                    line: location.line,
                });
            }
        }
    }
    // Only the outermost (non-inlined) function has a meaningful start address.
    if out.len() == first {
        return Err(FrameStatus::MissingSymbol);
    }
    if let Some(last) = out.last_mut() {
        last.raw.sym_addr = sym_addr;
    }
    Ok(())
}

/// Where a native module's frames are looked up.
enum Table<'a> {
    /// With the SymCache's id, for the paths memo.
    SymCache(&'a SymCache<'a>, u64),
    Lazy(&'a dyn LazySymbolizer),
}

impl Table<'_> {
    fn arch(&self) -> Arch {
        match self {
            Table::SymCache(symcache, _) => symcache.arch(),
            Table::Lazy(reader) => reader.arch(),
        }
    }
}

/// One entry of an inline chain, from either table.
struct Location<'a> {
    symbol: &'a str,
    demangled: Option<&'a str>,
    language: Language,
    entry_pc: u64,
    abs_path: &'a str,
    line: u32,
}

fn is_likely_base_frame(frame: &SymbolicatedFrame) -> bool {
    let Some(name) = frame
        .raw
        .function
        .as_deref()
        .or(frame.raw.symbol.as_deref())
    else {
        return false;
    };
    matches!(name, "main" | "start" | "_start" | "__clone" | "__clone3")
        || [
            "UserThreadStart",
            "thread_start",
            "start_thread",
            "start_wqthread",
        ]
        .iter()
        .any(|p| name.contains(p))
}

fn is_glibc_undefined_rip_frame(frame: &SymbolicatedFrame) -> bool {
    matches!(
        frame.raw.function.as_deref(),
        Some("_start" | "__clone" | "__clone3")
    )
}

/// The bounds of [`Memos`] (`caches.in_memory.native_frames`, `native_frame_bytes` and
/// `demangled_names`).
#[derive(Clone, Copy, Debug)]
pub struct MemoLimits {
    pub frames: usize,
    pub frame_bytes: usize,
    pub demangled_bytes: u64,
}

/// What symbolicating remembers across requests, each bounded: demangled names, and
/// what the addresses looked up in SymCaches resolved to.
pub struct Memos {
    pub demangle: DemangleCache,
    pub frames: FrameMemo,
}

impl Memos {
    pub fn new(limits: MemoLimits) -> Self {
        Memos {
            demangle: DemangleCache::new(limits.demangled_bytes),
            frames: FrameMemo::new(limits.frames, limits.frame_bytes),
        }
    }
}

/// Symbolicates one stack trace; frames expand into their inlinees, and frames that
/// stack scanning invented are dropped once symbolication shows they are not real.
pub fn symbolicate_stacktrace(
    memos: &Memos,
    modules: &ModuleLookup,
    signal: Option<Signal>,
    trace: RawStacktrace,
) -> CompleteStacktrace {
    let default_adjust = if trace
        .frames
        .iter()
        .any(|f| f.adjust_instruction_addr.is_some())
    {
        Adjust::Yes
    } else {
        Adjust::Auto
    };
    let mut frames: Vec<SymbolicatedFrame> = Vec::with_capacity(trace.frames.len());
    let count = trace.frames.len();
    let context = Trace {
        memos,
        modules,
        registers: &trace.registers,
        signal,
    };
    for (index, mut frame) in trace.frames.into_iter().enumerate() {
        let adjust = adjustment_for(&frame, default_adjust);
        // The lookup walks a cache built from a downloaded file, and demangling reads
        // names from it: if either panics, this frame is `malformed`, not the request.
        let before = frames.len();
        let symbolicated = std::panic::catch_unwind(AssertUnwindSafe(|| {
            symbolicate_frame(&context, &mut frame, index, adjust, &mut frames)
        }))
        .unwrap_or_else(|payload| {
            let _ = panicked("symbolication", payload);
            Err(FrameStatus::Malformed)
        });
        match symbolicated {
            Ok(()) => {}
            Err(status) => {
                // What a frame that failed part way pushed is not its answer.
                frames.truncate(before);
                // Without a symbol file a mangled name the client sent is still worth
                // demangling.
                if let Some(mangled) = frame.function.as_deref().xor(frame.symbol.as_deref())
                    && let Some(demangled) = memos.demangle.demangle(&mangled.into())
                    && let Some(old) = frame.function.replace(demangled)
                {
                    frame.symbol = Some(old);
                }
                if frame.trust == FrameTrust::Scan
                    && matches!(
                        status,
                        FrameStatus::MissingSymbol | FrameStatus::UnknownImage
                    )
                {
                    continue;
                }
                let is_outermost = index + 1 == count;
                if status == FrameStatus::UnknownImage && is_outermost {
                    // glibc marks `_start`/`__clone` as having no caller, which unwinders
                    // without that rule turn into one garbage frame.
                    if frames.last().is_some_and(is_glibc_undefined_rip_frame) {
                        continue;
                    }
                    // A null-ish final return address marks the end of the stack.
                    if frame.addr_mode == AddrMode::Abs
                        && frame.instruction_addr.0 < 4096
                        && !frames.is_empty()
                    {
                        continue;
                    }
                }
                frames.push(SymbolicatedFrame {
                    status,
                    original_index: Some(index),
                    raw: frame,
                });
            }
        }
    }
    if !frames.iter().rev().take(5).any(is_likely_base_frame) {
        tracing::trace!("stack trace has no base frame; it may be truncated");
    }
    CompleteStacktrace {
        thread_id: trace.thread_id,
        thread_name: trace.thread_name,
        is_requesting: trace.is_requesting,
        registers: trace.registers,
        frames,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(json: &str) -> ModuleLookup {
        let raw: Vec<RawObjectInfo> = serde_json::from_str(json).unwrap();
        ModuleLookup::new(
            raw.into_iter().map(Into::into).collect(),
            &RewriteRules::default(),
        )
    }

    #[test]
    fn lookup_by_address_and_backfilled_sizes() {
        let m = modules(
            r#"[{"type":"elf","code_id":"bb","image_addr":"0x2000","image_size":4096},
                {"type":"elf","code_id":"aa","image_addr":"0x1000"},
                {"type":"elf","code_id":"cc","image_addr":"0x4000"}]"#,
        );
        let id = |addr, mode| {
            m.lookup(addr, mode)
                .map(|l| l.entry.info.raw.code_id.clone().unwrap())
        };
        assert_eq!(id(0x1234, AddrMode::Abs).as_deref(), Some("aa"));
        assert_eq!(id(0x3456, AddrMode::Abs), None);
        assert_eq!(id(0x3456, AddrMode::Rel(0)).as_deref(), Some("bb"));
        assert_eq!(id(0x9999_9999, AddrMode::Abs).as_deref(), Some("cc"));
        assert_eq!(id(0x10, AddrMode::Abs), None);
        let back = m.into_modules();
        assert_eq!(back[1].raw.image_size, Some(0x1000));
        assert_eq!(back[2].raw.image_size, None);
    }

    #[test]
    fn invalid_ids_are_reported_not_dropped() {
        let m = modules(r#"[{"type":"pe","debug_id":"not-an-id","image_addr":"0x1000"}]"#);
        assert!(m.modules[0].ids.is_err());
        let m = modules(
            r#"[{"type":"macho","debug_id":"502FC0A5-1EC1-3E47-9998-684FA139DCA7","image_addr":"0x1000"}]"#,
        );
        assert_eq!(
            m.modules[0].info.raw.debug_id.as_deref(),
            Some("502fc0a5-1ec1-3e47-9998-684fa139dca7")
        );
    }

    /// Every function of the ELF fixture, looked up twice: the second pass answers the
    /// frames from the memo, and must answer exactly as the first; a memo of one slot,
    /// where addresses keep replacing each other, must too.
    #[test]
    fn remembered_frames_answer_as_fresh_lookups() {
        use crate::cache::DerivedFormat;
        use symbolic::common::ByteView;
        use symbolic::symcache::SymCacheConverter;

        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/native/elf/crash.debug"
        );
        let data = std::fs::read(path).unwrap();
        let object = symbolic::debuginfo::Object::parse(&data).unwrap();
        let mut converter = SymCacheConverter::new();
        converter.process_object(&object).unwrap();
        let mut bytes = Vec::new();
        converter.serialize(&mut bytes).unwrap();
        let cache =
            super::super::symcache::SymCacheFormat::load(ByteView::from_vec(bytes)).unwrap();
        let id = cache.id();
        let addrs: Vec<u64> = cache
            .get()
            .functions()
            .map(|f| u64::from(f.entry_pc()) + 1)
            .filter(|&a| a < 0x10_0000)
            .collect();
        assert!(addrs.len() > 5, "{addrs:?}");
        let mut m = modules(
            r#"[{"type":"elf","image_addr":"0x10000000","image_size":1048576,
                 "debug_id":"00000000-0000-0000-0000-000000000000"}]"#,
        );
        m.modules[0].cache = Ok(ModuleCache::SymCache(cache));
        let frames: Vec<String> = addrs
            .iter()
            .map(|a| format!(r#"{{"instruction_addr":"{:#x}"}}"#, 0x1000_0000 + a))
            .collect();
        let trace: RawStacktrace =
            serde_json::from_str(&format!(r#"{{"frames":[{}]}}"#, frames.join(","))).unwrap();

        // A memo without a budget remembers nothing: every frame is looked up.
        let fresh = symbolicate_stacktrace(
            &Memos::new(MemoLimits {
                demangled_bytes: 1024,
                frames: 4096,
                frame_bytes: 0,
            }),
            &m,
            None,
            trace.clone(),
        );
        assert!(
            fresh.frames.iter().any(|f| f.raw.abs_path.is_some()),
            "the fixture has paths"
        );
        let memos = Memos::new(MemoLimits {
            demangled_bytes: 1024,
            frames: 4096,
            frame_bytes: 1 << 20,
        });
        assert_eq!(
            symbolicate_stacktrace(&memos, &m, None, trace.clone()),
            fresh
        );
        let remembered = addrs
            .iter()
            .filter(|&&a| {
                memos.frames.get(id, a - 1).is_some() || memos.frames.get(id, a).is_some()
            })
            .count();
        assert!(remembered > 0, "the first pass filled the memo");
        let again = symbolicate_stacktrace(&memos, &m, None, trace.clone());
        assert_eq!(again, fresh);
        let tiny = Memos::new(MemoLimits {
            demangled_bytes: 1024,
            frames: 1,
            frame_bytes: 1 << 20,
        });
        for _ in 0..2 {
            assert_eq!(
                symbolicate_stacktrace(&tiny, &m, None, trace.clone()),
                fresh
            );
        }
    }

    #[test]
    fn frames_outside_modules_are_unknown_image() {
        let m = modules(r#"[{"type":"elf","image_addr":"0x1000","image_size":16}]"#);
        let trace: RawStacktrace = serde_json::from_str(
            r#"{"frames":[{"instruction_addr":"0x5000"},{"instruction_addr":"0x1004"}]}"#,
        )
        .unwrap();
        let out = symbolicate_stacktrace(
            &Memos::new(MemoLimits {
                demangled_bytes: 1024,
                frames: 16,
                frame_bytes: 1 << 20,
            }),
            &m,
            None,
            trace,
        );
        assert_eq!(out.frames[0].status, FrameStatus::UnknownImage);
        assert_eq!(out.frames[1].status, FrameStatus::Missing);
    }
}
