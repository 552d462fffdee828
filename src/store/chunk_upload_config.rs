//! `store.chunk_upload`: the bounds of sentry-cli's chunk upload (the chunk-upload
//! options the server announces, and what it enforces).

use std::time::Duration;

use serde::Deserialize;

use crate::units::{deserialize_duration, deserialize_limit, deserialize_size};

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct ChunkUploadConfig {
    /// Size of one chunk (sentry-cli cuts files into chunks of this size); a larger
    /// chunk, after gzip is undone, is refused (400).
    #[serde(deserialize_with = "deserialize_size")]
    pub chunk_size: u64,
    /// Chunks in one POST, at most.
    #[serde(deserialize_with = "deserialize_limit")]
    pub chunks_per_request: usize,
    /// Bytes of one chunk POST as sent (compressed), at most.
    #[serde(deserialize_with = "deserialize_size")]
    pub max_request_size: u64,
    /// Parallel chunk POSTs a client is told to send.
    pub concurrency: u8,
    /// Files named in one assemble request, at most.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_files_per_assemble: usize,
    /// Bytes of chunks held for files not yet assembled, together (more: 507). At
    /// least `chunk_size`; a file larger than this cannot be uploaded at all.
    #[serde(deserialize_with = "deserialize_size")]
    pub max_pending_bytes: u64,
    /// A chunk neither received nor named by an assemble request for this long belongs
    /// to an abandoned upload and is removed; an upload resumed within it keeps all of
    /// its chunks.
    #[serde(deserialize_with = "deserialize_duration")]
    pub chunk_max_age: Duration,
    /// How long an assemble request waits for the file to be joined, checked and
    /// published before it answers `assembling` (sentry-cli then asks again).
    #[serde(deserialize_with = "deserialize_duration")]
    pub assemble_wait: Duration,
}

impl Default for ChunkUploadConfig {
    fn default() -> Self {
        ChunkUploadConfig {
            // Sentry's own values (SENTRY_CHUNK_UPLOAD_BLOB_SIZE, MAX_CHUNKS_PER_REQUEST,
            // MAX_REQUEST_SIZE, MAX_CONCURRENCY), so sentry-cli behaves as it does there.
            chunk_size: 8 * 1024 * 1024,
            chunks_per_request: 64,
            max_request_size: 32 * 1024 * 1024,
            concurrency: 8,
            max_files_per_assemble: 1024,
            // Room for one file of the store's default max_file_size (15 GiB) and more.
            max_pending_bytes: 32 * 1024 * 1024 * 1024,
            chunk_max_age: Duration::from_secs(24 * 3600),
            assemble_wait: Duration::from_secs(60),
        }
    }
}

impl ChunkUploadConfig {
    /// Why these bounds cannot work, naming the key, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let key = |name: &str| format!("store.chunk_upload.{name}");
        if self.chunk_size == 0 {
            return Err(format!("{} must be at least 1 byte", key("chunk_size")));
        }
        if self.chunks_per_request == 0 || self.max_files_per_assemble == 0 {
            return Err(format!(
                "{} and {} must be at least 1",
                key("chunks_per_request"),
                key("max_files_per_assemble")
            ));
        }
        if self.concurrency == 0 {
            return Err(format!("{} must be at least 1", key("concurrency")));
        }
        if self.max_request_size < self.chunk_size {
            return Err(format!(
                "{} must be at least {} (one chunk per request)",
                key("max_request_size"),
                key("chunk_size")
            ));
        }
        if self.max_pending_bytes < self.chunk_size {
            return Err(format!(
                "{} must be at least {}",
                key("max_pending_bytes"),
                key("chunk_size")
            ));
        }
        if self.chunk_max_age.is_zero() {
            return Err(format!("{} must be longer than 0", key("chunk_max_age")));
        }
        Ok(())
    }
}
