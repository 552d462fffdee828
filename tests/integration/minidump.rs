//! End-to-end tests of `POST /minidump`: the real server on a loopback port, minidumps of
//! a real crash (fixtures/minidump, made by its build.sh with minidump-writer), symbols
//! from a `native`-layout filesystem source, and answers checked against the oracle in
//! fixtures/minidump/manifest.json (addr2line/objdump/readelf facts about the binaries).

use crate::common;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Server, crashing_thread, hex, minidump_file, minidump_form, minidump_variant};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------- fixtures

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string in {v}"))
}

fn minidump(v: &Value) -> Vec<u8> {
    std::fs::read(minidump_file(v, "minidump")).unwrap()
}

/// The debug information files a source may hold for a module.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dif {
    Executable,
    Debug,
    Breakpad,
    SourceBundle,
}

/// Where the `native` layout keeps `dif` of the variant `v` (src/sources/paths.rs).
fn native_path(v: &Value, dif: Dif) -> String {
    let code_id = s(v, "code_id");
    let gdb = format!("{}/{}", &code_id[..2], &code_id[2..]);
    match dif {
        Dif::Executable => gdb,
        Dif::Debug => format!("{gdb}.debug"),
        Dif::SourceBundle => format!("{gdb}.src.zip"),
        Dif::Breakpad => {
            let name = s(v, "debug_name");
            format!("{name}/{}/{name}.sym", s(v, "breakpad_id"))
        }
    }
}

fn fixture_for(dif: Dif) -> &'static str {
    match dif {
        Dif::Executable => "executable",
        Dif::Debug => "debug",
        Dif::Breakpad => "breakpad",
        Dif::SourceBundle => "source_bundle",
    }
}

/// A temp dir laid out as a `native` symbol source holding `difs` of each variant
/// (console_browser.rs serves the same one to the browser console).
pub(crate) fn native_source(entries: &[(&Value, &[Dif])]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (v, difs) in entries {
        for dif in *difs {
            let dest = root.path().join(native_path(v, *dif));
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(minidump_file(v, fixture_for(*dif)), &dest).unwrap();
        }
    }
    root
}

pub(crate) const ALL: &[Dif] = &[Dif::Executable, Dif::Debug, Dif::SourceBundle];

fn sources(root: &Path) -> Value {
    json!([{"type": "filesystem", "id": "local", "path": root, "layout": {"type": "native"}}])
}

// ---------------------------------------------------------------- requests

/// POSTs a minidump upload; returns the status and the body (JSON, or a JSON string).
async fn post_minidump(
    server: &Server,
    dump: &[u8],
    sources: &Value,
    options: &Value,
) -> (StatusCode, Value) {
    let (content_type, body) = minidump_form(dump, sources, options);
    server.post_typed("/minidump", &content_type, body).await
}

/// A completed answer for the minidump, or a panic showing what came back.
async fn process(server: &Server, dump: &[u8], sources: &Value, options: &Value) -> Value {
    let (status, response) = post_minidump(server, dump, sources, options).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed", "{response:#}");
    response
}

// ---------------------------------------------------------------- assertions

fn module<'a>(response: &'a Value, v: &Value) -> &'a Value {
    let modules = response["modules"].as_array().expect("modules");
    let found: Vec<&Value> = modules
        .iter()
        .filter(|m| m["code_id"] == v["code_id"])
        .collect();
    assert_eq!(found.len(), 1, "module {}: {modules:#?}", v["code_id"]);
    found[0]
}

/// How the crashing thread's top frames must come back.
struct Expect<'a> {
    /// Trusts allowed for the frames above the crash site.
    caller_trust: &'a [&'a str],
    /// Whether source context lines must be there (or must be absent).
    source_context: bool,
    /// Whether `filename` is checked (DWARF gives the name relative to the comp dir).
    check_filename: bool,
}

