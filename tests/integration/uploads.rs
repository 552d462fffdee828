//! Uploads into the store in the protocols other symbol servers speak, sent with curl
//! as their clients send them: Mozilla Tecken's zip (`POST /upload/`, `Auth-Token`, or a
//! `url` on a configured host) and Breakpad symupload's form (`POST /symupload`). Then
//! `/symbolicate/v5` (Mozilla's API) and `/symbolicate` answer from the store alone.
//! Hostile uploads get a 4xx that says why and leave nothing published. The zips are
//! made here from fixtures/native (the ELF and the Breakpad file its build made).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{
    Server, SymbolServer, elf_debug_file, elf_request, fixtures, hex, object, proc_status_kib,
};

const WRITE: &str = "write-token-0123";
const READ: &str = "read-token-4567";

/// A store on a directory, and (until every endpoint reads the store first by itself)
/// the same directory as the configured source, in the unified layout the store keeps.
fn store_yaml(store: &Path, extra: &str) -> String {
    format!(
        "store:\n  backend:\n    type: filesystem\n    path: {dir}\n  tokens:\n    - token: {WRITE}\n      access: write\n    - token: {READ}\n      access: read\n{extra}",
        dir = store.display()
    )
}

/// The fixture's request without a `sources` key: the configured sources answer.
fn store_request() -> Value {
    let mut request = elf_request(json!([]));
    request.as_object_mut().unwrap().remove("sources");
    request
}

fn breakpad_id() -> String {
    object("elf")["breakpad_id"].as_str().unwrap().to_owned()
}

fn sym_file() -> PathBuf {
    fixtures().join("native/breakpad/crash.sym")
}

/// The fixture's Breakpad file without its `INFO CODE_ID` line, as a Tecken zip from a
/// Windows or macOS build holds them: the store files it by its debug id alone, which
/// is what Mozilla's API asks by. Written into `dir`.
fn sym_by_debug_id(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(sym_file()).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("INFO CODE_ID"))
        .collect();
    let out = dir.join("crash.sym");
    std::fs::write(&out, kept.join("\n") + "\n").unwrap();
    out
}

/// The files published in the store's directory (its own `state/` left out).
fn published(store: &Path) -> Vec<PathBuf> {
    crate::common::files_under(store)
        .into_iter()
        .filter(|p| !p.strip_prefix(store).unwrap().starts_with("state"))
        .collect()
}

/// A zip of `(name, file)` entries, deflated, at `dest`.
fn make_zip(dest: &Path, entries: &[(&str, &Path)]) {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::fs::File::create(dest).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, file) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(&std::fs::read(file).unwrap()).unwrap();
    }
    zip.finish().unwrap();
}

/// `curl` with `args`; the status and the body.
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

