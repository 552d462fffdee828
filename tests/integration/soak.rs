//! The mixed soak: every endpoint at once for a long time, with a symbol source that
//! keeps failing in turns, while the server's RSS is sampled. Ignored by `cargo test`;
//! scripts/soak.sh runs it
//! (`cargo test --test integration -- --ignored --nocapture soak::`).
//!
//! Environment: SOAK_SECS (default 1800), SOAK_MAX_ITERATIONS (requests in all,
//! default 1,000,000: the run stops at whichever comes first), SOAK_WORKERS (concurrent
//! clients, default 8), SOAK_CSV (where the RSS samples go, default soak-rss.csv),
//! SOAK_SAMPLE_SECS (default 5), SOAK_ONLY (comma-separated operation names, to run a
//! subset; default all), SOAK_MEMORY_CAPACITY (caches.in_memory.capacity, default
//! 64 MiB), OMNISYM_BIN (the server binary; default this build's).
//!
//! Every answer must be a result, `pending` (then polled to a result) or a refusal the
//! protocol allows; a 5xx, a transport error, a hang past a minute or a wrong frame
//! counts as a failure, and the run fails if there is any. Everything is on loopback.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::fault_proxy::{Fault, FaultProxy};
use common::symbfile as sf;
use common::{
    Server, SymbolServer, assert_elf_symbolicated, client, elf_request, fixture_json, fixtures,
    minidump_file, minidump_form, minidump_variant, object, unified_path,
};
use serde_json::{Value, json};

const OPS: [&str; 10] = [
    "native warm",
    "native cold",
    "minidump",
    "js",
    "jvm",
    "mozilla v5",
    "proxy",
    "symbfile upload",
    "symbfile symbolicate",
    "native via faulty source",
];
/// Any one exchange, polls included.
const HANG: Duration = Duration::from_secs(60);
/// Symbfile FileIDs the uploads cycle through (re-uploads replace the symbols).
const UPLOAD_IDS: u64 = 64;
const JVM_UUID: &str = "6f1c2a9e-4b7d-4c1e-8a3f-2d5e7b9c0a41";

