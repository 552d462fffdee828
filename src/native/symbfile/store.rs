//! The store of uploaded symbfiles on disk:
//!
//! ```text
//! <dir>/tmp/                                 everything being written
//! <dir>/pending/<kind>-<fileid>-<parts>/part-<n>   parts of unfinished uploads
//!                                      /refused    why the upload was refused
//! <dir>/files/<ab>/<fileid>/ranges.symbfile        completed uploads (the data)
//!                          /returnpads.symbfile
//!                          /index-<digest>.symcache the lookup table of both
//! ```
//!
//! Every file is written in `tmp`, synced, and renamed into place, so a crash leaves
//! either the old file or the new one. The index's name is a digest of the sizes and
//! times of the symbfiles it was built from (and of the SymCache format version): an
//! index left behind by a crash between two renames, or by an older build, has the
//! wrong name and is rebuilt on its next lookup.
//!
//! An upload's parts stay in `pending` until it is published or refused for what it
//! holds: when joining them fails on our side (a full disk, say), the client's retry of
//! any part tries again. A refused upload leaves `refused` behind, naming the part that
//! completed it and that part's digest: that part sent again, unchanged, gets the same
//! answer rather than starting an upload that can never complete; any other part starts
//! the upload anew (a corrected file).
//! Temp files are left alone for [`TEMP_GRACE`]: another process (`omnisym cleanup`,
//! the offline tools, a second server on the same directory) may be writing them.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use symbolic::common::ByteView;
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;

use super::convert::write_symcache;
use super::file_id::FileId;
use super::layout::{
    FILES_DIR, PENDING_DIR, SymbfileKind, file_dir, part_name, pending_dir, symbfile_path,
};
use super::read::{FormatError, MAGIC, Records, read_into};
use crate::cache::DerivedFormat;
use crate::cache::cleanup::TEMP_GRACE;
use crate::config::SymbfileConfig;
use crate::error::{CacheError, CacheResult, isolate, isolate_blocking};
use crate::lookup::Derived;
use crate::native::symcache::{OwnedSymCache, SymCacheFormat};
use crate::sources::{Secret, SourceId};
use crate::types::{ObjectCandidate, ObjectDownloadInfo, ObjectFeatures, ObjectUseInfo};

/// Bump when `convert` changes what it writes: every index gets a new name and is
/// rebuilt from the stored symbfiles on its next lookup.
const INDEX_REVISION: u32 = 1;
const TMP_DIR: &str = "tmp";
/// In an upload's pending directory: the answer its completion got. Lines: `400` or
/// `413`, the number of the part that completed it, that part's SHA-256, the text.
const REFUSED: &str = "refused";
/// The source that candidates from uploads are reported under.
pub const SYMBFILE_SOURCE: &str = "symbfile:uploads";
/// Concurrent completions and index builds for FileIDs that share a stripe wait for
/// each other; a fixed number keeps the locks bounded however many FileIDs there are.
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
    /// Our side failed; the detail was logged. The parts received are kept.
    #[error("internal error")]
    Internal,
}

impl UploadError {
    fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "symbfile store failed");
        UploadError::Internal
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
struct Reservation {
    pending: Arc<Pending>,
    bytes: u64,
}

impl Reservation {
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

impl Drop for Reservation {
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
    indexes: moka::future::Cache<FileId, Option<OwnedSymCache>>,
    locks: Vec<tokio::sync::Mutex<()>>,
}

impl SymbfileStore {
    /// Opens (creating) the store at `dir` to receive uploads, as the server does:
    /// removes abandoned temp files, drops expired uploads, counts the stored FileIDs and
    /// the bytes of unfinished uploads.
    pub fn open(dir: PathBuf, config: &SymbfileConfig) -> io::Result<Self> {
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
        let store = SymbfileStore::new(dir, config, true);
        store.disk.stored.store(stored, Ordering::Relaxed);
        store.disk.pending.bytes.store(pending, Ordering::Relaxed);
        store
            .disk
            .live_pending_uploads(now, config.pending_upload_timeout)?;
        Ok(store)
    }

