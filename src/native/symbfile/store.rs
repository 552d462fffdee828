//! The store of uploaded symbfiles on disk:
//!
//! ```text
//! <dir>/tmp/                                 everything being written
//! <dir>/pending/<kind>-<fileid>-<parts>/part-<n>   parts of unfinished uploads
//!                                      /refused    why the upload was refused
//! <dir>/files/<ab>/<fileid>/ranges.symbfile        completed uploads (the data)
//!                          /returnpads.symbfile
//! ```
//!
//! Every file is written in `tmp`, synced, and renamed into place, so a crash leaves
//! either the old file or the new one. The SymCache lookups read is not kept here: it
//! is a derived cache (`symcache`) keyed by the symbfiles stored now, built by the
//! upload that completes (a file the converter refuses is refused) and again from the
//! symbfiles whenever the cache has lost it, so only the symbfiles need to survive.
//!
//! An upload's parts stay in `pending` until it is published or refused for what it
//! holds: when joining them fails on our side (a full disk, say), the client's retry of
//! any part tries again. A refused upload leaves `refused` behind, naming the part that
//! completed it and that part's digest: that part sent again, unchanged, gets the same
//! answer rather than starting an upload that can never complete; any other part starts
//! the upload anew (a corrected file).
//! Temp files are left alone for [`TEMP_GRACE`]: another process (`omnisym cleanup`,
//! the offline tools, a second server on the same directory) may be writing them.
//! The parts of refused and expired uploads are removed from a fleet's shared store
//! too (see `shared`), and every part removed so is counted
//! (`symbfile.parts_removed`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;

use super::checksum::{file_sha256, is_checksum};
use super::file_id::FileId;
use super::layout::{
    FILES_DIR, PENDING_DIR, SymbfileKind, TMP_DIR, checksum_path, file_dir, part_name, pending_dir,
    symbfile_path,
};
use super::read::{FormatError, MAGIC, Records, read_isolated};
use super::shared::{Remote, SharedSymbfiles};
use super::symcache::{ReadSymbfiles, StoredSymbfile, SymbfileSymCaches};
use crate::cache::Caches;
use crate::cache::cleanup::TEMP_GRACE;
use crate::config::SymbfileConfig;
use crate::error::{CacheError, CacheResult};
use crate::lookup::Derived;
use crate::native::symcache::OwnedSymCache;
use crate::sources::{Secret, SourceId};
use crate::store::Store;
use crate::telemetry::SYMBFILE_PARTS_REMOVED;
use crate::types::{ObjectCandidate, ObjectDownloadInfo, ObjectFeatures, ObjectUseInfo};

/// In an upload's pending directory: the answer its completion got. Lines: `400` or
/// `413`, the number of the part that completed it, that part's SHA-256, the text.
const REFUSED: &str = "refused";
/// The source that candidates from uploads are reported under.
pub const SYMBFILE_SOURCE: &str = "symbfile:uploads";
/// Concurrent completions for FileIDs that share a stripe wait for each other (one
/// reads the symbfile the other publishes); a fixed number keeps the locks bounded
/// however many FileIDs there are.
const LOCK_STRIPES: usize = 64;

/// Why an upload was refused; the front turns each into a status.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// Headers that do not describe a part (400).
    #[error("{0}")]
    BadRequest(String),
    /// The symbfile itself is malformed (400).
    #[error(transparent)]
    Invalid(#[from] FormatError),
    /// Over `max_file_size` (413).
    #[error("{0}")]
    TooLarge(String),
    /// Over `max_pending_uploads` or `max_pending_size` (429).
    #[error("{0}")]
    TooMany(String),
    /// Over `max_stored_files` (507).
    #[error("{0}")]
    Full(String),
    /// The disk or the quota is full. Nothing received before is lost: sending the part
    /// again once there is room continues the upload (507).
    #[error(
        "the server's disk is full; the parts received so far are kept: send this part again later"
    )]
    NoSpace,
    /// The upload was refused when its last part arrived, with this text; that part sent
    /// again unchanged gets the same answer until `pending_upload_timeout` passes (413
    /// when it was too large, else 400).
    #[error("{text}")]
    Refused { too_large: bool, text: String },
    /// The shared store (a fleet's) could not be reached; the detail was logged. The
    /// parts received are kept (503).
    #[error(
        "the shared store cannot be reached; the parts received so far are kept: send this part again later"
    )]
    SharedUnavailable,
    /// Our side failed; the detail was logged. The parts received are kept.
    #[error("internal error")]
    Internal,
}

impl UploadError {
    fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "symbfile store failed");
        UploadError::Internal
    }

    fn shared(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "symbfile store: the shared store failed");
        UploadError::SharedUnavailable
    }

    /// A full disk is the client's to retry; anything else is ours.
    fn io(err: io::Error) -> Self {
        if matches!(
            err.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        ) {
            tracing::warn!(error = %err, "symbfile store: the disk is full");
            return UploadError::NoSpace;
        }
        UploadError::internal(err)
    }

    /// Whether the upload can never succeed as it is, so that its parts go.
    fn is_final(&self) -> bool {
        matches!(
            self,
            UploadError::Invalid(_) | UploadError::TooLarge(_) | UploadError::Refused { .. }
        )
    }
}

/// Where an upload stands after a part landed.
#[derive(Debug, PartialEq, Eq)]
pub enum UploadProgress {
    /// Stored; `received` of `parts` are there.
    Partial { received: u32, parts: u32 },
    /// All parts were there, valid, and are now served.
    Complete,
}

/// Bytes held by unfinished uploads: their parts under `pending/`, and the bytes
/// received so far of parts still arriving.
#[derive(Default)]
struct Pending {
    bytes: AtomicU64,
    /// Held while parts are added to or removed from `pending/`, so that `bytes`
    /// follows what is on disk.
    changes: Mutex<()>,
}

/// Bytes of a part being received, counted in [`Pending`] until the part is stored
/// (they are then the stored part's) or dropped.
struct PartBytes {
    pending: Arc<Pending>,
    bytes: u64,
}

impl PartBytes {
    fn grow(&mut self, bytes: u64, max: u64) -> Result<(), UploadError> {
        let before = self.pending.bytes.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > max {
            self.pending.bytes.fetch_sub(bytes, Ordering::Relaxed);
            return Err(UploadError::TooMany(format!(
                "unfinished uploads hold {before} bytes; with this part they would pass \
                 {max} (symbfile.max_pending_size): retry later"
            )));
        }
        self.bytes += bytes;
        Ok(())
    }

