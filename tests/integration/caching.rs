//! End-to-end tests of the cache lifecycle: the real `omnisym` binary on loopback with
//! tiny lifetimes instead of hours, a real HTTP symbol server, a real S3-protocol server
//! for the shared cache, `omnisym cleanup` run as a process, and SIGKILL mid-download.

use crate::common;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use common::gcs::GcsServer;
use common::prometheus::Exposition;
use common::s3::{ACCESS_KEY, S3Server, SECRET_KEY};
use common::{
    Server, SymbolServer, assert_elf_symbolicated, elf_debug_file, elf_debug_path, elf_request,
    fixtures, run_cleanup,
};
use futures::StreamExt;
use serde_json::{Value, json};

fn http_source(url: &str, extra: Value) -> Value {
    let mut source = json!({"type": "http", "id": "symsrv", "url": url});
    source
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!([source])
}

fn hits_of(symsrv: &SymbolServer, path: &str) -> usize {
    symsrv.hits().iter().filter(|h| h.as_str() == path).count()
}

fn is_temp(path: &Path) -> bool {
    path.file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(".tmp")
}

fn is_placeholder(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|d| d.starts_with(b"\0omnisym-placeholder\0"))
}

/// Every published file is whole: objects are the fixture byte for byte, SymCaches
/// parse; a reader can never find a torn file in place.
fn assert_no_torn_files(cache_dir: &Path) {
    let want = std::fs::read(elf_debug_file()).unwrap();
    for path in common::files_under(cache_dir) {
        if is_temp(&path) || is_placeholder(&path) {
            continue;
        }
        let rel = path
            .strip_prefix(cache_dir)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let data = std::fs::read(&path).unwrap();
        if rel.starts_with("objects/") {
            assert!(data == want, "{rel}: {} bytes, not the fixture", data.len());
        } else if rel.starts_with("symcaches/") {
            symbolic::symcache::SymCache::parse(&data)
                .unwrap_or_else(|e| panic!("{rel} does not parse: {e}"));
        }
    }
}

/// Lookups of cache `kind` that `layer` answered, from `GET /metrics`.
fn lookups(metrics: &Exposition, kind: &str, layer: &str) -> f64 {
    metrics.value("cache_lookups_total", &[("kind", kind), ("layer", layer)])
}

#[tokio::test]
async fn misses_are_retried_after_retry_misses_after_and_fallbacks_are_upgraded() {
    let symsrv = SymbolServer::start().await;
    let code_path = elf_debug_path().trim_end_matches(".debug").to_owned();
    symsrv.put(&code_path, &fixtures().join("native/elf/crash.stripped"));
    let server = Server::start(
        "caches:\n  downloaded:\n    retry_misses_after_public: 3s\n  derived:\n    retry_misses_after_public: 3s\n",
    );
    let body = elf_request(http_source(&symsrv.url, json!({})));
    let has_line = |r: &Value| r["stacktraces"][0]["frames"][0]["lineno"].as_u64() > Some(0);

    // Only the symbol table exists: the frame gets a name but no line.
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_eq!(r["modules"][0]["debug_status"], "found", "{r}");
    assert_eq!(r["stacktraces"][0]["frames"][0]["status"], "symbolicated");
    assert!(!has_line(&r), "{r}");
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 1);

    // The better file appears; within retry_misses_after its absence is remembered,
    // so the fallback is served without asking the source again.
    symsrv.put_elf_debug();
    let (_, r) = server.post("/symbolicate", &body).await;
    assert!(!has_line(&r), "{r}");
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 1);

    // Once the miss expires the sources are asked again and the SymCache upgraded.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 2);
    let m = server.scrape().await;
    assert_eq!(lookups(&m, "symcaches", "computed"), 2.0, "{m:?}");
}