/// The FileID that round `round` of the operations uploads.
fn upload_id(round: u64) -> String {
    format!("{:032x}", 0x50a6_0000_u64 + round % UPLOAD_IDS)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The fixtures every operation needs, on one symbol server.
struct Fixtures {
    minidump: Vec<u8>,
    minidump_function: String,
    js_debug_id: String,
    pdb_path: String,
    pdb_len: usize,
    mozilla: (String, String, u64, String),
}

fn place_fixtures(symsrv: &SymbolServer) -> Fixtures {
    symsrv.put_elf_debug();
    // Minidump: the nofp build in the native layout.
    let v = minidump_variant("nofp");
    let code_id = v["code_id"].as_str().unwrap();
    let gdb = format!("{}/{}", &code_id[..2], &code_id[2..]);
    for (kind, suffix) in [
        ("executable", ""),
        ("debug", ".debug"),
        ("source_bundle", ".src.zip"),
    ] {
        symsrv.put(&format!("{gdb}{suffix}"), &minidump_file(&v, kind));
    }
    let minidump = std::fs::read(minidump_file(&v, "minidump")).unwrap();
    // JS: the minified file and its map by debug id.
    let minified = std::fs::read_to_string(fixtures().join("js/dist/debugid.min.js")).unwrap();
    let js_debug_id = minified
        .lines()
        .find_map(|l| l.strip_prefix("//# debugId="))
        .unwrap()
        .trim()
        .to_owned();
    symsrv.put(
        &unified_path(&js_debug_id, "minified_source"),
        &fixtures().join("js/dist/debugid.min.js"),
    );
    symsrv.put(
        &unified_path(&js_debug_id, "source_map"),
        &fixtures().join("js/dist/debugid.min.js.map"),
    );
    // JVM: a ProGuard mapping.
    symsrv.put(
        &unified_path(JVM_UUID, "proguard"),
        &fixtures().join("jvm/inline.txt"),
    );
    // Mozilla: a Breakpad file.
    let m = fixture_json("mozilla/manifest.json");
    let (file, id) = (
        m["debug_file"].as_str().unwrap().to_owned(),
        m["breakpad_id"].as_str().unwrap().to_owned(),
    );
    symsrv.put(
        &format!("{file}/{id}/{file}.sym"),
        &fixtures().join("mozilla/libinline.so.sym"),
    );
    let instruction = &m["instructions"][0];
    let outer = instruction["frames"].as_array().unwrap().last().unwrap()["function"]
        .as_str()
        .unwrap()
        .to_owned();
    // Proxy: a PDB in the symstore layout.
    let pdb_key = object("pe")["breakpad_id"].as_str().unwrap().to_owned();
    let pdb_path = format!("crash.pdb/{pdb_key}/crash.pdb");
    let pdb = fixtures().join("native/pe/crash.pdb");
    symsrv.put(&pdb_path, &pdb);
    Fixtures {
        minidump,
        minidump_function: v["frames"][0]["function"].as_str().unwrap().to_owned(),
        js_debug_id,
        pdb_len: std::fs::metadata(&pdb).unwrap().len() as usize,
        pdb_path,
        mozilla: (file, id, instruction["offset"].as_u64().unwrap(), outer),
    }
}

struct Soak {
    server: Server,
    symsrv_url: String,
    proxy_url: String,
    fixtures: Fixtures,
    /// Symbfile FileIDs whose upload has been acknowledged (every part answered 200):
    /// from then on a lookup of them must find symbols, whatever else is uploading.
    acknowledged: Mutex<std::collections::HashSet<String>>,
}

/// What one operation came to: the kind of answer, or why it is a failure.
type Outcome = Result<String, String>;

fn expect(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    text.chars().take(400).collect()
}

impl Soak {
    fn sources(&self, url: &str, layout: &str) -> Value {
        json!([{"id": "soak", "type": "http", "url": url, "layout": {"type": layout}}])
    }

    async fn run(&self, op: usize, n: u64) -> Outcome {
        let exchange = self.op(op, n);
        tokio::time::timeout(HANG, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {HANG:?}")))
    }

    async fn op(&self, op: usize, n: u64) -> Outcome {
        match OPS[op] {
            "native warm" => {
                let request = elf_request(self.sources(&self.symsrv_url, "native"));
                self.native("/symbolicate", &request, &["found"]).await
            }
            "native cold" => {
                // A scope of its own: downloaded and converted anew.
                let request = elf_request(self.sources(&self.symsrv_url, "native"));
                self.native(&format!("/symbolicate?scope=cold{n}"), &request, &["found"])
                    .await
            }
            "native via faulty source" => {
                let request = elf_request(self.sources(&self.proxy_url, "native"));
                let path = format!("/symbolicate?scope=fault{n}&timeout=2");
                self.native(&path, &request, &["found", "timeout", "fetching_failed"])
                    .await
            }
            "minidump" => {
                let sources = self.sources(&self.symsrv_url, "native");
                let (content_type, body) =
                    minidump_form(&self.fixtures.minidump, &sources, &json!({}));
                let (status, answer) = self
                    .server
                    .post_typed("/minidump", &content_type, body)
                    .await;
                let answer = self.polled(status, answer).await?;
                let thread = answer["stacktraces"]
                    .as_array()
                    .and_then(|t| t.iter().find(|t| t["is_requesting"] == true))
                    .cloned()
                    .unwrap_or_default();
                expect(
                    thread["frames"][0]["function"] == self.fixtures.minidump_function.as_str(),
                    || format!("minidump: wrong crashing frame: {}", short(&answer)),
                )?;
                Ok("completed".to_owned())
            }
            "js" => {
                let manifest = fixture_json("js/manifest.json");
                let url = "https://app.example/assets/debugid.min.js";
                let frames: Vec<Value> = manifest["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| {
                        let m = &f["minified"];
                        json!({"abs_path": url, "lineno": m["line"], "colno": m["column"],
                               "function": m["function"]})
                    })
                    .collect();
                let body = json!({
                    "sources": self.sources(&self.symsrv_url, "unified"),
                    "stacktraces": [{"frames": frames}],
                    "modules": [{"type": "sourcemap", "code_file": url,
                                 "debug_id": self.fixtures.js_debug_id}],
                    "options": {"apply_source_context": true},
                });
                let (status, answer) = self.server.post("/symbolicate-js", &body).await;
                let answer = self.polled(status, answer).await?;
                let frames = answer["stacktraces"][0]["frames"].as_array();
                let all = frames.is_some_and(|f| {
                    !f.is_empty() && f.iter().all(|f| f["data"]["symbolicated"] == true)
                });
                expect(all, || format!("js: unresolved frames: {}", short(&answer)))?;
                Ok("completed".to_owned())
            }
            "jvm" => {
                let body = json!({
                    "platform": "java",
                    "sources": self.sources(&self.symsrv_url, "unified"),
                    "modules": [{"type": "proguard", "uuid": JVM_UUID}],
                    "stacktraces": [{"frames": [
                        {"module": "a.a", "function": "onCreate", "lineno": 2, "index": 0}]}],
                });
                let (status, answer) = self.server.post("/symbolicate-jvm", &body).await;
                let answer = self.polled(status, answer).await?;
                let module = &answer["stacktraces"][0]["frames"][0]["module"];
                expect(module == "org.birdwatch.app.SightingActivity", || {
                    format!("jvm: not remapped: {}", short(&answer))
                })?;
                Ok("completed".to_owned())
            }
            "mozilla v5" => {
                let (file, id, offset, function) = &self.fixtures.mozilla;
                let body = json!({"memoryMap": [[file, id]], "stacks": [[[0, offset]]]});
                let (status, answer) = self.server.post("/symbolicate/v5", &body).await;
                expect(status == StatusCode::OK, || {
                    format!("mozilla: {status}: {}", short(&answer))
                })?;
                let frame = &answer["results"][0]["stacks"][0][0];
                expect(frame["function"] == function.as_str(), || {
                    format!("mozilla: wrong frame: {}", short(&answer))
                })?;
                Ok("200".to_owned())
            }
            "proxy" => {
                let url = format!("{}/proxy/{}", self.server.url, self.fixtures.pdb_path);
                let response = client().get(url).send().await.map_err(|e| e.to_string())?;
                let status = response.status();
                let body = response.bytes().await.map_err(|e| e.to_string())?;
                expect(status == 200 && body.len() == self.fixtures.pdb_len, || {
                    format!("proxy: {status}, {} bytes", body.len())
                })?;
                Ok("200".to_owned())
            }
            "symbfile upload" => {
                let id = upload_id(n / OPS.len() as u64);
                let ranges = sf::symbfile("ranges.symbfile");
                let parts = sf::split(&ranges, 3);
                for part in 0..3u32 {
                    let (status, body) = sf::Part::ranges(&id, part, 3, parts[part as usize])
                        .send(&self.server)
                        .await;
                    // Too many unfinished uploads at once is the protocol's back-off.
                    if status == StatusCode::TOO_MANY_REQUESTS {
                        return Ok("429".to_owned());
                    }
                    expect(status == StatusCode::OK, || {
                        format!("symbfile upload: {status}: {body}")
                    })?;
                }
                self.acknowledged.lock().unwrap().insert(id);
                Ok("200".to_owned())
            }
            "symbfile symbolicate" => {
                // The previous round's upload: done by now, unless it is still running.
                let id = upload_id((n / OPS.len() as u64).saturating_sub(1));
                let acknowledged = self.acknowledged.lock().unwrap().contains(&id);
                let (status, answer) = self
                    .server
                    .post("/symbolicate", &sf::probe_request(&id))
                    .await;
                let answer = self.polled(status, answer).await?;
                let debug_status = answer["modules"][0]["debug_status"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned();
                if debug_status == "found" {
                    let chains = std::panic::catch_unwind(|| sf::chains(&answer));
                    expect(
                        chains.is_ok_and(|c| c == sf::oracle_chains("probes")),
                        || format!("symbfile: wrong frames: {}", short(&answer)),
                    )?;
                }
                // Not uploaded yet (the upload is still running on another worker, or
                // was refused with 429) is `missing`; once acknowledged, `missing` means
                // an upload was lost, and anything else is a failure too.
                expect(
                    debug_status == "found" || (debug_status == "missing" && !acknowledged),
                    || {
                        format!(
                            "symbfile {id} (acknowledged: {acknowledged}): {}",
                            short(&answer)
                        )
                    },
                )?;
                let when = if acknowledged {
                    ""
                } else {
                    " before its upload"
                };
                Ok(format!("completed/{debug_status}{when}"))
            }
            other => unreachable!("{other}"),
        }
    }

    async fn native(&self, path: &str, request: &Value, allowed: &[&str]) -> Outcome {
        let (status, answer) = self.server.post(path, request).await;
        let answer = self.polled(status, answer).await?;
        let debug_status = answer["modules"][0]["debug_status"].as_str().unwrap_or("?");
        expect(allowed.contains(&debug_status), || {
            format!("{path}: {debug_status}: {}", short(&answer))
        })?;
        if debug_status == "found" {
            std::panic::catch_unwind(|| assert_elf_symbolicated(&answer))
                .map_err(|_| format!("{path}: wrong frame: {}", short(&answer)))?;
        }
        Ok(format!("completed/{debug_status}"))
    }

    /// The completed answer, polling while it is pending; any other status is a failure.
    async fn polled(&self, status: StatusCode, mut answer: Value) -> Result<Value, String> {
        expect(status == StatusCode::OK, || {
            format!("{status}: {}", short(&answer))
        })?;
        while answer["status"] == "pending" {
            let id = answer["request_id"].as_str().unwrap_or_default().to_owned();
            let (status, polled) = self.server.get(&format!("/requests/{id}?timeout=5")).await;
            expect(status == StatusCode::OK, || {
                format!("poll: {status}: {}", short(&polled))
            })?;
            answer = polled;
        }
        expect(answer["status"] == "completed", || {
            format!("not completed: {}", short(&answer))
        })?;
        Ok(answer)
    }
}

fn rss_kb(pid: u32) -> Option<u64> {
    common::proc_status_kib(pid, "VmRSS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs for SOAK_SECS (30 minutes by default); scripts/soak.sh runs it"]
async fn mixed_soak() {
    let duration = Duration::from_secs(env_or("SOAK_SECS", 1800));
    let max_iterations: u64 = env_or("SOAK_MAX_ITERATIONS", 1_000_000);
    let workers: usize = env_or("SOAK_WORKERS", 8);
    let sample_every = Duration::from_secs(env_or("SOAK_SAMPLE_SECS", 5));
    let csv_path: String = env_or("SOAK_CSV", "soak-rss.csv".to_owned());
    let only: String = env_or("SOAK_ONLY", String::new());
    let ops: Vec<usize> = (0..OPS.len())
        .filter(|&op| only.is_empty() || only.split(',').any(|name| name.trim() == OPS[op]))
        .collect();
    assert!(!ops.is_empty(), "SOAK_ONLY names no operation of {OPS:?}");

    let symsrv = SymbolServer::start().await;
    let fixtures = place_fixtures(&symsrv);
    // On a loopback address of its own: the deny list blocks hosts, and the faulty
    // source must not get the healthy one blocked.
    let proxy = FaultProxy::start_on("127.0.0.2", &symsrv.url).await;
    // Caches small enough that their bounds are reached within the run, and cleanup
    // running every minute alongside the requests.
    let config = format!(
        "\
max_download_timeout: 3s
deny_list_block_time: 20s
connect_timeout: 1s
head_timeout: 2s
logging:
  level: warn
caches:
  cleanup_interval: 1m
  max_disk_size: 100MB
  in_memory:
    capacity: {capacity}
  downloaded:
    retry_errors_after: 1s
  derived:
    retry_errors_after: 1s
symbfile:
  api_keys: [\"{}\"]
sources:
  - {{id: native, type: http, url: \"{url}\", layout: {{type: native}}}}
  - {{id: symstore, type: http, url: \"{url}\", layout: {{type: symstore}}}}
",
        sf::KEY,
        url = symsrv.url,
        capacity = env_or::<u64>("SOAK_MEMORY_CAPACITY", 64 << 20),
    );
    let server = Server::start_with_env(&config, &[("RUST_LOG", "warn")]);
    let pid = server.pid();
    let soak = Arc::new(Soak {
        server,
        symsrv_url: symsrv.url.clone(),
        proxy_url: proxy.url.clone(),
        fixtures,
        acknowledged: Mutex::default(),
    });
    println!(
        "soak: {duration:?} or {max_iterations} requests, {workers} workers, server pid {pid}, RSS samples in {csv_path}"
    );

    let start = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));

    let sampler = tokio::spawn({
        let done = done.clone();
        let mut csv = std::fs::File::create(&csv_path).unwrap();
        async move {
            // Anonymous memory is the heap; file pages are the memory-mapped cache
            // files, which the in-memory cache's capacity bounds.
            writeln!(csv, "seconds,rss_kb,rss_anon_kb,rss_file_kb").unwrap();
            let mut samples = Vec::new();
            loop {
                if let Some(kb) = rss_kb(pid) {
                    let secs = start.elapsed().as_secs();
                    let anon = common::proc_status_kib(pid, "RssAnon").unwrap_or(0);
                    let file = common::proc_status_kib(pid, "RssFile").unwrap_or(0);
                    writeln!(csv, "{secs},{kb},{anon},{file}").unwrap();
                    csv.flush().unwrap();
                    samples.push((secs, kb));
                }
                if done.load(Ordering::Relaxed) {
                    return samples;
                }
                tokio::time::sleep(sample_every).await;
            }
        }
    });

    // The faulty source cycles through its faults, ten seconds each.
    let faults = tokio::spawn({
        let done = done.clone();
        async move {
            let cycle = [
                Fault::None,
                Fault::Stall,
                Fault::None,
                Fault::Reset,
                Fault::None,
                Fault::Trickle {
                    chunk: 256,
                    every: Duration::from_millis(20),
                },
            ];
            for fault in cycle.iter().cycle() {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                proxy.set(*fault);
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    });

    type Tally = BTreeMap<(usize, String), u64>;
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let failed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (soak, done, next, ops) = (soak.clone(), done.clone(), next.clone(), ops.clone());
            let (tally, failures, failed) = (tally.clone(), failures.clone(), failed.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= max_iterations || start.elapsed() >= duration {
                        done.store(true, Ordering::Relaxed);
                        return;
                    }
                    let op = ops[(n % ops.len() as u64) as usize];
                    let kind = match soak.run(op, n).await {
                        Ok(kind) => kind,
                        Err(why) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let mut failures = failures.lock().unwrap();
                            if failures.len() < 20 {
                                failures.push(format!("{}: {why}", OPS[op]));
                            }
                            "FAILED".to_owned()
                        }
                    };
                    *tally.lock().unwrap().entry((op, kind)).or_default() += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    faults.abort();
    let samples = sampler.await.unwrap();
    let took = start.elapsed();

    let total: u64 = tally.lock().unwrap().values().sum();
    println!(
        "soak: {total} requests in {took:.0?} ({:.1}/s)",
        total as f64 / took.as_secs_f64()
    );
    println!("SOAK-ROW | operation | answers by kind |");
    for (op, name) in OPS.iter().enumerate() {
        let kinds: Vec<String> = tally
            .lock()
            .unwrap()
            .iter()
            .filter(|((o, _), _)| *o == op)
            .map(|((_, kind), n)| format!("{kind} {n}"))
            .collect();
        println!("SOAK-ROW | {name} | {} |", kinds.join(", "));
    }
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let peak = samples.iter().max_by_key(|(_, kb)| *kb).unwrap();
        println!(
            "SOAK-RSS start {:.1} MiB, peak {:.1} MiB at {} s, end {:.1} MiB ({} samples)",
            first.1 as f64 / 1024.0,
            peak.1 as f64 / 1024.0,
            peak.0,
            last.1 as f64 / 1024.0,
            samples.len()
        );
    }
    let failures = failures.lock().unwrap();
    for failure in failures.iter() {
        println!("  failure: {failure}");
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests failed");
    assert!(
        rss_kb(pid).is_some(),
        "the server is gone:\n{}",
        soak.server.log()
    );
}
