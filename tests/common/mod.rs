//! Test harness: starts the real `omnisym` binary on a loopback port with a temporary
//! config and cache, and a real HTTP symbol server (axum) serving a directory.

#![allow(dead_code)]

pub mod fault_proxy;
pub mod gcs;
pub mod prometheus;
pub mod s3;
pub mod symbfile;
pub mod tmpfs;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as AxPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Set to `skip` to run the suite where the tests that need root cannot run (a tmpfs
/// mount, a volume handed to the image's user); CI runs as root.
pub const ROOT_TESTS: &str = "OMNISYM_ROOT_TESTS";
/// Set to `skip` to run the suite without self-hosted Sentry's files beside the clone
/// (`../shared/peer/self-hosted`), as CI has them.
pub const SELF_HOSTED: &str = "OMNISYM_SELF_HOSTED";

/// For a test that cannot run here: it passes, saying it skipped, only when `var` is
/// `skip`; else it fails with `why`, so that a missing prerequisite never looks like a
/// pass.
pub fn skip_or_fail(var: &str, test: &str, why: &str) {
    assert_eq!(
        std::env::var(var).as_deref(),
        Ok("skip"),
        "{test} cannot run: {why}. Set {var}=skip to run the suite without it"
    );
    println!("SKIPPED {test}: {why} ({var}=skip)");
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A file under `fixtures/`, parsed as JSON.
pub fn fixture_json(rel: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(rel)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The oracle of `fixtures/native`.
pub fn manifest() -> Value {
    fixture_json("native/manifest.json")
}

/// A hexadecimal address as the manifests and the answers write it (`"0x7f..."`).
pub fn hex(value: &Value) -> u64 {
    let s = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is not a hex string"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Where the unified layout (symsorter's) keeps the file of `kind` for debug or code id
/// `id`.
pub fn unified_path(id: &str, kind: &str) -> String {
    let hex = id.replace('-', "").to_lowercase();
    format!("{}/{}/{kind}", &hex[..2], &hex[2..])
}

/// Where the tests load the ELF fixture.
pub const ELF_BASE: u64 = 0x7f00_0000_0000;

pub fn object(name: &str) -> Value {
    manifest()["objects"][name].clone()
}

/// The ELF fixture's debug file.
pub fn elf_debug_file() -> PathBuf {
    fixtures().join("native/elf/crash.debug")
}

/// Native-layout path of the ELF debug file (GDB build-id convention).
pub fn elf_debug_path() -> String {
    let code_id = object("elf")["code_id"].as_str().unwrap().to_owned();
    format!("{}/{}.debug", &code_id[..2], &code_id[2..])
}

/// The ELF fixture as a request module, loaded at [`ELF_BASE`].
pub fn elf_module() -> Value {
    let elf = object("elf");
    serde_json::json!({
        "type": "elf",
        "debug_id": elf["debug_id"],
        "code_id": elf["code_id"],
        "code_file": "/usr/bin/crash",
        "debug_file": "crash",
        "image_addr": format!("{ELF_BASE:#x}"),
        "image_size": elf["image_size"],
    })
}

/// A request for the fixture's first probe address, with candidates.
pub fn elf_request(sources: Value) -> Value {
    let elf = object("elf");
    let rel = hex(&elf["probes"][0]["rel_addr"]);
    serde_json::json!({
        "sources": sources,
        "modules": [elf_module()],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", ELF_BASE + rel),
            "adjust_instruction_addr": false,
        }]}],
        "options": {"dif_candidates": true},
    })
}

/// Asserts the module was found and the frame resolved to the oracle's innermost function.
pub fn assert_elf_symbolicated(response: &Value) {
    assert_eq!(response["status"], "completed", "{response}");
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    let want = &object("elf")["probes"][0]["frames"][0];
    let frame = &response["stacktraces"][0]["frames"][0];
    assert_eq!(frame["status"], "symbolicated", "{frame}");
    assert_eq!(
        frame["function"].as_str().unwrap().split('(').next(),
        want["function"].as_str().unwrap().split('(').next()
    );
    assert_eq!(frame["lineno"], want["line"]);
}

/// Every regular file under `dir` at any depth, sorted (none when `dir` does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files.sort();
    files
}

/// One build of fixtures/minidump's crash.c (`fp` or `nofp`), as its manifest describes
/// it.
pub fn minidump_variant(name: &str) -> Value {
    let v = fixture_json("minidump/manifest.json")["variants"][name].clone();
    assert!(v.is_object(), "no variant {name} in the manifest");
    v
}

