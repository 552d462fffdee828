//! The fault suite: the real server on loopback under the failures real deployments
//! meet, each built from real parts.
//!
//! - symbol sources that stall, reset or trickle mid-body: a TCP proxy on loopback
//!   (common::fault_proxy) in front of a real HTTP symbol server;
//! - a cache directory and a symbfile directory on a tiny tmpfs that fills up;
//! - SIGKILL during a download, a SymCache conversion and a symbfile upload, then a
//!   restart on the same directories.
//!
//! Under all of them every answer must be a result, `pending` or a clear error, no
//! corrupt file may be left where it could be served, and nothing acknowledged may be
//! lost. Each test prints one row of the suite's table (a line starting `FAULT-ROW`);
//! scripts/fault-suite.sh runs this file and prints the table.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::fault_proxy::{Fault, FaultProxy};
use common::symbfile::{self as sf, Part};
use common::tmpfs::Tmpfs;
use common::{ELF_BASE, Server, SymbolServer, assert_elf_symbolicated, client, elf_request};
use futures::StreamExt;
use serde_json::{Value, json};

/// Download limits short enough that a stalled source costs seconds, and transient
/// failures remembered for a second, so a source that recovers is asked again soon.
const SHORT_TIMEOUTS: &str = "\
connect_timeout: 1s
head_timeout: 2s
max_download_timeout: 3s
caches:
  downloaded:
    retry_errors_after: 1s
  derived:
    retry_errors_after: 1s
";
/// Concurrent requests of each batch.
const BATCH: usize = 20;
/// No answer (polls included) may take longer than this under any fault.
const ANSWER_BOUND: Duration = Duration::from_secs(30);

/// One row of the suite's table.
struct Row {
    fault: String,
    requests: usize,
    answers: BTreeMap<String, usize>,
    corrupt: usize,
    /// Acknowledged uploads whose data is gone; `None` where nothing is uploaded.
    lost: Option<usize>,
}

impl Row {
    fn new(fault: impl Into<String>) -> Row {
        Row {
            fault: fault.into(),
            requests: 0,
            answers: BTreeMap::new(),
            corrupt: 0,
            lost: None,
        }
    }

    fn count(&mut self, kind: impl Into<String>) {
        self.requests += 1;
        *self.answers.entry(kind.into()).or_default() += 1;
    }

    /// Prints the row; scripts/fault-suite.sh collects these lines into the table.
    fn print(&self) {
        let answers: Vec<String> = self
            .answers
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        let lost = self.lost.map_or("n/a".to_owned(), |n| n.to_string());
        println!(
            "FAULT-ROW | {} | {} | {} | {} | {lost} |",
            self.fault,
            self.requests,
            answers.join(", "),
            self.corrupt
        );
    }
}

/// What a `/symbolicate` answer was, in the table's words: `completed/<the first
/// module's debug_status>`, `pending`, or the HTTP status of anything else.
fn kind(status: StatusCode, body: &Value) -> String {
    match (status, body["status"].as_str()) {
        (StatusCode::OK, Some("completed")) => format!(
            "completed/{}",
            body["modules"][0]["debug_status"].as_str().unwrap_or("?")
        ),
        (StatusCode::OK, Some("pending")) => "pending".to_owned(),
        _ => format!("http {}", status.as_u16()),
    }
}

/// Posts `body` to `path` and polls while the answer is pending. Returns the kind of
/// each answer in turn (`pending→completed/found`) and the last answer; panics when
/// the whole exchange takes longer than [`ANSWER_BOUND`].
async fn symbolicate(server: &Server, path: &str, body: &Value) -> (String, Value) {
    let exchange = async {
        let (status, mut answer) = server.post(path, body).await;
        let mut kinds = vec![kind(status, &answer)];
        while status == StatusCode::OK && answer["status"] == "pending" {
            let id = answer["request_id"].as_str().unwrap().to_owned();
            let (status, polled) = server.get(&format!("/requests/{id}?timeout=5")).await;
            assert_eq!(status, StatusCode::OK, "{polled}");
            answer = polled;
            kinds.push(kind(status, &answer));
        }
        (kinds.join("→"), answer)
    };
    tokio::time::timeout(ANSWER_BOUND, exchange)
        .await
        .unwrap_or_else(|_| panic!("no answer from {path} within {ANSWER_BOUND:?}"))
}

