//! The URL and path rules of JS processing, as upstream (and Sentry before it) apply
//! them: joining a source map's `sources` onto its URL, the `filename` and `module` a
//! frame shows for webpack, turbopack and `app:///` paths, and the candidate URLs a
//! frame's `abs_path` is looked up under in artifact bundles and release files.

use std::sync::LazyLock;

use regex::Regex;

/// `webpack://<namespace>/./` (and `webpack-internal://`): the namespace is the
/// project's name, which says nothing about where the file is.
static WEBPACK_NAMESPACE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^webpack(-internal)?://[a-zA-Z0-9_\-@\.]+/\./").expect("valid regex")
});

/// Path prefixes and suffixes that are build artefacts rather than module names:
/// common asset folders, version numbers, hashes, and a trailing commit hash.
static CLEAN_MODULE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)
        ^(?:/|(?:
            (?:java)?scripts?|js|build|static|node_modules|bower_components|[_\.~].*?|
            v?(?:\d+\.)*\d+|
            [a-f0-9]{7,8}|
            [a-f0-9]{32}|
            [a-f0-9]{40}
        )/)+
        |(?:[-\.][a-f0-9]{7,}$)",
    )
    .expect("valid regex")
});

/// The `filename` of a webpack source: what the developer would call the file.
pub fn fixup_webpack_filename(filename: &str) -> String {
    if let Some((_, rest)) = filename.split_once("/~/") {
        format!("~/{rest}")
    } else if WEBPACK_NAMESPACE.is_match(filename) {
        WEBPACK_NAMESPACE.replace(filename, "./").into_owned()
    } else if let Some(rest) = filename.strip_prefix("webpack:///") {
        rest.to_owned()
    } else if let Some(rest) = filename.strip_prefix("webpack-internal:///") {
        rest.to_owned()
    } else {
        filename.to_owned()
    }
}

/// The `filename` of a turbopack source; `[project]/` is turbopack's name for the
/// project root.
pub fn fixup_turbopack_filename(filename: &str) -> String {
    if let Some((_, rest)) = filename.split_once("/~/") {
        format!("~/{rest}")
    } else if let Some(rest) = filename.strip_prefix("turbopack:///") {
        rest.strip_prefix("[project]/").unwrap_or(rest).to_owned()
    } else {
        filename.to_owned()
    }
}

/// A module name made up from a URL: the path without host, query, extension, `.min`
/// and the usual build prefixes, e.g. `http://a.com/js/v1.0/foo/bar.js` → `foo/bar`.
pub fn generate_module(abs_path: &str) -> String {
    let path = strip_hostname(abs_path);
    let mut path = path.split(['#', '?']).next().unwrap_or(path);

    if let Some((idx, ".")) = path.rmatch_indices(['.', '/']).next() {
        path = &path[..idx];
    }
    let path = path.strip_suffix(".min").unwrap_or(path);

    // Whatever follows a content hash directory is the module.
    let mut segments = path.split('/');
    while let Some(segment) = segments.next() {
        if segment.len() == 32
            || segment.len() == 40 && segment.chars().all(|c| c.is_ascii_hexdigit())
        {
            return segments.collect::<Vec<_>>().join("/");
        }
    }

    CLEAN_MODULE.replace_all(path, "").into_owned()
}

/// Joins `right` (a `sources` entry or a `sourceMappingURL`) onto `base` (the URL of
/// the file that names it). `~/` counts as the root of `base`'s host; a `right` with
/// its own scheme (or webpack's and turbopack's) stands alone. For http(s), `..` above
/// the root and `.` segments are dropped, as browsers do.
pub fn join_paths(base: &str, right: &str) -> String {
    if right.contains("://") || right.starts_with("webpack:") || right.starts_with("turbopack:") {
        return right.to_owned();
    }

    let (scheme, rest) = base.split_once("://").unwrap_or(("file", base));
    let right = right.strip_prefix('~').unwrap_or(right);

    if right.starts_with('/') {
        if scheme == "file" {
            return right.to_owned();
        }
        if let Some(right) = right.strip_prefix("//") {
            return format!("{scheme}://{right}");
        }
        let host = rest.split('/').next().unwrap_or(rest);
        return format!("{scheme}://{host}{right}");
    }

    let mut joined = String::new();
    let mut left = rest.split('/').peekable();
    if scheme != "file" {
        let host = left.next().unwrap_or_default();
        joined.push_str(scheme);
        joined.push_str("://");
        joined.push_str(host);
    } else if left.peek() == Some(&"") {
        left.next();
    }
    // The base's own file name.
    left.next_back();

    let mut segments: Vec<&str> = left.collect();
    let is_http = scheme == "http" || scheme == "https";
    let mut first = true;
    for segment in right.split('/') {
        if segment == ".." && (segments.pop().is_some() || is_http) {
            continue;
        }
        if segment == "." && (is_http || first) {
            continue;
        }
        first = false;
        segments.push(segment);
    }
    for segment in segments.into_iter().filter(|s| !s.is_empty()) {
        joined.push('/');
        joined.push_str(segment);
    }
    joined
}

