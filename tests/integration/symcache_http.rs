//! End-to-end tests of SymCache over HTTP (`GET /symcache/v<version>/<debug_file>/<id>`):
//! the real server, the project's PDB and Breakpad fixtures on a real symbol server, and
//! the fetched SymCache read with `symbolic-symcache` in the test.

use crate::common;

use std::io::Write;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{ELF_BASE, Server, SymbolServer, client, fixtures, hex, object};
use serde_json::{Value, json};
use symbolic::common::ByteView;
use symbolic::symcache::{SYMCACHE_VERSION, SymCache};

const PE_BASE: u64 = 0x1_4000_0000;

/// The version this server builds: symbolic's format and the project's cache revision.
fn served() -> String {
    format!("{SYMCACHE_VERSION}.1.0")
}

/// What a client does with a fetched SymCache: saves it to its local SymCache directory
/// and maps it (SymCaches are read in place, 8-byte aligned as a mapping is).
fn saved(bytes: &[u8]) -> ByteView<'static> {
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(bytes).unwrap();
    ByteView::map_file(file).unwrap()
}

/// A symbol server with the PDB (symstore layout) and the ELF's Breakpad file (native
/// layout), delayed by `delay_ms` per download when it is not 0.
async fn symbol_server() -> SymbolServer {
    let symsrv = SymbolServer::start().await;
    let pe = object("pe");
    let elf = object("elf");
    symsrv.put(
        &format!(
            "crash.pdb/{}/crash.pdb",
            pe["breakpad_id"].as_str().unwrap()
        ),
        &fixtures().join("native/pe/crash.pdb"),
    );
    symsrv.put(
        &format!("crash/{}/crash.sym", elf["breakpad_id"].as_str().unwrap()),
        &fixtures().join("native/breakpad/crash.sym"),
    );
    symsrv
}

fn sources_yaml(symsrv: &SymbolServer, delay_ms: u64) -> String {
    let url = if delay_ms == 0 {
        symsrv.url.clone()
    } else {
        format!("{}slow/{delay_ms}/", symsrv.url)
    };
    format!(
        "sources:\n  - {{id: symstore, type: http, url: \"{url}\", layout: {{type: symstore}}}}\n  - {{id: native, type: http, url: \"{url}\", layout: {{type: native}}}}\n"
    )
}

/// A SymCache answer, which names the version sent whether or not it was the one asked.
fn assert_serves_ours(resp: &reqwest::Response) {
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"],
        format!("application/x-symbolic-symcache; version={}", served())
    );
}

fn pdb_path(version: &str) -> String {
    let id = object("pe")["debug_id"].as_str().unwrap().to_owned();
    format!("/symcache/v{version}/crash.pdb/{id}")
}

fn elf_path(version: &str) -> String {
    let id = object("elf")["debug_id"].as_str().unwrap().to_owned();
    format!("/symcache/v{version}/crash/{id}")
}

async fn get(server: &Server, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client().get(format!("{}{path}", server.url));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Every address the manifest knows for `name`, relative to the image.
fn addresses(name: &str) -> Vec<u64> {
    let object = object(name);
    let probes = object["probes"].as_array().unwrap().iter();
    let stack = object["crash_stack"].as_array().unwrap().iter();
    probes.chain(stack).map(|p| hex(&p["rel_addr"])).collect()
}

/// Asserts that `symcache` resolves every address of the fixture to the same inline
/// chain (raw name, file, line) as `/symbolicate` does for `module` at `base`.
async fn assert_answers_as_symbolicate(
    server: &Server,
    symcache: &SymCache<'_>,
    name: &str,
    module: Value,
    base: u64,
) {
    let addrs = addresses(name);
    let frames: Vec<Value> = addrs
        .iter()
        .map(|rel| json!({"instruction_addr": format!("{:#x}", base + rel), "adjust_instruction_addr": false}))
        .collect();
    let body = json!({"modules": [module], "stacktraces": [{"frames": frames}]});
    let (status, response) = server.post("/symbolicate", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response}"
    );
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    let mut symbolicated = 0;
    for (index, rel) in addrs.iter().enumerate() {
        let got: Vec<(String, String, u64)> = frames
            .iter()
            .filter(|f| f["original_index"] == index && f["status"] == "symbolicated")
            .map(|f| {
                let raw = f.get("symbol").unwrap_or(&f["function"]);
                (
                    raw.as_str().unwrap().to_owned(),
                    f["abs_path"].as_str().unwrap_or_default().to_owned(),
                    f["lineno"].as_u64().unwrap_or_default(),
                )
            })
            .collect();
        let want: Vec<(String, String, u64)> = symcache
            .lookup(*rel)
            .map(|loc| {
                (
                    loc.function().name().to_owned(),
                    loc.file().map(|f| f.full_path()).unwrap_or_default(),
                    u64::from(loc.line()),
                )
            })
            .collect();
        assert_eq!(got, want, "{name} at {rel:#x}");
        symbolicated += got.len();
    }
    assert!(symbolicated >= addrs.len(), "{name}: {response:#}");
}