/// An `http` source (native layout) at `url`, as a request names it.
fn http_source(url: &str) -> Value {
    json!([{"id": "flaky", "type": "http", "url": url, "layout": {"type": "native"}}])
}

/// Sends the ELF request until it comes back symbolicated; panics after `within`.
/// Returns how many requests that took.
async fn until_symbolicated(server: &Server, path: &str, body: &Value, within: Duration) -> usize {
    let start = Instant::now();
    for tries in 1.. {
        let (_, answer) = symbolicate(server, path, body).await;
        if answer["modules"][0]["debug_status"] == "found" {
            assert_elf_symbolicated(&answer);
            return tries;
        }
        assert!(
            start.elapsed() < within,
            "still not symbolicated after {tries} tries in {within:?}: {answer:#}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    unreachable!()
}

/// A batch of [`BATCH`] concurrent requests for the ELF fixture through a source behind
/// the proxy with `fault` set; half of them ask to be answered within a second, so
/// they may be answered `pending` and polled. Every answer must end `completed` with
/// a debug status in `expected`; then, with the fault gone, the same request must be
/// symbolicated again (no failure is remembered past `retry_errors_after`).
async fn faulty_source(fault: Fault, expected: &[&str]) {
    let symsrv = SymbolServer::with_elf_debug().await;
    let proxy = FaultProxy::start(&symsrv.url).await;
    let server = Server::start(SHORT_TIMEOUTS);
    let request = elf_request(http_source(&proxy.url));
    let mut row = Row::new(format!("source: {}", fault.name()));
    proxy.set(fault);

    let started = Instant::now();
    let batch = (0..BATCH).map(|i| {
        let path = if i % 2 == 0 {
            "/symbolicate?timeout=1"
        } else {
            "/symbolicate"
        };
        symbolicate(&server, path, &request)
    });
    for (kinds, answer) in futures::future::join_all(batch).await {
        assert_eq!(answer["status"], "completed", "{answer:#}");
        let status = answer["modules"][0]["debug_status"].as_str().unwrap();
        assert!(
            expected.contains(&status),
            "{} gave {status}, expected one of {expected:?}: {answer:#}",
            fault.name()
        );
        if status == "found" {
            assert_elf_symbolicated(&answer);
        } else {
            assert_eq!(
                answer["stacktraces"][0]["frames"][0]["status"], "missing",
                "{answer:#}"
            );
        }
        row.count(kinds);
    }
    let took = started.elapsed();
    assert!(proxy.broken() > 0, "the proxy never met a body to break");

    proxy.set(Fault::None);
    let tries =
        until_symbolicated(&server, "/symbolicate", &request, Duration::from_secs(20)).await;
    row.count(format!("after the fault: found on try {tries}"));
    row.corrupt = corrupt_files(&server.cache_dir).len();
    row.print();
    println!(
        "  batch answered in {took:?}, {} bodies broken",
        proxy.broken()
    );
    assert_eq!(row.corrupt, 0, "{:?}", corrupt_files(&server.cache_dir));
}

#[tokio::test]
async fn a_source_that_stalls_mid_body_times_out_then_recovers() {
    faulty_source(Fault::Stall, &["timeout"]).await;
}

#[tokio::test]
async fn a_source_that_resets_mid_body_fails_then_recovers() {
    faulty_source(Fault::Reset, &["fetching_failed"]).await;
}

#[tokio::test]
async fn a_slow_source_within_the_limits_is_waited_for() {
    // The 7.5 kB debug file in about 1.5 s.
    let fault = Fault::Trickle {
        chunk: 128,
        every: Duration::from_millis(25),
    };
    faulty_source(fault, &["found"]).await;
}

#[tokio::test]
async fn a_source_slower_than_max_download_timeout_times_out_then_recovers() {
    // The 7.5 kB debug file in about 12 s, past max_download_timeout (3 s).
    let fault = Fault::Trickle {
        chunk: 64,
        every: Duration::from_millis(100),
    };
    faulty_source(fault, &["timeout"]).await;
}

/// Every file under `dir` that a reader could be handed and that does not load: cache
/// files by their kind (`<kind>/<version>/<scope>/<key>`), placeholders, and the
/// symbfile store's symbfiles. Temp files (`.tmp*`, `.part*`, `.joined*`)
/// are never served and are left out.
fn corrupt_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut corrupt = Vec::new();
    for path in common::files_under(dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        if let Err(err) = check_file(dir, &path, &name, &data) {
            corrupt.push((path, err));
        }
    }
    corrupt
}

fn check_file(root: &Path, path: &Path, name: &str, data: &[u8]) -> Result<(), String> {
    const PLACEHOLDER: &[u8] = b"\0omnisym-placeholder\0";
    if let Some(json) = data.strip_prefix(PLACEHOLDER) {
        return serde_json::from_slice::<Value>(json)
            .map(drop)
            .map_err(|e| format!("placeholder: {e}"));
    }
    let rel = path.strip_prefix(root).unwrap();
    let top = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    if top == "symcaches" || top == "symbfile_symcaches" {
        return symbolic::symcache::SymCache::parse(data)
            .map(drop)
            .map_err(|e| format!("symcache: {e}"));
    }
    if name.ends_with(".symbfile") {
        return data
            .starts_with(b"symbfile")
            .then_some(())
            .ok_or_else(|| "symbfile without its magic".to_owned());
    }
    match &*top {
        "objects" => {
            let archive =
                symbolic::debuginfo::Archive::parse(data).map_err(|e| format!("object: {e}"))?;
            archive
                .objects()
                .try_for_each(|o| o.map(drop))
                .map_err(|e| format!("object: {e}"))
        }
        "object_meta" => serde_json::from_slice::<Value>(data)
            .map(drop)
            .map_err(|e| format!("object_meta: {e}")),
        _ => Ok(()),
    }
}

/// Temp files under `dir`: what killed writers leave behind.
fn temp_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    common::files_under(dir)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .map(|p| {
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            (p, len)
        })
        .collect()
}

