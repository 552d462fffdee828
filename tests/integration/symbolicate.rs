//! End-to-end tests of `POST /symbolicate` and `/requests`: the real server on a
//! loopback port, real sources (a directory; an HTTP symbol server), the project's own
//! fixtures, and answers checked against the llvm-symbolizer oracle in the manifest.

use crate::common;

use std::io::Write;
use std::time::Duration;

use axum::http::StatusCode;
use common::{
    ELF_BASE, Server, SymbolServer, elf_debug_file, elf_debug_path, elf_module, fixtures, hex,
    object,
};
use serde_json::{Value, json};

const PE_BASE: u64 = 0x1_4000_0000;

/// Symstore path of the PDB.
fn pdb_path() -> String {
    let pe = object("pe");
    let id = pe["breakpad_id"].as_str().unwrap();
    format!("crash.pdb/{id}/crash.pdb")
}

fn pe_module() -> Value {
    let pe = object("pe");
    json!({
        "type": "pe",
        "debug_id": pe["debug_id"],
        "code_id": pe["code_id"],
        "code_file": "C:\\app\\crash.exe",
        "debug_file": "C:\\build\\crash.pdb",
        "image_addr": format!("{PE_BASE:#x}"),
        "image_size": pe["image_size"],
    })
}

/// One frame per probe, unadjusted, so the answer must equal the symbolizer's.
fn probe_frames(name: &str, base: u64) -> Vec<Value> {
    object(name)["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            json!({
                "instruction_addr": format!("{:#x}", base + hex(&p["rel_addr"])),
                "adjust_instruction_addr": false,
            })
        })
        .collect()
}

/// PDB function names carry parameter lists that llvm-symbolizer leaves out.
fn bare(name: &str) -> &str {
    name.split('(').next().unwrap()
}

/// Asserts that every probe expanded into exactly the oracle's inline chain.
fn assert_matches_oracle(name: &str, response: &Value) {
    let probes = object(name)["probes"].as_array().unwrap().clone();
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    for (index, probe) in probes.iter().enumerate() {
        let got: Vec<&Value> = frames
            .iter()
            .filter(|f| f["original_index"] == index)
            .collect();
        let want = probe["frames"].as_array().unwrap();
        assert_eq!(
            got.len(),
            want.len(),
            "{name} probe {} ({}): {got:#?}",
            probe["addr"],
            probe["kind"]
        );
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["status"], "symbolicated", "{g}");
            assert_eq!(
                bare(g["function"].as_str().unwrap()),
                bare(w["function"].as_str().unwrap()),
                "probe {}",
                probe["addr"]
            );
            assert_eq!(g["abs_path"], w["file"], "probe {}", probe["addr"]);
            assert_eq!(g["lineno"], w["line"], "probe {}", probe["addr"]);
        }
        // Only the outermost function has a start address.
        let outer = got.last().unwrap();
        assert_eq!(
            hex(&outer["sym_addr"]),
            hex(&probe["function"]["rel_start"]) + if name == "elf" { ELF_BASE } else { PE_BASE },
        );
    }
}

#[tokio::test]
async fn elf_dwarf_from_a_filesystem_source_matches_the_oracle() {
    let symbols = tempfile::tempdir().unwrap();
    let dest = symbols.path().join(elf_debug_path());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(elf_debug_file(), &dest).unwrap();

    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "filesystem", "id": "local", "path": symbols.path()}],
        "modules": [elf_module()],
        "stacktraces": [{"frames": probe_frames("elf", ELF_BASE)}],
        "options": {"dif_candidates": true},
    });
    let (status, response) = server.post("/symbolicate?timeout=30", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed");
    let module = &response["modules"][0];
    assert_eq!(module["debug_status"], "found", "{module}");
    assert_eq!(module["arch"], "x86_64");
    assert_eq!(module["features"]["has_debug_info"], true);
    assert_matches_oracle("elf", &response);
    // C++ names come back demangled, with the mangled name as `symbol`.
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    let poke = frames
        .iter()
        .find(|f| f["symbol"] == "_ZN2ns6Widget4pokeEi")
        .expect("the C++ method is symbolicated");
    assert_eq!(poke["function"], "ns::Widget::poke(int)");
    assert_eq!(poke["lang"], "cpp");
    assert_eq!(poke["package"], "/usr/bin/crash");
}

