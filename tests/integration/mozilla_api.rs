//! Mozilla's symbolication API (`/symbolicate/v5`, `/symbolicate/v4`) over HTTP against
//! the real server, with symbols from the configured sources. The oracle for frames is
//! `fixtures/mozilla/manifest.json`: llvm-addr2line's answer at every instruction of a
//! library clang inlined three deep (`fixtures/mozilla/build.sh`).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::StatusCode;
use common::{Server, SymbolServer, client, fixture_json, fixtures};
use serde_json::{Value, json};

fn manifest() -> Value {
    fixture_json("mozilla/manifest.json")
}

fn fixture(name: &str) -> std::path::PathBuf {
    fixtures().join("mozilla").join(name)
}

/// `[debug_file, debug_id]` of the fixture library.
fn library() -> (String, String) {
    let m = manifest();
    (
        m["debug_file"].as_str().unwrap().to_owned(),
        m["breakpad_id"].as_str().unwrap().to_owned(),
    )
}

/// Where the native layout (and Mozilla's symbol server) keeps the library's `.sym`.
fn sym_path() -> String {
    let (file, id) = library();
    format!("{file}/{id}/{file}.sym")
}

/// A module the sources do not have (the one in Mozilla's documented example).
const WNTDLL: (&str, &str) = ("wntdll.pdb", "D74F79EB1F8D4A45ABCD2F476CCABACC2");

fn config_with_source(url: &str) -> String {
    format!("sources:\n  - {{id: symbols, type: http, url: \"{url}\", layout: {{type: native}}}}\n")
}

/// A symbol server with the library's Breakpad file, and a server using it.
async fn serving_library(extra_yaml: &str) -> (SymbolServer, Server) {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&sym_path(), &fixture("libinline.so.sym"));
    let server = Server::start(&format!("{}{extra_yaml}", config_with_source(&symsrv.url)));
    (symsrv, server)
}

