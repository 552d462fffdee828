//! End-to-end tests of `POST /symbolicate-jvm`: the real server on a loopback port,
//! ProGuard mappings (the hand-written fixtures in fixtures/jvm/) and a source bundle
//! laid out in the unified layout on a directory, an HTTP symbol server and an S3 bucket.
//! Expected values follow from the mapping files; src/jvm/remap.rs derives each one.

use crate::common;

use std::io::Cursor;
use std::path::Path;

use axum::http::StatusCode;
use common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use common::{Server, SymbolServer, fixtures, unified_path};
use serde_json::{Value, json};
use symbolic::debuginfo::sourcebundle::{SourceBundleWriter, SourceFileInfo, SourceFileType};

/// Made-up mapping uuids and a source bundle id; none means anything outside these tests.
const INLINE_UUID: &str = "6f1c2a9e-4b7d-4c1e-8a3f-2d5e7b9c0a41";
const REWRITE_UUID: &str = "b3e8d0f2-91a4-4f6b-a7c5-0e2d4f6a8b13";
const ABSENT_UUID: &str = "0d7a5c3e-1f9b-4e8d-b2a6-c4e6f8a0b257";
const GARBAGE_UUID: &str = "e9a1b3c5-d7f9-4a2b-8c4d-6e8f0a2b4c69";
const BUNDLE_ID: &str = "27c4e6a8-0b2d-4f3e-9a5b-7c9d1e3f5a86";

const ACTIVITY: &str = "org.birdwatch.app.SightingActivity";
const WORKER: &str = "org.birdwatch.app.sync.SyncWorker";
const SCHEDULER: &str = "org.birdwatch.app.sync.SyncScheduler";

fn mapping_fixture(name: &str) -> std::path::PathBuf {
    fixtures().join("jvm").join(name)
}

fn place(root: &Path, rel: &str, data: &[u8]) {
    let dest = root.join(rel);
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(dest, data).unwrap();
}

fn proguard(uuid: &str) -> Value {
    json!({"type": "proguard", "uuid": uuid})
}

/// An obfuscated frame: R8 renamed class and method and left no usable file name, so
/// every file name in an answer comes from the mapping.
fn obfuscated(module: &str, function: &str, lineno: u32, index: usize) -> Value {
    json!({"module": module, "function": function, "lineno": lineno, "index": index})
}