/// A file of a minidump variant (`minidump`, `executable`, `debug`, ...), as its
/// manifest names it.
pub fn minidump_file(variant: &Value, kind: &str) -> PathBuf {
    let files = &variant["files"];
    let name = files[kind]
        .as_str()
        .unwrap_or_else(|| panic!("`{kind}` is not a string in {files}"));
    fixtures().join("minidump").join(name)
}

/// The thread that crashed in a minidump's answer: the one thread `is_requesting`.
pub fn crashing_thread(answer: &Value) -> &Value {
    let threads = answer["stacktraces"].as_array().expect("stacktraces");
    let requesting: Vec<&Value> = threads
        .iter()
        .filter(|t| t["is_requesting"] == true)
        .collect();
    assert_eq!(requesting.len(), 1, "one requesting thread: {threads:#?}");
    requesting[0]
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`, `RssAnon`, ...); `None`
/// once the process is gone.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `VmHWM` (the peak resident set) of process `pid`, in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM").unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"))
}

/// A running omnisym process; killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
    pub cache_dir: PathBuf,
    log: Arc<Mutex<String>>,
    /// Lets the log's reader go on past the listening line (see [`Server::start_log_held`]).
    release_log: Option<std::sync::mpsc::Sender<Duration>>,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts with a fresh cache; `extra_yaml` is appended to the config.
    pub fn start(extra_yaml: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let mut server = Server::start_in(dir.path(), &cache_dir, extra_yaml);
        server._dir = Some(dir);
        server
    }

    /// [`Server::start`] with these variables added to the server's environment.
    pub fn start_with_env(extra_yaml: &str, env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let mut server = Server::spawn(dir.path(), &cache_dir, extra_yaml, env);
        server._dir = Some(dir);
        server
    }

    /// Starts on a given cache dir (to restart a server on the same cache).
    pub fn start_in(work: &Path, cache_dir: &Path, extra_yaml: &str) -> Server {
        Server::spawn(work, cache_dir, extra_yaml, &[])
    }

    /// [`Server::start`] without `RUST_LOG` (the config's `logging` rules), whose log is
    /// read only up to its listening line until [`Server::read_log`]: what it writes
    /// meanwhile fills its pipe and then waits, as behind a log collector that has
    /// fallen behind.
    pub fn start_log_held(extra_yaml: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let (release, held) = std::sync::mpsc::channel();
        let mut server = Server::spawn_with(dir.path(), &cache_dir, extra_yaml, &[], Some(held));
        server.release_log = Some(release);
        server._dir = Some(dir);
        server
    }

    /// Reads the log on from where [`Server::start_log_held`] stopped.
    pub fn read_log(&mut self) {
        self.read_log_paced(Duration::ZERO);
    }

    /// [`Server::read_log`], pausing `pace` after each line, as a log collector that
    /// keeps up only slowly.
    pub fn read_log_paced(&mut self, pace: Duration) {
        if let Some(release) = self.release_log.take() {
            let _ = release.send(pace);
        }
    }

    fn spawn(work: &Path, cache_dir: &Path, extra_yaml: &str, env: &[(&str, &str)]) -> Server {
        Server::spawn_with(work, cache_dir, extra_yaml, env, None)
    }

    /// `held`: without `RUST_LOG`, and the log read past the listening line only once
    /// a pace is sent on it (see [`Server::read_log_paced`]).
    fn spawn_with(
        work: &Path,
        cache_dir: &Path,
        extra_yaml: &str,
        env: &[(&str, &str)],
        held: Option<std::sync::mpsc::Receiver<Duration>>,
    ) -> Server {
        let config = work.join(format!("config-{}.yml", rand_suffix()));
        // Every test server is on loopback, so reserved addresses are allowed unless a test
        // says otherwise.
        let reserved = if extra_yaml.contains("connect_to_reserved_ips") {
            ""
        } else {
            "connect_to_reserved_ips: true\n"
        };
        // A test that needs a known address (a fleet's peers) binds it itself.
        let bind = if extra_yaml.starts_with("bind:") || extra_yaml.contains("\nbind:") {
            ""
        } else {
            "bind: 127.0.0.1:0\n"
        };
        std::fs::write(
            &config,
            format!(
                "{bind}cache_dir: {}\n{reserved}{extra_yaml}",
                cache_dir.display()
            ),
        )
        .unwrap();
        let mut command = Command::new(binary());
        command.args(["run", "--config"]).arg(&config);
        if held.is_some() {
            command.env_remove("RUST_LOG");
        } else {
            command.env("RUST_LOG", "omnisym=debug,info");
        }
        let mut child = command
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("omnisym starts");
        let (url, log) = await_listening_held(&mut child, held);
        Server {
            child,
            url,
            cache_dir: cache_dir.to_owned(),
            log,
            release_log: None,
            _dir: None,
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether the log shows `needle` within a few seconds: a line written as an
    /// answer goes out reaches the log's reader thread a moment after the answer.
    pub fn log_shows(&self, needle: &str) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM; the exit status if the process ended within `limit`.
    pub fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        terminate(&mut self.child, limit)
    }

    /// SIGTERM, without waiting for the process to end (see [`Server::wait_exit`]).
    pub fn signal_terminate(&self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: a plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }

    /// The exit status if the process ends within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, limit)
    }

    /// POSTs JSON; returns the status and the parsed body.
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.post_raw(path, serde_json::to_vec(body).unwrap()).await
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        self.post_typed(path, "application/json", body).await
    }

    /// POSTs `body` as `content_type` (a multipart form, say).
    pub async fn post_typed(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let request = client()
            .post(format!("{}{path}", self.url))
            .header("content-type", content_type)
            .body(body);
        send(request).await
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        send(client().get(format!("{}{path}", self.url))).await
    }

    /// `GET /metrics`, parsed as the Prometheus text exposition format.
    pub async fn scrape(&self) -> prometheus::Exposition {
        let resp = client()
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap();
        exposition(resp).await
    }

    /// [`Server::scrape`], or `None` when the server refused the request with 503, as it
    /// refuses any request while every connection slot is taken.
    pub async fn try_scrape(&self) -> Option<prometheus::Exposition> {
        let resp = client()
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap();
        if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            return None;
        }
        Some(exposition(resp).await)
    }
}

/// A `GET /metrics` answer, checked and parsed.
async fn exposition(resp: reqwest::Response) -> prometheus::Exposition {
    assert!(resp.status().is_success(), "{resp:?}");
    assert_eq!(
        resp.headers()["content-type"],
        "text/plain; version=0.0.4",
        "{resp:?}"
    );
    let text = resp.text().await.unwrap();
    prometheus::Exposition::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"))
}

/// Collects the stderr of a starting omnisym `child` into a log (on a thread of its own,
/// to the end) and waits for its line `omnisym listening on ADDR`. Returns ADDR (a URL)
/// and the log; kills the child and panics with what it logged when it exits first or
/// says nothing of the kind within 30 s.
pub fn await_listening(child: &mut Child) -> (String, Arc<Mutex<String>>) {
    await_listening_held(child, None)
}

/// [`await_listening`]; with `held`, the log is read past the listening line only once
/// a pace (a pause after each line) is sent on it, or its sender is dropped.
fn await_listening_held(
    child: &mut Child,
    held: Option<std::sync::mpsc::Receiver<Duration>>,
) -> (String, Arc<Mutex<String>>) {
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let log2 = log.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut pace = Duration::ZERO;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let listening = line.starts_with("omnisym listening on ");
            if let Some(addr) = line.strip_prefix("omnisym listening on ")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(addr.to_string());
            }
            log2.lock().unwrap().push_str(&format!("{line}\n"));
            if listening && let Some(held) = &held {
                pace = held.recv().unwrap_or_default();
            } else if !pace.is_zero() {
                std::thread::sleep(pace);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(url) => (url, log),
        Err(_) => {
            let _ = child.kill();
            panic!("omnisym did not start:\n{}", log.lock().unwrap());
        }
    }
}

/// SIGTERM to `child`; its exit status if it ended within `limit`.
pub fn terminate(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    wait_exit(child, limit)
}

/// `child`'s exit status if it ends within `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Runs `omnisym cleanup -c config [args]`; returns what it printed.
pub fn run_cleanup(config: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_omnisym"))
        .args(["cleanup", "-c"])
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// One field of a `multipart/form-data` body; `filename` makes it a file.
pub struct FormPart<'a> {
    pub name: &'a str,
    pub filename: Option<&'a str>,
    pub data: &'a [u8],
}

/// A `multipart/form-data` body; returns the content type and the body.
pub fn multipart(parts: &[FormPart]) -> (String, Vec<u8>) {
    let boundary = "----omnisym-minidump-test-3f9c2a71b8e4";
    let mut body = Vec::new();
    for part in parts {
        assert!(
            !part
                .data
                .windows(boundary.len())
                .any(|w| w == boundary.as_bytes()),
            "the boundary occurs in field {}",
            part.name
        );
        write!(
            body,
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"",
            part.name
        )
        .unwrap();
        match part.filename {
            Some(f) => write!(
                body,
                "; filename=\"{f}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .unwrap(),
            None => write!(body, "\r\n\r\n").unwrap(),
        }
        body.extend_from_slice(part.data);
        body.extend_from_slice(b"\r\n");
    }
    write!(body, "--{boundary}--\r\n").unwrap();
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// The form of a `/minidump` upload.
pub fn minidump_form(dump: &[u8], sources: &Value, options: &Value) -> (String, Vec<u8>) {
    let sources = serde_json::to_vec(sources).unwrap();
    let options = serde_json::to_vec(options).unwrap();
    multipart(&[
        FormPart {
            name: "upload_file_minidump",
            filename: Some("crash.dmp"),
            data: dump,
        },
        FormPart {
            name: "sources",
            filename: None,
            data: &sources,
        },
        FormPart {
            name: "options",
            filename: None,
            data: &options,
        },
    ])
}

/// Sends a request; returns the status and the body as JSON (or as a JSON string when
/// it is not JSON).
async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let resp = request.send().await.unwrap();
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
    let bytes = resp.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The omnisym binary the tests start: this build's, or the one `OMNISYM_BIN` names
/// (scripts/soak.sh runs a release build under the debug-built soak driver).
/// `omnisym sort -o <dir> files...` into a new directory (the unified layout).
pub fn sort_into_tempdir(files: &[&Path]) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(binary())
        .arg("sort")
        .arg("-o")
        .arg(out.path())
        .args(files)
        .env_remove("RUST_LOG")
        .status()
        .unwrap();
    assert!(status.success());
    out
}

pub fn binary() -> PathBuf {
    std::env::var_os("OMNISYM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_omnisym")))
}