/// The instruction of the manifest with the longest inline chain.
fn deepest_instruction() -> Value {
    let m = manifest();
    let deepest = m["deepest_inline_chain"].as_u64().unwrap() as usize;
    m["instructions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["frames"].as_array().unwrap().len() == deepest)
        .unwrap()
        .clone()
}

/// What v5 must answer for frame `index` at this manifest instruction: the function the
/// instruction lies in, with the calls inlined there innermost first, all as
/// addr2line says.
fn expected_frame(index: usize, instruction: &Value) -> Value {
    let (file, _) = library();
    let offset = instruction["offset"].as_u64().unwrap();
    let start = instruction["function_start"].as_u64().unwrap();
    let frames = instruction["frames"].as_array().unwrap();
    let (outer, inlined) = frames.split_last().unwrap();
    let mut frame = json!({
        "frame": index,
        "module": file,
        "module_offset": format!("{offset:#x}"),
        "function": outer["function"],
        "function_offset": format!("{:#x}", offset - start),
        "file": outer["file"],
        "line": outer["line"],
    });
    if !inlined.is_empty() {
        frame["inlines"] = json!(inlined);
    }
    frame
}

async fn post_v5(server: &Server, body: &Value) -> (StatusCode, Value) {
    server.post("/symbolicate/v5", body).await
}

/// Mozilla's documented v5 example (two modules, two frames: one symbolicated, one in a
/// module without symbols), on the inlined library.
#[tokio::test]
async fn v5_documented_example_with_inlines_as_addr2line_has_them() {
    let (symsrv, server) = serving_library("").await;
    let (file, id) = library();
    let deepest = deepest_instruction();
    assert!(
        deepest["frames"].as_array().unwrap().len() >= 3,
        "{deepest}"
    );
    let body = json!({"jobs": [{
        "memoryMap": [[file, id], [WNTDLL.0, WNTDLL.1]],
        "stacks": [[[0, deepest["offset"]], [1, 65802]]],
    }]});
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let want = json!({"results": [{
        "stacks": [[
            expected_frame(0, &deepest),
            {"frame": 1, "module": "wntdll.pdb", "module_offset": "0x1010a"},
        ]],
        "found_modules": {
            format!("{file}/{id}"): true,
            format!("{}/{}", WNTDLL.0, WNTDLL.1): false,
        },
    }]});
    assert_eq!(r, want);
    assert!(symsrv.hits().contains(&sym_path()), "{:?}", symsrv.hits());
}

/// Every instruction of the library, in one stack sent with the single-job shortcut,
/// answers exactly what llvm-addr2line says there.
#[tokio::test]
async fn every_instruction_matches_addr2line_through_the_single_job_shortcut() {
    let (_symsrv, server) = serving_library("").await;
    let (file, id) = library();
    let instructions = manifest()["instructions"].as_array().unwrap().clone();
    let stack: Vec<Value> = instructions
        .iter()
        .map(|i| json!([0, i["offset"]]))
        .collect();
    let body = json!({"memoryMap": [[file, id]], "stacks": [stack]});
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let frames = r["results"][0]["stacks"][0].as_array().unwrap();
    assert_eq!(frames.len(), instructions.len());
    for (i, (got, instruction)) in frames.iter().zip(&instructions).enumerate() {
        assert_eq!(
            *got,
            expected_frame(i, instruction),
            "instruction {instruction}"
        );
    }
}

#[tokio::test]
async fn v4_answers_strings_and_known_modules() {
    let (_symsrv, server) = serving_library("").await;
    let (file, id) = library();
    let deepest = deepest_instruction();
    let outer = deepest["frames"].as_array().unwrap().last().unwrap()["function"].clone();
    let body = json!({
        "memoryMap": [[file, id], [WNTDLL.0, WNTDLL.1], ["unused.pdb", "0123456789ABCDEF0123456789ABCDEF1"]],
        "stacks": [[[0, deepest["offset"]], [1, 65802]], [[-1, 4660]]],
        "version": 4,
    });
    let (status, r) = server.post("/symbolicate/v4", &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        r,
        json!({
            "symbolicatedStacks": [
                [format!("{} (in {file})", outer.as_str().unwrap()), "0x1010a (in wntdll.pdb)"],
                ["0x1234 (in <unknown>)"],
            ],
            "knownModules": [true, false, null],
        })
    );
}

/// Index -1 is a frame in no module; offset -1 is passed through unsymbolicated, but
/// its module is still looked up, as Mozilla's service does.
#[tokio::test]
async fn index_and_offset_minus_one_pass_through() {
    let (_symsrv, server) = serving_library("").await;
    let (file, id) = library();
    let body = json!({"jobs": [{
        "memoryMap": [[file, id], [WNTDLL.0, WNTDLL.1], ["empty-id.so", ""]],
        "stacks": [[[-1, 4660], [0, -1], [1, -1], [2, 16]]],
    }]});
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        r["results"][0],
        json!({
            "stacks": [[
                {"frame": 0, "module": "<unknown>", "module_offset": "0x1234"},
                {"frame": 1, "module": file, "module_offset": "-0x1"},
                {"frame": 2, "module": "wntdll.pdb", "module_offset": "-0x1"},
                {"frame": 3, "module": "empty-id.so", "module_offset": "0x10"},
            ]],
            // Looked up although no offset was given; a module without an id never is.
            "found_modules": {
                format!("{file}/{id}"): true,
                format!("{}/{}", WNTDLL.0, WNTDLL.1): false,
                "empty-id.so/": null,
            },
        })
    );
}

