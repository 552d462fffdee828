//! One log line per request at `info` (target `omnisym::access`): method, path, status,
//! duration and a request id. The id is the client's `x-request-id` when it sent a
//! usable one (so a proxy's id follows the request), a new one otherwise, and it is
//! echoed in the answer's `x-request-id` header so a user can quote it.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

const REQUEST_ID: &str = "x-request-id";

/// Longest client-sent id kept; a longer one is replaced, not truncated.
const MAX_CLIENT_ID_LEN: usize = 128;

pub async fn log_request(request: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| is_usable_id(id))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let mut response = next.run(request).await;
    let duration = start.elapsed();
    tracing::info!(
        target: "omnisym::access",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        duration_ms = duration.as_secs_f64() * 1000.0,
        request_id = %id,
        "request"
    );
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
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
