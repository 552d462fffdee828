//! Native symbolication (ELF, Mach-O, PE/PDB, Breakpad, Wasm and .NET): the caches
//! derived from debug files (`symcache`, `cfi`, `ppdb`), demangling, symbolicating
//! stack traces (`symbolicate`), minidump stackwalking (`stackwalk`), Apple crash
//! reports (`apple`) and native source context (`source_context`), the SymCache's
//! secondary inputs (`symcache_inputs`: il2cpp line mappings, read by `il2cpp_mapping`,
//! and BCSymbolMaps), the cold path
//! (`cold`): answering frames and unwinding straight from a debug file while its
//! SymCache or CFI cache is built, and symbols uploaded as symbfiles (`symbfile`), which
//! answer modules with a `file_id` before any source. Shared beneath the SymCache writer
//! and the cold path: our own DWARF walk (`dwarf`) and containers kept in files instead
//! of the heap (`spill`); beneath both and the cold PDB reader, a PDB's streams read
//! through its mapping (`pdb_read`). Finding and fetching the files is `lookup`'s.

mod apple;
pub mod cfi;
pub mod cold;
pub mod demangle;
mod dwarf;
mod frame_memo;
mod il2cpp_mapping;
pub mod interface;
mod pdb_read;
pub mod ppdb;
mod source_context;
mod spill;
mod stackwalk;
pub mod symbfile;
pub mod symbolicate;
pub mod symcache;
mod symcache_inputs;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use anyhow::Context;
use futures::FutureExt;

use serde::Deserialize;

use crate::cache::{Caches, ConversionBudget, Scope};
use crate::error::panicked;
use crate::lookup::{Lookup, ObjectLookup, SourceFiles};
use crate::sources::SourceConfig;
use crate::types::UnwindOrder;
use cfi::CfiCaches;
use interface::{
    CompleteObjectInfo, CompleteStacktrace, CompletedSymbolicationResponse, RawObjectInfo,
    RawStacktrace, RequestOptions, RewriteRules, Signal,
};
use ppdb::PpdbCaches;
pub use source_context::DebuginfodSourceLimits;
use source_context::apply_source_context;
use stackwalk::{Stackwalk, read_minidump};
use symbfile::SymbfileStore;
pub use symbolicate::MemoLimits;
use symbolicate::{Memos, ModuleLookup, symbolicate_stacktrace};
use symcache::SymCaches;
use symcache_inputs::InputFinder;

/// The JSON body of `POST /symbolicate`. Unknown fields are ignored, as upstream does.
#[derive(Clone, Debug, Deserialize)]
pub struct SymbolicateRequest {
    #[serde(default)]
    pub platform: Option<String>,
    #[serde(default)]
    pub signal: Option<Signal>,
    /// `None` (key absent) means the server's configured sources.
    #[serde(default)]
    pub sources: Option<Vec<SourceConfig>>,
    #[serde(default)]
    pub stacktraces: Vec<RawStacktrace>,
    #[serde(default)]
    pub modules: Vec<RawObjectInfo>,
    #[serde(default)]
    pub options: RequestOptions,
}

/// Everything native symbolication needs, shared by all requests.
pub struct NativeService {
    objects: Arc<ObjectLookup>,
    symbfiles: Arc<SymbfileStore>,
    symcaches: SymCaches,
    cficaches: CfiCaches,
    ppdb_caches: PpdbCaches,
    source_files: Arc<SourceFiles>,
    /// What source context may ask of the request's debuginfod sources.
    debuginfod_sources: DebuginfodSourceLimits,
    memos: Arc<Memos>,
    /// Lazy reads share the budget of conversions.
    conversions: Arc<ConversionBudget>,
    /// The minidump walk of requests that name none (config `unwind_order`).
    unwind_order: Option<UnwindOrder>,
}

/// The kinds of crash file the native pipeline reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashKind {
    Minidump,
    AppleCrashReport,
}

/// A crash file, already unpacked: on disk, or held in memory (a small upload, which is
/// never written out).
pub enum CrashData<'a> {
    File(&'a std::path::Path),
    Memory(Vec<u8>),
}

/// A crash report (minidump or Apple crash report) to symbolicate, and how.
pub struct CrashReportRequest {
    pub sources: Arc<[SourceConfig]>,
    pub options: RequestOptions,
    pub rewrite_first_module: RewriteRules,
}