fn rand_suffix() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One client for all requests: building one (TLS roots included) is slow enough to
/// serialise a burst of concurrent requests.
/// The fixture with sources embedded in its DWARF (fixtures/native-embedded), and the
/// first line record of its `dispatch`: the file, its code id, debug id, and that
/// line's address and number.
pub struct EmbeddedProbe {
    pub path: PathBuf,
    pub code_id: String,
    pub debug_id: String,
    pub addr: u64,
    pub line: u64,
}

pub fn embedded_probe() -> EmbeddedProbe {
    use symbolic::debuginfo::Object;
    let path = fixtures().join("native-embedded/crash.debug");
    let data = std::fs::read(&path).unwrap();
    let object = Object::parse(&data).unwrap();
    let session = object.debug_session().unwrap();
    let function = session
        .functions()
        .map(Result::unwrap)
        .find(|f| f.name.as_str() == "dispatch")
        .expect("the fixture has dispatch()");
    let line = function.lines.first().unwrap();
    EmbeddedProbe {
        code_id: object.code_id().unwrap().to_string(),
        debug_id: object.debug_id().to_string(),
        addr: line.address,
        line: line.line,
        path,
    }
}

/// A free loopback port: bound, read and let go, for a server to bind next.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap()
        })
        .clone()
}

