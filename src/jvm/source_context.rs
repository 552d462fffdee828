//! Source context for JVM frames: the lines around a remapped frame's line, from the
//! source bundles the request lists. JVM bundles are keyed by a path made from the class
//! (its package as directories) and the file name, because JVM frames carry no source
//! paths, only a class and at best a bare file name.

use std::borrow::Cow;

use symbolic::common::DebugId;

use super::interface::JvmFrame;

/// Where the sources come from: the source bundles of the request, fetched by the
/// caller. `path` is the bundle URL `source_path` derives (`~/com/example/Foo.jvm`).
pub trait SourceLookup {
    /// The text of the file `path` in the bundle `bundle`; `None` when the bundle could
    /// not be fetched or does not hold that file.
    fn source(&self, bundle: DebugId, path: &str) -> Option<Cow<'_, str>>;
}

impl<F> SourceLookup for F
where
    F: Fn(DebugId, &str) -> Option<String>,
{
    fn source(&self, bundle: DebugId, path: &str) -> Option<Cow<'_, str>> {
        self(bundle, path).map(Cow::Owned)
    }
}

/// No sources at all: a request without bundles, or a caller that skips source context.
pub struct NoSources;

impl SourceLookup for NoSources {
    fn source(&self, _bundle: DebugId, _path: &str) -> Option<Cow<'_, str>> {
        None
    }
}

/// Sets `frame`'s context from the first bundle (in request order) that holds its file
/// and the frame's line. A frame without a line gets none.
pub fn apply_source_context<S: SourceLookup + ?Sized>(
    frame: &mut JvmFrame,
    bundles: &[DebugId],
    sources: &S,
) {
    let Some(lineno) = frame.lineno.filter(|&line| line > 0) else {
        return;
    };
    let path = source_path(frame);
    for &bundle in bundles {
        let Some(text) = sources.source(bundle, &path) else {
            continue;
        };
        if let Some((pre, line, post)) = context_lines(&text, lineno as usize) {
            frame.pre_context = pre;
            frame.context_line = Some(line);
            frame.post_context = post;
            return;
        }
    }
}

/// The bundle URL of a frame's source file, as Sentry's tooling writes JVM bundles:
/// `~/` + the package as directories + the file's stem + `.jvm` (the real extension is
/// unknown: `.java`, `.kt`, ...).
///
/// A usable file name (one with an extension and no `$`) gives the stem, so a Kotlin
/// file holding several classes is found from any of them; otherwise the outer class
/// name stands in for the file name.
pub fn source_path(frame: &JvmFrame) -> String {
    let mut path = String::from("~/");
    match frame.abs_path.as_deref().and_then(file_stem) {
        Some(stem) => {
            if let Some((package, _)) = frame.module.rsplit_once('.') {
                push_as_dirs(&mut path, package);
                path.push('/');
            }
            path.push_str(stem);
        }
        None => {
            let outer_class = frame.module.split('$').next().unwrap_or_default();
            push_as_dirs(&mut path, outer_class);
        }
    }
    path.push_str(".jvm");
    path
}

/// `MainActivity.kt` → `MainActivity`; `None` for names the SDKs make up for missing
/// files (`SourceFile` has no extension) and for synthetic names with a `$`.
fn file_stem(file_name: &str) -> Option<&str> {
    if file_name.contains('$') {
        return None;
    }
    file_name.rsplit_once('.').map(|(stem, _)| stem)
}

fn push_as_dirs(path: &mut String, dotted: &str) {
    path.extend(dotted.chars().map(|c| if c == '.' { '/' } else { c }));
}