    /// The part is stored: its bytes stay counted, now as part of `pending/`.
    fn stored(mut self) {
        self.bytes = 0;
    }
}

impl Drop for PartBytes {
    fn drop(&mut self) {
        self.pending.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What the blocking file work needs.
#[derive(Clone)]
struct Disk {
    dir: PathBuf,
    max_file_size: u64,
    max_pending_size: u64,
    max_stored_files: usize,
    max_inline_depth: u32,
    /// FileIDs with a directory under `files/`.
    stored: Arc<AtomicUsize>,
    pending: Arc<Pending>,
}

pub struct SymbfileStore {
    disk: Disk,
    /// Opened by the server: receives uploads. Other processes only read stored symbols.
    receives: bool,
    api_keys: Vec<Secret>,
    max_parts: usize,
    max_pending_uploads: usize,
    pending_upload_timeout: Duration,
    symcaches: SymbfileSymCaches,
    locks: Arc<[tokio::sync::Mutex<()>]>,
    /// A fleet's shared store, for a server with a shared cache.
    shared: Option<Arc<SharedSymbfiles>>,
}

impl SymbfileStore {
    /// Opens (creating) the store at `dir` to receive uploads, as the server does:
    /// removes abandoned temp files, drops expired uploads, counts the stored FileIDs and
    /// the bytes of unfinished uploads. The SymCaches of its symbfiles go to `caches`.
    ///
    /// With a `store`, uploads are kept in its state area (the directory at `dir` is
    /// this replica's working copy), and the symbfiles published in `dir` before there
    /// was a store are put there once, in the background (see [`MIGRATED`]).
    pub fn open(
        dir: PathBuf,
        config: &SymbfileConfig,
        caches: &Caches,
        store: Option<&Store>,
    ) -> io::Result<Self> {
        for sub in [TMP_DIR, FILES_DIR, PENDING_DIR] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let now = SystemTime::now();
        remove_abandoned_temps(&dir.join(TMP_DIR), now)?;
        let mut stored = 0;
        for fanout in subdirs(&dir.join(FILES_DIR))? {
            stored += subdirs(&fanout)?.len();
        }
        let mut pending = 0;
        for upload in subdirs(&dir.join(PENDING_DIR))? {
            pending += part_bytes(&upload, None)?;
        }
        let store = SymbfileStore::new(dir, config, caches, true, store);
        store.disk.stored.store(stored, Ordering::Relaxed);
        store.disk.pending.bytes.store(pending, Ordering::Relaxed);
        for place in ["local", "shared", "store"] {
            for reason in ["refused", "expired"] {
                // Shown at 0 from the start, so that a rate works from the first scrape.
                metrics::counter!(SYMBFILE_PARTS_REMOVED, "store" => place, "reason" => reason)
                    .increment(0);
            }
        }
        let (_, expired) = store
            .disk
            .live_pending_uploads(now, config.pending_upload_timeout)?;
        store.discard_expired(expired);
        store.start_migration();
        Ok(store)
    }

    /// The store at `dir` for a process that only looks up stored symbols (the offline
    /// tools, `omnisym cleanup` building the server's cache kinds): it changes nothing
    /// on disk, and refuses uploads.
    pub fn for_lookups(dir: PathBuf, config: &SymbfileConfig, caches: &Caches) -> Self {
        SymbfileStore::new(dir, config, caches, false, None)
    }

    fn new(
        dir: PathBuf,
        config: &SymbfileConfig,
        caches: &Caches,
        receives: bool,
        store: Option<&Store>,
    ) -> Self {
        // The store is the home of uploads when there is one; else a fleet's shared
        // cache keeps them beyond this replica.
        let remote = match store {
            Some(store) => Some(Remote::Store(store.clone())),
            None => caches.shared().map(Remote::Cache),
        };
        SymbfileStore {
            disk: Disk {
                dir,
                max_file_size: config.max_file_size,
                max_pending_size: config.max_pending_size,
                max_stored_files: config.max_stored_files,
                max_inline_depth: config.max_inline_depth,
                stored: Arc::new(AtomicUsize::new(0)),
                pending: Arc::new(Pending::default()),
            },
            receives,
            api_keys: if receives {
                (config.api_keys.iter())
                    .filter(|k| !k.is_empty())
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            },
            max_parts: config.max_parts,
            max_pending_uploads: config.max_pending_uploads,
            pending_upload_timeout: config.pending_upload_timeout,
            symcaches: SymbfileSymCaches::new(caches, config.max_inline_depth),
            locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            shared: remote
                .filter(|_| receives)
                .map(|remote| Arc::new(SharedSymbfiles::new(remote))),
        }
    }

    pub fn uploads_enabled(&self) -> bool {
        !self.api_keys.is_empty()
    }

    /// Whether `key` is one of the configured keys; every key is compared, each in
    /// constant time.
    pub fn accepts_key(&self, key: &str) -> bool {
        self.api_keys
            .iter()
            .fold(false, |found, k| found | k.matches(key))
    }

    /// Starts receiving part `part` of `parts` of the `kind` symbfile of `id`.
    pub async fn begin_part(
        &self,
        id: FileId,
        kind: SymbfileKind,
        part: u32,
        parts: u32,
    ) -> Result<PartWriter<'_>, UploadError> {
        if parts == 0 || parts as usize > self.max_parts {
            return Err(UploadError::BadRequest(format!(
                "FileParts {parts}: expected 1 to {} (symbfile.max_parts)",
                self.max_parts
            )));
        }
        if part >= parts {
            return Err(UploadError::BadRequest(format!(
                "FilePart {part} is out of range: parts are numbered 0 to {} (FileParts {parts})",
                parts - 1
            )));
        }
        if !self.receives {
            return Err(UploadError::internal(
                "a symbfile store opened for lookups was asked to receive a part",
            ));
        }
        let disk = self.disk.clone();
        let (max_pending_uploads, timeout) =
            (self.max_pending_uploads, self.pending_upload_timeout);
        let (temp, others, replay, expired) = tokio::task::spawn_blocking(move || {
            disk.begin_part(id, kind, part, parts, max_pending_uploads, timeout)
        })
        .await
        .map_err(UploadError::internal)??;
        self.discard_expired(expired);
        let file = temp.reopen().map_err(UploadError::io)?;
        Ok(PartWriter {
            store: self,
            id,
            kind,
            part,
            parts,
            out: tokio::io::BufWriter::new(tokio::fs::File::from_std(file)),
            temp,
            others,
            written: 0,
            digest: Sha256::new(),
            replay,
            reservation: PartBytes {
                pending: self.disk.pending.clone(),
                bytes: 0,
            },
            head: Vec::with_capacity(MAGIC.len()),
        })
    }

    /// Joins, checks and publishes the upload once all its parts are there, in a task of
    /// its own: once its last part is stored, an upload completes even when the client
    /// that sent it is gone.
    async fn complete(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        completing: (u32, String),
    ) -> Result<UploadProgress, UploadError> {
        let completion = Completion {
            disk: self.disk.clone(),
            symcaches: self.symcaches.clone(),
            locks: self.locks.clone(),
            shared: self.shared.clone(),
        };
        tokio::spawn(completion.run(id, kind, parts, completing))
            .await
            .map_err(UploadError::internal)?
    }

    /// The uploaded symbols of `id` as a module's debug file, reported as a candidate;
    /// `None` when there are none, and the configured sources are asked instead.
    pub async fn find(&self, id: FileId) -> Option<Derived<OwnedSymCache>> {
        let cache = self.symcache(id).await.transpose()?;
        let features = ObjectFeatures {
            has_debug_info: cache.is_ok(),
            has_symbols: cache.is_ok(),
            ..Default::default()
        };
        let candidate = ObjectCandidate {
            source: SourceId::new(SYMBFILE_SOURCE),
            location: id.to_string(),
            download: ObjectDownloadInfo::from_result(cache.as_ref().map(|_| features.clone())),
            unwind: ObjectUseInfo::None,
            debug: ObjectUseInfo::from_result(&cache),
        };
        Some(Derived {
            cache,
            candidates: vec![candidate].into(),
            features,
            with_sources: None,
            meta: None,
        })
    }

    /// The lookup table of the symbols uploaded for `id`; `None` when there are none.
    pub async fn symcache(&self, id: FileId) -> CacheResult<Option<OwnedSymCache>> {
        if let Some(shared) = &self.shared
            && shared.due(id)
            // Boxed: the shared store's client futures are kilobytes, and held inline
            // they made every module's lookup future as large (see server's
            // future_size_tests), uploads or not.
            && let Err(err) = Box::pin(self.take_from_shared(shared, id)).await
        {
            // What is stored here is still served.
            tracing::warn!(file_id = %id, error = %err, "cannot read uploaded symbols from the shared store");
        }
        let stored = self.disk.stored(id).map_err(CacheError::internal)?;
        if stored.is_empty() {
            return Ok(None);
        }
        self.symcaches.get(id, stored).await.map(Some)
    }
}

impl SymbfileStore {
    /// Removes from the shared store, in the background, the parts of uploads that
    /// expired here (each part's path below the store): nothing waits for it, and a
    /// part missed is left to the store's lifecycle rule.
    fn discard_expired(&self, expired: Vec<PathBuf>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if expired.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { shared.discard(&expired, "expired").await });
            }
            Err(_) => tracing::warn!(
                parts = expired.len(),
                "expired symbfile parts left in the shared store: no runtime to remove them"
            ),
        }
    }

    /// Puts the symbfiles published in this directory before a store was configured in
    /// the store, once: in the background, logged, and marked done in [`MIGRATED`]; a
    /// migration that failed in part is tried again at the next start.
    fn start_migration(&self) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if !shared.is_store() || self.disk.dir.join(MIGRATED).exists() {
            return;
        }
        let disk = self.disk.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { migrate(disk, shared).await });
            }
            Err(_) => tracing::warn!(
                dir = %disk.dir.display(),
                "symbfiles not moved into the store: no runtime; tried again at the next start"
            ),
        }
    }

    /// Stores here the symbfiles of `id` that another replica of the fleet received,
    /// or received anew, since this one last stored them.
    async fn take_from_shared(&self, shared: &SharedSymbfiles, id: FileId) -> anyhow::Result<()> {
        let _guard = self.locks[(id.0 % LOCK_STRIPES as u128) as usize]
            .lock()
            .await;
        for kind in SymbfileKind::ALL {
            let Some(size) = shared.size(id, kind).await? else {
                continue;
            };
            // Told apart by content: a new upload of a FileID is often the same size (a
            // rebuild with one name changed). A fleet's copy put there by an older
            // omnisym has no checksum, and only its size tells.
            let same = match shared
                .checksum(id, kind, &self.disk.dir.join(TMP_DIR))
                .await?
            {
                Some(remote) => {
                    let disk = self.disk.clone();
                    let local =
                        tokio::task::spawn_blocking(move || disk.checksum(id, kind)).await??;
                    local.as_deref() == Some(remote.as_str())
                }
                None => {
                    let local = self.disk.dir.join(symbfile_path(id, kind));
                    fs::metadata(&local).is_ok_and(|m| m.len() == size)
                }
            };
            if same {
                continue;
            }
            let mut temp = tempfile::Builder::new()
                .prefix(".shared")
                .tempfile_in(self.disk.dir.join(TMP_DIR))?;
            if !shared.fetch(id, kind, &mut temp).await? {
                continue;
            }
            let disk = self.disk.clone();
            tokio::task::spawn_blocking(move || {
                // Stamped now, as a join stamps it: the SymCache's key changes with it.
                temp.as_file().set_modified(SystemTime::now())?;
                temp.as_file().sync_all()?;
                let is_new = !disk.dir.join(file_dir(id)).exists();
                disk.publish(id, kind, temp, is_new)
                    .map(drop)
                    .map_err(|err| anyhow::anyhow!("{err}"))
            })
            .await??;
        }
        Ok(())
    }
}

