//! A cold request through the real server: the debug file's SymCache conversion is made
//! slow by a test-only marker (`error::delay_if_marked`), so the first request can only
//! be answered in time by the lazy reader (of an ELF file's DWARF, or of Breakpad text). It must come back well before the conversion
//! ends, and the same request once the SymCache exists must give the same answer, byte
//! for byte.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use symbolic::common::ByteView;
use symbolic::debuginfo::Object;

use super::hostile_tests::start;
use crate::error::SLOW_MARKED;

const IMAGE_ADDR: u64 = 0x5555_0000_0000;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/lazy")
}

/// Every 20th return address of the ELF in `fixtures/lazy`, as absolute addresses.
fn frames() -> Vec<Value> {
    let text = std::fs::read_to_string(fixture().join("manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "elf/prog")
        .unwrap();
    file["return_addresses"]
        .as_array()
        .unwrap()
        .iter()
        .step_by(20)
        .map(|a| {
            let rel = u64::from_str_radix(a.as_str().unwrap().trim_start_matches("0x"), 16);
            json!({"instruction_addr": format!("{:#x}", IMAGE_ADDR + rel.unwrap())})
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_request_is_answered_before_its_symcache_exists_and_as_it_will_be() {
    let (bytes, path, module) = lazy_elf();
    cold_then_warm(&path, bytes, module, frames(), 50).await;
}

/// The ELF of `fixtures/lazy`: its bytes, where the native layout keeps it, and its
/// module in a request.
fn lazy_elf() -> (Vec<u8>, String, Value) {
    let bytes = std::fs::read(fixture().join("elf/prog")).unwrap();
    let object = Object::parse(&bytes).unwrap();
    let (debug_id, code_id) = (object.debug_id(), object.code_id().unwrap());
    drop(object);
    let code_id = code_id.as_str().to_owned();
    let path = format!("{}/{}.debug", &code_id[..2], &code_id[2..]);
    let module = json!({
        "type": "elf",
        "debug_id": debug_id.to_string(),
        "code_id": code_id,
        "code_file": "/usr/bin/prog",
        "image_addr": format!("{IMAGE_ADDR:#x}"),
        "image_size": 0x100000,
    });
    (bytes, path, module)
}

/// The same for a Breakpad file, the only debug file of its module: every FUNC record's
/// start, middle and last byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_breakpad_request_is_answered_before_its_symcache_exists_and_as_it_will_be() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/native/breakpad");
    let bytes = std::fs::read(root.join("crash.sym")).unwrap();
    let object = Object::parse(&bytes).unwrap();
    let (debug_id, code_id) = (object.debug_id(), object.code_id().unwrap());
    drop(object);
    let text = String::from_utf8(bytes.clone()).unwrap();
    let mut frames = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("FUNC ")) {
        let field = |i| u64::from_str_radix(line.split(' ').nth(i).unwrap(), 16).unwrap();
        let (start, size) = (field(1), field(2));
        for rel in [start, start + size / 2, start + size - 1] {
            frames.push(json!({"instruction_addr": format!("{:#x}", IMAGE_ADDR + rel)}));
        }
    }
    let path = format!("crash/{}/crash.sym", debug_id.breakpad());
    let module = json!({
        "type": "elf",
        "debug_id": debug_id.to_string(),
        "code_id": code_id.as_str(),
        "code_file": "/usr/bin/crash",
        "debug_file": "crash",
        "image_addr": format!("{IMAGE_ADDR:#x}"),
        "image_size": 0x100000,
    });
    let count = frames.len();
    assert!(count >= 20, "{count}");
    cold_then_warm(&path, bytes, module, frames, count).await;
}

/// Puts `bytes` at `path` of a filesystem source with the marker that slows their
/// SymCache conversion, and symbolicates `frames` in `module` twice: cold, which must
/// come back well before the conversion ends with at least `symbolicated` frames
/// symbolicated with a line, and once the SymCache is written, which must give the
/// same answer.
async fn cold_then_warm(
    path: &str,
    mut bytes: Vec<u8>,
    module: Value,
    frames: Vec<Value>,
    symbolicated: usize,
) {
    let symbols = tempfile::tempdir().unwrap();
    let dest = symbols.path().join(path);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    bytes.extend_from_slice(b"omnisym-test-slow:convert\n");
    assert!(Object::parse(&ByteView::from_slice(&bytes)).is_ok());
    std::fs::write(&dest, &bytes).unwrap();

    let cache = tempfile::tempdir().unwrap();
    let addr = start(cache.path()).await;
    let body = json!({
        "sources": [{"type": "filesystem", "id": "local", "path": symbols.path()}],
        "modules": [module],
        "stacktraces": [{"frames": frames}],
    });
    let symbolicate = || async {
        let started = Instant::now();
        let response = post(addr, &body).await;
        (response, started.elapsed())
    };

    let started = Instant::now();
    let (cold, took) = symbolicate().await;
    assert_eq!(cold["status"], "completed", "{cold}");
    assert!(
        took < SLOW_MARKED / 2,
        "the cold request waited for the conversion ({took:?})"
    );
    let answered = cold["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "symbolicated" && f["lineno"].as_u64() > Some(0))
        .count();
    assert!(answered >= symbolicated, "{cold}");

    // Once the conversion is done (it sleeps SLOW_MARKED, and more on a loaded
    // machine), the SymCache answers.
    let symcaches = cache.path().join("symcaches");
    let written = || {
        walk(&symcaches)
            .iter()
            .any(|entry| std::fs::metadata(entry).is_ok_and(|m| m.len() > 1024))
    };
    let deadline = started + SLOW_MARKED + Duration::from_secs(60);
    while !written() {
        assert!(
            Instant::now() < deadline,
            "no SymCache was written under {}",
            symcaches.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (warm, took) = symbolicate().await;
    assert!(took < SLOW_MARKED / 2, "{took:?}");
    assert_eq!(cold, warm);
}

/// `body` to `/symbolicate`, waiting up to a minute for the answer.
async fn post(addr: std::net::SocketAddr, body: &Value) -> Value {
    reqwest::Client::new()
        .post(format!("http://{addr}/symbolicate?timeout=60"))
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// A cold module whose SymCache conversion fails. When the reader answered first, the
/// file was usable for that request; once the build has failed, later requests say of
/// the candidate what they say of the module (`malformed`, as upstream says of a file
/// whose SymCache fails), so the console's "why not?" names the file's debug info. When
/// the failed build is the answer of the request that started it (it ended before the
/// reader opened), that request says so of its candidate too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cold_build_is_recorded_on_its_candidate() {
    for (slow, first) in [("convert", "found"), ("open", "malformed")] {
        let markers = format!("omnisym-test-slow:{slow}\nomnisym-test-panic:symcache\n");
        failed_build(markers.as_bytes(), first).await;
    }
}

/// Serves the lazy fixture's ELF with `markers` appended and symbolicates it until its
/// failed build is remembered: the first answer's module has `first` as its debug
/// status, and every answer's candidate says what its module says.
async fn failed_build(markers: &[u8], first: &str) {
    let (mut bytes, rel, module) = lazy_elf();
    bytes.extend_from_slice(markers);
    let symbols = tempfile::tempdir().unwrap();
    let dest = symbols.path().join(&rel);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(&dest, &bytes).unwrap();

    let cache = tempfile::tempdir().unwrap();
    let addr = start(cache.path()).await;
    let body = json!({
        "sources": [{"type": "filesystem", "id": "local", "path": symbols.path()}],
        "modules": [module],
        "stacktraces": [{"frames": frames()}],
        "options": {"dif_candidates": true},
    });
    let symbolicate = || async {
        let response = post(addr, &body).await;
        let module = response["modules"][0].clone();
        let candidate = module["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["location"].as_str().unwrap().ends_with(&rel))
            .cloned()
            .unwrap_or_else(|| panic!("no candidate at {rel}: {module:#}"));
        assert_eq!(candidate["download"]["status"], "ok", "{module:#}");
        let status = module["debug_status"].as_str().unwrap().to_owned();
        let expected = if status == "found" { "ok" } else { "malformed" };
        assert_eq!(candidate["debug"]["status"], expected, "{module:#}");
        status
    };

    assert_eq!(symbolicate().await, first);
    let symcaches = cache.path().join("symcaches");
    let failed = || {
        walk(&symcaches).iter().any(|path| {
            std::fs::read(path).is_ok_and(|data| data.starts_with(b"\0omnisym-placeholder\0"))
        })
    };
    let deadline = Instant::now() + SLOW_MARKED + Duration::from_secs(60);
    while !failed() {
        assert!(Instant::now() < deadline, "the conversion never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..2 {
        assert_eq!(symbolicate().await, "malformed");
    }
}