    /// The store at `dir` for a process that only looks up stored symbols (the offline
    /// tools, `omnisym cleanup` building the server's cache kinds): it touches nothing
    /// on disk until a lookup, and refuses uploads.
    pub fn for_lookups(dir: PathBuf, config: &SymbfileConfig) -> Self {
        SymbfileStore::new(dir, config, false)
    }

    fn new(dir: PathBuf, config: &SymbfileConfig, receives: bool) -> Self {
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
            indexes: moka::future::Cache::new(config.max_open_indexes),
            locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
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

    fn lock(&self, id: FileId) -> &tokio::sync::Mutex<()> {
        &self.locks[(id.0 % LOCK_STRIPES as u128) as usize]
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
        let (temp, others, replay) = tokio::task::spawn_blocking(move || {
            disk.begin_part(id, kind, part, parts, max_pending_uploads, timeout)
        })
        .await
        .map_err(UploadError::internal)??;
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
            reservation: Reservation {
                pending: self.disk.pending.clone(),
                bytes: 0,
            },
            head: Vec::with_capacity(MAGIC.len()),
        })
    }

    /// Joins, checks and publishes the upload once all its parts are there.
    async fn complete(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        completing: (u32, String),
    ) -> Result<UploadProgress, UploadError> {
        let _guard = self.lock(id).lock().await;
        let disk = self.disk.clone();
        let upload =
            tokio::task::spawn_blocking(move || disk.complete(id, kind, parts, completing))
                .await
                .map_err(UploadError::internal)??;
        if upload == UploadProgress::Complete {
            self.indexes.invalidate(&id).await;
        }
        Ok(upload)
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
        })
    }

    /// The lookup table of the symbols uploaded for `id`; `None` when there are none.
    pub async fn symcache(&self, id: FileId) -> CacheResult<Option<OwnedSymCache>> {
        self.indexes
            .try_get_with(id, async {
                let _guard = self.lock(id).lock().await;
                let disk = self.disk.clone();
                isolate_blocking("symbfile index", move || disk.load(id)).await
            })
            .await
            .map_err(|err| (*err).clone())
    }
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
    reservation: Reservation,
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
        tokio::task::spawn_blocking(move || disk.store_part(&pending, part, temp))
            .await
            .map_err(UploadError::internal)??;
        self.reservation.stored();
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
    /// it is received into; also the bytes of the upload's other parts.
    fn begin_part(
        &self,
        id: FileId,
        kind: SymbfileKind,
        part: u32,
        parts: u32,
        max_pending_uploads: usize,
        timeout: Duration,
    ) -> Result<(NamedTempFile, u64, Option<RefusedUpload>), UploadError> {
        let pending = self.dir.join(pending_dir(id, kind, parts));
        let replay = RefusedUpload::read(&pending).filter(|r| r.part == part);
        if !pending.exists() {
            let live = self
                .live_pending_uploads(SystemTime::now(), timeout)
                .map_err(UploadError::io)?;
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
        Ok((temp, others, replay))
    }

    /// Removes pending uploads idle for longer than `timeout`; the number left that
    /// still take parts.
    fn live_pending_uploads(&self, now: SystemTime, timeout: Duration) -> io::Result<usize> {
        let mut live = 0;
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
                    self.remove_upload(&upload)?;
                }
            }
        }
        Ok(live)
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

    /// Removes an upload's directory and its parts from the pending bytes.
    fn remove_upload(&self, pending: &Path) -> io::Result<()> {
        let _changes = self
            .pending
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.remove_counted(pending)
    }

    /// [`Disk::remove_upload`] with `pending.changes` held.
    fn remove_counted(&self, pending: &Path) -> io::Result<()> {
        let bytes = match part_bytes(pending, None) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        remove_dir_all(pending)?;
        self.pending.bytes.fetch_sub(bytes, Ordering::Relaxed);
        Ok(())
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
        let marked = self.remove_counted(pending).and_then(|()| {
            fs::create_dir_all(pending)?;
            refused.write(pending)
        });
        if let Err(err) = marked {
            tracing::error!(upload = %pending.display(), error = %err, "cannot mark a refused symbfile upload");
        }
    }

    fn complete(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
        completing: (u32, String),
    ) -> Result<UploadProgress, UploadError> {
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
            return Ok(UploadProgress::Partial { received, parts });
        }
        // A panic while converting hostile records refuses the upload like any
        // malformed file instead of leaving it to fail again on every retry.
        let result = isolate("symbfile conversion", || {
            Ok(self.publish(id, kind, &paths, total))
        })
        .unwrap_or_else(|err| Err(malformed(&err).into()));
        match result {
            Ok(()) => {
                if let Err(err) = self.remove_upload(&pending) {
                    // Published all the same; the leftover parts expire.
                    tracing::error!(upload = %pending.display(), error = %err, "cannot remove the parts of a published symbfile");
                }
                Ok(UploadProgress::Complete)
            }
            Err(err) if err.is_final() => {
                self.refuse(&pending, &err, completing);
                Err(err)
            }
            // Ours to fix (a full disk, a full store): the parts stay, and the client's
            // next try of any part completes the upload.
            Err(err) => Err(err),
        }
    }

    fn publish(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: &[PathBuf],
        total: u64,
    ) -> Result<(), UploadError> {
        if total > self.max_file_size {
            return Err(self.too_large());
        }
        let target = self.dir.join(file_dir(id));
        let is_new = !target.exists();
        if is_new && self.stored.load(Ordering::Relaxed) >= self.max_stored_files {
            return Err(UploadError::Full(format!(
                "symbols of {} executables are stored (symbfile.max_stored_files)",
                self.max_stored_files
            )));
        }
        let mut joined = self.temp_file().map_err(UploadError::io)?;
        for part in parts {
            let mut input = fs::File::open(part).map_err(UploadError::io)?;
            io::copy(&mut input, joined.as_file_mut()).map_err(UploadError::io)?;
        }
        joined.as_file().sync_all().map_err(UploadError::io)?;

        let mut records = Records::default();
        read_file(joined.path(), &mut records, self.max_inline_depth)?;
        for other in SymbfileKind::ALL.into_iter().filter(|&k| k != kind) {
            let path = self.dir.join(symbfile_path(id, other));
            if path.exists()
                && let Err(err) = read_file(&path, &mut records, self.max_inline_depth)
            {
                // It was read in full when it was uploaded: the disk changed under us.
                tracing::error!(file = %path.display(), error = %err, "a stored symbfile became unreadable");
            }
        }
        let index = self.write_index(&records).map_err(UploadError::io)?;
        drop(records);

        fs::create_dir_all(&target).map_err(UploadError::io)?;
        joined
            .persist(self.dir.join(symbfile_path(id, kind)))
            .map_err(|e| UploadError::io(e.error))?;
        self.publish_index(&target, index)
            .map_err(UploadError::io)?;
        if is_new {
            self.stored.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn temp_file(&self) -> io::Result<NamedTempFile> {
        let tmp = self.dir.join(TMP_DIR);
        let builder = &mut tempfile::Builder::new();
        builder.prefix(".index");
        match builder.tempfile_in(&tmp) {
            // A store opened for lookups creates nothing until it needs to.
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&tmp)?;
                builder.tempfile_in(&tmp)
            }
            other => other,
        }
    }

    fn write_index(&self, records: &Records) -> io::Result<NamedTempFile> {
        let mut temp = self.temp_file()?;
        let mut out = BufWriter::new(temp.as_file_mut());
        write_symcache(records, &mut out)?;
        out.flush()?;
        drop(out);
        temp.as_file().sync_all()?;
        Ok(temp)
    }

    /// Renames `index` into `target` under the name the current symbfiles give it, and
    /// removes every other index there.
    fn publish_index(&self, target: &Path, index: NamedTempFile) -> io::Result<PathBuf> {
        let name = index_name(target)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no symbfile to name the index after",
            )
        })?;
        let path = target.join(&name);
        index.persist(&path).map_err(|e| e.error)?;
        for entry in fs::read_dir(target)?.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            if file.starts_with("index-") && file != name {
                let _ = fs::remove_file(entry.path());
            }
        }
        sync_dir(target)?;
        Ok(path)
    }

    /// Maps the index of `id`, rebuilding it from the symbfiles when it is missing or
    /// cannot be read.
    fn load(&self, id: FileId) -> CacheResult<Option<OwnedSymCache>> {
        let target = self.dir.join(file_dir(id));
        let Some(name) = index_name(&target).map_err(CacheError::internal)? else {
            return Ok(None);
        };
        let path = target.join(name);
        match ByteView::open(&path) {
            Ok(view) => match SymCacheFormat::load(view) {
                Ok(cache) => return Ok(Some(cache)),
                Err(err) => {
                    tracing::warn!(index = %path.display(), error = %err, "rebuilding an unreadable symbfile index");
                }
            },
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(CacheError::internal(err)),
        }
        let mut records = Records::default();
        for kind in SymbfileKind::ALL {
            let file = self.dir.join(symbfile_path(id, kind));
            if file.exists() {
                read_file(&file, &mut records, self.max_inline_depth)
                    .map_err(|e| CacheError::Malformed(e.to_string()))?;
            }
        }
        let index = self.write_index(&records).map_err(CacheError::internal)?;
        drop(records);
        let path = self
            .publish_index(&target, index)
            .map_err(CacheError::internal)?;
        let view = ByteView::open(&path).map_err(CacheError::internal)?;
        SymCacheFormat::load(view).map(Some)
    }
}

