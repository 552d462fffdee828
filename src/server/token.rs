//! The one check of `fronts.token`, shared by the compatibility fronts
//! (`compat/access.rs`) and the console's login (`console/login.rs`): reading the
//! `Authorization` header, comparing a bearer token, and the 401 that asks for it.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::server::Routes;
use crate::sources::Secret;

/// Whether a request's headers carry the token, in the ways one guard accepts.
pub type Presents = fn(&Secret, &HeaderMap) -> bool;

/// `routes` behind `tokens`: a request whose headers `presents` accepts for none of them is
/// answered 401 with `challenge` (a `WWW-Authenticate` value) before anything else, so
/// an unauthorised client learns nothing about what exists.
pub fn require(
    routes: Routes,
    tokens: Arc<[Secret]>,
    presents: Presents,
    challenge: &'static str,
) -> Routes {
    routes.map(|router| {
        router.route_layer(axum::middleware::from_fn(move |request, next| {
            check(tokens.clone(), presents, challenge, request, next)
        }))
    })
}

async fn check(
    tokens: Arc<[Secret]>,
    presents: Presents,
    challenge: &'static str,
    request: Request,
    next: Next,
) -> Response {
    // Every token is compared, so the time taken does not tell which one matched.
    let accepted = tokens
        .iter()
        .fold(false, |any, token| any | presents(token, request.headers()));
    if accepted {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
    )
        .into_response()
}

/// The scheme and the credentials of the `Authorization` header.
pub fn authorization(headers: &HeaderMap) -> Option<(&str, &str)> {
    let (scheme, given) = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .split_once(' ')?;
    Some((scheme, given.trim()))
}

/// `Authorization: Bearer <token>`.
pub fn bearer(token: &Secret, headers: &HeaderMap) -> bool {
    authorization(headers).is_some_and(|(scheme, given)| {
        scheme.eq_ignore_ascii_case("bearer") && token.matches(given)
    })
}

/// Headers with this `Authorization` value.
#[cfg(test)]
pub fn headers(authorization: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        axum::http::HeaderValue::from_str(authorization).unwrap(),
    );
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_compared_whole_and_its_scheme_in_any_case() {
        let token = Secret::new("s3cret");
        assert!(bearer(&token, &headers("Bearer s3cret")));
        assert!(bearer(&token, &headers("bearer  s3cret ")));
        assert!(!bearer(&token, &headers("Bearer s3cre")));
        assert!(!bearer(&token, &headers("Bearer s3cret2")));
        assert!(!bearer(&token, &headers("Basic YW55b25lOnMzY3JldA==")));
        assert!(!bearer(&token, &headers("s3cret")));
        assert!(!bearer(&token, &HeaderMap::new()));
    }
}