fn assert_crash_frames(response: &Value, v: &Value, expect: &Expect) {
    let thread = crashing_thread(response);
    assert_eq!(thread["thread_id"], v["crash"]["thread_id"], "thread id");
    assert_eq!(
        hex(&thread["registers"]["rip"]),
        hex(&v["crash"]["instruction_addr"]),
        "registers: {}",
        thread["registers"]
    );
    let frames = thread["frames"].as_array().unwrap();
    let want = v["frames"].as_array().unwrap();
    assert!(
        frames.len() >= want.len(),
        "{} frames, want at least {}: {frames:#?}",
        frames.len(),
        want.len()
    );
    for (i, (got, want)) in frames.iter().zip(want).enumerate() {
        let at = format!("frame {i} ({}): {got:#}", want["function"]);
        assert_eq!(got["status"], "symbolicated", "{at}");
        assert_eq!(got["function"], want["function"], "{at}");
        assert_eq!(got["abs_path"], want["abs_path"], "{at}");
        assert_eq!(got["lineno"], want["lineno"], "{at}");
        if expect.check_filename {
            assert_eq!(got["filename"], want["filename"], "{at}");
        }
        assert_eq!(
            hex(&got["instruction_addr"]),
            hex(&want["instruction_addr"]),
            "{at}"
        );
        let trust = got["trust"].as_str().unwrap_or("<none>");
        if want["kind"] == "return_address" {
            assert!(expect.caller_trust.contains(&trust), "trust {trust}: {at}");
        } else {
            assert_eq!(trust, "context", "{at}");
        }
        if expect.source_context {
            assert_eq!(got["context_line"], want["context_line"], "{at}");
            assert_eq!(got["pre_context"], want["pre_context"], "{at}");
            assert_eq!(got["post_context"], want["post_context"], "{at}");
        } else {
            for key in ["context_line", "pre_context", "post_context"] {
                assert!(got.get(key).is_none(), "{key} present: {at}");
            }
        }
    }
}

fn assert_crash_facts(response: &Value, v: &Value) {
    assert_eq!(response["crashed"], true, "{response:#}");
    let reason = response["crash_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(s(&v["crash"], "signal")),
        "crash_reason {reason:?}"
    );
    assert_eq!(response["system_info"]["os_name"], "Linux");
    assert_eq!(response["system_info"]["cpu_arch"], "x86_64");
    assert!(response["timestamp"].as_u64().unwrap_or(0) > 0, "timestamp");
}

fn assert_module_found(response: &Value, v: &Value) {
    let m = module(response, v);
    assert_eq!(m["debug_status"], "found", "{m:#}");
    assert_eq!(m["unwind_status"], "found", "{m:#}");
    assert_eq!(m["debug_id"], v["debug_id"], "{m:#}");
    assert_eq!(m["code_file"], v["code_file"], "{m:#}");
    assert_eq!(m["debug_file"], v["debug_file"], "{m:#}");
    assert_eq!(m["type"], "elf", "{m:#}");
    assert_eq!(hex(&m["image_addr"]), hex(&v["image_addr"]), "{m:#}");
    assert_eq!(m["image_size"], v["image_size"], "{m:#}");
    assert_eq!(m["features"]["has_debug_info"], true, "{m:#}");
    assert_eq!(m["features"]["has_unwind_info"], true, "{m:#}");
}

// ---------------------------------------------------------------- tests