/// `(module, function, lineno, index)` of each frame of stack trace `n`.
fn summary(response: &Value, n: usize) -> Vec<(String, String, u64, u64)> {
    response["stacktraces"][n]["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("no stack trace {n}: {response}"))
        .iter()
        .map(|f| {
            (
                f["module"].as_str().unwrap().to_owned(),
                f["function"].as_str().unwrap().to_owned(),
                f["lineno"].as_u64().unwrap(),
                f["index"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn row(module: &str, function: &str, lineno: u64, index: u64) -> (String, String, u64, u64) {
    (module.to_owned(), function.to_owned(), lineno, index)
}

#[tokio::test]
async fn filesystem_mappings_remap_frames_exceptions_and_classes() {
    let symbols = tempfile::tempdir().unwrap();
    for (uuid, fixture) in [(INLINE_UUID, "inline.txt"), (REWRITE_UUID, "rewrite.txt")] {
        place(
            symbols.path(),
            &unified_path(uuid, "proguard"),
            &std::fs::read(mapping_fixture(fixture)).unwrap(),
        );
    }
    let server = Server::start("");
    let body = json!({
        "platform": "java",
        "sources": [{"type": "filesystem", "id": "dir", "path": symbols.path(),
                     "layout": {"type": "unified"}}],
        "modules": [proguard(INLINE_UUID), proguard(REWRITE_UUID), proguard(ABSENT_UUID)],
        "release_package": "org.birdwatch.app.sync",
        "exceptions": [
            {"type": "c", "module": "b"},
            // R8 moved this one into the root package: the SDKs send no module then.
            {"type": "q", "module": ""},
            {"type": "NullPointerException", "module": "java.lang"},
        ],
        // Default frame order: outermost frame first.
        "stacktraces": [
            {
                "exception": {"type": "NullPointerException", "module": "java.lang"},
                "frames": [obfuscated("b.b", "b", 7, 0), obfuscated("b.a", "a", 3, 1)],
            },
            {
                "exception": {"type": "c", "module": "b"},
                "frames": [
                    {"module": "java.util.concurrent.ThreadPoolExecutor",
                     "function": "runWorker", "lineno": 1145, "index": 0,
                     "filename": "ThreadPoolExecutor.java", "abs_path": "ThreadPoolExecutor.java"},
                    obfuscated("a.a", "onCreate", 4, 1),
                ],
            },
        ],
        "classes": ["a.a", "b.b", "a.d", "zz.Unknown"],
    });
    let (status, response) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["status"], "completed", "{response}");

    // The NPE rule of `doWork` at line 3 removes its two inlined callees; the caller's
    // rule is for another exception and applies to the throwing frame only anyway.
    assert_eq!(
        summary(&response, 0),
        [
            row(SCHEDULER, "schedule", 30, 0),
            row(WORKER, "start", 12, 0),
            row(WORKER, "doWork", 18, 1),
        ]
    );
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    assert!(frames.iter().all(|f| f["in_app"] == true), "{frames:?}");
    assert_eq!(
        response["stacktraces"][0]["exception"],
        json!({"type": "NullPointerException", "module": "java.lang"})
    );

    // One frame expanded into the method and the two it inlined, outermost first, all
    // with the input frame's index; the frame no mapping knows comes back as it came.
    assert_eq!(
        response["stacktraces"][1],
        json!({
            "exception": {"type": "SessionExpiredException", "module": "org.birdwatch.app.sync"},
            "frames": [
                {"function": "runWorker", "filename": "ThreadPoolExecutor.java",
                 "module": "java.util.concurrent.ThreadPoolExecutor",
                 "abs_path": "ThreadPoolExecutor.java", "lineno": 1145, "index": 0},
                {"function": "onCreate", "filename": "SightingActivity.kt", "module": ACTIVITY,
                 "abs_path": "SightingActivity.kt", "lineno": 33, "index": 1},
                {"function": "label", "filename": "SightingRepository.kt",
                 "module": "org.birdwatch.app.SightingRepository",
                 "abs_path": "SightingRepository.kt", "lineno": 48, "index": 1},
                {"function": "displayName", "filename": "Species.kt",
                 "module": "org.birdwatch.app.Species", "abs_path": "Species.kt",
                 "lineno": 12, "index": 1},
            ],
        })
    );

    assert_eq!(
        response["exceptions"],
        json!([
            {"type": "SessionExpiredException", "module": "org.birdwatch.app.sync"},
            {"type": "QuotaExceededException", "module": "org.birdwatch.app.sync"},
            {"type": "NullPointerException", "module": "java.lang"},
        ])
    );
    // Classes come from both mappings; one nobody knows is left out.
    assert_eq!(
        response["classes"],
        json!({
            "a.a": ACTIVITY,
            "a.d": "org.birdwatch.app.Species",
            "b.b": SCHEDULER,
        })
    );
    assert_eq!(
        response["errors"],
        json!([{"uuid": ABSENT_UUID, "type": "missing"}])
    );
}

/// A source bundle as Sentry's JVM tooling writes one, made with symbolic's writer:
/// files keyed by the URL `jvm::source_path` derives from a remapped frame.
fn source_bundle(debug_id: &str, files: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    let mut writer = SourceBundleWriter::start(&mut out).unwrap();
    writer.set_attribute("debug_id", debug_id.to_owned());
    for (url, text) in files {
        let mut info = SourceFileInfo::new();
        info.set_ty(SourceFileType::Source);
        info.set_url((*url).to_owned());
        writer
            .add_file(url.trim_start_matches("~/"), text.as_bytes(), info)
            .unwrap();
    }
    writer.finish().unwrap();
    out.into_inner()
}

fn activity_line(n: usize) -> String {
    format!("    activity source line {n}")
}

#[tokio::test]
async fn http_source_gives_source_context_and_reports_an_invalid_mapping() {
    let symsrv = SymbolServer::start().await;
    let mapping_path = unified_path(INLINE_UUID, "proguard");
    let garbage_path = unified_path(GARBAGE_UUID, "proguard");
    symsrv.put(&mapping_path, &mapping_fixture("inline.txt"));
    symsrv.put_bytes(
        &garbage_path,
        b"<html><body>502 Bad Gateway</body></html>\n\x00\x01\x02 not a mapping\n",
    );
    let activity: String = (1..=45).map(|n| activity_line(n) + "\n").collect();
    symsrv.put_bytes(
        &unified_path(BUNDLE_ID, "sourcebundle"),
        &source_bundle(
            BUNDLE_ID,
            &[("~/org/birdwatch/app/SightingActivity.jvm", &activity)],
        ),
    );
    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "http", "id": "symsrv", "url": symsrv.url,
                     "layout": {"type": "unified"}}],
        "modules": [
            proguard(GARBAGE_UUID),
            proguard(INLINE_UUID),
            {"type": "source", "uuid": BUNDLE_ID},
        ],
        "stacktraces": [{"frames": [obfuscated("a.a", "onCreate", 4, 0)]}],
    });

    let (status, first) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        summary(&first, 0),
        [
            row(ACTIVITY, "onCreate", 33, 0),
            row("org.birdwatch.app.SightingRepository", "label", 48, 0),
            row("org.birdwatch.app.Species", "displayName", 12, 0),
        ]
    );
    let frames = first["stacktraces"][0]["frames"].as_array().unwrap();
    assert_eq!(frames[0]["context_line"], activity_line(33), "{first}");
    assert_eq!(
        frames[0]["pre_context"],
        json!((28..=32).map(activity_line).collect::<Vec<_>>())
    );
    assert_eq!(
        frames[0]["post_context"],
        json!((34..=38).map(activity_line).collect::<Vec<_>>())
    );
    // The bundle has no files for the inlined classes.
    for frame in &frames[1..] {
        assert!(
            frame.get("context_line").is_none() && frame.get("pre_context").is_none(),
            "{frame}"
        );
    }
    assert_eq!(
        first["errors"],
        json!([{"uuid": GARBAGE_UUID, "type": "invalid"}])
    );

    let (status, second) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second, first);
    // Both mapping files, the usable one and the broken one, are fetched once; after
    // that the server answers from what it cached.
    let hits = symsrv.hits();
    for path in [&mapping_path, &garbage_path] {
        assert_eq!(
            hits.iter().filter(|hit| *hit == path).count(),
            1,
            "{path} in {hits:?}"
        );
    }
}

