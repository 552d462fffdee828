//! End-to-end tests of the symbol-server proxy (`GET`/`HEAD /proxy/<symstore path>`):
//! the real server over HTTP, the project's PE/PDB fixtures on a real symbol server.

use crate::common;

use std::io::{Read, Write};

use axum::http::StatusCode;
use common::{Server, SymbolServer, client, fixtures, object};

fn pdb_key() -> String {
    object("pe")["breakpad_id"].as_str().unwrap().to_owned()
}

fn exe_key() -> String {
    object("pe")["code_id"].as_str().unwrap().to_owned()
}

/// A symbol server in the symstore layout with the PE and its PDB, and an omnisym
/// whose configured source it is.
async fn setup(extra_yaml: &str) -> (SymbolServer, Server) {
    let symsrv = SymbolServer::start().await;
    symsrv.put(
        &format!("crash.pdb/{}/crash.pdb", pdb_key()),
        &fixtures().join("native/pe/crash.pdb"),
    );
    symsrv.put(
        &format!("crash.exe/{}/crash.exe", exe_key()),
        &fixtures().join("native/pe/crash.exe"),
    );
    let server = Server::start(&format!(
        "sources:\n  - {{id: symsrv, type: http, url: \"{}\", layout: {{type: symstore}}}}\n{extra_yaml}",
        symsrv.url
    ));
    (symsrv, server)
}

async fn get(server: &Server, path: &str) -> reqwest::Response {
    client()
        .get(format!("{}{path}", server.url))
        .send()
        .await
        .unwrap()
}