/// `(pre_context, context_line, post_context)` around the 1-based `lineno`, or `None`
/// when the source has no such line. JVM frames have no column, so long lines keep
/// their start, as upstream trims them for column 0.
fn context_lines(source: &str, lineno: usize) -> Option<(Vec<String>, String, Vec<String>)> {
    crate::lookup::context_lines(source, lineno, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(module: &str, abs_path: Option<&str>, lineno: Option<u32>) -> JvmFrame {
        JvmFrame {
            function: "run".into(),
            module: module.into(),
            abs_path: abs_path.map(Into::into),
            lineno,
            ..Default::default()
        }
    }

    #[test]
    fn path_from_package_and_file_name() {
        let cases = [
            (
                "com.example.shop.CheckoutActivity",
                Some("CheckoutActivity.kt"),
                "~/com/example/shop/CheckoutActivity.jvm",
            ),
            // Several classes in one Kotlin file: the file name wins over the class.
            (
                "com.example.shop.CheckoutActivity$Cart",
                Some("Checkout.kt"),
                "~/com/example/shop/Checkout.jvm",
            ),
            // No usable file name: the outer class stands in for it.
            (
                "com.example.shop.CheckoutActivity$Cart",
                None,
                "~/com/example/shop/CheckoutActivity.jvm",
            ),
            (
                "com.example.shop.CheckoutActivity$$ExternalSyntheticLambda2",
                Some("SourceFile"),
                "~/com/example/shop/CheckoutActivity.jvm",
            ),
            (
                "com.example.shop.Cart",
                Some("Cart$1.java"),
                "~/com/example/shop/Cart.jvm",
            ),
            // Classes in the root package.
            ("Launcher", Some("Launcher.java"), "~/Launcher.jvm"),
            ("Launcher$1", None, "~/Launcher.jvm"),
        ];
        for (module, abs_path, expected) in cases {
            assert_eq!(
                source_path(&frame(module, abs_path, Some(1))),
                expected,
                "{module} {abs_path:?}"
            );
        }
    }

    const SOURCE: &str = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12";

    fn lines(range: std::ops::RangeInclusive<usize>) -> Vec<String> {
        range.map(|n| format!("l{n}")).collect()
    }

    #[test]
    fn five_lines_around_the_line_where_there_are_five() {
        let (pre, line, post) = context_lines(SOURCE, 7).unwrap();
        assert_eq!(
            (pre, line.as_str(), post),
            (lines(2..=6), "l7", lines(8..=12))
        );

        let (pre, line, post) = context_lines(SOURCE, 2).unwrap();
        assert_eq!(
            (pre, line.as_str(), post),
            (lines(1..=1), "l2", lines(3..=7))
        );

        let (pre, line, post) = context_lines(SOURCE, 12).unwrap();
        assert_eq!((pre, line.as_str(), post), (lines(7..=11), "l12", vec![]));

        assert_eq!(context_lines(SOURCE, 13), None);
        assert_eq!(context_lines(SOURCE, 0), None);
    }

    #[test]
    fn long_lines_keep_their_start() {
        let short = "x".repeat(150);
        assert_eq!(context_lines(&short, 1).unwrap().1, short);
        let long = format!("{}{}", "a".repeat(139), "é".repeat(20));
        // The cut falls inside `é`; it moves back to the character boundary.
        let line = context_lines(&long, 1).unwrap().1;
        assert_eq!(line, format!("{} {{snip}}", "a".repeat(139)));
    }

    #[test]
    fn first_bundle_with_the_file_and_line_wins() {
        let first = DebugId::from_parts(uuid::Uuid::from_u128(1), 0);
        let second = DebugId::from_parts(uuid::Uuid::from_u128(2), 0);
        let third = DebugId::from_parts(uuid::Uuid::from_u128(3), 0);
        let sources = |bundle: DebugId, path: &str| -> Option<String> {
            assert_eq!(path, "~/com/example/Cart.jvm");
            match bundle {
                // Holds the file, but it is too short for the frame's line.
                b if b == first => Some("only one line".into()),
                b if b == second => Some(SOURCE.into()),
                _ => Some("never asked".into()),
            }
        };
        let mut f = frame("com.example.Cart", Some("Cart.java"), Some(3));
        apply_source_context(&mut f, &[first, second, third], &sources);
        assert_eq!(f.context_line.as_deref(), Some("l3"));
        assert_eq!(f.pre_context, lines(1..=2));
        assert_eq!(f.post_context, lines(4..=8));

        let mut without_line = frame("com.example.Cart", Some("Cart.java"), None);
        apply_source_context(&mut without_line, &[second], &sources);
        let mut line_zero = frame("com.example.Cart", Some("Cart.java"), Some(0));
        apply_source_context(&mut line_zero, &[second], &sources);
        for f in [without_line, line_zero] {
            assert_eq!(f.context_line, None);
            assert!(f.pre_context.is_empty() && f.post_context.is_empty());
        }
    }
}
