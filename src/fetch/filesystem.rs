//! Copies from filesystem sources (local symbol directories, mostly for tests and
//! on-premise mirrors).

use std::io::{ErrorKind, SeekFrom};
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::too_large;
use super::transfer::{Running, Transfer, ensure_disk_room};
use crate::error::{CacheError, CacheResult};

const COPY_BUF: usize = 64 * 1024;
/// Compared against, as a `memcmp`: fast in any build.
static ZEROS: [u8; COPY_BUF] = [0; COPY_BUF];

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

/// Copies from directories on the server. It keeps nothing between files, and a copy runs
/// once, without the remote backends' retries and download timeout.
pub(super) struct FilesystemBackend;

impl FilesystemBackend {
    /// Copies the local file `src` into the transfer's destination, emptying it first. A
    /// missing path (or a directory) is `NotFound`, an unreadable one `PermissionDenied`.
    /// The size limit and the disk's free space are checked against the file's size before
    /// its first byte is read, as for HTTP downloads. Returns the number of bytes copied.
    pub async fn fetch(
        &self,
        src: &Path,
        transfer: Transfer<'_>,
        disk_margin: u64,
    ) -> CacheResult<u64> {
        tracing::debug!(path = %src.display(), "copying from filesystem source");
        // A source directory may be a network mount, where a big file takes a while too.
        let mut run = transfer.start(&src.display().to_string());
        let result = copy(src, &mut run, disk_margin).await;
        run.finish(&result);
        result
    }
}

async fn copy(src: &Path, run: &mut Running<'_>, disk_margin: u64) -> CacheResult<u64> {
    let max_size = run.max_size;

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

    run.restart().await?;
    run.progress.set_total(Some(metadata.len()));
    ensure_disk_room(run.dest, metadata.len(), disk_margin)?;

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
        // A run of zeros is skipped, not written: a sparse source (a debug file's
        // reserved or padded regions) stays sparse in the cache instead of taking its
        // whole size on disk.
        if buf[..n] == ZEROS[..n] {
            run.dest
                .seek(SeekFrom::Current(n as i64))
                .await
                .map_err(CacheError::internal)?;
        } else {
            run.dest
                .write_all(&buf[..n])
                .await
                .map_err(CacheError::internal)?;
        }
        run.progress.advance(n as u64);
    }
    run.dest.flush().await.map_err(CacheError::internal)?;
    // A hole at the end has no write to extend the file over it.
    run.dest
        .set_len(copied)
        .await
        .map_err(CacheError::internal)?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each kind of failure to open a source file becomes: the mapping a
    /// permission test run as root (file modes do not bind it) cannot observe.
    #[test]
    fn open_errors_map_to_cache_errors() {
        let kind = |kind: ErrorKind| open_error(std::io::Error::from(kind));
        assert_eq!(kind(ErrorKind::NotFound), CacheError::NotFound);
        assert_eq!(kind(ErrorKind::IsADirectory), CacheError::NotFound);
        assert_eq!(kind(ErrorKind::NotADirectory), CacheError::NotFound);
        assert!(matches!(
            kind(ErrorKind::PermissionDenied),
            CacheError::PermissionDenied(_)
        ));
        assert!(matches!(
            kind(ErrorKind::Interrupted),
            CacheError::DownloadError(_)
        ));
    }
}
