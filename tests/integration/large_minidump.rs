//! `POST /minidump` of a crash made by scripts/gen-large-minidump.py, at a small scale:
//! many modules, several threads whose stacks only their Breakpad STACK CFI unwinds,
//! symbols from a `native`-layout filesystem source. The generator's expected.json says
//! what every thread must come back as. scripts/large-minidump-bench.sh times the same
//! crash at full size.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use axum::http::StatusCode;
use common::{Server, crashing_thread, hex, minidump_form};
use serde_json::{Value, json};

/// Runs the generator into a temp dir with `args` (python3: scripts/test.sh installs it).
fn generate(args: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gen-large-minidump.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "python3 {}: {e} (scripts/test.sh installs python3)",
                script.display()
            )
        });
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// A thread's frames by the stack frame they came from (inlinees share theirs).
fn by_input_frame(thread: &Value) -> BTreeMap<u64, Vec<&Value>> {
    let mut groups: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for frame in thread["frames"].as_array().expect("frames") {
        let index = frame["original_index"].as_u64().expect("original_index");
        groups.entry(index).or_default().push(frame);
    }
    groups
}

/// Every thread's stack, as the generator laid it out: each stack frame's address and
/// trust (the crash context, then CFI all the way down), and the functions and lines it
/// symbolicates to, inlinees first.
fn assert_threads(response: &Value, expected: &Value) {
    let threads = response["stacktraces"].as_array().expect("stacktraces");
    let want = expected["threads"].as_array().unwrap();
    assert_eq!(threads.len(), want.len(), "threads");
    for (thread, want) in threads.iter().zip(want) {
        let tid = &want["thread_id"];
        assert_eq!(thread["thread_id"], *tid, "thread order");
        let groups = by_input_frame(thread);
        let want_frames = want["frames"].as_array().unwrap();
        assert_eq!(
            groups.len(),
            want_frames.len(),
            "thread {tid}: stack frames {:#?}",
            thread["frames"]
        );
        for (n, ((index, got), want)) in groups.iter().zip(want_frames).enumerate() {
            let at = format!("thread {tid}, frame {index}: {got:#?}");
            assert_eq!(*index, n as u64, "{at}");
            let functions: Vec<&Value> = got.iter().map(|f| &f["function"]).collect();
            let lines: Vec<&Value> = got.iter().map(|f| &f["lineno"]).collect();
            let want_functions: Vec<&Value> =
                want["functions"].as_array().unwrap().iter().collect();
            let want_lines: Vec<&Value> = want["lines"].as_array().unwrap().iter().collect();
            assert_eq!(functions, want_functions, "{at}");
            assert_eq!(lines, want_lines, "{at}");
            assert_eq!(
                hex(&got[0]["instruction_addr"]),
                hex(&want["instruction_addr"]),
                "{at}"
            );
            assert_eq!(got[0]["trust"], want["trust"], "{at}");
            assert!(got.iter().all(|f| f["status"] == "symbolicated"), "{at}");
        }
    }
}

/// A module some frame is in was found, for symbols and for unwinding; the others were
/// not needed.
fn assert_modules(response: &Value, expected: &Value) {
    let modules = response["modules"].as_array().expect("modules");
    let want = expected["modules"].as_array().unwrap();
    assert_eq!(modules.len(), want.len(), "modules");
    for (got, want) in modules.iter().zip(want) {
        let at = format!("{got:#}");
        assert_eq!(got["code_file"], want["code_file"], "{at}");
        assert_eq!(got["code_id"], want["code_id"], "{at}");
        assert_eq!(got["debug_id"], want["debug_id"], "{at}");
        assert_eq!(hex(&got["image_addr"]), hex(&want["image_addr"]), "{at}");
        let status = if want["on_stack"] == true {
            "found"
        } else {
            "unused"
        };
        assert_eq!(got["debug_status"], status, "{at}");
        assert_eq!(got["unwind_status"], status, "{at}");
    }
}

#[tokio::test]
async fn a_generated_crash_comes_back_as_generated_thread_by_thread() {
    let started = Instant::now();
    let dir = generate("--modules 20 --threads 5 --large 1 --large-mib 1 --small-kib 16");
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("expected.json")).unwrap()).unwrap();
    let dump = std::fs::read(dir.path().join("crash.dmp")).unwrap();
    let sources = json!([{
        "type": "filesystem",
        "id": "generated",
        "path": dir.path().join("symbols"),
        "layout": {"type": "native"},
    }]);

    let server = Server::start("");
    let (content_type, body) = minidump_form(&dump, &sources, &json!({}));
    let (status, response) = server.post_typed("/minidump", &content_type, body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed", "{response:#}");

    assert_eq!(response["crashed"], true, "{response:#}");
    assert_eq!(response["crash_reason"], expected["crash"]["reason"]);
    assert_eq!(response["system_info"]["os_name"], "Linux");
    assert_eq!(response["system_info"]["cpu_arch"], "x86_64");
    let crashed = crashing_thread(&response);
    assert_eq!(crashed["thread_id"], expected["crash"]["thread_id"]);
    assert_threads(&response, &expected);
    assert_modules(&response, &expected);
    // Some module has no frame: the walk did not just touch them all.
    assert!(
        expected["modules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["on_stack"] == false),
        "every module is on a stack: the unused status is not tested"
    );
    println!("generated, served and checked in {:?}", started.elapsed());
}
