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
use crate::types::AllObjectCandidates;

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
/// included, is the answer, and is recorded on the candidate it was built from among
/// `candidates` (the lookup's), so they say what the module says.
pub async fn answer_from<C, R, Open, Opening>(
    started: CacheResult<Progress<C>>,
    candidates: &mut AllObjectCandidates,
    open: Open,
    prefer: Prefer,
) -> CacheResult<AnswerFrom<C, R>>
where
    Open: FnOnce(Arc<ObjectHandle>) -> Opening,
    Opening: Future<Output = Option<R>>,
{
    let (object, build, candidate) = match started? {
        Progress::Ready(cache) => return Ok(AnswerFrom::Cache(cache)),
        Progress::Building {
            object,
            build,
            candidate,
        } => (object, build, candidate),
    };
    match open(object).await {
        Some(reader) if prefer == Prefer::File || !build.is_finished() => {
            Ok(AnswerFrom::File(reader))
        }
        _ => {
            let built = join_build(build).await;
            candidate.record(candidates, &built);
            built.map(AnswerFrom::Cache)
        }
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
    use crate::lookup::{ObjectLimits, ObjectPurpose, UsedCandidate};
    use crate::sources::SourceId;
    use crate::types::{ObjectCandidate, ObjectDownloadInfo, ObjectUseInfo};

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

    const LOCATION: &str = "crash.debug";

    fn building(
        build: JoinHandle<CacheResult<&'static str>>,
    ) -> CacheResult<Progress<&'static str>> {
        Ok(Progress::Building {
            object: object(),
            build,
            candidate: UsedCandidate::new(
                SourceId::new("local"),
                LOCATION.into(),
                ObjectPurpose::Debug,
            ),
        })
    }

    /// The candidates of a lookup that chose `LOCATION`, marked usable as a lookup
    /// marks a file it starts building from.
    fn candidates() -> AllObjectCandidates {
        AllObjectCandidates::from(vec![ObjectCandidate {
            source: SourceId::new("local"),
            location: LOCATION.into(),
            download: ObjectDownloadInfo::Ok {
                features: Default::default(),
            },
            unwind: ObjectUseInfo::None,
            debug: ObjectUseInfo::Ok,
        }])
    }

    fn debug_use(candidates: &AllObjectCandidates) -> ObjectUseInfo {
        candidates.iter().next().unwrap().debug.clone()
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
            let ready = answer_from(
                Ok(Progress::Ready("built")),
                &mut candidates(),
                unopened,
                prefer,
            )
            .await;
            assert_eq!(name(ready), "cache built");
            let failed = answer_from(
                Err(CacheError::NotFound),
                &mut candidates(),
                unopened,
                prefer,
            )
            .await;
            assert_eq!(name(failed), "error not found");
        }
    }

    #[tokio::test]
    async fn while_the_build_runs_the_reader_answers() {
        for prefer in [Prefer::FinishedBuild, Prefer::File] {
            let (release, build) = pending_build(Ok("built"));
            let answer = answer_from(building(build), &mut candidates(), reader, prefer).await;
            assert_eq!(name(answer), "file reader");
            drop(release);
        }
    }

    /// The failure of a build that finished first is the answer, and the candidate's.
    #[tokio::test]
    async fn a_failed_build_that_finished_first_is_recorded_on_its_candidate() {
        let build = finished_build(Err(CacheError::Malformed("bad".into()))).await;
        let mut listed = candidates();
        let answer = answer_from(building(build), &mut listed, reader, Prefer::FinishedBuild).await;
        assert!(matches!(answer, Err(CacheError::Malformed(_))));
        assert_eq!(debug_use(&listed), ObjectUseInfo::Malformed);
        // The reader answering, the file was usable, whatever the build does later.
        let (release, build) = pending_build(Err(CacheError::Malformed("bad".into())));
        let mut listed = candidates();
        let answer = answer_from(building(build), &mut listed, reader, Prefer::FinishedBuild).await;
        assert_eq!(name(answer), "file reader");
        assert_eq!(debug_use(&listed), ObjectUseInfo::Ok);
        drop(release);
    }

    #[tokio::test]
    async fn a_build_that_finished_first_wins_only_where_preferred() {
        let build = finished_build(Ok("built")).await;
        let answer = answer_from(
            building(build),
            &mut candidates(),
            reader,
            Prefer::FinishedBuild,
        )
        .await;
        assert_eq!(name(answer), "cache built");
        let build = finished_build(Ok("built")).await;
        let answer = answer_from(building(build), &mut candidates(), reader, Prefer::File).await;
        assert_eq!(name(answer), "file reader");
    }

    #[tokio::test]
    async fn without_a_reader_the_build_is_awaited_failure_included() {
        for prefer in [Prefer::FinishedBuild, Prefer::File] {
            let (release, build) = pending_build(Ok("built"));
            let answer = tokio::spawn(async move {
                answer_from(building(build), &mut candidates(), no_reader, prefer).await
            });
            tokio::task::yield_now().await;
            release.send(()).unwrap();
            assert_eq!(name(answer.await.unwrap()), "cache built");
            let (release, build) = pending_build(Err(CacheError::Malformed("bad".into())));
            drop(release);
            let mut listed = candidates();
            let answer = answer_from(building(build), &mut listed, no_reader, prefer).await;
            assert!(matches!(answer, Err(CacheError::Malformed(_))));
            assert_eq!(debug_use(&listed), ObjectUseInfo::Malformed);
        }
    }
}
