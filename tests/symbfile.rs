//! End-to-end tests of symbfile uploads (`POST /api/symbols-ranges`,
//! `/api/symbols-returnpads`) and of `/symbolicate` with a module's `file_id`: the real
//! server on loopback, symbfiles written by Python's protobuf package from the ELF of
//! fixtures/native (fixtures/symbfile/make.py), answers checked against the
//! llvm-symbolizer oracle of fixtures/native/manifest.json.

mod common;

use axum::http::StatusCode;
use common::symbfile::*;
use common::{Server, fixtures};
use serde_json::Value;

#[tokio::test]
async fn uploaded_in_parts_then_symbolicated_with_inlines() {
    let server = Server::start(&config(""));
    let id = file_id();

    // Nothing uploaded yet: no configured source has the file either.
    let (_, before) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_eq!(
        before["modules"][0]["debug_status"], "missing",
        "{before:#}"
    );

    // Two of three parts: not served yet.
    let ranges = symbfile("ranges.symbfile");
    let parts = split(&ranges, 3);
    Part::ranges(&id, 0, 3, parts[0]).accepted(&server).await;
    Part::ranges(&id, 2, 3, parts[2]).accepted(&server).await;
    let (_, partial) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_eq!(
        partial["modules"][0]["debug_status"], "missing",
        "{partial:#}"
    );

    upload_all(&server, &id).await;
    let (status, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        response["modules"][0]["debug_status"], "found",
        "{response:#}"
    );
    assert_eq!(
        response["modules"][0]["candidates"][0]["source"], "symbfile:uploads",
        "{response:#}"
    );
    assert_eq!(response["modules"][0]["file_id"], id.as_str());
    assert_probes(&response);

    // Return addresses step back into their call, as for any native module.
    let (_, stack) = server.post("/symbolicate", &crash_stack_request(&id)).await;
    assert_eq!(chains(&stack), oracle_chains("crash_stack"));

    // The FileID in hex names the same executable.
    let hex_id = manifest()["file_id_hex"].as_str().unwrap().to_owned();
    let (_, by_hex) = server.post("/symbolicate", &probe_request(&hex_id)).await;
    assert_probes(&by_hex);

    // An id that is neither base64 nor hex makes the module malformed.
    let (_, bad) = server
        .post("/symbolicate", &probe_request("not a file id"))
        .await;
    assert_eq!(bad["modules"][0]["debug_status"], "malformed", "{bad:#}");
}

#[tokio::test]
async fn return_pads_alone_answer_call_sites() {
    let server = Server::start(&config(""));
    let id = file_id();
    let pads = symbfile("returnpads.symbfile");
    // One part that is two whole symbfiles one after the other.
    Part::return_pads(&id, 0, 1, &pads).accepted(&server).await;
    let (_, response) = server.post("/symbolicate", &crash_stack_request(&id)).await;
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    // The crashing instruction is no call site; every return address is.
    assert_eq!(frames[0]["status"], "missing_symbol", "{response:#}");
    assert_eq!(chains_from(&response, 1), oracle_chains("crash_stack")[1..]);
}

/// Like [`chains`], for the request frames from `first` on.
fn chains_from(response: &Value, first: usize) -> Vec<Vec<(String, String, u64)>> {
    let mut trimmed = response.clone();
    let frames = trimmed["stacktraces"][0]["frames"].as_array_mut().unwrap();
    frames.retain(|f| f["original_index"].as_u64().unwrap() as usize >= first);
    chains(&trimmed).split_off(first)
}

