//! The debuginfod front (`/buildid/<id>/...`) and debuginfod sources, with elfutils' own
//! clients and server (Debian's `debuginfod` package, installed by scripts/test.sh) and
//! Debian's gdb: the real omnisym on loopback, serving files that `omnisym sort` laid out
//! in the unified layout on a filesystem source. Every client gets its own
//! `DEBUGINFOD_CACHE_PATH`, so nothing is answered from an earlier run's cache.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use axum::http::StatusCode;
use common::{Server, client, fixtures, free_port};
use serde_json::json;

/// What the program's source says; the tests find lines by these markers.
const PROGRAM: &str = r#"#include <stdio.h>

__attribute__((noinline)) int work(int x)
{
    int y = x * 3; /* @line work-body */
    return y + 1; /* @line work-return */
}

int twice(int x);

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", work(twice(argc))); /* @line main-call */
    return 0;
}
"#;

/// A second file of the program, so that a request can need two source files.
const UTIL: &str = r#"__attribute__((noinline)) int twice(int x)
{
    return x * 2; /* @line twice-body */
}
"#;

/// A program built by Debian's gcc with `-g`: the full build, its debug companion
/// (`objcopy --only-keep-debug`) and the stripped executable (`strip -s`: no symbols
/// at all, so only the debug file can name a function).
struct Program {
    dir: tempfile::TempDir,
    source: PathBuf,
    full: PathBuf,
    debug: PathBuf,
    exe: PathBuf,
    build_id: String,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds the program in a temp dir. With `prefix`, the DWARF records the source under
/// that directory (`-fdebug-prefix-map`); without, under its real path, where elfutils'
/// server reads it.
fn build(prefix: Option<&str>) -> Program {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("prog.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let util = dir.path().join("util.c");
    std::fs::write(&util, UTIL).unwrap();
    let full = dir.path().join("prog.full");
    let mut gcc = Command::new("gcc");
    gcc.current_dir(dir.path())
        .args(["-g", "-O0", "-Wl,--build-id=sha1", "-o"])
        .arg(&full)
        .arg(&source)
        .arg(&util);
    if let Some(prefix) = prefix {
        gcc.arg(format!(
            "-fdebug-prefix-map={}={prefix}",
            dir.path().display()
        ));
    }
    run(&mut gcc);
    let debug = dir.path().join("prog.debug");
    let exe = dir.path().join("prog");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    run(Command::new("strip")
        .arg("-s")
        .arg(&full)
        .arg("-o")
        .arg(&exe));
    let notes = stdout(&run(Command::new("readelf").arg("-n").arg(&exe)));
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a GNU build id")
        .trim()
        .to_owned();
    Program {
        dir,
        source,
        full,
        debug,
        exe,
        build_id,
    }
}

impl Program {
    /// The address of `work`'s line with `marker`, from the full build: `nm` for the
    /// function, `addr2line` (binutils, not omnisym) for the line of each address.
    fn address_of(&self, marker: &str) -> (u64, u32) {
        self.address_in("work", PROGRAM, marker)
    }

    /// [`Self::address_of`] for `function`, whose file's text is `text`.
    fn address_in(&self, function: &str, text: &str, marker: &str) -> (u64, u32) {
        let line = text
            .lines()
            .position(|l| l.contains(marker))
            .expect("marker in the program") as u32
            + 1;
        let nm = stdout(&run(Command::new("nm").arg(&self.full)));
        let work = nm
            .lines()
            .find(|l| l.ends_with(&format!(" T {function}")))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .expect("work in nm's list");
        for addr in work..work + 64 {
            let out = stdout(&run(Command::new("addr2line")
                .arg("-e")
                .arg(&self.full)
                .arg(format!("{addr:#x}"))));
            if out.trim().ends_with(&format!(":{line}")) {
                return (addr, line);
            }
        }
        panic!("no address of line {line} in {function}");
    }
}

/// `omnisym sort -o <dir> files...`: the unified layout a filesystem source serves.
fn sort(files: &[&Path]) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    run(Command::new(common::binary())
        .arg("sort")
        .arg("-o")
        .arg(out.path())
        .args(files)
        .env_remove("RUST_LOG"));
    out
}

fn filesystem_source(root: &Path) -> String {
    format!(
        "sources:\n  - {{id: sorted, type: filesystem, path: \"{}\", layout: {{type: unified}}}}\n",
        root.display()
    )
}

/// An elfutils client command with its own cache, asking `url`.
fn elfutils(program: &str, url: &str, cache: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("DEBUGINFOD_URLS", url)
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env("DEBUGINFOD_TIMEOUT", "30")
        .env_remove("DEBUGINFOD_HEADERS_FILE")
        .stdin(Stdio::null());
    cmd
}

/// `debuginfod-find args...`: the path of the file it fetched, or its failure.
fn find(url: &str, cache: &Path, args: &[&str]) -> Result<PathBuf, String> {
    find_with(elfutils("debuginfod-find", url, cache).args(args))
}

fn find_with(cmd: &mut Command) -> Result<PathBuf, String> {
    let out = cmd.output().expect("debuginfod-find runs");
    if out.status.success() {
        Ok(PathBuf::from(stdout(&out).trim()))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The minidump fixture's source bundle (`/build/omnisym-minidump/crash.c`) and build id.
fn bundle_fixture() -> (PathBuf, String, String) {
    let variant = common::minidump_variant("fp");
    let bundle = common::minidump_file(&variant, "source_bundle");
    let code_id = variant["code_id"].as_str().unwrap().to_owned();
    (bundle, code_id, "/build/omnisym-minidump/crash.c".into())
}

#[tokio::test]
async fn debuginfod_find_fetches_debuginfo_executable_sources_and_sections() {
    let program = build(Some("/build/omnisym-debuginfod"));
    let (bundle, bundle_id, bundle_path) = bundle_fixture();
    let embedded = common::embedded_probe();
    let root = sort(&[&program.debug, &program.exe, &bundle, &embedded.path]);
    let server = Server::start(&filesystem_source(root.path()));
    let caches = tempfile::tempdir().unwrap();
    let url = server.url.clone();
    let id = program.build_id.clone();

    // Each run asks the server: a fresh cache per command.
    let cache = |name: &str| caches.path().join(name);
    let debuginfo = find(&url, &cache("debuginfo"), &["debuginfo", &id]).unwrap();
    assert!(std::fs::read(&debuginfo).unwrap() == std::fs::read(&program.debug).unwrap());
    let executable = find(&url, &cache("executable"), &["executable", &id]).unwrap();
    assert!(std::fs::read(&executable).unwrap() == std::fs::read(&program.exe).unwrap());

    // From a source bundle of the build id, by the path the build recorded.
    let source = find(
        &url,
        &cache("bundle"),
        &["source", &bundle_id, &bundle_path],
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(source).unwrap(),
        std::fs::read_to_string(fixtures().join("minidump/crash.c")).unwrap()
    );
    // From sources embedded in the debug file's DWARF 5 line table.
    let source = find(
        &url,
        &cache("embedded"),
        &[
            "source",
            &embedded.code_id,
            "/build/omnisym-fixtures/crash.c",
        ],
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(source).unwrap(),
        std::fs::read_to_string(fixtures().join("native/crash.c")).unwrap()
    );
    // A source that no file of the build has.
    let missing = find(
        &url,
        &cache("missing"),
        &["source", &bundle_id, "/build/omnisym-minidump/nope.c"],
    );
    assert!(missing.is_err(), "{missing:?}");

    // A section of the debug file, as binutils cuts it out.
    let section = find(&url, &cache("section"), &["section", &id, ".debug_info"]).unwrap();
    let want = program.dir.path().join("debug_info.bin");
    run(Command::new("objcopy")
        .arg(format!("--dump-section=.debug_info={}", want.display()))
        .arg(&program.debug)
        .arg(program.dir.path().join("scratch")));
    assert!(std::fs::read(section).unwrap() == std::fs::read(&want).unwrap());

    // The headers elfutils' server sends, for GET and HEAD alike.
    let http = client();
    let debug_len = std::fs::metadata(&program.debug).unwrap().len().to_string();
    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        let resp = http
            .request(method.clone(), format!("{url}/buildid/{id}/debuginfo"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{method}");
        let headers = resp.headers();
        assert_eq!(headers["content-length"], debug_len.as_str(), "{method}");
        assert_eq!(headers["x-debuginfod-size"], debug_len.as_str(), "{method}");
        assert_eq!(headers["x-debuginfod-file"], "debuginfo", "{method}");
    }
    // `.text` has no bytes in a debug file: it comes from the executable.
    let resp = http
        .get(format!("{url}/buildid/{id}/section/.text"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-debuginfod-file"], "executable");
    assert!(!resp.bytes().await.unwrap().is_empty());
    // The source's headers name the file and the bundle it came out of.
    let resp = http
        .get(format!("{url}/buildid/{bundle_id}/source{bundle_path}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-debuginfod-file"], "crash.c");
    assert_eq!(resp.headers()["x-debuginfod-archive"], "sourcebundle");

    // Malformed requests are refused naming why; unknown ids are not there.
    for (path, status, why) in [
        ("/buildid/xyz/debuginfo", 400, "build id"),
        ("/buildid/abcd/other", 400, "not a debuginfod request"),
        ("/buildid/abcd/section/a%2Fb", 400, "section name"),
        ("/buildid/0123456789abcdef/debuginfo", 404, ""),
    ] {
        let resp = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{path}");
        assert!(resp.text().await.unwrap().contains(why), "{path}");
    }
    let long = format!("/buildid/{id}/source/{}", "a".repeat(5000));
    let resp = http.get(format!("{url}{long}")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await.unwrap().contains("max_path_length"));
}

#[tokio::test]
async fn a_source_past_max_source_size_is_not_served() {
    let (bundle, bundle_id, bundle_path) = bundle_fixture();
    let root = sort(&[&bundle]);
    let server = Server::start(&format!(
        "{}debuginfod: {{max_source_size: 100}}\n",
        filesystem_source(root.path())
    ));
    let resp = client()
        .get(format!(
            "{}/buildid/{bundle_id}/source{bundle_path}",
            server.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(
        server.log_shows("debuginfod.max_source_size"),
        "{}",
        server.log()
    );
}

#[tokio::test]
async fn gdb_names_the_function_and_line_of_a_stripped_binary() {
    let program = build(Some("/build/omnisym-debuginfod"));
    let root = sort(&[&program.debug]);
    let server = Server::start(&filesystem_source(root.path()));
    let (addr, line) = program.address_of("@line work-return");
    let nm = Command::new("nm").arg(&program.exe).output().unwrap();
    assert!(
        String::from_utf8_lossy(&nm.stderr).contains("no symbols"),
        "the executable gdb reads is stripped"
    );

    let cache = tempfile::tempdir().unwrap();
    let out = run(elfutils("gdb", &server.url, cache.path())
        .args(["-nx", "-batch", "-iex", "set debuginfod enabled on", "-ex"])
        .arg(format!("info line *{addr:#x}"))
        .arg(&program.exe));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "Line {line} of \"/build/omnisym-debuginfod/prog.c\""
        )) && text.contains("<work+"),
        "gdb said: {text}"
    );
}

#[tokio::test]
async fn the_fronts_token_guards_debuginfod_unless_it_is_open() {
    let program = build(None);
    let root = sort(&[&program.debug]);
    let source = filesystem_source(root.path());
    let caches = tempfile::tempdir().unwrap();
    let id = program.build_id.clone();

    let server = Server::start(&format!("{source}fronts: {{token: s3cret}}\n"));
    let resp = client()
        .get(format!("{}/buildid/{id}/debuginfo", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let refused = find(
        &server.url,
        &caches.path().join("none"),
        &["debuginfo", &id],
    );
    assert!(refused.is_err(), "{refused:?}");
    // elfutils' clients (gdb's too) send the headers of DEBUGINFOD_HEADERS_FILE.
    let headers = caches.path().join("headers");
    std::fs::write(&headers, "Authorization: Bearer s3cret\n").unwrap();
    let found = find_with(
        elfutils("debuginfod-find", &server.url, &caches.path().join("token"))
            .env("DEBUGINFOD_HEADERS_FILE", &headers)
            .args(["debuginfo", &id]),
    )
    .unwrap();
    assert!(std::fs::read(found).unwrap() == std::fs::read(&program.debug).unwrap());
    drop(server);

    let server = Server::start(&format!(
        "{source}fronts: {{token: s3cret, open: [debuginfod]}}\n"
    ));
    let found = find(
        &server.url,
        &caches.path().join("open"),
        &["debuginfo", &id],
    )
    .unwrap();
    assert!(std::fs::read(found).unwrap() == std::fs::read(&program.debug).unwrap());
    // Open is per front: `/proxy` still wants the token.
    let resp = client()
        .get(format!("{}/proxy/prog/elf-buildid-{id}/prog", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}

/// A team hands its debuggers a read token of the store, not the operator's
/// `fronts.token`: with the store (a tree `omnisym sort` wrote) as the only place the
/// file is, `debuginfod-find` reads it with that token, and with no token or an
/// unknown one it does not.
#[tokio::test]
async fn a_store_read_token_opens_debuginfod_to_the_store() {
    let program = build(None);
    let store = sort(&[&program.debug]);
    let caches = tempfile::tempdir().unwrap();
    let id = program.build_id.clone();
    let server = Server::start(&format!(
        "fronts: {{token: s3cret}}\nstore:\n  backend: {{type: filesystem, path: \"{}\"}}\n  tokens:\n    - {{token: r3ad, access: read}}\n",
        store.path().display()
    ));
    let headers = |name: &str, value: &str| {
        let path = caches.path().join(name);
        std::fs::write(&path, format!("Authorization: Bearer {value}\n")).unwrap();
        path
    };
    let with_token = |name: &str, value: &str| {
        find_with(
            elfutils("debuginfod-find", &server.url, &caches.path().join(name))
                .env(
                    "DEBUGINFOD_HEADERS_FILE",
                    headers(&format!("{name}.headers"), value),
                )
                .args(["debuginfo", &id]),
        )
    };
    let refused = with_token("unknown", "r3ad-not");
    assert!(refused.is_err(), "an unknown token was let in: {refused:?}");
    let refused = find(
        &server.url,
        &caches.path().join("none"),
        &["debuginfo", &id],
    );
    assert!(refused.is_err(), "no token was let in: {refused:?}");
    let found = with_token("read", "r3ad").unwrap();
    assert!(std::fs::read(found).unwrap() == std::fs::read(&program.debug).unwrap());
}

/// Where the requests load the program.
const BASE: u64 = 0x5555_5555_0000;

/// elfutils' own server, indexing `dir` (`-F`: ELF files in a directory), on a free
/// loopback port; killed on drop.
struct ElfutilsServer {
    child: std::process::Child,
    url: String,
    _db: tempfile::TempDir,
}

impl ElfutilsServer {
    fn start(dir: &Path, build_id: &str) -> ElfutilsServer {
        let db = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new("debuginfod")
            .arg("-F")
            .arg(dir)
            .args(["-p", &port.to_string(), "-d"])
            .arg(db.path().join("index.sqlite"))
            .args(["-t", "0", "-g", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("elfutils' debuginfod starts");
        let server = ElfutilsServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _db: db,
        };
        // Ready once its first scan has indexed the build id.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let probe = format!("{}/buildid/{build_id}/debuginfo", server.url);
        loop {
            let ok = Command::new("curl")
                .args(["-sf", "-o", "/dev/null", &probe])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return server;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "elfutils' debuginfod did not index {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for ElfutilsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn source_context_comes_from_an_elfutils_debuginfod_source() {
    // Built without a prefix map: elfutils' server reads the source where the DWARF
    // says it is.
    let program = build(None);
    let indexed = tempfile::tempdir().unwrap();
    std::fs::copy(&program.debug, indexed.path().join("prog.debug")).unwrap();
    let upstream = ElfutilsServer::start(indexed.path(), &program.build_id);
    let (addr, line) = program.address_of("@line work-return");

    // The debug file and the source both come from elfutils' server.
    let server = Server::start("");
    let source = json!({
        "id": "elfutils",
        "type": "http",
        "url": format!("{}/buildid/", upstream.url),
        "layout": {"type": "debuginfod"},
    });
    let body = json!({
        "sources": [source],
        "modules": [{
            "type": "elf",
            "code_id": program.build_id,
            "code_file": "prog",
            "image_addr": format!("{BASE:#x}"),
            "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", BASE + addr),
            "adjust_instruction_addr": false,
        }]}],
        "options": {"apply_source_context": true, "dif_candidates": true},
    });
    let (status, answer) = server.post("/symbolicate", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let frame = &answer["stacktraces"][0]["frames"][0];
    assert_eq!(frame["function"], "work", "{answer}");
    assert_eq!(frame["lineno"], line, "{answer}");
    assert_eq!(
        frame["abs_path"].as_str(),
        program.source.to_str(),
        "{answer}"
    );
    let want = PROGRAM.lines().nth(line as usize - 1).unwrap();
    assert_eq!(frame["context_line"], want, "{answer}");
    assert_eq!(
        frame["pre_context"].as_array().unwrap().len(),
        5,
        "{answer}"
    );
    // The download is reported on the module.
    let candidates = &answer["modules"][0]["candidates"];
    let asked = candidates.as_array().unwrap().iter().any(|c| {
        c["location"]
            .as_str()
            .is_some_and(|l| l.contains("/source/"))
    });
    assert!(asked, "{candidates}");
}

#[tokio::test]
async fn source_context_asks_debuginfod_sources_for_at_most_the_configured_files() {
    let program = build(None);
    let indexed = tempfile::tempdir().unwrap();
    std::fs::copy(&program.debug, indexed.path().join("prog.debug")).unwrap();
    let upstream = ElfutilsServer::start(indexed.path(), &program.build_id);
    // Two frames in two files; one file is all a request may ask for.
    let (work, _) = program.address_of("@line work-return");
    let (twice, _) = program.address_in("twice", UTIL, "@line twice-body");
    let server = Server::start("debuginfod: {source_files_per_request: 1}\n");
    let frame = |addr: u64| {
        json!({
            "instruction_addr": format!("{:#x}", BASE + addr),
            "adjust_instruction_addr": false,
        })
    };
    let body = json!({
        "sources": [{
            "id": "elfutils",
            "type": "http",
            "url": format!("{}/buildid/", upstream.url),
            "layout": {"type": "debuginfod"},
        }],
        "modules": [{
            "type": "elf",
            "code_id": program.build_id,
            "code_file": "prog",
            "image_addr": format!("{BASE:#x}"),
            "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [frame(twice), frame(work)]}],
        "options": {"apply_source_context": true},
    });
    let (status, answer) = server.post("/symbolicate", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let frames = answer["stacktraces"][0]["frames"].as_array().unwrap();
    let functions: Vec<&str> = frames
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert_eq!(functions, ["twice", "work"], "{answer}");
    let with_context = frames
        .iter()
        .filter(|f| f.get("context_line").is_some_and(|l| !l.is_null()))
        .count();
    assert_eq!(with_context, 1, "{answer}");
}
