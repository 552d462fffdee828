//! Retention, opt-in (`store.retention`): a periodic sweep removes files a better upload
//! superseded, and stored files older than the setting (with their `.meta`). Each sweep
//! looks at `store.max_sweep_files` files at most and the next one goes on after the
//! last it looked at, so a sweep's work is bounded however large the store. Without
//! `retention` nothing runs and nothing uploaded is ever removed. A directory store
//! only: a bucket's lifecycle rules do this there (documented).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{STATE, SUPERSEDED};
use crate::telemetry::STORE_RETENTION_REMOVED;

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub looked_at: usize,
    pub superseded: usize,
    pub expired: usize,
    /// Where the next sweep starts (after this path); `None`: from the beginning.
    pub resume_after: Option<PathBuf>,
}

/// One sweep of the directory store at `root`, as if the time were `now`.
pub fn sweep(
    root: &Path,
    retention: Duration,
    max_files: usize,
    resume_after: Option<&Path>,
    now: SystemTime,
) -> Swept {
    let mut swept = Swept::default();
    let state = root.join(STATE);
    let superseded = state.join(SUPERSEDED);
    let walk = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        // The state area holds staging and protocol state, not stored files; only its
        // superseded files are swept.
        .filter_entry(|e| {
            e.path() == state || !e.path().starts_with(&state) || e.path().starts_with(&superseded)
        });
    for entry in walk.filter_map(Result::ok) {
        if !entry.file_type().is_file() {
            continue;
        }
        let path = entry.path();
        if resume_after.is_some_and(|after| path <= after) {
            continue;
        }
        if swept.looked_at >= max_files {
            return swept;
        }
        swept.looked_at += 1;
        swept.resume_after = Some(path.to_owned());
        if path.starts_with(&superseded) {
            if std::fs::remove_file(path).is_ok() {
                swept.superseded += 1;
                metrics::counter!(STORE_RETENTION_REMOVED, "reason" => "superseded").increment(1);
            }
            continue;
        }
        // A `.meta` goes with its file, never on its own.
        if path.extension().is_some_and(|e| e == "meta") {
            continue;
        }
        let Some(modified) = entry.metadata().ok().and_then(|m| m.modified().ok()) else {
            continue;
        };
        if now.duration_since(modified).unwrap_or_default() >= retention
            && std::fs::remove_file(path).is_ok()
        {
            let _ = std::fs::remove_file(path.with_extension("meta"));
            swept.expired += 1;
            metrics::counter!(STORE_RETENTION_REMOVED, "reason" => "expired").increment(1);
            tracing::info!(path = %path.display(), "store retention removes an expired file");
        }
    }
    // The whole store was looked at: the next sweep starts over.
    swept.resume_after = None;
    swept
}

/// Runs [`sweep`] every `interval` on a blocking thread, for as long as the runtime
/// lives.
pub fn spawn(root: PathBuf, retention: Duration, interval: Duration, max_files: usize) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resume: Option<PathBuf> = None;
        loop {
            ticks.tick().await;
            let root = root.clone();
            let from = resume.clone();
            let swept = tokio::task::spawn_blocking(move || {
                sweep(
                    &root,
                    retention,
                    max_files,
                    from.as_deref(),
                    SystemTime::now(),
                )
            })
            .await;
            match swept {
                Ok(swept) => {
                    tracing::info!(
                        looked_at = swept.looked_at,
                        superseded = swept.superseded,
                        expired = swept.expired,
                        "store retention sweep"
                    );
                    resume = swept.resume_after;
                }
                Err(err) => tracing::error!(error = %err, "store retention sweep failed"),
            }
        }
    });
}
