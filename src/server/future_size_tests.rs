//! The futures of the request paths stay small. A future holds every future it awaits
//! inline, and rustc copies a future whole whenever it is moved: into its parent's
//! state, into a `join_all` vector, into a spawned task. The S3 and GCS clients'
//! futures are tens of kilobytes, so one inline download or shared-cache read made a
//! warm `/symbolicate` copy 17 KiB per module and a warm `/symbolicate-js` 8 KiB per
//! frame, although neither downloads anything. Those calls are boxed where they are
//! made; these bounds (debug builds, whose futures are larger than release ones) fail
//! when an unboxed one creeps back in.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Uri};
use bytes::Bytes;

use super::error::RequestBody;
use crate::cache::Scope;
use crate::config::Config;
use crate::server::{AppState, RequestSlot};

const BOUND: usize = 4096;

fn state() -> (tempfile::TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        cache_dir: dir.path().to_owned(),
        ..Config::default()
    };
    let state = AppState::new(&config).unwrap();
    (dir, state)
}

#[tokio::test]
async fn request_futures_stay_small() {
    let (_dir, state) = state();
    let native: crate::native::SymbolicateRequest =
        serde_json::from_str(r#"{"stacktraces":[],"modules":[]}"#).unwrap();
    let native = state
        .native
        .symbolicate(Scope::new("global"), Arc::from(vec![]), native);
    let js: crate::js::JsSymbolicationRequest = serde_json::from_str(
        r#"{"source":{"id":"s","url":"http://x/","token":"t"},"stacktraces":[],"modules":[]}"#,
    )
    .unwrap();
    let js = state
        .js
        .symbolicate(Scope::new("global"), Arc::from(vec![]), js);
    let jvm: crate::jvm::SymbolicateJvmRequest =
        serde_json::from_str(r#"{"stacktraces":[],"modules":[]}"#).unwrap();
    let jvm = state
        .jvm
        .symbolicate(Scope::new("global"), Arc::from(vec![]), jvm);
    let crash = crate::native::CrashReportRequest {
        sources: Arc::from(vec![]),
        options: Default::default(),
        rewrite_first_module: Default::default(),
    };
    let minidump = state.native.process_crash_file(
        crate::native::CrashKind::Minidump,
        Scope::new("global"),
        crate::native::CrashData::Memory(Vec::new()),
        crash,
    );
    // The fronts' handlers, whose futures axum boxes once per request.
    let mozilla = super::compat::mozilla::symbolicate_v5(
        State(state.clone()),
        Extension(crate::config::MozillaConfig::default()),
        HeaderMap::new(),
        RequestSlot(state.service.reserve().unwrap()),
        RequestBody(Bytes::from_static(br#"{"jobs":[]}"#)),
    );
    let proxy = super::compat::proxy::proxy(
        State(state.clone()),
        Method::GET,
        Uri::from_static("/proxy/crash.pdb/0123456789ABCDEF0123456789ABCDEF1/crash.pdb"),
        HeaderMap::new(),
        Path("crash.pdb/0123456789ABCDEF0123456789ABCDEF1/crash.pdb".to_owned()),
        axum::extract::RawQuery(None),
    );
    let debuginfod = super::compat::debuginfod::buildid(
        State(state.clone()),
        Method::GET,
        HeaderMap::new(),
        Path(("0123456789abcdef".to_owned(), "source/a/b.c".to_owned())),
    );
    let http: crate::sources::HttpSourceConfig =
        serde_json::from_str(r#"{"id":"x","url":"http://x/","layout":{"type":"native"}}"#).unwrap();
    let file = crate::fetch::RemoteFile::whole_url(http);
    let mut dest = tempfile::NamedTempFile::new().unwrap();
    let download = state.downloader.fetch(&file, &mut dest, 10);
    let id: crate::native::symbfile::FileId = "00112233445566778899aabbccddeeff".parse().unwrap();
    let symbfile = state.symbfiles.find(id);
    let (object_id, scope) = (crate::sources::ObjectId::default(), Scope::new("global"));
    let symcache = state
        .native
        .symcaches()
        .fetch_or_start_building(&[], &object_id, &scope);
    for (what, size) in [
        ("native symbolicate", std::mem::size_of_val(&native)),
        (
            "an uploaded symbfile's lookup",
            std::mem::size_of_val(&symbfile),
        ),
        ("a SymCache's lookup", std::mem::size_of_val(&symcache)),
        ("js symbolicate", std::mem::size_of_val(&js)),
        ("jvm symbolicate", std::mem::size_of_val(&jvm)),
        ("a minidump's processing", std::mem::size_of_val(&minidump)),
        ("the Mozilla front's v5", std::mem::size_of_val(&mozilla)),
        ("the symstore proxy", std::mem::size_of_val(&proxy)),
        ("the debuginfod front", std::mem::size_of_val(&debuginfod)),
        ("a download", std::mem::size_of_val(&download)),
    ] {
        assert!(size <= BOUND, "the future of {what} is {size} bytes");
    }
}
