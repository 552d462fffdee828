//! Function names for symbolicated JS frames: which of the names a source map offers
//! wins, as upstream (and the Sentry blog post "How we made JavaScript stack traces
//! awesome") decides it.

use symbolic::sourcemapcache::ScopeLookupResult;

/// Names that say nothing and would hide a better one.
const USELESS_NAMES: [&str; 3] = ["<anonymous>", "__webpack_require__", "__webpack_modules__"];

/// The name of the scope a token is in. Dart's compiler rewrites an async function
/// `f` into a scope named `$async$f` whose tokens still carry `f`: for those the
/// token's own name is the real one.
pub fn scope_name(
    scope: ScopeLookupResult<'_>,
    token_name: Option<&str>,
    frame_function: Option<&str>,
) -> String {
    match scope {
        ScopeLookupResult::NamedScope(name) => {
            if name.starts_with("$async$")
                && let Some(token_name) = token_name
            {
                token_name.to_owned()
            } else {
                name.to_string()
            }
        }
        ScopeLookupResult::AnonymousScope => "<anonymous>".to_owned(),
        ScopeLookupResult::Unknown => frame_function.unwrap_or("<unknown>").to_owned(),
    }
}

/// Picks a frame's function name: the scope's name unless it is useless, else the
/// name the caller's call site gave the callee, else the useless name if the frame had
/// none, else the frame's minified name.
pub fn function_for_token<'a>(
    frame_function: Option<&'a str>,
    scope_name: &'a str,
    callsite_name: Option<&'a str>,
) -> &'a str {
    if !USELESS_NAMES.contains(&scope_name) {
        return scope_name;
    }
    if let Some(name) = callsite_name
        && !name.is_empty()
    {
        return name;
    }
    frame_function.unwrap_or(scope_name)
}

/// Folds runs of the same name in a dotted path (all but the last part) into
/// `{name#count}`: `a.a.a.f` → `{a#3}.f`, so recursive object paths stay readable.
pub fn fold_function_name(name: &str) -> String {
    let mut parts: Vec<&str> = name.split('.').collect();
    let Some(tail) = parts.pop() else {
        return name.to_owned();
    };
    if parts.is_empty() {
        return name.to_owned();
    }
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for part in parts {
        match groups.last_mut() {
            Some((last, count)) if *last == part => *count += 1,
            _ => groups.push((part, 1)),
        }
    }
    let mut folded: Vec<String> = groups
        .into_iter()
        .map(|(part, count)| {
            if count == 1 {
                part.to_owned()
            } else {
                format!("{{{part}#{count}}}")
            }
        })
        .collect();
    folded.push(tail.to_owned());
    folded.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_useful_scope_name_wins() {
        assert_eq!(
            function_for_token(Some("a"), "lookedUp", Some("caller")),
            "lookedUp"
        );
    }

    #[test]
    fn a_useless_scope_name_yields_to_the_call_site() {
        assert_eq!(
            function_for_token(None, "__webpack_require__", Some("caller")),
            "caller"
        );
        assert_eq!(
            function_for_token(Some("a"), "<anonymous>", Some("caller")),
            "caller"
        );
    }

    #[test]
    fn without_call_site_the_minified_name_beats_a_useless_one() {
        assert_eq!(
            function_for_token(Some("a"), "__webpack_require__", None),
            "a"
        );
        assert_eq!(function_for_token(Some("a"), "<anonymous>", Some("")), "a");
        assert_eq!(
            function_for_token(None, "__webpack_require__", None),
            "__webpack_require__"
        );
    }

    #[test]
    fn dart_async_scopes_take_the_token_name() {
        let scope = ScopeLookupResult::NamedScope("$async$main");
        assert_eq!(scope_name(scope, Some("main"), Some("x")), "main");
        let scope = ScopeLookupResult::NamedScope("$async$main");
        assert_eq!(scope_name(scope, None, Some("x")), "$async$main");
        let scope = ScopeLookupResult::NamedScope("Store.load");
        assert_eq!(scope_name(scope, Some("other"), None), "Store.load");
    }

    #[test]
    fn unknown_scopes_fall_back_to_the_frame() {
        assert_eq!(scope_name(ScopeLookupResult::Unknown, None, Some("m")), "m");
        assert_eq!(
            scope_name(ScopeLookupResult::Unknown, None, None),
            "<unknown>"
        );
        assert_eq!(
            scope_name(ScopeLookupResult::AnonymousScope, Some("t"), Some("m")),
            "<anonymous>"
        );
    }

    #[test]
    fn repeated_path_parts_fold() {
        assert_eq!(fold_function_name("foo"), "foo");
        assert_eq!(fold_function_name("foo.foo"), "foo.foo");
        assert_eq!(fold_function_name("foo.foo.foo"), "{foo#2}.foo");
        assert_eq!(fold_function_name("bar.foo.foo.foo"), "bar.{foo#2}.foo");
        assert_eq!(
            fold_function_name("bar.bar.bar.foo.foo.onError"),
            "{bar#3}.{foo#2}.onError"
        );
        assert_eq!(
            fold_function_name("bar.foo.foo.bar.bar.onError"),
            "bar.{foo#2}.{bar#2}.onError"
        );
    }
}
