//! Where a file for a module could be: every location on every source, in the order
//! upstream tries them. A source's own locations come from its directory layout
//! (`sources`), or from Sentry's search, which `fetch` runs.

use futures::future;

use super::index::SymstoreIndexes;
use crate::cache::{Caches, Scope};
use crate::fetch::{Downloader, RemoteFile};
use crate::sources::{FileType, ObjectId, SourceConfig, source_locations};
use crate::telemetry::SYMSTORE_INDEX_SKIPPED_PATHS;

pub struct Locator {
    downloader: Downloader,
    indexes: SymstoreIndexes,
}

impl Locator {
    pub fn new(caches: &Caches, downloader: Downloader) -> Self {
        Locator {
            indexes: SymstoreIndexes::new(caches, downloader.clone()),
            downloader,
        }
    }

    pub fn downloader(&self) -> &Downloader {
        &self.downloader
    }

    /// Every location where a file of one of `filetypes` for `id` could be: sources in
    /// request order, then file types, then each layout's paths from the most to the
    /// least preferred (Sentry sources: their search's order). Sources with a symstore
    /// index only offer what their index lists.
    pub async fn list_files(
        &self,
        sources: &[SourceConfig],
        filetypes: &[FileType],
        id: &ObjectId,
        scope: &Scope,
    ) -> Vec<RemoteFile> {
        future::join_all(sources.iter().map(|source| async move {
            let mut files = self.source_files(source, filetypes, id).await;
            if SymstoreIndexes::applies_to(source)
                && !files.is_empty()
                && let Some(index) = self.indexes.get(source, scope).await
            {
                let listed = files.len();
                files.retain(|file| file.path().is_some_and(|path| index.contains(path)));
                metrics::counter!(SYMSTORE_INDEX_SKIPPED_PATHS)
                    .increment((listed - files.len()) as u64);
            }
            files
        }))
        .await
        .into_iter()
        .flatten()
        .collect()
    }

    /// Every file `source` could have for `id`, most preferred first: the source's layout
    /// paths, or what Sentry's search finds. A failed search lists nothing, as upstream,
    /// and is logged without the token.
    async fn source_files(
        &self,
        source: &SourceConfig,
        filetypes: &[FileType],
        id: &ObjectId,
    ) -> Vec<RemoteFile> {
        let paths = match source {
            SourceConfig::Sentry(sentry) => {
                match self.downloader.sentry_search(sentry, filetypes, id).await {
                    Ok(ids) => ids,
                    Err(err) => {
                        tracing::warn!(source = %sentry.id, error = %err, "Sentry search failed");
                        Vec::new()
                    }
                }
            }
            _ => source_locations(source.files(), filetypes, id),
        };
        paths
            .into_iter()
            .map(|path| RemoteFile::new(source.clone(), path))
            .collect()
    }
}