/// a. The frame-pointer build with executable, debug file and source bundle: the
/// program's own functions, files and lines, with source context from the bundle.
#[tokio::test]
async fn fp_build_is_walked_symbolicated_and_given_source_context() {
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start("");
    let response = process(
        &server,
        &minidump(&v),
        &sources(symbols.path()),
        &json!({"dif_candidates": true}),
    )
    .await;
    assert_crash_frames(
        &response,
        &v,
        &Expect {
            caller_trust: &["cfi", "fp"],
            source_context: true,
            check_filename: true,
        },
    );
    assert_crash_facts(&response, &v);
    assert_module_found(&response, &v);
    let m = module(&response, &v);
    assert_eq!(m["features"]["has_sources"], true, "{m:#}");
    // Candidates name the files that were used, at their native-layout paths.
    let candidates = m["candidates"].as_array().expect("dif_candidates");
    let at = |dif| {
        let path = native_path(&v, dif);
        candidates
            .iter()
            .find(|c| c["location"].as_str().is_some_and(|l| l.ends_with(&path)))
            .unwrap_or_else(|| panic!("no candidate at {path}: {candidates:#?}"))
    };
    assert_eq!(at(Dif::Debug)["debug"]["status"], "ok", "{candidates:#?}");
    assert_eq!(
        at(Dif::Executable)["unwind"]["status"],
        "ok",
        "{candidates:#?}"
    );
    // Upstream's candidates have no "source" use; the bundle shows as downloaded.
    let bundle = at(Dif::SourceBundle);
    assert_eq!(bundle["download"]["status"], "ok", "{bundle:#}");
    assert_eq!(
        bundle["download"]["features"]["has_sources"], true,
        "{bundle:#}"
    );
    // The system libraries are listed, unresolved (the source has nothing for them).
    for name in v["other_modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.as_str().unwrap().starts_with('/'))
    {
        let listed = response["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["code_file"] == *name)
            .unwrap_or_else(|| panic!("module {name} not listed"));
        assert_eq!(listed["debug_status"], "missing", "{listed:#}");
    }
}

/// b. Without frame pointers, only CFI (from the executable's .eh_frame) gets the
/// walker past the frameless leaf the crash is in.
#[tokio::test]
async fn nofp_build_is_unwound_with_cfi() {
    let v = minidump_variant("nofp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start("");
    let response = process(&server, &minidump(&v), &sources(symbols.path()), &json!({})).await;
    assert_crash_frames(
        &response,
        &v,
        &Expect {
            caller_trust: &["cfi"],
            source_context: true,
            check_filename: true,
        },
    );
    assert_crash_facts(&response, &v);
    assert_module_found(&response, &v);
}

/// c. A source with only the Breakpad symbol file: it names the frames (inlinee
/// included) and its STACK CFI records unwind them.
#[tokio::test]
async fn breakpad_symbols_alone_name_and_unwind_the_frames() {
    for name in ["nofp", "fp"] {
        let v = minidump_variant(name);
        let symbols = native_source(&[(&v, &[Dif::Breakpad])]);
        let server = Server::start("");
        let response = process(
            &server,
            &minidump(&v),
            &sources(symbols.path()),
            &json!({"dif_candidates": true}),
        )
        .await;
        assert_crash_frames(
            &response,
            &v,
            &Expect {
                caller_trust: &["cfi"],
                source_context: false,
                check_filename: false,
            },
        );
        let m = module(&response, &v);
        assert_eq!(m["debug_status"], "found", "{name}: {m:#}");
        assert_eq!(m["unwind_status"], "found", "{name}: {m:#}");
        let path = native_path(&v, Dif::Breakpad);
        let candidates = m["candidates"].as_array().expect("dif_candidates");
        assert!(
            candidates.iter().any(
                |c| c["location"].as_str().is_some_and(|l| l.ends_with(&path))
                    && c["debug"]["status"] == "ok"
                    && c["unwind"]["status"] == "ok"
            ),
            "{name}: no candidate used for debug and unwind at {path}: {candidates:#?}"
        );
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 6);
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn bzip2(data: &[u8]) -> Vec<u8> {
    let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// The parts of an answer that depend on the minidump and the symbols only.
fn answer(response: &Value) -> Value {
    json!({
        "stacktraces": response["stacktraces"],
        "modules": response["modules"],
        "crashed": response["crashed"],
        "crash_reason": response["crash_reason"],
        "system_info": response["system_info"],
        "timestamp": response["timestamp"],
    })
}

/// d. A gzip, zstd, xz or bzip2 compressed upload is unpacked and gives the same answer.
#[tokio::test]
async fn compressed_minidumps_give_the_same_answer() {
    let v = minidump_variant("nofp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start("");
    let raw = minidump(&v);
    let srcs = sources(symbols.path());
    let opts = json!({"dif_candidates": true});
    // Once to warm the caches, then the reference answer.
    process(&server, &raw, &srcs, &opts).await;
    let want = answer(&process(&server, &raw, &srcs, &opts).await);
    assert_crash_frames(
        &want,
        &v,
        &Expect {
            caller_trust: &["cfi"],
            source_context: true,
            check_filename: true,
        },
    );
    let compressed = [
        ("gzip", gzip(&raw)),
        ("zstd", zstd::encode_all(raw.as_slice(), 3).unwrap()),
        ("xz", xz(&raw)),
        ("bzip2", bzip2(&raw)),
    ];
    for (format, data) in compressed {
        assert_ne!(data, raw);
        assert!(data.len() < raw.len(), "{format} did not compress");
        let got = answer(&process(&server, &data, &srcs, &opts).await);
        assert_eq!(got, want, "{format}-compressed upload answers differently");
    }
}

/// e. A cut-off minidump and a file that is no minidump at all fail cleanly; the
/// server goes on answering.
#[tokio::test]
async fn truncated_and_garbage_minidumps_fail_with_a_message() {
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start("");
    let raw = minidump(&v);
    // Deterministic noise (xorshift), no minidump signature.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let garbage: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    assert_ne!(&garbage[..4], b"MDMP");
    for (what, data) in [("truncated", &raw[..1000]), ("garbage", &garbage[..])] {
        let (status, response) =
            post_minidump(&server, data, &sources(symbols.path()), &json!({})).await;
        assert_eq!(status, StatusCode::OK, "{what}: {response}");
        assert_eq!(response["status"], "failed", "{what}: {response:#}");
        let message = response["message"].as_str().unwrap_or_default();
        eprintln!("{what}: {message:?}");
        // The reader's own words, not a crashed worker or a generic error.
        assert!(message.len() > 10, "{what}: no message: {response}");
        for generic in ["panic", "internal", "unknown error"] {
            assert!(
                !message.to_lowercase().contains(generic),
                "{what}: {message:?}"
            );
        }
        assert!(
            response.get("stacktraces").is_none(),
            "{what}: {response:#}"
        );
    }
    let (status, body) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // And it still processes a good one.
    let response = process(&server, &raw, &sources(symbols.path()), &json!({})).await;
    assert_crash_facts(&response, &v);
}

/// Sends a `/minidump` upload of `total` body bytes over a raw connection, announced
/// with Content-Length or chunked, while reading the answer. Returns the status, the
/// response text and how many body bytes were written before the server answered or
/// the connection broke.
async fn raw_upload(server: &Server, total: usize, chunked: bool) -> (u16, String, u64) {
    let addr = server.url.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let boundary = "----omnisym-oversize";
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"upload_file_minidump\"; \
         filename=\"big.dmp\"\r\nContent-Type: application/octet-stream\r\n\r\nMDMP"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    let file_len = total - head.len() - tail.len();
    let length = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {total}")
    };
    let request_head = format!(
        "POST /minidump HTTP/1.1\r\nHost: {addr}\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\n{length}\r\n\
         Connection: close\r\n\r\n"
    );
    let sent = Arc::new(AtomicU64::new(0));
    let sent2 = sent.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(request_head.as_bytes()).await?;
        let filler = vec![0u8; 64 * 1024];
        let mut pieces: Vec<&[u8]> = vec![head.as_bytes()];
        let mut left = file_len;
        let mut plan = Vec::new();
        while left > 0 {
            let n = left.min(filler.len());
            plan.push(n);
            left -= n;
        }
        pieces.extend(plan.iter().map(|n| &filler[..*n]));
        pieces.push(tail.as_bytes());
        for piece in pieces {
            if chunked {
                wr.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                    .await?;
                wr.write_all(piece).await?;
                wr.write_all(b"\r\n").await?;
            } else {
                wr.write_all(piece).await?;
            }
            sent2.fetch_add(piece.len() as u64, Ordering::Relaxed);
        }
        if chunked {
            wr.write_all(b"0\r\n\r\n").await?;
        }
        wr.flush().await?;
        // Keep the write half open until the reader is done.
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, std::io::Error>(())
    });
    let mut response = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => response.extend_from_slice(&buf[..n]),
            }
            // A complete small answer (headers plus a JSON body) is enough.
            if let Some(end) = find(&response, b"\r\n\r\n")
                && response.len() > end + 4
                && response.ends_with(b"}")
            {
                break;
            }
        }
    })
    .await;
    let sent_when_answered = sent.load(Ordering::Relaxed);
    writer.abort();
    assert!(read.is_ok(), "no answer within 60 s");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?} ({sent_when_answered} bytes sent)"));
    (status, text, sent_when_answered)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// f. An upload over `max_crash_file_size` gets 413, and is refused before it has been
