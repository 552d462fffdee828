//! End-to-end tests of symbfile uploads (`POST /api/symbols-ranges`,
//! `/api/symbols-returnpads`) and of `/symbolicate` with a module's `file_id`: the real
//! server on loopback, symbfiles written by Python's protobuf package from the ELF of
//! fixtures/native (fixtures/symbfile/make.py), answers checked against the
//! llvm-symbolizer oracle of fixtures/native/manifest.json.

use crate::common;

use axum::http::StatusCode;
use common::symbfile::*;
use common::tmpfs::Tmpfs;
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

/// The second upload of an executable changes what the next lookup answers: ranges
/// after return pads answer the crashing instruction too, which is no call site.
#[tokio::test]
async fn ranges_after_return_pads_change_the_answer() {
    let server = Server::start(&config(""));
    let id = file_id();
    Part::return_pads(&id, 0, 1, &symbfile("returnpads.symbfile"))
        .accepted(&server)
        .await;
    let (_, pads) = server.post("/symbolicate", &crash_stack_request(&id)).await;
    let crashing = &pads["stacktraces"][0]["frames"][0];
    assert_eq!(crashing["status"], "missing_symbol", "{pads:#}");

    Part::ranges(&id, 0, 1, &symbfile("ranges.symbfile"))
        .accepted(&server)
        .await;
    let (_, both) = server.post("/symbolicate", &crash_stack_request(&id)).await;
    assert_eq!(chains(&both), oracle_chains("crash_stack"));
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

    // The SymCache is derived (a cache kind): gone, it is rebuilt from the stored
    // symbfiles. Each completed upload built one: the ranges alone, then the ranges
    // with the return pads (cleanup removes the first once it is unused).
    let symcaches = cache_dir.join("symbfile_symcaches/1/global");
    let mut removed = 0;
    for entry in std::fs::read_dir(&symcaches).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_string_lossy().starts_with('.') {
            std::fs::remove_file(path).unwrap();
            removed += 1;
        }
    }
    assert_eq!(removed, 2);

    let server = Server::start_in(dir.path(), &cache_dir, &config(""));
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&response);

    Part::ranges(second, 1, 2, parts[1]).accepted(&server).await;
    let (_, response) = server.post("/symbolicate", &probe_request(second)).await;
    assert_probes(&response);
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A framed record of `ty` around a protobuf `body`.
fn record(ty: u64, body: &[u8], out: &mut Vec<u8>) {
    varint(body.len() as u64, out);
    varint(ty, out);
    out.extend_from_slice(body);
}

/// A return-pad symbfile whose one pad holds a chain of `frames` functions, each
/// frame one byte per column: 200,000 frames are 600 KB.
fn deep_return_pad(frames: usize) -> Vec<u8> {
    let mut out = b"symbfile".to_vec();
    record(1, &[], &mut out);
    // StringTableV1 { strings: ["f", "a.c"] }
    record(4, b"\x0a\x01f\x0a\x03a.c", &mut out);
    let mut pad = vec![0x28]; // setElfVA
    varint(0x1000, &mut pad);
    for (tag, value) in [(0x12, 0u8), (0x1a, 1), (0x22, 7)] {
        // func, file and line, packed
        pad.push(tag);
        varint(frames as u64, &mut pad);
        pad.extend(std::iter::repeat_n(value, frames));
    }
    record(3, &pad, &mut out);
    out
}

#[tokio::test]
async fn a_chain_too_deep_is_refused_and_the_server_stays_up() {
    let server = Server::start(&config(""));
    let id = file_id();
    let deep = deep_return_pad(200_000);
    assert!(deep.len() > 600_000);

    // Whole, and sent again: the same clear refusal each time.
    for _ in 0..2 {
        let answer = Part::return_pads(&id, 0, 1, &deep).send(&server).await;
        let text = answer.1["error"]["Text"].as_str().unwrap().to_owned();
        assert!(
            text.contains("200000 functions") && text.contains("symbfile.max_inline_depth (128)")
                || text.contains("(128, symbfile.max_inline_depth)"),
            "{text}"
        );
        assert_eq!(refused(answer, StatusCode::BAD_REQUEST), "1004");
    }
    // In parts: the last part is refused, and so is that part sent again, rather than
    // a success for an upload that can never complete.
    let halves = split(&deep, 2);
    Part::return_pads(&id, 0, 2, halves[0])
        .accepted(&server)
        .await;
    for _ in 0..2 {
        let answer = Part::return_pads(&id, 1, 2, halves[1]).send(&server).await;
        assert_eq!(refused(answer, StatusCode::BAD_REQUEST), "1004");
    }
    let (status, _) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK);

    // A good upload of the same executable (the same parts count) is served.
    upload_all(&server, &id).await;
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&response);
}