#[tokio::test]
async fn pe_pdb_from_an_http_symstore_source_matches_the_oracle() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&pdb_path(), &fixtures().join("native/pe/crash.pdb"));
    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "http", "id": "symstore", "url": symsrv.url, "layout": {"type": "symstore"}}],
        "modules": [pe_module()],
        "stacktraces": [{"frames": probe_frames("pe", PE_BASE)}],
        "options": {"dif_candidates": true},
    });
    let (status, response) = server.post("/symbolicate", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["modules"][0]["debug_status"], "found");
    assert_matches_oracle("pe", &response);
    // The chosen candidate is reported as used for debug info.
    let candidates = response["modules"][0]["candidates"].as_array().unwrap();
    let used: Vec<_> = candidates
        .iter()
        .filter(|c| c["debug"]["status"] == "ok")
        .collect();
    assert_eq!(used.len(), 1, "{candidates:#?}");
    assert!(used[0]["location"].as_str().unwrap().ends_with(&pdb_path()));
}

#[tokio::test]
async fn breakpad_and_gzip_compressed_files_are_used() {
    let symsrv = SymbolServer::start().await;
    let elf = object("elf");
    let breakpad_id = elf["breakpad_id"].as_str().unwrap();
    symsrv.put(
        &format!("crash/{breakpad_id}/crash.sym"),
        &fixtures().join("native/breakpad/crash.sym"),
    );
    let server = Server::start("");
    let frames: Vec<Value> = elf["breakpad"]["funcs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            json!({
                "instruction_addr": format!("{:#x}", ELF_BASE + hex(&f["addr"])),
                "adjust_instruction_addr": false,
            })
        })
        .collect();
    let body = json!({
        "sources": [{"type": "http", "id": "bp", "url": symsrv.url, "filters": {"filetypes": ["breakpad"]}}],
        "modules": [elf_module()],
        "stacktraces": [{"frames": frames}],
    });
    let (_, response) = server.post("/symbolicate", &body).await;
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );
    let names: Vec<&str> = response["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["sym_addr"].is_string())
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = elf["breakpad"]["funcs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, want);

    // The same debug file, gzip-compressed as symbol servers often store it.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&std::fs::read(elf_debug_file()).unwrap())
        .unwrap();
    symsrv.put_bytes(&elf_debug_path(), &gz.finish().unwrap());
    let body = json!({
        "sources": [{"type": "http", "id": "gz", "url": symsrv.url, "filters": {"filetypes": ["elf_debug"]}}],
        "modules": [elf_module()],
        "stacktraces": [{"frames": probe_frames("elf", ELF_BASE)}],
    });
    let (_, response) = server.post("/symbolicate", &body).await;
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );
    assert_matches_oracle("elf", &response);
}

