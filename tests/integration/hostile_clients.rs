//! Clients that hold the server's resources without finishing their requests: half-sent
//! headers and bodies, idle connections past `max_connections`, uploads sent while every
//! request slot is taken, and polls that would wait for as long as their request runs.
//! Each runs against the real server binary on loopback.

use crate::common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Server, SymbolServer, elf_request};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(server: &Server) -> String {
    server.url.trim_start_matches("http://").to_owned()
}

/// Sockets the server process holds (its listener included).
fn server_sockets(server: &Server) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Opens a connection and sends `data`, then nothing more.
async fn half_open(addr: &str, data: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(data).await.unwrap();
    stream
}

/// Reads until the server closes the connection; returns what it sent and when it
/// closed, or `None` if it is still open after `limit`.
async fn closed_within(mut stream: TcpStream, limit: Duration) -> Option<(Vec<u8>, Instant)> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return (seen, Instant::now()),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .ok()
}

/// Sends `request` (a `GET /healthcheck`) on a kept-alive connection and reads its answer.
async fn ask_healthcheck(stream: &mut TcpStream, request: &str) {
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"ok") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"));
}

/// A slow symbol source: every file it is asked for is missing, after `ms`.
fn slow_sources(symbols: &SymbolServer, ms: u64) -> Value {
    json!([{"type": "http", "id": "slow", "url": format!("{}slow/{ms}/", symbols.url),
            "layout": {"type": "native"}}])
}

/// The header deadline holds for every request of a kept-alive connection, not only the
/// first: each connection here is served a few complete requests (whose deadlines the
/// server's timer reuses), then trickles the next head a byte at a time and must still
/// be cut off after `header_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_connections_that_trickle_a_later_head_are_closed_in_time() {
    let server = Server::start("header_read_timeout: 2s\n");
    let addr = addr(&server);
    let request = format!("GET /healthcheck HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let mut trickling = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        for _ in 0..3 {
            ask_healthcheck(&mut stream, &request).await;
        }
        trickling.push(tokio::spawn(async move {
            let started = Instant::now();
            // A byte every 300 ms: progress, but a head that never ends.
            for byte in b"GET /healthcheck HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                if started.elapsed() > Duration::from_secs(15) {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Some(started.elapsed())
        }));
    }
    for trickle in trickling {
        let cut = trickle
            .await
            .unwrap()
            .expect("a trickled head was not cut off within 15 s");
        assert!(cut >= Duration::from_millis(1500), "{cut:?}");
        assert!(cut <= Duration::from_secs(6), "{cut:?}");
    }
    let (status, _) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK);
}

