//! Uploads from the real `sentry-cli` (PyPI `sentry-cli==3.8.2`, installed by
//! scripts/test.sh) into a directory store, then the endpoints answering from the store
//! alone: every request sends sources of its own that hold nothing (as Sentry always
//! sends some), so only the store can have answered.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{
    Server, assert_elf_symbolicated, crashing_thread, elf_debug_file, elf_request, fixtures, hex,
    minidump_file, minidump_form, minidump_variant, object,
};
use serde_json::{Value, json};

const WRITE_TOKEN: &str = "sntrys-upload-secret-for-tests";
const READ_TOKEN: &str = "read-only-secret-for-tests";
/// Set to `skip` to run the suite without sentry-cli on the PATH (CI installs it).
const SENTRY_CLI: &str = "OMNISYM_SENTRY_CLI";

/// sentry-cli on the PATH, or `None` (after `skip_or_fail`) when it is not there.
fn sentry_cli(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("sentry-cli"))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        common::skip_or_fail(SENTRY_CLI, test, "sentry-cli is not on the PATH");
    }
    found
}

/// A server with a directory store; `chunk_upload` is YAML for `store.chunk_upload`.
struct StoreServer {
    server: Server,
    store: tempfile::TempDir,
    /// sentry-cli's home: no ~/.sentryclirc of the machine's reaches the tests.
    home: tempfile::TempDir,
    cli: PathBuf,
}

impl StoreServer {
    fn start(cli: PathBuf, chunk_upload: &str) -> StoreServer {
        let store = tempfile::tempdir().unwrap();
        let server = Server::start(&format!(
            "store:\n  backend:\n    type: filesystem\n    path: {}\n  tokens:\n    \
             - token: {WRITE_TOKEN}\n      access: write\n    \
             - token: {READ_TOKEN}\n      access: read\n  chunk_upload:\n    {}\n",
            store.path().display(),
            if chunk_upload.is_empty() {
                "{}"
            } else {
                chunk_upload
            }
        ));
        StoreServer {
            server,
            store,
            home: tempfile::tempdir().unwrap(),
            cli,
        }
    }

    fn command(&self, token: &str, args: &[&str]) -> Command {
        let mut command = Command::new(&self.cli);
        command
            .args(["--url", &self.server.url, "--auth-token", token])
            .args(args)
            .env("HOME", self.home.path())
            .env("SENTRY_DISABLE_UPDATE_CHECK", "true")
            .env_remove("SENTRY_AUTH_TOKEN")
            .env_remove("SENTRY_URL")
            .env_remove("SENTRY_ORG")
            .env_remove("SENTRY_PROJECT")
            .stdin(Stdio::null());
        command
    }

    /// Runs sentry-cli with the write token; panics with its output unless it succeeds.
    fn run(&self, args: &[&str]) -> String {
        let output = self.command(WRITE_TOKEN, args).output().unwrap();
        let text = text(&output);
        assert!(
            output.status.success(),
            "sentry-cli {args:?} failed:\n{text}"
        );
        text
    }

