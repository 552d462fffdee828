//! A parser that panics, reached through the real server: the debug file is served by a
//! filesystem source, downloaded, checked, loaded and converted as any other, and a
//! test-only marker in it makes one of those steps panic (`error::panic_if_marked`).
//! The module must come back `malformed`, the answer must be a 200, the cache must not
//! keep a file that panics, and the server must go on serving.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{AppState, router};
use crate::config::Config;

const ELF_BASE: u64 = 0x7f00_0000_0000;
const DEBUG_ID: &str = "d96fdc6c-1668-6d8a-e479-531b3d99327b";
const CODE_ID: &str = "6cdc6fd968168a6de479531b3d99327bca9dc649";

fn fixture_elf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/native/elf/crash.debug")
}

/// The real router on a loopback port, with its cache in `cache_dir` (shared with the
/// other in-crate server tests).
pub(super) async fn start(cache_dir: &Path) -> SocketAddr {
    let yaml = format!("cache_dir: {}\n", cache_dir.display());
    let (config, _) = Config::from_yaml(&yaml).unwrap();
    let state = AppState::new(&config).unwrap();
    let app = router(state, &config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The fixture ELF with `stage`'s marker appended (an ELF parses with trailing bytes),
/// at the native layout's path under a new symbol directory.
fn symbols_with_marker(stage: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir
        .path()
        .join(format!("{}/{}.debug", &CODE_ID[..2], &CODE_ID[2..]));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let mut bytes = std::fs::read(fixture_elf()).unwrap();
    bytes.extend_from_slice(format!("omnisym-test-panic:{stage}").as_bytes());
    std::fs::write(dest, bytes).unwrap();
    dir
}

async fn symbolicate(addr: SocketAddr, symbols: &Path) -> (u16, Value) {
    let body = json!({
        "sources": [{"type": "filesystem", "id": "local", "path": symbols}],
        "modules": [{
            "type": "elf",
            "debug_id": DEBUG_ID,
            "code_id": CODE_ID,
            "debug_file": "crash",
            "code_file": "/usr/bin/crash",
            "image_addr": format!("{ELF_BASE:#x}"),
            "image_size": 16400,
        }],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", ELF_BASE + 0x10cf)}]}],
    });
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/symbolicate?timeout=30"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn assert_malformed_and_still_serving(stage: &str) {
    let cache = tempfile::tempdir().unwrap();
    let symbols = symbols_with_marker(stage);
    let addr = start(cache.path()).await;
    if stage == "convert" {
        // The file itself reads fine: the first, cold request may be answered from it
        // by the lazy reader while the conversion runs (and panics). Once that has
        // failed, the failure is what every request sees, as with the other stages.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, response) = symbolicate(addr, symbols.path()).await;
            assert_eq!(status, 200, "{stage}: {response}");
            if response["modules"][0]["debug_status"] != "found" {
                break;
            }
            let frame = &response["stacktraces"][0]["frames"][0];
            assert_eq!(frame["status"], "symbolicated", "{stage}: {response}");
            assert!(
                std::time::Instant::now() < deadline,
                "{stage}: the conversion never failed: {response}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    for attempt in 0..2 {
        let (status, response) = symbolicate(addr, symbols.path()).await;
        assert_eq!(status, 200, "{stage} #{attempt}: {response}");
        assert_eq!(response["status"], "completed", "{stage}: {response}");
        let module = &response["modules"][0];
        assert_eq!(module["debug_status"], "malformed", "{stage}: {response}");
        let frame = &response["stacktraces"][0]["frames"][0];
        assert_eq!(frame["status"], "malformed", "{stage}: {response}");
    }
    // The file whose check or load panics was never published; the one whose
    // conversion panics loads fine and may stay (its SymCache never existed).
    let published: Vec<PathBuf> = files_under(cache.path())
        .into_iter()
        .filter(|path| std::fs::read(path).unwrap().starts_with(b"\x7fELF"))
        .collect();
    assert_eq!(
        published.is_empty(),
        stage != "convert",
        "{stage}: {published:?}"
    );
    let health = reqwest::get(format!("http://{addr}/healthcheck"))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parser_that_panics_while_checking_a_download_makes_the_module_malformed() {
    assert_malformed_and_still_serving("prepare").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parser_that_panics_while_loading_makes_the_module_malformed() {
    assert_malformed_and_still_serving("load").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converter_that_panics_makes_the_module_malformed() {
    assert_malformed_and_still_serving("convert").await;
}

/// A minidump whose walk panics is answered `failed`, as an unreadable dump is; the
/// next one is walked as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minidump_walk_that_panics_fails_that_request_only() {
    let cache = tempfile::tempdir().unwrap();
    let addr = start(cache.path()).await;
    let dump =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/minidump/fp/crash.dmp"))
            .unwrap();
    let mut marked = dump.clone();
    marked.extend_from_slice(b"omnisym-test-panic:minidump");
    let upload = |bytes: Vec<u8>| async move {
        let form = reqwest::multipart::Form::new().text("sources", "[]").part(
            "upload_file_minidump",
            reqwest::multipart::Part::bytes(bytes).file_name("crash.dmp"),
        );
        let response = reqwest::Client::new()
            .post(format!("http://{addr}/minidump?timeout=30"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap())
    };
    let (status, response) = upload(marked).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "failed", "{response}");
    assert!(
        response["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot process minidump"),
        "{response}"
    );
    let (status, response) = upload(dump).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "completed", "{response}");
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}