fn tecken_upload(server: &Server, token: Option<&str>, zip: &Path) -> (u16, Value) {
    let url = format!("{}/upload/", server.url);
    let form = format!("symbols.zip=@{}", zip.display());
    let auth = token.map(|t| format!("Auth-Token: {t}"));
    let mut args = vec![
        "-X",
        "POST",
        "--user-agent",
        "omnisym-test/1.0",
        "--form",
        &form,
        &url,
    ];
    if let Some(auth) = &auth {
        args.extend(["-H", auth]);
    }
    let (code, body) = curl(&args);
    (
        code,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// Mozilla's v5 request for the fixture's first probe, in module "crash".
fn v5_request() -> Value {
    let rel = hex(&object("elf")["probes"][0]["rel_addr"]);
    json!({"jobs": [{
        "memoryMap": [["crash", breakpad_id()]],
        "stacks": [[[0, rel]]],
    }]})
}

fn probe_function() -> String {
    object("elf")["probes"][0]["frames"][0]["function"]
        .as_str()
        .unwrap()
        .split('(')
        .next()
        .unwrap()
        .to_owned()
}

/// Whether `/symbolicate`, with no sources of its own, finds the fixture's module.
async fn symbolicated_from_store(server: &Server) -> bool {
    let (_, answer) = server.post("/symbolicate", &store_request()).await;
    answer["modules"][0]["debug_status"] == "found"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tecken_zip_then_mozilla_and_symbolicate_answer_from_the_store() {
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(&store_yaml(store.path(), ""));
    let work = tempfile::tempdir().unwrap();
    let zip = work.path().join("symbols.zip");
    let id = breakpad_id();
    make_zip(
        &zip,
        &[
            (
                &format!("crash/{id}/crash.sym"),
                &sym_by_debug_id(work.path()),
            ),
            (&format!("crash/{id}/crash.debug"), &elf_debug_file()),
            ("crash-symbols.txt", &sym_file()),
        ],
    );
    assert_eq!(published(store.path()), Vec::<PathBuf>::new());

    let (status, body) = tecken_upload(&server, Some(WRITE), &zip);
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["upload"]["filename"], "symbols.zip", "{body}");
    assert_eq!(
        body["upload"]["ignored_keys"],
        json!(["crash-symbols.txt"]),
        "{body}"
    );
    assert_eq!(
        body["upload"]["files"].as_array().unwrap().len(),
        2,
        "{body}"
    );

    let (status, v5) = server.post("/symbolicate/v5", &v5_request()).await;
    assert_eq!(status, 200, "{v5}");
    let frame = &v5["results"][0]["stacks"][0][0];
    assert_eq!(frame["function"], probe_function(), "{v5:#}");
    assert_eq!(
        v5["results"][0]["found_modules"][format!("crash/{id}")],
        true,
        "{v5:#}"
    );

    let (_, answer) = server.post("/symbolicate", &store_request()).await;
    crate::common::assert_elf_symbolicated(&answer);

    // The same zip again: nothing new, and Tecken lists the keys it skipped.
    let (status, again) = tecken_upload(&server, Some(WRITE), &zip);
    assert_eq!(status, 201, "{again}");
    assert_eq!(
        again["upload"]["skipped_keys"].as_array().unwrap().len(),
        2,
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tecken_refuses_bad_tokens_and_hostile_zips_and_publishes_nothing() {
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(&store_yaml(store.path(), "  max_file_size: 200KiB\n"));
    let work = tempfile::tempdir().unwrap();
    let id = breakpad_id();
    let good = format!("crash/{id}/crash.sym");
    let zip = work.path().join("good.zip");
    make_zip(&zip, &[(&good, &sym_file())]);

    for token in [None, Some("wrong"), Some(READ)] {
        let (status, body) = tecken_upload(&server, token, &zip);
        assert_eq!(status, 403, "{token:?}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("Auth-Token"),
            "{body}"
        );
    }

    // (label, entries, status, what the error says)
    type Case<'a> = (&'a str, Vec<(String, PathBuf)>, u16, &'a str);
    let cases: [Case; 5] = [
        (
            "dotdot",
            vec![
                (good.clone(), sym_file()),
                (format!("../crash/{id}/crash.sym"), sym_file()),
            ],
            400,
            "`..`",
        ),
        (
            "absolute",
            vec![
                (good.clone(), sym_file()),
                (format!("/crash/{id}/crash.sym"), sym_file()),
            ],
            400,
            "absolute",
        ),
        (
            "backslash",
            vec![
                (good.clone(), sym_file()),
                (format!("crash\\{id}\\crash.sym"), sym_file()),
            ],
            400,
            "backslash",
        ),
        (
            "mismatch",
            vec![
                (good.clone(), sym_file()),
                (
                    "crash/00000000000000000000000000000000A/crash.sym".to_owned(),
                    sym_file(),
                ),
            ],
            400,
            "00000000000000000000000000000000A",
        ),
        (
            "not_debug",
            vec![
                (good.clone(), sym_file()),
                (
                    format!("crash/{id}/notes.sym"),
                    fixtures().join("native/crash.c"),
                ),
            ],
            400,
            "not a debug file",
        ),
    ];
    for (label, entries, want, says) in cases {
        let path = work.path().join(format!("{label}.zip"));
        let entries: Vec<(&str, &Path)> = entries
            .iter()
            .map(|(n, p)| (n.as_str(), p.as_path()))
            .collect();
        make_zip(&path, &entries);
        let (status, body) = tecken_upload(&server, Some(WRITE), &path);
        assert_eq!(status, want, "{label}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{label}: {body}");
        assert_eq!(
            published(store.path()),
            Vec::<PathBuf>::new(),
            "{label}: half published"
        );
    }

    // Past store.max_file_size: the posted zip itself.
    let big = work.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 300 * 1024]).unwrap();
    let oversize = work.path().join("oversize.zip");
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    {
        use std::io::Write;
        let mut w = zip::ZipWriter::new(std::fs::File::create(&oversize).unwrap());
        w.start_file(good.as_str(), stored).unwrap();
        w.write_all(&std::fs::read(&big).unwrap()).unwrap();
        w.finish().unwrap();
    }
    let (status, body) = tecken_upload(&server, Some(WRITE), &oversize);
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("store.max_file_size"),
        "{body}"
    );
    assert_eq!(published(store.path()), Vec::<PathBuf>::new());

    // And the good zip is taken.
    let (status, body) = tecken_upload(&server, Some(WRITE), &zip);
    assert_eq!(status, 201, "{body}");
    assert!(symbolicated_from_store(&server).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Multi-threaded throughout: curl blocks its thread while the server answers (and here
// the symbol server on this runtime too).
async fn tecken_upload_by_url_only_from_configured_hosts() {
    let symbols = SymbolServer::start().await;
    let work = tempfile::tempdir().unwrap();
    let zip = work.path().join("symbols.zip");
    let id = breakpad_id();
    make_zip(&zip, &[(&format!("crash/{id}/crash.sym"), &sym_file())]);
    symbols.put("artifacts/symbols.zip", &zip);
    let zip_url = format!("{}artifacts/symbols.zip", symbols.url);
    let host = url::Url::parse(&symbols.url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_owned();

    // A host not configured.
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(&store_yaml(
        store.path(),
        "  upload_url_hosts: [symbols.example.com]\n",
    ));
    let data = format!("url={zip_url}");
    let url = format!("{}/upload/", server.url);
    let auth = format!("Auth-Token: {WRITE}");
    let (status, body) = curl(&["-X", "POST", "-H", &auth, "-d", &data, &url]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Not an allowed domain"), "{body}");
    assert_eq!(published(store.path()), Vec::<PathBuf>::new());

    // Configured, but on a reserved address the downloads may not reach.
    let store = tempfile::tempdir().unwrap();
    let yaml = format!(
        "connect_to_reserved_ips: false\n{}",
        store_yaml(store.path(), &format!("  upload_url_hosts: [\"{host}\"]\n"))
    );
    let server = Server::start(&yaml);
    let url = format!("{}/upload/", server.url);
    let (status, body) = curl(&["-X", "POST", "-H", &auth, "-d", &data, &url]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("cannot be downloaded"), "{body}");

    // Configured and reachable.
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(&store_yaml(
        store.path(),
        &format!("  upload_url_hosts: [\"{host}\"]\n"),
    ));
    let url = format!("{}/upload/", server.url);
    let (status, body) = curl(&["-X", "POST", "-H", &auth, "-d", &data, &url]);
    assert_eq!(status, 201, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["upload"]["download_url"], zip_url.as_str());
    assert!(symbolicated_from_store(&server).await);
}

fn symupload_args<'a>(file: &'a str, id: &'a str) -> Vec<String> {
    [
        format!("symbol_file=@{file}"),
        "debug_file=crash".to_owned(),
        "code_file=crash".to_owned(),
        format!("debug_identifier={id}"),
        "os=Linux".to_owned(),
        "cpu=x86_64".to_owned(),
    ]
    .into_iter()
    .flat_map(|field| ["-F".to_owned(), field])
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symupload_form_then_symbolicate_answers_from_the_store() {
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(&store_yaml(store.path(), ""));
    let sym = sym_file().display().to_string();

    // A bad token, then an id that is not the file's: refused, nothing published.
    let form = symupload_args(&sym, "00000000000000000000000000000000A");
    let mut args: Vec<&str> = form.iter().map(String::as_str).collect();
    let bad = format!("{}/symupload?token=wrong", server.url);
    args.push(&bad);
    let (status, body) = curl(&args);
    assert_eq!(status, 403, "{body}");
    args.pop();
    let good_url = format!("{}/symupload?token={WRITE}", server.url);
    args.push(&good_url);
    let (status, body) = curl(&args);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("debug_identifier"), "{body}");
    assert_eq!(published(store.path()), Vec::<PathBuf>::new());

    let form = symupload_args(&sym, &breakpad_id());
    let mut args: Vec<&str> = form.iter().map(String::as_str).collect();
    args.push(&good_url);
    let (status, body) = curl(&args);
    assert_eq!(status, 200, "{body}");
    let (_, answer) = server.post("/symbolicate", &store_request()).await;
    crate::common::assert_elf_symbolicated(&answer);
}

/// The ELF fixture's debug file with a `.debug_omnisym_pad` section of `pad` zero bytes
/// (from a sparse file), so that it is a valid debug file of the fixture's id.
fn padded_debug_file(dir: &Path, pad: u64) -> PathBuf {
    let zeros = dir.join("pad.bin");
    std::fs::File::create(&zeros).unwrap().set_len(pad).unwrap();
    let out = dir.join(format!("crash-{pad}.debug"));
    let add = format!(".debug_omnisym_pad={}", zeros.display());
    let status = Command::new("objcopy")
        .arg("--add-section")
        .arg(&add)
        .arg(elf_debug_file())
        .arg(&out)
        .status()
        .expect("objcopy (binutils) runs");
    assert!(status.success());
    std::fs::remove_file(&zeros).unwrap();
    out
}

/// Sends `file` with symupload's form and samples the server's anonymous RSS until the
/// answer and a second after; returns (seconds, peak RssAnon in KiB).
fn upload_sampled(server: &Server, file: &Path) -> (f64, u64) {
    let pid = server.pid();
    let url = format!("{}/symupload?token={WRITE}", server.url);
    let form = symupload_args(&file.display().to_string(), &breakpad_id());
    let started = std::time::Instant::now();
    let mut child = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(&form)
        .arg(&url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0;
    loop {
        peak = peak.max(proc_status_kib(pid, "RssAnon").unwrap());
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{}",
        server.log()
    );
    let idle = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < idle {
        peak = peak.max(proc_status_kib(pid, "RssAnon").unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (elapsed, peak)
}

/// A debug file of 1 GiB, then one over 2 GiB, stream into the store with the server's
/// anonymous RSS under 256 MiB, and the file is then served. The files are removed at
/// the end (they take some 3 GiB of disk while the second one is sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_gib_upload_streams_with_rss_bounded() {
    const LIMIT_KIB: u64 = 256 * 1024;
    for pad in [1u64 << 30, (2u64 << 30) + (64 << 20)] {
        let work = tempfile::tempdir().unwrap();
        let file = padded_debug_file(work.path(), pad);
        let size = std::fs::metadata(&file).unwrap().len();
        let store = tempfile::tempdir().unwrap();
        let server = Server::start(&store_yaml(store.path(), ""));
        let (seconds, peak) = tokio::task::block_in_place(|| upload_sampled(&server, &file));
        println!(
            "symupload of {size} bytes: {seconds:.1} s, {:.0} MiB/s, peak RssAnon {} MiB",
            size as f64 / seconds / (1024.0 * 1024.0),
            peak / 1024
        );
        assert!(
            peak < LIMIT_KIB,
            "peak RssAnon {peak} KiB while {size} bytes streamed in"
        );
        std::fs::remove_file(&file).unwrap();
        let (_, answer) = server.post("/symbolicate", &store_request()).await;
        crate::common::assert_elf_symbolicated(&answer);
    }
}