/// The path after the host (or after a leading `~`), starting with `/`.
pub fn strip_hostname(path: &str) -> &str {
    if let Some(rest) = path.strip_prefix('~') {
        return rest;
    }
    if let Some((_, rest)) = path.split_once("://") {
        return rest.find('/').map(|i| &rest[i..]).unwrap_or(rest);
    }
    path
}

/// The URLs a file is looked up under in artifact bundles and among release files, in
/// order: the URL without fragment, then without query, then the same two with the
/// host replaced by `~` (Sentry's `ReleaseFile.normalize`).
pub fn release_file_candidate_urls(url: &str) -> impl Iterator<Item = String> {
    let url = url.split('#').next().unwrap_or(url);
    let relative = strip_hostname(url);
    [
        Some(url.to_owned()),
        url.split_once('?').map(|(u, _)| u.to_owned()),
        Some(format!("~{relative}")),
        relative.split_once('?').map(|(r, _)| format!("~{r}")),
    ]
    .into_iter()
    .flatten()
}

/// Suffixes Sentry's lookup ignores when it matches artifacts by file stem.
const FILE_SUFFIXES: &[&str] = &[
    ".min", ".js", ".map", ".cjs", ".mjs", ".ts", ".d", ".jsx", ".tsx",
];

/// The stem Sentry's artifact lookup matches files on (`url=` of the lookup query):
/// the path after the host, without query, fragment and JS suffixes, e.g.
/// `https://a.com/assets/app.min.js?v=1` → `/assets/app`.
pub fn extract_file_stem(path: &str) -> String {
    let path = strip_hostname(path);
    match path.rsplit_once('/') {
        Some((prefix, name)) => {
            let name = name.split('?').next().unwrap_or(name);
            let name = name.split('#').next().unwrap_or(name);
            format!("{prefix}/{}", trim_all_suffixes(name))
        }
        None => path.to_owned(),
    }
}

fn trim_all_suffixes(mut name: &str) -> &str {
    loop {
        let trimmed = FILE_SUFFIXES
            .iter()
            .fold(name, |n, suffix| n.trim_end_matches(suffix));
        if trimmed == name {
            return trimmed;
        }
        name = trimmed;
    }
}

