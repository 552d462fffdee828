//! One log line per request at `info` (target `omnisym::access`): method, path, status,
//! duration and a request id. The id is the client's `x-request-id` when it sent a
//! usable one (so a proxy's id follows the request), a new one otherwise (tower-http's
//! request-id layers make and echo it), and it is echoed in the answer's
//! `x-request-id` header so a user can quote it.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderName;
use axum::middleware::Next;
use axum::response::Response;
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-sent id kept; a longer one is replaced, not truncated.
const MAX_CLIENT_ID_LEN: usize = 128;

/// The layers, outermost first: a client id that is not [usable](is_usable_id) is
/// dropped, tower-http's `SetRequestId` gives a request without one a new UUID, the
/// line is logged, and `PropagateRequestId` echoes the id in the answer.
pub fn layers<S>(router: axum::Router<S>) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(axum::middleware::from_fn(log_request))
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
        .layer(axum::middleware::map_request(drop_unusable_id))
}

async fn drop_unusable_id(mut request: Request) -> Request {
    let usable = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_usable_id);
    if !usable {
        request.headers_mut().remove(&REQUEST_ID);
    }
    request
}

async fn log_request(request: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let id = request
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let response = next.run(request).await;
    tracing::info!(
        target: "omnisym::access",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        duration_ms = start.elapsed().as_secs_f64() * 1000.0,
        request_id = %id,
        "request"
    );
    response
}

/// Ids end up in logs: only short, printable, unambiguous ones are taken as they are.
fn is_usable_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CLIENT_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_kept_only_when_safe_to_log() {
        assert!(is_usable_id("3f2a-77_b.c:1"));
        assert!(!is_usable_id(""));
        assert!(!is_usable_id("a b"));
        assert!(!is_usable_id("line\nbreak"));
        assert!(!is_usable_id(&"x".repeat(MAX_CLIENT_ID_LEN + 1)));
    }
}
