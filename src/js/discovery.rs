//! Finding a minified file's source map and debug id: the `SourceMap` / `X-SourceMap`
//! headers that came with the file, else its last `sourceMappingURL` comment (`//#`
//! or the old `//@`), resolved against the file's URL or decoded from a `data:` URL;
//! and its `//# debugId=` comment.

use std::fmt;

use symbolic::common::DebugId;
use symbolic::debuginfo::js;

use super::paths::join_paths;
use crate::error::{CacheError, CacheResult};

/// Where a minified file's source map is.
#[derive(Clone, PartialEq, Eq)]
pub enum SourceMapUrl {
    /// Inline, from a `data:` URL: the decoded map.
    Data(String),
    /// A URL (or path) to fetch, already joined onto the minified file's URL.
    Remote(String),
}

impl fmt::Debug for SourceMapUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // An inline map can be megabytes; it is never worth logging.
            SourceMapUrl::Data(_) => f.write_str("Data(..)"),
            SourceMapUrl::Remote(url) => f.debug_tuple("Remote").field(url).finish(),
        }
    }
}

impl SourceMapUrl {
    /// Reads a `sourceMappingURL` value found in (or sent with) the file at `base`.
    /// A `data:` URL is decoded (base64 or percent-encoded) and must be UTF-8; anything
    /// else is joined onto `base`.
    pub fn parse_with_prefix(base: &str, url: &str) -> CacheResult<Self> {
        if url.starts_with("data:") {
            let malformed = || CacheError::Malformed("invalid `data:` url".into());
            let data_url = data_url::DataUrl::process(url).map_err(|_| malformed())?;
            let (bytes, _fragment) = data_url.decode_to_vec().map_err(|_| malformed())?;
            let text = String::from_utf8(bytes).map_err(|_| malformed())?;
            Ok(SourceMapUrl::Data(text))
        } else {
            Ok(SourceMapUrl::Remote(join_paths(base, url)))
        }
    }

    /// The URL to report as `data.sourcemap`: inline maps have none.
    pub fn remote_url(&self) -> Option<&str> {
        match self {
            SourceMapUrl::Remote(url) => Some(url),
            SourceMapUrl::Data(_) => None,
        }
    }
}

/// The value of the `SourceMap` header, else of `X-SourceMap`; header names compare
/// case-insensitively.
pub fn sourcemap_header<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
) -> Option<&'a str> {
    let find = |name: &str| {
        headers
            .clone()
            .into_iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    };
    find("sourcemap").or_else(|| find("x-sourcemap"))
}

/// The last `sourceMappingURL` comment's value, without query and fragment.
pub fn sourcemap_comment(contents: &str) -> Option<&str> {
    js::discover_sourcemaps_location(contents)
}

/// The source map of the minified file at `abs_path`: the headers win over the
/// comment. An unreadable `data:` URL counts as no source map, as upstream has it.
pub fn resolve_sourcemap_url<'a>(
    abs_path: &str,
    headers: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    contents: &str,
) -> Option<SourceMapUrl> {
    let reference = sourcemap_header(headers).or_else(|| sourcemap_comment(contents))?;
    SourceMapUrl::parse_with_prefix(abs_path, reference).ok()
}

/// The debug id of the last `//# debugId=` comment, if it parses.
pub fn discover_debug_id(contents: &str) -> Option<DebugId> {
    js::discover_debug_id(contents)
}