async fn assert_bad_request(server: &Server, path: &str, body: Value, names: &str) {
    let (status, r) = server.post(path, &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {r}");
    let message = r["error"].as_str().unwrap_or_default();
    assert!(
        message.contains(names),
        "{body}: {message:?} should name {names:?}"
    );
}

#[tokio::test]
async fn malformed_bodies_get_400_naming_the_field() {
    let server = Server::start("");
    let (file, id) = library();
    let map = json!([[file, id]]);
    let cases = [
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[5, 16]]]}]}),
            "jobs[0].stacks[0][0]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[-2, 16]]]}]}),
            "jobs[0].stacks[0][0]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[0, 1.5]]]}]}),
            "jobs[0].stacks[0][0][1]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[0, "0x10"]]]}]}),
            "jobs[0].stacks[0][0][1]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[0, -2]]]}]}),
            "jobs[0].stacks[0][0][1]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[0.5, 16]]]}]}),
            "jobs[0].stacks[0][0][0]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": [[[0]]]}]}),
            "jobs[0].stacks[0][0]",
        ),
        (
            json!({"jobs": [{"memoryMap": map, "stacks": []}]}),
            "jobs[0].stacks",
        ),
        (json!({"jobs": [{"memoryMap": map}]}), "stacks"),
        (
            json!({"jobs": [{"memoryMap": [["a.pdb"]], "stacks": [[]]}]}),
            "jobs[0].memoryMap[0]",
        ),
        (
            json!({"jobs": [{"memoryMap": [["../etc/passwd", "AB"]], "stacks": [[]]}]}),
            "jobs[0].memoryMap[0]",
        ),
        (
            json!({"jobs": [{"memoryMap": [["a.pdb", "not-hex"]], "stacks": [[]]}]}),
            "jobs[0].memoryMap[0]",
        ),
        (json!({"jobs": {"memoryMap": map}}), "jobs"),
        (json!({"stacks": [[[0, 16]]]}), "memoryMap"),
        (
            json!({"memoryMap": map, "stacks": [[[3, 16]]]}),
            "stacks[0][0]",
        ),
    ];
    for (body, names) in cases {
        assert_bad_request(&server, "/symbolicate/v5", body, names).await;
    }
    assert_bad_request(
        &server,
        "/symbolicate/v4",
        json!({"memoryMap": map}),
        "stacks",
    )
    .await;
    let (status, r) = server
        .post_raw("/symbolicate/v5", b"{\"jobs\": [".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{r}");
    // Debian-style versions carry a `~`, which Mozilla's service takes.
    let tilde = json!({"memoryMap": [["libfoo-1.2~rc1.so", "AB"]], "stacks": [[[0, 16]]]});
    let (status, r) = server.post("/symbolicate/v5", &tilde).await;
    assert_eq!(status, StatusCode::OK, "{r}");
}

/// A body within `max_request_body_size` whose frames pass `request_limits` is refused
/// before it is parsed: the server's memory grows by about the body, not by its parsed
/// form (several times larger).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_the_request_limits_are_refused_before_they_are_parsed() {
    let frames = 8_000_000;
    let mut body = String::with_capacity(frames * 6 + 100);
    body.push_str(
        r#"{"memoryMap": [["a.pdb", "0123456789ABCDEF0123456789ABCDEF0"]], "stacks": [["#,
    );
    for i in 0..frames {
        body.push_str(if i == 0 { "[0,1]" } else { ",[0,1]" });
    }
    body.push_str("]]}");
    let size = body.len() as u64;
    for path in ["/symbolicate/v5", "/symbolicate/v4"] {
        // A server each: the allocator's per-thread heaps would add one request's peak
        // to another's.
        let server = Server::start("");
        let before = common::peak_rss_kib(server.pid()) << 10;
        let (status, answer) = server.post_raw(path, body.clone().into_bytes()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(
            message.contains("request_limits.max_frames"),
            "{path}: {message}"
        );
        let grew = (common::peak_rss_kib(server.pid()) << 10).saturating_sub(before);
        eprintln!(
            "{path}: peak RSS grew by {} MiB for a body of {} MiB",
            grew >> 20,
            size >> 20
        );
        assert!(
            grew < 4 * size,
            "{path}: peak RSS grew by {} MiB for a body of {} MiB",
            grew >> 20,
            size >> 20
        );
    }
}

/// `mozilla.max_jobs` bounds the jobs of a request (10 by default, as Mozilla's
/// service); the results come in job order.
#[tokio::test]
async fn jobs_are_answered_in_order_up_to_max_jobs() {
    let (_symsrv, server) = serving_library("mozilla:\n  max_jobs: 2\n").await;
    let (file, id) = library();
    let instructions = manifest()["instructions"].as_array().unwrap().clone();
    let job = |i: &Value| json!({"memoryMap": [[file, id]], "stacks": [[[0, i["offset"]]]]});
    let (first, last) = (&instructions[0], instructions.last().unwrap());
    let (status, r) = post_v5(&server, &json!({"jobs": [job(first), job(last)]})).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["results"][0]["stacks"][0][0], expected_frame(0, first));
    assert_eq!(r["results"][1]["stacks"][0][0], expected_frame(0, last));

    let three = json!({"jobs": [job(first), job(first), job(first)]});
    assert_bad_request(&server, "/symbolicate/v5", three, "mozilla.max_jobs").await;

    let default = Server::start("");
    let eleven: Vec<Value> = (0..11).map(|_| job(first)).collect();
    assert_bad_request(
        &default,
        "/symbolicate/v5",
        json!({"jobs": eleven}),
        "<= 10",
    )
    .await;
}