/// Whether the frame's `filename`/`module` should come from the source's own path
/// (webpack and turbopack) or from its joined absolute URL; returns the frame's
/// `(filename, module)` for a source named `file_name` whose absolute path is
/// `abs_path`.
pub fn frame_filename_and_module(file_name: &str, abs_path: &str) -> (String, Option<String>) {
    let (filename, module) = if file_name.starts_with("webpack:") {
        let filename = fixup_webpack_filename(file_name);
        let module = generate_module(&filename);
        (filename, Some(module))
    } else if file_name.starts_with("turbopack:") {
        let filename = fixup_turbopack_filename(file_name);
        let module = generate_module(&filename);
        (filename, Some(module))
    } else {
        (file_name.to_owned(), None)
    };
    let module = module.or_else(|| {
        ["http:", "https:", "webpack:", "turbopack:", "app:"]
            .iter()
            .any(|scheme| abs_path.starts_with(scheme))
            .then(|| generate_module(abs_path))
    });
    (filename, module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_are_stripped_to_the_path() {
        assert_eq!(strip_hostname("/absolute/unix/path"), "/absolute/unix/path");
        assert_eq!(strip_hostname("~/with/tilde"), "/with/tilde");
        assert_eq!(strip_hostname("https://example.com/"), "/");
        assert_eq!(strip_hostname("https://example.com/a/b.js"), "/a/b.js");
        assert_eq!(strip_hostname("app:///bundle.js"), "/bundle.js");
    }

    #[test]
    fn candidate_urls_drop_fragment_then_query_then_host() {
        let all = |url| release_file_candidate_urls(url).collect::<Vec<_>>();
        assert_eq!(
            all("https://example.com/assets/bundle.min.js"),
            [
                "https://example.com/assets/bundle.min.js",
                "~/assets/bundle.min.js"
            ]
        );
        assert_eq!(
            all("https://example.com/assets/bundle.min.js?foo=1&bar=baz#frag"),
            [
                "https://example.com/assets/bundle.min.js?foo=1&bar=baz",
                "https://example.com/assets/bundle.min.js",
                "~/assets/bundle.min.js?foo=1&bar=baz",
                "~/assets/bundle.min.js",
            ]
        );
        assert_eq!(
            all("https://example.com/assets/bundle.min.js#frag"),
            [
                "https://example.com/assets/bundle.min.js",
                "~/assets/bundle.min.js"
            ]
        );
        assert_eq!(
            all("app:///_next/server/pages/_error.js"),
            [
                "app:///_next/server/pages/_error.js",
                "~/_next/server/pages/_error.js"
            ]
        );
        assert_eq!(
            all("/home/me/app.js"),
            ["/home/me/app.js", "~/home/me/app.js"]
        );
    }

    #[test]
    fn file_stems_drop_host_query_and_js_suffixes() {
        assert_eq!(
            extract_file_stem("https://example.com/bundle.js"),
            "/bundle"
        );
        assert_eq!(
            extract_file_stem("https://example.com/assets/bundle.min.js?foo=1#wat"),
            "/assets/bundle"
        );
        assert_eq!(
            extract_file_stem("https://example.com/a/types.d.ts.map"),
            "/a/types"
        );
        assert_eq!(
            extract_file_stem("app:///polyfills.e9f8f1606b76a9c9.js"),
            "/polyfills.e9f8f1606b76a9c9"
        );
        assert_eq!(extract_file_stem("noslash.js"), "noslash.js");
    }

    #[test]
    fn relative_urls_join_onto_the_base() {
        let base = "https://example.com/path/to/assets/bundle.min.js?foo=1#wat";
        assert_eq!(
            join_paths(base, "../maps/bundle.min.js.map"),
            "https://example.com/path/to/maps/bundle.min.js.map"
        );
        assert_eq!(join_paths(base, "/foo.js"), "https://example.com/foo.js");
        assert_eq!(join_paths(base, "~/foo.js"), "https://example.com/foo.js");
        assert_eq!(
            join_paths(base, ".././.././to/./maps/./b.js.map"),
            "https://example.com/path/to/maps/b.js.map"
        );
        assert_eq!(
            join_paths(base, "//cdn.example.com/x.js"),
            "https://cdn.example.com/x.js"
        );
        // Above the root of an http URL there is nothing left to pop.
        assert_eq!(
            join_paths("http://example.com/a.js", "../../b.js"),
            "http://example.com/b.js"
        );
        assert_eq!(
            join_paths("http://example.com/foo", "bar"),
            "http://example.com/bar"
        );
        assert_eq!(
            join_paths("http://example.com/foo/baz", "bar"),
            "http://example.com/foo/bar"
        );
        assert_eq!(
            join_paths("https://cdn.example.com/static//js/a.js", "a.js.map"),
            "https://cdn.example.com/static/js/a.js.map"
        );
    }

    #[test]
    fn file_paths_join_like_paths() {
        let base = "/home/foo/bar/baz.js";
        assert_eq!(
            join_paths(base, "../maps/b.js.map"),
            "/home/foo/maps/b.js.map"
        );
        assert_eq!(join_paths(base, "/foo.js"), "/foo.js");
        assert_eq!(join_paths(base, "~/foo.js"), "/foo.js");
        // Outside http, `..` beyond the start is kept: it is part of the name.
        assert_eq!(join_paths("a.js", "../b.js"), "/../b.js");
        assert_eq!(join_paths("/x/ö y/a.js", "~/0.js.map"), "/0.js.map");
    }

    #[test]
    fn urls_with_their_own_scheme_stand_alone() {
        let webpack = "webpack:///../node_modules/scheduler/index.js";
        assert_eq!(join_paths("http://example.com", webpack), webpack);
        let turbopack = "turbopack:///[project]/node_modules/foo/bar.js";
        assert_eq!(join_paths("http://example.com", turbopack), turbopack);
        assert_eq!(
            join_paths("app:///a.js.map", "webpack:/node_modules/core.js"),
            "webpack:/node_modules/core.js"
        );
        assert_eq!(
            join_paths("app:///_next/static/chunks/a.js.map", "./node_modules/b.js"),
            "app:///_next/static/chunks/node_modules/b.js"
        );
    }

    #[test]
    fn webpack_filenames_lose_their_scheme_and_namespace() {
        assert_eq!(
            fixup_webpack_filename("webpack:///../node_modules/@sentry/browser/esm/helpers.js"),
            "../node_modules/@sentry/browser/esm/helpers.js"
        );
        assert_eq!(
            fixup_webpack_filename("webpack:///./app/utils/error.tsx"),
            "./app/utils/error.tsx"
        );
        assert_eq!(
            fixup_webpack_filename("webpack://my-app/./src/App.jsx"),
            "./src/App.jsx"
        );
        assert_eq!(
            fixup_webpack_filename("webpack-internal:///./src/App.jsx"),
            "./src/App.jsx"
        );
        assert_eq!(
            fixup_webpack_filename("webpack:///x/~/lib/a.js"),
            "~/lib/a.js"
        );
        assert_eq!(fixup_webpack_filename("./plain.js"), "./plain.js");
    }

    #[test]
    fn turbopack_filenames_lose_scheme_and_project() {
        assert_eq!(
            fixup_turbopack_filename("turbopack:///[project]/app/page.tsx"),
            "app/page.tsx"
        );
        assert_eq!(
            fixup_turbopack_filename("turbopack:///app/utils/file.tsx"),
            "app/utils/file.tsx"
        );
        assert_eq!(
            fixup_turbopack_filename("turbopack:///[project]/~/src/Button.tsx"),
            "~/src/Button.tsx"
        );
        assert_eq!(
            fixup_turbopack_filename("webpack:///./src/file.tsx"),
            "webpack:///./src/file.tsx"
        );
    }

    #[test]
    fn modules_are_made_up_from_paths() {
        let cases = [
            ("http://example.com/foo.js", "foo"),
            ("http://example.com/js/foo/bar.js", "foo/bar"),
            ("http://example.com/javascript/foo/bar.js", "foo/bar"),
            ("http://example.com/v1.0.0/foo/bar.js", "foo/bar"),
            ("http://example.com/_baz/foo/bar.js", "foo/bar"),
            ("http://example.com/1/2/3/foo/bar.js", "foo/bar"),
            ("http://example.com/abcdef0/foo/bar.js", "foo/bar"),
            ("http://example.com/foo/bar.coffee", "foo/bar"),
            ("http://example.com/foo/bar.js?v=1234", "foo/bar"),
            ("../../foo/bar.ts", "foo/bar"),
            ("../../foo/bar", "foo/bar"),
            ("/foo/bar-7d6d00eae0ceccdc7ee689659585d95f.js", "foo/bar"),
            ("/node_modules/foo/bar.js", "foo/bar"),
            (
                "http://example.com/vendor.92cd589eca8235e7b373bf5ae94ebf898e3b949c.js",
                "vendor",
            ),
            (
                "https://example.com/libs/libs-20150417171659.min.js",
                "libs/libs",
            ),
            (
                "app:///example/92cd589eca8235e7b373bf5ae94ebf898e3b949c/vendor.js",
                "vendor",
            ),
            (
                "~/app/components/header/selector.jsx",
                "app/components/header/selector",
            ),
            ("./src/components/Widget.tsx", "src/components/Widget"),
        ];
        for (path, module) in cases {
            assert_eq!(generate_module(path), module, "{path}");
        }
    }

    #[test]
    fn frames_get_filename_and_module_by_kind_of_path() {
        assert_eq!(
            frame_filename_and_module("webpack:///./src/Widget.tsx", "webpack:///./src/Widget.tsx"),
            ("./src/Widget.tsx".into(), Some("src/Widget".into()))
        );
        assert_eq!(
            frame_filename_and_module("module.js", "app:///module.js"),
            ("module.js".into(), Some("module".into()))
        );
        assert_eq!(
            frame_filename_and_module("a.js", "http://example.com/static/a.js"),
            ("a.js".into(), Some("a".into()))
        );
        // Plain file paths (node) get no made-up module.
        assert_eq!(
            frame_filename_and_module("../src/a.js", "/srv/app/src/a.js"),
            ("../src/a.js".into(), None)
        );
    }
}
