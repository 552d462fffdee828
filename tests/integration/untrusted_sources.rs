//! End-to-end tests of what a hostile file or a hostile request cannot make the server do
//! with its sources: unpack a decompression bomb onto the disk, show a source's
//! credentials in a candidate report, send a source's headers to another origin, reach a
//! reserved address through a proxy, or read a bucket with the server's own credentials.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as AxPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use common::{
    Server, SymbolServer, assert_elf_symbolicated, candidates, elf_debug_file, elf_debug_path,
    elf_request, serve,
};
use serde_json::{Value, json};

/// The candidate for the fixture's debug file, found by the end of its location.
fn debug_file_candidate(response: &Value) -> Value {
    let path = elf_debug_path();
    candidates(response)
        .into_iter()
        .find(|c| c["location"].as_str().unwrap_or_default().contains(&path))
        .unwrap_or_else(|| panic!("no candidate for {path}: {response:#}"))
}

// ---------------------------------------------------------------------------------------
// Decompression bombs

/// A valid zstd frame of `size` zero bytes made of RLE blocks: 4 bytes per 128 KiB, so
/// 2 GiB take 64 KiB.
fn zstd_bomb(size: u64) -> Vec<u8> {
    const BLOCK: u64 = 128 * 1024;
    // Magic; a descriptor without content size or checksum; a 128 KiB window.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
    let blocks = size.div_ceil(BLOCK);
    for index in 0..blocks {
        let len = BLOCK.min(size - index * BLOCK) as u32;
        let last = u32::from(index + 1 == blocks);
        // Last-block bit, block type 1 (RLE), the regenerated size; then the byte.
        let header = (len << 3) | (1 << 1) | last;
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(0);
    }
    frame
}

/// Bytes of every file under `dir`, ignoring files that vanish while it looks.
fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => disk_usage(&entry.path()),
            _ => entry.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

#[test]
fn zstd_bomb_is_valid_zstd() {
    let bomb = zstd_bomb(300 * 1024);
    assert_eq!(zstd::decode_all(&bomb[..]).unwrap(), vec![0u8; 300 * 1024]);
}

#[tokio::test]
async fn decompression_bomb_is_malformed_without_filling_the_disk() {
    // 64 KiB that unpack to 2 GiB, under the default limits.
    let bomb = zstd_bomb(2 << 30);
    assert!(bomb.len() <= 64 * 1024 + 6);
    let symbols = SymbolServer::start().await;
    symbols.put_bytes(&elf_debug_path(), &bomb);
    let server = Server::start("");

    // Samples the cache's size while the request runs.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (done, peak, dir) = (done.clone(), peak.clone(), server.cache_dir.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(disk_usage(&dir), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let sources = json!([{"type": "http", "id": "bombs", "url": symbols.url}]);
    let started = Instant::now();
    let (_, response) = server.post("/symbolicate", &elf_request(sources)).await;
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();

    assert_eq!(response["status"], "completed", "{response}");
    let bomb = debug_file_candidate(&response);
    assert_eq!(bomb["download"]["status"], "malformed", "{bomb}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // The ratio floor (64 MiB) and the bomb itself, never the 2 GiB.
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak < 96 << 20, "cache_dir reached {peak} bytes");
    // Nothing of the payload is left behind.
    assert!(disk_usage(&server.cache_dir) < 1 << 20);
}

#[tokio::test]
async fn a_compressed_section_bomb_is_malformed_without_inflating_it() {
    // Some 300 KiB whose `.debug_str` claims, and truly inflates to, 256 MiB: past the
    // ratio (200) and its floor (64 MiB).
    let bomb = common::section_bomb(256 << 20);
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let symbols = SymbolServer::start().await;
    symbols.put_bytes(&elf_debug_path(), &bomb);
    let server = Server::start("");
    let (status, _) = server.get("/healthcheck").await;
    assert_eq!(status, 200);
    let before = common::peak_rss_kib(server.pid());

    let sources = json!([{"type": "http", "id": "bombs", "url": symbols.url}]);
    let (_, response) = server.post("/symbolicate", &elf_request(sources)).await;

    assert_eq!(response["status"], "completed", "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "malformed",
        "{response:#}"
    );
    let bomb = debug_file_candidate(&response);
    assert_eq!(bomb["download"]["status"], "malformed", "{bomb}");
    // Neither the lazy reader nor the conversion inflated the section.
    let grown = common::peak_rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 96 << 10, "peak RSS grew by {grown} KiB");
}

