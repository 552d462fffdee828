//! Who may use the compatibility fronts. They are made to be reached by clients
//! outside Sentry (profilers, debuggers, CI jobs), and `/proxy` hands out the raw debug
//! files of possibly private sources, so one bearer token (`fronts.token`) guards
//! `/proxy`, `/symcache` and the Mozilla API alike, each front able to opt out
//! (`fronts.open`). Browsers may call the Mozilla API only from the origins in
//! `fronts.cors_allowed_origins`: Firefox's profiler by default, any only when the
//! operator lists `*` (a public mirror, as Mozilla's own service is).

use axum::http::{HeaderValue, Method};
use std::time::Duration;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::config::{Front, FrontsConfig};
use crate::server::{Routes, token};
use crate::store::StoreToken;

/// `routes` (the routes of `front`) behind the token, unless that front is open, and
/// for the Mozilla API the configured CORS policy outside it, so that a preflight,
/// which carries no credentials, is answered without one. The console has its own
/// login (`console/login.rs`).
///
/// The store's tokens (`store.tokens`, read or write access) are taken beside
/// `fronts.token`: the fronts hand out what the store holds, and a team gives its
/// debuggers a read token rather than the operator's. They only open a front that
/// `fronts.token` closes; without it the fronts stay open as before.
pub fn guard(
    routes: Routes,
    front: Front,
    config: &FrontsConfig,
    store_tokens: &[StoreToken],
) -> Routes {
    let routes = match &config.token {
        Some(token) if !config.open.contains(&front) => token::require(
            routes,
            std::iter::once(token.clone())
                .chain(store_tokens.iter().map(|t| t.token.clone()))
                .collect(),
            token::bearer,
            "Bearer realm=\"omnisym\"",
        ),
        _ => routes,
    };
    match cors(front, config) {
        Some(cors) => routes.map(|router| router.layer(cors)),
        None => routes,
    }
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
