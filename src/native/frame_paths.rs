//! The source paths of recently symbolicated addresses. A SymCache stores a frame's
//! path as three strings (compilation directory, directory, name) that symbolic joins
//! and cleans on every lookup; on a warm `/symbolicate` that is the most expensive
//! step, about 2,600 instructions per frame against 60 to copy a remembered path.
//!
//! The memo is a direct-mapped table of a fixed number of slots, as a CPU cache is:
//! bounded by construction, nothing to evict, and a collision only replaces the older
//! entry. Entries are keyed by the SymCache's process-unique id and the address, so an
//! entry can never answer for another file.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

/// The paths of one address's frames, innermost (inlined) first, as the SymCache lists
/// them; empty where a frame has no file.
pub type Paths = Arc<[Box<str>]>;

pub struct FramePaths {
    slots: Box<[Mutex<Option<Entry>>]>,
}

struct Entry {
    symcache: u64,
    addr: u64,
    paths: Paths,
}

impl FramePaths {
    /// A table of `slots` entries (rounded up to a power of two, at least one).
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1).next_power_of_two();
        FramePaths {
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
        }
    }

    fn slot(&self, symcache: u64, addr: u64) -> &Mutex<Option<Entry>> {
        let mut hasher = rustc_hash::FxHasher::default();
        (symcache, addr).hash(&mut hasher);
        // The high bits of an Fx hash are its best mixed.
        let index = (hasher.finish() >> 32) as usize & (self.slots.len() - 1);
        &self.slots[index]
    }

    pub fn get(&self, symcache: u64, addr: u64) -> Option<Paths> {
        let slot = self
            .slot(symcache, addr)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        slot.as_ref()
            .filter(|e| e.symcache == symcache && e.addr == addr)
            .map(|e| e.paths.clone())
    }

    pub fn put(&self, symcache: u64, addr: u64, paths: Paths) {
        let entry = Entry {
            symcache,
            addr,
            paths,
        };
        // The old entry, if any, is dropped after the lock is released.
        let _old = self
            .slot(symcache, addr)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Paths {
        names.iter().map(|n| Box::from(*n)).collect()
    }

    #[test]
    fn answers_only_for_the_same_symcache_and_address() {
        let memo = FramePaths::new(64);
        memo.put(1, 0x1000, paths(&["/src/a.c"]));
        assert_eq!(memo.get(1, 0x1000), Some(paths(&["/src/a.c"])));
        assert_eq!(memo.get(2, 0x1000), None, "another SymCache");
        assert_eq!(memo.get(1, 0x1004), None, "another address");
    }

    #[test]
    fn stays_at_its_size_whatever_is_put() {
        let memo = FramePaths::new(100);
        assert_eq!(memo.slots.len(), 128);
        for addr in 0..10_000u64 {
            memo.put(7, addr, paths(&["x"]));
        }
        let held = memo
            .slots
            .iter()
            .filter(|s| s.lock().unwrap().is_some())
            .count();
        assert!(held <= 128);
        // The latest put is always found: it replaced whatever was in its slot.
        assert_eq!(memo.get(7, 9_999), Some(paths(&["x"])));
        assert_eq!(FramePaths::new(0).slots.len(), 1);
    }
}
