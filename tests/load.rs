//! Load on loopback: 1,000 concurrent `/symbolicate` requests against 200 request slots
//! (`max_concurrent_requests: 200`), a mix of warm requests (the module's caches are
//! built) and cold ones (a fresh scope that downloads and converts the debug file, or a
//! module no source has) from a symbol server that answers slowly. Every answer must be
//! a completed result, `pending` or 503; the server must stay up, and its peak RSS
//! (VmHWM) stay under 256 MiB.
//!
//! `OMNISYM_LOAD_REQUESTS` changes the number of requests (default 1000); the figures
//! are printed (run with `--nocapture` to see them).

mod common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Server, SymbolServer, assert_elf_symbolicated, elf_module, elf_request};
use serde_json::{Value, json};

const SLOTS: usize = 200;
const MAX_RSS: u64 = 256 << 20;
/// How long the slow source takes to answer, and how long a client waits before it is
/// told `pending`.
const SLOW_MS: u64 = 2000;
const WAIT: &str = "timeout=1";

/// Raises this process's open-file limit (which the server inherits) to `needed`, as far
/// as the hard limit allows: each request holds a socket on both sides.
fn raise_open_files(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < needed {
            limit.rlim_cur = needed.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(
        limit.rlim_cur >= needed,
        "the open-file limit ({}) is below the {needed} this test needs",
        limit.rlim_cur
    );
}

fn http_source(id: &str, url: String) -> Value {
    json!([{"type": "http", "id": id, "url": url, "layout": {"type": "native"}}])
}

/// A module with ids no source has: every file looked for is a slow miss.
fn unknown_module_request(sources: Value, n: usize) -> Value {
    let mut module = elf_module();
    module["debug_id"] = json!(format!("{:08x}-0000-4000-8000-{:012x}", n, n));
    module["code_id"] = json!(format!("{:040x}", n + 1));
    let mut request = elf_request(sources);
    request["modules"] = json!([module]);
    request
}

/// What a request of the mix asks for, and so what its result must say.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The fixture module, its caches built: symbolicated.
    Warm,
    /// The fixture module in a fresh scope, from the slow source: symbolicated.
    Cold,
    /// A module no source has: missing, its frame unsymbolicated.
    Unknown,
}

