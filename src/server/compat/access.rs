//! Who may use the compatibility fronts. They are made to be reached by clients
//! outside Sentry (profilers, debuggers, CI jobs), and `/proxy` hands out the raw debug
//! files of possibly private sources, so one bearer token (`fronts.token`) guards
//! `/proxy`, `/symcache` and the Mozilla API alike, each front able to opt out
//! (`fronts.open`). Browsers may call the Mozilla API only from the origins in
//! `fronts.cors_allowed_origins`; any by default, as Mozilla's service allows.

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::config::{Front, FrontsConfig};
use crate::server::AppState;
use crate::sources::Secret;

/// `router` (the routes of `front`) behind the token, unless that front is open, and
/// for the Mozilla API the configured CORS policy outside it, so that a preflight,
/// which carries no credentials, is answered without one.
pub fn guard(router: Router<AppState>, front: Front, config: &FrontsConfig) -> Router<AppState> {
    let router = match &config.token {
        Some(token) if !config.open.contains(&front) => {
            let token = token.clone();
            router.route_layer(axum::middleware::from_fn(move |request, next| {
                require_token(token.clone(), request, next)
            }))
        }
        _ => router,
    };
    match cors(front, config) {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

async fn require_token(token: Secret, request: Request, next: Next) -> Response {
    if presents(&token, request.headers()) {
        return next.run(request).await;
    }
    // Before anything else, so an unauthorised client learns nothing about what exists.
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"omnisym\"")],
    )
        .into_response()
}

/// `Authorization: Bearer <token>`.
fn presents(token: &Secret, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .is_some_and(|(_, given)| token.matches(given.trim()))
}

/// The CORS policy of a front: only the Mozilla API is called from browsers (Firefox's
/// profiler symbolicates from the page).
fn cors(front: Front, config: &FrontsConfig) -> Option<CorsLayer> {
    if front != Front::Mozilla || config.cors_allowed_origins.is_empty() {
        return None;
    }
    let origins = &config.cors_allowed_origins;
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([Method::POST])
            // What the page asks for: `Content-Type`, `Debug`, and `Authorization` when a
            // token is set (a wildcard would not cover `Authorization`).
            .allow_headers(AllowHeaders::mirror_request())
            .max_age(Duration::from_secs(24 * 60 * 60)),
    )
}
