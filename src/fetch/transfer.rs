//! What every remote backend (HTTP, Sentry, S3, GCS) shares: bounded retries with
//! exponential backoff, and writing a response body to the destination file under the size
//! and streaming-time limits.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::progress::Progress;
use super::reserved_ip::RESERVED_ADDRESS_MSG;
use super::{Downloader, FetchConfig, too_large};
use crate::error::{CacheError, CacheResult};
use crate::telemetry::{self, DOWNLOAD_DURATION, DOWNLOADED_BYTES, DOWNLOADS};

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

/// Empties `dest`: a failed attempt leaves a partial body behind.
pub(super) async fn truncate(dest: &mut tokio::fs::File) -> CacheResult<()> {
    dest.rewind().await.map_err(CacheError::internal)?;
    dest.set_len(0).await.map_err(CacheError::internal)
}

/// Per-attempt body timeout for a body of `content_length` bytes, as upstream scales it.
pub(super) fn streaming_timeout(content_length: u64, per_gb: Duration) -> Duration {
    let gb = content_length as f64 / (1024.0 * 1024.0 * 1024.0);
    Duration::try_from_secs_f64(per_gb.as_secs_f64() * gb)
        .unwrap_or(Duration::MAX)
        .max(MIN_STREAMING_TIMEOUT)
}

/// Writes `body` to `dest`, never holding more than one chunk in memory. Refuses bodies over
/// `max_size`, early when the size is announced. Without an announced size only the caller's
/// overall download timeout bounds the body, as upstream.
pub(super) async fn write_body(
    body: impl Stream<Item = CacheResult<Bytes>>,
    content_length: Option<u64>,
    dest: &mut tokio::fs::File,
    config: &FetchConfig,
    max_size: u64,
    progress: &mut Progress,
) -> CacheResult<u64> {
    progress.set_total(content_length);
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
            dest.write_all(&chunk).await.map_err(CacheError::internal)?;
            progress.advance(chunk.len() as u64);
        }
        dest.flush().await.map_err(CacheError::internal)?;
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

/// Reads a small answer (a search page, a token) into memory: at most `cap` bytes, within
/// the streaming timeout's floor.
pub(super) async fn read_capped(
    downloader: &Downloader,
    response: reqwest::Response,
    cap: usize,
) -> CacheResult<Vec<u8>> {
    let timeout = streaming_timeout(0, downloader.config().streaming_timeout);
    let read = async {
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| downloader.reqwest_error(e))?;
            if body.len().saturating_add(chunk.len()) > cap {
                return Err(CacheError::DownloadError(format!(
                    "answer exceeds {cap} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| CacheError::Timeout(timeout))?
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