/// read whole: announced by Content-Length, or streamed chunked.
#[tokio::test]
async fn oversized_minidumps_are_refused_early() {
    const LIMIT: usize = 64 * 1024;
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start(&format!("max_crash_file_size: {LIMIT}\n"));
    // The fixture itself is under the limit and is processed.
    let raw = minidump(&v);
    assert!(raw.len() < LIMIT);
    let response = process(&server, &raw, &sources(symbols.path()), &json!({})).await;
    assert_crash_facts(&response, &v);

    // 64 MiB: far more than the kernel buffers of a loopback connection can absorb, so
    // a server that reads the whole body is caught by `sent`.
    const TOTAL: usize = 64 * 1024 * 1024;
    for chunked in [false, true] {
        let started = Instant::now();
        let (status, text, sent) = raw_upload(&server, TOTAL, chunked).await;
        let how = if chunked { "chunked" } else { "content-length" };
        assert_eq!(status, 413, "{how}: {text}");
        assert!(
            text.contains("max_crash_file_size"),
            "{how}: the answer does not name the limit: {text}"
        );
        assert!(
            sent < TOTAL as u64 / 2,
            "{how}: {sent} of {TOTAL} bytes were taken before the answer"
        );
        eprintln!("{how}: 413 after {sent} bytes in {:?}", started.elapsed());
    }

    // A small upload that unpacks to more than the limit is refused too.
    let mut bomb = b"MDMP".to_vec();
    bomb.resize(8 * LIMIT, 0);
    let bomb = gzip(&bomb);
    assert!(bomb.len() < LIMIT);
    let (status, response) =
        post_minidump(&server, &bomb, &sources(symbols.path()), &json!({})).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{response}");

    let (status, _) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK);
}

