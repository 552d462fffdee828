//! Native symbolication: finding debug files for modules (`objects`), SymCaches
//! (`symcache`), demangling, and symbolicating stack traces (`symbolicate`). Minidump
//! stackwalking, CFI caches, Apple crash reports and source context will live here too.

mod demangle;
mod derived;
pub mod objects;
mod ppdb;
mod source_context;
pub mod symbolicate;
pub mod symcache;

use std::sync::Arc;

use serde::Deserialize;

use crate::cache::{Caches, Scope};
use crate::fetch::Downloader;
use crate::sources::SourceConfig;
use crate::types::{
    CompletedSymbolicationResponse, RawObjectInfo, RawStacktrace, RequestOptions, Signal,
};
use demangle::DemangleCache;
use objects::ObjectsActor;
use ppdb::PpdbCacheActor;
use symbolicate::{ModuleLookup, symbolicate_stacktrace};
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
    ppdb_caches: PpdbCacheActor,
    demangle: DemangleCache,
}

impl NativeService {
    pub fn new(caches: &Caches, downloader: Downloader, max_download_size: u64) -> Self {
        let objects = Arc::new(ObjectsActor::new(caches, downloader, max_download_size));
        NativeService {
            symcaches: SymCacheActor::new(caches, objects.clone()),
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
        let SymbolicateRequest {
            signal,
            stacktraces,
            modules,
            options,
            ..
        } = request;
        let mut lookup = ModuleLookup::new(modules);
        lookup
            .fetch_caches(
                &self.symcaches,
                &self.ppdb_caches,
                &sources,
                &scope,
                &stacktraces,
            )
            .await;
        let mut stacktraces: Vec<_> = stacktraces
            .into_iter()
            .map(|trace| symbolicate_stacktrace(&self.demangle, &lookup, signal, trace))
            .collect();
        if options.apply_source_context {
            lookup
                .fetch_sources(&self.objects, &sources, &scope, &stacktraces)
                .await;
            lookup.apply_source_context(&mut stacktraces);
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
        }
    }
}