/// Holds a completed answer to what its kind promises.
fn assert_answer(kind: Kind, answer: &Value) {
    match kind {
        Kind::Warm | Kind::Cold => assert_elf_symbolicated(answer),
        Kind::Unknown => {
            assert_eq!(answer["status"], "completed", "{answer}");
            assert_eq!(
                answer["modules"][0]["debug_status"], "missing",
                "{answer:#}"
            );
            let frame = &answer["stacktraces"][0]["frames"][0];
            assert_eq!(frame["status"], "missing", "{frame}");
            assert!(frame.get("function").is_none(), "{frame}");
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    pending: Vec<(String, Kind)>,
    overloaded: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_requests_against_two_hundred_slots() {
    let requests: usize = std::env::var("OMNISYM_LOAD_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    raise_open_files(2 * requests as u64 + 256);

    let symbols = SymbolServer::with_elf_debug().await;
    let server = Server::start(&format!("max_concurrent_requests: {SLOTS}\n"));
    let fast = http_source("fast", symbols.url.clone());
    // A source of its own per cold request, so that they do not queue for one source's
    // download slots.
    let slow = |i: usize| {
        http_source(
            &format!("slow-{i}"),
            format!("{}slow/{SLOW_MS}/", symbols.url),
        )
    };

    // Warm the global scope's caches for the fixture module.
    let (status, warmed) = server
        .post("/symbolicate", &elf_request(fast.clone()))
        .await;
    assert_eq!(status, StatusCode::OK, "{warmed}");
    assert_elf_symbolicated(&warmed);

    // Half warm; a quarter cold scopes that download and convert the file slowly; a
    // quarter modules that no source has, each a slow miss.
    let bodies: Vec<(String, Value, Kind)> = (0..requests)
        .map(|i| match i % 4 {
            0 | 2 => (
                format!("/symbolicate?{WAIT}"),
                elf_request(fast.clone()),
                Kind::Warm,
            ),
            1 => (
                format!("/symbolicate?{WAIT}&scope=cold-{i}"),
                elf_request(slow(i)),
                Kind::Cold,
            ),
            _ => (
                format!("/symbolicate?{WAIT}"),
                unknown_module_request(slow(i), i),
                Kind::Unknown,
            ),
        })
        .collect();

    let started = Instant::now();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(requests));
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|(path, body, kind)| {
            let url = format!("{}{path}", server.url);
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let resp = common::client()
                    .post(url)
                    .json(&body)
                    .timeout(Duration::from_secs(60))
                    .send()
                    .await
                    .expect("every request gets an answer");
                let status = resp.status().as_u16();
                let answer: Value = resp.json().await.expect("every answer is JSON");
                (status, answer, kind)
            })
        })
        .collect();

    let mut tally = Tally::default();
    for task in tasks {
        let (status, answer, kind) = task.await.unwrap();
        match (status, answer["status"].as_str()) {
            (200, Some("completed")) => {
                tally.completed += 1;
                assert_answer(kind, &answer);
            }
            (200, Some("pending")) => {
                // Sentry polls the id after `retry_after` seconds, as upstream says.
                let id = answer["request_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{answer}"));
                assert!(id.parse::<uuid::Uuid>().is_ok(), "{answer}");
                assert_eq!(answer["retry_after"], 30, "{answer}");
                tally.pending.push((id.to_owned(), kind));
            }
            (503, _) => {
                assert_eq!(
                    answer["error"], "maximum number of concurrent requests reached",
                    "{answer}"
                );
                tally.overloaded += 1;
            }
            _ => panic!("unexpected answer {status}: {answer}"),
        }
    }
    let burst = started.elapsed();

    // Every pending request finishes, and its result can be fetched.
    for (id, kind) in &tally.pending {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, poll) = server.get(&format!("/requests/{id}?timeout=5")).await;
            assert_eq!(status, StatusCode::OK, "{poll}");
            if poll["status"] == "completed" {
                assert_answer(*kind, &poll);
                break;
            }
            assert_eq!(poll["status"], "pending", "{poll}");
            assert!(Instant::now() < deadline, "{id} never completed");
        }
    }

    let (status, body) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let peak = common::peak_rss_kib(server.pid()) << 10;
    eprintln!(
        "load: {requests} requests in {burst:.1?}: {} completed, {} pending (all \
         completed later), {} refused with 503; server peak RSS {:.1} MiB",
        tally.completed,
        tally.pending.len(),
        tally.overloaded,
        peak as f64 / (1 << 20) as f64,
    );
    // The server's own count of what it did agrees with what the clients were told:
    // every request accepted (the warm-up too) finished completed, once; every refusal
    // was one.
    let metrics = server.scrape().await;
    let accepted = tally.completed + tally.pending.len();
    let answered = |status: &str| {
        metrics.value(
            "http_requests_total",
            &[("endpoint", "/symbolicate"), ("status", status)],
        ) as usize
    };
    assert_eq!(answered("200"), 1 + accepted, "{tally:?}");
    assert_eq!(answered("503"), tally.overloaded, "{tally:?}");
    assert_eq!(
        metrics.value("requests_rejected_total", &[]) as usize,
        tally.overloaded,
        "{tally:?}"
    );
    for (status, want) in [("completed", 1 + accepted), ("failed", 0), ("timeout", 0)] {
        let finished = metrics.value("requests_finished_total", &[("status", status)]);
        assert_eq!(finished as usize, want, "{status}: {tally:?}");
    }
    assert!(
        tally.completed > 0 && !tally.pending.is_empty(),
        "{tally:?}"
    );
    if requests >= 4 * SLOTS {
        // Half the requests hold a slot for seconds: more than the slots at once.
        assert!(tally.overloaded > 0, "{tally:?}");
    }
    assert!(
        peak < MAX_RSS,
        "server peak RSS {peak} bytes, over {MAX_RSS}"
    );
}