/// A tmpfs of `bytes`, or `None` when the test may skip (see `Tmpfs::mount_or_skip`),
/// after printing its row.
fn tmpfs_or_skip(fault: &str, bytes: u64) -> Option<Tmpfs> {
    let tmpfs = Tmpfs::mount_or_skip(bytes, fault);
    if tmpfs.is_none() {
        println!("FAULT-ROW | {fault} | 0 | SKIPPED: cannot mount a tmpfs | - | - |");
    }
    tmpfs
}

const PAGE: u64 = 4096;
/// Free pages left on the full tmpfs, one round each: from nothing to room for the
/// download but not for what is derived from it.
const FREE_PAGES: [u64; 8] = [0, 1, 2, 3, 4, 6, 8, 16];

#[tokio::test]
async fn a_full_cache_disk_answers_every_request_and_recovers() {
    let fault = "cache_dir on a full tmpfs";
    let Some(tmpfs) = tmpfs_or_skip(fault, 1 << 20) else {
        return;
    };
    let symsrv = SymbolServer::with_elf_debug().await;
    let cache_dir = tmpfs.path().join("cache");
    let work = tempfile::tempdir().unwrap();
    let server = Server::start_in(work.path(), &cache_dir, SHORT_TIMEOUTS);
    let request = elf_request(http_source(&symsrv.url));
    let mut row = Row::new(format!("{fault} (free pages {FREE_PAGES:?}, then freed)"));

    for free in FREE_PAGES {
        // A scope of its own per round: nothing cached by an earlier round helps.
        let path = format!("/symbolicate?scope=full{free}");
        let filler = tmpfs.fill(free * PAGE);
        let batch = (0..4).map(|_| symbolicate(&server, &path, &request));
        for (kinds, answer) in futures::future::join_all(batch).await {
            assert_eq!(answer["status"], "completed", "{answer:#}");
            if answer["modules"][0]["debug_status"] == "found" {
                assert_elf_symbolicated(&answer);
            }
            row.count(kinds);
        }
        drop(filler);
        // A failure for lack of disk must not outlive it.
        let tries = until_symbolicated(&server, &path, &request, Duration::from_secs(10)).await;
        row.count(format!("freed: found on try {tries}"));
    }
    let corrupt = corrupt_files(&cache_dir);
    row.corrupt = corrupt.len();
    row.print();
    assert!(corrupt.is_empty(), "{corrupt:?}");
    drop(server);
}

