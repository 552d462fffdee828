//! Who may open the console: the holder of `fronts.token`, unless `fronts.open` lists
//! `console`. A person opens the console by address and cannot add a header, so beside
//! a bearer token it takes HTTP Basic credentials with any user name and the token as
//! the password: the 401's `Basic` challenge makes the browser ask its user, and the
//! browser then sends them with the page's own requests.

use axum::http::HeaderMap;

use crate::config::{Front, FrontsConfig};
use crate::server::{Routes, token};
use crate::sources::Secret;

/// `routes` behind the token, unless the console is open.
pub fn guard(routes: Routes, config: &FrontsConfig) -> Routes {
    match &config.token {
        Some(token) if !config.open.contains(&Front::Console) => token::require(
            routes,
            [token.clone()].into(),
            presents,
            "Basic realm=\"omnisym console\", charset=\"UTF-8\"",
        ),
        _ => routes,
    }
}

/// The token as a bearer, or as the password of HTTP Basic credentials.
fn presents(token: &Secret, headers: &HeaderMap) -> bool {
    token::bearer(token, headers) || basic(token, headers)
}

fn basic(token: &Secret, headers: &HeaderMap) -> bool {
    let Some((scheme, given)) = token::authorization(headers) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(given)
        .ok()
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .and_then(|pair| {
            pair.split_once(':')
                .map(|(_, password)| token.matches(password))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::token::headers;

    #[test]
    fn basic_credentials_carry_the_token_as_their_password() {
        let token = Secret::new("s3cret");
        // "anyone:s3cret", "anyone:wrong", "s3cret" (no colon).
        let right = "Basic YW55b25lOnMzY3JldA==";
        assert!(presents(&token, &headers(right)));
        assert!(
            !token::bearer(&token, &headers(right)),
            "the API fronts take Bearer only"
        );
        assert!(!presents(&token, &headers("Basic YW55b25lOndyb25n")));
        assert!(!presents(&token, &headers("Basic czNjcmV0")));
        assert!(!presents(&token, &headers("Basic !!!")));
        assert!(presents(&token, &headers("Bearer s3cret")));
        assert!(!presents(&token, &headers("Bearer s3cre")));
        assert!(!presents(&token, &HeaderMap::new()));
    }
}