// ---------------------------------------------------------------------------------------
// Credentials in source URLs

#[tokio::test]
async fn candidates_show_no_credentials_of_a_source_url() {
    let symbols = SymbolServer::start().await;
    let path = elf_debug_path();
    symbols.put(&format!("base/{path}"), &elf_debug_file());
    let with_secrets = format!(
        "{}base/?token=s3cr3t-token&sig=s3cr3t-sig",
        symbols
            .url
            .replacen("http://", "http://symbols:hunter2@", 1)
    );
    let server = Server::start(&format!(
        "sources:\n  - {{type: http, id: internal, url: \"{with_secrets}\"}}\n"
    ));
    // Without "sources", the request uses the config file's.
    let mut request = elf_request(Value::Null);
    request.as_object_mut().unwrap().remove("sources");
    let (_, response) = server.post("/symbolicate", &request).await;

    // The credentials were used to fetch the file, and are shown nowhere.
    assert_elf_symbolicated(&response);
    let found = debug_file_candidate(&response);
    assert_eq!(
        found["location"],
        format!("{}base/{path}?token=[redacted]&sig=[redacted]", symbols.url),
        "{found}"
    );
    let everything = format!("{response} {}", server.log());
    for secret in ["hunter2", "s3cr3t"] {
        assert!(!everything.contains(secret), "{secret} shown: {everything}");
    }
}

// ---------------------------------------------------------------------------------------
// Redirects to another origin

/// Headers of every request a server saw, as (path, name, value).
type SeenHeaders = Arc<Mutex<Vec<(String, String, String)>>>;

fn record(seen: &SeenHeaders, path: &str, headers: &HeaderMap) {
    let mut seen = seen.lock().unwrap();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        seen.push((path.to_owned(), name.as_str().to_owned(), value));
    }
}

#[tokio::test]
async fn a_sources_headers_do_not_follow_a_redirect_to_another_origin() {
    // The storage: serves the debug file and records what it was sent.
    let storage_seen = SeenHeaders::default();
    let storage = serve(
        Router::new()
            .route(
                "/{*path}",
                get(
                    |State(seen): State<SeenHeaders>,
                     AxPath(path): AxPath<String>,
                     headers: HeaderMap| async move {
                        record(&seen, &path, &headers);
                        if path == elf_debug_path() {
                            std::fs::read(elf_debug_file()).unwrap().into_response()
                        } else {
                            StatusCode::NOT_FOUND.into_response()
                        }
                    },
                ),
            )
            .with_state(storage_seen.clone()),
    )
    .await;
    // The symbol server: sends every request on to the storage, another origin.
    let symbols_seen = SeenHeaders::default();
    let symbols = serve(
        Router::new()
            .route(
                "/{*path}",
                get(
                    move |State(seen): State<SeenHeaders>,
                          AxPath(path): AxPath<String>,
                          headers: HeaderMap| async move {
                        record(&seen, &path, &headers);
                        Redirect::temporary(&format!("http://{storage}/{path}"))
                    },
                ),
            )
            .with_state(symbols_seen.clone()),
    )
    .await;

    let server = Server::start("");
    let sources = json!([{"type": "http", "id": "redirecting", "url": format!("http://{symbols}/"),
                          "headers": {"X-Api-Key": "s3cr3t-key", "Authorization": "Bearer s3cr3t-token"}}]);
    let (_, response) = server.post("/symbolicate", &elf_request(sources)).await;
    assert_elf_symbolicated(&response);

    let sent_to = |seen: &SeenHeaders, name: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(path, n, _)| *path == elf_debug_path() && n == name)
    };
    // The source's own server got its headers; the other origin none of them.
    assert!(sent_to(&symbols_seen, "x-api-key"));
    assert!(sent_to(&symbols_seen, "authorization"));
    assert!(
        sent_to(&storage_seen, "user-agent"),
        "the storage was asked"
    );
    let leaked: Vec<_> = storage_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, value)| value.contains("s3cr3t"))
        .cloned()
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");
}

