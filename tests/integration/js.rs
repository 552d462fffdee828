//! `/symbolicate-js` end to end: the real server on loopback, the project's own esbuild
//! bundle (fixtures/js), and real HTTP, S3 and filesystem sources. Every frame must map
//! back to where V8 put it in the original sources (fixtures/js/manifest.json).

use crate::common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use omnisym::js::bundle::{BundleEntry, write_bundle};
use serde_json::{Value, json};
use symbolic::debuginfo::sourcebundle::SourceFileType;

use common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use common::{Server, SymbolServer, fixture_json, fixtures};

/// Where the app is served from in every test; frames carry URLs below it.
const BASE: &str = "https://app.example/assets";

fn js_fixture(path: &str) -> String {
    std::fs::read_to_string(fixtures().join("js").join(path)).unwrap()
}

fn manifest() -> Value {
    fixture_json("js/manifest.json")
}

/// The debug id esbuild's output got injected (`//# debugId=` at its end).
fn debug_id() -> String {
    let minified = js_fixture("dist/debugid.min.js");
    let line = minified
        .lines()
        .find_map(|l| l.strip_prefix("//# debugId="))
        .unwrap();
    line.trim().to_owned()
}

/// The manifest's minified frames as the SDK reports them, below `base`.
fn raw_frames(base: &str, file: &str) -> Vec<Value> {
    manifest()["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let m = &f["minified"];
            json!({
                "abs_path": format!("{base}/{file}"),
                "lineno": m["line"],
                "colno": m["column"],
                "function": m["function"],
            })
        })
        .collect()
}

/// Asserts every frame resolved to the original file, line, column and function, with
/// source context from the map's `sourcesContent`.
fn assert_original(response: &Value, origin_base: &str) {
    assert_eq!(response["status"], "completed", "{response:#}");
    assert!(response.get("errors").is_none(), "{response:#}");
    let frames = response["stacktraces"][0]["frames"].as_array().unwrap();
    let expected = manifest()["frames"].as_array().unwrap().clone();
    assert_eq!(frames.len(), expected.len());
    for (frame, want) in frames.iter().zip(&expected) {
        let want = &want["original"];
        let file = want["file"].as_str().unwrap();
        assert_eq!(
            frame["abs_path"],
            format!("{origin_base}/{file}"),
            "{frame:#}"
        );
        assert_eq!(frame["lineno"], want["line"], "{frame:#}");
        assert_eq!(frame["colno"], want["column"], "{frame:#}");
        assert_eq!(frame["function"], want["function"], "{frame:#}");
        let source = js_fixture(file);
        let line = source
            .lines()
            .nth(want["line"].as_u64().unwrap() as usize - 1);
        assert_eq!(frame["context_line"].as_str(), line, "{frame:#}");
        assert_eq!(frame["data"]["symbolicated"], true);
    }
}

