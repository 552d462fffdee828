//! `POST /symbolicate`: the query string (first line of the input) and the JSON body
//! (the rest) parsed as the handler parses them, then the request symbolicated by the
//! native pipeline with no sources (what a server without configured sources does with
//! a request that names none) and the answer serialised. The request's own sources are
//! parsed, then not fetched from: instead every location they would be asked for is
//! checked to stay below the source's root.
//!
//! Our own code only (plus the demanglers, which run on names the client sent): any
//! panic is a crash.

#![no_main]

use std::path::Component;

use axum::extract::FromRequestParts;
use libfuzzer_sys::fuzz_target;
use omnisym::fetch::RemoteFile;
use omnisym::native::SymbolicateRequest;
use omnisym::server::{Params, parse_json};
use omnisym::service::completed_body;
use omnisym::sources::{FileType, ObjectId, SourceConfig, source_locations};
use omnisym_fuzz::{app_state, runtime, split_once};

fuzz_target!(|data: &[u8]| {
    let (query, body) = split_once(data, b'\n');
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    let Ok(request) = axum::http::Request::post(format!("/symbolicate?{query}")).body(()) else {
        return;
    };
    let (mut parts, ()) = request.into_parts();
    let state = app_state();
    runtime().block_on(async {
        let Ok(Params(params)) = Params::from_request_parts(&mut parts, &()).await else {
            return;
        };
        if params.timeout().is_err() {
            return;
        }
        let scope = params.scope();
        let Ok(mut request) = parse_json::<SymbolicateRequest>(body) else {
            return;
        };
        if let Some(sources) = request.sources.take() {
            check_locations(&sources, &request);
        }
        let sources = state.sources_or_default(None);
        let response = state.native.symbolicate(scope, sources, request).await;
        let body = completed_body(&response);
        serde_json::from_slice::<serde_json::Value>(&body).expect("the answer is JSON");
    });
});

/// Every location a source would be asked for stays below its root, whatever the
/// request's modules say.
fn check_locations(sources: &[SourceConfig], request: &SymbolicateRequest) {
    for module in &request.modules {
        // As the native pipeline reads a module's ids; a module whose ids do not parse
        // is never looked up.
        let (Ok(debug_id), Ok(code_id)) = (parse_id(&module.debug_id), parse_id(&module.code_id))
        else {
            continue;
        };
        let id = ObjectId {
            debug_id,
            code_id,
            debug_file: module.debug_file.clone(),
            code_file: module.code_file.clone(),
            debug_checksum: module.debug_checksum.clone(),
            object_type: module.ty,
        };
        for source in sources {
            if matches!(source, SourceConfig::Sentry(_)) {
                continue;
            }
            let filetypes = FileType::from_object_type(id.object_type);
            for path in source_locations(source.files(), filetypes, &id) {
                // What candidate reports show for the location.
                let _file = RemoteFile::new(source.clone(), path.clone());
                match source {
                    SourceConfig::Filesystem(fs) => {
                        let joined = fs.join_path(&path);
                        let rest = joined
                            .strip_prefix(&fs.path)
                            .expect("a location stays below the root");
                        assert!(
                            rest.components().all(|c| matches!(c, Component::Normal(_))),
                            "{path:?} escapes to {joined:?}"
                        );
                    }
                    SourceConfig::Http(http) => {
                        if let Some(url) = http.join_url(&path) {
                            // Not `origin()`: every opaque origin differs from every other.
                            let server = |u: &url::Url| {
                                (
                                    u.scheme().to_owned(),
                                    u.host_str().map(str::to_owned),
                                    u.port(),
                                )
                            };
                            assert_eq!(server(&url), server(&http.url), "{path:?}");
                            let base = http.url.path().trim_end_matches('/');
                            assert!(url.path().starts_with(base), "{path:?} leaves {base}");
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

fn parse_id<T: std::str::FromStr>(id: &Option<String>) -> Result<Option<T>, ()> {
    match id.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| ()),
    }
}