// ---------------------------------------------------------------------------------------
// Proxies

/// A "proxy" that answers every request with 404 and records its request line.
async fn start_proxy() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut socket = BufReader::new(socket);
                let mut line = String::new();
                if socket.read_line(&mut line).await.is_ok() {
                    log.lock().unwrap().push(line.trim().to_owned());
                }
                let answer =
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                let _ = socket.get_mut().write_all(answer.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn a_proxy_from_the_environment_cannot_reach_a_reserved_address() {
    let symbols = SymbolServer::with_elf_debug().await;
    // A name, not a literal: only resolving it shows that it is loopback.
    let by_name = symbols.url.replace("127.0.0.1", "localhost");
    let sources = json!([{"type": "http", "id": "internal", "url": by_name}]);
    let (proxy, seen) = start_proxy().await;
    let proxy = format!("http://{proxy}");
    let env = [
        ("HTTP_PROXY", proxy.as_str()),
        ("http_proxy", proxy.as_str()),
        ("ALL_PROXY", proxy.as_str()),
    ];

    let server = Server::start_with_env("connect_to_reserved_ips: false\n", &env);
    let (_, response) = server
        .post("/symbolicate", &elf_request(sources.clone()))
        .await;
    assert_ne!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    assert!(symbols.hits().is_empty(), "{:?}", symbols.hits());
    assert!(
        server.log().contains("ignore the proxy"),
        "{}",
        server.log()
    );

    // Where reserved addresses are allowed, the same proxy is used: the variables work.
    let server = Server::start_with_env("connect_to_reserved_ips: true\n", &env);
    server.post("/symbolicate", &elf_request(sources)).await;
    let through_proxy = seen.lock().unwrap().clone();
    assert!(
        through_proxy
            .iter()
            .any(|line| line.starts_with("GET http://localhost:")),
        "{through_proxy:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The server's own cloud credentials

#[tokio::test]
async fn a_request_named_s3_source_without_keys_gets_no_server_credentials() {
    let s3 = S3Server::start().await;
    s3.put(
        "symbols",
        &format!("native/{}", elf_debug_path()),
        &elf_debug_file(),
    );
    let region = json!(["us-east-1", s3.url]);
    let config = format!(
        "sources:\n  - {{type: s3, id: bucket, bucket: symbols, prefix: native, region: {region}}}\n"
    );
    // The server's own credentials, from its environment, are the bucket's keys.
    let env = [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_CONFIG_FILE", "/nonexistent/omnisym-test"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/omnisym-test"),
    ];
    let server = Server::start_with_env(&config, &env);
    // The same source, id and all, named by a request.
    let named = json!([{"type": "s3", "id": "bucket", "bucket": "symbols", "prefix": "native",
                        "region": region}]);
    let location = format!("s3://symbols/native/{}", elf_debug_path());
    let refused = |response: &Value| {
        let candidate = candidates(response)
            .into_iter()
            .find(|c| c["location"] == location)
            .unwrap_or_else(|| panic!("no candidate at {location}: {response:#}"));
        assert_eq!(candidate["download"]["status"], "noperm", "{candidate}");
        assert_ne!(response["modules"][0]["debug_status"], "found");
    };

    let (_, response) = server
        .post("/symbolicate", &elf_request(named.clone()))
        .await;
    refused(&response);

    // The config file's source is read with them, and the refusal above is not its cache.
    let mut from_config = elf_request(Value::Null);
    from_config.as_object_mut().unwrap().remove("sources");
    let (_, response) = server.post("/symbolicate", &from_config).await;
    assert_elf_symbolicated(&response);

    // Nor is the configured source's file the request-named one's.
    let (_, response) = server
        .post("/symbolicate", &elf_request(named.clone()))
        .await;
    refused(&response);

    // Unless the operator allows it.
    let allowing = Server::start_with_env(
        &format!("{config}server_credentials_for_request_sources: true\n"),
        &env,
    );
    let (_, response) = allowing.post("/symbolicate", &elf_request(named)).await;
    assert_elf_symbolicated(&response);
}
