use std::path::Path;

use tempfile::NamedTempFile;

use super::{Downloader, decompress_file};
use crate::cache::{CacheError, CacheKey, CacheResult, Scope};
use crate::sources::{SourceConfig, SourceId};

/// One file at one source: where a debug file could be. Its `uri` is what candidate
/// reports show, so it never carries credentials (headers stay in the source config).
#[derive(Clone, Debug)]
pub struct RemoteFile {
    pub source: SourceConfig,
    pub path: String,
}

impl RemoteFile {
    pub fn new(source: SourceConfig, path: String) -> Self {
        RemoteFile { source, path }
    }

    pub fn source_id(&self) -> &SourceId {
        self.source.id()
    }

    pub fn uri(&self) -> String {
        match &self.source {
            SourceConfig::Http(http) => match http.join_url(&self.path) {
                Some(url) => url.to_string(),
                None => format!("{}{}", http.url, self.path),
            },
            SourceConfig::Filesystem(fs) => fs.join_path(&self.path).display().to_string(),
        }
    }

    /// The cache key of this file for a request in `scope`. Public sources share their
    /// files across scopes.
    pub fn cache_key(&self, scope: &Scope) -> CacheKey {
        let scope = if self.source.files().is_public {
            Scope::Global
        } else {
            scope.clone()
        };
        CacheKey::new(scope, &[self.source_id().as_str(), &self.uri()])
    }
}

/// Downloads `file` into `dest` and unpacks it if it is compressed, so `dest` ends up
/// holding the plain file.
pub async fn fetch_file(
    downloader: &Downloader,
    file: &RemoteFile,
    dest: &mut NamedTempFile,
    max_size: u64,
) -> CacheResult<()> {
    let mut out =
        tokio::fs::File::from_std(dest.as_file().try_clone().map_err(CacheError::internal)?);
    match &file.source {
        SourceConfig::Http(http) => {
            let url = http.join_url(&file.path).ok_or(CacheError::NotFound)?;
            downloader
                .download_http(&url, &http.headers, &mut out)
                .await?;
        }
        SourceConfig::Filesystem(fs) => {
            downloader
                .copy_file(&fs.join_path(&file.path), &mut out)
                .await?;
        }
    }
    use tokio::io::AsyncWriteExt;
    out.flush().await.map_err(CacheError::internal)?;
    drop(out);

    let path = dest.path().to_owned();
    let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
    let unpacked = tokio::task::spawn_blocking(move || decompress_file(&path, &dir, max_size))
        .await
        .map_err(CacheError::internal)??;
    if let Some(unpacked) = unpacked {
        *dest = unpacked;
    }
    Ok(())
}