#[tokio::test]
async fn a_full_symbfile_disk_loses_no_acknowledged_part() {
    let fault = "symbfile dir on a full tmpfs";
    let Some(tmpfs) = tmpfs_or_skip(fault, 512 << 10) else {
        return;
    };
    let store = tmpfs.path().join("symbfiles");
    let server = Server::start(&sf::config(&format!("  dir: {}\n", store.display())));
    let ranges = sf::symbfile("ranges.symbfile");
    let parts = sf::split(&ranges, 3);
    let mut row = Row::new(format!("{fault} (last part at free pages {FREE_PAGES:?})"));
    let mut lost = 0;

    for free in FREE_PAGES {
        let id = format!("{:032x}", 0xfa17_0000_u128 + u128::from(free));
        for part in [0, 1] {
            Part::ranges(&id, part, 3, parts[part as usize])
                .accepted(&server)
                .await;
            row.count("part: 200");
        }
        let filler = tmpfs.fill(free * PAGE);
        let (status, body) = Part::ranges(&id, 2, 3, parts[2]).send(&server).await;
        row.count(format!("last part, disk full: {}", status.as_u16()));
        drop(filler);
        if status != StatusCode::OK {
            // A clear error in Elastic's shape, and the client sends the part again.
            assert!(status.is_server_error(), "{status}: {body}");
            assert_eq!(body["success"], false, "{body}");
            let (status, body) = Part::ranges(&id, 2, 3, parts[2]).send(&server).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            row.count("last part again: 200");
        }
        let (_, answer) = server.post("/symbolicate", &sf::probe_request(&id)).await;
        let found = answer["modules"][0]["debug_status"] == "found";
        row.count(format!(
            "symbolicate: {}",
            answer["modules"][0]["debug_status"].as_str().unwrap_or("?")
        ));
        if found {
            sf::assert_probes(&answer);
        } else {
            // Parts 0 and 1 were acknowledged and never sent again.
            lost += 2;
        }
    }
    row.lost = Some(lost);
    let corrupt = corrupt_files(&store);
    row.corrupt = corrupt.len();
    row.print();
    assert!(corrupt.is_empty(), "{corrupt:?}");
    assert_eq!(lost, 0, "acknowledged parts were lost");
    drop(server);
}

/// A debug file big enough that downloading it through a trickle and converting it
/// take long enough to be killed in the middle: a shared object of many functions,
/// compiled with `cc` (which every Rust toolchain on Linux links with).
struct BigElf {
    dir: tempfile::TempDir,
    code_id: String,
    debug_id: String,
    /// `(address relative to the image, function name)` of some functions.
    probes: Vec<(u64, String)>,
    size: u64,
}

impl BigElf {
    const FUNCTIONS: usize = 6000;

