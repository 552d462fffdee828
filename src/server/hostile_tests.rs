//! A parser that panics, reached through the real server: the debug file is served by a
//! filesystem source, downloaded, checked, loaded and converted as any other. The
//! hostile files are real: inputs the fuzzers found that make `pdb` panic while the
//! download is checked and while its SymCache is converted (`fuzz/regressions`, where
//! `tests/fuzz_regressions.rs` checks that they still panic). The module must come back
//! `malformed`, the answer must be a 200, the cache must not keep a file that panics,
//! and the server must go on serving. A cache file that panics when it is loaded (damaged
//! on disk) is computed again. A symbfile upload whose reader or converter panics (no
//! real input is known to: test-only markers stand in, `error::panic_if_marked`) is
//! refused as malformed, and nothing of it is kept.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{AppState, router};
use crate::config::Config;

const ELF_BASE: u64 = 0x7f00_0000_0000;
const DEBUG_ID: &str = "d96fdc6c-1668-6d8a-e479-531b3d99327b";
const CODE_ID: &str = "6cdc6fd968168a6de479531b3d99327bca9dc649";

/// The PDB module the hostile files are served for; its id is never checked, because
/// every one of them panics before anything reads their id.
const PDB_DEBUG_ID: &str = "3249d99d-0c40-4931-8610-f4e4fb0b6936-1";
const PDB_BASE: u64 = 0x1_4000_0000;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_elf() -> PathBuf {
    root().join("fixtures/native/elf/crash.debug")
}

/// A kept fuzz input, by its target and name.
fn regression(target: &str, name: &str) -> PathBuf {
    root().join("fuzz/regressions").join(target).join(name)
}

/// The real router on a loopback port, with its cache in `cache_dir` (shared with the
/// other in-crate server tests).
pub(super) async fn start(cache_dir: &Path) -> SocketAddr {
    start_with(cache_dir, "").await
}

/// [`start`] with more of the config, in YAML.
async fn start_with(cache_dir: &Path, more: &str) -> SocketAddr {
    let yaml = format!("cache_dir: {}\n{more}", cache_dir.display());
    let (config, _) = Config::from_yaml(&yaml).unwrap();
    let state = AppState::new(&config).unwrap();
    let app = router(state, &config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = crate::server::ConnectionLimits::of(&config);
    tokio::spawn(crate::server::serve(
        listener,
        app,
        limits,
        std::future::pending(),
    ));
    addr
}

/// A module and where a filesystem source in the native layout keeps its debug file.
struct Module {
    request: Value,
    frame: u64,
    path: String,
}

fn elf_module() -> Module {
    Module {
        request: json!({
            "type": "elf",
            "debug_id": DEBUG_ID,
            "code_id": CODE_ID,
            "debug_file": "crash",
            "code_file": "/usr/bin/crash",
            "image_addr": format!("{ELF_BASE:#x}"),
            "image_size": 16400,
        }),
        frame: ELF_BASE + 0x10cf,
        path: format!("{}/{}.debug", &CODE_ID[..2], &CODE_ID[2..]),
    }
}

fn pdb_module() -> Module {
    Module {
        request: json!({
            "type": "pe",
            "debug_id": PDB_DEBUG_ID,
            "debug_file": "hostile.pdb",
            "image_addr": format!("{PDB_BASE:#x}"),
            "image_size": 0x10000,
        }),
        frame: PDB_BASE + 0x1000,
        path: "hostile.pdb/3249D99D0C4049318610F4E4FB0B69361/hostile.pdb".into(),
    }
}

/// A new symbol directory serving `file` as `module`'s debug file.
fn serve(module: &Module, file: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join(&module.path);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, dest).unwrap();
    dir
}

async fn symbolicate(addr: SocketAddr, module: &Module, symbols: &Path) -> (u16, Value) {
    let body = json!({
        "sources": [{"type": "filesystem", "id": "local", "path": symbols}],
        "modules": [module.request],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", module.frame)}]}],
    });
    post_symbolicate(addr, &body).await
}

async fn post_symbolicate(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/symbolicate?timeout=30"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Which step the hostile file panics in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    /// The check of a download, before it is published.
    Prepare,
    /// The SymCache conversion of a file that reads fine.
    Convert,
}

