//! Watching transfers while they run. Every transfer is listed in its downloader's
//! [`InFlight`] while it runs, with its bytes so far and its announced total (the
//! console shows them, and the `downloads.in_flight*` gauges sum them), so a download
//! of hours on a slow link is seen moving. A [`DownloadObserver`] given to the
//! [`Downloader`](super::Downloader) hears when each transfer starts, as its bytes land
//! and how it ends (the offline CLI draws bars from it). Per chunk, tracking costs two
//! atomic adds and a gauge update, no lock and no allocation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use metrics::Gauge;
use serde::Serialize;

use crate::error::{CacheError, CacheResult};
use crate::telemetry::{DOWNLOADS_IN_FLIGHT, DOWNLOADS_IN_FLIGHT_BYTES, DOWNLOADS_IN_FLIGHT_TOTAL};
use crate::units::rfc3339_millis as timestamp;

/// Transfers listed by [`InFlight::list`]: the console's table, not the tracking, is
/// bounded by it (every transfer holds a download slot, so they are bounded anyway).
const MAX_LISTED: usize = 200;

/// The transfers of one downloader running now.
#[derive(Default)]
pub struct InFlight {
    running: Mutex<HashMap<u64, Arc<Running>>>,
}

/// What [`InFlight`] keeps of one transfer; the counters move without its lock.
struct Running {
    name: String,
    started: SystemTime,
    bytes: AtomicU64,
    /// `u64::MAX` while the source has not announced a size.
    total: AtomicU64,
}

/// One running transfer as the console shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DownloadProgress {
    /// What is fetched: a URL without credentials, a bucket key or a path.
    pub name: String,
    pub started: String,
    /// Bytes of the file on disk so far (a resumed transfer counts what it kept).
    pub bytes: u64,
    /// The file's size, once the source has announced it.
    pub total: Option<u64>,
}

impl InFlight {
    /// The running transfers, the oldest first, at most [`MAX_LISTED`].
    pub fn list(&self) -> Vec<DownloadProgress> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let mut list: Vec<(SystemTime, DownloadProgress)> = running
            .values()
            .map(|r| {
                let total = r.total.load(Ordering::Relaxed);
                (
                    r.started,
                    DownloadProgress {
                        name: r.name.clone(),
                        started: timestamp(r.started),
                        bytes: r.bytes.load(Ordering::Relaxed),
                        total: (total != u64::MAX).then_some(total),
                    },
                )
            })
            .collect();
        drop(running);
        list.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        list.into_iter().take(MAX_LISTED).map(|(_, p)| p).collect()
    }
}

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

/// The tracking of one transfer, retries included: listed in its downloader's
/// [`InFlight`] and counted in the gauges until it ends, and reported to the observer
/// when there is one.
pub(super) struct Progress {
    observer: Option<Arc<dyn DownloadObserver>>,
    state: DownloadState,
    finished: bool,
    in_flight: Arc<InFlight>,
    entry: Arc<Running>,
    /// Handles got once, so that a chunk costs no registry lookup.
    bytes_gauge: Gauge,
    total_gauge: Gauge,
}

impl Progress {
    pub fn start(
        observer: Option<Arc<dyn DownloadObserver>>,
        in_flight: Arc<InFlight>,
        name: &str,
    ) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let state = DownloadState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_owned(),
            started: Instant::now(),
            bytes: 0,
            total: None,
        };
        if let Some(observer) = &observer {
            observer.started(&state);
        }
        let entry = Arc::new(Running {
            name: name.to_owned(),
            started: SystemTime::now(),
            bytes: AtomicU64::new(0),
            total: AtomicU64::new(u64::MAX),
        });
        in_flight
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(state.id, entry.clone());
        metrics::gauge!(DOWNLOADS_IN_FLIGHT).increment(1.0);
        Progress {
            observer,
            state,
            finished: false,
            in_flight,
            entry,
            bytes_gauge: metrics::gauge!(DOWNLOADS_IN_FLIGHT_BYTES),
            total_gauge: metrics::gauge!(DOWNLOADS_IN_FLIGHT_TOTAL),
        }
    }

    /// A new attempt that keeps the first `kept` bytes the last ones wrote (none unless
    /// it resumes).
    pub fn restart(&mut self, kept: u64) {
        let dropped = self.state.bytes.saturating_sub(kept);
        self.bytes_gauge.decrement(dropped as f64);
        self.state.bytes = self.state.bytes.min(kept);
        self.entry.bytes.store(self.state.bytes, Ordering::Relaxed);
        if kept == 0 {
            self.set_total(None);
        }
    }

    pub fn set_total(&mut self, total: Option<u64>) {
        let old = self.state.total.unwrap_or(0);
        let new = total.unwrap_or(0);
        self.total_gauge.increment(new as f64 - old as f64);
        self.state.total = total;
        self.entry
            .total
            .store(total.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn advance(&mut self, bytes: u64) {
        self.state.bytes = self.state.bytes.saturating_add(bytes);
        self.entry.bytes.store(self.state.bytes, Ordering::Relaxed);
        self.bytes_gauge.increment(bytes as f64);
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
        self.in_flight
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.state.id);
        metrics::gauge!(DOWNLOADS_IN_FLIGHT).decrement(1.0);
        self.bytes_gauge.decrement(self.state.bytes as f64);
        self.total_gauge
            .decrement(self.state.total.unwrap_or(0) as f64);
        if !self.finished
            && let Some(observer) = &self.observer
        {
            observer.finished(&self.state, DownloadOutcome::Abandoned);
        }
    }
}