/// The debug id a source map carries in `debug_id` (or the newer `debugId`).
pub fn sourcemap_debug_id(sourcemap: &str) -> Option<DebugId> {
    js::discover_sourcemap_embedded_debug_id(sourcemap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_HEADERS: [(&str, &str); 0] = [];

    #[test]
    fn the_last_comment_wins() {
        let js =
            "a();\n//# sourceMappingURL=first.js.map\nb();\n//# sourceMappingURL=second.js.map\n";
        assert_eq!(
            resolve_sourcemap_url("http://example.com/assets/app.js", NO_HEADERS, js),
            Some(SourceMapUrl::Remote(
                "http://example.com/assets/second.js.map".into()
            ))
        );
    }

    #[test]
    fn the_deprecated_at_form_counts() {
        let js = "a();\n//@ sourceMappingURL=old.js.map";
        assert_eq!(sourcemap_comment(js), Some("old.js.map"));
    }

    #[test]
    fn query_and_fragment_are_dropped_from_the_comment() {
        let js = "a();\n//# sourceMappingURL=app.js.map?v=3#x";
        assert_eq!(sourcemap_comment(js), Some("app.js.map"));
        assert_eq!(sourcemap_comment("no comment here"), None);
        // Not a comment: the marker must follow `//# `.
        assert_eq!(sourcemap_comment("var s = 'sourceMappingURL=x.map';"), None);
    }

    #[test]
    fn relative_and_absolute_references_resolve_against_the_file() {
        let resolve =
            |r: &str| SourceMapUrl::parse_with_prefix("https://cdn.example.com/js/app.js", r);
        assert_eq!(
            resolve("../maps/app.js.map"),
            Ok(SourceMapUrl::Remote(
                "https://cdn.example.com/maps/app.js.map".into()
            ))
        );
        assert_eq!(
            resolve("/app.js.map"),
            Ok(SourceMapUrl::Remote(
                "https://cdn.example.com/app.js.map".into()
            ))
        );
        assert_eq!(
            resolve("https://maps.example.com/app.js.map"),
            Ok(SourceMapUrl::Remote(
                "https://maps.example.com/app.js.map".into()
            ))
        );
        assert_eq!(
            SourceMapUrl::parse_with_prefix("/foo", "data"),
            Ok(SourceMapUrl::Remote("/data".into()))
        );
    }

    #[test]
    fn data_urls_decode_base64_and_percent_encoding() {
        let parse = |r: &str| SourceMapUrl::parse_with_prefix("/app.js", r);
        assert_eq!(parse("data:,foo"), Ok(SourceMapUrl::Data("foo".into())));
        assert_eq!(
            parse("data:,Hello%2C%20World%21"),
            Ok(SourceMapUrl::Data("Hello, World!".into()))
        );
        assert_eq!(
            parse("data:application/json;charset=utf-8;base64,SGVsbG8sIFdvcmxkIQ=="),
            Ok(SourceMapUrl::Data("Hello, World!".into()))
        );
        let malformed = Err(CacheError::Malformed("invalid `data:` url".into()));
        assert_eq!(parse("data:"), malformed);
        assert_eq!(parse("data:;base64,SGVsbG8sIFdvcmxkIQ="), malformed);
        // Valid base64 of bytes that are not UTF-8.
        assert_eq!(parse("data:;base64,//79"), malformed);
    }

    #[test]
    fn headers_beat_the_comment_and_ignore_case() {
        let js = "a();\n//# sourceMappingURL=from-comment.js.map";
        let headers = [("SoUrCeMaP", "from-header.js.map")];
        assert_eq!(
            resolve_sourcemap_url("app:///index.bundle", headers, js),
            Some(SourceMapUrl::Remote("app:///from-header.js.map".into()))
        );
        let legacy = [("X-SourceMap", "legacy.js.map")];
        assert_eq!(sourcemap_header(legacy), Some("legacy.js.map"));
        let both = [
            ("x-sourcemap", "legacy.js.map"),
            ("sourcemap", "new.js.map"),
        ];
        assert_eq!(sourcemap_header(both), Some("new.js.map"));
        assert_eq!(
            sourcemap_header([("content-type", "text/javascript")]),
            None
        );
    }

    #[test]
    fn an_unreadable_data_url_means_no_sourcemap() {
        let js = "a();\n//# sourceMappingURL=data:;base64,%%%";
        assert_eq!(resolve_sourcemap_url("/app.js", NO_HEADERS, js), None);
    }

    #[test]
    fn debug_ids_come_from_the_last_comment_and_from_maps() {
        let js =
            "a();\n//# debugId=5943c33d-70f5-499d-b4e1-9b5d5cac3781\n//# sourceMappingURL=a.map";
        assert_eq!(
            discover_debug_id(js),
            Some("5943c33d-70f5-499d-b4e1-9b5d5cac3781".parse().unwrap())
        );
        assert_eq!(discover_debug_id("//# debugId=not-an-id"), None);
        let map = r#"{"version":3,"sources":[],"mappings":"","debug_id":"5943c33d-70f5-499d-b4e1-9b5d5cac3781"}"#;
        assert_eq!(
            sourcemap_debug_id(map),
            Some("5943c33d-70f5-499d-b4e1-9b5d5cac3781".parse().unwrap())
        );
    }
}