/// Reads one stored or uploaded symbfile into `records`; a reader panic is a
/// malformed file, not a dead request.
fn read_file(path: &Path, records: &mut Records, max_depth: u32) -> Result<(), UploadError> {
    let view = ByteView::open(path).map_err(UploadError::io)?;
    isolate("symbfile reader", || {
        Ok(read_into(&view, records, max_depth))
    })
    .unwrap_or_else(|err| Err(malformed(&err)))?;
    Ok(())
}

/// What a symbfile whose parse panicked (`err`, from [`isolate`]) is: malformed from
/// its start.
fn malformed(err: &CacheError) -> FormatError {
    FormatError::Malformed {
        offset: 0,
        message: err.to_string(),
    }
}

/// The index name for the symbfiles now in `target`; `None` when there are none.
fn index_name(target: &Path) -> io::Result<Option<String>> {
    let mut hasher = Sha256::new();
    hasher.update(symbolic::symcache::SYMCACHE_VERSION.to_le_bytes());
    hasher.update(INDEX_REVISION.to_le_bytes());
    let mut any = false;
    for kind in SymbfileKind::ALL {
        let path = target.join(kind.file_name());
        match fs::metadata(&path) {
            Ok(meta) => {
                any = true;
                let modified = meta
                    .modified()?
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default();
                hasher.update(kind.as_str());
                hasher.update(meta.len().to_le_bytes());
                hasher.update(modified.as_nanos().to_le_bytes());
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
    }
    Ok(any.then(|| format!("index-{}.symcache", hex::encode(&hasher.finalize()[..8]))))
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
    let mut bytes = 0;
    let entries = match fs::read_dir(pending) {
        Err(err) if err.kind() == io::ErrorKind::NotFound && except.is_some() => return Ok(0),
        other => other?,
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("part-") && Some(&*name) != except {
            bytes += entry.metadata()?.len();
        }
    }
    Ok(bytes)
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
    use super::*;

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
        let store = SymbfileStore::open(dir.path().to_owned(), &config).unwrap();
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
        let reopened = SymbfileStore::open(dir.path().to_owned(), &config).unwrap();
        assert!(young.exists() && !old.exists());
        assert_eq!(pending_bytes(&reopened), 110);
        let later = SystemTime::now() + config.pending_upload_timeout * 2;
        let live = (reopened.disk)
            .live_pending_uploads(later, config.pending_upload_timeout)
            .unwrap();
        assert_eq!((live, pending_bytes(&reopened)), (0, 0));
    }
}
