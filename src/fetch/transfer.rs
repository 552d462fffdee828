//! What every backend shares once the downloader has handed it a [`Transfer`]: the
//! destination, its size limit and the observer; and for the remote ones (HTTP, Sentry,
//! S3, GCS) bounded retries with exponential backoff under the overall download timeout,
//! and writing a response body under the size and streaming-time limits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::progress::{DownloadObserver, Progress};
use super::reserved_ip::RESERVED_ADDRESS_MSG;
use super::{FetchConfig, too_large};
use crate::error::{CacheError, CacheResult};
use crate::telemetry::{self, DOWNLOAD_DURATION, DOWNLOADED_BYTES, DOWNLOADS};

/// One file on its way to disk, as the downloader hands it to a backend: the backend
/// only moves bytes, and the limit and the observer were decided once, by the caller.
pub(super) struct Transfer<'a> {
    dest: &'a mut tokio::fs::File,
    max_size: u64,
    observer: Option<Arc<dyn DownloadObserver>>,
}

impl<'a> Transfer<'a> {
    /// Into `dest`, at most `max_size` bytes (the caller's cap, already within the
    /// configured limit).
    pub fn new(
        dest: &'a mut tokio::fs::File,
        max_size: u64,
        observer: Option<Arc<dyn DownloadObserver>>,
    ) -> Self {
        Transfer {
            dest,
            max_size,
            observer,
        }
    }

    /// Begins the transfer called `what` (observers show it, so it carries no
    /// credentials).
    pub fn start(self, what: &str) -> Running<'a> {
        Running {
            dest: self.dest,
            max_size: self.max_size,
            progress: Progress::start(self.observer, what),
        }
    }
}

/// A [`Transfer`] under way: what its attempts write through.
pub(super) struct Running<'a> {
    pub dest: &'a mut tokio::fs::File,
    pub max_size: u64,
    pub progress: Progress,
}

impl Running<'_> {
    /// Empties the destination for an attempt: a failed one leaves a partial body behind.
    pub async fn restart(&mut self) -> CacheResult<()> {
        self.dest.rewind().await.map_err(CacheError::internal)?;
        self.dest.set_len(0).await.map_err(CacheError::internal)?;
        self.progress.restart();
        Ok(())
    }

    /// Writes `body` to the destination, never holding more than one chunk in memory.
    /// Refuses bodies over the size limit, early when the size is announced. Without an
    /// announced size only the overall download timeout bounds the body, as upstream.
    pub async fn write_body(
        &mut self,
        body: impl Stream<Item = CacheResult<Bytes>>,
        content_length: Option<u64>,
        config: &FetchConfig,
    ) -> CacheResult<u64> {
        let max_size = self.max_size;
        self.progress.set_total(content_length);
        if let Some(len) = content_length
            && len > max_size
        {
            return Err(too_large(format!(
                "Content-Length {len} exceeds the limit of {max_size} bytes"
            )));
        }
        let copy = async {
            let mut body = std::pin::pin!(body);
            let mut written: u64 = 0;
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                // A body's length is the server's to choose: count without overflowing.
                written = written.saturating_add(chunk.len() as u64);
                if written > max_size {
                    return Err(too_large(format!(
                        "body exceeds the limit of {max_size} bytes"
                    )));
                }
                self.dest
                    .write_all(&chunk)
                    .await
                    .map_err(CacheError::internal)?;
                self.progress.advance(chunk.len() as u64);
            }
            self.dest.flush().await.map_err(CacheError::internal)?;
            Ok(written)
        };
        match content_length {
            Some(len) => {
                let timeout = streaming_timeout(len, config.streaming_timeout);
                tokio::time::timeout(timeout, copy)
                    .await
                    .map_err(|_| CacheError::Timeout(timeout))?
            }
            None => copy.await,
        }
    }

    /// Tells the observer how the transfer ended.
    pub fn finish(self, result: &CacheResult<u64>) {
        self.progress.finish(result);
    }
}

pub(super) const MAX_TRIES: u32 = 3;
/// First retry delay; doubled for each further try, so a struggling server gets room.
const RETRY_BASE_DELAY: Duration = Duration::from_millis(50);
/// Floor of the size-scaled streaming timeout, so small files are not cut off by latency.
const MIN_STREAMING_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether another attempt could plausibly succeed. Upstream retries everything but
/// not-found and permission errors; size and reserved-address refusals are deterministic
/// too, and a local write failure will not heal in milliseconds.
pub(super) fn is_retryable(err: &CacheError) -> bool {
    match err {
        CacheError::Timeout(_) => true,
        CacheError::DownloadError(msg) => msg != RESERVED_ADDRESS_MSG,
        _ => false,
    }
}

/// Decides after each attempt whether to try again, and waits before it. Used as
/// `loop { let result = attempt().await; if !retry.again(&result).await { break result } }`
/// (a plain loop rather than a closure-taking helper, so the futures stay `Send`).
pub(super) struct Retry<'a> {
    what: &'a str,
    tries: u32,
}

impl<'a> Retry<'a> {
    /// `what` names the transfer in logs and must not carry credentials.
    pub fn new(what: &'a str) -> Self {
        Retry { what, tries: 0 }
    }

    /// Whether `result` calls for another attempt; if so, after the backoff delay.
    pub async fn again<T>(&mut self, result: &CacheResult<T>) -> bool {
        self.tries = self.tries.saturating_add(1);
        match result {
            Err(err) if self.tries < MAX_TRIES && is_retryable(err) => {
                tracing::debug!(what = self.what, error = %err, tries = self.tries, "retrying");
                let factor = 2u32.saturating_pow(self.tries.saturating_sub(1));
                tokio::time::sleep(RETRY_BASE_DELAY.saturating_mul(factor)).await;
                true
            }
            _ => false,
        }
    }
}

