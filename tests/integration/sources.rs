//! End-to-end tests of the remote source kinds: the real server on a loopback port asked to
//! symbolicate the project's ELF fixture from a Sentry endpoint (an axum server in the test
//! implementing Sentry's search and download protocol), an S3 bucket (an in-process s3s-fs
//! server that checks request signatures) and a GCS bucket (fake-gcs-server, installed from
//! PyPI by scripts/test.sh).

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as AxPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::gcs::GcsServer;
use common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use common::{
    Server, assert_elf_symbolicated as assert_symbolicated, candidates, elf_debug_file,
    elf_debug_path, elf_request as request, fixtures, object, serve,
};
use serde_json::{Value, json};

const TOKEN: &str = "sntrys-test-token-0123456789";

fn elf() -> Value {
    object("elf")
}

fn candidate_at(candidates: &[Value], location: &str) -> Value {
    candidates
        .iter()
        .find(|c| c["location"] == location)
        .cloned()
        .unwrap_or_else(|| panic!("no candidate at {location}: {candidates:#?}"))
}

// ---------------------------------------------------------------------------------------
// Sentry

/// Sentry's debug-file endpoint: `?debug_id=` searches, `?id=` redirects to `/files/<id>`.
/// Search answers come in pages of one file, linked by `Link` headers as Sentry does.
#[derive(Clone, Default)]
struct SentryState {
    /// file id → contents; searched in this order for the fixture's debug id.
    files: Arc<Vec<(String, Vec<u8>)>>,
    searches: Arc<AtomicUsize>,
    downloads: Arc<AtomicUsize>,
    /// Answer this many searches, and this many downloads, with 503 first.
    failing_searches: Arc<AtomicUsize>,
    failing_downloads: Arc<AtomicUsize>,
    /// Seconds to stall every download.
    stall_downloads: u64,
    authorization: Arc<Mutex<Vec<String>>>,
}

async fn sentry_endpoint(
    State(state): State<SentryState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    state.authorization.lock().unwrap().push(auth.clone());
    if auth != format!("Bearer {TOKEN}") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if let Some(id) = query.get("id") {
        return (
            StatusCode::FOUND,
            [(header::LOCATION, format!("/files/{id}"))],
        )
            .into_response();
    }
    state.searches.fetch_add(1, Ordering::SeqCst);
    if take_one(&state.failing_searches) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let wanted = elf()["debug_id"].as_str().unwrap().to_owned();
    // As Sentry filters by `file_formats`: a search for a SymCache's secondary inputs
    // (asked one format at a time) finds none of these ELF files.
    let secondary = matches!(
        query.get("file_formats").map(String::as_str),
        Some("il2cpp" | "uuidmap" | "bcsymbolmap")
    );
    let matches: Vec<&String> = if query.get("debug_id") == Some(&wanted) && !secondary {
        state.files.iter().map(|(id, _)| id).collect()
    } else {
        Vec::new()
    };
    let page: usize = query
        .get("cursor")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body =
        json!(matches.get(page).map(|id| vec![json!({
        "id": id, "uuid": wanted, "debugId": wanted, "codeId": elf()["code_id"],
        "cpuName": "x86_64", "objectName": "crash", "symbolType": "elf",
        "headers": {"Content-Type": "application/octet-stream"}, "size": 1,
        "sha1": "0", "dateCreated": "2024-01-01T00:00:00Z", "data": {"features": ["debug"]},
    })]).unwrap_or_default());
    let more = page + 1 < matches.len();
    let link = format!(
        "<http://{}/api/dsyms/?debug_id={wanted}&cursor={}>; rel=\"next\"; results=\"{more}\"; cursor=\"{}\"",
        headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or(""),
        page + 1,
        page + 1,
    );
    ([(header::LINK, link)], axum::Json(body)).into_response()
}

