//! Replicas of one fleet on loopback: a poll is answered by whichever replica it
//! reaches, and a poll for a replica that is gone is a 404, so that Sentry sends the
//! request again.

use crate::common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Server, SymbolServer, assert_elf_symbolicated, elf_request, free_port};
use serde_json::{Value, json};

/// `n` replicas, each listing every replica as a peer.
fn fleet(n: usize) -> Vec<Server> {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let peers: Vec<String> = ports
        .iter()
        .map(|p| format!("\"http://127.0.0.1:{p}\""))
        .collect();
    ports
        .iter()
        .map(|port| {
            Server::start(&format!(
                "bind: 127.0.0.1:{port}\nfleet:\n  advertise_url: http://127.0.0.1:{port}\n  peers: [{}]\n",
                peers.join(", ")
            ))
        })
        .collect()
}

async fn polls(server: &Server, outcome: &str) -> f64 {
    server
        .scrape()
        .await
        .value("requests_polls_total", &[("outcome", outcome)])
}

/// A request to `server` whose source answers after `delay_ms`, answered `pending`.
async fn pending_on(server: &Server, symsrv: &SymbolServer, delay_ms: u64) -> String {
    let sources = json!([{
        "type": "http", "id": "slow",
        "url": format!("{}slow/{delay_ms}/", symsrv.url),
    }]);
    let (status, first) = server
        .post("/symbolicate?timeout=0", &elf_request(sources))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "pending", "{first}");
    first["request_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_is_answered_by_any_replica() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let mut replicas = fleet(3);
    let id = pending_on(&replicas[0], &symsrv, 1500).await;

    // The other replicas hold nothing of it, and send the poll on to its owner.
    let (status, done) = replicas[1].get(&format!("/requests/{id}?timeout=30")).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_elf_symbolicated(&done);
    let (status, again) = replicas[2].get(&format!("/requests/{id}?timeout=0")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, done);
    assert_eq!(polls(&replicas[1], "forwarded").await, 1.0);
    assert_eq!(polls(&replicas[0], "here").await, 2.0);

    // Ids no replica of the fleet minted: never sent anywhere, and unknown.
    let foreign: Value = json!(uuid::Builder::from_custom_bytes([7; 16]).into_uuid());
    for unknown in [
        foreign.as_str().unwrap().to_owned(),
        uuid::Uuid::new_v4().to_string(),
    ] {
        let (status, _) = replicas[1]
            .get(&format!("/requests/{unknown}?timeout=0"))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(polls(&replicas[1], "unknown").await, 2.0);
    assert_eq!(polls(&replicas[1], "forwarded").await, 1.0);

    // Its owner killed mid-request, the request is gone with it: 404, and Sentry sends
    // it again.
    let id = pending_on(&replicas[0], &symsrv, 20_000).await;
    replicas[0].kill();
    let (status, _) = replicas[2].get(&format!("/requests/{id}?timeout=5")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(polls(&replicas[2], "owner_unreachable").await, 1.0);
}

/// Outside a fleet, ids are random UUIDs as upstream's, and name no replica.
#[tokio::test]
async fn outside_a_fleet_ids_are_random() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let server = Server::start("");
    let id = pending_on(&server, &symsrv, 500).await;
    let id: uuid::Uuid = id.parse().unwrap();
    assert_eq!(id.get_version_num(), 4);
}

/// SIGTERM, in order: readiness fails while everything is still served (for
/// `drain_delay`), then the listener closes, then what is in flight finishes and the
/// process exits 0. Each step is waited for as it happens; the only clock read is the
/// listener's lower bound, `drain_delay` after the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_fails_readiness_then_closes_then_finishes_in_flight() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let drain_delay = Duration::from_secs(2);
    let mut server = Server::start("drain_delay: 2s\nshutdown_timeout: 20s\n");
    let status = |path: &'static str| {
        let url = format!("{}{path}", server.url);
        async move { common::client().get(url).send().await.map(|r| r.status()) }
    };
    assert_eq!(status("/ready").await.unwrap(), 200);
    let sources = json!([{
        "type": "http", "id": "slow",
        "url": format!("{}slow/5000/", symsrv.url),
    }]);
    let in_flight = {
        let url = format!("{}/symbolicate", server.url);
        let body = elf_request(sources);
        tokio::spawn(async move {
            let resp = common::client().post(url).json(&body).send().await.unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        })
    };
    poll_until("the request in flight", || async {
        server.scrape().await.value("requests_in_flight", &[]) >= 1.0
    })
    .await;
    let pid = i32::try_from(server.pid()).unwrap();
    let signalled = Instant::now();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);

    // Draining: not ready, still alive, and still serving what a balancer sends late.
    poll_until("readiness failing", || async {
        status("/ready")
            .await
            .expect("still listening while draining")
            == 503
    })
    .await;
    assert_eq!(status("/healthcheck").await.unwrap(), 200);
    let empty = json!({"sources": [], "modules": [], "stacktraces": []});
    let (code, answer) = server.post("/symbolicate", &empty).await;
    assert_eq!(
        (code.as_u16(), &answer["status"]),
        (200, &json!("completed"))
    );

    // Then the listener closes, not before the delay...
    poll_until("the listener closed", || async {
        match status("/healthcheck").await {
            Ok(code) => {
                assert_eq!(code, 200);
                false
            }
            Err(refused) => {
                assert!(refused.is_connect(), "{refused:?}");
                true
            }
        }
    })
    .await;
    assert!(
        signalled.elapsed() >= drain_delay,
        "closed {:?} after the signal, within drain_delay",
        signalled.elapsed()
    );
    // ...while the request that was in progress is still running, and gets its whole
    // answer.
    assert!(
        !in_flight.is_finished(),
        "it ended before the listener closed"
    );
    let (code, answer) = in_flight.await.unwrap();
    assert_eq!(code, 200);
    assert_elf_symbolicated(&answer);
    let exit = server
        .terminate(Duration::from_secs(10))
        .expect("the server exits once its requests are done");
    assert!(exit.success(), "{exit:?}");
}