async fn assert_malformed_and_still_serving(stage: Stage, hostile: PathBuf) {
    let cache = tempfile::tempdir().unwrap();
    let module = pdb_module();
    let symbols = serve(&module, &hostile);
    let addr = start(cache.path()).await;
    if stage == Stage::Convert {
        // The file itself reads: the first, cold requests may be answered from it by
        // the lazy reader while the conversion runs (and panics). Once that has failed,
        // the failure is what every request sees, as with the other stage.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, response) = symbolicate(addr, &module, symbols.path()).await;
            assert_eq!(status, 200, "{stage:?}: {response}");
            if response["modules"][0]["debug_status"] != "found" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{stage:?}: the conversion never failed: {response}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    for attempt in 0..2 {
        let (status, response) = symbolicate(addr, &module, symbols.path()).await;
        assert_eq!(status, 200, "{stage:?} #{attempt}: {response}");
        assert_eq!(response["status"], "completed", "{stage:?}: {response}");
        let module = &response["modules"][0];
        assert_eq!(module["debug_status"], "malformed", "{stage:?}: {response}");
        let frame = &response["stacktraces"][0]["frames"][0];
        assert_eq!(frame["status"], "malformed", "{stage:?}: {response}");
    }
    // The file whose check panics was never published; the one whose conversion
    // panics reads fine and may stay (its SymCache never existed).
    let bytes = std::fs::read(&hostile).unwrap();
    let published: Vec<PathBuf> = files_under(cache.path())
        .into_iter()
        .filter(|path| std::fs::read(path).unwrap() == bytes)
        .collect();
    assert_eq!(
        published.is_empty(),
        stage == Stage::Prepare,
        "{stage:?}: {published:?}"
    );
    let health = reqwest::get(format!("http://{addr}/healthcheck"))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    // Another module on the same server is served as usual.
    let elf = elf_module();
    let elf_symbols = serve(&elf, &fixture_elf());
    let (status, response) = symbolicate(addr, &elf, elf_symbols.path()).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parser_that_panics_while_checking_a_download_makes_the_module_malformed() {
    let hostile = regression("lazy_open", "contained-pdb-dbi-619");
    assert_malformed_and_still_serving(Stage::Prepare, hostile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converter_that_panics_makes_the_module_malformed() {
    let hostile = regression("object_file", "contained-pdb-modi-200");
    assert_malformed_and_still_serving(Stage::Convert, hostile).await;
}

/// A cache file damaged on disk so that its parser panics (here: replaced by a file
/// that panics `pdb`) is computed again on the next load, by a new process that has
/// only the disk, and answers as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_file_that_panics_when_loaded_is_computed_again() {
    let cache = tempfile::tempdir().unwrap();
    let module = elf_module();
    let symbols = serve(&module, &fixture_elf());
    let first = start(cache.path()).await;
    let (_, response) = symbolicate(first, &module, symbols.path()).await;
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );

    let elf = std::fs::read(fixture_elf()).unwrap();
    let hostile = std::fs::read(regression("lazy_open", "contained-pdb-dbi-619")).unwrap();
    let published: Vec<PathBuf> = files_under(cache.path())
        .into_iter()
        .filter(|path| std::fs::read(path).unwrap() == elf)
        .collect();
    assert!(!published.is_empty(), "the download was not published");
    // Replaced, not rewritten in place: the first server may still be converting the
    // file it answered from lazily, through a mapping that truncating the file under it
    // would turn into SIGBUS.
    for path in &published {
        let damaged = path.with_extension("damaged");
        std::fs::write(&damaged, &hostile).unwrap();
        std::fs::rename(&damaged, path).unwrap();
    }
    // Without a SymCache the debug file itself must be loaded again. The first answer
    // came from the file while its SymCache was built in the background: wait for it,
    // so it is not written after being removed.
    let symcaches = cache.path().join("symcaches");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !symcaches.is_dir() || files_under(&symcaches).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no SymCache was built"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    std::fs::remove_dir_all(&symcaches).unwrap();

    let second = start(cache.path()).await;
    let (status, response) = symbolicate(second, &module, symbols.path()).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );
    let frame = &response["stacktraces"][0]["frames"][0];
    assert_eq!(frame["status"], "symbolicated", "{response}");
    for path in &published {
        assert_eq!(std::fs::read(path).unwrap(), elf, "{}", path.display());
    }
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

/// A symbfile whose string table holds `stage`'s marker, as the name of the function
/// of its one return pad: it reads and converts, but for the marker.
fn symbfile_with_marker(stage: &str) -> Vec<u8> {
    let name = format!("omnisym-test-panic:{stage}");
    // StringTableV1 { strings: [name, "a.c"] }
    let mut table = vec![0x0a, name.len() as u8];
    table.extend_from_slice(name.as_bytes());
    table.extend_from_slice(b"\x0a\x03a.c");
    // ReturnPadV1 { setElfVA: 0x1000, func: [0], file: [1], line: [7] }
    let pad = [0x28, 0x80, 0x20, 0x12, 1, 0, 0x1a, 1, 1, 0x22, 1, 7];
    let mut out = b"symbfile".to_vec();
    // Records: length, type (1 header, 4 string table, 3 return pad), body.
    for (ty, body) in [(1, &[][..]), (4, &table), (3, &pad)] {
        out.extend_from_slice(&[body.len() as u8, ty]);
        out.extend_from_slice(body);
    }
    out
}

/// A symbfile upload whose reading or conversion panics is refused as a malformed
/// symbfile (400, Elastic's code 1004), nothing of it is stored, and the server goes
/// on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symbfile_that_panics_the_reader_or_the_converter_is_refused() {
    let cache = tempfile::tempdir().unwrap();
    let addr = start_with(cache.path(), "symbfile:\n  api_keys: [key]\n").await;
    let file_id = "d--nFqkSpJIXRFeHMp_Smg";
    for (stage, parser) in [
        ("read", "symbfile reader"),
        ("convert", "symbfile_symcaches"),
    ] {
        let response = reqwest::Client::new()
            .post(format!("http://{addr}/api/symbols-returnpads"))
            .header("FileID", file_id)
            .header("FilePart", "0")
            .header("FileParts", "1")
            .header("Authorization", "APIKey key")
            .body(symbfile_with_marker(stage))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{stage}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["Code"], "1004", "{stage}: {answer}");
        let text = answer["error"]["Text"].as_str().unwrap();
        let failed = format!("{parser}: the parser failed");
        assert!(text.contains(&failed), "{stage}: {text}");
    }
    let body = json!({
        "modules": [{
            "type": "elf",
            "file_id": file_id,
            "image_addr": format!("{ELF_BASE:#x}"),
            "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", ELF_BASE + 0x1001)}]}],
    });
    let (status, response) = post_symbolicate(addr, &body).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "missing",
        "{response}"
    );
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
