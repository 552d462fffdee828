//! The offline tools end to end: the built `omnisym` binary run on the project's own
//! crash files (fixtures/minidump) and stored events (fixtures/events, written by its
//! make.py), with symbols laid out from the fixtures in temp dirs. Native frames are
//! checked against what `addr2line` says about the same binaries; JS frames against
//! where V8 ran the original sources (fixtures/js/manifest.json); JVM frames against the
//! mapping files. `replay` runs against a real server, as the other suites start it.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use common::{
    Server, SymbolServer, crashing_thread, elf_debug_file, fixture_json, fixtures, hex,
    minidump_file, minidump_variant, unified_path,
};
use serde_json::{Value, json};

// ------------------------------------------------------------------ running the CLI

/// The result of one run of the binary.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        assert!(self.success, "the run failed:\n{}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    fn text(&self) -> &str {
        assert!(self.success, "the run failed:\n{}", self.stderr);
        &self.stdout
    }
}

impl From<Output> for Run {
    fn from(output: Output) -> Run {
        Run {
            success: output.status.success(),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }
}

/// `omnisym <args>`, with the per-user cache in `home` so runs share nothing.
fn command(home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_omnisym"));
    command
        .args(args)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env_remove("RUST_LOG");
    command
}

fn omnisym(home: &Path, args: &[&str]) -> Run {
    command(home, args).output().unwrap().into()
}

/// `omnisym symbolicate <file> --symbols <symbols> <extra>`.
fn symbolicate(home: &Path, file: &Path, symbols: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "symbolicate",
        path_str(file),
        "--symbols",
        path_str(symbols),
    ];
    args.extend(extra);
    omnisym(home, &args)
}