#[tokio::test]
async fn malformed_verdicts_hold_until_restart() {
    let symsrv = SymbolServer::start().await;
    symsrv.put(
        &elf_debug_path(),
        &fixtures().join("native/corrupt/crash.debug"),
    );
    let work = tempfile::tempdir().unwrap();
    let cache_dir = work.path().join("cache");
    let body = elf_request(http_source(&symsrv.url, json!({})));
    let mut server = Server::start_in(work.path(), &cache_dir, "");
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_eq!(r["modules"][0]["debug_status"], "malformed", "{r}");

    // Fixed at the source: this process keeps its verdict (24 h by default)...
    symsrv.put_elf_debug();
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_eq!(r["modules"][0]["debug_status"], "malformed", "{r}");
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 1);

    // ...but a restarted one (maybe with a fixed parser) tries again.
    server.kill();
    let server = Server::start_in(work.path(), &cache_dir, "");
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 2);
}

#[tokio::test]
async fn public_files_are_global_scoped_files_stay_in_their_scope() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let server = Server::start("");
    for (public, source_id, expected_downloads) in [(true, "public", 1), (false, "private", 2)] {
        let mut sources = http_source(&symsrv.url, json!({"is_public": public}));
        sources[0]["id"] = json!(source_id);
        let before = hits_of(&symsrv, &elf_debug_path());
        for scope in ["project-a", "project-b", "project-a"] {
            let (_, r) = server
                .post(
                    &format!("/symbolicate?scope={scope}"),
                    &elf_request(sources.clone()),
                )
                .await;
            assert_elf_symbolicated(&r);
        }
        assert_eq!(
            hits_of(&symsrv, &elf_debug_path()) - before,
            expected_downloads,
            "is_public: {public}"
        );
    }
    let objects = server.cache_dir.join("objects/1");
    assert!(objects.join("global").is_dir());
    assert!(objects.join("project-a").is_dir() && objects.join("project-b").is_dir());
}

/// Requests keep coming (new scopes, so new keys; no memory layer, so every hit reads
/// the disk) while `omnisym cleanup` deletes everything it may, over and over.
#[tokio::test]
async fn cleanup_while_serving_fails_no_request_and_tears_no_file() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let caches = "caches:\n  in_memory:\n    capacity: 0\n  downloaded:\n    max_unused_for: 0s\n  derived:\n    max_unused_for: 0s\n  cleanup_interval: 0\n";
    let server = Server::start(caches);
    let config = server.cache_dir.parent().unwrap().join("cleanup.yml");
    std::fs::write(
        &config,
        format!("cache_dir: {}\n{caches}", server.cache_dir.display()),
    )
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let (stop, config) = (stop.clone(), config.clone());
        std::thread::spawn(move || {
            let mut runs = 0;
            let mut removed = 0u64;
            while !stop.load(Ordering::Relaxed) || runs == 0 {
                let text = run_cleanup(&config, &[]);
                let n: u64 = text
                    .strip_prefix("removed ")
                    .and_then(|t| t.split(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("unexpected cleanup output {text:?}"));
                removed += n;
                runs += 1;
            }
            (runs, removed)
        })
    };
    let sources = http_source(&symsrv.url, json!({}));
    let requests = futures::future::join_all((0..4).map(|worker| {
        let (server, sources) = (&server, sources.clone());
        async move {
            for i in 0..12 {
                let scope = format!("w{worker}-{}", i % 3);
                let (status, r) = server
                    .post(
                        &format!("/symbolicate?scope={scope}"),
                        &elf_request(sources.clone()),
                    )
                    .await;
                assert!(status.is_success(), "{r}");
                assert_elf_symbolicated(&r);
            }
        }
    }));
    requests.await;
    stop.store(true, Ordering::Relaxed);
    let (runs, removed) = cleaner.join().unwrap();
    assert!(
        runs >= 2 && removed > 0,
        "cleanup ran {runs} times, removed {removed}"
    );
    assert_no_torn_files(&server.cache_dir);
}

