//! Android libraries loaded straight from the APK (`extractNativeLibs=false`), end to
//! end over the real server: the library of `fixtures/apk` (cross-built for arm64 by its
//! build.sh, stored uncompressed and page-aligned in `base.apk`), asked for as the
//! Android SDKs name it, and the minidump of its crash, whose module list names the
//! APK. Every frame is compared with binutils' addr2line on the library.

use crate::common;

use std::path::Path;

use axum::http::StatusCode;
use common::{Server, fixture_json, fixtures, minidump_form};
use serde_json::{Value, json};

fn expected() -> Value {
    fixture_json("apk/expected.json")
}

/// (function, abs_path, lineno) of the crash's frames, as addr2line has them.
fn truth() -> Vec<(String, String, u64)> {
    truth_of(&expected())
}

fn truth_of(crash: &Value) -> Vec<(String, String, u64)> {
    answered(&crash["frames"])
}

/// (function, abs_path, lineno) of frames, answered or expected.
fn answered(frames: &Value) -> Vec<(String, String, u64)> {
    frames
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or_default().to_owned(),
                f["abs_path"].as_str().unwrap_or_default().to_owned(),
                f["lineno"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// A `native`-layout source holding the library (with its DWARF) under its build id.
fn symbols() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let code_id = expected()["code_id"].as_str().unwrap().to_owned();
    let path = root.path().join(&code_id[..2]).join(&code_id[2..]);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(fixtures().join("apk/libgame.so"), &path).unwrap();
    std::fs::copy(
        fixtures().join("apk/libgame.so"),
        path.with_extension("debug"),
    )
    .unwrap();
    root
}

fn sources(root: &Path) -> Value {
    json!([{"type": "filesystem", "id": "local", "path": root, "layout": {"type": "native"}}])
}

/// The module as an Android SDK names a library inside the APK: `code_file` is the APK
/// (sentry-native's signal handler, from /proc/self/maps), the APK and the library's
/// name (sentry-java's tombstones), or the APK and the entry's path (Crashpad).
fn request(root: &Path, code_file: &str) -> Value {
    let e = expected();
    let frames: Vec<Value> = e["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| json!({"instruction_addr": format!("0x{:x}", f["addr"].as_u64().unwrap()), "package": code_file}))
        .collect();
    json!({
        "sources": sources(root),
        "signal": 11,
        "modules": [{
            "type": "elf",
            "arch": "arm64",
            "code_id": e["code_id"],
            "debug_id": e["debug_id"],
            "code_file": code_file,
            "image_addr": format!("0x{:x}", e["image_addr"].as_u64().unwrap()),
            "image_size": e["image_size"],
        }],
        "stacktraces": [{"frames": frames, "registers": {}}],
    })
}

#[tokio::test]
async fn every_frame_of_a_library_in_an_apk_by_symbolicate() {
    let server = Server::start("");
    let root = symbols();
    let apk = expected()["code_file"].as_str().unwrap().to_owned();
    let entry = expected()["apk_entry"].as_str().unwrap().to_owned();
    for code_file in [
        apk.clone(),
        format!("{apk}!libgame.so"),
        format!("{apk}!/{entry}"),
    ] {
        let (status, response) = server
            .post("/symbolicate", &request(root.path(), &code_file))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response["status"], "completed", "{response:#}");
        let module = &response["modules"][0];
        assert_eq!(module["debug_status"], "found", "{code_file}: {response:#}");
        assert_eq!(module["code_file"], code_file.as_str());
        let frames = &response["stacktraces"][0]["frames"];
        assert_eq!(answered(frames), truth(), "{code_file}: {response:#}");
        for frame in frames.as_array().unwrap() {
            assert_eq!(frame["status"], "symbolicated", "{frame}");
            assert_eq!(frame["package"], code_file.as_str(), "{frame}");
        }
    }
}

/// The minidump's module list names the APK (and its maps map the APK at the
/// library's offset): the walk finds the library's CFI by its build id, and every
/// frame of the crashed thread is the library's, symbolicated.
#[tokio::test]
async fn every_frame_of_a_library_in_an_apk_by_minidump() {
    let server = Server::start("");
    let root = symbols();
    let dump = std::fs::read(fixtures().join("apk/crash.dmp")).unwrap();
    let (content_type, body) = minidump_form(&dump, &sources(root.path()), &json!({}));
    let (status, response) = server.post_typed("/minidump", &content_type, body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed", "{response:#}");
    let module = &response["modules"][0];
    assert_eq!(module["code_file"], expected()["code_file"], "{response:#}");
    assert_eq!(module["code_id"], expected()["code_id"], "{response:#}");
    assert_eq!(module["debug_status"], "found", "{response:#}");
    assert_eq!(module["unwind_status"], "found", "{response:#}");
    assert_eq!(response["system_info"]["cpu_arch"], "arm64", "{response:#}");
    let thread = common::crashing_thread(&response);
    assert_eq!(answered(&thread["frames"]), truth(), "{response:#}");
}

/// A library linked without a build id, as the SDKs name it (no code id; its debug id
/// hashed from its code, symbolic's and Breakpad's way): upstream can neither sort nor
/// find it. `omnisym sort` (and the store, which places files the same way) names it by
/// that debug id in the unified layout, where the lookup now finds it; the APK sorted
/// as it is yields both of its libraries, the stripped ones it ships.
#[tokio::test]
async fn a_library_without_a_build_id_by_its_debug_id() {
    let noid = fixtures().join("apk/libnoid.so");
    let data = std::fs::read(&noid).unwrap();
    let object = symbolic::debuginfo::Object::parse(&data).unwrap();
    assert_eq!(object.code_id(), None);
    let debug_id = object.debug_id();
    let e = expected();
    // What the minidump's CodeView record holds is symbolic's (and the SDKs') debug id.
    assert_eq!(e["noid"]["debug_id"], debug_id.to_string());
    let apk = e["code_file"].as_str().unwrap();
    let code_file = format!("{apk}!/{}", e["noid"]["apk_entry"].as_str().unwrap());
    let frames: Vec<Value> = e["noid"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| json!({"instruction_addr": format!("0x{:x}", f["addr"].as_u64().unwrap())}))
        .collect();
    let request = |root: &Path| {
        json!({
            "sources": [{"type": "filesystem", "id": "sorted", "path": root, "layout": {"type": "unified"}}],
            "signal": 11,
            "modules": [{
                "type": "elf",
                "arch": "arm64",
                "debug_id": debug_id.to_string(),
                "code_file": code_file,
                "image_addr": format!("0x{:x}", e["image_addr"].as_u64().unwrap()),
                "image_size": e["image_size"],
            }],
            "stacktraces": [{"frames": frames, "registers": {}}],
        })
    };
    let server = Server::start("");

    let tree = common::sort_into_tempdir(&[&noid]);
    let (status, response) = server.post("/symbolicate", &request(tree.path())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    assert_eq!(
        answered(&response["stacktraces"][0]["frames"]),
        truth_of(&e["noid"]),
        "{response:#}"
    );

    // The APK alone: its stripped libraries, each under its own id, so the module is
    // found (its exported function named, its CFI there to unwind by).
    let tree = common::sort_into_tempdir(&[&fixtures().join("apk/base.apk")]);
    let (_, response) = server.post("/symbolicate", &request(tree.path())).await;
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    let frames = answered(&response["stacktraces"][0]["frames"]);
    assert_eq!(
        frames.last().unwrap().0,
        "Java_com_example_game_MainActivity_nativeTick"
    );
}

/// The minidump of the same crash in the library without a build id: its module names
/// the APK and holds Breakpad's hash of the code as its code id, which no file is stored
/// under; the lookup then asks for the debug id alone, and finds what `omnisym sort`
/// placed there, for the walk and for the frames.
#[tokio::test]
async fn a_minidump_of_a_library_without_a_build_id() {
    let server = Server::start("");
    let tree = common::sort_into_tempdir(&[&fixtures().join("apk/libnoid.so")]);
    let e = expected();
    let dump = std::fs::read(fixtures().join("apk/crash-noid.dmp")).unwrap();
    let sources = json!([{"type": "filesystem", "id": "sorted", "path": tree.path(), "layout": {"type": "unified"}}]);
    let (content_type, body) = minidump_form(&dump, &sources, &json!({}));
    let (status, response) = server.post_typed("/minidump", &content_type, body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    let module = &response["modules"][0];
    assert_eq!(module["code_id"], e["noid"]["code_id"], "{response:#}");
    assert_eq!(module["debug_id"], e["noid"]["debug_id"], "{response:#}");
    assert_eq!(module["debug_status"], "found", "{response:#}");
    assert_eq!(module["unwind_status"], "found", "{response:#}");
    let thread = common::crashing_thread(&response);
    assert_eq!(
        answered(&thread["frames"]),
        truth_of(&e["noid"]),
        "{response:#}"
    );
}

/// The steered walk (`unwind_order`) on arm64: the same frames, whichever strategy
/// comes first and found by it, and the stack ends where the dump's does (a zero frame
/// record).
#[tokio::test]
async fn a_steered_walk_of_the_arm64_dump_finds_the_same_frames() {
    let server = Server::start("");
    let root = symbols();
    let dump = std::fs::read(fixtures().join("apk/crash.dmp")).unwrap();
    for order in [
        json!(["cfi", "frame_pointer"]),
        json!(["frame_pointer", "cfi"]),
    ] {
        let options = json!({"unwind_order": order});
        let (content_type, body) = minidump_form(&dump, &sources(root.path()), &options);
        let (status, response) = server.post_typed("/minidump", &content_type, body).await;
        assert_eq!(status, StatusCode::OK, "{response}");
        let thread = common::crashing_thread(&response);
        assert_eq!(
            answered(&thread["frames"]),
            truth(),
            "{order}: {response:#}"
        );
        let trust: Vec<&str> = thread["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["trust"].as_str().unwrap())
            .collect();
        // The innermost frame is always unwound by its rules first (a leaf pushed no
        // frame record); after it, the order decides.
        let steered = match order[0].as_str() {
            Some("cfi") => ["context", "cfi", "cfi", "cfi"],
            _ => ["context", "cfi", "fp", "fp"],
        };
        assert_eq!(trust, steered, "{order}");
    }
}