/// Sends `path` exactly as written (no client normalises it) and returns the status.
fn raw_status(server: &Server, path: &str) -> u16 {
    let addr = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[tokio::test]
async fn get_and_head_serve_debug_files_from_the_sources() {
    let (symsrv, server) = setup("").await;
    let pdb = std::fs::read(fixtures().join("native/pe/crash.pdb")).unwrap();
    let path = format!("/proxy/crash.pdb/{}/crash.pdb", pdb_key());

    let resp = get(&server, &path).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    assert_eq!(resp.headers()["content-length"], pdb.len().to_string());
    assert!(resp.bytes().await.unwrap() == pdb);

    let resp = client()
        .head(format!("{}{path}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-length"], pdb.len().to_string());
    assert!(resp.bytes().await.unwrap().is_empty());

    // The PE image too, by timestamp and size.
    let exe = std::fs::read(fixtures().join("native/pe/crash.exe")).unwrap();
    let resp = get(
        &server,
        &format!("/proxy/crash.exe/{}/crash.exe", exe_key()),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.bytes().await.unwrap() == exe);

    // Served from the download cache: the source was asked once for the PDB.
    let pdb_hits = symsrv
        .hits()
        .iter()
        .filter(|hit| hit.ends_with("crash.pdb"))
        .count();
    assert_eq!(pdb_hits, 1, "{:?}", symsrv.hits());
}

#[tokio::test]
async fn names_keys_compressed_names_and_pointers_find_the_same_file() {
    let (_symsrv, server) = setup("").await;
    let pdb = std::fs::read(fixtures().join("native/pe/crash.pdb")).unwrap();
    let key = pdb_key();
    for path in [
        format!("/proxy/crash.pdb/{}/CRASH.PDB", key.to_lowercase()),
        format!("/proxy/crash.pdb/{key}/Crash.Pdb"),
        // CAB-compressed names answer the same file (uncompressed, as the cache holds it).
        format!("/proxy/crash.pdb/{key}/crash.pd_"),
        format!("/proxy/crash.pdb/{key}/CRASH.PD_"),
    ] {
        let resp = get(&server, &path).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert!(resp.bytes().await.unwrap() == pdb, "{path}");
    }
    let resp = get(
        &server,
        &format!("/proxy/crash.exe/{}/crash.ex_", exe_key()),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);

    // `file.ptr` points at the file on this proxy; following it gets the file.
    let resp = get(&server, &format!("/proxy/crash.pdb/{key}/file.ptr")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/plain");
    // Built from this client's `Host`: no shared cache may keep it for others.
    assert_eq!(resp.headers()["cache-control"], "private, no-cache");
    assert_eq!(resp.headers()["vary"], "host, x-forwarded-proto");
    let pointer = resp.text().await.unwrap();
    let want = format!("PATH:{}/proxy/crash.pdb/{key}/crash.pdb", server.url);
    assert_eq!(pointer, want);
    let resp = client()
        .get(pointer.strip_prefix("PATH:").unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.bytes().await.unwrap() == pdb);
    // Behind a TLS-terminating proxy the pointer says https.
    let resp = client()
        .get(format!("{}/proxy/crash.pdb/{key}/FILE.PTR", server.url))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    let host = server.url.trim_start_matches("http://");
    assert_eq!(
        resp.text().await.unwrap(),
        format!("PATH:https://{host}/proxy/crash.pdb/{key}/crash.pdb")
    );
}

#[tokio::test]
async fn unknown_files_and_traversal_are_refused() {
    let (symsrv, server) = setup("").await;
    let key = pdb_key();
    let other = format!("{}2", &key[..key.len() - 1]);
    for path in [
        format!("/proxy/crash.pdb/{other}/crash.pdb"),
        format!("/proxy/crash.pdb/{other}/file.ptr"),
        format!("/proxy/other.pdb/{key}/other.pdb"),
        // Not `name/key/name`.
        format!("/proxy/crash.pdb/{key}/other.pdb"),
        format!("/proxy/crash.pdb/{key}"),
        format!("/proxy/crash.pdb/{key}/crash.pdb/more"),
        // Compressed names are for PE and PDB files only.
        "/proxy/crash/elf-buildid-6cdc6fd9/cras_".to_owned(),
    ] {
        let resp = get(&server, &path).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let hits_before = symsrv.hits().len();
    for path in [
        "/proxy/crash.pdb/../../../etc/passwd".to_owned(),
        format!("/proxy/../crash.pdb/{key}/crash.pdb"),
        format!("/proxy/%2e%2e/{key}/%2e%2e"),
        format!("/proxy/crash.pdb/{key}/..%2fcrash.pdb"),
        format!("/proxy/..%5c..%5cwindows/{key}/..%5c..%5cwindows"),
    ] {
        assert_eq!(raw_status(&server, &path), 400, "{path}");
    }
    assert_eq!(symsrv.hits().len(), hits_before, "{:?}", symsrv.hits());
}

#[tokio::test]
async fn a_disabled_proxy_answers_404_and_fetches_nothing() {
    let (symsrv, server) = setup("symstore_proxy: false\n").await;
    let resp = get(
        &server,
        &format!("/proxy/crash.pdb/{}/crash.pdb", pdb_key()),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(symsrv.hits().is_empty(), "{:?}", symsrv.hits());
}

/// One token guards `/proxy`, `/symcache` and the Mozilla API alike; a front listed in
/// `fronts.open` answers without it, and `symcache_http.token` is the same setting.
#[tokio::test]
async fn the_fronts_token_guards_every_front_unless_it_is_open() {
    let key = pdb_key();
    let proxy = format!("/proxy/crash.pdb/{key}/crash.pdb");
    let symcache = format!(
        "/symcache/v{}.1.0/crash.pdb/{}",
        symbolic::symcache::SYMCACHE_VERSION,
        object("pe")["debug_id"].as_str().unwrap()
    );
    let mozilla = "/symbolicate/v5";
    let ask = |server: &Server, path: &str, token: Option<&str>| {
        let url = format!("{}{path}", server.url);
        let request = if path == mozilla {
            let body = serde_json::json!({"memoryMap": [["crash.pdb", key]], "stacks": [[[0, 0]]]});
            client().post(url).json(&body)
        } else {
            client().get(url)
        };
        let request = match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        async move { request.send().await.unwrap() }
    };
    for config in [
        "fronts: {token: s3cret}\n",
        "symcache_http: {token: s3cret}\n",
    ] {
        let (symsrv, server) = setup(config).await;
        for path in [proxy.as_str(), &symcache, mozilla] {
            for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
                let resp = ask(&server, path, token).await;
                assert_eq!(
                    resp.status(),
                    StatusCode::UNAUTHORIZED,
                    "{config} {path} {token:?}"
                );
                assert_eq!(
                    resp.headers()["www-authenticate"],
                    "Bearer realm=\"omnisym\""
                );
                let body = resp.text().await.unwrap();
                assert!(!body.contains("s3cret"), "{body}");
            }
        }
        // Nothing was looked up for a refused request.
        assert!(symsrv.hits().is_empty(), "{:?}", symsrv.hits());
        for path in [proxy.as_str(), &symcache, mozilla] {
            let resp = ask(&server, path, Some("s3cret")).await;
            assert_eq!(resp.status(), StatusCode::OK, "{config} {path}");
        }
        // Sentry's own endpoints are not fronts.
        let (status, _) = server.get("/healthcheck").await;
        assert_eq!(status, StatusCode::OK);
    }
    let (_symsrv, server) = setup("fronts: {token: s3cret, open: [mozilla, symcache]}\n").await;
    assert_eq!(
        ask(&server, &proxy, None).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(ask(&server, &symcache, None).await.status(), StatusCode::OK);
    assert_eq!(ask(&server, mozilla, None).await.status(), StatusCode::OK);
}