/// `Debug: true` adds what the request cost: a cold request downloads the `.sym` and
/// builds its SymCache; the same request again is answered from the cache.
#[tokio::test]
async fn debug_header_reports_cache_lookups_downloads_and_modules() {
    let (_symsrv, server) = serving_library("").await;
    let (file, id) = library();
    let body = json!({"jobs": [{
        "memoryMap": [[file, id], [WNTDLL.0, WNTDLL.1], ["unused.so", "00"]],
        "stacks": [[[0, 4096], [1, 16]], [[0, 4144]]],
    }]});
    let send = || async {
        let resp = client()
            .post(format!("{}/symbolicate/v5", server.url))
            .header("Debug", "true")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.json::<Value>().await.unwrap()
    };
    let cold = send().await;
    let debug = &cold["debug"];
    let sym_size = std::fs::metadata(fixture("libinline.so.sym"))
        .unwrap()
        .len();
    // One SymCache, built: the other module has no file to build one from. The answer
    // may come from the `.sym` itself while the SymCache is built (the lazy Breakpad
    // reader): it was looked up all the same.
    assert_eq!(debug["cache_lookups"]["count"], 1, "{debug:#}");
    assert_eq!(
        debug["cache_lookups"]["by_kind"]["symcaches"]["count"], 1,
        "{debug:#}"
    );
    assert_eq!(debug["cache_lookups"]["hits"], 0, "{debug:#}");
    assert_eq!(
        debug["cache_lookups"]["by_kind"]["symcaches"]["computed"],
        1
    );
    // The library's .sym, and the candidate files of both modules that are not there.
    let downloads = &debug["downloads"];
    assert!(downloads["count"].as_u64().unwrap() >= 2, "{debug:#}");
    assert_eq!(
        downloads["count"].as_u64().unwrap() - downloads["failed"].as_u64().unwrap(),
        1,
        "{debug:#}"
    );
    assert_eq!(downloads["size"], sym_size, "{debug:#}");
    assert!(downloads["time"].as_f64().unwrap() > 0.0, "{debug:#}");
    assert!(debug["time"].as_f64().unwrap() > 0.0, "{debug:#}");
    assert_eq!(debug["modules"]["count"], 2, "{debug:#}");
    assert_eq!(
        debug["modules"]["stacks_per_module"],
        json!({format!("{file}/{id}"): 2, format!("{}/{}", WNTDLL.0, WNTDLL.1): 1}),
    );
    assert_eq!(debug["stacks"], json!({"count": 2, "frames": 3}));

    // Warm once the SymCache built in the background is there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let warm = loop {
        let warm = send().await;
        if warm["debug"]["cache_lookups"]["hits"] == 1 {
            break warm;
        }
        assert!(std::time::Instant::now() < deadline, "never warm: {warm:#}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(warm["results"], cold["results"]);
    let debug = &warm["debug"];
    assert_eq!(debug["cache_lookups"]["count"], 1, "{debug:#}");
    assert_eq!(debug["cache_lookups"]["hits"], 1, "{debug:#}");
    // Misses are remembered too: nothing is downloaded again.
    assert_eq!(debug["downloads"]["count"], 0, "{debug:#}");
    for (kind, lookups) in debug["cache_lookups"]["by_kind"].as_object().unwrap() {
        assert_eq!(lookups["computed"], 0, "{kind}: {debug:#}");
    }

    let (_, plain) = post_v5(&server, &body).await;
    assert!(plain.get("debug").is_none(), "{plain}");

    // v4 takes the header too.
    let v4 = json!({"memoryMap": [[file, id]], "stacks": [[[0, 4096]]]});
    let resp = client()
        .post(format!("{}/symbolicate/v4", server.url))
        .header("Debug", "true")
        .json(&v4)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        answer["debug"]["stacks"],
        json!({"count": 1, "frames": 1}),
        "{answer}"
    );
    assert_eq!(answer["knownModules"], json!([true]), "{answer}");
    let (_, plain) = server.post("/symbolicate/v4", &v4).await;
    assert!(plain.get("debug").is_none(), "{plain}");
}