#[tokio::test]
async fn a_symcache_over_http_answers_as_symbolicate_does() {
    let symsrv = symbol_server().await;
    let server = Server::start(&sources_yaml(&symsrv, 0));
    let pe = object("pe");

    let resp = get(&server, &pdb_path(&served()), &[]).await;
    assert_serves_ours(&resp);
    let bytes = resp.bytes().await.unwrap();
    let view = saved(&bytes);
    let symcache = SymCache::parse(&view).unwrap();
    assert_eq!(symcache.version(), SYMCACHE_VERSION);
    let module = json!({
        "type": "pe",
        "debug_id": pe["debug_id"],
        "debug_file": "crash.pdb",
        "code_id": pe["code_id"],
        "code_file": "crash.exe",
        "image_addr": format!("{PE_BASE:#x}"),
        "image_size": pe["image_size"],
    });
    assert_answers_as_symbolicate(&server, &symcache, "pe", module, PE_BASE).await;

    // The protocol's own spelling: a bare GUID and the age as a segment, or no age
    // at all for age 1.
    let guid = pe["pdb_guid"].as_str().unwrap();
    for path in [
        format!("/symcache/v{}/crash.pdb/{guid}/1", served()),
        format!(
            "/symcache/v{}/crash.pdb/{}",
            served(),
            guid.replace('-', "")
        ),
    ] {
        let resp = get(&server, &path, &[]).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert!(resp.bytes().await.unwrap() == bytes, "{path}");
    }

    // Any other file name is an ELF's or a Mach-O's: the ELF's Breakpad file.
    let resp = get(&server, &elf_path(&served()), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let view = saved(&resp.bytes().await.unwrap());
    let symcache = SymCache::parse(&view).unwrap();
    let elf = object("elf");
    let module = json!({
        "type": "elf",
        "debug_id": elf["debug_id"],
        "debug_file": "crash",
        "image_addr": format!("{ELF_BASE:#x}"),
        "image_size": elf["image_size"],
    });
    assert_answers_as_symbolicate(&server, &symcache, "elf", module, ELF_BASE).await;
}

#[tokio::test]
async fn unknown_files_are_absent_after_both_elf_and_macho_were_tried() {
    let symsrv = symbol_server().await;
    let server = Server::start(&sources_yaml(&symsrv, 0));
    let unknown = "0123456789abcdef0123456789abcdef";
    let resp = get(
        &server,
        &format!("/symcache/v{}/crash/{unknown}", served()),
        &[("allow-retry-after", "true")],
    )
    .await;
    // Known absent: a final 404, not a request to come back.
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(resp.headers().get("retry-after").is_none());
    // A Mach-O executable's native path (`.app`) is asked only when the file is looked
    // up as a Mach-O after the ELF lookup found nothing.
    let hits = symsrv.hits();
    assert!(hits.iter().any(|h| h.ends_with(".app")), "{hits:?}");
    assert!(hits.iter().any(|h| h.ends_with("crash.sym")), "{hits:?}");
}

/// Polls with `Allow-Retry-After` until the SymCache is there, honouring `Retry-After`.
async fn poll_until_built(
    server: &Server,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = get(server, path, headers).await;
        if resp.status() != StatusCode::NOT_FOUND {
            return resp;
        }
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(Instant::now() < deadline, "{path} never got built");
        tokio::time::sleep(Duration::from_secs(retry)).await;
    }
}