    async fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.server.scrape().await.sum(name, labels)
    }

    /// Chunks stored, and chunk POSTs answered.
    async fn chunk_counts(&self) -> (f64, f64, f64) {
        let stored = self
            .counter("sentry_cli_chunks_total", &[("outcome", "stored")])
            .await;
        let duplicate = self
            .counter("sentry_cli_chunks_total", &[("outcome", "duplicate")])
            .await;
        let posts = self
            .counter(
                "http_requests_total",
                &[("endpoint", "/api/0/organizations/{org}/chunk-upload/")],
            )
            .await;
        (stored, duplicate, posts)
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Sources of the request's own that hold nothing: a directory that is empty.
fn empty_sources(dir: &Path) -> Value {
    json!([{"type": "filesystem", "id": "requests-own", "path": dir,
            "layout": {"type": "native"}}])
}

/// A Breakpad file written here, with an id of its own (no fixture shares it).
const HANDMADE_ID: &str = "0123456789abcdef0123456789abcdef";
fn handmade_breakpad(dir: &Path) -> PathBuf {
    let path = dir.join("handmade.sym");
    std::fs::write(
        &path,
        "MODULE Linux x86_64 0123456789ABCDEF0123456789ABCDEF0 handmade\n\
         FILE 0 /src/handmade.c\n\
         FUNC 1000 40 0 handmade_function\n\
         1000 20 7 0\n\
         1020 20 8 0\n\
         PUBLIC 2000 0 handmade_public\n",
    )
    .unwrap();
    path
}

#[tokio::test]
async fn debug_files_upload_of_elf_breakpad_and_pdb_answers_symbolicate_from_the_store() {
    let Some(cli) = sentry_cli("debug_files_upload") else {
        return;
    };
    let store = StoreServer::start(cli, "");
    let work = tempfile::tempdir().unwrap();
    let sym = handmade_breakpad(work.path());
    let pdb = fixtures().join("native/pe/crash.pdb");
    let output = store.run(&[
        "debug-files",
        "upload",
        "--org",
        "acme",
        "--project",
        "web",
        elf_debug_file().to_str().unwrap(),
        sym.to_str().unwrap(),
        pdb.to_str().unwrap(),
    ]);
    assert!(!output.contains("ERROR"), "{output}");
    let (stored, _, _) = store.chunk_counts().await;
    assert_eq!(stored, 3.0, "one chunk per small file:\n{output}");

    let empty = tempfile::tempdir().unwrap();
    // ELF with DWARF: the fixture's request, with the request's own sources.
    let (status, response) = store
        .server
        .post("/symbolicate", &elf_request(empty_sources(empty.path())))
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_elf_symbolicated(&response);

    // Breakpad.
    let (status, response) = store
        .server
        .post(
            "/symbolicate",
            &json!({
                "sources": empty_sources(empty.path()),
                "modules": [{"type": "elf", "debug_id": HANDMADE_ID, "code_file": "handmade",
                             "image_addr": "0x10000", "image_size": 8192}],
                "stacktraces": [{"frames": [{"instruction_addr": "0x11024",
                                             "adjust_instruction_addr": false}]}],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let frame = &response["stacktraces"][0]["frames"][0];
    assert_eq!(frame["status"], "symbolicated", "{response:#}");
    assert_eq!(frame["function"], "handmade_function", "{frame}");
    assert_eq!(frame["lineno"], 8, "{frame}");

    // PDB: the PE fixture's crash site.
    let pe = object("pe");
    let site = &pe["crash_stack"][0];
    let (status, response) = store
        .server
        .post(
            "/symbolicate",
            &json!({
                "sources": empty_sources(empty.path()),
                "modules": [{"type": "pe", "debug_id": pe["debug_id"], "code_id": pe["code_id"],
                             "debug_file": "crash.pdb", "code_file": "crash.exe",
                             "image_addr": "0x140000000", "image_size": pe["image_size"]}],
                "stacktraces": [{"frames": [{"instruction_addr": site["addr"],
                                             "adjust_instruction_addr": false}]}],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    let want: Vec<&Value> = site["frames"].as_array().unwrap().iter().collect();
    // The PDB's names carry their parameters; the oracle's do not.
    let name = |f: &Value| {
        f.as_str()
            .unwrap_or("")
            .split('(')
            .next()
            .unwrap()
            .to_owned()
    };
    let got: Vec<String> = frames.iter().map(|f| name(&f["function"])).collect();
    let want_names: Vec<String> = want.iter().map(|f| name(&f["function"])).collect();
    assert_eq!(got, want_names, "{response:#}");
    assert_eq!(frames[0]["lineno"], want[0]["line"], "{response:#}");

    // Uploading the same files again sends no chunk.
    let (stored, duplicate, posts) = store.chunk_counts().await;
    let output = store.run(&[
        "debug-files",
        "upload",
        "--org",
        "acme",
        "--project",
        "web",
        elf_debug_file().to_str().unwrap(),
        sym.to_str().unwrap(),
        pdb.to_str().unwrap(),
    ]);
    assert!(
        output.contains("Nothing to upload"),
        "a repeated upload is answered from the records:\n{output}"
    );
    // The options GET shares the chunk endpoint's path; no chunk POST followed it.
    assert_eq!(store.chunk_counts().await, (stored, duplicate, posts + 1.0));
}

#[tokio::test]
async fn debug_files_upload_feeds_minidump_processing() {
    let Some(cli) = sentry_cli("minidump_from_the_store") else {
        return;
    };
    let store = StoreServer::start(cli, "");
    let v = minidump_variant("fp");
    store.run(&[
        "debug-files",
        "upload",
        "--org",
        "acme",
        "--project",
        "native",
        minidump_file(&v, "executable").to_str().unwrap(),
        minidump_file(&v, "debug").to_str().unwrap(),
    ]);
    let empty = tempfile::tempdir().unwrap();
    let dump = std::fs::read(minidump_file(&v, "minidump")).unwrap();
    let (content_type, body) = minidump_form(&dump, &empty_sources(empty.path()), &json!({}));
    let (status, response) = store
        .server
        .post_typed("/minidump", &content_type, body)
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let thread = crashing_thread(&response);
    let frames = thread["frames"].as_array().unwrap();
    let want = v["frames"].as_array().unwrap();
    assert!(frames.len() >= want.len(), "{frames:#?}");
    for (got, want) in frames.iter().zip(want) {
        assert_eq!(got["function"], want["function"], "{got:#}");
        assert_eq!(got["lineno"], want["lineno"], "{got:#}");
        assert_eq!(
            hex(&got["instruction_addr"]),
            hex(&want["instruction_addr"]),
            "{got:#}"
        );
    }
}

#[tokio::test]
async fn sourcemaps_upload_with_debug_ids_answers_symbolicate_js_from_the_store() {
    let Some(cli) = sentry_cli("sourcemaps_upload") else {
        return;
    };
    let store = StoreServer::start(cli, "");
    let dist = tempfile::tempdir().unwrap();
    for name in ["app.min.js", "app.min.js.map"] {
        std::fs::copy(
            fixtures().join("js/dist").join(name),
            dist.path().join(name),
        )
        .unwrap();
    }
    let dist_path = dist.path().to_str().unwrap();
    store.run(&["sourcemaps", "inject", dist_path]);
    let minified = std::fs::read_to_string(dist.path().join("app.min.js")).unwrap();
    let debug_id = minified
        .lines()
        .find_map(|l| l.strip_prefix("//# debugId="))
        .expect("sentry-cli injected a debug id")
        .trim()
        .to_owned();
    // The injected snippet is a line of its own before the code (after a blank one).
    let lines_before = minified
        .lines()
        .position(|l| l.contains("_sentryDebugIds"))
        .unwrap() as u64
        + 1;
    store.run(&[
        "sourcemaps",
        "upload",
        "--org",
        "acme",
        "--project",
        "web",
        dist_path,
    ]);

    let manifest = common::fixture_json("js/manifest.json");
    let frame = &manifest["frames"][0];
    let empty = tempfile::tempdir().unwrap();
    let abs_path = "https://example.com/static/app.min.js";
    let (status, response) = store
        .server
        .post(
            "/symbolicate-js",
            &json!({
                "source": {"id": "sentry:project", "type": "sentry",
                           "url": "http://127.0.0.1:9/api/0/projects/acme/web/artifact-lookup/",
                           "token": "unused"},
                "sources": empty_sources(empty.path()),
                "modules": [{"type": "sourcemap", "code_file": abs_path, "debug_id": debug_id}],
                "stacktraces": [{"frames": [{
                    "abs_path": abs_path,
                    "lineno": frame["minified"]["line"].as_u64().unwrap() + lines_before,
                    "colno": frame["minified"]["column"],
                    "function": frame["minified"]["function"],
                }]}],
                "options": {"apply_source_context": true},
                "scraping": {"enabled": false, "allowed_origins": []},
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let got = &response["stacktraces"][0]["frames"][0];
    assert_eq!(
        got["function"], frame["original"]["function"],
        "{response:#}"
    );
    assert_eq!(got["lineno"], frame["original"]["line"], "{response:#}");
    assert!(
        got["abs_path"]
            .as_str()
            .unwrap_or_default()
            .ends_with(frame["original"]["file"].as_str().unwrap()),
        "{response:#}"
    );
}

#[tokio::test]
async fn upload_proguard_answers_symbolicate_jvm_from_the_store() {
    let Some(cli) = sentry_cli("upload_proguard") else {
        return;
    };
    let store = StoreServer::start(cli, "");
    let mapping = fixtures().join("jvm/inline.txt");
    let mapping = mapping.to_str().unwrap();
    let output = store.run(&["proguard", "uuid", mapping]);
    // stdout has the UUID alone; stderr may have warnings.
    let uuid = output
        .lines()
        .map(str::trim)
        .find(|l| l.len() == 36 && l.chars().all(|c| c == '-' || c.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no UUID in {output}"))
        .to_owned();
    assert_eq!(uuid.len(), 36, "a UUID: {uuid}");
    store.run(&[
        "upload-proguard",
        "--org",
        "acme",
        "--project",
        "android",
        mapping,
    ]);
    let empty = tempfile::tempdir().unwrap();
    let (status, response) = store
        .server
        .post(
            "/symbolicate-jvm",
            &json!({
                "platform": "java",
                "sources": empty_sources(empty.path()),
                "modules": [{"type": "proguard", "uuid": uuid}],
                "exceptions": [],
                "stacktraces": [{"frames": [{"module": "a.a", "function": "onCreate",
                                             "lineno": 2, "index": 0}]}],
                "classes": ["a.a"],
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(
        response["classes"]["a.a"], "org.birdwatch.app.SightingActivity",
        "{response:#}"
    );
    let frame = &response["stacktraces"][0]["frames"][0];
    assert_eq!(
        frame["module"], "org.birdwatch.app.SightingActivity",
        "{response:#}"
    );
    assert_eq!(frame["function"], "onCreate", "{response:#}");
    assert_eq!(frame["lineno"], 30, "{response:#}");
}

/// A valid ELF debug file of about `size` bytes: the fixture with incompressible
/// bytes after it (symbolic reads an ELF by its headers and ignores trailing data).
fn large_debug_file(dir: &Path, size: usize) -> PathBuf {
    let mut data = std::fs::read(elf_debug_file()).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < size {
        // xorshift: bytes gzip cannot shrink, so each chunk is sent at full size.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    let path = dir.join("large.debug");
    std::fs::write(&path, data).unwrap();
    path
}

#[tokio::test]
async fn an_upload_killed_halfway_resumes_with_the_missing_chunks_only() {
    let Some(cli) = sentry_cli("resumed_upload") else {
        return;
    };
    let store = StoreServer::start(
        cli,
        "{chunk_size: 64KiB, chunks_per_request: 1, concurrency: 1}",
    );
    let work = tempfile::tempdir().unwrap();
    let file = large_debug_file(work.path(), 24 * 1024 * 1024);
    let total = std::fs::metadata(&file).unwrap().len().div_ceil(64 * 1024) as f64;
    let args = [
        "debug-files",
        "upload",
        "--org",
        "acme",
        "--project",
        "web",
        file.to_str().unwrap(),
    ];
    let mut child = store
        .command(WRITE_TOKEN, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let (stored, _, _) = store.chunk_counts().await;
        if stored >= 20.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "sentry-cli sent {stored} chunks in a minute"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "sentry-cli ended early"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (first, _, _) = store.chunk_counts().await;
    assert!(first < total, "killed before the end: {first} of {total}");

    let output = store.run(&args);
    let (stored, duplicate, _) = store.chunk_counts().await;
    assert_eq!(
        stored,
        total,
        "the second run sent the {} missing chunks:\n{output}",
        total - first
    );
    assert_eq!(duplicate, 0.0, "no chunk was sent twice:\n{output}");

    // The file is in the store: its DWARF answers.
    let empty = tempfile::tempdir().unwrap();
    let mut request = elf_request(empty_sources(empty.path()));
    request["modules"][0]["debug_file"] = json!("large.debug");
    let (_, response) = store.server.post("/symbolicate", &request).await;
    assert_elf_symbolicated(&response);

    // Its chunks went once it was assembled.
    let chunks_left = common::files_under(store.store.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("sentry-cli/chunks"))
        .count();
    assert_eq!(chunks_left, 0);
}

async fn post_chunks(
    server: &Server,
    token: &str,
    parts: &[(&str, &str, Vec<u8>)],
) -> (StatusCode, Value) {
    let parts: Vec<common::FormPart> = parts
        .iter()
        .map(|(field, name, data)| common::FormPart {
            name: field,
            filename: Some(name),
            data,
        })
        .collect();
    let (content_type, body) = common::multipart(&parts);
    let response = common::client()
        .post(format!(
            "{}/api/0/organizations/acme/chunk-upload/",
            server.url
        ))
        .bearer_auth(token)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn sha1(data: &[u8]) -> String {
    use sha1::Digest;
    hex::encode(sha1::Sha1::digest(data))
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test]
async fn bad_tokens_bad_checksums_and_bad_files_are_refused_and_nothing_is_published() {
    let Some(cli) = sentry_cli("refusals") else {
        return;
    };
    let store = StoreServer::start(cli, "{chunk_size: 1KiB}");
    let url = |path: &str| format!("{}{path}", store.server.url);
    let options = "/api/0/organizations/acme/chunk-upload/";

    // Tokens: none, unknown, read-only.
    let response = common::client().get(url(options)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = common::client()
        .get(url(options))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = common::client()
        .get(url(options))
        .bearer_auth(READ_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let answer: Value = common::client()
        .get(url(options))
        .bearer_auth(WRITE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["chunkSize"], 1024, "{answer}");
    assert_eq!(answer["compression"], json!(["gzip"]), "{answer}");
    // sentry-cli itself, with a bad token, fails and says why.
    let output = store
        .command(
            "not-a-token",
            &[
                "debug-files",
                "upload",
                "--org",
                "acme",
                "--project",
                "web",
                elf_debug_file().to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    assert!(!output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("401"), "{}", text(&output));

    // A chunk whose content is not what its name says.
    let data = b"some chunk".to_vec();
    let wrong = sha1(b"another chunk");
    let (status, body) = post_chunks(
        &store.server,
        WRITE_TOKEN,
        &[("file", &wrong, data.clone())],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("bad checksum"),
        "{body}"
    );
    // Gzip the same way; and a chunk past chunk_size once decompressed.
    let (status, body) = post_chunks(
        &store.server,
        WRITE_TOKEN,
        &[("file_gzip", &wrong, gzip(&data))],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("bad checksum"),
        "{body}"
    );
    let big = vec![0u8; 4096];
    let (status, body) = post_chunks(
        &store.server,
        WRITE_TOKEN,
        &[("file_gzip", &sha1(&big), gzip(&big))],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("chunk_size"),
        "{body}"
    );
    // A name that is not a checksum never names a path.
    let (status, body) = post_chunks(
        &store.server,
        WRITE_TOKEN,
        &[("file", "../../etc/passwd", data.clone())],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // The refused chunk is not held: assembling asks for it.
    let assemble = |body: Value| {
        let url = url("/api/0/projects/acme/web/files/difs/assemble/");
        async move {
            let response = common::client()
                .post(url)
                .bearer_auth(WRITE_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = assemble(json!({
        wrong.clone(): {"name": "x.debug", "chunks": [wrong.clone()]},
    }))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[&wrong]["state"], "not_found", "{body}");
    assert_eq!(body[&wrong]["missingChunks"], json!([wrong]), "{body}");

    // Good chunks that join into a file other than the one named: an error, nothing
    // published.
    let good = sha1(&data);
    let (status, _) =
        post_chunks(&store.server, WRITE_TOKEN, &[("file", &good, data.clone())]).await;
    assert_eq!(status, StatusCode::OK);
    let claimed = sha1(b"a different file");
    let (_, body) = assemble(json!({
        claimed.clone(): {"name": "x.debug", "chunks": [good.clone()]},
    }))
    .await;
    assert_eq!(body[&claimed]["state"], "error", "{body}");
    assert!(
        body[&claimed]["detail"]
            .as_str()
            .unwrap()
            .contains("bad checksum"),
        "{body}"
    );
    // A file that is no debug file: the store's reason.
    let (status, _) =
        post_chunks(&store.server, WRITE_TOKEN, &[("file", &good, data.clone())]).await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = assemble(json!({
        good.clone(): {"name": "x.debug", "chunks": [good.clone()]},
    }))
    .await;
    assert_eq!(body[&good]["state"], "error", "{body}");
    assert!(
        !body[&good]["detail"].as_str().unwrap().is_empty(),
        "{body}"
    );
    // Malformed requests name what is wrong.
    let (status, body) = assemble(json!({"zz": {"name": "x", "chunks": []}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = assemble(json!({good.clone(): {"chunks": [good.clone()]}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("name"), "{body}");

    // Nothing of any of it was published: only the state area holds files.
    let published: Vec<PathBuf> = common::files_under(store.store.path())
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains("sentry-cli/"))
        .collect();
    assert!(published.is_empty(), "{published:?}");
}

#[tokio::test]
async fn chunks_of_abandoned_uploads_are_removed_and_resumable_ones_kept() {
    let Some(cli) = sentry_cli("chunk_sweep") else {
        return;
    };
    let store = StoreServer::start(cli, "{chunk_max_age: 2s}");
    let chunk_file = |sha1: &str| {
        store
            .store
            .path()
            .join("state/sentry-cli/chunks")
            .join(sha1)
    };
    let [abandoned, resumed, other, late] =
        [&b"abandoned"[..], b"resumed", b"other", b"late"].map(|d| (d.to_vec(), sha1(d)));
    for (data, sum) in [&abandoned, &resumed] {
        let (status, body) =
            post_chunks(&store.server, WRITE_TOKEN, &[("file", sum, data.clone())]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert!(chunk_file(&abandoned.1).is_file() && chunk_file(&resumed.1).is_file());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // The upload of `resumed` goes on: its file is assembled, naming it.
    let file = sha1(b"a file of two chunks");
    let response = common::client()
        .post(format!(
            "{}/api/0/projects/acme/web/files/difs/assemble/",
            store.server.url
        ))
        .bearer_auth(WRITE_TOKEN)
        .json(&json!({file.clone(): {"name": "f.debug", "chunks": [resumed.1, other.1]}}))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body[&file]["missingChunks"], json!([other.1]), "{body}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // Any request sweeps.
    let (status, _) = post_chunks(
        &store.server,
        WRITE_TOKEN,
        &[("file", &late.1, late.0.clone())],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !chunk_file(&abandoned.1).exists(),
        "the abandoned chunk was removed"
    );
    assert!(
        chunk_file(&resumed.1).is_file(),
        "the resumed upload's chunk was kept"
    );
    assert!(chunk_file(&late.1).is_file());
    assert_eq!(
        store
            .counter("sentry_cli_chunks_total", &[("outcome", "removed")])
            .await,
        1.0
    );
}

/// An Android library without a build id, uploaded by sentry-cli as a team uploads its
/// unstripped libraries: the store places it under its debug id, and the minidump whose
/// module list names the APK (its code id Breakpad's hash of the code) is walked and
/// symbolicated from the store alone. Before, the store had no place for it and refused
/// the upload.
#[tokio::test]
async fn an_apk_library_without_a_build_id_from_the_store() {
    let Some(cli) = sentry_cli("apk_library_from_the_store") else {
        return;
    };
    let store = StoreServer::start(cli, "");
    let apk = fixtures().join("apk");
    store.run(&[
        "debug-files",
        "upload",
        "--org",
        "acme",
        "--project",
        "android",
        apk.join("libnoid.so").to_str().unwrap(),
    ]);
    let expected: Value =
        serde_json::from_slice(&std::fs::read(apk.join("expected.json")).unwrap()).unwrap();
    let empty = tempfile::tempdir().unwrap();
    let dump = std::fs::read(apk.join("crash-noid.dmp")).unwrap();
    let (content_type, body) = minidump_form(&dump, &empty_sources(empty.path()), &json!({}));
    let (status, response) = store
        .server
        .post_typed("/minidump", &content_type, body)
        .await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    let frames = crashing_thread(&response)["frames"]
        .as_array()
        .unwrap()
        .clone();
    let want = expected["noid"]["frames"].as_array().unwrap();
    assert_eq!(frames.len(), want.len(), "{response:#}");
    for (got, want) in frames.iter().zip(want) {
        assert_eq!(got["function"], want["function"], "{got:#}");
        assert_eq!(got["lineno"], want["lineno"], "{got:#}");
    }
}