#[tokio::test]
async fn cleanup_dry_run_deletes_nothing_and_real_run_frees_unused_files() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let server = Server::start("caches:\n  cleanup_interval: 0\n");
    let (_, r) = server
        .post(
            "/symbolicate",
            &elf_request(http_source(&symsrv.url, json!({}))),
        )
        .await;
    assert_elf_symbolicated(&r);
    let files = settled(&server.cache_dir).await;
    let config = server.cache_dir.parent().unwrap().join("cleanup.yml");
    let run = |yaml: String, dry: bool| {
        std::fs::write(&config, yaml).unwrap();
        run_cleanup(&config, if dry { &["--dry-run"] } else { &[] })
    };
    let dir = server.cache_dir.display();
    // Defaults: everything was just used, only nothing goes.
    let out = run(format!("cache_dir: {dir}\n"), false);
    assert!(out.starts_with("removed 0 files"), "{out}");
    let unused = format!(
        "cache_dir: {dir}\ncaches:\n  downloaded:\n    max_unused_for: 0s\n  derived:\n    max_unused_for: 0s\n"
    );
    let out = run(unused.clone(), true);
    assert!(
        out.starts_with("dry run, nothing deleted: removed "),
        "{out}"
    );
    assert_eq!(common::files_under(&server.cache_dir), files);
    let out = run(unused, false);
    let content_files = files.iter().filter(|p| !is_placeholder(p)).count();
    assert!(
        out.starts_with(&format!("removed {content_files} files")),
        "{out} ({files:?})"
    );
    assert!(
        common::files_under(&server.cache_dir)
            .iter()
            .all(|p| is_placeholder(p))
    );
}