fn request(frames: Vec<Value>, extra: Value) -> Value {
    let mut body = json!({
        "stacktraces": [{"frames": frames}],
        "modules": [{"type": "sourcemap", "code_file": format!("{BASE}/debugid.min.js"), "debug_id": debug_id()}],
        "options": {"apply_source_context": true, "frame_order": "callee_first"},
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// An artifact bundle as Sentry's tooling uploads it: the minified file and its map,
/// both carrying the debug id, under `~/` URLs.
fn artifact_bundle() -> Vec<u8> {
    let id = debug_id();
    let headers = [("debug-id", id.as_str())];
    let minified = js_fixture("dist/debugid.min.js");
    let map = js_fixture("dist/debugid.min.js.map");
    let entries = [
        BundleEntry {
            url: "~/assets/debugid.min.js",
            ty: SourceFileType::MinifiedSource,
            contents: &minified,
            headers: &headers,
        },
        BundleEntry {
            url: "~/assets/debugid.min.js.map",
            ty: SourceFileType::SourceMap,
            contents: &map,
            headers: &headers,
        },
    ];
    write_bundle(&entries).unwrap().to_vec()
}

/// A Sentry project whose artifact lookup names one bundle, counting every request.
#[derive(Clone)]
struct Sentry {
    base: Arc<Mutex<String>>,
    hits: Arc<Mutex<Vec<String>>>,
    bundle: Arc<Vec<u8>>,
}

async fn lookup(State(sentry): State<Sentry>, uri: axum::http::Uri) -> Response {
    sentry.hits.lock().unwrap().push(uri.to_string());
    let base = sentry.base.lock().unwrap().clone();
    axum::Json(json!([{"type": "bundle", "id": "7", "url": format!("{base}/files/bundle.zip"), "resolved_with": "debug-id"}]))
        .into_response()
}

async fn bundle(State(sentry): State<Sentry>) -> Response {
    sentry.hits.lock().unwrap().push("bundle".into());
    (StatusCode::OK, sentry.bundle.as_ref().clone()).into_response()
}

async fn start_sentry() -> (String, Sentry) {
    start_sentry_with(artifact_bundle()).await
}

async fn start_sentry_with(data: Vec<u8>) -> (String, Sentry) {
    let sentry = Sentry {
        base: Arc::new(Mutex::new(String::new())),
        hits: Arc::new(Mutex::new(Vec::new())),
        bundle: Arc::new(data),
    };
    let app = Router::new()
        .route("/lookup", get(lookup))
        .route("/files/bundle.zip", get(bundle))
        .with_state(sentry.clone());
    let base = format!("http://{}", common::serve(app).await);
    *sentry.base.lock().unwrap() = base.clone();
    (base, sentry)
}

#[tokio::test]
async fn an_artifact_bundle_from_sentry_maps_every_frame_to_its_source() {
    let (base, sentry) = start_sentry().await;
    let server = Server::start("");
    let body = request(
        raw_frames(BASE, "debugid.min.js"),
        json!({"source": {"type": "sentry", "id": "sentry:project", "url": format!("{base}/lookup"), "token": "t"}}),
    );
    for _ in 0..2 {
        let (status, response) = server.post("/symbolicate-js", &body).await;
        assert_eq!(status, StatusCode::OK, "{response}");
        assert_original(&response, "https://app.example");
        let frame = &response["stacktraces"][0]["frames"][0];
        assert_eq!(frame["data"]["resolved_with"], "debug-id");
        assert!(
            frame["data"]["sourcemap_origin"]["bundled"].is_array(),
            "{frame:#}"
        );
    }
    // However many frames and requests: one download of the bundle.
    let hits = sentry.hits.lock().unwrap().clone();
    assert_eq!(
        hits.iter().filter(|h| *h == "bundle").count(),
        1,
        "{hits:?}"
    );
    assert!(hits.iter().any(|h| h.contains("debug_id=")), "{hits:?}");
}

#[tokio::test]
async fn cold_requests_answered_from_the_map_itself_answer_as_its_cache_does_later() {
    let (base, _sentry) = start_sentry().await;
    let server = Server::start("");
    let body = request(
        raw_frames(BASE, "debugid.min.js"),
        json!({"source": {"type": "sentry", "id": "sentry:project", "url": format!("{base}/lookup"), "token": "t"}}),
    );
    // Cold and at once: answered from the decoded map, then its cache is built.
    let cold =
        futures::future::join_all((0..4).map(|_| server.post("/symbolicate-js", &body))).await;
    let built = server.cache_dir.join("sourcemap_caches");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while common::files_under(&built).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no cache was built");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, warm) = server.post("/symbolicate-js", &body).await;
    assert_eq!(status, StatusCode::OK, "{warm}");
    assert_original(&warm, "https://app.example");
    for (status, answer) in cold {
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer, warm);
    }
    assert_eq!(
        common::files_under(&built).len(),
        1,
        "one cache for one map"
    );
    // The bundled file was parsed once, from the moment it was read: the map's decoding
    // joined that parse rather than starting its own.
    let metrics = server.scrape().await;
    let parses = |started| metrics.get("sourcemap_scope_parses_total", &[("started", started)]);
    assert_eq!(parses("ahead"), Some(1.0));
    assert_eq!(parses("with_map"), None);
}

#[tokio::test]
async fn a_bundled_file_whose_map_is_nowhere_is_not_parsed_on_every_request() {
    let id = debug_id();
    let headers = [("debug-id", id.as_str())];
    let minified = js_fixture("dist/debugid.min.js");
    let entries = [BundleEntry {
        url: "~/assets/debugid.min.js",
        ty: SourceFileType::MinifiedSource,
        contents: &minified,
        headers: &headers,
    }];
    let (base, _sentry) = start_sentry_with(write_bundle(&entries).unwrap().to_vec()).await;
    let server = Server::start("");
    let body = request(
        raw_frames(BASE, "debugid.min.js"),
        json!({"source": {"type": "sentry", "id": "sentry:project", "url": format!("{base}/lookup"), "token": "t"}}),
    );
    for _ in 0..3 {
        let (status, response) = server.post("/symbolicate-js", &body).await;
        assert_eq!(status, StatusCode::OK, "{response}");
        let frame = &response["stacktraces"][0]["frames"][0];
        assert_ne!(frame["data"]["symbolicated"], true, "{frame:#}");
    }
    // The first request guessed the map was beside the file; from then on the bundle is
    // known not to have it.
    let metrics = server.scrape().await;
    let parses = |started| metrics.get("sourcemap_scope_parses_total", &[("started", started)]);
    assert_eq!(parses("ahead"), Some(1.0));
    assert_eq!(parses("with_map"), None);
}

/// [`artifact_bundle`] with its source map replaced by `inflated` zero bytes, deflated
/// (about 1000 to 1), as Sentry's tooling lays a bundle out: the `SYSB` header, then a
/// zip of the files and the manifest.
fn bundle_with_a_huge_map(inflated: u64) -> Vec<u8> {
    use std::io::{Cursor, Read, Write};
    let normal = artifact_bundle();
    let mut archive = zip::ZipArchive::new(Cursor::new(&normal)).unwrap();
    let mut manifest = String::new();
    archive
        .by_name("manifest.json")
        .unwrap()
        .read_to_string(&mut manifest)
        .unwrap();
    let files: Value = serde_json::from_str(&manifest).unwrap();
    let mut out = Cursor::new(normal[..8].to_vec());
    out.set_position(8);
    let mut writer = zip::ZipWriter::new(out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    for (name, info) in files["files"].as_object().unwrap() {
        writer.start_file(name.as_str(), options).unwrap();
        if info["type"] == "source_map" {
            let zeros = vec![0u8; 1 << 20];
            let mut left = inflated;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                writer.write_all(&zeros[..n]).unwrap();
                left -= n as u64;
            }
        } else {
            let mut contents = Vec::new();
            archive
                .by_name(name)
                .unwrap()
                .read_to_end(&mut contents)
                .unwrap();
            writer.write_all(&contents).unwrap();
        }
    }
    writer.start_file("manifest.json", options).unwrap();
    writer.write_all(manifest.as_bytes()).unwrap();
    writer.finish().unwrap().into_inner()
}

#[tokio::test]
async fn a_bundle_whose_file_inflates_hugely_is_refused_while_the_server_stays_answerable() {
    // A few hundred KiB whose source map inflates to 256 MiB: past the ratio (200) and
    // its floor (64 MiB).
    let bomb = bundle_with_a_huge_map(256 << 20);
    assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
    let (base, _sentry) = start_sentry_with(bomb).await;
    let server = Server::start("");
    let (status, _) = server.get("/healthcheck").await;
    assert_eq!(status, StatusCode::OK);
    let before = common::peak_rss_kib(server.pid());

    let body = request(
        raw_frames(BASE, "debugid.min.js"),
        json!({"source": {"type": "sentry", "id": "sentry:project", "url": format!("{base}/lookup"), "token": "t"}}),
    );
    // Two at once, while the healthcheck is asked again and again.
    let requests = futures::future::join(
        server.post("/symbolicate-js", &body),
        server.post("/symbolicate-js", &body),
    );
    tokio::pin!(requests);
    let mut slowest = std::time::Duration::ZERO;
    let ((_, response), _) = loop {
        tokio::select! {
            done = &mut requests => break done,
            _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {
                let asked = std::time::Instant::now();
                let (status, _) = server.get("/healthcheck").await;
                assert_eq!(status, StatusCode::OK);
                slowest = slowest.max(asked.elapsed());
            }
        }
    };

    // The bundle is refused: nothing comes from it, and the frames say their file is
    // missing, as for any bundle that does not open.
    let frame = &response["stacktraces"][0]["frames"][0];
    assert!(frame["data"]["sourcemap_origin"].is_null(), "{response:#}");
    assert_ne!(frame["data"]["symbolicated"], true, "{frame:#}");
    let errors = response["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["type"] == "missing_source"),
        "{response:#}"
    );
    assert!(
        slowest < std::time::Duration::from_secs(1),
        "a healthcheck took {slowest:?}"
    );
    let grown = common::peak_rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 96 << 10, "peak RSS grew by {grown} KiB");
}

/// omnisym's extension: the same debug-id lookup on the request's own sources, in the
/// unified layout (`<id[..2]>/<id[2..]>/minified_source` and `.../source_map`).
fn unified_path(kind: &str) -> String {
    common::unified_path(&debug_id(), kind)
}

#[tokio::test]
async fn debug_ids_are_found_on_a_filesystem_source() {
    let dir = tempfile::tempdir().unwrap();
    for (name, kind) in [
        ("debugid.min.js", "minified_source"),
        ("debugid.min.js.map", "source_map"),
    ] {
        let dest = dir.path().join(unified_path(kind));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(fixtures().join("js/dist").join(name), dest).unwrap();
    }
    let server = Server::start("");
    let body = request(
        raw_frames(BASE, "debugid.min.js"),
        json!({"sources": [{"type": "filesystem", "id": "local", "path": dir.path(), "layout": {"type": "unified"}}]}),
    );
    let (status, response) = server.post("/symbolicate-js", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_original(&response, "https://app.example");
}

#[tokio::test]
async fn debug_ids_are_found_on_an_s3_source() {
    let s3 = S3Server::start().await;
    for (name, kind) in [
        ("debugid.min.js", "minified_source"),
        ("debugid.min.js.map", "source_map"),
    ] {
        s3.put(
            "javascript",
            &format!("artifacts/{}", unified_path(kind)),
            &fixtures().join("js/dist").join(name),
        );
    }
    let server = Server::start("");
    let source = json!({"type": "s3", "id": "bucket", "bucket": "javascript", "prefix": "/artifacts/",
        "region": ["us-east-1", s3.url], "access_key": ACCESS_KEY, "secret_key": SECRET_KEY,
        "layout": {"type": "unified"}});
    let body = request(
        raw_frames(BASE, "debugid.min.js"),
        json!({"sources": [source]}),
    );
    let (status, response) = server.post("/symbolicate-js", &body).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_original(&response, "https://app.example");
}

#[tokio::test]
async fn scraping_follows_the_source_mapping_url_within_allowed_origins() {
    let web = SymbolServer::start().await;
    for name in ["app.min.js", "app.min.js.map"] {
        web.put(
            &format!("assets/{name}"),
            &fixtures().join("js/dist").join(name),
        );
    }
    let base = format!("{}assets", web.url);
    let server = Server::start("");
    let scraping = |origins: Value| json!({"modules": [], "scraping": {"enabled": true, "allowed_origins": origins}});
    let (_, response) = server
        .post(
            "/symbolicate-js",
            &request(raw_frames(&base, "app.min.js"), scraping(json!(["*"]))),
        )
        .await;
    let origin = web.url.trim_end_matches('/');
    assert_original(&response, origin);
    let attempts = response["scraping_attempts"].as_array().unwrap();
    let scraped: Vec<_> = attempts
        .iter()
        .map(|a| (a["url"].as_str().unwrap(), a["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        scraped,
        [
            (&*format!("{base}/app.min.js"), "success"),
            (&*format!("{base}/app.min.js.map"), "success")
        ]
    );

    // An origin the request does not allow is never fetched.
    let before = web.hits().len();
    let (_, response) = server
        .post(
            "/symbolicate-js",
            &request(
                raw_frames(&base, "app.min.js"),
                scraping(json!(["cdn.example"])),
            ),
        )
        .await;
    assert_eq!(web.hits().len(), before);
    let attempt = &response["scraping_attempts"][0];
    assert_eq!(attempt["status"], "failure", "{response:#}");
    assert_eq!(attempt["reason"], "invalid_host");
    assert_eq!(
        response["errors"][0]["type"], "missing_source",
        "{response:#}"
    );
}

#[tokio::test]
async fn a_body_of_the_wrong_shape_is_a_400_naming_the_field() {
    let server = Server::start("");
    let (status, response) = server
        .post("/symbolicate-js", &json!({"stacktraces": "nope"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(response.to_string().contains("stacktraces"), "{response}");
}
