//! Watching transfers while they run. A [`DownloadObserver`] given to the
//! [`Downloader`](super::Downloader) hears when each transfer starts, as its bytes land
//! and how it ends, so a front end can show progress (the offline CLI does). The server
//! installs none; then tracking costs a branch per chunk and no allocation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::{CacheError, CacheResult};

/// A transfer as an observer sees it.
#[derive(Clone, Debug)]
pub struct DownloadState {
    /// Unique within the process, so an observer can tell concurrent transfers apart.
    pub id: u64,
    /// What is fetched: a URL without credentials, a bucket key or a path.
    pub name: String,
    pub started: Instant,
    /// Bytes the current attempt has written (a retry starts again from zero).
    pub bytes: u64,
    /// The size the source announced, once it has.
    pub total: Option<u64>,
}

/// How a transfer ended.
#[derive(Debug)]
pub enum DownloadOutcome<'a> {
    Done,
    Failed(&'a CacheError),
    /// Its caller stopped waiting (a request gave up, the process is shutting down).
    Abandoned,
}

/// Hears about every transfer of one [`Downloader`](super::Downloader). It is called on
/// the downloading task, for every chunk, so it has to be quick and must never block.
pub trait DownloadObserver: Send + Sync {
    fn started(&self, download: &DownloadState);
    fn progressed(&self, download: &DownloadState);
    fn finished(&self, download: &DownloadState, outcome: DownloadOutcome<'_>);
}

/// The tracking of one transfer, retries included; reports to the observer when there is
/// one.
pub(super) struct Progress {
    observer: Option<Arc<dyn DownloadObserver>>,
    state: DownloadState,
    finished: bool,
}

impl Progress {
    pub fn start(observer: Option<Arc<dyn DownloadObserver>>, name: &str) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let state = DownloadState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: match observer {
                Some(_) => name.to_owned(),
                None => String::new(),
            },
            started: Instant::now(),
            bytes: 0,
            total: None,
        };
        if let Some(observer) = &observer {
            observer.started(&state);
        }
        Progress {
            observer,
            state,
            finished: false,
        }
    }

    /// A new attempt: what the last one wrote has been thrown away.
    pub fn restart(&mut self) {
        self.state.bytes = 0;
        self.state.total = None;
    }

    pub fn set_total(&mut self, total: Option<u64>) {
        self.state.total = total;
    }

    pub fn advance(&mut self, bytes: u64) {
        self.state.bytes = self.state.bytes.saturating_add(bytes);
        if let Some(observer) = &self.observer {
            observer.progressed(&self.state);
        }
    }

    pub fn finish<T>(mut self, result: &CacheResult<T>) {
        self.finished = true;
        if let Some(observer) = &self.observer {
            let outcome = match result {
                Ok(_) => DownloadOutcome::Done,
                Err(err) => DownloadOutcome::Failed(err),
            };
            observer.finished(&self.state, outcome);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.finished
            && let Some(observer) = &self.observer
        {
            observer.finished(&self.state, DownloadOutcome::Abandoned);
        }
    }
}