/// Another method than POST is a 405 with a JSON body naming the one to use.
#[tokio::test]
async fn other_methods_are_405_with_a_json_body() {
    let server = Server::start("");
    // With CORS on (the default), `OPTIONS` is a preflight, answered by the CORS policy.
    let no_cors = Server::start("fronts: {cors_allowed_origins: []}\n");
    for path in ["/symbolicate/v5", "/symbolicate/v4"] {
        for (server, method) in [
            (&server, reqwest::Method::GET),
            (&server, reqwest::Method::PUT),
            (&no_cors, reqwest::Method::OPTIONS),
        ] {
            let resp = client()
                .request(method.clone(), format!("{}{path}", server.url))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 405, "{method} {path}");
            assert_eq!(resp.headers()["allow"], "POST", "{method} {path}");
            assert_eq!(
                resp.headers()["content-type"],
                "application/json",
                "{method} {path}"
            );
            let body: Value = resp.json().await.unwrap();
            assert!(body["error"].as_str().unwrap().contains("POST"), "{body}");
        }
    }
}

/// A Breakpad file that is cut off is a module without symbols, not a failed request.
#[tokio::test]
async fn a_corrupt_symbol_file_is_a_module_not_found() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(&sym_path(), &fixture("corrupt.sym"));
    let server = Server::start(&config_with_source(&symsrv.url));
    let (file, id) = library();
    let body = json!({"memoryMap": [[file, id]], "stacks": [[[0, 4096]]]});
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        r["results"][0],
        json!({
            "stacks": [[{"frame": 0, "module": file, "module_offset": "0x1000"}]],
            "found_modules": {format!("{file}/{id}"): false},
        })
    );
    assert!(symsrv.hits().contains(&sym_path()), "{:?}", symsrv.hits());
}

/// A source that answers 503 (or is not listening) makes the request 503, so that
/// Mozilla's clients wait and try again; a source that answers 404 does not.
#[tokio::test]
async fn failing_sources_answer_503() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { (StatusCode::SERVICE_UNAVAILABLE, "overloaded") }
    });
    let overloaded = format!("http://{}/", common::serve(app).await);
    // A port that was just free: nothing listens there.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", listener.local_addr().unwrap())
    };
    let (file, id) = library();
    let body = json!({"memoryMap": [[file, id]], "stacks": [[[0, 4096]]]});
    for url in [&overloaded, &refused] {
        let server = Server::start(&config_with_source(url));
        let (status, r) = post_v5(&server, &body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{url}: {r}");
        let message = r["error"].as_str().unwrap();
        assert!(message.contains(&format!("{file}/{id}")), "{message}");
    }
    assert!(hits.load(Ordering::SeqCst) >= 1);

    let empty = SymbolServer::start().await;
    let server = Server::start(&config_with_source(&empty.url));
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        r["results"][0]["found_modules"][format!("{file}/{id}")],
        false
    );
}

