//! WebAssembly without DWARF, end to end over the real server: Emscripten's module and
//! source map (`fixtures/wasm`, remade by its build.sh), the stack node printed at a
//! real trap sent as the JavaScript SDK's wasm integration sends it, and each frame
//! compared with what the npm `source-map` package's own lookup answered for that
//! offset when the fixture was made.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{Server, fixture_json, fixtures};

fn wasm_file(name: &str) -> std::path::PathBuf {
    fixtures().join("wasm").join(name)
}

fn put(root: &Path, rel: &str, bytes: &[u8]) {
    let dest = root.join(rel);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(dest, bytes).unwrap();
}

/// The native layout's path of a module: `ab/cdef…` from its code id.
fn native_path(code_id: &str) -> String {
    format!("{}/{}", &code_id[..2], &code_id[2..])
}

fn ids(module: &str) -> (String, String) {
    let ids = &fixture_json("wasm/ids.json")[module];
    let code_id = ids["code_id"].as_str().unwrap().to_owned();
    (code_id, ids["debug_id"].as_str().unwrap().to_owned())
}

/// A request as `@sentry/wasm` sends one: the module by build id (debug id padded from
/// it), each frame an offset relative to it.
fn wasm_request(dir: &Path, code_id: &str, debug_id: &str) -> Value {
    let frames: Vec<Value> = fixture_json("wasm/stack.json")
        .as_array()
        .unwrap()
        .iter()
        .map(|frame| {
            json!({
                "instruction_addr": format!("0x{:x}", frame["offset"].as_u64().unwrap()),
                "addr_mode": "rel:0",
                "platform": "native",
            })
        })
        .collect();
    json!({
        "sources": [{"type": "filesystem", "id": "wasm", "path": dir, "layout": {"type": "native"}}],
        "modules": [{
            "type": "wasm",
            "code_id": code_id,
            "debug_id": debug_id,
            "code_file": "https://cdn.example.invalid/assets/trap.wasm",
            "debug_file": null,
        }],
        "stacktraces": [{"frames": frames}],
        "options": {"dif_candidates": true},
    })
}

/// (function, file, line) the trap's frames should have: node's function names, the
/// source map's own files and lines.
fn expected() -> Vec<(String, Option<String>, Option<u64>)> {
    let stack = fixture_json("wasm/stack.json");
    let answers = fixture_json("wasm/expected.json");
    stack
        .as_array()
        .unwrap()
        .iter()
        .zip(answers.as_array().unwrap())
        .map(|(frame, answer)| {
            (
                frame["function"].as_str().unwrap().to_owned(),
                answer["source"].as_str().map(str::to_owned),
                answer["line"].as_u64(),
            )
        })
        .collect()
}

fn answered(response: &Value) -> Vec<(String, Option<String>, Option<u64>)> {
    assert_eq!(response["status"], "completed", "{response:#}");
    response["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|frame| {
            (
                frame["function"].as_str().unwrap_or_default().to_owned(),
                frame["abs_path"].as_str().map(str::to_owned),
                // A frame without a line says 0.
                frame["lineno"].as_u64().filter(|&line| line > 0),
            )
        })
        .collect()
}

/// The answer to `request`, whose module must have been found.
async fn found(server: &Server, request: &Value) -> Value {
    let (status, response) = server.post("/symbolicate", request).await;
    assert_eq!(status, 200);
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    response
}

/// How many frames match the source map's lookup in function, file and line.
fn matching(response: &Value) -> usize {
    let expected = expected();
    let answered = answered(response);
    assert_eq!(answered.len(), expected.len(), "{response:#}");
    answered
        .iter()
        .zip(&expected)
        .filter(|(a, e)| a == e)
        .count()
}