    fn build() -> BigElf {
        let dir = tempfile::tempdir().unwrap();
        let mut source = String::new();
        for i in 0..Self::FUNCTIONS {
            let call = if i == 0 {
                "y".to_owned()
            } else {
                format!("big_{}(y)", i - 1)
            };
            source.push_str(&format!(
                "int big_{i}(int x) {{\n  int y = x * {} + {i};\n  \
                 for (int k = 0; k < (x & 7); k++) y ^= y << 1;\n  \
                 if (y & 1) y = {call};\n  return y ^ {i};\n}}\n",
                i * 7 + 3
            ));
        }
        let c = dir.path().join("big.c");
        std::fs::write(&c, source).unwrap();
        let out = dir.path().join("big.so");
        let status = Command::new("cc")
            .args(["-g", "-O0", "-shared", "-fPIC", "-Wl,--build-id=sha1", "-o"])
            .arg(&out)
            .arg(&c)
            .status()
            .expect("cc runs");
        assert!(status.success(), "cc failed");
        let data = std::fs::read(&out).unwrap();
        let object = symbolic::debuginfo::Object::parse(&data).unwrap();
        let mut symbols: Vec<_> = object
            .symbols()
            .filter_map(|s| Some((s.address, s.name()?.to_owned())))
            .filter(|(_, name)| name.starts_with("big_"))
            .collect();
        symbols.sort();
        let step = symbols.len() / 5;
        let probes = symbols.iter().step_by(step).take(5).cloned().collect();
        BigElf {
            code_id: object.code_id().unwrap().to_string(),
            debug_id: object.debug_id().to_string(),
            probes,
            size: data.len() as u64,
            dir,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("big.so")
    }

    fn native_path(&self) -> String {
        format!("{}/{}.debug", &self.code_id[..2], &self.code_id[2..])
    }

    fn request(&self, sources: Value) -> Value {
        let frames: Vec<Value> = self
            .probes
            .iter()
            .map(|(addr, _)| {
                json!({
                    "instruction_addr": format!("{:#x}", ELF_BASE + addr + 4),
                    "adjust_instruction_addr": false,
                })
            })
            .collect();
        json!({
            "sources": sources,
            "modules": [{
                "type": "elf",
                "code_id": self.code_id,
                "debug_id": self.debug_id,
                "code_file": "/usr/lib/big.so",
                "image_addr": format!("{ELF_BASE:#x}"),
                "image_size": self.size,
            }],
            "stacktraces": [{"frames": frames}],
        })
    }

    fn assert_symbolicated(&self, answer: &Value) {
        assert_eq!(answer["status"], "completed", "{answer:#}");
        assert_eq!(answer["modules"][0]["debug_status"], "found", "{answer:#}");
        let frames = answer["stacktraces"][0]["frames"].as_array().unwrap();
        let got: Vec<&str> = frames
            .iter()
            .map(|f| f["function"].as_str().unwrap_or("?"))
            .collect();
        let want: Vec<&str> = self.probes.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(got, want, "{answer:#}");
    }
}

/// Sends `request` to `/symbolicate` in a task of its own, for a server about to be
/// killed.
fn spawn_symbolicate(
    server: &Server,
    request: &Value,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let send = client()
        .post(format!("{}/symbolicate", server.url))
        .json(request)
        .send();
    tokio::spawn(send)
}

/// Waits until a temp file of at least `min_len` bytes appears under `dir`; its size.
async fn temp_file_appears(dir: &Path, min_len: u64, within: Duration) -> Option<u64> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some((_, len)) = temp_files(dir).into_iter().find(|(_, len)| *len >= min_len) {
            return Some(len);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

#[tokio::test]
async fn sigkill_mid_download_and_mid_conversion_then_restart() {
    let big = tokio::task::spawn_blocking(BigElf::build).await.unwrap();
    let symsrv = SymbolServer::start().await;
    symsrv.put(&big.native_path(), &big.path());
    let proxy = FaultProxy::start(&symsrv.url).await;
    let request = big.request(http_source(&proxy.url));
    let work = tempfile::tempdir().unwrap();
    let cache_dir = work.path().join("cache");
    let mut row = Row::new(format!(
        "SIGKILL mid-download, mid-SymCache ({} kB debug file), restart",
        big.size / 1000
    ));

    // 1: killed while the debug file trickles in.
    proxy.set(Fault::Trickle {
        chunk: 64 << 10,
        every: Duration::from_millis(50),
    });
    let mut server = Server::start_in(work.path(), &cache_dir, "");
    let pending = spawn_symbolicate(&server, &request);
    let written = temp_file_appears(&cache_dir.join("objects"), 1, Duration::from_secs(30))
        .await
        .expect("the download never began");
    server.kill();
    assert!(pending.await.unwrap().is_err(), "answered before the kill");
    row.count("killed mid-download: no answer");
    let corrupt = corrupt_files(&cache_dir);
    assert!(
        corrupt.is_empty(),
        "after the kill mid-download: {corrupt:?}"
    );
    println!("  killed with {written} bytes of the download written");
    proxy.set(Fault::None);

    // 2: restarted, and killed while the SymCache is converted.
    let mut server = Server::start_in(work.path(), &cache_dir, "");
    let pending = spawn_symbolicate(&server, &request);
    let converting = temp_file_appears(&cache_dir.join("symcaches"), 1, Duration::from_secs(60))
        .await
        .expect("the conversion never began");
    server.kill();
    match pending.await.unwrap() {
        // A cold module is answered from the debug file while its SymCache is built.
        Ok(response) => {
            let answer: Value = response.json().await.unwrap();
            big.assert_symbolicated(&answer);
            row.count("answered before the kill mid-SymCache: completed/found");
        }
        Err(_) => row.count("killed mid-SymCache: no answer"),
    }
    println!("  killed with {converting} bytes of the SymCache written");
    let corrupt = corrupt_files(&cache_dir);
    assert!(
        corrupt.is_empty(),
        "after the kill mid-SymCache: {corrupt:?}"
    );
    let leftovers = temp_files(&cache_dir);

    // 3: restarted: the answer is right, and the SymCache is built whole.
    let server = Server::start_in(work.path(), &cache_dir, "");
    let (kinds, answer) = symbolicate(&server, "/symbolicate", &request).await;
    big.assert_symbolicated(&answer);
    row.count(kinds);
    let published = async {
        loop {
            let symcaches = common::files_under(&cache_dir.join("symcaches"));
            if symcaches
                .iter()
                .any(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), published)
        .await
        .expect("the SymCache was never published");
    let (kinds, answer) = symbolicate(&server, "/symbolicate", &request).await;
    big.assert_symbolicated(&answer);
    row.count(kinds);

    let corrupt = corrupt_files(&cache_dir);
    row.corrupt = corrupt.len();
    row.print();
    println!(
        "  temp files left by the killed writers: {} (never served; cleanup removes them)",
        leftovers.len()
    );
    assert!(corrupt.is_empty(), "{corrupt:?}");
}

#[tokio::test]
async fn sigkill_mid_upload_loses_no_acknowledged_part() {
    let work = tempfile::tempdir().unwrap();
    let cache_dir = work.path().join("cache");
    let config = sf::config("");
    let id = sf::file_id();
    let ranges = sf::symbfile("ranges.symbfile");
    let parts = sf::split(&ranges, 3);
    let pads = sf::symbfile("returnpads.symbfile");
    let at = sf::manifest()["returnpads_second_file_at"]
        .as_u64()
        .unwrap() as usize;
    let mut row = Row::new("SIGKILL mid-upload and after acknowledgments, restart");

    let mut server = Server::start_in(work.path(), &cache_dir, &config);
    Part::ranges(&id, 0, 3, parts[0]).accepted(&server).await;
    Part::return_pads(&id, 0, 2, &pads[..at])
        .accepted(&server)
        .await;
    row.count("part: 200");
    row.count("part: 200");

    // Part 1 is half sent when the server dies.
    let half = parts[1].len() / 2;
    let (first, _rest) = parts[1].split_at(half);
    let (hold, held) = tokio::sync::oneshot::channel::<()>();
    let body = futures::stream::once(std::future::ready(Ok::<_, std::io::Error>(
        bytes::Bytes::copy_from_slice(first),
    )))
    .chain(futures::stream::once(async move {
        let _ = held.await;
        Err(std::io::Error::other("never sent"))
    }));
    let request = Part::ranges(&id, 1, 3, parts[1])
        .request(&server)
        .body(reqwest::Body::wrap_stream(body));
    let in_flight = tokio::spawn(request.send());
    // The store buffers what it writes: the part's temp file is there, still empty.
    temp_file_appears(&cache_dir.join("symbfiles/tmp"), 0, Duration::from_secs(10))
        .await
        .expect("the part never reached the store");
    server.kill();
    assert!(
        in_flight.await.unwrap().is_err(),
        "acknowledged half a part"
    );
    drop(hold);
    row.count("part killed mid-body: no answer");
    let corrupt = corrupt_files(&cache_dir);
    assert!(corrupt.is_empty(), "after the kill mid-upload: {corrupt:?}");

    // A second executable's upload completes, and the server dies right after.
    let second = format!("{:032x}", 0x5ec0_u128);
    let mut server = Server::start_in(work.path(), &cache_dir, &config);
    sf::upload_all(&server, &second).await;
    server.kill();
    row.count("upload of a second file: 5 parts 200, then SIGKILL");

    // After the restart only the parts never acknowledged are sent.
    let server = Server::start_in(work.path(), &cache_dir, &config);
    Part::ranges(&id, 1, 3, parts[1]).accepted(&server).await;
    Part::ranges(&id, 2, 3, parts[2]).accepted(&server).await;
    Part::return_pads(&id, 1, 2, &pads[at..])
        .accepted(&server)
        .await;
    row.count("part: 200");
    row.count("part: 200");
    row.count("part: 200");
    let mut lost = 0;
    for file in [id.as_str(), second.as_str()] {
        let (_, answer) = server.post("/symbolicate", &sf::probe_request(file)).await;
        let status = answer["modules"][0]["debug_status"].as_str().unwrap_or("?");
        row.count(format!("symbolicate: {status}"));
        if status == "found" {
            sf::assert_probes(&answer);
        } else {
            lost += 1;
        }
    }
    let (_, stack) = server
        .post("/symbolicate", &sf::crash_stack_request(&id))
        .await;
    assert_eq!(sf::chains(&stack), sf::oracle_chains("crash_stack"));
    row.lost = Some(lost);
    let corrupt = corrupt_files(&cache_dir);
    row.corrupt = corrupt.len();
    row.print();
    assert!(corrupt.is_empty(), "{corrupt:?}");
    assert_eq!(lost, 0, "acknowledged uploads were lost");
}
