//! What every backend shares once the downloader has handed it a [`Transfer`]: the
//! destination, its size limit and the observer; and for the remote ones (HTTP, Sentry,
//! S3, GCS) bounded retries with exponential backoff under the overall download timeout,
//! and writing a response body under the size and streaming-time limits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::progress::{DownloadObserver, InFlight, Progress};
use super::reserved_ip::RESERVED_ADDRESS_MSG;
use super::{FetchConfig, too_large};
use crate::error::{CacheError, CacheResult};
use crate::telemetry::{self, DOWNLOAD_DURATION, DOWNLOADED_BYTES, DOWNLOADS};
use crate::units::FOREVER;

/// One file on its way to disk, as the downloader hands it to a backend: the backend
/// only moves bytes, and the limit and the observer were decided once, by the caller.
pub(super) struct Transfer<'a> {
    dest: &'a mut tokio::fs::File,
    max_size: u64,
    observer: Option<Arc<dyn DownloadObserver>>,
    in_flight: Arc<InFlight>,
}

impl<'a> Transfer<'a> {
    /// Into `dest`, at most `max_size` bytes (the caller's cap, already within the
    /// configured limit), listed in `in_flight` while it runs.
    pub fn new(
        dest: &'a mut tokio::fs::File,
        max_size: u64,
        observer: Option<Arc<dyn DownloadObserver>>,
        in_flight: Arc<InFlight>,
    ) -> Self {
        Transfer {
            dest,
            max_size,
            observer,
            in_flight,
        }
    }

    /// Begins the transfer called `what` (observers and the console show it, so it
    /// carries no credentials).
    pub fn start(self, what: &str) -> Running<'a> {
        Running {
            dest: self.dest,
            max_size: self.max_size,
            progress: Progress::start(self.observer, self.in_flight, what),
            written: 0,
            validator: None,
            total: None,
        }
    }
}

/// A [`Transfer`] under way: what its attempts write through.
pub(super) struct Running<'a> {
    pub dest: &'a mut tokio::fs::File,
    pub max_size: u64,
    pub progress: Progress,
    /// Bytes of the file on disk, which the next attempt may keep.
    written: u64,
    /// What the source named the version of the bytes on disk by (a strong ETag, else
    /// Last-Modified), so that a resumed attempt asks for the rest of that version
    /// only; without one, nothing is resumed.
    validator: Option<String>,
    /// The whole file's size, as the answer that began it announced it.
    total: Option<u64>,
}

/// Where a resumed attempt starts, and the version of the file it must be.
pub(super) struct ResumePoint {
    pub offset: u64,
    pub validator: String,
    pub total: Option<u64>,
}

impl Running<'_> {
    /// Readies the destination for an attempt: a failed one leaves a partial body
    /// behind, which is kept when the source named its version, and emptied otherwise.
    pub async fn restart(&mut self) -> CacheResult<()> {
        if self.resume_point().is_some() {
            // Only whole chunks were written, so the file ends where `written` says;
            // set_len makes sure anyway.
            self.dest
                .set_len(self.written)
                .await
                .map_err(CacheError::internal)?;
            self.dest
                .seek(std::io::SeekFrom::Start(self.written))
                .await
                .map_err(CacheError::internal)?;
            self.progress.restart(self.written);
            return Ok(());
        }
        self.discard().await
    }

    /// Throws away what earlier attempts wrote: the next bytes are the file's first.
    pub async fn discard(&mut self) -> CacheResult<()> {
        self.dest.rewind().await.map_err(CacheError::internal)?;
        self.dest.set_len(0).await.map_err(CacheError::internal)?;
        self.written = 0;
        self.validator = None;
        self.total = None;
        self.progress.restart(0);
        Ok(())
    }

    /// Where the next attempt may resume: only past bytes that are on disk and whose
    /// version the source named.
    pub fn resume_point(&self) -> Option<ResumePoint> {
        let validator = self.validator.clone()?;
        (self.written > 0).then_some(ResumePoint {
            offset: self.written,
            validator,
            total: self.total,
        })
    }

    /// Names the version of the file whose first bytes are about to be written.
    pub fn set_validator(&mut self, validator: Option<String>) {
        self.validator = validator;
    }

    /// Bytes of the file on disk.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes `body` to the destination after what is on disk, never holding more than
    /// one chunk in memory. `content_length` is what this answer announces (the rest,
    /// when it resumes). Refuses bodies over the size limit and bodies the disk has no
    /// room for, before their first byte when the size is announced, and fails when no
    /// byte arrives for `max_download_stall`. Returns the bytes of the file on disk.
    pub async fn write_body(
        &mut self,
        body: impl Stream<Item = CacheResult<Bytes>>,
        content_length: Option<u64>,
        config: &FetchConfig,
    ) -> CacheResult<u64> {
        let max_size = self.max_size;
        let start = self.written;
        let total = content_length.map(|len| start.saturating_add(len));
        if start == 0 {
            self.total = total;
        }
        self.progress.set_total(total);
        if let Some(total) = total
            && total > max_size
        {
            return Err(too_large(format!(
                "Content-Length {total} exceeds the limit of {max_size} bytes"
            )));
        }
        if let Some(len) = content_length {
            ensure_disk_room(self.dest, len, config.download_disk_margin)?;
        }
        let stall = config.max_download_stall;
        let copy = async {
            let mut body = std::pin::pin!(body);
            loop {
                let chunk = match tokio::time::timeout(stall, body.next()).await {
                    Err(_) => return Err(stalled(stall)),
                    Ok(None) => break,
                    Ok(Some(chunk)) => chunk?,
                };
                // A body's length is the server's to choose: count without overflowing.
                let after = self.written.saturating_add(chunk.len() as u64);
                if after > max_size {
                    return Err(too_large(format!(
                        "body exceeds the limit of {max_size} bytes"
                    )));
                }
                self.dest
                    .write_all(&chunk)
                    .await
                    .map_err(CacheError::internal)?;
                self.written = after;
                self.progress.advance(chunk.len() as u64);
            }
            self.dest.flush().await.map_err(CacheError::internal)?;
            Ok(self.written)
        };
        match content_length {
            Some(len) if config.streaming_timeout < FOREVER => {
                let timeout = streaming_timeout(len, config.streaming_timeout);
                tokio::time::timeout(timeout, copy)
                    .await
                    .map_err(|_| CacheError::Timeout(timeout))?
            }
            _ => copy.await,
        }
    }

    /// Tells the observer how the transfer ended.
    pub fn finish(self, result: &CacheResult<u64>) {
        self.progress.finish(result);
    }
}

