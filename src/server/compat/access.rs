//! Who may use the compatibility fronts. They are made to be reached by clients
//! outside Sentry (profilers, debuggers, CI jobs), and `/proxy` hands out the raw debug
//! files of possibly private sources, so one bearer token (`fronts.token`) guards
//! `/proxy`, `/symcache` and the Mozilla API alike, each front able to opt out
//! (`fronts.open`). Browsers may call the Mozilla API only from the origins in
//! `fronts.cors_allowed_origins`: Firefox's profiler by default, any only when the
//! operator lists `*` (a public mirror, as Mozilla's own service is).
//! The browser console (`/console`) is behind the same token; since a person opens it
//! by address, it also takes HTTP Basic credentials with the token as the password,
//! which the browser asks for and then sends with the page's own requests.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::config::{Front, FrontsConfig};
use crate::server::Routes;
use crate::sources::Secret;

/// `router` (the routes of `front`) behind the token, unless that front is open, and
/// for the Mozilla API the configured CORS policy outside it, so that a preflight,
/// which carries no credentials, is answered without one.
pub fn guard(routes: Routes, front: Front, config: &FrontsConfig) -> Routes {
    let routes = match &config.token {
        Some(token) if !config.open.contains(&front) => {
            let token = token.clone();
            routes.map(|router| {
                router.route_layer(axum::middleware::from_fn(move |request, next| {
                    require_token(token.clone(), front, request, next)
                }))
            })
        }
        _ => routes,
    };
    match cors(front, config) {
        Some(cors) => routes.map(|router| router.layer(cors)),
        None => routes,
    }
}

async fn require_token(token: Secret, front: Front, request: Request, next: Next) -> Response {
    let basic = front == Front::Console;
    if presents(&token, request.headers(), basic) {
        return next.run(request).await;
    }
    // Before anything else, so an unauthorised client learns nothing about what exists.
    // The console's challenge makes a browser ask its user for the token.
    let challenge = if basic {
        "Basic realm=\"omnisym console\", charset=\"UTF-8\""
    } else {
        "Bearer realm=\"omnisym\""
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
    )
        .into_response()
}

/// `Authorization: Bearer <token>`, or where `basic` is allowed, HTTP Basic credentials
/// with any user name and the token as the password.
fn presents(token: &Secret, headers: &HeaderMap, basic: bool) -> bool {
    let Some((scheme, given)) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
    else {
        return false;
    };
    if scheme.eq_ignore_ascii_case("bearer") {
        return token.matches(given.trim());
    }
    if !(basic && scheme.eq_ignore_ascii_case("basic")) {
        return false;
    }
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(given.trim())
        .ok()
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|pair| {
            pair.split_once(':')
                .map(|(_, password)| token.matches(password))
        })
        .unwrap_or(false)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(authorization).unwrap(),
        );
        headers
    }

    #[test]
    fn basic_credentials_carry_the_token_only_where_allowed() {
        let token = Secret::new("s3cret");
        // "anyone:s3cret", "anyone:wrong", "s3cret" (no colon).
        let right = "Basic YW55b25lOnMzY3JldA==";
        let wrong = "Basic YW55b25lOndyb25n";
        let no_colon = "Basic czNjcmV0";
        assert!(presents(&token, &headers(right), true));
        assert!(
            !presents(&token, &headers(right), false),
            "the API fronts take Bearer only"
        );
        assert!(!presents(&token, &headers(wrong), true));
        assert!(!presents(&token, &headers(no_colon), true));
        assert!(!presents(&token, &headers("Basic !!!"), true));
        assert!(presents(&token, &headers("Bearer s3cret"), true));
        assert!(presents(&token, &headers("bearer  s3cret "), false));
        assert!(!presents(&token, &headers("Bearer s3cre"), false));
        assert!(!presents(&token, &HeaderMap::new(), true));
    }
}