#[tokio::test]
async fn uploads_are_counted_as_their_bytes_arrive() {
    let server = Server::start(&config("  max_file_size: 1000\n  max_pending_size: 1500\n"));
    let id = file_id();
    let ranges = symbfile("ranges.symbfile");
    assert!(ranges.len() > 800 && ranges.len() <= 1000);

    // One upload past max_file_size is refused at the part that passes it, not at its
    // last part, and so is that part sent again.
    let other = "AQEBAQEBAQEBAQEBAQEBAQ";
    Part::ranges(other, 0, 3, &ranges[..600])
        .accepted(&server)
        .await;
    for _ in 0..2 {
        let answer = Part::ranges(other, 1, 3, &ranges[..600])
            .send(&server)
            .await;
        assert_eq!(refused(answer, StatusCode::PAYLOAD_TOO_LARGE), "1005");
    }

    // Unfinished uploads together: 600 + 800 + 800 bytes pass max_pending_size.
    let (head, tail) = ranges.split_at(800);
    Part::ranges(&id, 0, 2, head).accepted(&server).await;
    let second = "AAAAAAAAAAAAAAAAAAAAAA";
    let answer = Part::ranges(second, 0, 2, head).send(&server).await;
    let text = answer.1["error"]["Text"].as_str().unwrap().to_owned();
    assert!(text.contains("symbfile.max_pending_size"), "{text}");
    assert_eq!(refused(answer, StatusCode::TOO_MANY_REQUESTS), "1006");

    // The first upload completes and frees its bytes: the second goes through.
    Part::ranges(&id, 1, 2, tail).accepted(&server).await;
    Part::ranges(second, 0, 2, head).accepted(&server).await;
    Part::ranges(second, 1, 2, tail).accepted(&server).await;
    for file_id in [id.as_str(), second] {
        let (_, response) = server.post("/symbolicate", &probe_request(file_id)).await;
        assert_probes(&response);
    }
}

/// Which of the server's directories is put on a 1 MiB tmpfs.
enum OnTmpfs {
    Store,
    Cache,
}

/// A server with its symbfile store or its cache on a tmpfs of its own (the other on
/// the temp dir returned), or `None` when `test` may skip (see `Tmpfs::mount_or_skip`).
fn on_a_tmpfs(on: OnTmpfs, test: &str) -> Option<(Tmpfs, Server, tempfile::TempDir)> {
    let tmpfs = Tmpfs::mount_or_skip(1 << 20, test)?;
    let dir = tempfile::tempdir().unwrap();
    let (store, cache) = match on {
        OnTmpfs::Store => (tmpfs.path().join("symbfiles"), dir.path().join("cache")),
        OnTmpfs::Cache => (dir.path().join("symbfiles"), tmpfs.path().join("cache")),
    };
    let config = config(&format!("  dir: {}\n", store.display()));
    let server = Server::start_in(dir.path(), &cache, &config);
    Some((tmpfs, server, dir))
}

#[tokio::test]
async fn a_full_disk_keeps_the_parts_and_the_retry_completes_the_upload() {
    let test = "a_full_disk_keeps_the_parts_and_the_retry_completes_the_upload";
    let Some((tmpfs, server, _dir)) = on_a_tmpfs(OnTmpfs::Store, test) else {
        return;
    };
    let id = file_id();
    let ranges = symbfile("ranges.symbfile");
    let parts = split(&ranges, 3);
    Part::ranges(&id, 0, 3, parts[0]).accepted(&server).await;
    Part::ranges(&id, 1, 3, parts[1]).accepted(&server).await;

    // Room for the last part, none to join the parts.
    let filler = tmpfs.fill(4096);
    let answer = Part::ranges(&id, 2, 3, parts[2]).send(&server).await;
    let text = answer.1["error"]["Text"].as_str().unwrap().to_owned();
    assert!(text.contains("disk is full"), "{text}");
    assert_eq!(refused(answer, StatusCode::INSUFFICIENT_STORAGE), "1007");
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_eq!(response["modules"][0]["debug_status"], "missing");

    // Space again: sending the last part again completes the upload.
    drop(filler);
    Part::ranges(&id, 2, 3, parts[2]).accepted(&server).await;
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&response);
    drop(server);
}

/// The upload's SymCache is a cache: a full cache disk does not refuse the upload, and
/// the first lookup with room builds the SymCache from the stored symbfile.
#[tokio::test]
async fn a_full_cache_disk_does_not_refuse_an_upload() {
    let test = "a_full_cache_disk_does_not_refuse_an_upload";
    let Some((tmpfs, server, _dir)) = on_a_tmpfs(OnTmpfs::Cache, test) else {
        return;
    };
    let id = file_id();
    let filler = tmpfs.fill(0);
    Part::ranges(&id, 0, 1, &symbfile("ranges.symbfile"))
        .accepted(&server)
        .await;
    drop(filler);
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&response);
    drop(server);
}

#[tokio::test]
async fn cleanup_leaves_an_upload_in_progress_alone() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    let server = Server::start_in(dir.path(), &cache_dir, &config(""));
    let id = file_id();
    let ranges = symbfile("ranges.symbfile");
    let (head, tail) = ranges.split_at(ranges.len() / 2);

    // The first half of the body is in; the rest is still to come.
    let addr = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /api/symbols-ranges HTTP/1.1\r\nHost: {addr}\r\nFileID: {id}\r\nFilePart: 0\r\n\
         FileParts: 1\r\nAuthorization: APIKey {KEY}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        ranges.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(head).await.unwrap();
    stream.flush().await.unwrap();
    let tmp = cache_dir.join("symbfiles/tmp");
    let receiving = || {
        std::fs::read_dir(&tmp)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".part"))
    };
    let started = std::time::Instant::now();
    while !receiving() {
        assert!(started.elapsed().as_secs() < 30, "the part never began");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let config_path = dir.path().join("cleanup.yml");
    std::fs::write(
        &config_path,
        format!("cache_dir: {}\n{}", cache_dir.display(), config("")),
    )
    .unwrap();
    common::run_cleanup(&config_path, &[]);
    assert!(receiving(), "cleanup removed the part being received");

    stream.write_all(tail).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.ends_with(r#"{"status":200,"success":true}"#),
        "{answer}"
    );
    let (_, response) = server.post("/symbolicate", &probe_request(&id)).await;
    assert_probes(&response);
}
