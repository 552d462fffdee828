//! Cache keys and scopes: what names an entry, and why a key can never name a path
//! outside `cache_dir` (only a digest of the request's data reaches the disk).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};

/// Bytes a scope's directory name keeps as they are (`A-Za-z0-9-_`); every other byte is
/// `%XX`, so no name is `.`, `..`, holds a separator, or starts with `~`.
const DIR_NAME_KEEPS: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The cache scope of a request. Files from public sources and everything a request
/// without a scope computes live in `Global`; a scoped request sees `Global` files and
/// its own scope's, never another scope's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    #[default]
    Global,
    Scoped(Arc<str>),
}

impl Scope {
    pub fn new(scope: &str) -> Self {
        if scope.is_empty() || scope == "global" {
            Scope::Global
        } else {
            Scope::Scoped(scope.into())
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Scope::Global => "global",
            Scope::Scoped(s) => s,
        }
    }

    /// A directory name for this scope that cannot escape its parent: only a safe
    /// alphabet is kept verbatim, the rest is percent-encoded, and over-long names are
    /// replaced by their hash behind `~`, a byte the encoding never leaves as it is, so
    /// no scope's name can be another's hashed form. A scope named "global" cannot
    /// collide with `Global` because `Scope::new` maps that name to `Global` itself.
    pub fn dir_name(&self) -> String {
        let raw = self.as_str();
        let out = utf8_percent_encode(raw, DIR_NAME_KEEPS).to_string();
        if out.len() > 100 {
            format!("~h-{}", hex::encode(Sha256::digest(raw.as_bytes())))
        } else {
            out
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(Scope::new(&s))
    }
}

/// Identifies one cache entry within a cache kind: the scope plus a digest of everything
/// that determines the content (source id, location, and for derived caches the key of
/// the file they were built from). The digest is what lands on disk, so request data
/// never becomes a path component.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    scope: Scope,
    digest: [u8; 32],
}

impl CacheKey {
    /// Builds a key from the parts that identify the content. Parts are length-prefixed
    /// so `("ab", "c")` and `("a", "bc")` differ.
    pub fn new(scope: Scope, parts: &[&str]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        CacheKey {
            scope,
            digest: hasher.finalize().into(),
        }
    }

    /// A key for something derived from the entry `self` names.
    pub fn derived(&self, what: &str) -> Self {
        Self::derived_from(&[self], what)
    }

