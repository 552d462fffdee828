//! End-to-end tests of a SymCache's secondary inputs over the real server: Unity il2cpp
//! line mappings (`fixtures/il2cpp`) and Apple BCSymbolMaps reached through a dSYM's UUID
//! map (`fixtures/bcsymbolmap`), served from directories in the unified layout beside
//! their debug files.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{Server, candidates, fixture_json, fixtures, hex, unified_path};

fn put(root: &Path, rel: &str, src: &Path) {
    let dest = root.join(rel);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(src, dest).unwrap();
}

fn put_bytes(root: &Path, rel: &str, bytes: &[u8]) {
    let dest = root.join(rel);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(dest, bytes).unwrap();
}

fn source(id: &str, dir: &Path) -> Value {
    json!({"type": "filesystem", "id": id, "path": dir, "layout": {"type": "unified"}})
}

/// The frames of a manifest: the crash as it is, the return address adjusted.
fn frames(manifest: &Value) -> Value {
    let frames = manifest["frames"].as_array().unwrap();
    json!([
        {"instruction_addr": frames[0]["addr"], "adjust_instruction_addr": false},
        {"instruction_addr": frames[1]["addr"], "adjust_instruction_addr": true},
    ])
}

fn answered_frames(response: &Value) -> Vec<Value> {
    assert_eq!(response["status"], "completed", "{response:#}");
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    response["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .clone()
}

// ---------------------------------------------------------------- il2cpp

fn il2cpp() -> Value {
    fixture_json("il2cpp/manifest.json")
}

pub(crate) fn il2cpp_file(name: &str) -> std::path::PathBuf {
    fixtures().join("il2cpp").join(name)
}

pub(crate) fn il2cpp_code_id() -> String {
    il2cpp()["code_id"].as_str().unwrap().to_owned()
}

/// A directory holding the game's debug file (and, if named, a line mapping).
fn il2cpp_dir(mapping: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let code_id = il2cpp_code_id();
    put(
        dir.path(),
        &unified_path(&code_id, "debuginfo"),
        &il2cpp_file("game.debug"),
    );
    if let Some(mapping) = mapping {
        put(
            dir.path(),
            &unified_path(&code_id, "il2cpp"),
            &il2cpp_file(mapping),
        );
    }
    dir
}

/// A directory holding only a line mapping for the game.
fn mapping_dir(bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    put_bytes(
        dir.path(),
        &unified_path(&il2cpp_code_id(), "il2cpp"),
        bytes,
    );
    dir
}

pub(crate) fn il2cpp_request(sources: Value) -> Value {
    let manifest = il2cpp();
    json!({
        "sources": sources,
        "modules": [{
            "type": "elf",
            "code_id": manifest["code_id"],
            "debug_id": manifest["debug_id"],
            "code_file": "/data/app/lib/x86_64/libil2cpp.so",
            "debug_file": "libil2cpp.so",
            "image_addr": manifest["image_addr"],
            "image_size": manifest["image_size"],
        }],
        "stacktraces": [{"frames": frames(&manifest)}],
        "options": {"dif_candidates": true},
    })
}

/// (function, abs_path, lineno) of each answered frame.
fn locations(response: &Value) -> Vec<(String, String, u64)> {
    answered_frames(response)
        .iter()
        .map(|frame| {
            assert_eq!(frame["status"], "symbolicated", "{frame}");
            (
                frame["function"].as_str().unwrap().to_owned(),
                frame["abs_path"].as_str().unwrap().to_owned(),
                frame["lineno"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// What the manifest says each frame is, in C++ or (with a mapping, `cs_file` renamed
/// to `cs_name`) in C#.
fn expected(cs_name: Option<&str>) -> Vec<(String, String, u64)> {
    il2cpp()["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|frame| {
            let function = frame["function"].as_str().unwrap().to_owned();
            match cs_name {
                Some(cs) => (function, cs.to_owned(), frame["cs_line"].as_u64().unwrap()),
                None => (
                    function,
                    frame["cpp_path"].as_str().unwrap().to_owned(),
                    frame["cpp_line"].as_u64().unwrap(),
                ),
            }
        })
        .collect()
}

const PLAYER_CS: &str = "Assets/Scripts/Player.cs";
const PLAYER_V2_CS: &str = "Assets/Scripts/PlayerV2.cs";

/// A cold module with a line mapping beside its debug file is answered in C# from the
/// first request: the lazy reader, which would answer in C++, is not used for it.
#[tokio::test]
async fn il2cpp_frames_are_answered_with_the_cs_file_and_line() {
    let server = Server::start("");
    let dir = il2cpp_dir(Some("LineNumberMapping.json"));
    let request = il2cpp_request(json!([source("game", dir.path())]));
    let (status, response) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200);
    assert_eq!(locations(&response), expected(Some(PLAYER_CS)));
    let frame = &answered_frames(&response)[0];
    assert_eq!(frame["filename"], "Player.cs", "{frame}");
    assert_eq!(frame["lang"], "cpp", "{frame}");

    // As upstream: the candidates are the debug file's, with the mapping found beside it
    // applied but not listed.
    let listed = candidates(&response);
    let debug_file = format!(
        "{}/{}",
        dir.path().display(),
        unified_path(&il2cpp_code_id(), "debuginfo")
    );
    let found: Vec<&Value> = listed
        .iter()
        .filter(|c| c["download"]["status"] == "ok")
        .collect();
    assert_eq!(found.len(), 1, "{listed:#?}");
    assert_eq!(found[0]["location"], debug_file.as_str());
    assert_eq!(found[0]["debug"]["status"], "ok", "{listed:#?}");
    assert!(
        !listed
            .iter()
            .any(|c| c["location"].as_str().unwrap().ends_with("/il2cpp")),
        "{listed:#?}"
    );

    // Warm, from the SymCache on disk.
    let (_, again) = server.post("/symbolicate", &request).await;
    assert_eq!(locations(&again), expected(Some(PLAYER_CS)));
}

/// The mapping is part of the SymCache's identity: the same debug file answers in C++
/// without one, and a mapping that appears, or another one, builds another SymCache
/// rather than being hidden by the one already built.
#[tokio::test]
async fn a_new_or_other_mapping_builds_another_symcache() {
    let server = Server::start("");
    let debug = il2cpp_dir(None);
    let v1 = mapping_dir(&std::fs::read(il2cpp_file("LineNumberMapping.json")).unwrap());
    let v2 = mapping_dir(&std::fs::read(il2cpp_file("LineNumberMapping-v2.json")).unwrap());
    let alone = json!([source("game", debug.path())]);
    let with_v1 = json!([source("game", debug.path()), source("maps", v1.path())]);
    let with_v2 = json!([source("maps2", v2.path()), source("game", debug.path())]);

    let (_, response) = server
        .post("/symbolicate", &il2cpp_request(alone.clone()))
        .await;
    assert_eq!(locations(&response), expected(None));
    let (_, response) = server.post("/symbolicate", &il2cpp_request(with_v1)).await;
    assert_eq!(locations(&response), expected(Some(PLAYER_CS)));
    let (_, response) = server.post("/symbolicate", &il2cpp_request(with_v2)).await;
    assert_eq!(locations(&response), expected(Some(PLAYER_V2_CS)));
    // The SymCache built without a mapping is still the answer without one.
    let (_, response) = server.post("/symbolicate", &il2cpp_request(alone)).await;
    assert_eq!(locations(&response), expected(None));

    let symcaches = crate::common::files_under(&server.cache_dir.join("symcaches"));
    assert_eq!(symcaches.len(), 3, "{symcaches:#?}");
}

/// Asks for the game's frames with `sources` twice (a failure poisons nothing): both
/// answers are in C++, as without a mapping.
async fn answered_in_cpp_twice(server: &Server, sources: &Value) {
    for _ in 0..2 {
        let (status, response) = server
            .post("/symbolicate", &il2cpp_request(sources.clone()))
            .await;
        assert_eq!(status, 200);
        assert_eq!(locations(&response), expected(None));
    }
}

/// A mapping that is not one costs the mapping only: the frames are answered in C++
/// (twice: the failure poisons nothing), and a good mapping on a later source is used.
/// JSON nested past any parser's stack is one of them.
#[tokio::test]
async fn a_malformed_mapping_is_passed_over() {
    let server = Server::start("");
    let debug = il2cpp_dir(None);
    let truncated = std::fs::read(il2cpp_file("LineNumberMapping.json")).unwrap();
    let truncated = mapping_dir(&truncated[..truncated.len() / 2]);
    let not_a_mapping = mapping_dir(br#"{"a.cpp": {"a.cs": {"line": 1}}}"#);
    let deep = mapping_dir("[".repeat(1 << 20).as_bytes());
    let good = mapping_dir(&std::fs::read(il2cpp_file("LineNumberMapping.json")).unwrap());
    for bad in [&truncated, &not_a_mapping, &deep] {
        let sources = json!([source("bad", bad.path()), source("game", debug.path())]);
        answered_in_cpp_twice(&server, &sources).await;
    }
    let sources = json!([
        source("bad", truncated.path()),
        source("game", debug.path()),
        source("good", good.path()),
    ]);
    let (_, response) = server.post("/symbolicate", &il2cpp_request(sources)).await;
    assert_eq!(locations(&response), expected(Some(PLAYER_CS)));
}

/// A mapping past `max_il2cpp_mapping_size` is refused as it downloads, never stored
/// or read: the frames are answered in C++, the download cache holds only the refusal,
/// and a mapping within the limit is used.
#[tokio::test]
async fn a_mapping_past_its_size_limit_is_refused_unread() {
    let server = Server::start("max_il2cpp_mapping_size: 1000\n");
    let debug = il2cpp_dir(None);
    let mapping = std::fs::read(il2cpp_file("LineNumberMapping.json")).unwrap();
    // The same mapping, with trailing whitespace past the limit (JSON all the same).
    let mut padded = mapping.clone();
    padded.resize(4000, b' ');
    let large = mapping_dir(&padded);
    let sources = json!([source("large", large.path()), source("game", debug.path())]);
    answered_in_cpp_twice(&server, &sources).await;
    let stored = crate::common::files_under(&server.cache_dir.join("il2cpp"));
    assert!(!stored.is_empty());
    for file in &stored {
        let data = std::fs::read(file).unwrap();
        assert!(
            data.starts_with(b"\0omnisym-placeholder\0") && data.len() < 1000,
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&data)
        );
    }

    let small = mapping_dir(&mapping);
    let sources = json!([source("small", small.path()), source("game", debug.path())]);
    let (_, response) = server.post("/symbolicate", &il2cpp_request(sources)).await;
    assert_eq!(locations(&response), expected(Some(PLAYER_CS)));
}

// ---------------------------------------------------------------- BCSymbolMaps

fn bitcode() -> Value {
    fixture_json("bcsymbolmap/manifest.json")
}

fn bitcode_file(name: &str) -> std::path::PathBuf {
    fixtures().join("bcsymbolmap").join(name)
}

/// A directory with the dSYM and whichever of the UUID map and the BCSymbolMap are given
/// (as bytes).
fn bitcode_dir(uuid_map: Option<&[u8]>, symbol_map: Option<&[u8]>) -> tempfile::TempDir {
    let manifest = bitcode();
    let dsym = manifest["debug_id"].as_str().unwrap();
    let original = manifest["original_uuid"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    put(
        dir.path(),
        &unified_path(dsym, "debuginfo"),
        &bitcode_file("game.dwarf"),
    );
    if let Some(bytes) = uuid_map {
        put_bytes(dir.path(), &unified_path(dsym, "uuidmap"), bytes);
    }
    if let Some(bytes) = symbol_map {
        put_bytes(dir.path(), &unified_path(original, "bcsymbolmap"), bytes);
    }
    dir
}

fn bitcode_request(dir: &Path) -> Value {
    let manifest = bitcode();
    let addr = |i: usize| hex(&manifest["frames"][i]["addr"]);
    assert!(addr(0) >= hex(&manifest["image_addr"]));
    json!({
        "sources": [source("app", dir)],
        "modules": [{
            "type": "macho",
            "debug_id": manifest["debug_id"],
            "code_file": "/private/var/containers/Bundle/Application/Game.app/Game",
            "debug_file": "Game",
            "image_addr": manifest["image_addr"],
            "image_size": manifest["image_size"],
        }],
        "stacktraces": [{"frames": frames(&manifest)}],
    })
}

fn real_names() -> Vec<(String, String, u64)> {
    bitcode()["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|frame| {
            (
                frame["function"].as_str().unwrap().to_owned(),
                frame["path"].as_str().unwrap().to_owned(),
                frame["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn hidden_names() -> Vec<(String, String, u64)> {
    let hidden = |name: &str| name.replace("gamelogic.c", "__hidden#2_");
    real_names()
        .into_iter()
        .zip(["__hidden#0_", "__hidden#1_"])
        .map(|((_, path, line), function)| (function.to_owned(), hidden(&path), line))
        .collect()
}

fn maps() -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(bitcode_file("game.uuidmap.plist")).unwrap(),
        std::fs::read(bitcode_file("game.bcsymbolmap")).unwrap(),
    )
}

#[tokio::test]
async fn a_bcsymbolmap_restores_the_names_a_bitcode_build_hid() {
    let server = Server::start("");
    let (uuid_map, symbol_map) = maps();

    let without = bitcode_dir(None, None);
    let (_, response) = server
        .post("/symbolicate", &bitcode_request(without.path()))
        .await;
    assert_eq!(locations(&response), hidden_names());

    let with = bitcode_dir(Some(&uuid_map), Some(&symbol_map));
    let (_, response) = server
        .post("/symbolicate", &bitcode_request(with.path()))
        .await;
    assert_eq!(locations(&response), real_names());
    assert_eq!(answered_frames(&response)[0]["filename"], "gamelogic.c");

    // Only the UUID map, or only the BCSymbolMap: nothing to apply.
    for (uuid_map, symbol_map) in [(Some(&uuid_map[..]), None), (None, Some(&symbol_map[..]))] {
        let dir = bitcode_dir(uuid_map, symbol_map);
        let (_, response) = server
            .post("/symbolicate", &bitcode_request(dir.path()))
            .await;
        assert_eq!(locations(&response), hidden_names());
    }
}

/// A UUID map or BCSymbolMap that does not parse leaves the names hidden, and poisons
/// nothing: the same request answers the same way again.
#[tokio::test]
async fn malformed_bitcode_maps_leave_the_names_hidden() {
    let server = Server::start("");
    let (uuid_map, symbol_map) = maps();
    let plist_without_uuid = String::from_utf8(uuid_map.clone())
        .unwrap()
        .replace("DBGOriginalUUID", "SomethingElse");
    // XML nested deeper than a reader that recurses per level survives.
    let deep_plist = format!(
        "<plist version=\"1.0\">{}</plist>",
        "<dict>".repeat(200_000)
    );
    let cases: [(&[u8], &[u8]); 5] = [
        (&uuid_map[..uuid_map.len() / 2], &symbol_map),
        (plist_without_uuid.as_bytes(), &symbol_map),
        (deep_plist.as_bytes(), &symbol_map),
        (&uuid_map, b"not a BCSymbolMap\n__hidden\n"),
        (&uuid_map, &[0xff, 0xfe, 0x00, 0x42]),
    ];
    for (uuid_map, symbol_map) in cases {
        let dir = bitcode_dir(Some(uuid_map), Some(symbol_map));
        for _ in 0..2 {
            let (status, response) = server
                .post("/symbolicate", &bitcode_request(dir.path()))
                .await;
            assert_eq!(status, 200);
            assert_eq!(locations(&response), hidden_names());
        }
    }
}

/// The fronts that build SymCaches through the same lookup get the same names: the
/// SymCache served over HTTP, and Mozilla's API (modules at address 0, offsets).
#[tokio::test]
async fn the_fronts_answer_with_the_restored_names_too() {
    let (uuid_map, symbol_map) = maps();
    let dir = bitcode_dir(Some(&uuid_map), Some(&symbol_map));
    let server = Server::start(&format!(
        "sources:\n  - {{id: app, type: filesystem, path: \"{}\", layout: {{type: unified}}}}\n",
        dir.path().display()
    ));
    let manifest = bitcode();
    let debug_id = manifest["debug_id"].as_str().unwrap();
    let offset = hex(&manifest["frames"][0]["addr"]) - hex(&manifest["image_addr"]);

    let url = format!(
        "{}/symcache/v{}.1.0/Game/{debug_id}",
        server.url,
        symbolic::symcache::SYMCACHE_VERSION
    );
    let resp = crate::common::client().get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    // Mapped, as a client reads it: SymCaches are read in place, 8-byte aligned.
    let mut file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut file, &resp.bytes().await.unwrap()).unwrap();
    let bytes = symbolic::common::ByteView::map_file(file).unwrap();
    let symcache = symbolic::symcache::SymCache::parse(&bytes).unwrap();
    let found = symcache
        .lookup(offset)
        .next()
        .expect("the crash is covered");
    assert_eq!(found.function().name(), "player_hit0");
    assert_eq!(found.file().unwrap().full_path(), real_names()[0].1);

    let breakpad_id = format!("{}0", debug_id.replace('-', "").to_uppercase());
    let body = json!({"memoryMap": [["Game", breakpad_id]], "stacks": [[[0, offset]]]});
    let (status, response) = server.post("/symbolicate/v5", &body).await;
    assert_eq!(status, 200, "{response}");
    let frame = &response["results"][0]["stacks"][0][0];
    assert_eq!(frame["function"], "player_hit0", "{response:#}");
    assert_eq!(frame["file"], real_names()[0].1.as_str(), "{response:#}");
}
