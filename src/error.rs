//! The one error kind for anything fetched or computed (`CacheError`), and `isolate`,
//! which turns a parser's panic into that one file being `malformed`.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use crate::telemetry::PARSER_PANICS;

// Isolation of parsers (below) is built on unwinding; an abort would take the process
// down with the first hostile file. Fuzz builds abort on purpose, to see the panic.
#[cfg(all(panic = "abort", not(fuzzing)))]
compile_error!("omnisym isolates parsers with catch_unwind and must be built with panic=unwind");

/// The one error kind for anything fetched or computed. Each variant maps to a module
/// or candidate status on the wire, and the whole enum is what a negative-cache
/// placeholder remembers, so it must stay cheap to clone and to serialise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("not found")]
    NotFound,
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    #[error("download was cancelled after {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("download failed: {0}")]
    DownloadError(String),
    /// Over the configured download size limit; kept apart from other download errors
    /// because it has its own module status (`too_large`).
    #[error("file too large: {0}")]
    TooLarge(String),
    #[error("malformed: {0}")]
    Malformed(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("internal error")]
    InternalError,
}

impl CacheError {
    /// Logs the detail of an unexpected failure and returns the opaque variant, so
    /// internals (paths, hosts) do not leak into responses.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal cache error");
        CacheError::InternalError
    }

    /// The variant's name in snake case, for metric labels (no detail: bounded).
    pub fn name(&self) -> &'static str {
        match self {
            CacheError::NotFound => "not_found",
            CacheError::PermissionDenied(_) => "permission_denied",
            CacheError::Timeout(_) => "timeout",
            CacheError::DownloadError(_) => "download_error",
            CacheError::TooLarge(_) => "too_large",
            CacheError::Malformed(_) => "malformed",
            CacheError::Unsupported(_) => "unsupported",
            CacheError::InternalError => "internal_error",
        }
    }
}

pub type CacheResult<T> = Result<T, CacheError>;

/// Runs a parse of untrusted bytes (a downloaded debug file, an upload, a cache file) so
/// that a panic inside it, in our code or in a dependency's, costs that one file: it
/// becomes `Malformed`, which callers cache negatively like any other malformed file.
///
/// `parse` must not hold a lock or leave shared state half-updated when it panics; the
/// panic is swallowed here, so nothing else would notice.
pub fn isolate<T>(what: &'static str, parse: impl FnOnce() -> CacheResult<T>) -> CacheResult<T> {
    std::panic::catch_unwind(AssertUnwindSafe(parse))
        .unwrap_or_else(|payload| Err(panicked(what, payload)))
}

/// The error for a parse that panicked with `payload` (from `catch_unwind`), logged and
/// counted. For callers that catch the panic of a future themselves.
pub fn panicked(what: &'static str, payload: Box<dyn std::any::Any + Send>) -> CacheError {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    tracing::error!(
        what,
        panic = message,
        "a parser panicked; the file is treated as malformed"
    );
    metrics::counter!(PARSER_PANICS, "what" => what).increment(1);
    CacheError::Malformed(format!("{what}: the parser failed"))
}

/// [`isolate`] on a blocking thread, for parses that take long enough to stall the
/// async workers.
pub async fn isolate_blocking<T: Send + 'static>(
    what: &'static str,
    parse: impl FnOnce() -> CacheResult<T> + Send + 'static,
) -> CacheResult<T> {
    tokio::task::spawn_blocking(move || isolate(what, parse))
        .await
        .unwrap_or_else(|join| Err(CacheError::internal(join)))
}

/// Test builds only: panics when `data` carries the marker of `stage`, so that tests
/// reach a parser that panics through the real server. Used only where no real input is
/// known to panic (the minidump walk: our fuzzers and rust-minidump's found none that
/// still does; a symbfile's reader and converter, `read` and `convert` in
/// `native::symbfile`, for which `fuzz/regressions` keeps none; a SymCache conversion,
/// `symcache`, of a file the lazy reader reads); the other stages are tested with the
/// fuzzers' inputs that do.
#[cfg(test)]
pub fn panic_if_marked(stage: &str, data: &[u8]) {
    let marker = format!("omnisym-test-panic:{stage}");
    if data.windows(marker.len()).any(|w| w == marker.as_bytes()) {
        panic!("test parser panicked at {stage}");
    }
}

/// Test builds only: sleeps `SLOW_MARKED` when `data` carries the slow marker of
/// `stage`, so that tests can see what happens while a conversion is still running
/// (`convert`), or once it has ended before the lazy reader opened (`open`). No real
/// file converts or opens slowly enough, on every machine, to stand in for it.
#[cfg(test)]
pub fn delay_if_marked(stage: &str, data: &[u8]) {
    let marker = format!("omnisym-test-slow:{stage}");
    if data.windows(marker.len()).any(|w| w == marker.as_bytes()) {
        std::thread::sleep(SLOW_MARKED);
    }
}

#[cfg(test)]
pub const SLOW_MARKED: std::time::Duration = std::time::Duration::from_secs(4);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_parse_is_malformed() {
        let result: CacheResult<()> = isolate("test parser", || panic!("index out of bounds"));
        assert_eq!(
            result,
            Err(CacheError::Malformed(
                "test parser: the parser failed".into()
            ))
        );
        let owned: CacheResult<()> = isolate("test parser", || panic!("{}", String::from("x")));
        assert!(matches!(owned, Err(CacheError::Malformed(_))));
        assert_eq!(isolate("test parser", || Ok(7)), Ok(7));
    }

    #[tokio::test]
    async fn a_panic_on_a_blocking_thread_is_malformed_too() {
        let result: CacheResult<u8> = isolate_blocking("test parser", || {
            let empty: &[u8] = &[];
            Ok(empty[3])
        })
        .await;
        assert!(matches!(result, Err(CacheError::Malformed(_))));
    }
}
