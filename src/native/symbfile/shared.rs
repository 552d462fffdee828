//! Uploads kept beyond one replica's disk: with a store configured (`crate::store`),
//! its state area is their home (one home for every uploaded symbol); without one, a
//! fleet's shared cache. Every part a replica
//! receives is also put in the shared store before it is acknowledged, the replica that
//! finds all parts there joins them, and the finished symbfiles are put there too, where
//! every replica finds them:
//!
//! ```text
//! symbfiles/v1/pending/<kind>-<fileid>-<parts>/part-<n>
//! symbfiles/v1/files/<ab>/<fileid>/<kind>.symbfile
//! symbfiles/v1/files/<ab>/<fileid>/<kind>.sha256    its content's SHA-256, in hex
//! ```
//!
//! A replica takes a finished symbfile again when its checksum differs from the one it
//! holds: a new upload of a FileID is often the same size as the last.
//!
//! The local store stays what lookups read and joins are made from; this is how it
//! learns of parts and files another replica received. Paths come from `layout`, so
//! no request data reaches them as text.
//!
//! Parts leave the store with their upload: all of them when it is published or
//! refused (the replica that joins holds every part), and, when a replica's own copy
//! of an unfinished upload expires, the parts that replica received: every part in the
//! store was put there by the replica that received it, so each is removed by one that
//! held it. A replica that is gone for good with its disk leaves its parts behind;
//! a lifecycle rule on the pending prefix collects those (docs/fronts.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::checksum::is_checksum;
use super::file_id::FileId;
use super::layout::{SymbfileKind, checksum_path, part_name, pending_dir, symbfile_path};
use crate::cache::SharedCache;
use crate::store::Store;
use crate::telemetry::SYMBFILE_PARTS_REMOVED;

/// Where the symbfiles are kept beyond this replica: the four calls both offer.
#[derive(Clone)]
pub(super) enum Remote {
    /// The store's state area, when a store is configured.
    Store(Store),
    /// A fleet's shared cache, without a store.
    Cache(Arc<SharedCache>),
}

impl Remote {
    async fn put(&self, key: &str, file: &Path) -> anyhow::Result<()> {
        match self {
            Remote::Store(store) => store.state_put(key, file).await,
            Remote::Cache(cache) => cache.put(key, ByteView::open(file)?).await,
        }
    }

    async fn try_fetch(&self, key: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        match self {
            Remote::Store(store) => store.state_fetch(key, dest).await,
            Remote::Cache(cache) => cache.try_fetch(key, dest).await,
        }
    }

    async fn size(&self, key: &str) -> anyhow::Result<Option<u64>> {
        match self {
            Remote::Store(store) => store.state_size(key).await,
            Remote::Cache(cache) => cache.size(key).await,
        }
    }

    async fn remove(&self, key: &str) -> anyhow::Result<()> {
        match self {
            Remote::Store(store) => store.state_remove(key).await,
            Remote::Cache(cache) => cache.remove(key).await,
        }
    }

    /// Which of the two, for metrics and logs.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Remote::Store(_) => "store",
            Remote::Cache(_) => "shared",
        }
    }
}

/// Under the shared cache's prefix, beside the cache kinds' directories.
const PREFIX: &str = "symbfiles/v1";
/// How long a lookup trusts what it last learned of a FileID in the store: an upload
/// finished on another replica is served here within this time.
const RECHECK: Duration = Duration::from_secs(10);
/// FileIDs whose last check is remembered; beyond, the oldest are asked again.
const MAX_CHECKED: u64 = 100_000;

pub(super) struct SharedSymbfiles {
    store: Remote,
    /// FileIDs asked about within [`RECHECK`].
    checked: moka::sync::Cache<FileId, ()>,
}

/// A local path from `layout` as a key in the store.
fn key(rel: &Path) -> String {
    format!("{PREFIX}/{}", rel.to_string_lossy())
}

fn part_key(id: FileId, kind: SymbfileKind, parts: u32, part: u32) -> String {
    key(&pending_dir(id, kind, parts).join(part_name(part)))
}

impl SharedSymbfiles {
    pub(super) fn new(store: Remote) -> Self {
        SharedSymbfiles {
            store,
            checked: moka::sync::Cache::builder()
                .max_capacity(MAX_CHECKED)
                .time_to_live(RECHECK)
                .build(),
        }
    }

    /// Puts a received part in the store; the part is acknowledged only once it is.
    pub(super) async fn put_part(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        part: u32,
        file: &Path,
    ) -> anyhow::Result<()> {
        self.store.put(&part_key(id, kind, parts, part), file).await
    }