/// Evaluates `$attempt` (an expression with `.await`s, evaluated anew for each try) until
/// it succeeds, fails for good or runs out of tries; the value is the last result.
macro_rules! retrying {
    ($what:expr, $attempt:expr) => {{
        let mut retry = $crate::fetch::transfer::Retry::new($what);
        loop {
            let result = $attempt;
            if !retry.again(&result).await {
                break result;
            }
        }
    }};
}
pub(super) use retrying;

/// Runs a remote transfer: `$attempt` (which writes through `$run`, a [`Running`]) until
/// it succeeds, fails for good or runs out of tries, each on an emptied destination, all
/// within `max_download_timeout`; then logs and reports how it ended. A macro for the
/// same reason as [`retrying!`].
macro_rules! with_retries {
    ($transfer:expr, $what:expr, $config:expr, |$run:ident| $attempt:expr) => {{
        let what: &str = $what;
        let mut $run = $transfer.start(what);
        let attempts = async {
            $crate::fetch::transfer::retrying!(what, {
                $run.restart().await?;
                $attempt
            })
        };
        let result = $crate::fetch::transfer::within_download_timeout($config, attempts).await;
        $crate::fetch::transfer::log_download(what, &result);
        $run.finish(&result);
        result
    }};
}
pub(super) use with_retries;

/// Counts a download of a file from a source of type `source_type` (or a crash file's
/// `storage_url`) that began at `started`: its outcome, its bytes and its duration.
pub fn record_download(source_type: &'static str, started: Instant, result: &CacheResult<u64>) {
    let outcome = match result {
        Ok(_) => "ok",
        Err(err) => err.name(),
    };
    metrics::counter!(DOWNLOADS, "source_type" => source_type, "outcome" => outcome).increment(1);
    if let Ok(bytes) = result {
        metrics::counter!(DOWNLOADED_BYTES, "source_type" => source_type).increment(*bytes);
    }
    let elapsed = started.elapsed();
    metrics::histogram!(DOWNLOAD_DURATION, "source_type" => source_type).record(elapsed);
    telemetry::note_download(result.as_ref().ok().copied(), elapsed);
}

/// The innermost error's text: the outer layers of SDK and client errors only say that
/// a request failed, and some of them embed the request's URL.
pub(super) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut root = err;
    while let Some(source) = root.source() {
        root = source;
    }
    root.to_string()
}

/// Logs how a download ended; `what` names it without credentials.
pub(super) fn log_download(what: &str, result: &CacheResult<u64>) {
    match result {
        Ok(bytes) => tracing::debug!(what, bytes, "downloaded"),
        Err(err) => tracing::debug!(what, error = %err, "download failed"),
    }
}

/// Per-attempt body timeout for a body of `content_length` bytes, as upstream scales it.
pub(super) fn streaming_timeout(content_length: u64, per_gb: Duration) -> Duration {
    let gb = content_length as f64 / (1024.0 * 1024.0 * 1024.0);
    Duration::try_from_secs_f64(per_gb.as_secs_f64() * gb)
        .unwrap_or(Duration::MAX)
        .max(MIN_STREAMING_TIMEOUT)
}

/// Runs a whole transfer, retries included, under `max_download_timeout`.
pub(super) async fn within_download_timeout<T>(
    config: &FetchConfig,
    transfer: impl Future<Output = CacheResult<T>>,
) -> CacheResult<T> {
    let max = config.max_download_timeout;
    tokio::time::timeout(max, transfer)
        .await
        .unwrap_or(Err(CacheError::Timeout(max)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_timeout_scales_with_size() {
        let per_gb = Duration::from_secs(30);
        let gb = 1024 * 1024 * 1024;
        assert_eq!(streaming_timeout(100, per_gb), MIN_STREAMING_TIMEOUT);
        assert_eq!(streaming_timeout(gb / 2, per_gb), per_gb / 2);
        assert_eq!(streaming_timeout(gb, per_gb), per_gb);
        assert_eq!(streaming_timeout(gb * 3 / 2, per_gb), per_gb.mul_f64(1.5));
        // Must not panic on absurd sizes or settings.
        assert_eq!(streaming_timeout(u64::MAX, Duration::MAX), Duration::MAX);
    }

    async fn run(mut attempt: impl FnMut(u32) -> CacheResult<u32>) -> (CacheResult<u32>, u32) {
        let mut retry = Retry::new("test");
        let mut calls = 0;
        loop {
            let result = attempt(calls);
            calls += 1;
            if !retry.again(&result).await {
                return (result, calls);
            }
        }
    }

    #[tokio::test]
    async fn retries_are_bounded_and_only_for_transient_errors() {
        let (result, calls) =
            run(|_| Err(CacheError::DownloadError("502 Bad Gateway".into()))).await;
        assert!(result.is_err());
        assert_eq!(calls, MAX_TRIES);

        let (result, calls) = run(|_| Err(CacheError::NotFound)).await;
        assert_eq!(result, Err(CacheError::NotFound));
        assert_eq!(calls, 1);

        let (result, calls) = run(|n| match n {
            0 => Err(CacheError::Timeout(Duration::from_secs(1))),
            n => Ok(n),
        })
        .await;
        assert_eq!((result, calls), (Ok(1), 2));

        let (result, calls) =
            run(|_| Err(CacheError::DownloadError(RESERVED_ADDRESS_MSG.into()))).await;
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