/// In a `symbfile.dir`: its published symbfiles were put in the store.
const MIGRATED: &str = "migrated-to-store";

/// Every symbfile published in the directory: its FileID, kind and path.
fn published(dir: &Path) -> io::Result<Vec<(FileId, SymbfileKind, PathBuf)>> {
    let mut out = Vec::new();
    for fanout in subdirs(&dir.join(FILES_DIR))? {
        for file_dir in subdirs(&fanout)? {
            let Some(id) = (file_dir.file_name())
                .and_then(|name| name.to_str())
                .and_then(|name| name.parse::<FileId>().ok())
            else {
                continue;
            };
            for kind in SymbfileKind::ALL {
                let path = dir.join(symbfile_path(id, kind));
                if path.is_file() {
                    out.push((id, kind, path));
                }
            }
        }
    }
    Ok(out)
}

async fn migrate(disk: Disk, shared: Arc<SharedSymbfiles>) {
    let dir = disk.dir.clone();
    let found = match tokio::task::spawn_blocking(move || published(&dir)).await {
        Ok(Ok(found)) => found,
        Ok(Err(err)) => {
            tracing::error!(dir = %disk.dir.display(), error = %err, "cannot list the symbfiles to move into the store");
            return;
        }
        Err(_) => return,
    };
    let (mut moved, mut failed) = (0usize, 0usize);
    for (id, kind, path) in found {
        let sums = disk.clone();
        let checksum = match tokio::task::spawn_blocking(move || sums.checksum(id, kind)).await {
            Ok(Ok(Some(sum))) => sum,
            Ok(Ok(None)) => continue,
            Ok(Err(err)) => {
                tracing::warn!(file_id = %id, error = %err, "cannot read a symbfile to move into the store");
                failed += 1;
                continue;
            }
            Err(_) => return,
        };
        match shared.migrate(id, kind, &path, &checksum).await {
            Ok(true) => moved += 1,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(file_id = %id, error = %err, "cannot move a symbfile into the store");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        tracing::warn!(dir = %disk.dir.display(), moved, failed, "some symbfiles of symbfile.dir are not in the store yet; tried again at the next start");
        return;
    }
    if let Err(err) = fs::write(disk.dir.join(MIGRATED), format!("{moved}\n")) {
        tracing::warn!(dir = %disk.dir.display(), error = %err, "cannot mark symbfile.dir as moved into the store");
    }
    tracing::info!(dir = %disk.dir.display(), moved, "the symbfiles of symbfile.dir are in the store now");
}

/// One part being received; dropped unfinished, it leaves nothing behind.
pub struct PartWriter<'a> {
    store: &'a SymbfileStore,
    id: FileId,
    kind: SymbfileKind,
    part: u32,
    parts: u32,
    temp: NamedTempFile,
    out: tokio::io::BufWriter<tokio::fs::File>,
    /// Bytes of the upload's other parts when this one began.
    others: u64,
    written: u64,
    digest: Sha256,
    /// The upload was refused when this part completed it: the same bytes again get
    /// the same answer.
    replay: Option<RefusedUpload>,
    reservation: PartBytes,
    /// The first bytes of part 0, to refuse a file without the magic early.
    head: Vec<u8>,
}

