//! Which origins may be scraped: `scraping.allowed_origins`, matched as upstream (and
//! Sentry's `is_valid_origin`) match them.

use url::Url;

/// Whether `url` matches one of the `allowed` patterns:
/// - `*`: any origin;
/// - `http://host[:port]`: exactly that origin (scheme must match);
/// - `host` or `host:port`: that host on any port, or on that port;
/// - `*.host`: the host and all its subdomains, on any port;
/// - `*:port`: any host on that port;
/// - `host/*`: the same as `host`.
///
/// A pattern with any other path matches nothing: upstream and Sentry compare the
/// pattern's path, which has no leading `/`, with the URL's path, which has one. We
/// keep that, so an allow list means the same here as there.
///
/// Internationalised host names are compared in their ASCII (punycode) form.
pub fn is_allowed_origin(url: &Url, allowed: &[String]) -> bool {
    if allowed.iter().any(|p| p == "*" || p == url.as_str()) {
        return true;
    }

    let host = url
        .host_str()
        .map(|h| idna::domain_to_ascii(h).unwrap_or_else(|_| h.to_owned()))
        .unwrap_or_default();
    let mut host_forms = vec!["*".to_owned(), host.clone()];
    if let Some(port) = url.port_or_known_default() {
        host_forms.push(format!("*:{port}"));
        host_forms.push(format!("{host}:{port}"));
    }

    allowed.iter().any(|pattern| {
        let Some(pattern) = OriginPattern::parse(pattern) else {
            tracing::warn!(pattern, "invalid allowed origin pattern");
            return false;
        };
        if pattern.scheme != "*" && pattern.scheme != url.scheme() {
            return false;
        }
        if let Some(base) = pattern.domain.strip_prefix("*.") {
            // `*.example.com` matches `example.com` and anything ending in `.example.com`.
            return host.ends_with(&pattern.domain[1..]) || host == base;
        }
        if !host_forms.contains(&pattern.domain) {
            return false;
        }
        let path = pattern.path.strip_suffix('*').unwrap_or(&pattern.path);
        pattern.path == "*" || url.path().starts_with(path)
    })
}

struct OriginPattern {
    scheme: String,
    /// Host in ASCII form, with `:port` if the pattern had one.
    domain: String,
    path: String,
}

impl OriginPattern {
    fn parse(pattern: &str) -> Option<Self> {
        let (scheme, rest) = pattern.split_once("://").unwrap_or(("*", pattern));
        let (domain, path) = rest.split_once('/').unwrap_or((rest, "*"));
        // As upstream: the port is split off the whole rest, so a pattern with both a
        // port and a path keeps the path in its port and only matches exactly.
        let (domain, port) = match rest.split_once(':') {
            Some((d, p)) => (d, Some(p)),
            None => (domain, None),
        };
        let mut domain = idna::domain_to_ascii(domain).ok()?;
        if let Some(port) = port {
            domain.push(':');
            domain.push_str(port);
        }
        Some(OriginPattern {
            scheme: scheme.to_owned(),
            domain,
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(url: &str, patterns: &[&str]) -> bool {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        is_allowed_origin(&url.parse().unwrap(), &patterns)
    }

    #[test]
    fn nothing_is_allowed_without_patterns() {
        assert!(!allowed("http://example.com", &[]));
    }

    #[test]
    fn the_wildcard_allows_everything() {
        assert!(allowed("http://example.com/a.js", &["*"]));
    }

    #[test]
    fn subdomain_wildcards_match_the_domain_and_below() {
        assert!(allowed("http://example.com", &["*.example.com"]));
        assert!(allowed("http://foo.example.com:80", &["*.example.com"]));
        assert!(allowed(
            "http://foo.example.com/foo/bar",
            &["*.example.com"]
        ));
        assert!(!allowed("http://foo.com", &["*.example.com"]));
        assert!(!allowed("http://notexample.com", &["*.example.com"]));
    }

    #[test]
    fn bare_domains_match_any_port_but_not_subdomains() {
        assert!(allowed("http://example.com/foo/bar", &["example.com"]));
        assert!(allowed("http://example.com:80", &["example.com"]));
        assert!(allowed("https://example.com:8443", &["example.com"]));
        assert!(!allowed("http://foo.example.com", &["example.com"]));
        assert!(!allowed("http://example.com", &["foo.example.com"]));
    }

    #[test]
    fn ports_must_match_when_given() {
        assert!(allowed("http://example.com:80", &["example.com:80"]));
        assert!(allowed("http://example.com", &["example.com:80"]));
        assert!(!allowed("http://example.com:80", &["example.com:443"]));
        assert!(allowed("http://example.com:8080", &["*:8080"]));
        assert!(!allowed("http://example.com:8081", &["*:8080"]));
    }

    #[test]
    fn schemes_must_match_when_given() {
        assert!(allowed("http://example.com", &["http://example.com"]));
        assert!(!allowed("https://example.com", &["http://example.com"]));
    }

    #[test]
    fn only_the_wildcard_path_matches() {
        assert!(allowed("http://example.com/foo/bar.js", &["example.com/*"]));
        assert!(!allowed("http://other.com/foo/bar.js", &["example.com/*"]));
        assert!(!allowed(
            "http://example.com/foo/bar.js",
            &["example.com/foo/*"]
        ));
        assert!(!allowed(
            "http://example.com/foo/bar.js",
            &["example.com:80/foo/*"]
        ));
    }

    #[test]
    fn international_names_compare_in_ascii() {
        assert!(allowed("http://xn--mnchen-3ya.de/a.js", &["münchen.de"]));
        assert!(allowed("http://münchen.de/a.js", &["xn--mnchen-3ya.de"]));
        assert!(allowed("http://sub.münchen.de/a.js", &["*.münchen.de"]));
    }
}