/// The files under `dir` once the conversions a cold request started in the background
/// are done: a SymCache is there, no temp file is, and nothing changes for a moment.
async fn settled(dir: &Path) -> Vec<PathBuf> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    loop {
        let files = common::files_under(dir);
        let done = files.iter().any(|p| p.starts_with(dir.join("symcaches")))
            && !files.iter().any(|p| is_temp(p));
        if done && files == last {
            return files;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {files:?}"
        );
        last = files;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn disk_budget_evicts_originals_before_derived_caches() {
    let symsrv = SymbolServer::with_elf_debug().await;
    let budget = std::fs::metadata(elf_debug_file()).unwrap().len() - 1;
    let server = Server::start(&format!(
        "caches:\n  max_disk_size: {budget}\n  cleanup_interval: 300ms\n"
    ));
    let body = elf_request(http_source(&symsrv.url, json!({})));
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    let in_kind = |kind: &str| {
        common::files_under(&server.cache_dir.join(kind))
            .into_iter()
            .filter(|p| !is_temp(p) && !is_placeholder(p))
            .count()
    };
    for _ in 0..50 {
        if in_kind("objects") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(in_kind("objects"), 0, "the original is evicted");
    assert_eq!(in_kind("symcaches"), 1, "the derived cache fits and stays");
    let total: u64 = common::files_under(&server.cache_dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(total <= budget, "{total} > {budget}");
}

/// A source for the debug file's path that misbehaves while `trouble` is set: by
/// answering 503 (`flaky_file`) or by sending half the file and then nothing
/// (`stalling_file`). Counts the requests.
#[derive(Clone)]
struct Trouble {
    trouble: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
}

impl Trouble {
    /// Serves the debug file's path with `handler` on a loopback port; returns the base URL.
    async fn serve<H, T>(&self, handler: H) -> String
    where
        H: axum::handler::Handler<T, Trouble>,
        T: 'static,
    {
        let app = Router::new()
            .route(
                &format!("/{}", elf_debug_path()),
                axum::routing::get(handler),
            )
            .with_state(self.clone());
        format!("http://{}/", common::serve(app).await)
    }

    fn new() -> Self {
        Trouble {
            trouble: Arc::new(AtomicBool::new(true)),
            hits: Arc::new(AtomicUsize::new(0)),
        }
    }
}

async fn flaky_file(State(t): State<Trouble>) -> Response {
    t.hits.fetch_add(1, Ordering::SeqCst);
    if t.trouble.load(Ordering::SeqCst) {
        let mut response = Response::new(Body::from("overloaded"));
        *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
        return response;
    }
    Response::new(Body::from(std::fs::read(elf_debug_file()).unwrap()))
}

#[tokio::test]
async fn server_errors_are_remembered_briefly_not_for_an_hour() {
    let flaky = Trouble::new();
    let url = flaky.serve(flaky_file).await;
    // Misses keep the default hour: only the error rule can make the retry happen.
    let server = Server::start(
        "caches:\n  downloaded:\n    retry_errors_after: 2s\n  derived:\n    retry_errors_after: 2s\n",
    );
    let body = elf_request(http_source(&url, json!({})));
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_eq!(r["modules"][0]["debug_status"], "fetching_failed", "{r}");
    let tries = flaky.hits.load(Ordering::SeqCst);
    assert!(tries >= 1);

    // The source recovers, but the error is remembered for a moment: no new attempt.
    flaky.trouble.store(false, Ordering::SeqCst);
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_eq!(r["modules"][0]["debug_status"], "fetching_failed", "{r}");
    assert_eq!(flaky.hits.load(Ordering::SeqCst), tries);

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    assert_eq!(flaky.hits.load(Ordering::SeqCst), tries + 1);
}

async fn stalling_file(State(t): State<Trouble>) -> Response {
    let data = std::fs::read(elf_debug_file()).unwrap();
    let len = data.len();
    if !t.trouble.load(Ordering::SeqCst) {
        return Response::new(Body::from(data));
    }
    t.hits.fetch_add(1, Ordering::SeqCst);
    let half = bytes::Bytes::from(data[..len / 2].to_vec());
    let stream = futures::stream::once(async move { Ok::<_, Infallible>(half) })
        .chain(futures::stream::pending());
    Response::builder()
        .header("content-length", len)
        .body(Body::from_stream(stream))
        .unwrap()
}

#[tokio::test]
async fn killed_mid_download_leaves_no_torn_file_and_recovers() {
    let staller = Trouble::new();
    let url = staller.serve(stalling_file).await;

    let work = tempfile::tempdir().unwrap();
    let cache_dir = work.path().join("cache");
    let mut server = Server::start_in(work.path(), &cache_dir, "");
    let body = elf_request(http_source(&url, json!({})));
    let pending = {
        let url = server.url.clone();
        let body = body.clone();
        tokio::spawn(async move {
            common::client()
                .post(format!("{url}/symbolicate"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .send()
                .await
        })
    };
    // Half the file is in a temp file in the cache dir, nothing in the entry's place.
    let objects = cache_dir.join("objects/1/global");
    let mut temp = None;
    for _ in 0..100 {
        temp = common::files_under(&objects)
            .into_iter()
            .find(|p| is_temp(p) && std::fs::metadata(p).unwrap().len() > 0);
        if temp.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let temp = temp.expect("a download in progress writes a temp file");
    assert_eq!(staller.hits.load(Ordering::SeqCst), 1);

    // SIGKILL: no destructor, no cleanup, no chance to finish the write.
    server.kill();
    assert!(
        pending.await.unwrap().is_err(),
        "the connection dies with the server"
    );
    assert!(temp.exists());
    assert_no_torn_files(&cache_dir);

    staller.trouble.store(false, Ordering::SeqCst);
    let server = Server::start_in(work.path(), &cache_dir, "");
    let (_, r) = server.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    assert_no_torn_files(&cache_dir);

    // The abandoned temp file goes once it is old enough to be surely abandoned.
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .append(true)
        .open(&temp)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let config = work.path().join("cleanup.yml");
    std::fs::write(&config, format!("cache_dir: {}\n", cache_dir.display())).unwrap();
    let out = run_cleanup(&config, &[]);
    assert!(out.starts_with("removed 1 files"), "{out}");
    assert!(!temp.exists());
}

/// Two replicas with their own disks and one bucket: the second one computes nothing
/// the first already did, and downloads nothing from the symbol source.
#[tokio::test]
async fn replicas_share_derived_caches_through_s3() {
    let s3 = S3Server::start().await;
    std::fs::create_dir_all(s3.root.path().join("shared")).unwrap();
    let shared = format!(
        "shared_cache:\n  s3:\n    bucket: shared\n    prefix: omnisym\n    region: [us-east-1, \"{}\"]\n    access_key: {ACCESS_KEY}\n    secret_key: {SECRET_KEY}\n",
        s3.url
    );
    replicas_share_derived_caches(&shared).await;
    assert_only_derived_caches_and_originals(&relative_files(
        &s3.root.path().join("shared/omnisym"),
    ));
}

#[tokio::test]
async fn replicas_share_derived_caches_through_gcs() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("shared")).unwrap();
    let gcs = GcsServer::start(data.path()).await;
    let shared = format!(
        "shared_cache:\n  gcs:\n    bucket: shared\n    prefix: omnisym\n    endpoint: {}\n",
        gcs.url
    );
    replicas_share_derived_caches(&shared).await;
    let listing = common::client()
        .get(format!("{}/storage/v1/b/shared/o", gcs.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let listing: Value = serde_json::from_slice(&listing).unwrap();
    let names: Vec<String> = listing["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let name = item["name"].as_str().unwrap();
            name.strip_prefix("omnisym/").unwrap().to_owned()
        })
        .collect();
    assert_only_derived_caches_and_originals(&names);
}

/// What a fleet keeps in the shared store beside the caches (symbfile parts and files):
/// written now, sized, fetched and removed alike on every backend.
#[tokio::test]
async fn the_shared_store_puts_sizes_and_removes_on_every_backend() {
    let s3 = S3Server::start().await;
    std::fs::create_dir_all(s3.root.path().join("shared")).unwrap();
    let gcs_data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(gcs_data.path().join("shared")).unwrap();
    let gcs = GcsServer::start(gcs_data.path()).await;
    let dir = tempfile::tempdir().unwrap();
    let backends = [
        format!("filesystem:\n  path: {}\n", dir.path().display()),
        format!(
            "s3:\n  bucket: shared\n  region: [us-east-1, \"{}\"]\n  access_key: {ACCESS_KEY}\n  secret_key: {SECRET_KEY}\n",
            s3.url
        ),
        format!("gcs:\n  bucket: shared\n  endpoint: {}\n", gcs.url),
    ];
    for yaml in backends {
        let config: omnisym::cache::SharedCacheConfig = serde_yaml_ng::from_str(&yaml).unwrap();
        let shared = omnisym::cache::SharedCache::new(&config, Duration::from_secs(5)).unwrap();
        let path = "symbfiles/v1/files/ab/x/ranges.symbfile";
        assert_eq!(shared.size(path).await.unwrap(), None, "{yaml}");
        let data = symbolic::common::ByteView::from_vec(b"twelve bytes".to_vec());
        shared.put(path, data).await.unwrap();
        assert_eq!(shared.size(path).await.unwrap(), Some(12), "{yaml}");
        let mut dest = tempfile::NamedTempFile::new().unwrap();
        assert!(shared.try_fetch(path, &mut dest).await.unwrap(), "{yaml}");
        assert_eq!(std::fs::read(dest.path()).unwrap(), b"twelve bytes");
        shared.remove(path).await.unwrap();
        assert_eq!(shared.size(path).await.unwrap(), None, "{yaml}");
        assert!(!shared.try_fetch(path, &mut dest).await.unwrap(), "{yaml}");
        // Removing what is not there is no error.
        shared.remove(path).await.unwrap();
    }
}

/// Past 16 MiB the crate would upload in chunks, whose session URL fake-gcs-server builds
/// from a Host header that lacks the port; files of any size must still go up and come back.
#[tokio::test]
async fn gcs_shared_cache_round_trips_files_past_the_chunking_threshold() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("shared")).unwrap();
    let gcs = GcsServer::start(data.path()).await;
    let config: omnisym::cache::SharedCacheConfig = serde_yaml_ng::from_str(&format!(
        "gcs:\n  bucket: shared\n  endpoint: {}\n",
        gcs.url
    ))
    .unwrap();
    let shared = omnisym::cache::SharedCache::new(&config, Duration::from_secs(5)).unwrap();
    let large: Vec<u8> = (0..17 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let files = [
        ("kind/1/global/small", b"small".to_vec()),
        ("kind/1/global/large", large),
    ];
    for (path, contents) in &files {
        let view = symbolic::common::ByteView::from_vec(contents.clone());
        shared.store(path.to_string(), view);
    }
    // Uploads run in the background: each file must become fetchable, whole.
    for (path, contents) in &files {
        let mut dest = tempfile::NamedTempFile::new().unwrap();
        let mut found = false;
        for _ in 0..600 {
            if shared.fetch(path, &mut dest).await {
                found = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(found, "{path} never arrived");
        assert!(std::fs::read(dest.path()).unwrap() == *contents, "{path}");
    }
    let mut dest = tempfile::NamedTempFile::new().unwrap();
    assert!(!shared.fetch("kind/1/global/none", &mut dest).await);
}

#[tokio::test]
async fn replicas_share_derived_caches_through_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let shared = format!(
        "shared_cache:\n  filesystem:\n    path: {}\n",
        dir.path().display()
    );
    replicas_share_derived_caches(&shared).await;
    assert_only_derived_caches_and_originals(&relative_files(dir.path()));
}

fn relative_files(dir: &Path) -> Vec<String> {
    common::files_under(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The store holds the SymCache and the metadata, never an original.
/// What a fleet shares: derived caches and the original debug files, no other download.
fn assert_only_derived_caches_and_originals(stored: &[String]) {
    assert!(
        stored.iter().any(|p| p.starts_with("symcaches/1/global/")),
        "{stored:?}"
    );
    let meta = &omnisym::cache::kinds::OBJECT_META;
    let meta_dir = format!("{}/{}/global/", meta.name, meta.version);
    assert!(
        stored.iter().any(|p| p.starts_with(&meta_dir)),
        "{stored:?}"
    );
    assert!(
        stored.iter().any(|p| p.starts_with("objects/1/global/")),
        "{stored:?}"
    );
    for kind in omnisym::cache::kinds::ALL {
        let shared = stored
            .iter()
            .any(|p| p.starts_with(&format!("{}/", kind.name)));
        assert!(!shared || kind.is_shared(), "{}: {stored:?}", kind.name);
    }
}

async fn replicas_share_derived_caches(config: &str) {
    let symsrv = SymbolServer::with_elf_debug().await;
    let body = elf_request(http_source(&symsrv.url, json!({})));

    let first = Server::start(config);
    let (_, r) = first.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 1);
    // Uploads run in the background: wait for the SymCache, the metadata and the
    // debug file itself.
    let uploads =
        |m: &Exposition, outcome| m.value("shared_cache_uploads_total", &[("outcome", outcome)]);
    let mut m = first.scrape().await;
    for _ in 0..100 {
        if uploads(&m, "ok") >= 3.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        m = first.scrape().await;
    }
    assert_eq!(uploads(&m, "ok"), 3.0, "{m:?}");
    assert_eq!(uploads(&m, "dropped"), 0.0, "{m:?}");

    let second = Server::start(config);
    let (_, r) = second.post("/symbolicate", &body).await;
    assert_elf_symbolicated(&r);
    assert_eq!(hits_of(&symsrv, &elf_debug_path()), 1, "no second download");
    let m = second.scrape().await;
    assert_eq!(lookups(&m, "symcaches", "computed"), 0.0, "{m:?}");
    assert_eq!(lookups(&m, "symcaches", "shared"), 1.0, "{m:?}");
    assert_eq!(lookups(&m, "object_meta", "shared"), 1.0, "{m:?}");
    let fetches = |outcome| m.value("shared_cache_fetches_total", &[("outcome", outcome)]);
    assert_eq!(fetches("error"), 0.0, "{m:?}");
    assert_eq!(fetches("hit"), 2.0, "{m:?}");
}