#[tokio::test]
async fn missing_corrupt_and_invalid_modules_each_get_their_status() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(
        &elf_debug_path(),
        &fixtures().join("native/corrupt/crash.debug"),
    );
    symsrv.put(&pdb_path(), &fixtures().join("native/pe/crash.pdb"));
    let server = Server::start("");
    let mut bad_id = elf_module();
    bad_id["debug_id"] = json!("not-a-debug-id");
    bad_id["image_addr"] = json!("0x10000");
    bad_id["image_size"] = json!(4096);
    let mut missing = elf_module();
    missing["debug_id"] = json!("00000000-0000-0000-0000-000000000001");
    missing["code_id"] = json!("0000000000000000000000000000000000000001");
    missing["image_addr"] = json!("0x20000");
    missing["image_size"] = json!(4096);
    let body = json!({
        "sources": [{"type": "http", "id": "srv", "url": symsrv.url}],
        "modules": [elf_module(), pe_module(), bad_id, missing],
        // Frames after the first are return addresses; these are the call sites.
        "stacktraces": [{"frames": [
            {"instruction_addr": format!("{:#x}", ELF_BASE + 0x1000)},
            {"instruction_addr": format!("{:#x}", PE_BASE + 0x1001)},
            {"instruction_addr": "0x10010"},
            {"instruction_addr": "0x5"},
            {"instruction_addr": "0x20010"},
        ]}],
        "options": {"dif_candidates": true},
    });
    let (status, response) = server.post("/symbolicate", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let modules = response["modules"].as_array().unwrap();
    assert_eq!(modules[0]["debug_status"], "malformed", "{:#}", modules[0]);
    assert_eq!(modules[1]["debug_status"], "found");
    assert_eq!(modules[2]["debug_status"], "malformed");
    assert_eq!(modules[3]["debug_status"], "missing");
    let corrupt = modules[0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["location"].as_str().unwrap().ends_with(".debug"))
        .unwrap();
    assert_eq!(corrupt["download"]["status"], "malformed");
    let statuses: Vec<&str> = response["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "malformed",
            "symbolicated",
            "malformed",
            "unknown_image",
            "missing"
        ]
    );
}

#[tokio::test]
async fn files_over_the_download_limit_are_too_large() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&pdb_path(), &fixtures().join("native/pe/crash.pdb"));
    let server = Server::start("max_download_size: 4096\n");
    let body = json!({
        "sources": [{"type": "http", "id": "srv", "url": symsrv.url}],
        "modules": [pe_module()],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", PE_BASE + 0x1000)}]}],
        "options": {"dif_candidates": true},
    });
    let (_, response) = server.post("/symbolicate", &body).await;
    let module = &response["modules"][0];
    assert_eq!(module["debug_status"], "too_large", "{module:#}");
    let pdb = module["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["location"].as_str().unwrap().ends_with("crash.pdb"))
        .unwrap();
    assert_eq!(pdb["download"]["status"], "error", "{pdb}");
    assert_eq!(response["stacktraces"][0]["frames"][0]["status"], "missing");
}

