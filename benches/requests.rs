//! Whole requests through the server's router, in process (no socket, no hyper): what
//! every request pays for routing and the observe layer (id, access log, metrics), on
//! the cheapest one, `GET /healthcheck`; and one warm `POST /minidump` of the small
//! Linux dump of `fixtures/minidump` (the multipart form, the upload, the walk and
//! symbolication), its symbols laid out as `scripts/minidump-load.sh` does.
//!
//! Run with `cargo bench --bench requests`.

use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use criterion::{Criterion, criterion_group, criterion_main};
use omnisym::config::Config;
use omnisym::server::{AppState, router};
use tower::ServiceExt;

const BOUNDARY: &str = "----omnisym-bench-7b1e";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Lays the `nofp` variant's files out in the native layout under `symbols`; its dump.
fn lay_out_symbols(symbols: &Path) -> Vec<u8> {
    let fixtures = root().join("fixtures/minidump");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("manifest.json")).unwrap()).unwrap();
    let variant = &manifest["variants"]["nofp"];
    let code_id = variant["code_id"].as_str().unwrap();
    let base = symbols.join(&code_id[..2]).join(&code_id[2..]);
    std::fs::create_dir_all(base.parent().unwrap()).unwrap();
    for (kind, suffix) in [
        ("executable", ""),
        ("debug", ".debug"),
        ("source_bundle", ".src.zip"),
    ] {
        let file = variant["files"][kind].as_str().unwrap();
        let mut target = base.clone().into_os_string();
        target.push(suffix);
        std::fs::copy(fixtures.join(file), target).unwrap();
    }
    std::fs::read(fixtures.join(variant["files"]["minidump"].as_str().unwrap())).unwrap()
}

fn form(dump: &[u8], symbols: &Path) -> Vec<u8> {
    let field = |name: &str, filename: Option<&str>, data: &[u8]| {
        let mut head = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"");
        if let Some(filename) = filename {
            head += &format!("; filename=\"{filename}\"\r\nContent-Type: application/octet-stream");
        }
        [head.as_bytes(), b"\r\n\r\n", data, b"\r\n"].concat()
    };
    let sources = serde_json::json!([{
        "type": "filesystem", "id": "fixtures", "path": symbols, "layout": {"type": "native"}
    }]);
    [
        field("upload_file_minidump", Some("crash.dmp"), dump),
        field("sources", None, sources.to_string().as_bytes()),
        field("options", None, b"{}"),
        format!("--{BOUNDARY}--\r\n").into_bytes(),
    ]
    .concat()
}

fn bench(c: &mut Criterion) {
    let temp = tempfile::tempdir().unwrap();
    let symbols = temp.path().join("symbols");
    let body = form(&lay_out_symbols(&symbols), &symbols);
    let config = Config {
        cache_dir: temp.path().join("cache"),
        ..Config::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = runtime.block_on(async { router(AppState::new(&config).unwrap(), &config) });

    let healthcheck = || {
        // As a load tool sends it: the `Host` is checked on every request (a loopback
        // server answers only loopback hosts and `allowed_hosts`).
        let request = Request::get("/healthcheck")
            .header("host", "127.0.0.1:3021")
            .body(Body::empty())
            .unwrap();
        let response = runtime.block_on(app.clone().oneshot(request)).unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    };
    let minidump = || {
        let request = Request::post("/minidump")
            .header(
                "content-type",
                format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            .body(Body::from(body.clone()))
            .unwrap();
        runtime.block_on(async {
            let response = app.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap()
        })
    };
    // The cold request fetches the symbols and builds the caches.
    let answer = minidump();
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["status"], "completed", "{answer}");

    let mut group = c.benchmark_group("requests");
    group.bench_function("healthcheck", |b| b.iter(healthcheck));
    group.bench_function("minidump_warm", |b| b.iter(minidump));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