#[tokio::test]
async fn refusals_have_elastic_error_shape() {
    let disabled = Server::start("");
    let id = file_id();
    let answer = Part::ranges(&id, 0, 1, &symbfile("ranges.symbfile"))
        .send(&disabled)
        .await;
    assert_eq!(refused(answer, StatusCode::FORBIDDEN), "1002");
    drop(disabled);

    let server = Server::start(&config("  max_file_size: 2000\n  max_parts: 8\n"));
    let ranges = symbfile("ranges.symbfile");
    let no_key = Part {
        key: None,
        ..Part::ranges(&id, 0, 1, &ranges)
    };
    assert_eq!(
        refused(no_key.send(&server).await, StatusCode::UNAUTHORIZED),
        "1001"
    );
    let wrong_key = Part {
        key: Some("guessed"),
        ..Part::ranges(&id, 0, 1, &ranges)
    };
    assert_eq!(
        refused(wrong_key.send(&server).await, StatusCode::UNAUTHORIZED),
        "1001"
    );

    let bad_magic = Part::ranges(&id, 0, 1, b"symbfilX\x00\x01");
    assert_eq!(
        refused(bad_magic.send(&server).await, StatusCode::BAD_REQUEST),
        "1004"
    );
    // Part 0 of many is checked for the magic as it arrives.
    let elf = std::fs::read(fixtures().join("native/elf/crash")).unwrap();
    let not_symbfile = Part::ranges(&id, 0, 4, &elf[..1024]);
    assert_eq!(
        refused(not_symbfile.send(&server).await, StatusCode::BAD_REQUEST),
        "1004"
    );

    for (part, parts) in [(3, 3), (0, 0), (0, 9)] {
        let out_of_range = Part::ranges(&id, part, parts, &ranges);
        assert_eq!(
            refused(out_of_range.send(&server).await, StatusCode::BAD_REQUEST),
            "1003"
        );
    }
    for bad_id in ["", "AAAA", "../../etc/passwd"] {
        let answer = Part::ranges(bad_id, 0, 1, &ranges).send(&server).await;
        assert_eq!(refused(answer, StatusCode::BAD_REQUEST), "1003");
    }

    // Past max_file_size, counted over all parts.
    let big = [ranges.clone(), ranges.clone(), ranges.clone()].concat();
    let halves = split(&big, 2);
    Part::ranges(&id, 0, 2, halves[0]).accepted(&server).await;
    let too_large = Part::ranges(&id, 1, 2, halves[1]);
    assert_eq!(
        refused(too_large.send(&server).await, StatusCode::PAYLOAD_TOO_LARGE),
        "1005"
    );

    // Cut off in the middle of a record: refused when the last part arrives, and
    // nothing is stored.
    let truncated = Part::ranges(&id, 0, 1, &ranges[..ranges.len() - 3]);
    let answer = truncated.send(&server).await;
    assert!(
        answer.1["error"]["Text"]
            .as_str()
            .unwrap()
            .contains("malformed symbfile at byte")
    );
    assert_eq!(refused(answer, StatusCode::BAD_REQUEST), "1004");
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_eq!(
        response["modules"][0]["debug_status"], "missing",
        "{response:#}"
    );

    // The other key works too.
    let other = Part {
        key: Some("another-key"),
        ..Part::ranges(&id, 0, 1, &ranges)
    };
    other.accepted(&server).await;
}

#[tokio::test]
async fn uploads_and_unfinished_parts_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let id = file_id();
    let ranges = symbfile("ranges.symbfile");
    let parts = split(&ranges, 2);

    let mut server = Server::start_in(dir.path(), &cache_dir, &config(""));
    upload_all(&server, &id).await;
    // A second executable's upload is cut short by the restart.
    let second = "AAAAAAAAAAAAAAAAAAAAAA";
    Part::ranges(second, 0, 2, parts[0]).accepted(&server).await;
    server.kill();

    // The index is derived: gone, it is rebuilt from the stored symbfiles.
    let stored = cache_dir.join("symbfiles/files");
    let mut removed = 0;
    for fanout in std::fs::read_dir(&stored).unwrap() {
        for file_dir in std::fs::read_dir(fanout.unwrap().path()).unwrap() {
            for entry in std::fs::read_dir(file_dir.unwrap().path()).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "symcache") {
                    std::fs::remove_file(path).unwrap();
                    removed += 1;
                }
            }
        }
    }
    assert_eq!(removed, 1);

    let server = Server::start_in(dir.path(), &cache_dir, &config(""));
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&response);

    Part::ranges(second, 1, 2, parts[1]).accepted(&server).await;
    let (_, response) = server.post("/symbolicate", &probe_request(second)).await;
    assert_probes(&response);
}