/// The module stored under its build id, its source map beside it under the name its
/// `sourceMappingURL` ends in (the URL, on a host that does not exist, is not fetched):
/// every frame of the trap is answered as the source map's own lookup answers it, cold
/// and warm. Without the map the module's names alone answer, and no line.
#[tokio::test]
async fn every_frame_of_a_trap_matches_the_source_maps_own_lookup() {
    let server = Server::start("");
    let (code_id, debug_id) = ids("trap.wasm");
    let dir = tempfile::tempdir().unwrap();
    let module = native_path(&code_id);
    put(
        dir.path(),
        &module,
        &std::fs::read(wasm_file("trap.wasm")).unwrap(),
    );
    let request = wasm_request(dir.path(), &code_id, &debug_id);

    let (status, without) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200);
    let names_only = answered(&without);
    assert!(
        names_only.iter().all(|(_, _, line)| line.is_none()),
        "{without:#}"
    );
    let total = expected().len();
    eprintln!(
        "without the map: {}/{total} frames match",
        matching(&without)
    );
    assert_eq!(matching(&without), 0);

    let map = std::fs::read(wasm_file("trap.wasm.map")).unwrap();
    let beside = format!("{}/trap.wasm.map", &code_id[..2]);
    put(dir.path(), &beside, &map);
    // A new server: the first one remembers the module as built without a map.
    let server = Server::start("");
    let response = found(&server, &request).await;
    assert_eq!(answered(&response), expected(), "{response:#}");
    eprintln!("with the map: {}/{total} frames match", matching(&response));
    let (_, warm) = server.post("/symbolicate", &request).await;
    assert_eq!(answered(&warm), expected());
}

/// A directory with the fixture module at `module` and `map` at that path plus `.map`.
fn module_with_map(module: &str, map: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    put(
        dir.path(),
        module,
        &std::fs::read(wasm_file("trap.wasm")).unwrap(),
    );
    put(dir.path(), &format!("{module}.map"), map);
    dir
}

/// A module without a `sourceMappingURL` naming its map (or one named otherwise) finds
/// it at its own path with `.map` added; a map that does not parse is passed over and
/// the module still answers with its names.
#[tokio::test]
async fn the_map_at_the_modules_own_path_and_a_broken_one() {
    let (code_id, debug_id) = ids("trap.wasm");
    let module = native_path(&code_id);
    let dir = module_with_map(&module, &std::fs::read(wasm_file("trap.wasm.map")).unwrap());
    let server = Server::start("");
    let request = wasm_request(dir.path(), &code_id, &debug_id);
    let (status, response) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200);
    assert_eq!(answered(&response), expected(), "{response:#}");

    let broken = module_with_map(&module, b"{\"version\": 3, \"mappings\": 7}");
    let request = wasm_request(broken.path(), &code_id, &debug_id);
    let response = found(&server, &request).await;
    let names: Vec<String> = answered(&response).into_iter().map(|(f, _, _)| f).collect();
    let expected_names: Vec<String> = expected().into_iter().map(|(f, _, _)| f).collect();
    assert_eq!(names, expected_names);
}

/// A module whose `build_id` section follows the tool-conventions spec (a length
/// before the bytes) is found whichever reading the client's ids come from: stored
/// under symbolic's reading (as sentry-cli uploads it) and asked for by the spec's,
/// and stored under the spec's and asked for by symbolic's.
#[tokio::test]
async fn both_readings_of_a_spec_build_id_find_the_module() {
    let (symbolic_code, symbolic_debug) = ids("trap-spec.wasm");
    let (spec_code, spec_debug) = ids("trap-spec.wasm as the spec reads it");
    assert_eq!(symbolic_code, format!("10{spec_code}"));
    let module = std::fs::read(wasm_file("trap-spec.wasm")).unwrap();
    let map = std::fs::read(wasm_file("trap.wasm.map")).unwrap();
    let server = Server::start("");
    for (stored, asked) in [
        (&symbolic_code, (&spec_code, &spec_debug)),
        (&spec_code, (&symbolic_code, &symbolic_debug)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), &native_path(stored), &module);
        put(dir.path(), &format!("{}.map", native_path(stored)), &map);
        let request = wasm_request(dir.path(), asked.0, asked.1);
        let response = found(&server, &request).await;
        assert_eq!(answered(&response), expected(), "{response:#}");
    }
}

/// `omnisym sort` of a build's output (the module and its map side by side, as
/// Emscripten writes them) keeps the map beside the sorted module, so a store seeded
/// from it answers with lines.
#[tokio::test]
async fn a_sorted_module_keeps_its_source_map() {
    let build = tempfile::tempdir().unwrap();
    for file in ["trap.wasm", "trap.wasm.map"] {
        std::fs::copy(wasm_file(file), build.path().join(file)).unwrap();
    }
    let tree = crate::common::sort_into_tempdir(&[&build.path().join("trap.wasm")]);
    let (code_id, debug_id) = ids("trap.wasm");
    let mut request = wasm_request(tree.path(), &code_id, &debug_id);
    request["sources"][0]["layout"]["type"] = json!("unified");
    let server = Server::start("");
    let response = found(&server, &request).await;
    assert_eq!(answered(&response), expected(), "{response:#}");
}
