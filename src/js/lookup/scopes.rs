//! Scope parses of minified files, started as soon as a file is read rather than when
//! its source map has been found too. Parsing a large bundle's syntax tree is the
//! longest step of a cold source map's first answer; finding (inflating) and decoding
//! the map can run beside it on the other core instead of before it.
//!
//! A parse is shared by every request that asks for the same file's scopes while it
//! runs or while one of them still holds it; an entry leaves the table with its last
//! holder, so the table holds at most the files of requests in flight. Scopes depend on
//! the minified text alone, so any map of that file may use them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::cache::{CacheKey, ConversionBudget, DerivedFormat, return_freed_heap};
use crate::error::isolate_blocking;
use crate::js::mapping::{DirectMap, Scopes};
use crate::js::sourcemap_cache::SourceMapCacheFormat;
use crate::js::text::SourceText;

/// Parses by the minified file's cache key.
#[derive(Clone, Default)]
pub(super) struct ScopeParses(Arc<Mutex<HashMap<CacheKey, Weak<ScopeParse>>>>);

/// Where a parse is.
#[derive(Clone)]
enum State {
    /// Waiting for its share of the conversion budget.
    Queued,
    /// Holding its share, so it finishes without waiting for anything else.
    Running,
    /// `None` when the parser panicked (the cache's build then says so) or the runtime
    /// went away.
    Done(Option<Arc<Scopes>>),
}

/// One file's parse, while anyone holds it.
pub(super) struct ScopeParse {
    key: CacheKey,
    parses: ScopeParses,
    state: watch::Receiver<State>,
}