/// The error of a body that brought no byte for `stall`.
fn stalled(stall: Duration) -> CacheError {
    CacheError::DownloadError(format!(
        "{STALLED_MSG} for {}",
        humantime::format_duration(stall)
    ))
}

/// Refuses a body of `len` bytes that would leave less than `margin` (at most a 20th of
/// the disk) free on the disk `dest` is on. A disk that cannot be asked is not refused:
/// the write's own error still stops the download.
pub(super) fn ensure_disk_room(dest: &tokio::fs::File, len: u64, margin: u64) -> CacheResult<()> {
    let stat = match rustix::fs::fstatvfs(dest) {
        Ok(stat) => stat,
        Err(err) => {
            tracing::debug!(error = %err, "cannot ask the download disk for its free space");
            return Ok(());
        }
    };
    let available = stat.f_bavail.saturating_mul(stat.f_frsize);
    let margin = margin.min(stat.f_blocks.saturating_mul(stat.f_frsize) / 20);
    if len.saturating_add(margin) > available {
        return Err(CacheError::DownloadError(format!(
            "{NO_DISK_SPACE_MSG}: the file's {len} bytes and a margin of {margin} bytes \
             need more than the {available} bytes free"
        )));
    }
    Ok(())
}

pub(super) const MAX_TRIES: u32 = 3;
/// Attempts that end early but keep what they brought (a resumed download) do not
/// count as tries, up to this many: a link that drops now and then still brings a big
/// file home, and one that drops after every few bytes still ends.
const MAX_RESUMES: u32 = 20;
/// The error of a download that brought no byte for `max_download_stall`.
pub(super) const STALLED_MSG: &str = "no data arrived";
/// The error of a download the disk has no room for: not retried at once.
pub(super) const NO_DISK_SPACE_MSG: &str = "not enough free disk space for the download";
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
        CacheError::DownloadError(msg) => {
            msg != RESERVED_ADDRESS_MSG && !msg.starts_with(NO_DISK_SPACE_MSG)
        }
        _ => false,
    }
}

/// Decides after each attempt whether to try again, and waits before it. Used as
/// `loop { let result = attempt().await; if !retry.again(&result).await { break result } }`
/// (a plain loop rather than a closure-taking helper, so the futures stay `Send`).
pub(super) struct Retry<'a> {
    what: &'a str,
    tries: u32,
    resumes: u32,
    /// Whether the attempt that just ended kept bytes for the next.
    kept: bool,
}

impl<'a> Retry<'a> {
    /// `what` names the transfer in logs and must not carry credentials.
    pub fn new(what: &'a str) -> Self {
        Retry {
            what,
            tries: 0,
            resumes: 0,
            kept: false,
        }
    }

    /// The attempt that just ended kept bytes the next one resumes after: unless there
    /// were many such, it does not count as a try.
    pub fn progressed(&mut self) {
        self.kept = true;
    }

    /// Whether `result` calls for another attempt; if so, after the backoff delay.
    pub async fn again<T>(&mut self, result: &CacheResult<T>) -> bool {
        if std::mem::take(&mut self.kept) && self.resumes < MAX_RESUMES {
            self.resumes += 1;
        } else {
            self.tries = self.tries.saturating_add(1);
        }
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
/// it succeeds, fails for good or runs out of tries, each on an emptied destination or
/// after the bytes a resumable attempt kept, all within `max_download_timeout`; then
/// logs and reports how it ended. A macro for the same reason as [`retrying!`].
macro_rules! with_retries {
    ($transfer:expr, $what:expr, $config:expr, |$run:ident| $attempt:expr) => {{
        let what: &str = $what;
        let mut $run = $transfer.start(what);
        let attempts = async {
            let mut retry = $crate::fetch::transfer::Retry::new(what);
            loop {
                $run.restart().await?;
                let kept = $run.written();
                let result = $attempt;
                if result.is_err() && $run.resume_point().is_some_and(|p| p.offset > kept) {
                    retry.progressed();
                }
                if !retry.again(&result).await {
                    break result;
                }
            }
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
    if max >= FOREVER {
        return transfer.await;
    }
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
    async fn attempts_that_kept_bytes_are_not_counted_up_to_a_bound() {
        let mut retry = Retry::new("test");
        let failed = Err::<(), _>(CacheError::DownloadError("connection reset".into()));
        let mut attempts = 0;
        loop {
            attempts += 1;
            retry.progressed();
            if !retry.again(&failed).await {
                break;
            }
        }
        assert_eq!(attempts, MAX_RESUMES + MAX_TRIES);
        let disk = CacheError::DownloadError(format!("{NO_DISK_SPACE_MSG}: 1 byte"));
        assert!(!is_retryable(&disk));
        assert!(is_retryable(&stalled(Duration::from_secs(1))));
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