/// Serves `app` on a loopback port for as long as the test's runtime lives; returns the
/// address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The candidates reported for the first module of a `/symbolicate` answer (none when it
/// lists none).
pub fn candidates(response: &Value) -> Vec<Value> {
    response["modules"][0]["candidates"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A symbol server on loopback serving `root`. `/slow/<ms>/<path>` delays, and every
/// hit is counted so tests can assert what was (not) fetched.
pub struct SymbolServer {
    pub url: String,
    pub hits: Arc<Mutex<Vec<String>>>,
    pub root: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct SymState {
    root: PathBuf,
    hits: Arc<Mutex<Vec<String>>>,
}

impl SymbolServer {
    pub async fn start() -> SymbolServer {
        Self::start_with(None).await
    }

    /// A symbol server with the ELF fixture's debug file at its native-layout path.
    pub async fn with_elf_debug() -> SymbolServer {
        let server = Self::start().await;
        server.put_elf_debug();
        server
    }

    /// The same server over HTTPS, with a freshly made self-signed certificate for
    /// `localhost`: no client trusts it unless told to skip certificate checks.
    pub async fn start_tls() -> SymbolServer {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(
            cert.signing_key.serialize_der().into(),
        );
        let config = tokio_rustls::rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        Self::start_with(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn start_with(tls: Option<tokio_rustls::TlsAcceptor>) -> SymbolServer {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let state = SymState {
            root: root.clone(),
            hits: hits.clone(),
        };
        let app = Router::new()
            .route("/slow/{ms}/{*path}", axum::routing::get(slow))
            .route("/{*path}", axum::routing::get(serve_file))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let url = match &tls {
            Some(_) => format!("https://localhost:{}/", addr.port()),
            None => format!("http://{addr}/"),
        };
        let task = tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    let listener = TlsListener {
                        tcp: listener,
                        acceptor,
                    };
                    axum::serve(listener, app).await.unwrap();
                }
                None => axum::serve(listener, app).await.unwrap(),
            }
        });
        SymbolServer {
            url,
            hits,
            root,
            _dir: dir,
            task,
        }
    }

    /// Places `src` at `rel` under the served root.
    pub fn put(&self, rel: &str, src: &Path) {
        let dest = self.root.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(src, dest).unwrap();
    }

    /// Places the ELF fixture's debug file at its native-layout path.
    pub fn put_elf_debug(&self) {
        self.put(&elf_debug_path(), &elf_debug_file());
    }

    pub fn put_bytes(&self, rel: &str, data: &[u8]) {
        let dest = self.root.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, data).unwrap();
    }

    pub fn remove(&self, rel: &str) {
        std::fs::remove_file(self.root.join(rel)).unwrap();
    }

    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

impl Drop for SymbolServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts TLS connections; a failed handshake (a client refusing the certificate) only
/// ends that connection.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(stream).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn serve_file(State(state): State<SymState>, AxPath(path): AxPath<String>) -> Response {
    state.hits.lock().unwrap().push(path.clone());
    file_response(&state.root, &path)
}

