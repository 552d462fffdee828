//! The console's own routes on the real server: who may open it (off unless on
//! loopback or enabled, the fronts' token as Bearer or Basic credentials), the headers
//! its page is served with, and what its status and downloads documents report after
//! real requests (the browser half is in console_browser.rs).

use crate::common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use base64::Engine as _;
use common::{Server, client, elf_debug_file, elf_debug_path, elf_request};
use serde_json::{Value, json};

async fn get(server: &Server, path: &str, auth: Option<&str>) -> reqwest::Response {
    let mut request = client().get(format!("{}{path}", server.url));
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    request.send().await.unwrap()
}

fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

#[tokio::test]
async fn serves_its_page_on_loopback_and_not_when_turned_off() {
    let server = Server::start("");
    for (path, content_type) in [
        ("/console", "text/html; charset=utf-8"),
        ("/console/console.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
    ] {
        let response = get(&server, path, None).await;
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        assert_eq!(headers["content-type"], content_type, "{path}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
    }
    // No other path under it reads anything.
    for path in [
        "/console/../Cargo.toml",
        "/console/page/index.html",
        "/console/x",
    ] {
        assert_eq!(get(&server, path, None).await.status(), 404, "{path}");
    }

    let off = Server::start("console:\n  enabled: false\n");
    for path in ["/console", "/console/api/status", "/console/api/downloads"] {
        assert_eq!(get(&off, path, None).await.status(), 404, "{path}");
    }
    // With the console off, the server still serves.
    let (status, answer) = off.post("/symbolicate", &EMPTY_REQUEST).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "completed", "{answer}");
}

/// `{"sources": [], "modules": [], "stacktraces": []}`: a request of the service that
/// does no work.
static EMPTY_REQUEST: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"sources": [], "modules": [], "stacktraces": []}));