    /// Whether the store holds every part in `wanted`. Asked from the last part down:
    /// clients send parts in order, so while an upload is unfinished its missing parts
    /// are the last ones, and one request tells (in order, each part's arrival would
    /// ask for all before it).
    pub(super) async fn has_parts(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        wanted: &[u32],
    ) -> anyhow::Result<bool> {
        for &part in wanted.iter().rev() {
            if self
                .store
                .size(&part_key(id, kind, parts, part))
                .await?
                .is_none()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Copies a part another replica received into `dest`; `false` when it is gone
    /// (another replica joined the upload meanwhile).
    pub(super) async fn fetch_part(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        part: u32,
        dest: &mut NamedTempFile,
    ) -> anyhow::Result<bool> {
        self.store
            .try_fetch(&part_key(id, kind, parts, part), dest)
            .await
    }

    /// Puts a finished symbfile in the store for every replica, its checksum after it
    /// (a replica that reads the new checksum finds the new file), then removes the
    /// upload's parts (a failure there is logged: the parts are not needed any more).
    pub(super) async fn publish(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        file: &Path,
        checksum: &str,
    ) -> anyhow::Result<()> {
        self.store.put(&key(&symbfile_path(id, kind)), file).await?;
        self.put_checksum(id, kind, file, checksum).await?;
        for part in 0..parts {
            if let Err(err) = self.store.remove(&part_key(id, kind, parts, part)).await {
                tracing::warn!(file_id = %id, part, error = %err, "cannot remove a shared symbfile part");
            }
        }
        Ok(())
    }

    /// Puts the checksum of the `kind` symbfile of `id` in the store, through a file
    /// beside `file` (both stores take files).
    async fn put_checksum(
        &self,
        id: FileId,
        kind: SymbfileKind,
        file: &Path,
        checksum: &str,
    ) -> anyhow::Result<()> {
        let dir = file.parent().unwrap_or(Path::new("."));
        let temp = tempfile::Builder::new().prefix(".sum").tempfile_in(dir)?;
        std::fs::write(temp.path(), checksum)?;
        self.store
            .put(&key(&checksum_path(id, kind)), temp.path())
            .await
    }

    /// Puts a symbfile published before there was a store (a `symbfile.dir` of an older
    /// setup) in the store, unless it holds that FileID's file already; `true` if put.
    pub(super) async fn migrate(
        &self,
        id: FileId,
        kind: SymbfileKind,
        file: &Path,
        checksum: &str,
    ) -> anyhow::Result<bool> {
        if self.size(id, kind).await?.is_some() {
            return Ok(false);
        }
        self.store.put(&key(&symbfile_path(id, kind)), file).await?;
        self.put_checksum(id, kind, file, checksum).await?;
        Ok(true)
    }

    /// Removes the parts named by their local paths below the store (`pending/<upload>/
    /// part-<n>`) from the shared store, counting under `reason` each one that was there;
    /// a failure is logged: a lifecycle rule on the prefix still collects it.
    pub(super) async fn discard(&self, parts: &[PathBuf], reason: &'static str) {
        let mut removed = 0;
        for part in parts {
            let key = key(part);
            let outcome = match self.store.size(&key).await {
                Ok(Some(_)) => self.store.remove(&key).await.map(|()| true),
                Ok(None) => Ok(false),
                Err(err) => Err(err),
            };
            match outcome {
                Ok(true) => removed += 1,
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(part = %key, error = %err, "cannot remove a shared symbfile part");
                }
            }
        }
        metrics::counter!(SYMBFILE_PARTS_REMOVED, "store" => self.store.label(), "reason" => reason)
            .increment(removed);
    }

    /// Whether the store (not a fleet's shared cache) keeps the uploads.
    pub(super) fn is_store(&self) -> bool {
        matches!(self.store, Remote::Store(_))
    }

    /// Whether a lookup of `id` should ask the store (again): not within [`RECHECK`]
    /// of the last time.
    pub(super) fn due(&self, id: FileId) -> bool {
        let mut due = false;
        self.checked.get_with(id, || due = true);
        due
    }

    /// The size of the `kind` symbfile of `id` in the store, if it holds one.
    pub(super) async fn size(&self, id: FileId, kind: SymbfileKind) -> anyhow::Result<Option<u64>> {
        self.store.size(&key(&symbfile_path(id, kind))).await
    }

    /// The checksum of the `kind` symbfile of `id` in the store; `None` when it has
    /// none (put there by an older omnisym) or it does not read as one. Fetched
    /// through a temp file in `tmp`, as the store hands out files.
    pub(super) async fn checksum(
        &self,
        id: FileId,
        kind: SymbfileKind,
        tmp: &Path,
    ) -> anyhow::Result<Option<String>> {
        let mut temp = tempfile::Builder::new().prefix(".sum").tempfile_in(tmp)?;
        if !self
            .store
            .try_fetch(&key(&checksum_path(id, kind)), &mut temp)
            .await?
        {
            return Ok(None);
        }
        let text = std::fs::read_to_string(temp.path()).unwrap_or_default();
        Ok(is_checksum(&text).then_some(text))
    }

    /// Copies the `kind` symbfile of `id` into `dest`; `false` when there is none.
    pub(super) async fn fetch(
        &self,
        id: FileId,
        kind: SymbfileKind,
        dest: &mut NamedTempFile,
    ) -> anyhow::Result<bool> {
        self.store
            .try_fetch(&key(&symbfile_path(id, kind)), dest)
            .await
    }
}
