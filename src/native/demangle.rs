//! Demangling with a bounded memo: the same few thousand symbols recur in every event.

use symbolic::common::{Language, Name};
use symbolic::demangle::{Demangle, DemangleOptions};

use crate::error::isolate;

/// Full signatures without return types, as upstream reports them.
const OPTIONS: DemangleOptions = DemangleOptions::complete().return_type(false);

#[derive(Clone)]
pub struct DemangleCache {
    // Seeded per process, as names come from clients, and several times faster than
    // the default SipHash on names of a few hundred bytes.
    cache: moka::sync::Cache<(String, Language), Option<String>, foldhash::fast::RandomState>,
}

impl DemangleCache {
    pub fn new(max_bytes: u64) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|k: &(String, Language), v: &Option<String>| {
                let len = k.0.len() + v.as_ref().map_or(0, String::len);
                u32::try_from(len).unwrap_or(u32::MAX)
            })
            .build_with_hasher(foldhash::fast::RandomState::default());
        DemangleCache { cache }
    }

    /// `None` when the name is not mangled in a scheme we know.
    pub fn demangle(&self, name: &Name<'_>) -> Option<String> {
        // Most native frames of C code carry plain names; they skip the memo, whose key
        // alone costs an allocation and a hash per frame.
        if !may_be_mangled(name) {
            return None;
        }
        let key = (name.as_str().to_owned(), name.language());
        if let Some(hit) = self.cache.get(&key) {
            return hit;
        }
        // Names come from requests and downloaded files; demanglers have panicked on
        // hostile input before. Such a name stays as it is (and is remembered that way).
        let demangled = isolate("demangler", || Ok(name.demangle(OPTIONS))).unwrap_or(None);
        self.cache.insert(key, demangled.clone());
        demangled
    }
}

/// Whether `name` could be mangled: C and Objective-C names never are, and a name of
/// unknown language only when it starts like one of the schemes symbolic detects
/// (Itanium C++, Rust v0, MSVC, Swift).
fn may_be_mangled(name: &Name<'_>) -> bool {
    match name.language() {
        Language::C | Language::ObjC => false,
        Language::Unknown => {
            const PREFIXES: &[&str] = &[
                "_Z", "__Z", "___Z", "_R", "?", "@?", "$s", "_$s", "$S", "_$S", "_T",
            ];
            let s = name.as_str();
            PREFIXES.iter().any(|p| s.starts_with(p))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust() {
        let cache = DemangleCache::new(1 << 20);
        assert_eq!(
            cache
                .demangle(&Name::from("_ZN2ns6Widget4pokeEi"))
                .as_deref(),
            Some("ns::Widget::poke(int)")
        );
        assert_eq!(
            cache
                .demangle(&Name::from(
                    "_ZN4core3fmt9Formatter3pad17h0123456789abcdefE"
                ))
                .as_deref(),
            Some("core::fmt::Formatter::pad")
        );
        assert_eq!(
            cache
                .demangle(&Name::from("?poke@Widget@ns@@QEAAHH@Z"))
                .as_deref(),
            Some("ns::Widget::poke(int)")
        );
    }

    #[test]
    fn plain_names_skip_the_memo_and_stay_as_they_are() {
        let cache = DemangleCache::new(1 << 20);
        assert_eq!(cache.demangle(&Name::from("compute_checksum")), None);
        let c = Name::new(
            "_Zfoo",
            symbolic::common::NameMangling::Unknown,
            Language::C,
        );
        assert_eq!(cache.demangle(&c), None);
        cache.cache.run_pending_tasks();
        assert_eq!(cache.cache.entry_count(), 0);
    }
}