/// Any format the native lookup reads works, not only Breakpad: here a PDB in the
/// symstore place of the native layout (`crash.pdb/<id>/crash.pdb`).
#[tokio::test]
async fn a_pdb_in_the_native_layout_serves_a_windows_module() {
    let native = common::object("pe");
    let pdb_id = native["breakpad_id"].as_str().unwrap();
    let symsrv = SymbolServer::start().await;
    symsrv.put(
        &format!("crash.pdb/{pdb_id}/crash.pdb"),
        &fixtures().join("native/pe/crash.pdb"),
    );
    let server = Server::start(&config_with_source(&symsrv.url));
    // An address inside inlined code: the whole chain must come out of the PDB.
    let probe = native["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "inlined")
        .unwrap();
    let rel_addr = probe["rel_addr"].as_str().unwrap().trim_start_matches("0x");
    let rel = u64::from_str_radix(rel_addr, 16).unwrap();
    let body = json!({"memoryMap": [["crash.pdb", pdb_id]], "stacks": [[[0, rel]]]});
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let frame = &r["results"][0]["stacks"][0][0];
    let mut got: Vec<Value> = frame["inlines"].as_array().cloned().unwrap_or_default();
    got.push(frame.clone());
    // PDB names carry their parameters; llvm-symbolizer's do not.
    let name = |f: &Value| {
        f["function"]
            .as_str()
            .unwrap()
            .split('(')
            .next()
            .unwrap()
            .to_owned()
    };
    let summary = |frames: &[Value]| -> Vec<(String, Value, Value)> {
        frames
            .iter()
            .map(|f| (name(f), f["file"].clone(), f["line"].clone()))
            .collect()
    };
    let want = probe["frames"].as_array().unwrap();
    assert!(want.len() >= 2, "{probe}");
    assert_eq!(summary(&got), summary(want), "{frame}");
    assert_eq!(
        r["results"][0]["found_modules"][format!("crash.pdb/{pdb_id}")],
        true
    );
}

/// Browsers may call the API from the Firefox profiler by default, from none with
/// `cors_allowed_origins: []`, and else only from the configured ones: the preflight of
/// an allowed origin is answered without the token, which browsers never send on one,
/// and its answers carry `Access-Control-Allow-Origin`.
#[tokio::test]
async fn cors_allows_only_the_configured_origins() {
    const ORIGIN: &str = "https://profiler.firefox.com";
    let preflight = |server: &Server, path: &str, origin: &str| {
        client()
            .request(reqwest::Method::OPTIONS, format!("{}{path}", server.url))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization, content-type, debug",
            )
            .send()
    };
    let default = Server::start("");
    let closed = Server::start("fronts: {cors_allowed_origins: []}\n");
    for path in ["/symbolicate/v5", "/symbolicate/v4"] {
        let resp = preflight(&default, path, ORIGIN).await.unwrap();
        assert!(resp.status().is_success(), "{path}: {resp:?}");
        assert_eq!(resp.headers()["access-control-allow-origin"], ORIGIN);
        let resp = preflight(&default, path, "https://evil.example")
            .await
            .unwrap();
        let headers = resp.headers();
        assert!(
            !headers.contains_key("access-control-allow-origin"),
            "{headers:?}"
        );
        let resp = preflight(&closed, path, ORIGIN).await.unwrap();
        let headers = resp.headers();
        assert!(
            !headers.contains_key("access-control-allow-origin"),
            "{headers:?}"
        );
    }
    // Not the Sentry endpoints, whatever the default.
    let resp = preflight(&default, "/symbolicate", ORIGIN).await.unwrap();
    assert!(!resp.headers().contains_key("access-control-allow-origin"));

    let server = Server::start(&format!(
        "fronts: {{token: s3cret, cors_allowed_origins: [\"{ORIGIN}\"]}}\n"
    ));
    for path in ["/symbolicate/v5", "/symbolicate/v4"] {
        let resp = preflight(&server, path, ORIGIN).await.unwrap();
        assert!(resp.status().is_success(), "{path}: {resp:?}");
        let headers = resp.headers();
        assert_eq!(
            headers["access-control-allow-origin"], ORIGIN,
            "{headers:?}"
        );
        let methods = headers["access-control-allow-methods"].to_str().unwrap();
        assert!(methods.contains("POST"), "{methods}");
        let allowed = headers["access-control-allow-headers"].to_str().unwrap();
        assert!(allowed.contains("authorization"), "{allowed}");
        let resp = preflight(&server, path, "https://evil.example")
            .await
            .unwrap();
        let headers = resp.headers();
        assert!(
            !headers.contains_key("access-control-allow-origin"),
            "{headers:?}"
        );
    }
    let (file, id) = library();
    let resp = client()
        .post(format!("{}/symbolicate/v5", server.url))
        .header("Origin", ORIGIN)
        .bearer_auth("s3cret")
        .json(&json!({"memoryMap": [[file, id]], "stacks": [[[0, 4096]]]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], ORIGIN);
    // The other endpoints are not opened to browsers.
    let resp = preflight(&server, "/symbolicate", ORIGIN).await.unwrap();
    assert!(!resp.headers().contains_key("access-control-allow-origin"));
}

/// The library's `.sym` with its first line replaced, served at `debug_file/debug_id`,
/// and a server using it.
async fn serving_sym_as(
    module_line: &str,
    info: &str,
    file: &str,
    id: &str,
) -> (SymbolServer, Server) {
    let text = std::fs::read_to_string(fixture("libinline.so.sym")).unwrap();
    let (_, rest) = text.split_once('\n').unwrap();
    let rest = rest.replacen(
        "INFO CODE_ID D9085A2CF80AB09A2F12AF972EA732495D736325\n",
        info,
        1,
    );
    let symsrv = SymbolServer::start().await;
    let stem = file.strip_suffix(".pdb").unwrap_or(file);
    symsrv.put_bytes(
        &format!("{file}/{id}/{stem}.sym"),
        format!("{module_line}\n{rest}").as_bytes(),
    );
    let server = Server::start(&config_with_source(&symsrv.url));
    (symsrv, server)
}

/// A `.sym` served for an id other than the one its `MODULE` line records is not used,
/// as Mozilla's service refuses it; a newer age of the same GUID is.
#[tokio::test]
async fn a_symbol_file_for_another_id_is_a_module_not_found() {
    let (file, id) = library();
    let offset = deepest_instruction()["offset"].as_u64().unwrap();
    let (other, older) = (format!("1{}", &id[1..]), format!("{}{}", &id[..32], "0"));
    let newer = format!("{}{}", &id[..32], "7");
    for (asked, file_says, found) in [(&other, &id, false), (&older, &newer, true)] {
        let line = format!("MODULE Linux x86_64 {file_says} {file}");
        let info = "INFO CODE_ID D9085A2CF80AB09A2F12AF972EA732495D736325\n";
        let (_symsrv, server) = serving_sym_as(&line, info, &file, asked).await;
        let body = json!({"memoryMap": [[file, asked]], "stacks": [[[0, offset]]]});
        let (status, r) = post_v5(&server, &body).await;
        assert_eq!(status, StatusCode::OK, "{r}");
        let result = &r["results"][0];
        assert_eq!(
            result["found_modules"][format!("{file}/{asked}")],
            found,
            "{r}"
        );
        assert_eq!(
            result["stacks"][0][0].get("function").is_some(),
            found,
            "{r}"
        );
    }
}

/// A Windows symbol dump names the PE file in its first `INFO` line; Mozilla's service
/// names the module's frames by it (the `found_modules` key keeps the debug file).
#[tokio::test]
async fn frames_of_a_windows_symbol_file_are_named_by_its_pe_file() {
    let (_, id) = library();
    let offset = deepest_instruction()["offset"].as_u64().unwrap();
    let line = format!("MODULE windows x86_64 {id} inline.pdb");
    let info = "INFO CODE_ID 5F3A1B2C4000 inline.dll\n";
    let (_symsrv, server) = serving_sym_as(&line, info, "inline.pdb", &id).await;
    let body = json!({"memoryMap": [["inline.pdb", id]], "stacks": [[[0, offset], [0, -1]]]});
    let (status, r) = post_v5(&server, &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let result = &r["results"][0];
    assert_eq!(
        result["found_modules"][format!("inline.pdb/{id}")],
        true,
        "{r}"
    );
    for frame in result["stacks"][0].as_array().unwrap() {
        assert_eq!(frame["module"], "inline.dll", "{r}");
    }
    assert!(result["stacks"][0][0]["function"].is_string(), "{r}");
    let (status, r) = server.post("/symbolicate/v4", &body).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let first = r["symbolicatedStacks"][0][0].as_str().unwrap();
    assert!(first.ends_with(" (in inline.dll)"), "{r}");
}

/// A page can post to the API without a preflight (`text/plain`), so CORS alone decides
/// whether it reads the answer: the names, paths and `found_modules` of the sources. By
/// default only the Firefox profiler does; `*` (a public mirror) is sent only when the
/// operator lists it.
#[tokio::test]
async fn pages_read_answers_only_from_allowed_origins() {
    let (file, id) = library();
    let simple_post = |server: &Server, origin: &str| {
        client()
            .post(format!("{}/symbolicate/v5", server.url))
            .header("Origin", origin)
            .header("Content-Type", "text/plain;charset=UTF-8")
            .body(json!({"memoryMap": [[file, id]], "stacks": [[[0, 4096]]]}).to_string())
            .send()
    };
    let allowed_origin = |resp: &reqwest::Response| {
        resp.headers()
            .get("access-control-allow-origin")
            .map(|value| value.to_str().unwrap().to_owned())
    };
    let (_symbols, default) = serving_library("").await;
    let resp = simple_post(&default, "https://evil.example").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(allowed_origin(&resp), None, "{:?}", resp.headers());
    // The answer the browser keeps from the page holds what the sources know.
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        answer["results"][0]["found_modules"][format!("{file}/{id}")],
        true,
        "{answer}"
    );
    let resp = simple_post(&default, "https://profiler.firefox.com")
        .await
        .unwrap();
    assert_eq!(
        allowed_origin(&resp).as_deref(),
        Some("https://profiler.firefox.com")
    );

    let (_symbols, public) = serving_library("fronts: {cors_allowed_origins: [\"*\"]}\n").await;
    for origin in ["https://evil.example", "https://profiler.firefox.com"] {
        let resp = simple_post(&public, origin).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(allowed_origin(&resp).as_deref(), Some("*"), "{origin}");
    }
}