#[tokio::test]
async fn a_client_that_may_retry_is_told_to_come_back_while_the_symcache_is_built() {
    let symsrv = symbol_server().await;
    // Every download takes 3 s: far longer than `answer_within`.
    let server = Server::start(&format!(
        "{}symcache_http: {{retry_after: 2s}}\n",
        sources_yaml(&symsrv, 3000)
    ));
    let started = Instant::now();
    let resp = get(
        &server,
        &pdb_path(&served()),
        &[("Allow-Retry-After", "true")],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let resp = poll_until_built(
        &server,
        &pdb_path(&served()),
        &[("allow-retry-after", "true")],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    SymCache::parse(&saved(&resp.bytes().await.unwrap())).unwrap();

    // A client of a newer minor version than ours always may retry, and gets ours.
    let newer = format!("{SYMCACHE_VERSION}.99.0");
    let resp = get(&server, &elf_path(&newer), &[]).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(resp.headers().contains_key("retry-after"));
    let resp = poll_until_built(&server, &elf_path(&newer), &[]).await;
    assert_serves_ours(&resp);
}

#[tokio::test]
async fn other_clients_wait_for_the_build() {
    let symsrv = symbol_server().await;
    let server = Server::start(&sources_yaml(&symsrv, 1500));
    let started = Instant::now();
    let resp = get(&server, &pdb_path(&served()), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(1500));
    SymCache::parse(&saved(&resp.bytes().await.unwrap())).unwrap();
    // A client of an older minor version waits too, and is told which version it got.
    let older = format!("{SYMCACHE_VERSION}.0.0");
    let resp = get(&server, &elf_path(&older), &[]).await;
    assert_serves_ours(&resp);
}

#[tokio::test]
async fn versions_the_client_has_and_other_majors_are_not_served() {
    let symsrv = symbol_server().await;
    let server = Server::start(&sources_yaml(&symsrv, 0));
    let path = pdb_path(&served());
    // Nothing newer than what the client has: 304, and nothing is fetched.
    for has in [
        served(),
        format!("{SYMCACHE_VERSION}.2.0"),
        format!("{}.0.0", SYMCACHE_VERSION + 1),
    ] {
        let resp = get(&server, &path, &[("If-Version-Exceeds", &has)]).await;
        assert_eq!(resp.status(), StatusCode::NOT_MODIFIED, "{has}");
    }
    // Other major versions are never served.
    for major in [SYMCACHE_VERSION - 1, SYMCACHE_VERSION + 1] {
        let resp = get(&server, &pdb_path(&format!("{major}.1.0")), &[]).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{major}");
    }
    assert!(symsrv.hits().is_empty(), "{:?}", symsrv.hits());
    // Something older: ours is newer, and is sent.
    for has in [format!("{SYMCACHE_VERSION}.0.0"), "8.5.0".to_owned()] {
        let resp = get(&server, &path, &[("If-Version-Exceeds", &has)]).await;
        assert_eq!(resp.status(), StatusCode::OK, "{has}");
    }
    let resp = get(&server, &path, &[("If-Version-Exceeds", "nine")]).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_configured_token_is_required() {
    let symsrv = symbol_server().await;
    let server = Server::start(&format!(
        "{}symcache_http: {{token: s3cret}}\n",
        sources_yaml(&symsrv, 0)
    ));
    let path = pdb_path(&served());
    for headers in [
        &[][..],
        &[("Authorization", "Bearer wrong")][..],
        &[("Authorization", "Basic czNjcmV0")][..],
    ] {
        let resp = get(&server, &path, headers).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{headers:?}");
        assert_eq!(
            resp.headers()["www-authenticate"],
            "Bearer realm=\"omnisym\""
        );
    }
    assert!(symsrv.hits().is_empty(), "{:?}", symsrv.hits());
    let resp = get(&server, &path, &[("Authorization", "Bearer s3cret")]).await;
    assert_eq!(resp.status(), StatusCode::OK);

    let disabled = Server::start(&format!(
        "{}symcache_http: {{enabled: false}}\n",
        sources_yaml(&symsrv, 0)
    ));
    let resp = get(&disabled, &path, &[]).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}
