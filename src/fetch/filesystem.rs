//! Copies from filesystem sources (local symbol directories, mostly for tests and
//! on-premise mirrors).

use std::io::ErrorKind;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::progress::Progress;
use super::{Downloader, too_large};
use crate::error::{CacheError, CacheResult};

const COPY_BUF: usize = 64 * 1024;

/// Error details stay generic: the path is the server's own layout, not the requester's.
fn open_error(err: std::io::Error) -> CacheError {
    match err.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::IsADirectory => {
            CacheError::NotFound
        }
        ErrorKind::PermissionDenied => {
            CacheError::PermissionDenied("filesystem permission denied".to_owned())
        }
        _ => CacheError::DownloadError(format!("failed to read source file: {}", err.kind())),
    }
}

impl Downloader {
    /// Copies the local file `src` into `dest`, truncating `dest` first. A missing path (or
    /// a directory) is `NotFound`, an unreadable one `PermissionDenied`. The size limit
    /// applies as for HTTP downloads. Returns the number of bytes copied.
    pub async fn copy_file(&self, src: &Path, dest: &mut tokio::fs::File) -> CacheResult<u64> {
        tracing::debug!(path = %src.display(), "copying from filesystem source");
        // A source directory may be a network mount, where a big file takes a while too.
        let mut progress = Progress::start(self, &src.display().to_string());
        let result = self.copy(src, dest, &mut progress).await;
        progress.finish(&result);
        result
    }

    async fn copy(
        &self,
        src: &Path,
        dest: &mut tokio::fs::File,
        progress: &mut Progress,
    ) -> CacheResult<u64> {
        let max_size = self.inner.config.max_download_size;

        let mut file = tokio::fs::File::open(src).await.map_err(open_error)?;
        let metadata = file.metadata().await.map_err(open_error)?;
        // Opening a directory succeeds on Unix; the read would then fail with a less
        // useful error.
        if !metadata.is_file() {
            return Err(CacheError::NotFound);
        }
        if metadata.len() > max_size {
            return Err(too_large(format!(
                "file of {} bytes exceeds the limit of {max_size} bytes",
                metadata.len()
            )));
        }

        progress.set_total(Some(metadata.len()));
        dest.rewind().await.map_err(CacheError::internal)?;
        dest.set_len(0).await.map_err(CacheError::internal)?;

        // Counted while copying too: the file may grow after the metadata check.
        let mut buf = vec![0u8; COPY_BUF];
        let mut copied: u64 = 0;
        loop {
            let n = file.read(&mut buf).await.map_err(open_error)?;
            if n == 0 {
                break;
            }
            copied = copied.saturating_add(n as u64);
            if copied > max_size {
                return Err(too_large(format!(
                    "file exceeds the limit of {max_size} bytes"
                )));
            }
            dest.write_all(&buf[..n])
                .await
                .map_err(CacheError::internal)?;
            progress.advance(n as u64);
        }
        dest.flush().await.map_err(CacheError::internal)?;
        Ok(copied)
    }
}
