//! The browser console (`/console`) in a real browser: Debian's headless Chromium, driven
//! by tests/browser/console.mjs (playwright-core), against the real server with the
//! minidump fixture's symbols on a configured filesystem source. What the page must show
//! comes from fixtures/minidump/manifest.json. The script leaves screenshots in
//! `target/browser-tests/<test>/`: one per scenario on success, one of the page as it
//! was on a failure.

use crate::common;
use crate::minidump::{ALL, native_source};

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, minidump_file, minidump_variant};
use serde_json::{Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// playwright-core, which scripts/test.sh installs with `npm ci` (the browser is
/// Debian's chromium): a test installs nothing itself.
fn require_node_modules() {
    let dir = root().join("tests/browser");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "no playwright-core in {}/node_modules: run scripts/test.sh, or \
         `PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/browser`",
        dir.display()
    );
}

/// The server with the console on and the fixture's symbols as its only source, so the
/// page's requests, which name no sources, use them.
fn start(symbols: &Path, extra_yaml: &str) -> Server {
    Server::start(&format!(
        "console:\n  enabled: true\nsources:\n  - {{id: local, type: filesystem, path: \"{}\", layout: {{type: native}}}}\n{extra_yaml}",
        symbols.display()
    ))
}

/// Runs the scenarios in one browser page, signing in with `token` when the server has
/// one (`fronts.token`); panics with the script's output when they fail.
fn run_browser(
    test: &str,
    server: &Server,
    scenarios: &[&str],
    fixture: Option<&Path>,
    expect: &Value,
    token: Option<&str>,
) {
    require_node_modules();
    let out: PathBuf = root().join("target/browser-tests").join(test);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let mut command = Command::new("node");
    command
        .arg("console.mjs")
        .current_dir(root().join("tests/browser"))
        .args(["--base", &server.url])
        .args(scenarios.iter().flat_map(|s| ["--scenario", s]))
        .arg("--out")
        .arg(&out)
        .args(["--expect", &expect.to_string()]);
    if let Some(fixture) = fixture {
        command.arg("--fixture").arg(fixture);
    }
    if let Some(token) = token {
        command.env("CONSOLE_TOKEN", token);
    }
    let output = command.output().expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "{scenarios:?} failed ({}); screenshots in {}\n{stdout}{stderr}\nserver log (tail):\n{}",
        output.status,
        out.display(),
        tail(&server.log(), 40)
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The crashing thread's frames as the manifest has them, each marked inlined when it
/// shares its instruction with the next frame (the frame it is inlined into).
fn expected_frames(v: &Value) -> Vec<Value> {
    let frames = v["frames"].as_array().unwrap();
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let inlined = frames
                .get(i + 1)
                .is_some_and(|next| next["instruction_addr"] == f["instruction_addr"]);
            json!({
                "function": f["function"],
                "lineno": f["lineno"],
                "context_line": f["context_line"],
                "inlined": inlined,
            })
        })
        .collect()
}

#[test]
fn uploading_a_minidump_shows_the_crashing_thread_symbolicated() {
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = start(symbols.path(), "");
    run_browser(
        "uploading_a_minidump_shows_the_crashing_thread_symbolicated",
        &server,
        &["crash"],
        Some(&minidump_file(&v, "minidump")),
        &crash_expectations(&v),
        None,
    );
}

