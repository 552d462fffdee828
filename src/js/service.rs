//! `/symbolicate-js` as a service: one [`RequestLookup`] per request over the files,
//! caches and lookup answers all requests share ([`JsFiles`]), handed to frame
//! resolution; the answer adds the request's scraping attempts.

use std::collections::HashMap;
use std::sync::Arc;

use symbolic::common::DebugId;

use super::bundle::{BundleLimits, BundleMemory};
use super::interface::{CompletedJsSymbolicationResponse, JsSymbolicationRequest};
use super::lookup::{JsFiles, LookupParams, RequestLookup};
use super::symbolicate::symbolicate_stacktraces;
use crate::cache::{Caches, Scope};
use crate::fetch::Downloader;
use crate::sources::SourceConfig;

pub struct JsService {
    files: JsFiles,
}

impl JsService {
    pub fn new(
        caches: &Caches,
        downloader: Downloader,
        bundle_limits: BundleLimits,
        bundle_memory: BundleMemory,
    ) -> Self {
        JsService {
            files: JsFiles::new(caches, downloader, bundle_limits, bundle_memory),
        }
    }

    pub async fn symbolicate(
        &self,
        scope: Scope,
        sources: Arc<[SourceConfig]>,
        request: JsSymbolicationRequest,
    ) -> CompletedJsSymbolicationResponse {
        let scraping = request.effective_scraping();
        let debug_ids: HashMap<String, DebugId> = request
            .modules
            .iter()
            .filter_map(|m| Some((m.code_file.clone(), m.parsed_debug_id()?)))
            .collect();
        let mut lookup = RequestLookup::new(
            &self.files,
            LookupParams {
                scope,
                sentry: request.source,
                sources,
                release: request.release,
                dist: request.dist,
                scraping,
                debug_ids,
            },
        );
        let result =
            symbolicate_stacktraces(&mut lookup, request.stacktraces, request.options).await;
        CompletedJsSymbolicationResponse {
            stacktraces: result.stacktraces,
            raw_stacktraces: result.raw_stacktraces,
            errors: result.errors,
            used_artifact_bundles: Vec::new(),
            scraping_attempts: lookup.into_scraping_attempts(),
        }
    }
}