/// g. `apply_source_context: false` leaves the context lines out, the same request
/// with the default option has them.
#[tokio::test]
async fn source_context_can_be_turned_off() {
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start("");
    let srcs = sources(symbols.path());
    let off = process(
        &server,
        &minidump(&v),
        &srcs,
        &json!({"apply_source_context": false}),
    )
    .await;
    let expect = |source_context| Expect {
        caller_trust: &["cfi", "fp"],
        source_context,
        check_filename: true,
    };
    assert_crash_frames(&off, &v, &expect(false));
    // No frame of any thread has context.
    for frame in off["stacktraces"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["frames"].as_array().unwrap())
    {
        assert!(frame.get("context_line").is_none(), "{frame:#}");
    }
    let on = process(&server, &minidump(&v), &srcs, &json!({})).await;
    assert_crash_frames(&on, &v, &expect(true));
}

/// h. 50 concurrent warm requests (both builds, same source) all complete with the
/// answer a single request gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_warm_requests_succeed() {
    let fp = minidump_variant("fp");
    let nofp = minidump_variant("nofp");
    let symbols = native_source(&[(&fp, ALL), (&nofp, ALL)]);
    let server = Server::start("");
    let srcs = sources(symbols.path());
    let opts = json!({});
    let dumps = [minidump(&fp), minidump(&nofp)];
    let mut want = Vec::new();
    for dump in &dumps {
        // Cold, then warm: the reference answers.
        let cold = answer(&process(&server, dump, &srcs, &opts).await);
        let warm = answer(&process(&server, dump, &srcs, &opts).await);
        assert_eq!(cold, warm, "a warm answer differs from the cold one");
        want.push(warm);
    }
    let started = Instant::now();
    let requests = (0..50).map(|i| {
        let (server, dumps, srcs, opts) = (&server, &dumps, &srcs, &opts);
        async move {
            let which = i % 2;
            let (status, response) = post_minidump(server, &dumps[which], srcs, opts).await;
            (which, status, response)
        }
    });
    let results = futures::future::join_all(requests).await;
    let elapsed = started.elapsed();
    for (i, (which, status, response)) in results.iter().enumerate() {
        assert_eq!(*status, StatusCode::OK, "request {i}: {response}");
        assert_eq!(response["status"], "completed", "request {i}: {response}");
        assert_eq!(answer(response), want[*which], "request {i}");
    }
    assert_crash_frames(
        &results[1].2,
        &nofp,
        &Expect {
            caller_trust: &["cfi"],
            source_context: true,
            check_filename: true,
        },
    );
    eprintln!("50 concurrent warm /minidump requests in {elapsed:?}");
}