/// The real router in this process, on a loopback port: the last requests answered are
/// kept once per process, so a router with the console on shows what one without it
/// kept.
async fn in_process(console: bool, cache: &std::path::Path) -> String {
    let yaml = format!(
        "cache_dir: {}
console:
  enabled: {console}
",
        cache.display()
    );
    let (config, _) = omnisym::config::Config::from_yaml(&yaml).unwrap();
    let state = omnisym::server::AppState::new(&config).unwrap();
    let app = omnisym::server::router(state, &config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(omnisym::server::serve(
        listener,
        app,
        omnisym::server::ConnectionLimits::of(&config),
        std::future::pending(),
    ));
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_not_kept_while_the_console_is_off() {
    let (off_cache, on_cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let off = in_process(false, off_cache.path()).await;
    let on = in_process(true, on_cache.path()).await;
    let send = |url: String, id: String| async move {
        let response = client()
            .post(format!("{url}/symbolicate"))
            .header("x-request-id", &id)
            .json(&*EMPTY_REQUEST)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{id}");
    };
    let unseen = format!("console-off-{}", uuid::Uuid::new_v4());
    let seen = format!("console-on-{}", uuid::Uuid::new_v4());
    send(off, unseen.clone()).await;
    send(on.clone(), seen.clone()).await;
    let status: Value = client()
        .get(format!("{on}/console/api/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = status["requests"]["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&seen.as_str()), "{ids:?}");
    assert!(!ids.contains(&unseen.as_str()), "{ids:?}");
}

#[tokio::test]
async fn is_behind_the_fronts_token_as_bearer_or_basic_credentials() {
    let server = Server::start("fronts:\n  token: console-token\n");
    for path in ["/console", "/console/api/status", "/console/api/downloads"] {
        let refused = get(&server, path, None).await;
        assert_eq!(refused.status(), 401, "{path}");
        let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.starts_with("Basic "),
            "a browser asks for it: {challenge}"
        );
        let body = refused.text().await.unwrap();
        assert!(!body.contains("console-token"));
        for wrong in [
            basic("any", "nope"),
            "Bearer nope".into(),
            basic("console-token", ""),
        ] {
            assert_eq!(
                get(&server, path, Some(&wrong)).await.status(),
                401,
                "{path}"
            );
        }
        for right in [basic("any", "console-token"), "Bearer console-token".into()] {
            assert_eq!(
                get(&server, path, Some(&right)).await.status(),
                200,
                "{path}"
            );
        }
    }
    // A front listed as open needs no token, as the others.
    let open = Server::start("fronts:\n  token: console-token\n  open: [console]\n");
    assert_eq!(get(&open, "/console/api/status", None).await.status(), 200);
}

#[tokio::test]
async fn binds_beyond_loopback_keep_it_off_unless_enabled() {
    for (extra, expected) in [
        ("", StatusCode::NOT_FOUND),
        ("console:\n  enabled: true\n", StatusCode::OK),
    ] {
        let port = common::free_port();
        let _server = Server::start(&format!("bind: 0.0.0.0:{port}\n{extra}"));
        let status = client()
            .get(format!("http://127.0.0.1:{port}/console"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, expected, "{extra:?}");
    }
}

async fn status(server: &Server) -> Value {
    let response = get(server, "/console/api/status", None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    response.json().await.unwrap()
}

/// Polls the status until `done` holds (the charts get a point every 2 s).
async fn status_until(server: &Server, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = status(server).await;
        if done(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{what}: {status:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn status_reports_requests_downloads_caches_and_charts() {
    let symbols = tempfile::tempdir().unwrap();
    let path = symbols.path().join(elf_debug_path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(elf_debug_file(), &path).unwrap();
    let server = Server::start("");

    let sources = json!([{
        "type": "filesystem", "id": "local-symbols",
        "path": symbols.path(), "layout": {"type": "native"},
    }]);
    let (code, answer) = server
        .post("/symbolicate", &elf_request(sources.clone()))
        .await;
    assert_eq!(code, 200, "{answer}");
    common::assert_elf_symbolicated(&answer);

    let after = status_until(&server, "a point with the request", |s| {
        s["series"]["points"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["requests"].as_u64() >= Some(1))
    })
    .await;
    assert_eq!(after["requests"]["in_flight"], 0);
    assert!(after["requests"]["max_concurrent"].as_u64().unwrap() > 0);
    assert_eq!(after["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(after["series"]["interval_seconds"], 2);
    // The request, with its route; not the status polls.
    let recent = after["requests"]["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 1, "{recent:#?}");
    assert_eq!(recent[0]["endpoint"], "/symbolicate");
    assert_eq!(recent[0]["method"], "POST");
    assert_eq!(recent[0]["status"], 200);

    // The source's downloads: the debug file was found, other locations were not.
    let source = after["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "local-symbols")
        .unwrap_or_else(|| panic!("{after:#}"));
    assert_eq!(source["type"], "filesystem");
    assert!(source["ok"].as_u64().unwrap() >= 1, "{source}");
    let size = std::fs::metadata(elf_debug_file()).unwrap().len();
    assert!(source["bytes"].as_u64().unwrap() >= size, "{source}");
    assert_eq!(source["failed"], 0);

    // Each download matches a candidate by source and location.
    let downloads: Value = get(&server, "/console/api/downloads", None)
        .await
        .json()
        .await
        .unwrap();
    let downloads = downloads["downloads"].as_array().unwrap();
    let found = answer["modules"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["download"]["status"] == "ok")
        .unwrap();
    let record = downloads
        .iter()
        .find(|d| d["source"] == found["source"] && d["location"] == found["location"])
        .unwrap_or_else(|| panic!("{found} in {downloads:#?}"));
    assert_eq!(record["outcome"], "ok");
    assert_eq!(record["bytes"].as_u64(), Some(size));

    // The caches that were computed for it.
    let kinds = after["caches"]["kinds"].as_array().unwrap();
    let symcaches = kinds.iter().find(|k| k["kind"] == "symcaches").unwrap();
    assert!(symcaches["misses"].as_u64().unwrap() >= 1, "{symcaches}");
    // The first look at the disk came after the request, so it counts its files.
    let disk = &after["caches"]["disk"];
    assert!(disk["used_bytes"].as_u64().unwrap() >= size, "{disk}");
    assert_eq!(disk["complete"], true);
    let objects = kinds.iter().find(|k| k["kind"] == "objects").unwrap();
    assert!(objects["disk_bytes"].as_u64().unwrap() >= size, "{objects}");

    // A warm repeat is a SymCache hit, and computes nothing.
    let before = symcaches.clone();
    let (code, _) = server.post("/symbolicate", &elf_request(sources)).await;
    assert_eq!(code, 200);
    let repeated = status_until(&server, "a SymCache hit", |s| {
        kind(s, "symcaches")["hits"].as_u64() > before["hits"].as_u64()
    })
    .await;
    let symcaches = kind(&repeated, "symcaches");
    assert_eq!(
        symcaches["misses"], before["misses"],
        "{before} then {symcaches}"
    );
}

/// One cache kind of a status document.
fn kind(status: &Value, name: &str) -> Value {
    status["caches"]["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {status:#}"))
}

#[tokio::test]
async fn deny_listed_hosts_are_listed_with_their_release_time() {
    // Nothing listens on this port: every download from it fails.
    let port = common::free_port();
    let server = Server::start(
        "deny_list_threshold: 2\ndeny_list_time_window: 1m\ndeny_list_bucket_size: 1s\ndeny_list_block_time: 1h\n",
    );
    let source = json!([{
        "type": "http", "id": "dead", "url": format!("http://127.0.0.1:{port}/"),
        "layout": {"type": "native"},
    }]);
    let (code, _) = server.post("/symbolicate", &elf_request(source)).await;
    assert_eq!(code, 200);
    let status = status(&server).await;
    let blocked = status["deny_list"].as_array().unwrap();
    assert_eq!(blocked.len(), 1, "{status:#}");
    // Hosts are blocked by name, whatever the port (as upstream).
    assert_eq!(blocked[0]["host"], "127.0.0.1");
    let since = humantime::parse_rfc3339(blocked[0]["since"].as_str().unwrap()).unwrap();
    let until = humantime::parse_rfc3339(blocked[0]["until"].as_str().unwrap()).unwrap();
    assert_eq!(
        until.duration_since(since).unwrap(),
        Duration::from_secs(3600)
    );
    let dead = status["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "dead")
        .unwrap();
    assert!(dead["failed"].as_u64().unwrap() >= 2, "{dead}");
    assert!(dead["last_error"].is_string(), "{dead}");
}
