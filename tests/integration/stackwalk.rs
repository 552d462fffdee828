//! The steered minidump walk (`unwind_order`) against gdb: static builds of one crash
//! (fixtures/stackwalk, made by its build.sh with minidump-writer, each with gdb's
//! backtrace of the same crash), posted to the real server on loopback with the walk
//! left as upstream's and steered. A frame is matched when gdb shows its address on the
//! same thread; it is invented when gdb does not.

use crate::common;

use std::collections::HashSet;
use std::path::Path;

use axum::http::StatusCode;
use common::{Server, minidump_form};
use serde_json::{Value, json};

const VARIANTS: &[&str] = &["fp", "nofp", "fp-nocfi"];

fn fixture(variant: &str, file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/stackwalk")
        .join(variant)
        .join(file)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A `native`-layout source holding each variant's executable (which carries its own
/// DWARF and CFI) as the executable and as the debug file.
fn symbols() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for variant in VARIANTS {
        let ids = read_json(&fixture(variant, "ids.json"));
        let code_id = ids["code_id"].as_str().unwrap();
        let base = root.path().join(&code_id[..2]).join(&code_id[2..]);
        std::fs::create_dir_all(base.parent().unwrap()).unwrap();
        std::fs::copy(fixture(variant, "walk"), &base).unwrap();
        std::fs::copy(fixture(variant, "walk"), base.with_extension("debug")).unwrap();
    }
    root
}

fn sources(root: &Path) -> Value {
    json!([{"type": "filesystem", "id": "local", "path": root, "layout": {"type": "native"}}])
}