impl NativeService {
    pub fn new(
        caches: &Caches,
        lookup: &Lookup,
        symbfiles: Arc<SymbfileStore>,
        debuginfod_sources: DebuginfodSourceLimits,
        memo: MemoLimits,
        unwind_order: Option<UnwindOrder>,
    ) -> Self {
        let objects = lookup.objects.clone();
        NativeService {
            symcaches: SymCaches::new(caches, objects.clone(), InputFinder::new(caches, lookup)),
            cficaches: CfiCaches::new(caches, objects.clone(), ()),
            source_files: lookup.source_files.clone(),
            ppdb_caches: PpdbCaches::new(caches, objects.clone(), ()),
            objects,
            symbfiles,
            memos: Arc::new(Memos::new(memo)),
            conversions: caches.conversions(),
            debuginfod_sources,
            unwind_order,
        }
    }

    /// The SymCaches `/symbolicate` reads, for fronts that serve them whole.
    pub fn symcaches(&self) -> &SymCaches {
        &self.symcaches
    }

    pub async fn symbolicate(
        &self,
        scope: Scope,
        sources: Arc<[SourceConfig]>,
        request: SymbolicateRequest,
    ) -> CompletedSymbolicationResponse {
        self.run(NativeRequest {
            scope: &scope,
            sources: &sources,
            modules: request.modules.into_iter().map(Into::into).collect(),
            stacktraces: request.stacktraces,
            signal: request.signal,
            options: request.options,
            rewrite_first_module: &RewriteRules::default(),
        })
        .await
    }

    /// Processes the crash file of `kind` in `data` (already unpacked): what every front
    /// end that has a crash file (uploads, `storage_url`, the offline CLI) calls.
    pub async fn process_crash_file(
        &self,
        kind: CrashKind,
        scope: Scope,
        data: CrashData<'_>,
        request: CrashReportRequest,
    ) -> anyhow::Result<CompletedSymbolicationResponse> {
        match kind {
            CrashKind::Minidump => self.process_minidump(scope, data, request).await,
            CrashKind::AppleCrashReport => {
                self.process_apple_crash_report(scope, data, request).await
            }
        }
    }

    /// Walks the stacks of a minidump, then symbolicates them.
    async fn process_minidump(
        &self,
        scope: Scope,
        data: CrashData<'_>,
        request: CrashReportRequest,
    ) -> anyhow::Result<CompletedSymbolicationResponse> {
        let view = match data {
            CrashData::File(path) => symbolic::common::ByteView::open(path)?,
            CrashData::Memory(bytes) => symbolic::common::ByteView::from_vec(bytes),
        };
        let order = request.options.unwind_order.or(self.unwind_order);
        // The walk parses the upload (and the CFI of downloaded files) in minidump's
        // readers; a panic in one of them makes this dump unreadable, answered `failed`
        // like any other, and leaves the server and its caches as they were.
        let walked = AssertUnwindSafe(async {
            #[cfg(test)]
            crate::error::panic_if_marked("minidump", &view);
            let minidump = read_minidump(view).context("invalid minidump")?;
            // Boxed: the walker's future is some 15 KiB, and inline it would make the
            // whole crash request's future (moved into its task) as large.
            Box::pin(
                Stackwalk {
                    cfi: &self.cficaches,
                    symcaches: &self.symcaches,
                    scope: &scope,
                    sources: &request.sources,
                    rewrite_first_module: &request.rewrite_first_module,
                    order,
                }
                .walk(&minidump),
            )
            .await
            .context("cannot process minidump")
        })
        .catch_unwind()
        .await
        .unwrap_or_else(|payload| {
            Err(anyhow::Error::new(panicked("minidump", payload))
                .context("cannot process minidump"))
        })?;
        let mut response = self
            .symbolicate_report(&scope, &request, walked.modules, walked.stacktraces)
            .await;
        if order.is_some() {
            // Only symbolication names the frames the walk found.
            stackwalk::end_at_entry_points(&mut response.stacktraces);
        }
        walked.state.merge_into(&mut response);
        Ok(response)
    }