/// The same, for tests that serve files from this process' runtime meanwhile.
async fn omnisym_async(home: &Path, args: &[&str]) -> Run {
    tokio::process::Command::from(command(home, args))
        .output()
        .await
        .unwrap()
        .into()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn event_file(name: &str) -> PathBuf {
    fixtures().join("events").join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Copies fixture files into a temp dir at the given relative paths.
fn symbols(files: &[(PathBuf, String)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (src, rel) in files {
        let dest = root.path().join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(src, dest).unwrap();
    }
    root
}

fn elf() -> Value {
    common::object("elf")
}

fn pe() -> Value {
    common::object("pe")
}

/// A file of fixtures/native, as its manifest names it.
fn native_fixture(object: &Value, kind: &str) -> PathBuf {
    fixtures()
        .join("native")
        .join(object["files"][kind].as_str().unwrap())
}

/// The ELF's debug file where the native layout keeps it.
fn elf_native_symbols() -> (PathBuf, String) {
    (elf_debug_file(), common::elf_debug_path())
}

/// The PDB where the native (symstore) layout keeps it: `<name>/<GUID><age>/<name>`.
fn pdb_native_symbols() -> (PathBuf, String) {
    let pe = pe();
    let name = pe["debug_file"].as_str().unwrap();
    let id = pe["breakpad_id"].as_str().unwrap();
    (
        fixtures().join("native/pe/crash.pdb"),
        format!("{name}/{id}/{name}"),
    )
}

// -------------------------------------------------------------------------- oracles

/// A symbolicated location: function, file, line.
type Location = (String, String, u64);

/// `tool -f -i -C -e <binary> <addr>`: every frame at `addr`, innermost first.
fn addr2line_with(tool: &str, binary: &Path, addr: u64) -> Vec<Location> {
    let output = Command::new(tool)
        .args(["-f", "-i", "-C", "-e"])
        .arg(binary)
        .arg(format!("{addr:#x}"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
    assert!(output.status.success(), "{tool} failed on {addr:#x}");
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|pair| {
            // `file:line`, maybe followed by ` (discriminator N)`.
            let location = pair[1].split(" (").next().unwrap();
            let (file, line) = location.rsplit_once(':').unwrap();
            (pair[0].to_owned(), file.to_owned(), line.parse().unwrap())
        })
        .collect()
}

/// The inline chain at `addr` of `binary` as addr2line reports it. Names come from
/// `llvm-addr2line`: binutils 2.40 names an inlined C function by its C++ caller in the
/// one C++ unit. GNU `addr2line` has to agree on every file and line.
fn addr2line(binary: &Path, addr: u64) -> Vec<Location> {
    let llvm = addr2line_with("llvm-addr2line", binary, addr);
    let gnu = addr2line_with("addr2line", binary, addr);
    let lines = |frames: &[Location]| -> Vec<(String, u64)> {
        frames.iter().map(|(_, f, l)| (f.clone(), *l)).collect()
    };
    assert_eq!(
        lines(&llvm),
        lines(&gnu),
        "the addr2lines disagree at {addr:#x}"
    );
    assert!(
        llvm.iter().all(|(f, _, _)| f != "??"),
        "no symbol at {addr:#x}"
    );
    llvm
}

/// Frames (in the order given) cut into runs that share an address: one call each, the
/// inlined ones together with the function they were inlined into.
fn calls(frames: &[Value]) -> Vec<Vec<&Value>> {
    let mut calls: Vec<Vec<&Value>> = Vec::new();
    for frame in frames {
        match calls.last_mut() {
            Some(call) if call[0]["instruction_addr"] == frame["instruction_addr"] => {
                call.push(frame)
            }
            _ => calls.push(vec![frame]),
        }
    }
    calls
}

fn location(frame: &Value) -> Location {
    (
        frame["function"].as_str().unwrap_or("??").to_owned(),
        frame["abs_path"].as_str().unwrap_or("??").to_owned(),
        frame["lineno"].as_u64().unwrap_or(0),
    )
}

/// Checks every call of a symbolicated stack (innermost first) against `oracle`, which
/// gets the address relative to the module.
fn assert_calls_match(
    calls: &[Vec<&Value>],
    base: u64,
    oracle: impl Fn(u64) -> Vec<Location>,
    same_name: impl Fn(&str, &str) -> bool,
) {
    for call in calls {
        let addr = hex(&call[0]["instruction_addr"]);
        let want = oracle(addr - base);
        let got: Vec<Location> = call.iter().map(|f| location(f)).collect();
        assert_eq!(got.len(), want.len(), "at {addr:#x}: {got:?} vs {want:?}");
        for (got, want) in got.iter().zip(&want) {
            assert!(
                same_name(&got.0, &want.0),
                "at {addr:#x}: {got:?} vs {want:?}"
            );
            assert_eq!((&got.1, got.2), (&want.1, want.2), "at {addr:#x}");
        }
        for frame in call {
            // An endpoint's answer says `status`; an event, what Sentry keeps of it.
            let status = [&frame["status"], &frame["data"]["symbolicator_status"]]
                .into_iter()
                .find(|s| !s.is_null());
            assert_eq!(status, Some(&Value::from("symbolicated")), "{frame}");
        }
    }
}

/// The stack traces of a symbolicated event and the raw ones beside them.
fn event_stacks(event: &Value) -> Vec<(Vec<Value>, Vec<Value>)> {
    let mut stacks = Vec::new();
    for interface in ["exception", "threads"] {
        for holder in event[interface]["values"].as_array().into_iter().flatten() {
            if let Some(frames) = holder["stacktrace"]["frames"].as_array() {
                let raw = holder["raw_stacktrace"]["frames"].as_array().unwrap();
                stacks.push((frames.clone(), raw.clone()));
            }
        }
    }
    stacks
}

/// Checks a native event against addr2line: each raw frame became one call whose
/// frames match the oracle at the address symbolicated (the return address less one,
/// except for the innermost frame).
fn assert_native_event(
    event: &Value,
    base: u64,
    oracle: impl Fn(u64) -> Vec<Location>,
    same_name: impl Fn(&str, &str) -> bool + Copy,
) {
    let stacks = event_stacks(event);
    assert!(!stacks.is_empty());
    for (frames, raw) in stacks {
        // Stored outermost first; calls and inline chains are compared innermost first.
        let innermost_first: Vec<Value> = frames.iter().rev().cloned().collect();
        let calls = calls(&innermost_first);
        assert_eq!(
            calls.len(),
            raw.len(),
            "one call per raw frame: {frames:#?}"
        );
        for (n, (call, raw)) in calls.iter().zip(raw.iter().rev()).enumerate() {
            let raw_addr = hex(&raw["instruction_addr"]);
            let looked_up = if n == 0 { raw_addr } else { raw_addr - 1 };
            assert_eq!(hex(&call[0]["instruction_addr"]), looked_up, "{raw}");
        }
        assert_calls_match(&calls, base, &oracle, same_name);
    }
}

// ---------------------------------------------------------------------- minidumps

#[test]
fn minidumps_are_stackwalked_without_any_source() {
    let home = tempfile::tempdir().unwrap();
    for name in ["fp", "nofp"] {
        let v = minidump_variant(name);
        let dump = minidump_file(&v, "minidump");
        let answer = omnisym(home.path(), &["symbolicate", path_str(&dump)]).json();
        assert_eq!(answer["status"], "completed", "{answer:#}");
        assert_eq!(answer["crashed"], true);
        let thread = crashing_thread(&answer);
        assert_eq!(thread["thread_id"], v["crash"]["thread_id"]);
        let top = &thread["frames"][0];
        assert_eq!(top["instruction_addr"], v["crash"]["instruction_addr"]);
        assert_eq!(top["status"], "missing");
        let module = answer["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["code_id"] == v["code_id"])
            .expect("the program's module");
        assert_eq!(module["debug_status"], "missing");

        let text = omnisym(
            home.path(),
            &["symbolicate", path_str(&dump), "--format", "text"],
        );
        let text = text.text();
        let id = v["crash"]["thread_id"].as_u64().unwrap();
        assert!(
            text.contains(&format!("Thread {id} \"crash\" (crashed)")),
            "{text}"
        );
        let top = hex(&v["crash"]["instruction_addr"]);
        assert!(text.contains(&format!("  #0  {top:#018x}  ??")), "{text}");
        assert!(text.contains("Crash: SIGSEGV"), "{text}");
        assert!(text.contains("\nModules\n"), "{text}");
    }
}

#[test]
fn minidumps_with_symbols_walk_and_symbolicate_as_addr2line_reads_them() {
    let home = tempfile::tempdir().unwrap();
    for name in ["fp", "nofp"] {
        let v = minidump_variant(name);
        let code_id = v["code_id"].as_str().unwrap();
        let gdb = format!("{}/{}", &code_id[..2], &code_id[2..]);
        let dir = symbols(&[
            (minidump_file(&v, "executable"), gdb.clone()),
            (minidump_file(&v, "debug"), format!("{gdb}.debug")),
        ]);
        let dump = minidump_file(&v, "minidump");
        let answer = symbolicate(home.path(), &dump, dir.path(), &[]).json();
        let frames = crashing_thread(&answer)["frames"].as_array().unwrap();
        let want = v["frames"].as_array().unwrap();
        // The walk found the calls the oracle names, at its addresses...
        let got: Vec<(&Value, &Value)> = frames
            .iter()
            .take(want.len())
            .map(|f| (&f["function"], &f["instruction_addr"]))
            .collect();
        let expected: Vec<(&Value, &Value)> = want
            .iter()
            .map(|f| (&f["function"], &f["instruction_addr"]))
            .collect();
        assert_eq!(got, expected, "{name}");
        // ...and each call reads as addr2line reads the debug file there.
        let calls = calls(&frames[..want.len()]);
        let debug = minidump_file(&v, "debug");
        assert_calls_match(
            &calls,
            hex(&v["image_addr"]),
            |rel| addr2line(&debug, rel),
            |a, b| a == b,
        );
    }
}

// ------------------------------------------------------------------- native events

#[test]
fn a_native_event_matches_addr2line_frame_by_frame() {
    let home = tempfile::tempdir().unwrap();
    let dir = symbols(&[elf_native_symbols()]);
    let file = event_file("native-elf.json");
    let stored = read_json(&file);
    let event = symbolicate(home.path(), &file, dir.path(), &[]).json();
    let base = hex(&stored["debug_meta"]["images"][0]["image_addr"]);
    let binary = native_fixture(&elf(), "binary");
    assert_native_event(&event, base, |rel| addr2line(&binary, rel), |a, b| a == b);

    // Everything Sentry keeps beside the frames survives.
    assert_eq!(event["event_id"], stored["event_id"]);
    assert_eq!(
        event["exception"]["values"][0]["mechanism"],
        stored["exception"]["values"][0]["mechanism"]
    );
    let image = &event["debug_meta"]["images"][0];
    assert_eq!(image["debug_status"], "found");
    assert_eq!(
        image["code_file"],
        stored["debug_meta"]["images"][0]["code_file"]
    );
    assert!(image["candidates"].is_array(), "{image:#}");
    // The raw frames are the stored ones.
    assert_eq!(
        event["exception"]["values"][0]["raw_stacktrace"]["frames"],
        stored["exception"]["values"][0]["stacktrace"]["frames"]
    );
    // Two levels of inlining in one call, and a demangled C++ method.
    let threads = &event["threads"]["values"];
    let names = |t: &Value| -> Vec<String> {
        t["stacktrace"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"].as_str().unwrap().to_owned())
            .collect()
    };
    let checksum = names(&threads[1]);
    assert!(
        checksum
            .ends_with(&["compute_checksum", "scramble_outer", "scramble_inner"].map(String::from)),
        "{checksum:?}"
    );
    assert!(names(&threads[2]).contains(&"ns::Widget::poke(int)".to_owned()));

    // A symbolicated event symbolicates again to the same frames, from its raw ones.
    let again_file = home.path().join("symbolicated.json");
    std::fs::write(&again_file, serde_json::to_vec(&event).unwrap()).unwrap();
    let again = symbolicate(home.path(), &again_file, dir.path(), &[]).json();
    assert_eq!(again["exception"], event["exception"]);
    assert_eq!(again["threads"], event["threads"]);
}

#[test]
fn a_windows_event_matches_llvm_addr2line_on_the_pdb() {
    let home = tempfile::tempdir().unwrap();
    let dir = symbols(&[pdb_native_symbols()]);
    let file = event_file("native-pe.json");
    let event = symbolicate(home.path(), &file, dir.path(), &[]).json();
    let exe = native_fixture(&pe(), "binary");
    let image_base = hex(&pe()["image_vmaddr"]);
    // addr2line has no PDB reader; llvm-addr2line reads the PDB next to the exe, and
    // names functions without their parameters, which symbolic's PDB reader adds.
    assert_native_event(
        &event,
        0,
        |addr| addr2line_with("llvm-addr2line", &exe, addr),
        |got, want| got.split('(').next() == Some(want),
    );
    assert!(hex(&event["debug_meta"]["images"][0]["image_addr"]) == image_base);
    assert_eq!(event["debug_meta"]["images"][0]["debug_status"], "found");
}

#[test]
fn text_output_is_a_readable_stack_per_thread() {
    let home = tempfile::tempdir().unwrap();
    let dir = symbols(&[elf_native_symbols()]);
    let file = event_file("native-elf.json");
    let run = symbolicate(home.path(), &file, dir.path(), &["--format", "text"]);
    let text = run.text();
    let crash = hex(&elf()["crash_stack"][0]["rel_addr"]) + common::ELF_BASE;
    for want in [
        "SIGSEGV: Segfault\n".to_owned(),
        format!(
            "  #0  {crash:#018x}  poison_slot  /build/omnisym-fixtures/helpers.h:29  (inlined)  in crash +"
        ),
        format!(
            "  #1  {crash:#018x}  trigger_crash  /build/omnisym-fixtures/crash.c:30  in crash +"
        ),
        "Thread 2 \"checksum\"\n".to_owned(),
        "Thread 3 \"widget\"\n".to_owned(),
        "ns::Widget::poke(int)  /build/omnisym-fixtures/util.cpp:16".to_owned(),
        "\nModules\n  crash  elf  d96fdc6c-1668-6d8a-e479-531b3d99327b  debug: found\n".to_owned(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
    // The crashed thread's stack is the exception's; it is not printed twice.
    assert!(!text.contains("Thread 1"), "{text}");
}

// ---------------------------------------------------------------------- JS and JVM

fn js_debug_id() -> String {
    read_json(&event_file("javascript.json"))["debug_meta"]["images"][0]["debug_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn js_symbols() -> Vec<(PathBuf, String)> {
    let id = js_debug_id();
    vec![
        (
            fixtures().join("js/dist/debugid.min.js"),
            unified_path(&id, "minified_source"),
        ),
        (
            fixtures().join("js/dist/debugid.min.js.map"),
            unified_path(&id, "source_map"),
        ),
    ]
}

/// The uuid sentry-cli lists a mapping file under: UUIDv5 of its contents in the
/// namespace UUIDv5(DNS, "guardsquare.com"), as the proguard crate computes it too.
fn mapping_uuid(contents: &[u8]) -> uuid::Uuid {
    use sha1::Digest;
    let v5 = |namespace: &uuid::Uuid, name: &[u8]| {
        let digest = sha1::Sha1::new()
            .chain_update(namespace.as_bytes())
            .chain_update(name)
            .finalize();
        uuid::Builder::from_sha1_bytes(digest[..16].try_into().unwrap()).into_uuid()
    };
    v5(
        &v5(&uuid::Uuid::NAMESPACE_DNS, b"guardsquare.com"),
        contents,
    )
}

/// The mapping files, under the uuids java.json lists them by.
fn mapping_symbols() -> Vec<(PathBuf, String)> {
    let listed = read_json(&event_file("java.json"))["debug_meta"]["images"].clone();
    ["rewrite.txt", "inline.txt"]
        .into_iter()
        .map(|name| {
            let path = fixtures().join("jvm").join(name);
            let uuid = mapping_uuid(&std::fs::read(&path).unwrap()).to_string();
            assert!(
                listed.as_array().unwrap().iter().any(|i| i["uuid"] == uuid),
                "{name} is listed as {uuid} in java.json"
            );
            (path, unified_path(&uuid, "proguard"))
        })
        .collect()
}

#[test]
fn a_javascript_event_maps_back_to_the_original_sources() {
    let home = tempfile::tempdir().unwrap();
    let dir = symbols(&js_symbols());
    let file = event_file("javascript.json");
    // JS files exist outside Sentry only in the unified layout, so that is the default.
    let event = symbolicate(home.path(), &file, dir.path(), &[]).json();
    let exception = &event["exception"]["values"][0];
    let frames = exception["stacktrace"]["frames"].as_array().unwrap();
    let manifest = fixture_json("js/manifest.json");
    // Stored outermost first; the manifest lists V8's frames innermost first.
    let want: Vec<&Value> = manifest["frames"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .collect();
    assert_eq!(frames.len(), want.len());
    for (frame, want) in frames.iter().zip(want) {
        let original = &want["original"];
        let file = original["file"].as_str().unwrap();
        assert_eq!(
            frame["abs_path"],
            format!("https://app.example/{file}"),
            "{frame:#}"
        );
        assert_eq!(frame["function"], original["function"], "{frame:#}");
        assert_eq!(frame["lineno"], original["line"], "{frame:#}");
        assert_eq!(frame["colno"], original["column"], "{frame:#}");
        assert_eq!(frame["data"]["symbolicated"], true, "{frame:#}");
        let source = std::fs::read_to_string(fixtures().join("js").join(file)).unwrap();
        let line = source
            .lines()
            .nth(original["line"].as_u64().unwrap() as usize - 1);
        assert_eq!(frame["context_line"].as_str(), line, "{frame:#}");
    }
    let raw = exception["raw_stacktrace"]["frames"].as_array().unwrap();
    assert_eq!(
        raw[0]["abs_path"],
        "https://app.example/assets/debugid.min.js"
    );
    assert!(
        raw[0]["context_line"].is_string(),
        "the minified line as context"
    );

    // The same directory named as what it is.
    let text = symbolicate(
        home.path(),
        &file,
        dir.path(),
        &["--layout", "unified", "--format", "text"],
    );
    assert!(
        text.text()
            .contains("  #0  Store.load  https://app.example/src/store.js:10:13\n"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_jvm_event_is_remapped_with_its_mappings() {
    let home = tempfile::tempdir().unwrap();
    let dir = symbols(&mapping_symbols());
    let file = event_file("java.json");
    let event = symbolicate(home.path(), &file, dir.path(), &[]).json();
    let summary = |frames: &Value| -> Vec<(String, String, u64)> {
        frames
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["module"].as_str().unwrap().to_owned(),
                    f["function"].as_str().unwrap().to_owned(),
                    f["lineno"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let row = |m: &str, f: &str, l: u64| (m.to_owned(), f.to_owned(), l);
    let exception = &event["exception"]["values"][0];
    assert_eq!(exception["type"], "SessionExpiredException");
    assert_eq!(exception["module"], "org.birdwatch.app.sync");
    // b.b.b:7 is `schedule` with `SyncWorker.start` inlined; b.a.a:5 is `doWork` with
    // `Uploader.checkSession` inlined, which R8's rule for this exception removes.
    assert_eq!(
        summary(&exception["stacktrace"]["frames"]),
        [
            row("java.lang.Thread", "run", 1012),
            row("org.birdwatch.app.sync.SyncScheduler", "schedule", 30),
            row("org.birdwatch.app.sync.SyncWorker", "start", 12),
            row("org.birdwatch.app.sync.SyncWorker", "doWork", 22),
        ]
    );
    let frames = exception["stacktrace"]["frames"].as_array().unwrap();
    assert_eq!(frames[3]["filename"], "SyncWorker.kt");
    // The release names the app's package: its frames are in-app.
    assert_eq!(frames[3]["in_app"], true);
    assert!(frames[0].get("in_app").is_none());
    assert_eq!(
        summary(&event["threads"]["values"][0]["stacktrace"]["frames"]),
        [
            row("android.app.Activity", "performCreate", 8305),
            row("org.birdwatch.app.SightingActivity", "onCreate", 33),
            row("org.birdwatch.app.SightingRepository", "label", 48),
            row("org.birdwatch.app.Species", "displayName", 12),
        ]
    );
    let stored = read_json(&file);
    assert_eq!(
        exception["raw_stacktrace"]["frames"],
        stored["exception"]["values"][0]["stacktrace"]["frames"]
    );
}

// ----------------------------------------------------------------- odds and ends

/// A small Apple crash report, written for this test: the parser and the threads.
const APPLE_CRASH_REPORT: &str = "\
Incident Identifier: 5C8A0D23-57A5-4CB7-8A3F-2D5E7B9C0A41
CrashReporter Key:   0000000000000000000000000000000000000000
Hardware Model:      MacBookPro18,3
Process:             Birdwatch [4242]
Path:                /Applications/Birdwatch.app/Contents/MacOS/Birdwatch
Identifier:          org.birdwatch.app
Version:             2.1 (42)
Code Type:           X86-64 (Native)
Parent Process:      launchd [1]

Date/Time:           2026-01-01 00:00:00.000 +0000
OS Version:          macOS 14.2 (23C64)
Report Version:      12

Exception Type:  EXC_BAD_ACCESS (SIGSEGV)
Exception Codes: KERN_INVALID_ADDRESS at 0x0000000000000000
Crashed Thread:  0

Thread 0 Crashed:
0   Birdwatch                     0x0000000100001f3a 0x100000000 + 7994
1   Birdwatch                     0x0000000100001e10 0x100000000 + 7696

Thread 1:
0   libsystem_kernel.dylib        0x00007ff8000a1b2c 0x7ff80009a000 + 31532

Binary Images:
       0x100000000 -        0x100003fff +Birdwatch x86_64  <6f1c2a9e4b7d4c1e8a3f2d5e7b9c0a41> /Applications/Birdwatch.app/Contents/MacOS/Birdwatch
    0x7ff80009a000 -     0x7ff8000d3fff  libsystem_kernel.dylib x86_64  <0d7a5c3e1f9b4e8db2a6c4e6f8a0b257> /usr/lib/system/libsystem_kernel.dylib
";

#[test]
fn apple_crash_reports_and_compressed_inputs_are_recognised() {
    let home = tempfile::tempdir().unwrap();
    let report = home.path().join("crash.txt");
    std::fs::write(&report, APPLE_CRASH_REPORT).unwrap();
    let answer = omnisym(home.path(), &["symbolicate", path_str(&report)]).json();
    assert_eq!(answer["status"], "completed", "{answer:#}");
    assert_eq!(answer["stacktraces"].as_array().unwrap().len(), 2);
    assert_eq!(
        crashing_thread(&answer)["frames"][0]["instruction_addr"],
        "0x100001f3a"
    );
    assert_eq!(answer["modules"][0]["debug_status"], "missing");

    // Gzipped files are unpacked first, as the server unpacks uploads.
    let gzip = |from: &Path, name: &str| -> PathBuf {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, &std::fs::read(from).unwrap()).unwrap();
        let to = home.path().join(name);
        std::fs::write(&to, encoder.finish().unwrap()).unwrap();
        to
    };
    let dump = gzip(
        &minidump_file(&minidump_variant("fp"), "minidump"),
        "crash.dmp.gz",
    );
    let answer = omnisym(home.path(), &["symbolicate", path_str(&dump)]).json();
    assert_eq!(answer["crashed"], true, "{answer:#}");
    let gz = gzip(&event_file("native-elf.json"), "event.json.gz");
    let event = omnisym(home.path(), &["symbolicate", path_str(&gz)]).json();
    // No sources: the module is missing, and the raw frames stay as they were.
    assert_eq!(event["debug_meta"]["images"][0]["debug_status"], "missing");
    let frame = &event["exception"]["values"][0]["stacktrace"]["frames"][0];
    assert_eq!(frame["data"]["symbolicator_status"], "missing");
    assert!(frame.get("function").is_none());

    // What is none of these says so.
    let bad = home.path().join("bad.json");
    std::fs::write(&bad, "{\"exception\": ").unwrap();
    let run = omnisym(home.path(), &["symbolicate", path_str(&bad)]);
    assert!(!run.success);
    assert!(
        run.stderr.contains("not a valid JSON event"),
        "{}",
        run.stderr
    );
    let run = omnisym(home.path(), &["symbolicate", "/no/such/file"]);
    assert!(!run.success);
    assert!(run.stderr.contains("/no/such/file"), "{}", run.stderr);
}

#[tokio::test]
async fn downloads_over_a_second_show_progress_on_stderr() {
    let server = SymbolServer::start().await;
    let (debug, path) = elf_native_symbols();
    server.put(&path, &debug);
    let home = tempfile::tempdir().unwrap();
    let slow = format!("{}slow/1300/", server.url);
    let file = event_file("native-elf.json");
    let run = omnisym_async(
        home.path(),
        &["symbolicate", path_str(&file), "--source", &slow],
    )
    .await;
    let event = run.json();
    assert_eq!(event["debug_meta"]["images"][0]["debug_status"], "found");
    let url = format!("{slow}{path}");
    let size = std::fs::metadata(&debug).unwrap().len();
    // stderr is a pipe here: one line when the transfer is first shown, not a redraw.
    let shown = format!("downloading {url}");
    let shown_lines = run
        .stderr
        .lines()
        .filter(|l| *l == shown || l.starts_with(&format!("{shown} (")))
        .count();
    assert_eq!(shown_lines, 1, "{}", run.stderr);
    assert!(
        !run.stderr.contains('\x1b'),
        "no escape codes off a terminal"
    );
    let done = run
        .stderr
        .lines()
        .find(|l| l.starts_with(&format!("downloaded {url}: ")))
        .unwrap_or_else(|| panic!("no last line for {url}:\n{}", run.stderr));
    let kib = format!("{:.1} KiB", size as f64 / 1024.0);
    assert!(done.contains(&kib), "{done} (want {kib})");
    // Quick downloads print nothing: the second run has everything in its cache.
    let again = omnisym_async(
        home.path(),
        &["symbolicate", path_str(&file), "--source", &slow],
    )
    .await;
    assert!(!again.stderr.contains("download"), "{}", again.stderr);
}

// -------------------------------------------------------------------------- replay

/// `file: (endpoint, frames before, frames after, symbolicated before, after)` from
/// replay's report lines.
fn report_rows(stdout: &str) -> Vec<(String, String, [u64; 4])> {
    stdout
        .lines()
        .map(|line| (line, line.split_whitespace().collect::<Vec<&str>>()))
        .filter(|(_, words)| words.get(2) == Some(&"frames"))
        .map(|(line, words)| {
            let n = |i: usize| words[i].parse::<u64>().unwrap();
            // file endpoint frames B -> A symbolicated B -> A
            assert_eq!((words[2], words[6]), ("frames", "symbolicated"), "{line}");
            (
                words[0].to_owned(),
                words[1].to_owned(),
                [n(3), n(5), n(7), n(9)],
            )
        })
        .collect()
}

#[tokio::test]
async fn replay_sends_the_stored_events_and_reports_before_and_after() {
    // One unified-layout store for everything, as symsorter and sentry-cli lay it out.
    let pe = pe();
    let mut files = vec![
        (
            elf_debug_file(),
            unified_path(elf()["code_id"].as_str().unwrap(), "debuginfo"),
        ),
        (
            fixtures().join("native/pe/crash.pdb"),
            unified_path(pe["breakpad_id"].as_str().unwrap(), "debuginfo"),
        ),
    ];
    files.extend(js_symbols());
    files.extend(mapping_symbols());
    let store = symbols(&files);
    let server = Server::start("");
    let home = tempfile::tempdir().unwrap();
    let events = fixtures().join("events");
    // `--timeout 0`: every answer is `pending` first and gets polled.
    let run = omnisym_async(
        home.path(),
        &[
            "replay",
            path_str(&events),
            "--server",
            &server.url,
            "--symbols",
            path_str(store.path()),
            "--layout",
            "unified",
            "--timeout",
            "0",
        ],
    )
    .await;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let rows = report_rows(&run.stdout);
    let row = |file: &str| -> [u64; 4] {
        rows.iter()
            .find(|(f, _, _)| f == file)
            .unwrap_or_else(|| panic!("no row for {file}:\n{}", run.stdout))
            .2
    };
    let endpoints: Vec<(&str, &str)> = rows
        .iter()
        .map(|(f, e, _)| (f.as_str(), e.as_str()))
        .collect();
    assert_eq!(
        endpoints,
        [
            ("java.json", "/symbolicate-jvm"),
            ("javascript.json", "/symbolicate-js"),
            ("native-elf.json", "/symbolicate"),
            ("native-pe.json", "/symbolicate"),
        ]
    );
    // Native: every raw frame symbolicated, inlined calls added (one in the crash,
    // two in `compute_checksum`, one in `ns::Widget::poke`).
    let stored = read_json(&event_file("native-elf.json"));
    let raw_frames: u64 = event_stacks_raw(&stored);
    assert_eq!(
        row("native-elf.json"),
        [raw_frames, raw_frames + 4, 0, raw_frames + 4]
    );
    let [pe_before, pe_after, 0, pe_symbolicated] = row("native-pe.json") else {
        panic!("the PE event had no symbolicated frames before");
    };
    assert!(
        pe_after > pe_before && pe_symbolicated == pe_after,
        "{}",
        run.stdout
    );
    // JS: one to one; JVM: six remapped frames of eight shown, from five raw ones.
    assert_eq!(row("javascript.json"), [5, 5, 0, 5]);
    assert_eq!(row("java.json"), [5, 8, 0, 6]);
    assert!(
        run.stdout.ends_with(&format!(
            "replayed 4 events: 4 requests, 0 failed; symbolicated frames 0 -> {}\n",
            raw_frames + 4 + pe_symbolicated + 5 + 6
        )),
        "{}",
        run.stdout
    );

    // A broken event fails its line and the run, and the others are still replayed.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(event_file("javascript.json"), dir.path().join("a.json")).unwrap();
    std::fs::write(dir.path().join("b.json"), "not json").unwrap();
    let run = omnisym_async(
        home.path(),
        &[
            "replay",
            path_str(dir.path()),
            "--server",
            &server.url,
            "--symbols",
            path_str(store.path()),
        ],
    )
    .await;
    assert!(!run.success);
    assert_eq!(
        report_rows(&run.stdout)[0].2,
        [5, 5, 0, 5],
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("b.json  -  failed: not a JSON event"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("1 of 2 events failed"),
        "{}",
        run.stderr
    );
}

/// How many frames an event's stack traces hold.
fn event_stacks_raw(event: &Value) -> u64 {
    ["exception", "threads"]
        .iter()
        .flat_map(|i| event[*i]["values"].as_array().into_iter().flatten())
        .filter_map(|holder| holder["stacktrace"]["frames"].as_array())
        .map(|frames| frames.len() as u64)
        .sum()
}

// ------------------------------------------------------------------ wasm-split

fn wasm_split(args: &[&std::ffi::OsStr]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_omnisym"))
        .arg("wasm-split")
        .args(args)
        .output()
        .expect("the binary runs");
    Run {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `omnisym wasm-split` gives the fixture module (wasm-ld's, DWARF in custom sections,
/// no build id) a build id, writes its debug companion and strips the module; the
/// server then finds the companion by that id and symbolicates the module's frames with
/// it, as with the unsplit module.
#[tokio::test]
async fn wasm_split_makes_a_companion_the_server_symbolicates_with() {
    use symbolic::debuginfo::Object;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("prog.wasm");
    std::fs::copy(fixtures().join("lazy/wasm/prog.wasm"), &input).unwrap();
    let (main, companion) = (
        dir.path().join("main.wasm"),
        dir.path().join("prog.debug.wasm"),
    );
    let id = "5f0e3a1c-9b2d-4c7e-8a61-2d4f9e0b7c35";
    let run = wasm_split(&[
        input.as_os_str(),
        "-o".as_ref(),
        main.as_os_str(),
        "-d".as_ref(),
        companion.as_os_str(),
        "--strip".as_ref(),
        "--build-id".as_ref(),
        id.as_ref(),
    ]);
    assert!(run.success, "{}", run.stderr);
    let code_id = id.replace('-', "");
    assert_eq!(run.stdout.trim(), code_id);
    assert_eq!(
        std::fs::read(&input).unwrap(),
        std::fs::read(fixtures().join("lazy/wasm/prog.wasm")).unwrap(),
        "-o leaves the input alone"
    );

    let main_bytes = std::fs::read(&main).unwrap();
    let stripped = Object::parse(&main_bytes).unwrap();
    assert_eq!(stripped.code_id().unwrap().as_str(), code_id);
    assert!(!stripped.has_debug_info(), "--strip removes the DWARF");
    assert!(
        stripped.has_symbols(),
        "the name section stays without --strip-names"
    );
    let url = b"\x0fprog.debug.wasm";
    assert!(
        main_bytes.windows(url.len()).any(|w| w == url),
        "external_debug_info names the companion"
    );
    let companion_bytes = std::fs::read(&companion).unwrap();
    let debug = Object::parse(&companion_bytes).unwrap();
    assert_eq!(debug.debug_id().to_string(), id);
    assert!(debug.has_debug_info());

    // A module with a build id keeps it, and is not rewritten.
    let again = wasm_split(&[
        main.as_os_str(),
        "--build-id".as_ref(),
        "00000000-0000-0000-0000-000000000001".as_ref(),
    ]);
    assert!(again.success, "{}", again.stderr);
    assert_eq!(again.stdout.trim(), code_id);
    assert_eq!(std::fs::read(&main).unwrap(), main_bytes);

    // The native layout keeps a Wasm debug file by its code id.
    let symbols = dir.path().join("symbols");
    let at = symbols
        .join(&code_id[..2])
        .join(format!("{}.debug", &code_id[2..]));
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::copy(&companion, &at).unwrap();
    let server = Server::start(&format!(
        "sources:\n  - {{id: local, type: filesystem, path: \"{}\", layout: {{type: native}}}}\n",
        symbols.display()
    ));
    let addresses = fixture_json("lazy/manifest.json")["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "wasm/prog.wasm")
        .unwrap()["return_addresses"]
        .clone();
    let frames: Vec<Value> = addresses
        .as_array()
        .unwrap()
        .iter()
        .map(|a| serde_json::json!({"instruction_addr": a, "addr_mode": "rel:0"}))
        .collect();
    let body = serde_json::json!({
        "modules": [{"type": "wasm", "code_id": code_id, "debug_id": id,
                     "debug_file": "prog.wasm", "image_addr": "0x0"}],
        "stacktraces": [{"frames": frames}],
    });
    let (status, answer) = server.post("/symbolicate", &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["modules"][0]["debug_status"], "found", "{answer:#}");
    for frame in answer["stacktraces"][0]["frames"].as_array().unwrap() {
        assert_eq!(frame["status"], "symbolicated", "{answer:#}");
        // A source path comes only from the DWARF, not from the name section.
        assert!(frame["abs_path"].is_string(), "from the DWARF: {frame}");
    }
}

// ------------------------------------------------------- symbolicate --event-id

/// What the Sentry stand-in serves: events by id (JSON, and attached crash files), and
/// the project's debug files, each behind the token.
#[derive(Clone)]
struct SentryProjectStandIn {
    events: Arc<HashMap<String, Value>>,
    crash_files: Arc<HashMap<String, Vec<u8>>>,
    debug_file: Arc<(String, Vec<u8>)>,
    asked: Arc<Mutex<Vec<String>>>,
}

const SENTRY_TOKEN: &str = "sntrys_cli_test";

async fn sentry_api(
    State(s): State<SentryProjectStandIn>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    s.asked.lock().unwrap().push(uri.to_string());
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {SENTRY_TOKEN}"))
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let path = uri.path();
    let Some(rest) = path.strip_prefix("/api/0/projects/acme/app/") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match parts[..] {
        ["events", id, "json"] => match s.events.get(id) {
            Some(event) => axum::Json(event.clone()).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        },
        ["events", id, "attachments"] => {
            let listed: Vec<Value> = s
                .crash_files
                .contains_key(id)
                .then(|| json!({"id": "77", "type": "event.minidump", "name": "upload.dmp"}))
                .into_iter()
                .chain([json!({"id": "78", "type": "event.attachment", "name": "log.txt"})])
                .collect();
            axum::Json(listed).into_response()
        }
        ["events", id, "attachments", "77"] if query.contains_key("download") => {
            match s.crash_files.get(id) {
                Some(data) => data.clone().into_response(),
                None => StatusCode::NOT_FOUND.into_response(),
            }
        }
        ["files", "dsyms"] => {
            let (debug_id, data) = &*s.debug_file;
            if query.get("id").map(String::as_str) == Some("1") {
                return data.clone().into_response();
            }
            let hits: Vec<Value> = (query.get("debug_id") == Some(debug_id))
                .then(|| {
                    json!({
                        "id": "1", "uuid": debug_id, "debugId": debug_id,
                        "objectName": "crash", "symbolType": "elf", "cpuName": "x86_64",
                        "headers": {"Content-Type": "application/octet-stream"},
                        "size": data.len(), "sha1": "0",
                        "dateCreated": "2024-01-01T00:00:00Z", "data": {"features": ["debug"]},
                    })
                })
                .into_iter()
                .collect();
            axum::Json(hits).into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `--event-id` fetches the event from the project (or the minidump attached to it),
/// with the project's debug files as a source: the answers are the ones the same files
/// give offline with the symbols on disk.
#[tokio::test]
async fn an_event_id_is_fetched_from_sentry_and_symbolicated_with_the_project_files() {
    let home = tempfile::tempdir().unwrap();
    let stored = read_json(&event_file("native-elf.json"));
    let (event_id, crash_id) = (
        "0a1b2c3d4e5f40718293a4b5c6d7e8f9",
        "1f2e3d4c5b6a47988796a5b4c3d2e1f0",
    );
    let dump = minidump_file(&minidump_variant("fp"), "minidump");
    let stand_in = SentryProjectStandIn {
        events: Arc::new(HashMap::from([(event_id.to_owned(), stored.clone())])),
        crash_files: Arc::new(HashMap::from([(
            crash_id.to_owned(),
            std::fs::read(&dump).unwrap(),
        )])),
        debug_file: Arc::new((
            elf()["debug_id"].as_str().unwrap().to_owned(),
            std::fs::read(elf_debug_file()).unwrap(),
        )),
        asked: Arc::default(),
    };
    let app = axum::Router::new()
        .fallback(sentry_api)
        .with_state(stand_in.clone());
    let url = format!("http://{}/", common::serve(app).await);
    // Organisation, project and token from a settings file, as symbolicli reads them.
    let settings = home.path().join("symboliclirc");
    std::fs::write(
        &settings,
        format!("org = \"acme\"\nproject = \"app\"\nauth = {{ token = \"{SENTRY_TOKEN}\" }}\n"),
    )
    .unwrap();
    let settings = path_str(&settings);
    let fetch = async |id: &str, extra: &[&str]| {
        let mut args = vec![
            "symbolicate",
            "--event-id",
            id,
            "--url",
            &url,
            "--settings",
            settings,
        ];
        args.extend(extra);
        omnisym_async(home.path(), &args).await
    };
    let fetched = fetch(event_id, &[]).await.json();
    let dir = symbols(&[elf_native_symbols()]);
    let offline = symbolicate(home.path(), &event_file("native-elf.json"), dir.path(), &[]).json();
    assert_eq!(fetched["exception"], offline["exception"]);
    assert_eq!(fetched["threads"], offline["threads"]);
    let candidates = fetched["debug_meta"]["images"][0]["candidates"].to_string();
    assert!(candidates.contains("sentry:project"), "{candidates}");
    let asked = stand_in.asked.lock().unwrap().clone();
    assert!(
        asked.iter().any(|u| u.contains("/files/dsyms/?id=1")),
        "{asked:?}"
    );

    // An event with a minidump attached is symbolicated from the minidump.
    let from_dump = fetch(crash_id, &[]).await.json();
    let local = omnisym(home.path(), &["symbolicate", path_str(&dump)]).json();
    assert_eq!(from_dump["stacktraces"], local["stacktraces"]);
    assert_eq!(from_dump["crashed"], true);

    // A wrong token is refused by the server, and said so.
    let refused = fetch(event_id, &["--auth-token", "wrong"]).await;
    assert!(!refused.success);
    assert!(refused.stderr.contains("401"), "{}", refused.stderr);
    assert!(
        !refused.stderr.contains("wrong"),
        "the token is not repeated: {}",
        refused.stderr
    );
}