async fn walk(server: &Server, variant: &str, sources: &Value, options: &Value) -> Value {
    let dump = std::fs::read(fixture(variant, "walk.dmp")).unwrap();
    let (content_type, body) = minidump_form(&dump, sources, options);
    let (status, response) = server.post_typed("/minidump", &content_type, body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed", "{response:#}");
    response
}

fn hex(value: &Value) -> u64 {
    let text = value.as_str().unwrap();
    u64::from_str_radix(text.trim_start_matches("0x"), 16).unwrap()
}

/// Each thread's frame addresses, innermost first, one per real frame (inlined frames
/// share their caller's address in both gdb's list and the answer), as gdb gives them: a
/// caller's answered address is its return address less one (the call instruction's
/// last byte, as upstream answers it), gdb's the return address.
fn answer_threads(response: &Value) -> Vec<Vec<u64>> {
    response["stacktraces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|thread| {
            let mut addrs: Vec<u64> = thread["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|frame| hex(&frame["instruction_addr"]))
                .collect();
            addrs.dedup();
            for caller in addrs.iter_mut().skip(1) {
                *caller += 1;
            }
            addrs
        })
        .collect()
}

fn gdb_threads(variant: &str) -> Vec<Vec<u64>> {
    read_json(&fixture(variant, "truth.json"))["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|frames| {
            let mut addrs: Vec<u64> = frames
                .as_array()
                .unwrap()
                .iter()
                .map(|frame| hex(&frame["pc"]))
                .collect();
            addrs.dedup();
            addrs
        })
        .collect()
}

/// Every frame's `trust`, thread after thread.
fn trusts(response: &Value) -> Vec<String> {
    response["stacktraces"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|thread| thread["frames"].as_array().unwrap())
        .map(|frame| frame["trust"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[derive(Debug, Default, PartialEq)]
struct Count {
    gdb: usize,
    matched: usize,
    invented: usize,
    missing: usize,
}

/// Pairs the answer's threads with gdb's by their innermost frame (the pc each thread
/// stopped at) and counts frames.
fn count(variant: &str, response: &Value) -> Count {
    let truth = gdb_threads(variant);
    let answer = answer_threads(response);
    assert_eq!(answer.len(), truth.len(), "{variant}: threads");
    let mut total = Count::default();
    for frames in &answer {
        let gdb = truth
            .iter()
            .find(|gdb| gdb.first() == frames.first())
            .unwrap_or_else(|| panic!("{variant}: no gdb thread stopped at {frames:x?}"));
        let known: HashSet<u64> = gdb.iter().copied().collect();
        let ours: HashSet<u64> = frames.iter().copied().collect();
        total.gdb += gdb.len();
        total.matched += frames.iter().filter(|a| known.contains(a)).count();
        total.invented += frames.iter().filter(|a| !known.contains(a)).count();
        total.missing += gdb.iter().filter(|a| !ours.contains(a)).count();
    }
    total
}

/// The walk as upstream does it, then steered orders without scanning: with them no
/// frame is invented and every frame gdb shows is kept.
#[tokio::test]
async fn a_steered_walk_keeps_gdbs_frames_and_invents_none() {
    let symbols = symbols();
    let sources = sources(symbols.path());
    let server = Server::start("");
    let orders = [
        json!(["cfi", "frame_pointer"]),
        json!(["frame_pointer", "cfi"]),
        json!(["cfi", "frame_pointer", "scan"]),
    ];
    let mut failures = Vec::new();
    for variant in VARIANTS {
        let upstream = walk(&server, variant, &sources, &json!({})).await;
        println!("{variant} upstream's walk: {:?}", count(variant, &upstream));
        for order in &orders {
            let steered = walk(&server, variant, &sources, &json!({"unwind_order": order})).await;
            let counted = count(variant, &steered);
            println!("{variant} {order}: {counted:?}");
            if counted.invented != 0 || counted.missing != 0 {
                failures.push(format!("{variant} {order}: {counted:?}"));
            }
            // The trust says which strategy found each caller: frame pointers first take
            // the callers of walk.c's functions above the innermost (level2, level1,
            // main) through their frame records.
            let trusts = trusts(&steered);
            let by_fp = trusts.iter().filter(|t| *t == "fp").count();
            let fp_first = order[0] == "frame_pointer";
            if fp_first && variant.starts_with("fp") && by_fp < 3 {
                failures.push(format!(
                    "{variant} {order}: only {by_fp} fp frames: {trusts:?}"
                ));
            }
            if !fp_first && *variant != "fp-nocfi" && by_fp != 0 {
                failures.push(format!("{variant} {order}: fp before cfi: {trusts:?}"));
            }
        }
        assert!(
            trusts(&upstream).contains(&"scan".to_owned()),
            "{variant}: upstream's walk invents frames by scanning past clone3's end; \
             this fixture must show that it does"
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The config's `unwind_order` steers requests that name none, and the answer is the
/// one the request option gives; without either the walk is upstream's.
#[tokio::test]
async fn the_configured_order_steers_requests_that_name_none() {
    let symbols = symbols();
    let sources = sources(symbols.path());
    let plain = Server::start("");
    let configured = Server::start("unwind_order: [frame_pointer, cfi]\n");
    for variant in VARIANTS {
        let by_config = walk(&configured, variant, &sources, &json!({})).await;
        let by_request = walk(
            &plain,
            variant,
            &sources,
            &json!({"unwind_order": ["frame_pointer", "cfi"]}),
        )
        .await;
        assert_eq!(
            by_config["stacktraces"], by_request["stacktraces"],
            "{variant}"
        );
        let upstream = walk(&plain, variant, &sources, &json!({})).await;
        assert_ne!(
            by_config["stacktraces"], upstream["stacktraces"],
            "{variant}"
        );
    }
}

/// An order the walker cannot follow is refused, naming the field.
#[tokio::test]
async fn an_impossible_order_is_a_400_naming_the_field() {
    let server = Server::start("");
    let dump = std::fs::read(fixture("fp", "walk.dmp")).unwrap();
    for order in [
        json!(["scan", "cfi"]),
        json!(["cfi", "cfi"]),
        json!([]),
        json!(["fp"]),
    ] {
        let (content_type, body) =
            minidump_form(&dump, &json!([]), &json!({"unwind_order": order}));
        let (status, response) = server.post_typed("/minidump", &content_type, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{order}: {response}");
        assert!(
            response.to_string().contains("options"),
            "{order}: {response}"
        );
    }
}