    /// Parses an Apple crash report, then symbolicates its threads.
    async fn process_apple_crash_report(
        &self,
        scope: Scope,
        data: CrashData<'_>,
        request: CrashReportRequest,
    ) -> anyhow::Result<CompletedSymbolicationResponse> {
        let reader: Box<dyn std::io::Read + Send> = match data {
            CrashData::File(path) => Box::new(std::io::BufReader::new(std::fs::File::open(path)?)),
            CrashData::Memory(bytes) => Box::new(std::io::Cursor::new(bytes)),
        };
        let report = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(AssertUnwindSafe(|| apple::parse(reader))).unwrap_or_else(
                |payload| {
                    Err(anyhow::Error::new(panicked("apple crash report", payload))
                        .context("failed to parse apple crash report"))
                },
            )
        })
        .await??;
        let mut response = self
            .symbolicate_report(&scope, &request, report.modules, report.stacktraces)
            .await;
        report.metadata.merge_into(&mut response);
        Ok(response)
    }

    /// Symbolicates what a crash report yielded; crash reports carry no signal of the
    /// request's own.
    async fn symbolicate_report(
        &self,
        scope: &Scope,
        request: &CrashReportRequest,
        modules: Vec<CompleteObjectInfo>,
        stacktraces: Vec<RawStacktrace>,
    ) -> CompletedSymbolicationResponse {
        self.run(NativeRequest {
            scope,
            sources: &request.sources,
            modules,
            stacktraces,
            signal: None,
            options: request.options,
            rewrite_first_module: &request.rewrite_first_module,
        })
        .await
    }

    /// Symbolicates the stack traces of one request against its modules, then applies
    /// source context if asked.
    async fn run(&self, request: NativeRequest<'_>) -> CompletedSymbolicationResponse {
        let mut lookup = ModuleLookup::new(request.modules, request.rewrite_first_module);
        lookup
            .fetch_caches(
                &self.symbfiles,
                &self.symcaches,
                &self.ppdb_caches,
                request.sources,
                request.scope,
                &request.stacktraces,
            )
            .await;
        let (returned, mut stacktraces) = self
            .symbolicate_stacktraces(lookup, request.signal, request.stacktraces)
            .await;
        lookup = returned;
        if request.options.apply_source_context {
            apply_source_context(
                &self.objects,
                &self.source_files,
                request.sources,
                request.scope,
                &mut lookup,
                &mut stacktraces,
                self.debuginfod_sources,
            )
            .await;
        }
        let mut modules = lookup.into_modules();
        if !request.options.dif_candidates {
            for module in &mut modules {
                module.candidates = Default::default();
            }
        }
        CompletedSymbolicationResponse {
            signal: request.signal,
            stacktraces,
            modules,
            ..Default::default()
        }
    }
}

impl NativeService {
    /// Looks up every frame. From SymCaches that is quick and stays on this task; a lazy
    /// reader parses debug info as it goes, so those lookups run on a blocking thread
    /// with a share of the conversion budget.
    async fn symbolicate_stacktraces(
        &self,
        lookup: ModuleLookup,
        signal: Option<Signal>,
        stacktraces: Vec<RawStacktrace>,
    ) -> (ModuleLookup, Vec<CompleteStacktrace>) {
        let Some(lazy_bytes) = lookup.lazy_bytes() else {
            let symbolicated = stacktraces
                .into_iter()
                .map(|trace| symbolicate_stacktrace(&self.memos, &lookup, signal, trace))
                .collect();
            return (lookup, symbolicated);
        };
        let permit = self.conversions.acquire(lazy_bytes).await;
        let lookup = Arc::new(lookup);
        let task = tokio::task::spawn_blocking({
            let (memos, lookup) = (self.memos.clone(), lookup.clone());
            let stacktraces = stacktraces.clone();
            move || {
                stacktraces
                    .into_iter()
                    .map(|trace| symbolicate_stacktrace(&memos, &lookup, signal, trace))
                    .collect::<Vec<_>>()
            }
        });
        let symbolicated = match task.await {
            Ok(symbolicated) => symbolicated,
            // Each frame's lookup is isolated already; a panic here is our own, so the
            // frames are looked up again the ordinary way.
            Err(err) => {
                tracing::error!(error = %err, "lazy symbolication task failed");
                stacktraces
                    .into_iter()
                    .map(|trace| symbolicate_stacktrace(&self.memos, &lookup, signal, trace))
                    .collect()
            }
        };
        drop(permit);
        let lookup = match Arc::try_unwrap(lookup) {
            Ok(lookup) => lookup,
            Err(_) => unreachable!("the blocking task has returned its clone"),
        };
        (lookup, symbolicated)
    }
}

/// One native symbolication: the modules and stack traces to symbolicate, where to
/// look, and how.
struct NativeRequest<'a> {
    scope: &'a Scope,
    sources: &'a [SourceConfig],
    modules: Vec<CompleteObjectInfo>,
    stacktraces: Vec<RawStacktrace>,
    signal: Option<Signal>,
    options: RequestOptions,
    rewrite_first_module: &'a RewriteRules,
}