/// i. Cold, the executable's CFI cache is built in the background and the walk unwinds
/// the frameless leaf from the file's own `.eh_frame` meanwhile; warm, from the cache.
/// Both give exactly the same stack traces.
#[tokio::test]
async fn a_cold_walk_unwinds_from_the_file_as_a_warm_walk_does_from_the_cfi_cache() {
    let v = minidump_variant("nofp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = Server::start("");
    let srcs = sources(symbols.path());
    let opts = json!({"dif_candidates": true});
    let lazy_unwinds =
        |m: &common::prometheus::Exposition| m.value("stackwalk_lazy_unwinds_total", &[]);
    assert_eq!(lazy_unwinds(&server.scrape().await), 0.0);

    let cold = process(&server, &minidump(&v), &srcs, &opts).await;
    let after_cold = lazy_unwinds(&server.scrape().await);
    // store_result, process_record, run_pipeline and main are in the executable.
    assert!(
        after_cold >= 4.0,
        "{after_cold} frames unwound from the file: the cold walk used the CFI cache"
    );
    assert_crash_frames(
        &cold,
        &v,
        &Expect {
            caller_trust: &["cfi"],
            source_context: true,
            check_filename: true,
        },
    );

    // The build goes on after the cold request; a walk that unwinds nothing from the
    // file is a warm one.
    let mut warm = None;
    for _ in 0..50 {
        let before = lazy_unwinds(&server.scrape().await);
        let response = process(&server, &minidump(&v), &srcs, &opts).await;
        if lazy_unwinds(&server.scrape().await) == before {
            warm = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let warm = warm.expect("the CFI cache was never used");
    let frames = |response: &Value| -> Vec<Vec<(String, String)>> {
        response["stacktraces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|thread| {
                thread["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| {
                        let addr = f["instruction_addr"].as_str().unwrap().to_owned();
                        (addr, f["trust"].as_str().unwrap_or_default().to_owned())
                    })
                    .collect()
            })
            .collect()
    };
    assert!(frames(&cold).iter().map(Vec::len).sum::<usize>() >= 5);
    assert_eq!(frames(&cold), frames(&warm));
    // And everything else: symbols, modules, unwind statuses, candidates.
    assert_eq!(answer(&cold), answer(&warm));
}
