//! Mozilla's symbolication API: the first byte picks `POST /symbolicate/v5` (even) or
//! `/symbolicate/v4` (odd), the rest is the body, sent through the server's real router:
//! counted against the request limits before it is parsed, parsed, checked, turned
//! into one native request (symbolicated with no sources, as a server without
//! configured sources does) and answered in Mozilla's shapes.
//!
//! Our own code only: any panic is a crash, and so is an answer that is not JSON or a
//! status other than 200 and 400 (no source is asked, so no 503 can be due).

#![no_main]

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use omnisym::config::Config;
use omnisym::server::router;
use omnisym_fuzz::{app_state, runtime, scratch_dir};
use tower::ServiceExt;

fn app() -> &'static Router {
    static APP: OnceLock<Router> = OnceLock::new();
    APP.get_or_init(|| {
        let config = Config {
            cache_dir: scratch_dir().join("cache"),
            ..Config::default()
        };
        router(app_state().clone(), &config)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let path = if selector % 2 == 0 {
        "/symbolicate/v5"
    } else {
        "/symbolicate/v4"
    };
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("debug", if selector & 2 == 0 { "false" } else { "true" })
        .body(Body::from(body.to_vec()))
        .expect("a valid request");
    runtime().block_on(async {
        let response = app().clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("the answer is read");
        assert!(
            status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
            "{path}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        serde_json::from_slice::<serde_json::Value>(&bytes).expect("the answer is JSON");
    });
});