    /// A key for something derived from the entries `parents` name, in that order. It is
    /// global only when every parent is: a file built from scoped input stays in scope.
    pub fn derived_from(parents: &[&CacheKey], what: &str) -> Self {
        let scope = parents
            .iter()
            .map(|p| &p.scope)
            .find(|s| **s != Scope::Global)
            .cloned()
            .unwrap_or_default();
        let hexes: Vec<String> = parents.iter().map(|p| hex::encode(p.digest)).collect();
        let mut parts: Vec<&str> = hexes.iter().map(String::as_str).collect();
        parts.push(what);
        CacheKey::new(scope, &parts)
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Path relative to a cache kind's version directory: `<scope>/<digest>`.
    pub fn relative_path(&self) -> PathBuf {
        let mut path = PathBuf::from(self.scope.dir_name());
        path.push(hex::encode(self.digest));
        path
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.scope, hex::encode(&self.digest[..8]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    #[test]
    fn scope_names_cannot_escape() {
        for evil in ["..", "../../etc", "a/b", "/abs", "C:\\x", "\0", "."] {
            let key = CacheKey::new(Scope::new(evil), &["x"]);
            let path = key.relative_path();
            assert!(
                path.components().all(|c| matches!(c, Component::Normal(_))),
                "{evil:?} -> {path:?}"
            );
            assert_eq!(path.components().count(), 2, "{evil:?} -> {path:?}");
        }
        let long = "x".repeat(500);
        assert!(Scope::new(&long).dir_name().len() < 100);
    }

    #[test]
    fn no_scope_is_named_like_another_scopes_hashed_form() {
        let long = Scope::new(&"x".repeat(500));
        let hashed = long.dir_name();
        let digest = &hashed[hashed.find("h-").unwrap() + 2..];
        for lookalike in [
            hashed.clone(),
            format!("h-{digest}"),
            format!("%7Eh-{digest}"),
        ] {
            let named = Scope::new(&lookalike);
            assert_ne!(named.dir_name(), hashed, "{lookalike}");
            assert_ne!(
                CacheKey::new(named, &["x"]).relative_path(),
                CacheKey::new(long.clone(), &["x"]).relative_path()
            );
        }
    }

    #[test]
    fn keys_differ_by_scope_and_parts() {
        let a = CacheKey::new(Scope::Global, &["ab", "c"]);
        let b = CacheKey::new(Scope::Global, &["a", "bc"]);
        let c = CacheKey::new(Scope::new("p1"), &["ab", "c"]);
        assert_ne!(a, b);
        assert_ne!(a.relative_path(), c.relative_path());
        assert_eq!(Scope::new("global"), Scope::Global);
        assert_ne!(a.derived("symcache"), a);
        // One parent: the key the single-file form always gave, so existing caches stay.
        assert_eq!(
            CacheKey::derived_from(&[&a], "symcache"),
            CacheKey::new(Scope::Global, &[&hex::encode(a.digest), "symcache"])
        );
        // Order matters, and a scoped parent makes the result scoped.
        assert_ne!(
            CacheKey::derived_from(&[&a, &b], "x"),
            CacheKey::derived_from(&[&b, &a], "x")
        );
        assert_eq!(CacheKey::derived_from(&[&a, &c], "x").scope(), c.scope());
    }

    /// Scope directory names are part of every cache file's path, so a change to them
    /// orphans the files already on disk: these pin them byte for byte (`A-Za-z0-9-_`
    /// kept, every other byte of the UTF-8 as `%XX` in upper case, names over 100 bytes
    /// hashed behind `~h-`).
    #[test]
    fn scope_directory_names_are_pinned() {
        let each_char: String = (0..=255u8)
            .map(|b| Scope::new(&char::from(b).to_string()).dir_name() + " ")
            .collect();
        assert_eq!(
            each_char,
            "\
             %00 %01 %02 %03 %04 %05 %06 %07 %08 %09 %0A %0B %0C %0D %0E %0F %10 %11 %12 \
             %13 %14 %15 %16 %17 %18 %19 %1A %1B %1C %1D %1E %1F %20 %21 %22 %23 %24 %25 \
             %26 %27 %28 %29 %2A %2B %2C - %2E %2F 0 1 2 3 4 5 6 7 8 9 %3A %3B %3C %3D \
             %3E %3F %40 A B C D E F G H I J K L M N O P Q R S T U V W X Y Z %5B %5C %5D \
             %5E _ %60 a b c d e f g h i j k l m n o p q r s t u v w x y z %7B %7C %7D \
             %7E %7F %C2%80 %C2%81 %C2%82 %C2%83 %C2%84 %C2%85 %C2%86 %C2%87 %C2%88 \
             %C2%89 %C2%8A %C2%8B %C2%8C %C2%8D %C2%8E %C2%8F %C2%90 %C2%91 %C2%92 \
             %C2%93 %C2%94 %C2%95 %C2%96 %C2%97 %C2%98 %C2%99 %C2%9A %C2%9B %C2%9C \
             %C2%9D %C2%9E %C2%9F %C2%A0 %C2%A1 %C2%A2 %C2%A3 %C2%A4 %C2%A5 %C2%A6 \
             %C2%A7 %C2%A8 %C2%A9 %C2%AA %C2%AB %C2%AC %C2%AD %C2%AE %C2%AF %C2%B0 \
             %C2%B1 %C2%B2 %C2%B3 %C2%B4 %C2%B5 %C2%B6 %C2%B7 %C2%B8 %C2%B9 %C2%BA \
             %C2%BB %C2%BC %C2%BD %C2%BE %C2%BF %C3%80 %C3%81 %C3%82 %C3%83 %C3%84 \
             %C3%85 %C3%86 %C3%87 %C3%88 %C3%89 %C3%8A %C3%8B %C3%8C %C3%8D %C3%8E \
             %C3%8F %C3%90 %C3%91 %C3%92 %C3%93 %C3%94 %C3%95 %C3%96 %C3%97 %C3%98 \
             %C3%99 %C3%9A %C3%9B %C3%9C %C3%9D %C3%9E %C3%9F %C3%A0 %C3%A1 %C3%A2 \
             %C3%A3 %C3%A4 %C3%A5 %C3%A6 %C3%A7 %C3%A8 %C3%A9 %C3%AA %C3%AB %C3%AC \
             %C3%AD %C3%AE %C3%AF %C3%B0 %C3%B1 %C3%B2 %C3%B3 %C3%B4 %C3%B5 %C3%B6 \
             %C3%B7 %C3%B8 %C3%B9 %C3%BA %C3%BB %C3%BC %C3%BD %C3%BE %C3%BF \
            "
        );
        let x = |n| "x".repeat(n);
        let e_acute = |n| "\u{e9}".repeat(n);
        for (scope, dir) in [
            ("/".to_owned(), "%2F"),
            ("..".to_owned(), "%2E%2E"),
            (".".to_owned(), "%2E"),
            ("%".to_owned(), "%25"),
            ("%2F".to_owned(), "%252F"),
            ("a/../b".to_owned(), "a%2F%2E%2E%2Fb"),
            ("C:\\x".to_owned(), "C%3A%5Cx"),
            ("".to_owned(), "global"),
            ("global".to_owned(), "global"),
            ("Global".to_owned(), "Global"),
            ("project-42_prod".to_owned(), "project-42_prod"),
            ("~h-abc".to_owned(), "%7Eh-abc"),
            (
                "\u{65e5}\u{672c}\u{8a9e}".to_owned(),
                "%E6%97%A5%E6%9C%AC%E8%AA%9E",
            ),
            ("\u{1f600}".to_owned(), "%F0%9F%98%80"),
            ("\u{202e}evil".to_owned(), "%E2%80%AEevil"),
            (e_acute(16), &"%C3%A9".repeat(16)),
            (
                e_acute(17),
                "~h-b9d7a28694bca22000fc3d6eaca87f311a5968993b343a1dd4adcdc027d66d0c",
            ),
            (x(100), &x(100)),
            (
                x(101),
                "~h-c675a2e604b0cd1229c036e3ce0c87422980a245e295bbc605a507a2299752db",
            ),
        ] {
            assert_eq!(Scope::new(&scope).dir_name(), dir, "{scope:?}");
        }
    }
}