impl PartWriter<'_> {
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), UploadError> {
        let disk = &self.store.disk;
        self.written += chunk.len() as u64;
        if self.others.saturating_add(self.written) > disk.max_file_size {
            // The other parts stay (a retry of this part gets this answer again) until
            // they expire.
            return Err(disk.too_large());
        }
        self.reservation
            .grow(chunk.len() as u64, disk.max_pending_size)?;
        if self.part == 0 && self.head.len() < MAGIC.len() {
            let take = chunk.len().min(MAGIC.len() - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            if !MAGIC.starts_with(&self.head) {
                return Err(FormatError::BadMagic.into());
            }
        }
        self.digest.update(chunk);
        self.out.write_all(chunk).await.map_err(UploadError::io)
    }

    fn pending(&self) -> PathBuf {
        (self.store.disk.dir).join(pending_dir(self.id, self.kind, self.parts))
    }

    /// Stores the part durably; completes the upload if it was the last one missing.
    pub async fn finish(mut self) -> Result<UploadProgress, UploadError> {
        if self.part == 0 && self.parts == 1 && self.head.len() < MAGIC.len() {
            return Err(FormatError::BadMagic.into());
        }
        self.out.flush().await.map_err(UploadError::io)?;
        self.out
            .get_ref()
            .sync_all()
            .await
            .map_err(UploadError::io)?;
        let pending = self.pending();
        let digest = hex::encode(self.digest.finalize());
        if let Some(refused) = self.replay.take_if(|r| r.digest == digest) {
            return Err(refused.error());
        }
        let store = self.store;
        let (disk, temp, part) = (store.disk.clone(), self.temp, self.part);
        let stored = pending.join(part_name(part));
        tokio::task::spawn_blocking(move || disk.store_part(&pending, part, temp))
            .await
            .map_err(UploadError::internal)??;
        self.reservation.stored();
        // In a fleet, acknowledged means in the shared store: this replica may be gone
        // by the time the last part arrives elsewhere.
        if let Some(shared) = &store.shared {
            match shared
                .put_part(self.id, self.kind, self.parts, part, &stored)
                .await
            {
                Ok(()) => {}
                // Joined meanwhile by a completion here, which took it along.
                Err(err) if is_not_found(&err) => {}
                Err(err) => return Err(UploadError::shared(err)),
            }
        }
        let completing = (self.part, digest);
        store
            .complete(self.id, self.kind, self.parts, completing)
            .await
    }
}

impl Disk {
    fn too_large(&self) -> UploadError {
        UploadError::TooLarge(format!(
            "the symbfile exceeds {} bytes (symbfile.max_file_size)",
            self.max_file_size
        ))
    }

    /// Checks the limits of a new part, makes room for its upload, and creates the file
    /// it is received into; also the bytes of the upload's other parts, and the parts
    /// of uploads that expired to make room (their paths below the store).
    fn begin_part(
        &self,
        id: FileId,
        kind: SymbfileKind,
        part: u32,
        parts: u32,
        max_pending_uploads: usize,
        timeout: Duration,
    ) -> Result<BegunPart, UploadError> {
        let pending = self.dir.join(pending_dir(id, kind, parts));
        let replay = RefusedUpload::read(&pending).filter(|r| r.part == part);
        let mut expired = Vec::new();
        if !pending.exists() {
            let (live, gone) = self
                .live_pending_uploads(SystemTime::now(), timeout)
                .map_err(UploadError::io)?;
            expired = gone;
            if live >= max_pending_uploads {
                return Err(UploadError::TooMany(format!(
                    "{live} uploads are unfinished (symbfile.max_pending_uploads); retry later"
                )));
            }
        }
        fs::create_dir_all(&pending).map_err(UploadError::io)?;
        let others = part_bytes(&pending, Some(&part_name(part))).map_err(UploadError::io)?;
        if others > self.max_file_size {
            return Err(self.too_large());
        }
        let temp = tempfile::Builder::new()
            .prefix(".part")
            .tempfile_in(self.dir.join(TMP_DIR))
            .map_err(UploadError::io)?;
        Ok((temp, others, replay, expired))
    }

