//! Cache keys and scopes: what names an entry, and why a key can never name a path
//! outside `cache_dir` (only a digest of the request's data reaches the disk).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};

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
    fn dir_name(&self) -> String {
        let raw = self.as_str();
        let mut out = String::with_capacity(raw.len());
        for b in raw.bytes() {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
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
}