/// A stored Sentry event (as Sentry keeps it: frames outermost first) dropped on the
/// page: converted to a `/symbolicate` body, its exception's stack shown first with the
/// functions and lines of the native fixture's crash stack.
#[test]
fn dropping_a_stored_sentry_event_shows_its_exception_symbolicated() {
    let symbols = tempfile::tempdir().unwrap();
    let path = symbols.path().join(common::elf_debug_path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(common::elf_debug_file(), &path).unwrap();
    let server = start(symbols.path(), "");
    let mut frames = Vec::new();
    for probe in common::object("elf")["crash_stack"].as_array().unwrap() {
        let chain = probe["frames"].as_array().unwrap();
        for (i, f) in chain.iter().enumerate() {
            frames.push(json!({
                "function": f["function"],
                "lineno": f["line"],
                "inlined": i + 1 < chain.len(),
            }));
        }
    }
    run_browser(
        "dropping_a_stored_sentry_event_shows_its_exception_symbolicated",
        &server,
        &["crash"],
        Some(&common::fixtures().join("events/native-elf.json")),
        &json!({"frames": frames}),
        None,
    );
}

/// What the `crash` scenario must see for variant `v`.
fn crash_expectations(v: &Value) -> Value {
    // A minidump lists every loaded library, not only the program.
    json!({"thread_id": v["crash"]["thread_id"], "frames": expected_frames(v), "min_modules": 2})
}

/// A pasted stack: the fixture program (found), a library no source has, and an address
/// outside both.
#[test]
fn a_missing_module_says_why_and_lists_every_location_tried() {
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = start(symbols.path(), "");

    let mut text = format!(
        "# the fixture program, and a library no source has\nmodules\n\
         {} {} {} {} {}\n\
         elf 0x7f0000000000 0x10000 0b0e0c0a-0d0e-0f00-1122-334455667788 \
         0a0c0e0b0d0e0f0011223344556677889900aabb /opt/gone/libgone.so\nframes\n",
        v["image_addr"].as_str().unwrap(),
        v["image_size"],
        v["debug_id"].as_str().unwrap(),
        v["code_id"].as_str().unwrap(),
        v["code_file"].as_str().unwrap(),
    );
    // One address per real frame: inlined frames share their caller's.
    let mut frames: Vec<Value> = Vec::new();
    let mut last_addr = None;
    for f in v["frames"].as_array().unwrap() {
        if last_addr == Some(&f["instruction_addr"]) {
            *frames.last_mut().unwrap() = json!({"function": f["function"]});
            continue;
        }
        last_addr = Some(&f["instruction_addr"]);
        text.push_str(&format!("{}\n", f["instruction_addr"].as_str().unwrap()));
        frames.push(json!({"function": f["function"]}));
    }
    text.push_str("0x7f0000001234\n0x500000\n");
    frames
        .push(json!({"reason": "^Module not found on any source \\(\\d+ locations? tried\\)\\.$"}));
    frames.push(json!({"reason": "^The address is outside every module in the list\\.$"}));

    let expect = json!({"paste": {
        "text": text,
        "frames": frames,
        "missing_module": "libgone.so",
        "source": "local",
    }});
    run_browser(
        "a_missing_module_says_why_and_lists_every_location_tried",
        &server,
        &["missing"],
        None,
        &expect,
        None,
    );
}

/// A source whose host fails: after the first failure upstream's deny list holds it back,
/// and the page says so, with the time it is asked again.
#[test]
fn a_deny_listed_source_is_named_with_its_release_time() {
    // Nothing listens on this port: every download from it fails.
    let port = common::free_port();
    let server = Server::start(&format!(
        "console:\n  enabled: true\n\
         deny_list_threshold: 1\ndeny_list_time_window: 1m\ndeny_list_bucket_size: 1s\n\
         deny_list_block_time: 1h\n\
         sources:\n  - {{id: dead, type: http, url: \"http://127.0.0.1:{port}/\", layout: {{type: native}}}}\n"
    ));
    let text = "modules\n\
        elf 0x7f0000000000 0x10000 0b0e0c0a-0d0e-0f00-1122-334455667788 \
        0a0c0e0b0d0e0f0011223344556677889900aabb /opt/gone/libgone.so\n\
        frames\n0x7f0000001234\n";
    let expect = json!({"denied": {"text": text, "module": "libgone.so", "host": "127.0.0.1"}});
    run_browser(
        "a_deny_listed_source_is_named_with_its_release_time",
        &server,
        &["denied"],
        None,
        &expect,
        None,
    );
}

/// The fixture's crash through the page, then the status view: it lists the source's
/// downloads, the cap from the config, and a request made from outside as it arrives.
fn crash_then_status(test: &str, extra_yaml: &str, token: Option<&str>) {
    let v = minidump_variant("fp");
    let symbols = native_source(&[(&v, ALL)]);
    let server = start(
        symbols.path(),
        &format!("max_concurrent_requests: 7\n{extra_yaml}"),
    );
    let mut expect = crash_expectations(&v);
    expect["max_concurrent"] = json!(7);
    expect["source"] = json!("local");
    run_browser(
        test,
        &server,
        &["crash", "status"],
        Some(&minidump_file(&v, "minidump")),
        &expect,
        token,
    );
}

#[test]
fn the_status_view_sees_a_new_request() {
    crash_then_status("the_status_view_sees_a_new_request", "", None);
}

/// With `fronts.token` set, the page and its API answer only to the token; the browser
/// gives it as Basic credentials, and the whole tour works.
#[test]
fn behind_a_token_the_browser_signs_in_with_basic_credentials() {
    crash_then_status(
        "behind_a_token_the_browser_signs_in_with_basic_credentials",
        "fronts:\n  token: console-test-token\n",
        Some("console-test-token"),
    );
}