#[tokio::test]
async fn s3_source_serves_a_mapping() {
    let s3 = S3Server::start().await;
    s3.put(
        "mappings",
        &format!("jvm/{}", unified_path(INLINE_UUID, "proguard")),
        &mapping_fixture("inline.txt"),
    );
    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "s3", "id": "bucket", "bucket": "mappings", "prefix": "/jvm/",
                     "region": ["us-east-1", s3.url], "access_key": ACCESS_KEY,
                     "secret_key": SECRET_KEY, "layout": {"type": "unified"}}],
        "modules": [proguard(INLINE_UUID)],
        // Two methods share `a`; line 3 is in the range of `saveSighting` (60..65).
        "stacktraces": [{"frames": [obfuscated("a.a", "a", 3, 0)]}],
    });
    let (status, response) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(
        summary(&response, 0),
        [row(ACTIVITY, "saveSighting", 62, 0)]
    );
    assert_eq!(
        response["stacktraces"][0]["frames"][0]["filename"],
        "SightingActivity.kt"
    );
    assert_eq!(response["errors"], json!([]));
}

#[tokio::test]
async fn bad_request_bodies_get_400_naming_the_field() {
    let server = Server::start("");
    let (status, body) = server
        .post("/symbolicate-jvm", &json!({"stacktraces": "b.a.a:3"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("stacktraces"), "{msg}");

    let (status, body) = server
        .post(
            "/symbolicate-jvm",
            &json!({"stacktraces": [{"frames": [
                {"module": "b.a", "function": "a", "lineno": "three", "index": 0}
            ]}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("stacktraces[0].frames[0].lineno"), "{msg}");

    let (status, body) = server
        .post(
            "/symbolicate-jvm",
            &json!({"modules": [proguard(INLINE_UUID), {"type": "proguard", "uuid": "mapping.txt"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("modules[1].uuid"), "{msg}");
}

#[tokio::test]
async fn a_slow_mapping_download_answers_pending_and_the_poll_gets_the_remapped_trace() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(
        &unified_path(INLINE_UUID, "proguard"),
        &mapping_fixture("inline.txt"),
    );
    let server = Server::start("");
    let body = json!({
        "sources": [{"type": "http", "id": "slow", "url": format!("{}slow/1500/", symsrv.url),
                     "layout": {"type": "unified"}}],
        "modules": [proguard(INLINE_UUID)],
        "stacktraces": [{"frames": [obfuscated("a.a", "a", 8, 0)]}],
    });
    let (status, first) = server.post("/symbolicate-jvm?timeout=0.2", &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "pending", "{first}");
    let id = first["request_id"].as_str().unwrap();
    let (status, done) = server.get(&format!("/requests/{id}?timeout=30")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(done["status"], "completed", "{done}");
    // Line 8 of `a` is `shareSighting`, which inlined `Species.validate` there.
    assert_eq!(
        summary(&done, 0),
        [
            row(ACTIVITY, "shareSighting", 82, 0),
            row("org.birdwatch.app.Species", "validate", 19, 0),
        ]
    );
    assert_eq!(done["errors"], json!([]));
}

#[tokio::test]
async fn a_restarted_server_remaps_from_its_disk_cache_without_downloading_again() {
    let symsrv = SymbolServer::start().await;
    let mapping_path = unified_path(REWRITE_UUID, "proguard");
    symsrv.put(&mapping_path, &mapping_fixture("rewrite.txt"));
    let work = tempfile::tempdir().unwrap();
    let cache_dir = work.path().join("cache");
    let body = json!({
        "sources": [{"type": "http", "id": "symsrv", "url": symsrv.url,
                     "layout": {"type": "unified"}}],
        "modules": [proguard(REWRITE_UUID)],
        "stacktraces": [{
            "exception": {"type": "c", "module": "b"},
            "frames": [obfuscated("b.a", "a", 5, 0)],
        }],
    });
    // The obfuscated exception remaps to the one the rule names: the inlined callee goes.
    let expected = [row(WORKER, "doWork", 22, 0)];

    let mut server = Server::start_in(work.path(), &cache_dir, "");
    let (_, response) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(summary(&response, 0), expected, "{response}");
    server.kill();

    let server = Server::start_in(work.path(), &cache_dir, "");
    let (_, response) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(summary(&response, 0), expected, "{response}");
    let hits = symsrv.hits();
    assert_eq!(
        hits.iter().filter(|hit| **hit == mapping_path).count(),
        1,
        "{hits:?}"
    );
}