    /// Removes pending uploads idle for longer than `timeout`; the number left that
    /// still take parts, and the parts removed (their paths below the store).
    fn live_pending_uploads(
        &self,
        now: SystemTime,
        timeout: Duration,
    ) -> io::Result<(usize, Vec<PathBuf>)> {
        let mut live = 0;
        let mut expired = Vec::new();
        for upload in subdirs(&self.dir.join(PENDING_DIR))? {
            let idle = fs::metadata(&upload)
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default());
            match idle {
                Ok(idle) if idle <= timeout => {
                    if !upload.join(REFUSED).exists() {
                        live += 1;
                    }
                }
                _ => {
                    tracing::info!(upload = %upload.display(), "discarding an expired symbfile upload");
                    let removed = self.remove_upload(&upload)?;
                    count_removed("expired", removed.len());
                    let rel = upload.strip_prefix(&self.dir).unwrap_or(&upload);
                    expired.extend(removed.iter().map(|part| rel.join(part)));
                }
            }
        }
        Ok((live, expired))
    }

    /// Renames a received part into its upload; it replaces the same part sent before.
    fn store_part(
        &self,
        pending: &Path,
        part: u32,
        temp: NamedTempFile,
    ) -> Result<(), UploadError> {
        let _changes = self
            .pending
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Another request may have completed or expired the upload meanwhile.
        fs::create_dir_all(pending).map_err(UploadError::io)?;
        // A part other than the refused one, or changed: the upload starts anew.
        match fs::remove_file(pending.join(REFUSED)) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                return Err(UploadError::io(err));
            }
            _ => {}
        }
        let path = pending.join(part_name(part));
        let replaced = match fs::metadata(&path) {
            Ok(meta) => meta.len(),
            Err(err) if err.kind() == io::ErrorKind::NotFound => 0,
            Err(err) => return Err(UploadError::io(err)),
        };
        temp.persist(&path).map_err(|e| UploadError::io(e.error))?;
        self.pending.bytes.fetch_sub(replaced, Ordering::Relaxed);
        sync_dir(pending).map_err(UploadError::io)
    }

    /// Removes an upload's directory and its parts from the pending bytes; the names of
    /// the parts it held.
    fn remove_upload(&self, pending: &Path) -> io::Result<Vec<String>> {
        let _changes = self
            .pending
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.remove_counted(pending)
    }

    /// [`Disk::remove_upload`] with `pending.changes` held.
    fn remove_counted(&self, pending: &Path) -> io::Result<Vec<String>> {
        let parts = match part_files(pending) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other?,
        };
        remove_dir_all(pending)?;
        let bytes = parts.iter().map(|(_, len)| len).sum();
        self.pending.bytes.fetch_sub(bytes, Ordering::Relaxed);
        Ok(parts.into_iter().map(|(name, _)| name).collect())
    }

    /// Drops the parts of an upload that can never succeed and remembers why, so that
    /// the part that completed it, sent again, is answered alike.
    fn refuse(&self, pending: &Path, err: &UploadError, (part, digest): (u32, String)) {
        let refused = RefusedUpload {
            too_large: matches!(
                err,
                UploadError::TooLarge(_)
                    | UploadError::Refused {
                        too_large: true,
                        ..
                    }
            ),
            part,
            digest,
            text: err.to_string(),
        };
        let _changes = self
            .pending
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let marked = self.remove_counted(pending).and_then(|removed| {
            count_removed("refused", removed.len());
            fs::create_dir_all(pending)?;
            refused.write(pending)
        });
        if let Err(err) = marked {
            tracing::error!(upload = %pending.display(), error = %err, "cannot mark a refused symbfile upload");
        }
    }

    /// The upload's parts joined and read, with the symbfile of the other kind stored
    /// beside it, once all are there: a malformed upload is refused here.
    fn join(&self, id: FileId, kind: SymbfileKind, parts: u32) -> Result<Joining, UploadError> {
        let pending = self.dir.join(pending_dir(id, kind, parts));
        let mut paths = Vec::new();
        let mut total = 0;
        for part in 0..parts {
            let path = pending.join(part_name(part));
            match fs::metadata(&path) {
                Ok(meta) => {
                    total += meta.len();
                    paths.push(path);
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(UploadError::io(err)),
            }
        }
        let received = paths.len() as u32;
        if received < parts {
            return Ok(Joining::Partial { received, parts });
        }
        if total > self.max_file_size {
            return Err(self.too_large());
        }
        let is_new = !self.dir.join(file_dir(id)).exists();
        if is_new && self.stored.load(Ordering::Relaxed) >= self.max_stored_files {
            return Err(UploadError::Full(format!(
                "symbols of {} executables are stored (symbfile.max_stored_files)",
                self.max_stored_files
            )));
        }
        let mut file = tempfile::Builder::new()
            .prefix(".joined")
            .tempfile_in(self.dir.join(TMP_DIR))
            .map_err(UploadError::io)?;
        for part in &paths {
            let mut input = fs::File::open(part).map_err(UploadError::io)?;
            io::copy(&mut input, file.as_file_mut()).map_err(UploadError::io)?;
        }
        // The modification time names the file in the key of its SymCache: stamped to
        // the nanosecond, as the kernel's coarse clock does not stamp writes, it tells
        // apart uploads of one size that land moments apart.
        file.as_file()
            .set_modified(SystemTime::now())
            .map_err(UploadError::io)?;
        file.as_file().sync_all().map_err(UploadError::io)?;

        // In the order a lookup reads them, so that the SymCache built from what is read
        // here is the one a lookup would build from the stored files.
        let mut stored = Vec::new();
        let mut read = ReadSymbfiles {
            records: Records::default(),
            bytes: 0,
        };
        for stored_kind in SymbfileKind::ALL {
            if stored_kind == kind {
                let joined = file.as_file().try_clone().map_err(UploadError::io)?;
                let joined = StoredSymbfile::from_file(kind, joined).map_err(UploadError::io)?;
                let view = joined.view().map_err(UploadError::io)?;
                read_isolated(&view, &mut read.records, self.max_inline_depth)?;
                read.bytes += joined.len();
                stored.push(joined);
                continue;
            }
            let path = self.dir.join(symbfile_path(id, stored_kind));
            let other = match StoredSymbfile::open(stored_kind, &path) {
                Ok(Some(other)) => other,
                Ok(None) => continue,
                Err(err) => {
                    tracing::error!(file = %path.display(), error = %err, "a stored symbfile cannot be opened");
                    continue;
                }
            };
            let outcome = other
                .view()
                .map_err(|err| err.to_string())
                .and_then(|view| {
                    read_isolated(&view, &mut read.records, self.max_inline_depth)
                        .map_err(|err| err.to_string())
                });
            if let Err(err) = outcome {
                // It was read in full when it was uploaded: the disk changed under us.
                tracing::error!(file = %path.display(), error = %err, "a stored symbfile became unreadable");
            }
            read.bytes += other.len();
            stored.push(other);
        }
        Ok(Joining::Joined(Joined {
            file,
            stored,
            read,
            is_new,
        }))
    }

    /// Renames the joined symbfile into place, with its checksum beside it; the
    /// FileID's SymCache is built. Returns the checksum.
    fn publish(
        &self,
        id: FileId,
        kind: SymbfileKind,
        file: NamedTempFile,
        is_new: bool,
    ) -> Result<String, UploadError> {
        let checksum = file_sha256(file.as_file()).map_err(UploadError::io)?;
        let target = self.dir.join(file_dir(id));
        fs::create_dir_all(&target).map_err(UploadError::io)?;
        file.persist(self.dir.join(symbfile_path(id, kind)))
            .map_err(|e| UploadError::io(e.error))?;
        // After the file: a crash between the two leaves an old checksum beside a new
        // file, which only makes a replica fetch the fleet's copy once more.
        self.write_checksum(id, kind, &checksum)
            .map_err(UploadError::io)?;
        remove_old_indexes(&target);
        sync_dir(&target).map_err(UploadError::io)?;
        if is_new {
            self.stored.fetch_add(1, Ordering::Relaxed);
        }
        Ok(checksum)
    }

    fn write_checksum(&self, id: FileId, kind: SymbfileKind, checksum: &str) -> io::Result<()> {
        let mut temp = tempfile::Builder::new()
            .prefix(".sum")
            .tempfile_in(self.dir.join(TMP_DIR))?;
        io::Write::write_all(temp.as_file_mut(), checksum.as_bytes())?;
        temp.persist(self.dir.join(checksum_path(id, kind)))
            .map_err(|e| e.error)?;
        Ok(())
    }

    /// The checksum of the stored `kind` symbfile of `id`, `None` when there is none.
    /// A store written by an older omnisym has no checksums: it is computed once, then
    /// kept beside the file.
    fn checksum(&self, id: FileId, kind: SymbfileKind) -> io::Result<Option<String>> {
        let file = match fs::File::open(self.dir.join(symbfile_path(id, kind))) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        match fs::read_to_string(self.dir.join(checksum_path(id, kind))) {
            Ok(sum) if is_checksum(&sum) => return Ok(Some(sum)),
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let sum = file_sha256(&file)?;
        self.write_checksum(id, kind, &sum)?;
        Ok(Some(sum))
    }

    /// What becomes of a completed upload's parts: published, they go; refused for what
    /// it holds, they go and the refusal is remembered; failed on our side (a full disk,
    /// a full store), they stay, and the client's next try of any part completes it.
    fn settle(
        &self,
        pending: &Path,
        result: Result<(), UploadError>,
        completing: (u32, String),
    ) -> Result<UploadProgress, UploadError> {
        match result {
            Ok(()) => {
                if let Err(err) = self.remove_upload(pending) {
                    // Published all the same; the leftover parts expire.
                    tracing::error!(upload = %pending.display(), error = %err, "cannot remove the parts of a published symbfile");
                }
                Ok(UploadProgress::Complete)
            }
            Err(err) if err.is_final() => {
                self.refuse(pending, &err, completing);
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    /// The symbfiles stored for `id`, open, in [`SymbfileKind::ALL`] order.
    fn stored(&self, id: FileId) -> io::Result<Vec<StoredSymbfile>> {
        let mut stored = Vec::new();
        for kind in SymbfileKind::ALL {
            let path = self.dir.join(symbfile_path(id, kind));
            stored.extend(StoredSymbfile::open(kind, &path)?);
        }
        Ok(stored)
    }
}

fn is_not_found(err: &anyhow::Error) -> bool {
    err.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::NotFound)
}

/// What completing an upload needs, apart from the request that completes it.
struct Completion {
    disk: Disk,
    symcaches: SymbfileSymCaches,
    locks: Arc<[tokio::sync::Mutex<()>]>,
    shared: Option<Arc<SharedSymbfiles>>,
}

impl Completion {
    async fn run(
        self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        completing: (u32, String),
    ) -> Result<UploadProgress, UploadError> {
        let _guard = self.locks[(id.0 % LOCK_STRIPES as u128) as usize]
            .lock()
            .await;
        if let Some(shared) = &self.shared {
            self.gather(shared, id, kind, parts)
                .await
                .map_err(UploadError::shared)?;
        }
        let disk = self.disk.clone();
        let joined = tokio::task::spawn_blocking(move || disk.join(id, kind, parts))
            .await
            .map_err(UploadError::internal)?;
        let result = match joined {
            Ok(Joining::Partial { received, parts }) => {
                return Ok(UploadProgress::Partial { received, parts });
            }
            Ok(Joining::Joined(joined)) => self.publish(id, kind, parts, joined).await,
            Err(err) => Err(err),
        };
        let disk = self.disk.clone();
        let pending = disk.dir.join(pending_dir(id, kind, parts));
        let settled =
            tokio::task::spawn_blocking(move || disk.settle(&pending, result, completing))
                .await
                .map_err(UploadError::internal)?;
        // Refused here, with every part gathered here: none is of use to any replica.
        if let (Some(shared), Err(err)) = (&self.shared, &settled)
            && err.is_final()
        {
            let all: Vec<PathBuf> = (0..parts)
                .map(|part| pending_dir(id, kind, parts).join(part_name(part)))
                .collect();
            shared.discard(&all, "refused").await;
        }
        settled
    }

    /// Brings here the parts that other replicas received, once the shared store holds
    /// every part this replica lacks; until then the join finds the upload partial.
    async fn gather(
        &self,
        shared: &SharedSymbfiles,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
    ) -> anyhow::Result<()> {
        let pending = self.disk.dir.join(pending_dir(id, kind, parts));
        let missing: Vec<u32> = (0..parts)
            .filter(|&part| !pending.join(part_name(part)).exists())
            .collect();
        if missing.is_empty() || !shared.has_parts(id, kind, parts, &missing).await? {
            return Ok(());
        }
        for part in missing {
            let mut temp = tempfile::Builder::new()
                .prefix(".part")
                .tempfile_in(self.disk.dir.join(TMP_DIR))?;
            if !shared.fetch_part(id, kind, parts, part, &mut temp).await? {
                // Joined on another replica meanwhile, which removed its parts.
                return Ok(());
            }
            let bytes = temp.as_file().metadata()?.len();
            let (disk, pending) = (self.disk.clone(), pending.clone());
            tokio::task::spawn_blocking(move || {
                disk.pending.bytes.fetch_add(bytes, Ordering::Relaxed);
                disk.store_part(&pending, part, temp)
                    .map_err(|err| anyhow::anyhow!("{err}"))
            })
            .await??;
        }
        Ok(())
    }

    /// Builds the SymCache of the FileID's symbfiles with the joined one among them,
    /// which refuses a symbfile the converter cannot take (its panic contained by the
    /// cache), and then publishes the symbfile: the next lookup finds that SymCache.
    async fn publish(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        joined: Joined,
    ) -> Result<(), UploadError> {
        let Joined {
            file,
            stored,
            read,
            is_new,
        } = joined;
        match self.symcaches.build(id, &stored, read).await {
            Ok(_) => {}
            // The cache could not be written (its disk is full, say): that is no reason
            // to refuse the upload. The symbfile is what has to survive; the next lookup
            // builds its SymCache again.
            Err(CacheError::InternalError) => {
                tracing::warn!(file_id = %id, "the SymCache of an upload was not written");
            }
            Err(err) => return Err(FormatError::unreadable(&err).into()),
        }
        let disk = self.disk.clone();
        let checksum = tokio::task::spawn_blocking(move || disk.publish(id, kind, file, is_new))
            .await
            .map_err(UploadError::internal)??;
        // The fleet's copy: until it is stored the upload is not complete, and the
        // parts stay for the client's retry to complete it again.
        if let Some(shared) = &self.shared {
            let published = self.disk.dir.join(symbfile_path(id, kind));
            shared
                .publish(id, kind, parts, &published, &checksum)
                .await
                .map_err(UploadError::shared)?;
        }
        Ok(())
    }
}

/// A part begun: the file it is received into, the bytes of the upload's other parts,
/// the refusal it repeats if it is the part that completed a refused upload, and the
/// parts of uploads that expired meanwhile (their paths below the store).
type BegunPart = (NamedTempFile, u64, Option<RefusedUpload>, Vec<PathBuf>);

/// Where a completed part leaves its upload.
enum Joining {
    Partial { received: u32, parts: u32 },
    Joined(Joined),
}

/// An upload whose parts were all there, joined into `file` and read.
struct Joined {
    file: NamedTempFile,
    /// The FileID's symbfiles once `file` is published, `file` among them, in
    /// [`SymbfileKind::ALL`] order.
    stored: Vec<StoredSymbfile>,
    /// What was read of `stored`.
    read: ReadSymbfiles,
    is_new: bool,
}

/// Removes `index-<digest>.symcache` files beside the symbfiles, which an older
/// omnisym's store may hold: SymCaches of uploads are the `symbfile_symcaches` cache
/// kind, so nothing reads these.
fn remove_old_indexes(target: &Path) {
    for entry in fs::read_dir(target).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("index-") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// What a refused upload answered, and to which part.
struct RefusedUpload {
    too_large: bool,
    part: u32,
    digest: String,
    text: String,
}

impl RefusedUpload {
    fn read(pending: &Path) -> Option<Self> {
        let content = fs::read_to_string(pending.join(REFUSED)).ok()?;
        let mut lines = content.splitn(4, '\n');
        Some(RefusedUpload {
            too_large: lines.next()? == "413",
            part: lines.next()?.parse().ok()?,
            digest: lines.next()?.to_owned(),
            text: lines.next()?.to_owned(),
        })
    }

    fn write(&self, pending: &Path) -> io::Result<()> {
        let status = if self.too_large { "413" } else { "400" };
        let content = format!("{status}\n{}\n{}\n{}", self.part, self.digest, self.text);
        fs::write(pending.join(REFUSED), content)
    }

    fn error(self) -> UploadError {
        UploadError::Refused {
            too_large: self.too_large,
            text: self.text,
        }
    }
}

/// Bytes of the parts in an upload's directory, but `except`.
fn part_bytes(pending: &Path, except: Option<&str>) -> io::Result<u64> {
    let parts = match part_files(pending) {
        Err(err) if err.kind() == io::ErrorKind::NotFound && except.is_some() => return Ok(0),
        other => other?,
    };
    let others = parts
        .iter()
        .filter(|(name, _)| Some(name.as_str()) != except);
    Ok(others.map(|(_, len)| len).sum())
}

/// The parts in an upload's directory: each one's name and size.
fn part_files(pending: &Path) -> io::Result<Vec<(String, u64)>> {
    let mut parts = Vec::new();
    for entry in fs::read_dir(pending)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("part-") {
            parts.push((name, entry.metadata()?.len()));
        }
    }
    Ok(parts)
}

/// Counts parts removed from this replica's disk.
fn count_removed(reason: &'static str, parts: usize) {
    metrics::counter!(SYMBFILE_PARTS_REMOVED, "store" => "local", "reason" => reason)
        .increment(parts as u64);
}

/// Removes temp files older than [`TEMP_GRACE`]: younger ones may be a write in progress,
/// of this process or another.
fn remove_abandoned_temps(tmp: &Path, now: SystemTime) -> io::Result<()> {
    for entry in fs::read_dir(tmp)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let age = meta
            .modified()
            .map(|t| now.duration_since(t).unwrap_or_default())
            .unwrap_or_default();
        if meta.is_file() && age >= TEMP_GRACE {
            match fs::remove_file(entry.path()) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
    }
    Ok(())
}

fn subdirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

fn remove_dir_all(dir: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Makes the renames into `dir` durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::super::proto;
    use super::super::read::tests::{file, range, record};
    use super::*;
    use crate::cache::CachesConfig;
    use crate::cache::kinds::SYMBFILE_SYMCACHES;

    /// The caches of a server whose `cache_dir` is `dir`.
    fn caches(dir: &Path) -> Caches {
        Caches::new(dir, &CachesConfig::default(), None)
    }

    fn pending_bytes(store: &SymbfileStore) -> u64 {
        store.disk.pending.bytes.load(Ordering::Relaxed)
    }

    async fn send(
        store: &SymbfileStore,
        part: u32,
        body: &[u8],
    ) -> Result<UploadProgress, UploadError> {
        let mut writer = store
            .begin_part(FileId(7), SymbfileKind::Ranges, part, 3)
            .await?;
        writer.write(body).await?;
        writer.finish().await
    }

    /// What unfinished uploads hold is what their parts on disk hold, through parts sent
    /// again, parts dropped half-way, expiry and a restart.
    #[tokio::test]
    async fn pending_bytes_follow_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let config = SymbfileConfig::default();
        let caches = caches(&dir.path().join("cache"));
        let store = SymbfileStore::open(dir.path().to_owned(), &config, &caches, None).unwrap();
        let head = [MAGIC.as_slice(), &[0; 92]].concat();
        assert_eq!(
            send(&store, 0, &head).await.unwrap(),
            UploadProgress::Partial {
                received: 1,
                parts: 3
            }
        );
        send(&store, 1, &[1; 40]).await.unwrap();
        assert_eq!(pending_bytes(&store), 140);
        send(&store, 1, &[1; 10]).await.unwrap();
        assert_eq!(
            pending_bytes(&store),
            110,
            "a part sent again replaces the first"
        );

        let mut dropped = store
            .begin_part(FileId(7), SymbfileKind::Ranges, 2, 3)
            .await
            .unwrap();
        dropped.write(&[2; 1000]).await.unwrap();
        assert_eq!(pending_bytes(&store), 1110);
        drop(dropped);
        assert_eq!(pending_bytes(&store), 110);

        // Another process may be writing a young temp file; an old one is abandoned.
        let tmp = dir.path().join(TMP_DIR);
        let (young, old) = (tmp.join(".part-young"), tmp.join(".part-old"));
        for path in [&young, &old] {
            fs::write(path, b"symb").unwrap();
        }
        let file = fs::File::options().append(true).open(&old).unwrap();
        file.set_modified(SystemTime::now() - TEMP_GRACE).unwrap();
        let reopened = SymbfileStore::open(dir.path().to_owned(), &config, &caches, None).unwrap();
        assert!(young.exists() && !old.exists());
        assert_eq!(pending_bytes(&reopened), 110);
        let later = SystemTime::now() + config.pending_upload_timeout * 2;
        let (live, expired) = (reopened.disk)
            .live_pending_uploads(later, config.pending_upload_timeout)
            .unwrap();
        assert_eq!((live, pending_bytes(&reopened)), (0, 0));
        let pending = pending_dir(FileId(7), SymbfileKind::Ranges, 3);
        let mut expired = expired;
        expired.sort();
        assert_eq!(
            expired,
            [pending.join(part_name(0)), pending.join(part_name(1))]
        );
    }

    const ID: FileId = FileId(0x77ef_a716_a912_a492_1744_5787_329f_d29a);

    /// A store over `dir/symbfiles` whose SymCaches go to `dir/cache`; another over the
    /// same `dir` is the server restarted.
    fn store_in(dir: &Path) -> SymbfileStore {
        let caches = caches(&dir.join("cache"));
        let config = SymbfileConfig::default();
        SymbfileStore::open(dir.join("symbfiles"), &config, &caches, None).unwrap()
    }

    /// Uploads `body` as the `kind` symbfile of `ID`, in one part.
    async fn upload(
        store: &SymbfileStore,
        kind: SymbfileKind,
        body: &[u8],
    ) -> Result<UploadProgress, UploadError> {
        let mut writer = store.begin_part(ID, kind, 0, 1).await?;
        writer.write(body).await?;
        writer.finish().await
    }

    /// The functions the SymCache of `ID` has at `addr`, innermost first.
    async fn functions_at(store: &SymbfileStore, addr: u64) -> Vec<String> {
        let symcache = store.symcache(ID).await.unwrap().expect("symbols of ID");
        let functions = symcache.get().lookup(addr);
        functions.map(|l| l.function().name().to_owned()).collect()
    }

    /// A ranges symbfile: `func` over `[0x1000, 0x1010)`.
    fn ranges(func: &str) -> Vec<u8> {
        file(&[range(proto::range_v1::ElfVa::SetElfVa(0x1000), func)])
    }

    /// A return-pad symbfile: one pad at 0x2000, in `func`.
    fn return_pad(func: &str) -> Vec<u8> {
        let table = proto::StringTableV1 {
            strings: vec![func.into(), "a.c".into()],
        };
        let pad = proto::ReturnPadV1 {
            elf_va: Some(proto::return_pad_v1::ElfVa::SetElfVa(0x2000)),
            func: vec![0],
            file: vec![1],
            line: vec![7],
        };
        file(&[
            record(proto::MessageType::MtStringTableV1, &table),
            record(proto::MessageType::MtReturnPadV1, &pad),
        ])
    }

    /// Each upload changes what the next lookup answers: return pads after ranges add
    /// the call sites no range covers, new ranges (of the same size) replace the old,
    /// and a restarted server answers the same.
    #[tokio::test]
    async fn every_upload_changes_what_lookups_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        assert!(store.symcache(ID).await.unwrap().is_none());

        upload(&store, SymbfileKind::Ranges, &ranges("f"))
            .await
            .unwrap();
        assert_eq!(functions_at(&store, 0x1004).await, ["f"]);
        assert!(functions_at(&store, 0x2000).await.is_empty());

        upload(&store, SymbfileKind::ReturnPads, &return_pad("g"))
            .await
            .unwrap();
        assert_eq!(functions_at(&store, 0x1004).await, ["f"]);
        assert_eq!(functions_at(&store, 0x2000).await, ["g"]);

        upload(&store, SymbfileKind::Ranges, &ranges("h"))
            .await
            .unwrap();
        assert_eq!(functions_at(&store, 0x1004).await, ["h"]);
        assert_eq!(functions_at(&store, 0x2000).await, ["g"]);

        let restarted = store_in(dir.path());
        assert_eq!(functions_at(&restarted, 0x1004).await, ["h"]);
        assert_eq!(functions_at(&restarted, 0x2000).await, ["g"]);
    }

    /// A stored symbfile whose reader panics (one an older build accepted, say) makes
    /// the FileID's symbols malformed, remembered as any malformed file is; the panic
    /// goes no further.
    #[tokio::test]
    async fn a_stored_symbfile_that_panics_the_reader_is_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        let path = (dir.path().join("symbfiles")).join(symbfile_path(ID, SymbfileKind::Ranges));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, ranges("omnisym-test-panic:read")).unwrap();
        let malformed = CacheError::Malformed(
            "malformed symbfile at byte 0: malformed: symbfile reader: the parser failed".into(),
        );
        for _ in 0..2 {
            let found = store.find(ID).await.expect("symbols of ID");
            assert_eq!(found.cache.err(), Some(malformed.clone()));
            assert!(!found.features.has_debug_info);
        }
        // The verdict is a placeholder in the cache, as for any malformed file.
        let global = dir
            .path()
            .join("cache")
            .join(SYMBFILE_SYMCACHES.name)
            .join("1/global");
        let remembered: Vec<Vec<u8>> = (fs::read_dir(global).unwrap())
            .map(|entry| fs::read(entry.unwrap().path()).unwrap())
            .collect();
        assert!(
            (remembered.iter()).any(|data| data.starts_with(b"\0omnisym-placeholder\0")),
            "{remembered:?}"
        );
    }
}