async fn slow(
    State(state): State<SymState>,
    AxPath((ms, path)): AxPath<(u64, String)>,
) -> Response {
    state.hits.lock().unwrap().push(format!("slow/{path}"));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    file_response(&state.root, &path)
}

fn file_response(root: &Path, path: &str) -> Response {
    if path.split('/').any(|c| c == "..") {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match std::fs::read(root.join(path)) {
        Ok(data) => Body::from(data).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The ELF fixture's debug file with its DWARF compressed by objcopy, and `.debug_str`
/// replaced by a GNU-style `.zdebug_str` ("ZLIB", the size, a zlib stream) of `inflated`
/// zero bytes: zeros deflate about 1000 to 1, so 256 MiB take some 256 KiB. The same
/// file `fixtures/native/section_bomb.sh` makes for measuring a release build.
pub fn section_bomb(inflated: u64) -> Vec<u8> {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let payload = dir.path().join("zdebug_str");
    let mut encoder = flate2::write::ZlibEncoder::new(
        std::fs::File::create(&payload).unwrap(),
        flate2::Compression::best(),
    );
    let zeros = vec![0u8; 1 << 20];
    let mut left = inflated;
    while left > 0 {
        let n = left.min(zeros.len() as u64);
        encoder.write_all(&zeros[..n as usize]).unwrap();
        left -= n;
    }
    encoder.finish().unwrap();
    let stream = std::fs::read(&payload).unwrap();
    let mut section = b"ZLIB".to_vec();
    section.extend_from_slice(&inflated.to_be_bytes());
    section.extend_from_slice(&stream);
    std::fs::write(&payload, &section).unwrap();

    let compressed = dir.path().join("compressed.debug");
    let bomb = dir.path().join("bomb.debug");
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let status = Command::new("objcopy")
            .args(args)
            .status()
            .expect("objcopy (binutils) runs");
        assert!(status.success(), "objcopy {args:?}");
    };
    objcopy(&[
        "--compress-debug-sections=zlib".as_ref(),
        elf_debug_file().as_os_str(),
        compressed.as_os_str(),
    ]);
    let add = format!(".zdebug_str={}", payload.display());
    objcopy(&[
        "--remove-section=.debug_str".as_ref(),
        "--add-section".as_ref(),
        add.as_ref(),
        compressed.as_os_str(),
        bomb.as_os_str(),
    ]);
    std::fs::read(&bomb).unwrap()
}