impl ScopeParses {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Weak<ScopeParse>>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The parse of `minified` (whose cache key is `key`): the one running, or one
    /// started now on a blocking thread, within `budget` as conversions are. `started`
    /// labels a new parse in the metrics: `ahead` or `with_map`.
    pub(super) fn start_or_join(
        &self,
        key: &CacheKey,
        minified: &SourceText,
        budget: &Arc<ConversionBudget>,
        started: &'static str,
    ) -> Arc<ScopeParse> {
        let mut parses = self.lock();
        if let Some(parse) = parses.get(key).and_then(Weak::upgrade) {
            return parse;
        }
        let (tx, state) = watch::channel(State::Queued);
        let parse = Arc::new(ScopeParse {
            key: key.clone(),
            parses: self.clone(),
            state,
        });
        parses.insert(key.clone(), Arc::downgrade(&parse));
        drop(parses);
        metrics::counter!(crate::telemetry::SOURCEMAP_SCOPE_PARSES, "started" => started)
            .increment(1);
        let (budget, text) = (budget.clone(), minified.clone());
        let bytes = text.len();
        tokio::spawn(async move {
            // The tree is about 30 times the file's size; the map's share is taken by
            // whoever decodes it.
            let _permit = budget.acquire(bytes as u64).await;
            tx.send_replace(State::Running);
            let started = Instant::now();
            // A parser that panics drops `tx` as it unwinds: waiters then get `None`.
            let _ = isolate_blocking(SourceMapCacheFormat::KIND.name, move || {
                let scopes = Arc::new(DirectMap::scopes(text.as_str()));
                let used = Arc::downgrade(&scopes);
                tx.send_replace(State::Done(Some(scopes)));
                tracing::debug!(
                    bytes,
                    took_ms = started.elapsed().as_millis() as u64,
                    "minified file's scopes parsed"
                );
                hold_freed_heap_while_used(&tx, &used);
                return_freed_heap();
                Ok(())
            })
            .await;
        });
        parse
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// How long a parse's thread keeps the freed syntax tree's pages for an answer that
/// still uses its scopes, at most.
const HOLD_FREED_HEAP: Duration = Duration::from_secs(10);

/// Waits (on the parse's own thread, the only one that can give its heap back) until
/// nothing uses the scopes any more: no request can join the parse, and the direct
/// answer they went into has been served. Handing back a few hundred MiB of pages makes
/// the kernel interrupt the other core to flush its address translations; done at once,
/// it slows the very answer the parse is for by about 5 %.
fn hold_freed_heap_while_used(tx: &watch::Sender<State>, used: &Weak<Scopes>) {
    let since = Instant::now();
    while used.strong_count() > 0 && since.elapsed() < HOLD_FREED_HEAP {
        if tx.receiver_count() == 0 {
            // No handle is left, so no one joins any more: the channel lets go of its
            // copy, and the answers' copies are the last.
            tx.send_replace(State::Done(None));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl ScopeParse {
    /// Resolves once the parse holds its share of the budget: from then on waiting for
    /// its scopes waits for nothing but the parser, whatever the waiter holds.
    pub(super) async fn running(&self) {
        let mut state = self.state.clone();
        let _ = state.wait_for(|s| !matches!(s, State::Queued)).await;
    }

    /// The file's scopes; `None` when the parser did not finish.
    pub(super) async fn scopes(&self) -> Option<Arc<Scopes>> {
        let mut state = self.state.clone();
        let done = state.wait_for(|s| matches!(s, State::Done(_))).await;
        match done.as_deref() {
            Ok(State::Done(scopes)) => scopes.clone(),
            _ => None,
        }
    }
}

impl Drop for ScopeParse {
    fn drop(&mut self) {
        let mut parses = self.parses.lock();
        // A parse started for the key after this one lost its last holder stays.
        if parses.get(&self.key).is_some_and(|p| p.strong_count() == 0) {
            parses.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Scope;

    fn key(name: &str) -> CacheKey {
        CacheKey::new(Scope::Global, &["uri", name])
    }

    #[tokio::test]
    async fn one_parse_per_file_while_held_and_none_after() {
        let parses = ScopeParses::default();
        let budget = Arc::new(ConversionBudget::new(1 << 20));
        let text = SourceText::from("function outer(){return function inner(){}}".to_owned());
        let first = parses.start_or_join(&key("a.min.js"), &text, &budget, "with_map");
        let again = parses.start_or_join(&key("a.min.js"), &text, &budget, "with_map");
        assert!(Arc::ptr_eq(&first, &again), "a running parse is joined");
        let other = parses.start_or_join(&key("b.min.js"), &text, &budget, "with_map");
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(parses.len(), 2);

        let scopes = first.scopes().await.expect("the file parses");
        let ranges = |scopes: &Scopes| scopes.iter().map(|s| s.0.clone()).collect::<Vec<_>>();
        assert_eq!(scopes.len(), 2, "{scopes:?}");
        assert_eq!(ranges(&scopes), ranges(&DirectMap::scopes(text.as_str())));

        drop((first, again, other));
        assert_eq!(parses.len(), 0, "entries leave with their last holder");
    }

    #[tokio::test]
    async fn a_parse_waits_for_its_share_of_the_budget() {
        let parses = ScopeParses::default();
        let budget = Arc::new(ConversionBudget::new(64 * 1024));
        let held = budget.acquire(64 * 1024).await;
        let text = SourceText::from("function f(){}".to_owned());
        let parse = parses.start_or_join(&key("c.min.js"), &text, &budget, "with_map");
        let waited = tokio::time::timeout(std::time::Duration::from_millis(100), parse.running());
        assert!(
            waited.await.is_err(),
            "it runs only once the budget has room"
        );
        drop(held);
        parse.running().await;
        assert!(parse.scopes().await.is_some());
    }

    #[tokio::test]
    async fn the_parse_holds_its_share_until_its_scopes_are_let_go_of() {
        let parses = ScopeParses::default();
        let budget = Arc::new(ConversionBudget::new(64 * 1024));
        let text = SourceText::from("function f(){}".to_owned());
        let parse = parses.start_or_join(&key("e.min.js"), &text, &budget, "with_map");
        let scopes = parse.scopes().await.expect("the file parses");
        drop(parse);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            budget.available_kib() < 64,
            "the thread keeps the freed tree while an answer uses the scopes"
        );
        drop(scopes);
        let since = Instant::now();
        while budget.available_kib() < 64 {
            assert!(
                since.elapsed() < Duration::from_secs(2),
                "the share comes back once the scopes are let go of"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_file_that_does_not_parse_has_no_scopes_as_in_the_writer() {
        let parses = ScopeParses::default();
        let budget = Arc::new(ConversionBudget::new(1 << 20));
        let text = SourceText::from("function f( {".to_owned());
        let parse = parses.start_or_join(&key("d.min.js"), &text, &budget, "with_map");
        let scopes = parse.scopes().await.expect("a parse error is no panic");
        assert!(scopes.is_empty(), "{scopes:?}");
    }
}
