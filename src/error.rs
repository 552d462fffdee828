use std::time::Duration;

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