/// Asks `done` every 50 ms until it holds; fails after 20 s, naming `what`.
async fn poll_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// HAProxy from Debian, with `deploy/compose/haproxy.cfg` as committed, its replicas
/// rewritten to loopback ports.
struct Balancer {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Balancer {
    fn start(replica_ports: &[u16]) -> Balancer {
        let committed = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/compose/haproxy.cfg"),
        )
        .unwrap();
        let port = free_port();
        let mut servers = replica_ports.iter();
        let config: String = committed
            .lines()
            .map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["bind", _] => format!("    bind 127.0.0.1:{port}"),
                    ["server", name, _] => {
                        let p = servers.next().expect("as many servers as replicas");
                        format!("    server {name} 127.0.0.1:{p}")
                    }
                    _ => line.to_owned(),
                }
            })
            .map(|line| line + "\n")
            .collect();
        assert!(servers.next().is_none(), "as many replicas as servers");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, config).unwrap();
        let haproxy = ["haproxy", "/usr/sbin/haproxy"]
            .into_iter()
            .find(|bin| std::process::Command::new(bin).arg("-v").output().is_ok())
            .expect("haproxy runs (scripts/test.sh installs Debian's haproxy)");
        let child = std::process::Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Balancer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// Waits until every replica is up in HAProxy's checks: one request to each.
    async fn wait_ready(&self, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut ok = 0;
        while ok < replicas * 2 {
            assert!(
                Instant::now() < deadline,
                "HAProxy never saw the replicas up"
            );
            let status = common::client()
                .get(format!("{}/ready", self.url))
                .send()
                .await
                .map(|r| r.status().as_u16());
            ok = if matches!(status, Ok(200)) { ok + 1 } else { 0 };
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fleet behind HAProxy: replicas on known ports, sharing `shared_yaml`'s cache.
struct Fleet {
    ports: Vec<u16>,
    replicas: Vec<Option<Server>>,
    extra: String,
    balancer: Balancer,
}

impl Fleet {
    async fn start(n: usize, extra: &str) -> Fleet {
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut fleet = Fleet {
            replicas: Vec::new(),
            extra: extra.to_owned(),
            balancer: Balancer::start(&ports),
            ports,
        };
        for i in 0..n {
            let replica = fleet.replica(i);
            fleet.replicas.push(Some(replica));
        }
        fleet.balancer.wait_ready(n).await;
        fleet
    }

    fn replica(&self, i: usize) -> Server {
        let peers: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("\"http://127.0.0.1:{p}\""))
            .collect();
        let port = self.ports[i];
        Server::start(&format!(
            "bind: 127.0.0.1:{port}\nfleet:\n  advertise_url: http://127.0.0.1:{port}\n  peers: [{}]\n{}",
            peers.join(", "),
            self.extra
        ))
    }

    async fn polls(&self, outcome: &str) -> f64 {
        let mut sum = 0.0;
        for replica in self.replicas.iter().flatten() {
            sum += polls(replica, outcome).await;
        }
        sum
    }
}

/// What a Sentry-style client met on its way to an answer.
#[derive(Debug, Default, Clone, Copy)]
struct Flow {
    /// 502 or 503, or no connection: waited and tried again.
    retried: u32,
    /// A poll answered 404: the request sent again, as Sentry does.
    resent: u32,
    polls: u32,
}

/// Symbolicates `body` as Sentry's client does: create with `?timeout=`, poll
/// `/requests/{id}?timeout=0` while pending, send the request again on a poll's 404,
/// wait and retry on 502, 503 or a connection error. Gives up after 60 s.
async fn sentry_style(url: &str, path: &str, body: &Value) -> (Value, Flow) {
    let mut flow = Flow::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let client = common::client();
    'create: loop {
        assert!(Instant::now() < deadline, "no answer within 60 s: {flow:?}");
        let sent = client.post(format!("{url}{path}")).json(body).send().await;
        let mut answer = match sent {
            Ok(r) if r.status() == 200 => r.json::<Value>().await.unwrap(),
            Ok(r) if matches!(r.status().as_u16(), 502 | 503) => {
                flow.retried += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Ok(r) => panic!("create answered {}", r.status()),
            Err(_) => {
                flow.retried += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while answer["status"] == "pending" {
            assert!(Instant::now() < deadline, "no answer within 60 s: {flow:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
            let id = answer["request_id"].as_str().unwrap().to_owned();
            flow.polls += 1;
            match client
                .get(format!("{url}/requests/{id}?timeout=0"))
                .send()
                .await
            {
                Ok(r) if r.status() == 200 => answer = r.json().await.unwrap(),
                Ok(r) if r.status() == 404 => {
                    flow.resent += 1;
                    continue 'create;
                }
                Ok(r) if matches!(r.status().as_u16(), 502 | 503) => flow.retried += 1,
                Ok(r) => panic!("poll answered {}", r.status()),
                Err(_) => flow.retried += 1,
            }
        }
        return (answer, flow);
    }
}

fn slow_elf_request(symsrv: &SymbolServer, delay_ms: u64) -> Value {
    elf_request(json!([{
        "type": "http", "id": "slow",
        "url": format!("{}slow/{delay_ms}/", symsrv.url),
    }]))
}

/// Round robin without affinity: every poll lands on another replica than the one
/// before, and none is a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_round_robin_concurrent_create_and_poll_never_meet_a_404() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let (_s3, shared) = shared_s3().await;
    let fleet = Fleet::start(3, &shared).await;
    let mut flows = Vec::new();
    for n in 0..10 {
        let url = fleet.balancer.url.clone();
        // A scope of its own: each request downloads, and so is pending for a while.
        let body = slow_elf_request(&symsrv, 700);
        flows.push(tokio::spawn(async move {
            sentry_style(
                &url,
                &format!("/symbolicate?timeout=0&scope=flow-{n}"),
                &body,
            )
            .await
        }));
    }
    let mut total = Flow::default();
    for flow in flows {
        let (answer, flow) = flow.await.unwrap();
        assert_elf_symbolicated(&answer);
        total.polls += flow.polls;
        total.resent += flow.resent;
        total.retried += flow.retried;
    }
    println!("10 create-and-poll flows behind HAProxy: {total:?}");
    assert_eq!((total.resent, total.retried), (0, 0), "{total:?}");
    assert!(total.polls >= 10, "{total:?}");
    assert!(fleet.polls("forwarded").await >= 1.0);
    assert_eq!(fleet.polls("unknown").await, 0.0);
    assert_eq!(fleet.polls("owner_unreachable").await, 0.0);
}

/// Replicas restarted one at a time under steady load, as a Deployment rolls: every
/// request a Sentry-style client sends completes. What it meets on the way is what the
/// design allows: HAProxy takes a draining replica out (two failed checks a second
/// apart) before its listener closes (`drain_delay`), and retries a refused connection
/// on another, so a client never waits on a 502, a 503 or a refused connection; a
/// replica that ends takes the results it still holds with it, so a client sends a
/// request again at most once per replica that ended under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_completes_every_request() {
    const CLIENTS: u32 = 4;
    const REPLICAS: usize = 3;
    let symsrv = SymbolServer::with_elf_debug().await;
    let (_s3, shared) = shared_s3().await;
    let config = format!("drain_delay: 3s\nshutdown_timeout: 10s\n{shared}");
    let mut fleet = Fleet::start(REPLICAS, &config).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let url = fleet.balancer.url.clone();
        // Pending for a while, so that restarts meet requests in every state.
        let body = slow_elf_request(&symsrv, 600);
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let (mut started, mut done, mut total) = (0u32, 0u32, Flow::default());
            for n in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                started += 1;
                let path = format!("/symbolicate?timeout=0.2&scope=c{c}-{n}");
                let (answer, flow) = sentry_style(&url, &path, &body).await;
                assert_elf_symbolicated(&answer);
                done += 1;
                total.polls += flow.polls;
                total.resent += flow.resent;
                total.retried += flow.retried;
            }
            (started, done, total)
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..fleet.ports.len() {
        let mut old = fleet.replicas[i].take().unwrap();
        let exit = old
            .terminate(Duration::from_secs(20))
            .expect("a draining replica exits within drain_delay + shutdown_timeout");
        assert!(exit.success(), "{exit:?}");
        fleet.replicas[i] = Some(fleet.replica(i));
        fleet.balancer.wait_ready(fleet.ports.len()).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut done, mut total) = (0, Flow::default());
    for client in clients {
        let (started, d, flow) = client.await.unwrap();
        assert_eq!(d, started, "a request did not complete: {flow:?}");
        assert!(
            flow.resent <= REPLICAS as u32,
            "sent again more often than replicas ended: {flow:?}"
        );
        done += d;
        total.polls += flow.polls;
        total.resent += flow.resent;
        total.retried += flow.retried;
    }
    println!(
        "rolling restart of {REPLICAS} replicas under {CLIENTS} clients: {done} requests \
         completed, {total:?}"
    );
    assert_eq!(total.retried, 0, "{total:?}");
    // The load ran through every restart: each client completed requests all along.
    assert!(done >= 20, "{done}");
}

/// The shared cache of a fleet on loopback S3 (s3s), as `shared_cache` YAML.
async fn shared_s3() -> (common::s3::S3Server, String) {
    use common::s3::{ACCESS_KEY, SECRET_KEY};
    let s3 = common::s3::S3Server::start().await;
    std::fs::create_dir_all(s3.root.path().join("shared")).unwrap();
    let yaml = format!(
        "shared_cache:\n  s3:\n    bucket: shared\n    prefix: fleet\n    region: [us-east-1, \"{}\"]\n    access_key: {ACCESS_KEY}\n    secret_key: {SECRET_KEY}\n",
        s3.url
    );
    (s3, yaml)
}

/// Parts of one upload sent to different replicas complete it, and every replica
/// serves the symbols; a later upload of the other kind reaches them all too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_spread_over_the_replicas_completes_and_is_served_by_each() {
    use common::symbfile::{Part, assert_probes, config, file_id, probe_request, split, symbfile};
    let (s3, shared) = shared_s3().await;
    let fleet = Fleet::start(3, &config(&shared)).await;
    let replicas: Vec<&Server> = fleet.replicas.iter().flatten().collect();
    let id = file_id();
    let ranges = symbfile("ranges.symbfile");
    let parts = split(&ranges, 3);
    // Each part to another replica, the last through the balancer.
    for (part, replica) in [(2u32, replicas[0]), (0, replicas[1])] {
        Part::ranges(&id, part, 3, parts[part as usize])
            .accepted(replica)
            .await;
    }
    let (status, body) = Part::ranges(&id, 1, 3, parts[1])
        .send_to(&fleet.balancer.url)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for replica in &replicas {
        let (_, answer) = replica.post("/symbolicate", &probe_request(&id)).await;
        assert_eq!(answer["modules"][0]["debug_status"], "found", "{answer:#}");
        assert_probes(&answer);
    }
    // The parts are gone from the store once joined; the symbfile stays, with the
    // checksum replicas tell its versions apart by.
    let mut stored: Vec<String> =
        common::files_under(&s3.root.path().join("shared/fleet/symbfiles"))
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
    stored.sort();
    assert_eq!(stored, ["ranges.sha256", "ranges.symbfile"], "{stored:?}");

    // Another executable's symbols, uploaded to one replica after the others looked
    // for them in vain, reach them within the recheck.
    let other = "0123456789abcdef0123456789abcdef";
    for replica in &replicas[..2] {
        let (_, before) = replica.post("/symbolicate", &probe_request(other)).await;
        assert_eq!(
            before["modules"][0]["debug_status"], "missing",
            "{before:#}"
        );
    }
    Part::return_pads(other, 0, 1, &symbfile("returnpads.symbfile"))
        .accepted(replicas[2])
        .await;
    // The recheck is 10 s; the deadline leaves a margin over it.
    let deadline = Instant::now() + Duration::from_secs(20);
    for replica in &replicas[..2] {
        loop {
            let (_, after) = replica.post("/symbolicate", &probe_request(other)).await;
            match after["modules"][0]["debug_status"].as_str() {
                Some("found") => break,
                Some("missing") => {}
                _ => panic!("{after:#}"),
            }
            assert!(
                Instant::now() < deadline,
                "not found within 20 s: {after:#}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A debug file asked for through every replica is fetched from its source once: the
/// first replica puts the original in the shared store, and the others take it from
/// there, here for what only the original holds (sources embedded in its DWARF).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debug_file_asked_for_on_every_replica_is_downloaded_once() {
    let common::EmbeddedProbe {
        path,
        code_id,
        debug_id,
        addr,
        ..
    } = common::embedded_probe();
    let symbols = SymbolServer::start().await;
    let rel = format!("{}/{}.debug", &code_id[..2], &code_id[2..]);
    symbols.put(&rel, &path);
    let base = 0x5555_0000_0000u64;
    let request = json!({
        "sources": [{"type": "http", "id": "symbols", "url": symbols.url, "layout": {"type": "native"}}],
        "modules": [{
            "type": "elf", "code_id": code_id, "debug_id": debug_id,
            "image_addr": format!("{base:#x}"), "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", base + addr),
            "adjust_instruction_addr": false,
        }]}],
    });

    let (s3, shared) = shared_s3().await;
    let fleet = Fleet::start(3, &shared).await;
    let objects = s3.root.path().join("shared/fleet/objects");
    for replica in fleet.replicas.iter().flatten() {
        let (status, body) = replica.post("/symbolicate", &request).await;
        assert_eq!(status, 200, "{body}");
        let frame = &body["stacktraces"][0]["frames"][0];
        assert_eq!(frame["function"], "dispatch", "{body}");
        assert!(frame["context_line"].is_string(), "{frame}");
        // The upload is in the background: the next replica asks once it is there.
        for _ in 0..100 {
            if !common::files_under(&objects).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let downloads = symbols.hits().iter().filter(|h| h.ends_with(&rel)).count();
    println!("the debug file through 3 replicas: {downloads} download(s) from its source");
    assert_eq!(downloads, 1);
}

/// A minidump processed on one replica and then on another: the second downloads
/// nothing from the sources, its unwind and debug caches (and any original it reads)
/// come from the shared store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minidump_on_a_second_replica_downloads_nothing() {
    let v = common::minidump_variant("nofp");
    let code_id = v["code_id"].as_str().unwrap();
    let gdb = format!("{}/{}", &code_id[..2], &code_id[2..]);
    let symbols = SymbolServer::start().await;
    for (rel, kind) in [
        (gdb.clone(), "executable"),
        (format!("{gdb}.debug"), "debug"),
        (format!("{gdb}.src.zip"), "source_bundle"),
    ] {
        symbols.put(&rel, &common::minidump_file(&v, kind));
    }
    let sources = json!([{"type": "http", "id": "symbols", "url": symbols.url, "layout": {"type": "native"}}]);
    let dump = std::fs::read(common::minidump_file(&v, "minidump")).unwrap();
    let (s3, shared) = shared_s3().await;
    let fleet = Fleet::start(3, &shared).await;
    let found = || -> usize {
        symbols
            .hits()
            .iter()
            .filter(|h| h.contains(&gdb[3..]))
            .count()
    };
    let mut answers = Vec::new();
    let mut downloads = Vec::new();
    for replica in fleet.replicas.iter().flatten().take(2) {
        let (content_type, body) = common::minidump_form(&dump, &sources, &json!({}));
        let (status, answer) = replica.post_typed("/minidump", &content_type, body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], "completed", "{answer:#}");
        answers.push(answer);
        downloads.push(found());
        // This replica's uploads are done before the next asks.
        poll_until("the uploads to the shared store", || uploads_done(replica)).await;
    }
    println!("a minidump on 2 replicas: downloads of its files after each: {downloads:?}");
    assert!(
        !common::files_under(&s3.root.path().join("shared/fleet")).is_empty(),
        "nothing in the shared store"
    );
    assert!(downloads[0] >= 1);
    assert_eq!(downloads[1], downloads[0], "the second replica downloaded");
    let crashing = |a: &Value| common::crashing_thread(a)["frames"].clone();
    assert_eq!(crashing(&answers[0]), crashing(&answers[1]));
}

/// Whether every cache item `replica` computed has been put in the shared store (or its
/// upload failed, or was dropped): a computation is counted as it starts, and one that
/// does not fail queues exactly one upload, which ends counted by its outcome.
async fn uploads_done(replica: &Server) -> bool {
    let metrics = replica.scrape().await;
    let sum = |name: &str, labels: &[(&str, &str)]| metrics.sum(name, labels);
    let computed = sum("cache_lookups_total", &[("layer", "computed")])
        - sum("cache_compute_errors_total", &[]);
    let uploads = sum("shared_cache_uploads_total", &[]);
    assert!(uploads <= computed, "{uploads} uploads of {computed} items");
    uploads == computed
}