/// A kept-alive connection that goes quiet after its answers is closed
/// `header_read_timeout` after the last one (within the quarter the checks allow), and
/// not before: the deadline counts from when hyper took the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_connections_that_go_quiet_are_closed_after_the_header_timeout() {
    let server = Server::start("header_read_timeout: 2s\n");
    let addr = addr(&server);
    let request = format!("GET /healthcheck HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    for _ in 0..3 {
        ask_healthcheck(&mut stream, &request).await;
        // Quiet for most of the timeout between requests: each answer starts it again.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let answered = Instant::now() - Duration::from_millis(1500);
    let (rest, closed) = closed_within(stream, Duration::from_secs(10))
        .await
        .expect("a quiet connection was not closed within 10 s");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let quiet = closed - answered;
    assert!(quiet >= Duration::from_millis(1900), "{quiet:?}");
    assert!(quiet <= Duration::from_millis(3500), "{quiet:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_are_closed_after_their_timeouts_while_others_are_served() {
    let server = Server::start("header_read_timeout: 2s\nbody_read_timeout: 3s\n");
    let addr = addr(&server);
    let baseline = server_sockets(&server);
    let host = format!("Host: {addr}\r\n");
    let partial_headers = format!("POST /symbolicate HTTP/1.1\r\n{host}Content-Ty");
    let partial_json = format!(
        "POST /symbolicate HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{\"modules\": ["
    );
    let partial_upload = format!(
        "POST /minidump HTTP/1.1\r\n{host}Content-Type: multipart/form-data; boundary=XX\r\n\
         Content-Length: 100000\r\n\r\n--XX\r\nContent-Disposition: form-data; \
         name=\"upload_file_minidump\"; filename=\"a.dmp\"\r\n\r\nMDMP"
    );
    let started = Instant::now();
    let mut connections = Vec::new();
    for (kind, data, count) in [
        ("silent", "", 50),
        ("headers", partial_headers.as_str(), 150),
        ("json body", partial_json.as_str(), 130),
        ("upload body", partial_upload.as_str(), 20),
    ] {
        for _ in 0..count {
            connections.push((kind, half_open(&addr, data.as_bytes()).await));
        }
    }
    // Served meanwhile, on connections of their own.
    let (status, body) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server
        .post(
            "/symbolicate",
            &json!({"sources": [], "modules": [], "stacktraces": []}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    let deadline = Instant::now() + Duration::from_secs(1);
    while server_sockets(&server) < baseline + 350 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = server_sockets(&server) - baseline;
    assert!(held >= 350, "the server holds only {held} connections");

    let waits: Vec<_> = connections
        .into_iter()
        .map(|(kind, stream)| {
            tokio::spawn(
                async move { (kind, closed_within(stream, Duration::from_secs(20)).await) },
            )
        })
        .collect();
    for wait in waits {
        let (kind, closed) = wait.await.unwrap();
        let Some((answer, at)) = closed else {
            panic!("a half-open connection ({kind}) is still open after 20 s");
        };
        let after = at - started;
        let answer = String::from_utf8_lossy(&answer);
        match kind {
            "silent" | "headers" => {
                assert!(after >= Duration::from_millis(1500), "{kind}: {after:?}")
            }
            _ => {
                assert!(after >= Duration::from_millis(2500), "{kind}: {after:?}");
                assert!(answer.starts_with("HTTP/1.1 408"), "{kind}: {answer}");
                assert!(answer.contains("body_read_timeout"), "{kind}: {answer}");
            }
        }
    }
    // The server let go of them, and still serves.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server_sockets(&server) > baseline && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = server_sockets(&server);
    assert!(left <= baseline, "{left} sockets, {baseline} before");
    let (status, _) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_serve_healthchecks_then_wait_until_one_closes() {
    // How long the idle connections are held: the steps below must fit inside it on a
    // loaded machine, so they wait for the server's socket count rather than sleep.
    const HOLD: Duration = Duration::from_secs(6);
    let server = Server::start(&format!(
        "max_connections: 20\nhealth_connections: 2\nheader_read_timeout: {}s\n",
        HOLD.as_secs()
    ));
    let addr = addr(&server);
    let baseline = server_sockets(&server);
    let mut idle = Vec::new();
    let opened = Instant::now();
    for _ in 0..20 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    sockets_reach(&server, baseline + 20).await;
    // Every regular connection is held: a health probe is still answered at once, and
    // any other request on such a connection is refused rather than queued.
    healthcheck_within(&server, Duration::from_millis(1000)).await;
    let (status, body) = server
        .post("/symbolicate", &json!({"stacktraces": [], "modules": []}))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("max_connections"),
        "{body}"
    );
    // With the health connections held too, the next one waits in the backlog.
    for _ in 0..2 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    sockets_reach(&server, baseline + 22).await;
    let url = format!("{}/healthcheck", server.url);
    let check = tokio::spawn(async move { common::client().get(url).send().await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let held = server_sockets(&server) - baseline;
    assert_eq!(held, 22, "the server holds {held} connections");
    assert!(
        opened.elapsed() < HOLD,
        "the machine is too slow for this test: the idle connections were let go already"
    );
    assert!(
        !check.is_finished(),
        "answered while 22 connections were open"
    );
    let answer = check.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    // Answered once the first idle connections were closed, HOLD after they opened.
    let waited = opened.elapsed();
    assert!(waited >= HOLD - Duration::from_millis(100), "{waited:?}");
    drop(idle);
}

/// Waits until the server holds `count` sockets (accepting takes a moment, longer on a
/// loaded machine).
async fn sockets_reach(server: &Server, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server_sockets(server) < count {
        assert!(
            Instant::now() < deadline,
            "the server holds {} sockets, not {count}",
            server_sockets(server)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that `/healthcheck` answers 200 within `limit`.
async fn healthcheck_within(server: &Server, limit: Duration) {
    let started = Instant::now();
    let (status, _) = tokio::time::timeout(Duration::from_secs(5), server.get("/healthcheck"))
        .await
        .expect("/healthcheck is answered while every connection is held");
    assert_eq!(status, 200);
    let took = started.elapsed();
    assert!(took < limit, "{took:?}");
}

/// A `/symbolicate` request whose answer is far larger than the socket buffers: every
/// frame is in no module, and each is answered on its own.
fn large_answer_request() -> Vec<u8> {
    let frames: Vec<Value> = (0..100_000u64)
        .map(|i| json!({"instruction_addr": format!("{:#x}", 0x1000 + i)}))
        .collect();
    serde_json::to_vec(&json!({"sources": [], "modules": [], "stacktraces": [{"frames": frames}]}))
        .unwrap()
}

/// Sends `body` to `/symbolicate` and then reads nothing, from a socket whose receive
/// buffer is tiny, so the server's writes soon wait on this client.
async fn slow_reader(addr: &str, body: &[u8]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let head = format!(
        "POST /symbolicate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_lose_their_connections_after_write_timeout() {
    let server = Server::start("max_connections: 4\nwrite_timeout: 6s\n");
    let addr = addr(&server);
    let body = large_answer_request();
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(slow_reader(&addr, &body).await);
    }
    // The four answers are computed and stuck in their sockets.
    tokio::time::sleep(Duration::from_secs(2)).await;
    healthcheck_within(&server, Duration::from_secs(2)).await;
    // Meanwhile other requests are refused with `Retry-After`; once the stalled
    // connections are dropped, a client that retries is served.
    let served = async {
        loop {
            let request = json!({"sources": [], "modules": [], "stacktraces": []});
            match server.post("/symbolicate", &request).await {
                (StatusCode::SERVICE_UNAVAILABLE, _) => {
                    tokio::time::sleep(Duration::from_millis(500)).await
                }
                (status, body) => return (status, body),
            }
        }
    };
    let (status, body) = tokio::time::timeout(Duration::from_secs(15), served)
        .await
        .expect("a regular request is served once the stalled connections are dropped");
    assert_eq!(status, 200, "{body}");
    // All four were dropped, none left holding its slot. Until they are, a scrape can
    // find every slot taken (the served request's own connection is let go a moment
    // after its answer) and be refused like any other request.
    let mut dropped = 0.0;
    for _ in 0..20 {
        if let Some(metrics) = server.try_scrape().await {
            dropped = metrics.value("connections_write_timeouts_total", &[]);
            if dropped >= 4.0 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(dropped, 4.0);
    drop(readers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drops_stalled_connections_after_shutdown_timeout_and_exits_0() {
    let mut server = Server::start("write_timeout: 10m\nshutdown_timeout: 2s\n");
    let addr = addr(&server);
    let reader = slow_reader(&addr, &large_answer_request()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let started = Instant::now();
    let status = server
        .terminate(Duration::from_secs(15))
        .expect("the server exits within 15 s of SIGTERM");
    assert!(status.success(), "{status:?}\n{}", server.log());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(
        server.log().contains("shutdown_timeout"),
        "{}",
        server.log()
    );
    drop(reader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_cap_are_refused_before_their_bodies_are_read() {
    let symbols = SymbolServer::start().await;
    let server = std::sync::Arc::new(Server::start("max_concurrent_requests: 1\n"));
    let busy = {
        let server = server.clone();
        let body = elf_request(slow_sources(&symbols, 6000));
        tokio::spawn(async move { server.post("/symbolicate", &body).await })
    };
    // The slot is taken once a second request is refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = server.post("/symbolicate", &json!({"sources": []})).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slow request never took the slot"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let addr = addr(&server);
    let upload_head = format!(
        "POST /minidump HTTP/1.1\r\nHost: {addr}\r\n\
         Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 104857600\r\n\r\n\
         --XX\r\nContent-Disposition: form-data; name=\"upload_file_minidump\"; \
         filename=\"a.dmp\"\r\n\r\nMDMP"
    );
    let json_head = format!(
        "POST /symbolicate HTTP/1.1\r\nHost: {addr}\r\n\
         Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n{{\"modules\": ["
    );
    for head in [upload_head, json_head] {
        let mut stream = half_open(&addr, head.as_bytes()).await;
        // 64 KiB of the 100 MiB (or 50 MiB) announced; the rest never comes.
        stream.write_all(&vec![b' '; 64 * 1024]).await.unwrap();
        let (answer, _) = closed_within(stream, Duration::from_secs(5))
            .await
            .expect("no answer while the body was still owed");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("concurrent requests"), "{answer}");
    }
    // Nothing of the refused upload reached the disk.
    let spooled: Vec<_> = std::fs::read_dir(server.cache_dir.join("tmp"))
        .map(|dir| dir.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        spooled
            .iter()
            .all(|name| !name.to_string_lossy().starts_with(".upload")),
        "{spooled:?}"
    );
    let (status, done) = busy.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_waits_at_most_max_poll_timeout() {
    let symbols = SymbolServer::start().await;
    let server = Server::start("max_poll_timeout: 1s\n");
    let body = elf_request(slow_sources(&symbols, 5000));
    let (status, first) = server.post("/symbolicate?timeout=0", &body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["status"], "pending", "{first}");
    let id = first["request_id"].as_str().unwrap();
    // Without a timeout, and with one longer than the maximum: both cut to 1 s.
    for query in ["", "?timeout=30"] {
        let started = Instant::now();
        let (status, poll) = server.get(&format!("/requests/{id}{query}")).await;
        let waited = started.elapsed();
        assert_eq!(status, StatusCode::OK, "{poll}");
        assert_eq!(poll["status"], "pending", "{query}: {poll}");
        assert_eq!(poll["request_id"], id, "{poll}");
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
            "{query}: {waited:?}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, poll) = server.get(&format!("/requests/{id}")).await;
        if poll["status"] == "completed" {
            assert_eq!(poll["modules"][0]["debug_status"], "missing", "{poll}");
            break;
        }
        assert_eq!(poll["status"], "pending", "{poll}");
        assert!(Instant::now() < deadline, "never completed");
    }
}

/// DNS rebinding: a page at `http://rebind.attacker.example:<port>` whose name its owner
/// then points at 127.0.0.1 reaches the server as its own origin, so its browser would
/// let it read the console's list of downloads and then the debug files from `/proxy`.
/// Every route of a loopback server answers such a request 421 before doing anything,
/// while `localhost`, addresses, the names in `allowed_hosts`, and `omnisym healthcheck`
/// (which asks the `bind` address) are answered.
#[tokio::test]
async fn a_rebound_host_is_refused_on_every_route_of_a_loopback_server() {
    let symsrv = SymbolServer::start().await;
    let pdb_id = common::object("pe")["breakpad_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pdb_path = format!("crash.pdb/{pdb_id}/crash.pdb");
    symsrv.put(&pdb_path, &common::fixtures().join("native/pe/crash.pdb"));
    let port = common::free_port();
    let settings = format!("bind: 127.0.0.1:{port}\nallowed_hosts: [symbols.example.com]\n");
    let server = Server::start(&format!(
        "{settings}sources:\n  - {{id: symsrv, type: http, url: \"{}\", layout: {{type: symstore}}}}\n",
        symsrv.url
    ));
    let send = |method: reqwest::Method, host: &str, path: &str| {
        common::client()
            .request(method, format!("{}{path}", server.url))
            .header("Host", host)
            .header("Content-Type", "text/plain")
            .body(r#"{"memoryMap": [], "stacks": [[]]}"#)
            .send()
    };
    let proxy = format!("/proxy/{pdb_path}");
    let rebound = format!("rebind.attacker.example:{port}");
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    for (method, path) in [
        (&get, "/console/api/downloads"),
        (&get, "/console"),
        (&get, &*proxy),
        (&post, "/symbolicate/v5"),
        (&post, "/symbolicate"),
        (&get, "/metrics"),
        (&get, "/healthcheck"),
        (&get, "/no/such/route"),
    ] {
        for host in [&*rebound, "REBIND.attacker.example", "127.0.0.1.nip.io"] {
            let resp = send(method.clone(), host, path).await.unwrap();
            assert_eq!(
                resp.status(),
                StatusCode::MISDIRECTED_REQUEST,
                "{method} {path} as {host}"
            );
            assert!(resp.headers().contains_key("x-request-id"));
            let body: Value = resp.json().await.unwrap();
            assert!(
                body["error"].as_str().unwrap().contains("allowed_hosts"),
                "{body}"
            );
        }
    }
    assert!(symsrv.hits().is_empty(), "{:?}", symsrv.hits());
    let log = server.log();
    assert!(
        log.lines().any(|line| line.contains("request refused")
            && line.contains(&format!("refused_host=\"{rebound}\""))
            && line.contains("status=421")),
        "{log}"
    );

    // The hosts the server answers for: a listed name (as a reverse proxy forwards it),
    // `localhost` and addresses, in any case and with any port.
    let pdb = std::fs::read(common::fixtures().join("native/pe/crash.pdb")).unwrap();
    for host in [
        format!("symbols.example.com:{port}"),
        "Symbols.Example.COM".to_owned(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("127.0.0.2:{port}"),
        format!("[::1]:{port}"),
    ] {
        let resp = send(get.clone(), &host, &proxy).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{host}");
        assert!(resp.bytes().await.unwrap() == pdb, "{host}");
        let resp = send(get.clone(), &host, "/console/api/downloads")
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{host}");
        // What the rebound page would have read.
        assert!(resp.text().await.unwrap().contains("crash.pdb"), "{host}");
    }

    // The compose file's health check: the CLI asks the config's `bind`.
    let config = server.cache_dir.parent().unwrap().join("healthcheck.yml");
    std::fs::write(&config, &settings).unwrap();
    let status = std::process::Command::new(common::binary())
        .args(["healthcheck", "--timeout", "10", "-c"])
        .arg(&config)
        .status()
        .unwrap();
    assert!(status.success(), "omnisym healthcheck: {status}");
}