async fn sentry_file(State(state): State<SentryState>, AxPath(id): AxPath<String>) -> Response {
    state.downloads.fetch_add(1, Ordering::SeqCst);
    if take_one(&state.failing_downloads) {
        return StatusCode::BAD_GATEWAY.into_response();
    }
    if state.stall_downloads > 0 {
        tokio::time::sleep(Duration::from_secs(state.stall_downloads)).await;
    }
    match state.files.iter().find(|(name, _)| *name == id) {
        Some((_, data)) => data.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn debug_file() -> Vec<u8> {
    std::fs::read(elf_debug_file()).unwrap()
}

/// A first file that parses but does not help (the stripped binary), then the debug file,
/// so the search needs two pages.
fn sentry_files() -> Vec<(String, Vec<u8>)> {
    let stripped = std::fs::read(fixtures().join("native/elf/crash.stripped")).unwrap();
    vec![("101".into(), stripped), ("102".into(), debug_file())]
}

async fn start_sentry(state: SentryState) -> String {
    let app = Router::new()
        .route("/api/dsyms/", get(sentry_endpoint))
        .route("/files/{id}", get(sentry_file))
        .with_state(state);
    format!("http://{}/api/dsyms/", serve(app).await)
}

fn sentry_source(url: &str) -> Value {
    json!([{"type": "sentry", "id": "sentry:project", "url": url, "token": TOKEN, "name": "x"}])
}

#[tokio::test]
async fn sentry_search_pages_download_and_cached_index() {
    let state = SentryState {
        files: Arc::new(sentry_files()),
        ..SentryState::default()
    };
    let url = start_sentry(state.clone()).await;
    let server = Server::start("");
    let (status, response) = server
        .post("/symbolicate?scope=a", &request(sentry_source(&url)))
        .await;
    assert_eq!(status, 200);
    assert_symbolicated(&response);
    let candidates = candidates(&response);
    let used = candidate_at(&candidates, "sentry://project_debug_file/102");
    assert_eq!(used["source"], "sentry:project");
    assert_eq!(used["download"]["status"], "ok");
    assert_eq!(used["debug"]["status"], "ok");
    // The used file is on the second page of the search answer.
    candidate_at(&candidates, "sentry://project_debug_file/101");
    let searches = state.searches.load(Ordering::SeqCst);
    let downloads = state.downloads.load(Ordering::SeqCst);
    assert!(searches >= 2, "{searches}");
    assert_eq!(downloads, 2);
    assert!(
        state
            .authorization
            .lock()
            .unwrap()
            .iter()
            .all(|a| a == &format!("Bearer {TOKEN}"))
    );

    // Another scope downloads again, but the search answers are reused.
    let (_, response) = server
        .post("/symbolicate?scope=b", &request(sentry_source(&url)))
        .await;
    assert_symbolicated(&response);
    assert_eq!(state.searches.load(Ordering::SeqCst), searches);
    assert_eq!(state.downloads.load(Ordering::SeqCst), 2 * downloads);

    let everything = format!("{response} {}", server.log());
    assert!(!everything.contains(TOKEN), "the token leaked");
}

#[tokio::test]
async fn sentry_server_errors_are_retried() {
    let state = SentryState {
        files: Arc::new(vec![("102".into(), debug_file())]),
        failing_searches: Arc::new(AtomicUsize::new(1)),
        failing_downloads: Arc::new(AtomicUsize::new(1)),
        ..SentryState::default()
    };
    let url = start_sentry(state.clone()).await;
    let server = Server::start("");
    let (_, response) = server
        .post("/symbolicate", &request(sentry_source(&url)))
        .await;
    // Found although the first search and the first download failed.
    assert_symbolicated(&response);
    assert!(state.searches.load(Ordering::SeqCst) >= 2);
    assert_eq!(state.downloads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn sentry_wrong_token_lists_nothing_and_stalled_download_times_out() {
    let state = SentryState {
        files: Arc::new(vec![("102".into(), debug_file())]),
        stall_downloads: 30,
        ..SentryState::default()
    };
    let url = start_sentry(state.clone()).await;
    let server = Server::start("head_timeout: 1s\n");

    let mut wrong = sentry_source(&url);
    wrong[0]["token"] = json!("not-the-token");
    let (_, response) = server.post("/symbolicate", &request(wrong)).await;
    // As upstream: a failed search lists no files for the source.
    assert_eq!(response["modules"][0]["debug_status"], "missing");
    assert_eq!(
        candidates(&response)[0]["location"],
        "No object files listed on this source"
    );

    let started = std::time::Instant::now();
    let (_, response) = server
        .post("/symbolicate", &request(sentry_source(&url)))
        .await;
    let candidate = candidate_at(&candidates(&response), "sentry://project_debug_file/102");
    assert_eq!(candidate["download"]["status"], "error", "{candidate}");
    let details = candidate["download"]["details"].as_str().unwrap();
    assert!(details.contains("cancelled after 1s"), "{details}");
    // Three attempts of one second each, not the thirty seconds the server stalls.
    assert_eq!(state.downloads.load(Ordering::SeqCst), 3);
    assert!(started.elapsed() < Duration::from_secs(15));
}

// ---------------------------------------------------------------------------------------
// S3

fn s3_source(endpoint: &str, secret_key: &str) -> Value {
    json!([{"type": "s3", "id": "bucket", "bucket": "symbols", "prefix": "/native/",
            "region": ["us-east-1", endpoint], "access_key": ACCESS_KEY, "secret_key": secret_key}])
}

#[tokio::test]
async fn s3_found_missing_and_wrong_secret() {
    let s3 = S3Server::start().await;
    std::fs::create_dir_all(s3.root.path().join("symbols")).unwrap();
    let server = Server::start("");
    let location = format!("s3://symbols/native/{}", elf_debug_path());

    let (_, response) = server
        .post(
            "/symbolicate?scope=missing",
            &request(s3_source(&s3.url, SECRET_KEY)),
        )
        .await;
    assert_eq!(response["modules"][0]["debug_status"], "missing");
    assert_eq!(
        candidate_at(&candidates(&response), &location)["download"]["status"],
        "notfound"
    );

    s3.put(
        "symbols",
        &format!("native/{}", elf_debug_path()),
        &elf_debug_file(),
    );
    let (_, response) = server
        .post(
            "/symbolicate?scope=found",
            &request(s3_source(&s3.url, SECRET_KEY)),
        )
        .await;
    assert_symbolicated(&response);
    let used = candidate_at(&candidates(&response), &location);
    assert_eq!(used["download"]["status"], "ok");
    assert_eq!(used["debug"]["status"], "ok");

    let (_, response) = server
        .post(
            "/symbolicate?scope=wrong",
            &request(s3_source(&s3.url, "not-the-secret")),
        )
        .await;
    assert_eq!(response["modules"][0]["debug_status"], "fetching_failed");
    let denied = candidate_at(&candidates(&response), &location);
    assert_eq!(denied["download"]["status"], "noperm", "{denied}");
    let everything = format!("{response} {}", server.log());
    assert!(!everything.contains(SECRET_KEY) && !everything.contains("not-the-secret"));
}

// ---------------------------------------------------------------------------------------
// GCS

fn gcs_data() -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    let dest = data.path().join("symbols/ios/").join(elf_debug_path());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(elf_debug_file(), dest).unwrap();
    data
}

const GCS_CLIENT_EMAIL: &str = "symbols@omnisym-test.iam.gserviceaccount.com";
const GCS_KEY_ID: &str = "test-key-1";
const GCS_STATIC_TOKEN: &str = "ya29.static-test-token";

/// What GCS checks of a request: a bearer that is either a JWT the service account signed
/// itself (RS256 under the fixture key, its key id, read-only scope) or a token GCS issued.
fn gcs_authorised(bearer: &str) -> bool {
    if bearer == GCS_STATIC_TOKEN {
        return true;
    }
    let public = std::fs::read(fixtures().join("gcs/test-key.pub.pem")).unwrap();
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(&public).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_issuer(&[GCS_CLIENT_EMAIL]);
    validation.validate_aud = false;
    let header = jsonwebtoken::decode_header(bearer);
    let claims = jsonwebtoken::decode::<Value>(bearer, &key, &validation);
    matches!((header, claims), (Ok(header), Ok(claims))
        if header.kid.as_deref() == Some(GCS_KEY_ID)
            && claims.claims["scope"] == "https://www.googleapis.com/auth/devstorage.read_only")
}

/// GCS's authorisation in front of fake-gcs-server, which checks none: refused requests get
/// GCS's 401 answer, the others are relayed. Records every bearer it saw.
async fn start_gcs_gate(upstream: String, bearers: Arc<Mutex<Vec<String>>>) -> String {
    let app = Router::new().fallback(move |request: axum::extract::Request| {
        let (upstream, bearers) = (upstream.clone(), bearers.clone());
        async move {
            let bearer = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default()
                .to_owned();
            bearers.lock().unwrap().push(bearer.clone());
            if !gcs_authorised(&bearer) {
                let error = json!({"error": {"code": 401, "message": "Invalid Credentials",
                                             "status": "UNAUTHENTICATED"}});
                return (StatusCode::UNAUTHORIZED, axum::Json(error)).into_response();
            }
            let url = format!("{upstream}{}", request.uri());
            let answer = common::client().get(url).send().await.unwrap();
            let mut headers = HeaderMap::new();
            for (name, value) in answer.headers() {
                headers.insert(name.clone(), value.clone());
            }
            let status = answer.status();
            (status, headers, answer.bytes().await.unwrap()).into_response()
        }
    });
    format!("http://{}", serve(app).await)
}

fn gcs_source(endpoint: &str, extra: Value) -> Value {
    let mut source = json!({"type": "gcs", "id": "gcs", "bucket": "symbols", "prefix": "ios",
                            "endpoint": endpoint});
    source
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!([source])
}

#[tokio::test]
async fn gcs_emulator_found_and_missing() {
    let data = gcs_data();
    let gcs = GcsServer::start(data.path()).await;
    let server = Server::start("");
    let (_, response) = server
        .post("/symbolicate", &request(gcs_source(&gcs.url, json!({}))))
        .await;
    assert_symbolicated(&response);
    let location = format!("gs://symbols/ios/{}", elf_debug_path());
    assert_eq!(
        candidate_at(&candidates(&response), &location)["download"]["status"],
        "ok"
    );

    let (_, response) = server
        .post(
            "/symbolicate?scope=x",
            &request(gcs_source(&gcs.url, json!({"prefix": "android"}))),
        )
        .await;
    assert_eq!(response["modules"][0]["debug_status"], "missing");
    let location = format!("gs://symbols/android/{}", elf_debug_path());
    assert_eq!(
        candidate_at(&candidates(&response), &location)["download"]["status"],
        "notfound"
    );
}

#[tokio::test]
async fn gcs_service_account_signs_once_and_wrong_key_is_noperm() {
    let data = gcs_data();
    let gcs = GcsServer::start(data.path()).await;
    let bearers = Arc::new(Mutex::new(Vec::new()));
    let gate = start_gcs_gate(gcs.url.clone(), bearers.clone()).await;
    let server = Server::start("");
    let key = std::fs::read_to_string(fixtures().join("gcs/test-key.pem")).unwrap();
    let account = |key: &str| {
        json!({"client_email": GCS_CLIENT_EMAIL, "private_key": key,
               "private_key_id": GCS_KEY_ID})
    };
    for scope in ["a", "b"] {
        let (_, response) = server
            .post(
                &format!("/symbolicate?scope={scope}"),
                &request(gcs_source(&gate, account(&key))),
            )
            .await;
        assert_symbolicated(&response);
    }
    let seen = std::mem::take(&mut *bearers.lock().unwrap());
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|bearer| bearer == &seen[0]),
        "one signed token serves every request"
    );

    let (_, response) = server
        .post(
            "/symbolicate?scope=t",
            &request(gcs_source(&gate, json!({"bearer_token": GCS_STATIC_TOKEN}))),
        )
        .await;
    assert_symbolicated(&response);

    let wrong = std::fs::read_to_string(fixtures().join("gcs/wrong-key.pem")).unwrap();
    let (_, response) = server
        .post(
            "/symbolicate?scope=c",
            &request(gcs_source(&gate, account(&wrong))),
        )
        .await;
    let location = format!("gs://symbols/ios/{}", elf_debug_path());
    let denied = candidate_at(&candidates(&response), &location);
    assert_eq!(denied["download"]["status"], "noperm", "{denied}");
    assert!(
        denied["download"]["details"]
            .as_str()
            .unwrap()
            .contains("Invalid Credentials"),
        "{denied}"
    );
    let everything = format!("{response} {}", server.log());
    let signed = &seen[0];
    assert!(!everything.contains("PRIVATE KEY") && !everything.contains(signed.as_str()));
    assert!(!everything.contains(GCS_STATIC_TOKEN));
}

// ---------------------------------------------------------------------------------------
// Reserved addresses

#[tokio::test]
async fn loopback_sources_are_refused_unless_allowed() {
    let state = SentryState {
        files: Arc::new(vec![("102".into(), debug_file())]),
        ..SentryState::default()
    };
    let sentry = start_sentry(state.clone()).await;
    let s3 = S3Server::start().await;
    s3.put(
        "symbols",
        &format!("native/{}", elf_debug_path()),
        &elf_debug_file(),
    );
    let server = Server::start("connect_to_reserved_ips: false\n");

    let mut sources = sentry_source(&sentry).as_array().unwrap().clone();
    sources.extend(s3_source(&s3.url, SECRET_KEY).as_array().unwrap().clone());
    sources.extend(
        gcs_source("http://127.0.0.1:9/", json!({}))
            .as_array()
            .unwrap()
            .clone(),
    );
    let (_, response) = server
        .post("/symbolicate", &request(Value::Array(sources)))
        .await;
    assert_eq!(response["modules"][0]["debug_status"], "fetching_failed");
    assert!(
        state.authorization.lock().unwrap().is_empty(),
        "Sentry was contacted"
    );
    let candidates = candidates(&response);
    for location in [
        format!("s3://symbols/native/{}", elf_debug_path()),
        format!("gs://symbols/ios/{}", elf_debug_path()),
    ] {
        let refused = candidate_at(&candidates, &location);
        assert_eq!(refused["download"]["status"], "error", "{refused}");
        assert!(
            refused["download"]["details"]
                .as_str()
                .unwrap()
                .contains("reserved IP"),
            "{refused}"
        );
    }
}
