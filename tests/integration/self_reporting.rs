//! Self-reporting to Sentry (`sentry_dsn`, `traces_sample_rate`): the real server sends
//! its panics, errors and sampled request traces as envelopes to a loopback endpoint
//! that answers as Sentry's ingestion does.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use common::{Server, SymbolServer};
use serde_json::{Value, json};

type Envelopes = Arc<Mutex<Vec<(String, Vec<Value>)>>>;

/// A Sentry ingestion endpoint on loopback: every envelope's project and its lines.
async fn start_ingest() -> (String, Envelopes) {
    let envelopes = Envelopes::default();
    let app = Router::new()
        .route(
            "/api/{project}/envelope/",
            post(
                |State(seen): State<Envelopes>, Path(project): Path<String>, body: Bytes| async move {
                    let lines = body
                        .split(|b| *b == b'\n')
                        .filter_map(|line| serde_json::from_slice(line).ok())
                        .collect();
                    seen.lock().unwrap().push((project, lines));
                    "{}"
                },
            ),
        )
        .with_state(envelopes.clone());
    let addr = common::serve(app).await;
    (format!("http://public@{addr}/42"), envelopes)
}

/// The items of the envelopes received so far whose header has `type`, as they were
/// sent (each item's payload follows its header line).
fn items(envelopes: &Envelopes, ty: &str) -> Vec<Value> {
    let seen = envelopes.lock().unwrap();
    let mut out = Vec::new();
    for (project, lines) in seen.iter() {
        assert_eq!(project, "42");
        for pair in lines.windows(2) {
            if pair[0]["type"] == ty {
                out.push(pair[1].clone());
            }
        }
    }
    out
}

async fn wait_for(envelopes: &Envelopes, ty: &str, what: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = items(envelopes, ty).into_iter().find(|item| what(item)) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no {ty} item: {:#?}",
            envelopes.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A PDB that makes the `pdb` crate panic while the server reads it (kept by the fuzzer
/// in `fuzz/regressions/`, and replayed there too).
fn panicking_pdb() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions/object_file/contained-pdb-modi-200");
    std::fs::read(path).unwrap()
}

#[tokio::test]
async fn panics_and_request_traces_are_reported_to_the_configured_dsn() {
    let (dsn, envelopes) = start_ingest().await;
    let symsrv = SymbolServer::start().await;
    let id = "3249d99d-0c40-4931-8610-f4e4fb0b6936-1";
    symsrv.put_bytes(
        "x.pdb/3249D99D0C4049318610F4E4FB0B69361/x.pdb",
        &panicking_pdb(),
    );
    let server = Server::start(&format!(
        "sentry_dsn: \"{dsn}\"\ntraces_sample_rate: 1.0\nsources:\n  - {{id: symbols, type: http, url: \"{}\", layout: {{type: native}}}}\n",
        symsrv.url
    ));
    let body = json!({
        "modules": [{"type": "pe", "debug_file": "x.pdb", "debug_id": id,
                     "image_addr": "0x10000", "image_size": 65536}],
        "stacktraces": [{"frames": [{"instruction_addr": "0x10010"}]}],
    });
    let (status, answer) = server.post("/symbolicate", &body).await;
    assert_eq!(status, 200, "{answer}");

    // The parser's panic, with the stack where it happened.
    let event = wait_for(&envelopes, "event", |e| e.to_string().contains("panicked")).await;
    // Sentry's protocol leaves out the default level, `error`.
    assert_eq!(
        event["level"].as_str().unwrap_or("error"),
        "error",
        "{event:#}"
    );
    let stack = event["threads"]["values"][0]["stacktrace"]["frames"].to_string();
    assert!(
        stack.contains("pdb::modi"),
        "the stack of the panic: {event:#}"
    );
    assert!(event.to_string().contains("modi/mod.rs"), "{event:#}");
    // The request, as a trace named by its route.
    let trace = wait_for(&envelopes, "transaction", |t| {
        t["transaction"] == "POST /symbolicate"
    })
    .await;
    assert_eq!(trace["contexts"]["trace"]["op"], "http.server", "{trace:#}");
    // Nothing of the DSN's key leaks into the server's own log.
    assert!(!server.log().contains("public@"), "{}", server.log());
}

#[tokio::test]
async fn a_dsn_that_does_not_parse_is_refused_without_repeating_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(&config, "sentry_dsn: \"s3cret-not-a-dsn\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnisym"))
        .args(["run", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sentry_dsn"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}