#[tokio::test]
async fn bad_request_bodies_get_400_naming_the_problem() {
    // Upstream's name for the body limit.
    let server = Server::start("symbolicate_body_max_bytes: 5MiB\n");
    let (status, body) = server
        .post(
            "/symbolicate",
            &json!({"modules": [{"type": "elf", "image_addr": "0xZZ"}], "stacktraces": []}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("modules[0].image_addr"), "{msg}");

    let (status, body) = server.post_raw("/symbolicate", b"{not json".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("invalid JSON"));

    let (status, _) = server
        .post(
            "/symbolicate",
            &json!({"stacktraces": [{"frames": [{"instruction_addr": 1, "addr_mode": "sideways"}]}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _) = server
        .post_raw("/symbolicate", vec![b' '; 6 * 1024 * 1024])
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    let (status, _) = server
        .get("/requests/00000000-0000-0000-0000-000000000000")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn scopes_do_not_share_what_their_sources_brought_in() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&pdb_path(), &fixtures().join("native/pe/crash.pdb"));
    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "http", "id": "private", "url": symsrv.url}],
        "modules": [pe_module()],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", PE_BASE + 0x1000)}]}],
    });
    let status_in = |scope: &'static str| {
        let server = &server;
        let body = body.clone();
        async move {
            let (_, r) = server
                .post(&format!("/symbolicate?scope={scope}"), &body)
                .await;
            r["modules"][0]["debug_status"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(status_in("project-a").await, "found");
    symsrv.remove(&pdb_path());
    // Scope a keeps what it fetched; scope b must ask the source itself.
    assert_eq!(status_in("project-a").await, "found");
    assert_eq!(status_in("project-b").await, "missing");
    // Without sources nothing is found, whatever the cache holds.
    let (_, r) = server
        .post(
            "/symbolicate?scope=project-a",
            &json!({"sources": [], "modules": [pe_module()], "stacktraces": body["stacktraces"]}),
        )
        .await;
    assert_eq!(r["modules"][0]["debug_status"], "missing");
}

#[tokio::test]
async fn slow_requests_answer_pending_and_can_be_polled() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&pdb_path(), &fixtures().join("native/pe/crash.pdb"));
    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "http", "id": "slow", "url": format!("{}slow/1500/", symsrv.url)}],
        "modules": [pe_module()],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", PE_BASE + 0x1000)}]}],
    });
    let (status, first) = server.post("/symbolicate?timeout=0.2", &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "pending", "{first}");
    assert_eq!(first["retry_after"], 30);
    let id = first["request_id"].as_str().unwrap();
    let (status, done) = server.get(&format!("/requests/{id}?timeout=30")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["modules"][0]["debug_status"], "found");
    // A second poll within the retention time gets the same answer.
    let (_, again) = server.get(&format!("/requests/{id}?timeout=0")).await;
    assert_eq!(again, done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_201st_concurrent_request_is_refused_with_503() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&pdb_path(), &fixtures().join("native/pe/crash.pdb"));
    let server = std::sync::Arc::new(Server::start(""));
    let body = json!({
        "sources": [{"type": "http", "id": "slow", "url": format!("{}slow/8000/", symsrv.url)}],
        "modules": [pe_module()],
        "stacktraces": [{"frames": [{"instruction_addr": format!("{:#x}", PE_BASE + 0x1000)}]}],
    });
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let server = server.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            server.post("/symbolicate", &body).await.0
        }));
    }
    // Let all 200 reach the server and block on the slow source.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let (status, refused) = server.post("/symbolicate", &body).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("concurrent"));
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    // Capacity is released once they finish.
    let (status, _) = server.post("/symbolicate?timeout=10", &body).await;
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn a_bad_config_fails_start_up_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yml");
    std::fs::write(
        &config,
        "bind: 127.0.0.1:0\nsentry_dsn: https://x@example.invalid/1\ncaches:\n  downloaded:\n    retry_misses_after: whenever\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnisym"))
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("caches.downloaded.retry_misses_after") && stderr.contains("line 5"),
        "{stderr}"
    );
}

