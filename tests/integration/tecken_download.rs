//! Tecken's download API under `/proxy/` (`<debug_file>/<debug_id>/<file>.sym`), read by
//! rust-minidump's `minidump-stackwalk --symbols-url` (crates.io, installed by
//! scripts/test.sh): the real omnisym on loopback serving the minidump fixture's Breakpad
//! file from a filesystem source that `omnisym sort` laid out (unified layout).

use crate::common;

use std::path::Path;
use std::process::Command;

use axum::http::StatusCode;
use common::{Server, client, minidump_file, minidump_variant};
use serde_json::Value;

fn server_for(root: &Path) -> Server {
    Server::start(&format!(
        "sources:\n  - {{id: sorted, type: filesystem, path: \"{}\", layout: {{type: unified}}}}\n",
        root.display()
    ))
}

/// `minidump-stackwalk --json` of `dump`, with `--symbols-url url` when given, and a
/// cache of its own (it keeps downloaded files).
fn stackwalk(dump: &Path, url: Option<&str>) -> Value {
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("minidump-stackwalk");
    cmd.arg("--json")
        .arg("--symbols-cache")
        .arg(cache.path().join("cache"))
        .arg("--symbols-tmp")
        .arg(cache.path().join("tmp"));
    if let Some(url) = url {
        cmd.args(["--symbols-url", url]);
    }
    let out = cmd.arg(dump).output().expect("minidump-stackwalk runs");
    assert!(
        out.status.success(),
        "minidump-stackwalk failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("minidump-stackwalk prints JSON")
}

/// The crashing thread's frames of the fixture's module: function, line and inlined
/// calls, innermost first.
fn module_frames(answer: &Value) -> Vec<(String, i64, Vec<String>)> {
    let thread = answer["crashing_thread"]["frames"]
        .as_array()
        .expect("crashing_thread.frames");
    thread
        .iter()
        .filter(|f| f["module"] == "crash")
        .map(|f| {
            let inlines = f["inlines"]
                .as_array()
                .map(|i| {
                    i.iter()
                        .map(|i| i["function"].as_str().unwrap_or("").to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                f["line"].as_i64().unwrap_or(0),
                inlines,
            )
        })
        .collect()
}

#[tokio::test]
async fn minidump_stackwalk_symbolicates_from_the_tecken_prefix() {
    let variant = minidump_variant("fp");
    let root = common::sort_into_tempdir(&[&minidump_file(&variant, "breakpad")]);
    let server = server_for(root.path());
    let dump = minidump_file(&variant, "minidump");

    let answer = stackwalk(&dump, Some(&format!("{}/proxy/", server.url)));
    let frames = module_frames(&answer);
    // The manifest's frames (addr2line's oracle): the crash site with the inlined
    // `write_slot`, then the callers by their return addresses.
    let want = variant["frames"].as_array().unwrap();
    let line = |i: usize| want[i]["lineno"].as_i64().unwrap();
    let function = |i: usize| want[i]["function"].as_str().unwrap().to_owned();
    assert!(frames.len() >= 4, "{frames:?}");
    assert_eq!(frames[0].0, function(1), "{frames:?}");
    assert_eq!(frames[0].2, [function(0)], "{frames:?}");
    for (i, frame) in frames.iter().enumerate().take(4).skip(1) {
        assert_eq!(frame.0, function(i + 1), "{frames:?}");
        assert_eq!(frame.1, line(i + 1), "{frames:?}");
    }

    // Without the server, the same walk names nothing in the module.
    let bare = module_frames(&stackwalk(&dump, None));
    assert!(bare.iter().all(|f| f.0.is_empty()), "{bare:?}");
}

#[tokio::test]
async fn tecken_paths_answer_breakpad_files_only() {
    let variant = minidump_variant("fp");
    let sym = minidump_file(&variant, "breakpad");
    let root = common::sort_into_tempdir(&[&sym]);
    let server = server_for(root.path());
    let id = variant["breakpad_id"].as_str().unwrap();
    let code_id = variant["code_id"].as_str().unwrap();
    let http = client();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}{path}", server.url);
        async move { http.get(url).send().await.unwrap() }
    };

    let resp = get(format!(
        "/proxy/crash/{id}/crash.sym?code_file=crash&code_id={code_id}"
    ))
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.bytes().await.unwrap() == std::fs::read(&sym).unwrap());
    let head = http
        .head(format!(
            "{}/proxy/crash/{id}/crash.sym?code_id={code_id}",
            server.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        head.headers()["content-length"],
        std::fs::metadata(&sym).unwrap().len().to_string()
    );

    // The unified layout keeps an ELF module's file by build id: without it, not found.
    assert_eq!(
        get(format!("/proxy/crash/{id}/crash.sym")).await.status(),
        StatusCode::NOT_FOUND
    );
    // Another debug id with the same build id is another module.
    let other = format!("{}0", "0".repeat(32));
    assert_eq!(
        get(format!("/proxy/crash/{other}/crash.sym?code_id={code_id}"))
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    let resp = get(format!("/proxy/crash/{id}/crash.sym?code_id=zz")).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("code_id"));

    // Where a DWARF debug file is sorted, no Breakpad file answers.
    let debug_root = common::sort_into_tempdir(&[&minidump_file(&variant, "debug")]);
    let server = server_for(debug_root.path());
    let resp = client()
        .get(format!(
            "{}/proxy/crash/{id}/crash.sym?code_id={code_id}",
            server.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}
