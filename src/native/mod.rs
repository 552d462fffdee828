//! Native symbolication: finding debug files for modules (`objects`), the caches
//! derived from them (`symcache`, `cfi`, `ppdb`), demangling, symbolicating stack traces
//! (`symbolicate`), minidump stackwalking (`stackwalk`) and source context.

mod apple;
mod cfi;
pub mod demangle;
mod derived;
mod embedded_sources;
pub mod objects;
mod ppdb;
mod source_context;
mod stackwalk;
pub mod symbolicate;
pub mod symcache;

use std::sync::Arc;

use anyhow::Context;
use futures::future;

use serde::Deserialize;

use crate::cache::{Caches, Scope};
use crate::fetch::Downloader;
use crate::sources::SourceConfig;
use crate::types::{
    CompleteObjectInfo, CompletedSymbolicationResponse, RawObjectInfo, RawStacktrace,
    RequestOptions, RewriteRules, Signal,
};
use cfi::CfiCacheActor;
use demangle::DemangleCache;
use objects::ObjectsActor;
use ppdb::PpdbCacheActor;
use source_context::{SourceFiles, sourcelink_candidate};
use stackwalk::{Minidump, Stackwalk};
use symbolicate::{ModuleLookup, set_context, symbolicate_stacktrace};
use symcache::SymCacheActor;

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
    objects: Arc<ObjectsActor>,
    symcaches: SymCacheActor,
    cficaches: CfiCacheActor,
    ppdb_caches: PpdbCacheActor,
    source_files: SourceFiles,
    demangle: DemangleCache,
}

/// A crash report (minidump or Apple crash report) to symbolicate, and how.
pub struct CrashReportRequest {
    pub sources: Arc<[SourceConfig]>,
    pub options: RequestOptions,
    pub rewrite_first_module: RewriteRules,
}

impl NativeService {
    pub fn new(caches: &Caches, downloader: Downloader, max_download_size: u64) -> Self {
        let objects = Arc::new(ObjectsActor::new(
            caches,
            downloader.clone(),
            max_download_size,
        ));
        NativeService {
            symcaches: SymCacheActor::new(caches, objects.clone()),
            cficaches: CfiCacheActor::new(caches, objects.clone()),
            source_files: SourceFiles::new(caches, downloader),
            ppdb_caches: PpdbCacheActor::new(caches, objects.clone()),
            objects,
            demangle: DemangleCache::new(10 * 1024 * 1024),
        }
    }

    pub async fn symbolicate(
        &self,
        scope: Scope,
        sources: Arc<[SourceConfig]>,
        request: SymbolicateRequest,
    ) -> CompletedSymbolicationResponse {
        let modules = request.modules.into_iter().map(Into::into).collect();
        self.symbolicate_modules(
            &scope,
            &sources,
            modules,
            request.stacktraces,
            request.signal,
            request.options,
            &RewriteRules::default(),
        )
        .await
    }

    /// Walks the stacks of a minidump (the file at `path`), then symbolicates them.
    pub async fn process_minidump(
        &self,
        scope: Scope,
        path: &std::path::Path,
        request: CrashReportRequest,
    ) -> anyhow::Result<CompletedSymbolicationResponse> {
        let view = symbolic::common::ByteView::open(path)?;
        let minidump = Minidump::read(view).context("invalid minidump")?;
        let walked = Stackwalk {
            cfi: &self.cficaches,
            symcaches: &self.symcaches,
            scope: &scope,
            sources: &request.sources,
            rewrite_first_module: &request.rewrite_first_module,
        }
        .walk(&minidump)
        .await
        .context("cannot process minidump")?;
        let mut response = self
            .symbolicate_report(&scope, &request, walked.modules, walked.stacktraces)
            .await;
        walked.state.merge_into(&mut response);
        Ok(response)
    }

    /// Parses an Apple crash report (the file at `path`), then symbolicates its threads.
    pub async fn process_apple_crash_report(
        &self,
        scope: Scope,
        path: &std::path::Path,
        request: CrashReportRequest,
    ) -> anyhow::Result<CompletedSymbolicationResponse> {
        let file = std::fs::File::open(path)?;
        let report = apple::parse(std::io::BufReader::new(file))?;
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
        self.symbolicate_modules(
            scope,
            &request.sources,
            modules,
            stacktraces,
            None,
            request.options,
            &request.rewrite_first_module,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn symbolicate_modules(
        &self,
        scope: &Scope,
        sources: &[SourceConfig],
        modules: Vec<CompleteObjectInfo>,
        stacktraces: Vec<RawStacktrace>,
        signal: Option<Signal>,
        options: RequestOptions,
        rewrite_first_module: &RewriteRules,
    ) -> CompletedSymbolicationResponse {
        let mut lookup = ModuleLookup::new(modules, rewrite_first_module);
        lookup
            .fetch_caches(
                &self.symcaches,
                &self.ppdb_caches,
                sources,
                scope,
                &stacktraces,
            )
            .await;
        let mut stacktraces: Vec<_> = stacktraces
            .into_iter()
            .map(|trace| symbolicate_stacktrace(&self.demangle, &lookup, signal, trace))
            .collect();
        if options.apply_source_context {
            lookup
                .fetch_sources(&self.objects, sources, scope, &stacktraces)
                .await;
            let remote = lookup.apply_source_context(&mut stacktraces);
            let fetched = future::join_all(remote.into_iter().map(|source| async {
                let result = self.source_files.fetch(scope, &source.url).await;
                (source, result)
            }))
            .await;
            for (source, result) in fetched {
                if let Ok(bytes) = &result {
                    let text = String::from_utf8_lossy(bytes);
                    for &(t, f) in &source.frames {
                        set_context(&mut stacktraces[t].frames[f].raw, &text);
                    }
                }
                lookup.add_candidate(source.module, sourcelink_candidate(&source.url, &result));
            }
        }
        let mut modules = lookup.into_modules();
        if !options.dif_candidates {
            for module in &mut modules {
                module.candidates = Default::default();
            }
        }
        CompletedSymbolicationResponse {
            signal,
            stacktraces,
            modules,
            ..Default::default()
        }
    }
}