/// `accept_invalid_certs` on an HTTP source: a symbol server with a self-signed
/// certificate is refused without it and used with it.
#[tokio::test]
async fn accept_invalid_certs_decides_whether_a_self_signed_server_is_used() {
    let symsrv = SymbolServer::start_tls().await;
    symsrv.put_elf_debug();
    let server = Server::start("");
    let source = |id: &str, accept: bool| json!([{"type": "http", "id": id, "url": symsrv.url, "accept_invalid_certs": accept}]);

    let (status, refused) = server
        .post(
            "/symbolicate",
            &common::elf_request(source("strict", false)),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{refused}");
    let module = &refused["modules"][0];
    assert_eq!(module["debug_status"], "fetching_failed", "{module:#}");
    let candidate = &module["candidates"][0];
    assert_eq!(candidate["download"]["status"], "error", "{candidate:#}");
    assert!(
        symsrv.hits().is_empty(),
        "no request got past the handshake"
    );

    let (status, served) = server
        .post(
            "/symbolicate",
            &common::elf_request(source("lenient", true)),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{served}");
    common::assert_elf_symbolicated(&served);
    assert!(!symsrv.hits().is_empty());
}

/// A module's lookup outcome is reused for a while (`caches.in_memory.lookup_reuse`),
/// but only for the same sources in the same scope: a request naming another directory,
/// or another scope of a private source, looks again and sees its own files.
#[tokio::test]
async fn a_reused_lookup_is_never_another_sources_or_scopes() {
    let empty = tempfile::tempdir().unwrap();
    let symbols = tempfile::tempdir().unwrap();
    let dest = symbols.path().join(elf_debug_path());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(elf_debug_file(), &dest).unwrap();
    let server = Server::start("caches:\n  in_memory:\n    lookup_reuse: 1h\n");
    let source = |path: &std::path::Path, public: bool| json!([{"type": "filesystem", "id": "local", "path": path, "is_public": public}]);
    let status_of = |response: &Value| response["modules"][0]["debug_status"].clone();

    // The same id over an empty directory first: remembered as missing for an hour.
    let (_, missing) = server
        .post(
            "/symbolicate",
            &common::elf_request(source(empty.path(), true)),
        )
        .await;
    assert_eq!(status_of(&missing), "missing", "{missing}");
    let (_, found) = server
        .post(
            "/symbolicate",
            &common::elf_request(source(symbols.path(), true)),
        )
        .await;
    common::assert_elf_symbolicated(&found);

    // A private source: a scope's outcome is its own, whether found or missing.
    let private = source(symbols.path(), false);
    let (_, found) = server
        .post(
            "/symbolicate?scope=a",
            &common::elf_request(private.clone()),
        )
        .await;
    common::assert_elf_symbolicated(&found);
    std::fs::remove_file(&dest).unwrap();
    let (_, missing) = server
        .post(
            "/symbolicate?scope=b",
            &common::elf_request(private.clone()),
        )
        .await;
    assert_eq!(status_of(&missing), "missing", "{missing}");
    // Scope `a` within the reuse time: the outcome it had.
    let (_, reused) = server
        .post("/symbolicate?scope=a", &common::elf_request(private))
        .await;
    common::assert_elf_symbolicated(&reused);
}

/// The Sentry API's JSON endpoints take JSON only, as upstream's extractor does: a page
/// cannot make the server fetch from the sources it names with a blind cross-site form
/// post (`text/plain`, `application/x-www-form-urlencoded`, `multipart/form-data`, which
/// need no preflight). Such a post is 415, in the error shape, before its body is read.
#[tokio::test]
async fn json_endpoints_refuse_bodies_that_are_not_json_with_415() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let server = Server::start("");
    let sources = json!([{"type": "http", "id": "page", "url": symsrv.url}]);
    let body = serde_json::to_vec(&common::elf_request(sources.clone())).unwrap();
    let any = serde_json::to_vec(&json!({
        "sources": sources,
        "symbolicate": {"type": "minidump", "storage_url": format!("{}dump", symsrv.url)},
    }))
    .unwrap();
    let other = br#"{"stacktraces": [], "modules": []}"#.to_vec();
    for (path, body) in [
        ("/symbolicate", &body),
        ("/symbolicate-any", &any),
        ("/symbolicate-js", &other),
        ("/symbolicate-jvm", &other),
    ] {
        for content_type in [
            Some("text/plain"),
            Some("text/plain;charset=UTF-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("text/json"),
            None,
        ] {
            let mut request = common::client()
                .post(format!("{}{path}", server.url))
                .body(body.clone());
            if let Some(content_type) = content_type {
                request = request.header("Content-Type", content_type);
            }
            let resp = request.send().await.unwrap();
            assert_eq!(
                resp.status(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{path} as {content_type:?}"
            );
            let error: Value = resp.json().await.unwrap();
            assert!(
                error["error"]
                    .as_str()
                    .unwrap()
                    .contains("application/json"),
                "{error}"
            );
        }
    }
    assert!(symsrv.hits().is_empty(), "{:?}", symsrv.hits());

    // JSON, with parameters or as a `+json` type, is taken.
    for content_type in ["application/json; charset=utf-8", "application/vnd.x+json"] {
        let (status, answer) = server
            .post_typed("/symbolicate", content_type, body.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{content_type}: {answer}");
        common::assert_elf_symbolicated(&answer);
    }
    assert!(!symsrv.hits().is_empty());
    let (status, answer) = server
        .post_typed("/symbolicate-jvm", "application/json", other)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // The upload endpoints keep asking for a form.
    let (status, answer) = server
        .post_typed("/minidump", "application/json", body)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
}
