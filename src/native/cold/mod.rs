//! The cold path: a module whose debug file has no SymCache or CFI cache yet. The
//! request that finds it so starts the build in the background
//! (`ObjectDerived::fetch_or_start_building`) and, rather than wait for it, answers
//! straight from the downloaded file with a lazy reader that parses only what its
//! addresses need: symbols from DWARF (`dwarf.rs`), a PDB (`pdb.rs`) or Breakpad text
//! (`breakpad.rs`), opened by `open.rs` and held to the SymCache's answers
//! (`reader.rs`), and unwind rules from an ELF file's own CFI (`unwind.rs`). A file
//! without a reader waits for its build.
//!
//! [`answer_from`] is that choice, made in one place for all three callers: native
//! symbolication (symbols), and the minidump stack walker (unwind rules, and symbols for
//! its scan check). What differs between them is a parameter: which reader they open,
//! and whether a build that finished first is taken over the reader ([`Prefer`]).

use std::sync::Arc;

use crate::error::CacheResult;
use crate::lookup::{ObjectHandle, Progress, join_build};

mod breakpad;
#[cfg(test)]
mod differential;
#[cfg(test)]
mod differential_breakpad;
mod dwarf;
#[cfg(test)]
mod fixtures;
mod open;
mod pdb;
mod reader;
mod unwind;

pub use open::{budget_weight, open, open_within};
pub use reader::{LazyLocation, LazySymbolizer, OwnedLazySymbolizer, symcache_answer};
pub(super) use unwind::LazyUnwinder;

/// A lazy read parses only what its addresses need: a small part of the file, so it
/// takes this fraction of the file's size from the conversion budget (beside what it
/// holds in full: inflated sections, copied PDB streams).
pub const LAZY_READ_SHARE: u64 = 16;

/// What a module's lookups are answered from.
#[derive(Clone)]
pub enum AnswerFrom<C, R> {
    /// The derived cache: it existed, or the caller waited for its build.
    Cache(C),
    /// A lazy reader of the downloaded file, while the cache is built in the background.
    File(R),
}

/// What answers when the build has finished by the time the reader is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefer {
    /// The cache, for symbols: a symbol reader answers as the SymCache does, but each of
    /// its lookups parses debug info on a blocking thread (in symbolication under a
    /// share of the conversion budget too), so a SymCache that is ready is the cheaper
    /// answer.
    FinishedBuild,
    /// The reader, for unwind rules: the unwinder's lookups are cheap once it is open,
    /// and its rules are the CFI cache's but for a few deliberate differences (see
    /// `unwind.rs`), so a cold walk takes the file every time and never depends on
    /// which of the two finished first.
    File,
}

/// The one rule of the cold path. `started` is what `fetch_or_start_building` gave: a
/// ready cache is used; while the cache is being built, `open` is given the downloaded
/// file and its reader answers instead (unless `prefer` says a build that finished
/// meanwhile wins); without a reader the build is awaited, and its outcome, an error
/// included, is the answer.
pub async fn answer_from<C, R, Open, Opening>(
    started: CacheResult<Progress<C>>,
    open: Open,
    prefer: Prefer,
) -> CacheResult<AnswerFrom<C, R>>
where
    Open: FnOnce(Arc<ObjectHandle>) -> Opening,
    Opening: Future<Output = Option<R>>,
{
    let (object, build) = match started? {
        Progress::Ready(cache) => return Ok(AnswerFrom::Cache(cache)),
        Progress::Building { object, build } => (object, build),
    };
    match open(object).await {
        Some(reader) if prefer == Prefer::File || !build.is_finished() => {
            Ok(AnswerFrom::File(reader))
        }
        _ => join_build(build).await.map(AnswerFrom::Cache),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use symbolic::common::ByteView;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::error::CacheError;
    use crate::lookup::ObjectLimits;

    fn object() -> Arc<ObjectHandle> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/native/elf/crash.debug");
        let data = ByteView::open(path).unwrap();
        Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap())
    }

    /// A build that ends with `outcome` once `release` is sent.
    fn pending_build(
        outcome: CacheResult<&'static str>,
    ) -> (oneshot::Sender<()>, JoinHandle<CacheResult<&'static str>>) {
        let (release, released) = oneshot::channel();
        let build = tokio::spawn(async move {
            let _ = released.await;
            outcome
        });
        (release, build)
    }

    async fn finished_build(
        outcome: CacheResult<&'static str>,
    ) -> JoinHandle<CacheResult<&'static str>> {
        let build = tokio::spawn(async move { outcome });
        tokio::time::timeout(Duration::from_secs(30), async {
            while !build.is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("a ready build finishes");
        build
    }

    fn building(
        build: JoinHandle<CacheResult<&'static str>>,
    ) -> CacheResult<Progress<&'static str>> {
        Ok(Progress::Building {
            object: object(),
            build,
        })
    }

    async fn reader(_: Arc<ObjectHandle>) -> Option<&'static str> {
        Some("reader")
    }

    async fn unopened(_: Arc<ObjectHandle>) -> Option<&'static str> {
        panic!("no reader is opened for a ready cache or a failed lookup")
    }

    async fn no_reader(_: Arc<ObjectHandle>) -> Option<&'static str> {
        None
    }

    fn name(answer: CacheResult<AnswerFrom<&'static str, &'static str>>) -> String {
        match answer {
            Ok(AnswerFrom::Cache(cache)) => format!("cache {cache}"),
            Ok(AnswerFrom::File(reader)) => format!("file {reader}"),
            Err(err) => format!("error {err}"),
        }
    }

    #[tokio::test]
    async fn a_ready_cache_or_an_error_opens_no_reader() {
        for prefer in [Prefer::FinishedBuild, Prefer::File] {
            let ready = answer_from(Ok(Progress::Ready("built")), unopened, prefer).await;
            assert_eq!(name(ready), "cache built");
            let failed = answer_from(Err(CacheError::NotFound), unopened, prefer).await;
            assert_eq!(name(failed), "error not found");
        }
    }

    #[tokio::test]
    async fn while_the_build_runs_the_reader_answers() {
        for prefer in [Prefer::FinishedBuild, Prefer::File] {
            let (release, build) = pending_build(Ok("built"));
            let answer = answer_from(building(build), reader, prefer).await;
            assert_eq!(name(answer), "file reader");
            drop(release);
        }
    }

    #[tokio::test]
    async fn a_build_that_finished_first_wins_only_where_preferred() {
        let build = finished_build(Ok("built")).await;
        let answer = answer_from(building(build), reader, Prefer::FinishedBuild).await;
        assert_eq!(name(answer), "cache built");
        let build = finished_build(Ok("built")).await;
        let answer = answer_from(building(build), reader, Prefer::File).await;
        assert_eq!(name(answer), "file reader");
    }

    #[tokio::test]
    async fn without_a_reader_the_build_is_awaited_failure_included() {
        for prefer in [Prefer::FinishedBuild, Prefer::File] {
            let (release, build) = pending_build(Ok("built"));
            let answer = tokio::spawn(answer_from(building(build), no_reader, prefer));
            tokio::task::yield_now().await;
            release.send(()).unwrap();
            assert_eq!(name(answer.await.unwrap()), "cache built");
            let (release, build) = pending_build(Err(CacheError::Malformed("bad".into())));
            drop(release);
            let answer = answer_from(building(build), no_reader, prefer).await;
            assert!(matches!(answer, Err(CacheError::Malformed(_))));
        }
    }
}
