//! What a lookup in a SymCache found for an address, remembered per SymCache and
//! address: the inline chain's names (demangled once), source paths, lines and the outer
//! function's start. Warm events of one release hit the same few thousand addresses;
//! looking one up again means walking the SymCache's ranges, joining and cleaning its
//! path from three strings and demangling its names, about ten times what copying the
//! remembered frame costs.
//!
//! The memo is a direct-mapped table of a fixed number of slots, as a CPU cache is:
//! nothing to evict, and a collision only replaces the older entry. Entries are keyed
//! by the SymCache's process-unique id and the address, so an entry can never answer for
//! another file. What entries hold is bounded too, in bytes: a chain of long C++ names
//! does not grow the table past its budget, and one that alone would take more than
//! [`MAX_ENTRY_SHARE`] of it is looked up every time instead.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use symbolic::common::Language;

/// An address's functions, innermost (inlined) first, as the SymCache lists them.
pub type Chain = Arc<[Resolved]>;

/// One function of an inline chain.
#[derive(Debug, PartialEq)]
pub struct Resolved {
    /// The name as the SymCache has it.
    pub symbol: Box<str>,
    /// Demangled, when the name is mangled in a scheme symbolic knows.
    pub demangled: Option<Box<str>>,
    pub language: Language,
    pub entry_pc: u64,
    /// Empty when the SymCache names no file.
    pub abs_path: Box<str>,
    pub line: u32,
}

impl Resolved {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.symbol.len()
            + self.demangled.as_deref().map_or(0, str::len)
            + self.abs_path.len()
    }
}

/// The largest part of the budget one entry may take: a few pathological chains must
/// not push out the many ordinary ones.
const MAX_ENTRY_SHARE: usize = 64;

/// The most slots a table has: 16 Mi slots of a few words each is more than any process
/// symbolicates, and a mistyped setting must not take the memory of the table alone.
pub const MAX_SLOTS: usize = 1 << 24;

pub struct FrameMemo {
    slots: Box<[Mutex<Option<Entry>>]>,
    budget: usize,
    held: AtomicUsize,
}

struct Entry {
    symcache: u64,
    addr: u64,
    chain: Chain,
    bytes: usize,
}

impl FrameMemo {
    /// A table of `slots` entries (rounded up to a power of two, at least one and at most
    /// [`MAX_SLOTS`]) holding at most `budget` bytes of names and paths.
    pub fn new(slots: usize, budget: usize) -> Self {
        let slots = slots.clamp(1, MAX_SLOTS).next_power_of_two();
        FrameMemo {
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
            budget,
            held: AtomicUsize::new(0),
        }
    }

    fn slot(&self, symcache: u64, addr: u64) -> &Mutex<Option<Entry>> {
        // Keys are not chosen by clients in a way that matters: an address maps to one
        // slot of a bounded table whatever it is, so a fast unseeded hash fits.
        let mut hasher = rustc_hash::FxHasher::default();
        (symcache, addr).hash(&mut hasher);
        // The high bits of an Fx hash are its best mixed.
        let index = (hasher.finish() >> 32) as usize & (self.slots.len() - 1);
        &self.slots[index]
    }

    pub fn get(&self, symcache: u64, addr: u64) -> Option<Chain> {
        let slot = self
            .slot(symcache, addr)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        slot.as_ref()
            .filter(|e| e.symcache == symcache && e.addr == addr)
            .map(|e| e.chain.clone())
    }

    /// Remembers `chain` unless it would take the memo past its budget.
    pub fn put(&self, symcache: u64, addr: u64, chain: Chain) {
        let bytes = size_of::<Entry>() + chain.iter().map(Resolved::bytes).sum::<usize>();
        if bytes > self.budget / MAX_ENTRY_SHARE {
            return;
        }
        let mut slot = self
            .slot(symcache, addr)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let replaced = slot.as_ref().map_or(0, |e| e.bytes);
        // The slot's own share cannot change while its lock is held; others' can, so
        // the total is checked and changed in one step.
        let fits = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                let after = held - replaced + bytes;
                (after <= self.budget).then_some(after)
            })
            .is_ok();
        if !fits {
            return;
        }
        let old = slot.replace(Entry {
            symcache,
            addr,
            chain,
            bytes,
        });
        drop(slot);
        // The old entry is freed after the lock is released.
        drop(old);
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(paths: &[&str]) -> Chain {
        paths
            .iter()
            .map(|p| Resolved {
                symbol: "_ZN2ns1fEv".into(),
                demangled: Some("ns::f()".into()),
                language: Language::Cpp,
                entry_pc: 0x10,
                abs_path: (*p).into(),
                line: 7,
            })
            .collect()
    }

    #[test]
    fn answers_only_for_the_same_symcache_and_address() {
        let memo = FrameMemo::new(64, 1 << 20);
        memo.put(1, 0x1000, chain(&["/src/a.c"]));
        assert_eq!(memo.get(1, 0x1000).as_deref(), Some(&*chain(&["/src/a.c"])));
        assert!(memo.get(2, 0x1000).is_none(), "another SymCache");
        assert!(memo.get(1, 0x1004).is_none(), "another address");
    }

    #[test]
    fn stays_at_its_size_whatever_is_put() {
        let memo = FrameMemo::new(100, 1 << 20);
        assert_eq!(memo.slots.len(), 128);
        for addr in 0..10_000u64 {
            memo.put(7, addr, chain(&["x"]));
        }
        let held = memo
            .slots
            .iter()
            .filter(|s| s.lock().unwrap().is_some())
            .count();
        assert!(held <= 128);
        // The latest put is always found: it replaced whatever was in its slot.
        assert!(memo.get(7, 9_999).is_some());
        assert_eq!(FrameMemo::new(0, 1).slots.len(), 1);
    }

    #[test]
    fn holds_no_more_bytes_than_its_budget() {
        let budget = 64 * 1024;
        let memo = FrameMemo::new(4096, budget);
        let long = "/src/".repeat(100);
        for addr in 0..10_000u64 {
            memo.put(1, addr, chain(&[&long]));
            assert!(memo.held() <= budget, "{} at {addr}", memo.held());
        }
        assert!(
            memo.held() > budget / 2,
            "the budget is used: {}",
            memo.held()
        );
        // What the slots hold is what the memo counts.
        let counted: usize = memo
            .slots
            .iter()
            .filter_map(|s| s.lock().unwrap().as_ref().map(|e| e.bytes))
            .sum();
        assert_eq!(counted, memo.held());
    }

    #[test]
    fn a_chain_too_large_for_its_share_is_not_kept() {
        let memo = FrameMemo::new(64, 64 * 1024);
        memo.put(1, 1, chain(&[&"x".repeat(2048)]));
        assert!(memo.get(1, 1).is_none());
        memo.put(1, 1, chain(&["short"]));
        assert!(memo.get(1, 1).is_some());
    }
}
