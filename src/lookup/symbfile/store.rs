//! The store of uploaded symbfiles on disk:
//!
//! ```text
//! <dir>/tmp/                                 everything being written; emptied at start
//! <dir>/pending/<kind>-<fileid>-<parts>/part-<n>   parts of unfinished uploads
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

use std::fs;
use std::io::{self, BufWriter, Write};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use symbolic::common::{ByteView, SelfCell};
use symbolic::symcache::SymCache;
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;

use super::SymbfileConfig;
use super::convert::write_symcache;
use super::read::{FormatError, MAGIC, Records, read_into};
use crate::error::{CacheError, CacheResult, isolate_blocking, panicked};
use crate::lookup::Derived;
use crate::sources::{
    FILES_DIR, FileId, PENDING_DIR, Secret, SourceId, SymbfileKind, file_dir, part_name,
    pending_dir, symbfile_path,
};
use crate::types::{ObjectCandidate, ObjectDownloadInfo, ObjectFeatures, ObjectUseInfo};

/// Bump when `convert` changes what it writes: every index gets a new name and is
/// rebuilt from the stored symbfiles on its next lookup.
const INDEX_REVISION: u32 = 1;
const TMP_DIR: &str = "tmp";
/// The source that candidates from uploads are reported under.
pub const SYMBFILE_SOURCE: &str = "symbfile:uploads";
/// Concurrent completions and index builds for FileIDs that share a stripe wait for
/// each other; a fixed number keeps the locks bounded however many FileIDs there are.
const LOCK_STRIPES: usize = 64;

pub type OwnedSymCache = Arc<SelfCell<ByteView<'static>, SymCache<'static>>>;

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
    /// Over `max_pending_uploads` (429).
    #[error("{0}")]
    TooMany(String),
    /// Over `max_stored_files` (507).
    #[error("{0}")]
    Full(String),
    /// Our side failed; the detail was logged.
    #[error("internal error")]
    Internal,
}

impl UploadError {
    fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "symbfile store failed");
        UploadError::Internal
    }
}

/// Where an upload stands after a part landed.
#[derive(Debug, PartialEq, Eq)]
pub enum Upload {
    /// Stored; `received` of `parts` are there.
    Partial { received: u32, parts: u32 },
    /// All parts were there, valid, and are now served.
    Complete,
}

/// What the blocking file work needs.
#[derive(Clone)]
struct Disk {
    dir: PathBuf,
    max_file_size: u64,
    max_stored_files: usize,
    /// FileIDs with a directory under `files/`.
    stored: Arc<AtomicUsize>,
}

pub struct SymbfileStore {
    disk: Disk,
    api_keys: Vec<Secret>,
    max_parts: usize,
    max_pending_uploads: usize,
    pending_upload_timeout: Duration,
    indexes: moka::future::Cache<FileId, Option<OwnedSymCache>>,
    locks: Vec<tokio::sync::Mutex<()>>,
}

impl SymbfileStore {
    /// Opens (creating) the store at `dir`: empties its `tmp`, drops expired uploads,
    /// counts the stored FileIDs.
    pub fn open(dir: PathBuf, config: &SymbfileConfig) -> io::Result<Self> {
        let tmp = dir.join(TMP_DIR);
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        for sub in [TMP_DIR, FILES_DIR, PENDING_DIR] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let mut stored = 0;
        for fanout in subdirs(&dir.join(FILES_DIR))? {
            stored += subdirs(&fanout)?.len();
        }
        let store = SymbfileStore {
            disk: Disk {
                dir,
                max_file_size: config.max_file_size,
                max_stored_files: config.max_stored_files,
                stored: Arc::new(AtomicUsize::new(stored)),
            },
            api_keys: config
                .api_keys
                .iter()
                .filter(|k| !k.is_empty())
                .cloned()
                .collect(),
            max_parts: config.max_parts,
            max_pending_uploads: config.max_pending_uploads,
            pending_upload_timeout: config.pending_upload_timeout,
            indexes: moka::future::Cache::new(config.max_open_indexes),
            locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        };
        store.live_pending_uploads(SystemTime::now())?;
        Ok(store)
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

    /// Removes pending uploads idle for longer than the timeout; the number left.
    fn live_pending_uploads(&self, now: SystemTime) -> io::Result<usize> {
        let mut live = 0;
        for upload in subdirs(&self.disk.dir.join(PENDING_DIR))? {
            let idle = fs::metadata(&upload)
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default());
            match idle {
                Ok(idle) if idle <= self.pending_upload_timeout => live += 1,
                _ => {
                    tracing::info!(upload = %upload.display(), "discarding an expired symbfile upload");
                    remove_dir_all(&upload)?;
                }
            }
        }
        Ok(live)
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
        let pending = self.disk.dir.join(pending_dir(id, kind, parts));
        if !pending.exists() {
            let live = self
                .live_pending_uploads(SystemTime::now())
                .map_err(UploadError::internal)?;
            if live >= self.max_pending_uploads {
                return Err(UploadError::TooMany(format!(
                    "{live} uploads are unfinished (symbfile.max_pending_uploads); retry later"
                )));
            }
        }
        fs::create_dir_all(&pending).map_err(UploadError::internal)?;
        let temp = tempfile::Builder::new()
            .prefix(".part")
            .tempfile_in(self.disk.dir.join(TMP_DIR))
            .map_err(UploadError::internal)?;
        let file = temp.reopen().map_err(UploadError::internal)?;
        Ok(PartWriter {
            store: self,
            id,
            kind,
            part,
            parts,
            out: tokio::io::BufWriter::new(tokio::fs::File::from_std(file)),
            temp,
            written: 0,
            head: Vec::with_capacity(MAGIC.len()),
        })
    }

    /// Joins, checks and publishes the upload once all its parts are there.
    async fn complete(
        &self,
        id: FileId,
        kind: SymbfileKind,
        parts: u32,
    ) -> Result<Upload, UploadError> {
        let _guard = self.lock(id).lock().await;
        let disk = self.disk.clone();
        let upload = tokio::task::spawn_blocking(move || disk.complete(id, kind, parts))
            .await
            .map_err(UploadError::internal)??;
        if upload == Upload::Complete {
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
    written: u64,
    /// The first bytes of part 0, to refuse a file without the magic early.
    head: Vec<u8>,
}

impl PartWriter<'_> {
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), UploadError> {
        self.written += chunk.len() as u64;
        if self.written > self.store.disk.max_file_size {
            return Err(self.store.disk.too_large());
        }
        if self.part == 0 && self.head.len() < MAGIC.len() {
            let take = chunk.len().min(MAGIC.len() - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            if !MAGIC.starts_with(&self.head) {
                return Err(FormatError::BadMagic.into());
            }
        }
        self.out
            .write_all(chunk)
            .await
            .map_err(UploadError::internal)
    }

    /// Stores the part durably; completes the upload if it was the last one missing.
    pub async fn finish(mut self) -> Result<Upload, UploadError> {
        if self.part == 0 && self.parts == 1 && self.head.len() < MAGIC.len() {
            return Err(FormatError::BadMagic.into());
        }
        self.out.flush().await.map_err(UploadError::internal)?;
        self.out
            .get_ref()
            .sync_all()
            .await
            .map_err(UploadError::internal)?;
        let store = self.store;
        let pending = store
            .disk
            .dir
            .join(pending_dir(self.id, self.kind, self.parts));
        let (temp, part) = (self.temp, self.part);
        tokio::task::spawn_blocking(move || {
            // Another request may have completed or expired the upload meanwhile.
            fs::create_dir_all(&pending)?;
            temp.persist(pending.join(part_name(part)))
                .map_err(|e| e.error)?;
            sync_dir(&pending)
        })
        .await
        .map_err(UploadError::internal)?
        .map_err(UploadError::internal)?;
        store.complete(self.id, self.kind, self.parts).await
    }
}

impl Disk {
    fn too_large(&self) -> UploadError {
        UploadError::TooLarge(format!(
            "the symbfile exceeds {} bytes (symbfile.max_file_size)",
            self.max_file_size
        ))
    }

    fn complete(&self, id: FileId, kind: SymbfileKind, parts: u32) -> Result<Upload, UploadError> {
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
                Err(err) => return Err(UploadError::internal(err)),
            }
        }
        let received = paths.len() as u32;
        if received < parts {
            return Ok(Upload::Partial { received, parts });
        }
        // Whatever happens now, this upload is over; a panic while converting hostile
        // records refuses it like any malformed file instead of leaving it to retry.
        let result =
            std::panic::catch_unwind(AssertUnwindSafe(|| self.publish(id, kind, &paths, total)))
                .unwrap_or_else(|payload| {
                    Err(UploadError::Invalid(FormatError::Malformed {
                        offset: 0,
                        message: panicked("symbfile conversion", payload).to_string(),
                    }))
                });
        remove_dir_all(&pending).map_err(UploadError::internal)?;
        result.map(|()| Upload::Complete)
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
        let mut joined = self.temp_file().map_err(UploadError::internal)?;
        for part in parts {
            let mut input = fs::File::open(part).map_err(UploadError::internal)?;
            io::copy(&mut input, joined.as_file_mut()).map_err(UploadError::internal)?;
        }
        joined.as_file().sync_all().map_err(UploadError::internal)?;

        let mut records = Records::default();
        read_file(joined.path(), &mut records)?;
        for other in SymbfileKind::ALL.into_iter().filter(|&k| k != kind) {
            let path = self.dir.join(symbfile_path(id, other));
            if path.exists()
                && let Err(err) = read_file(&path, &mut records)
            {
                // It was read in full when it was uploaded: the disk changed under us.
                tracing::error!(file = %path.display(), error = %err, "a stored symbfile became unreadable");
            }
        }
        let index = self.write_index(&records).map_err(UploadError::internal)?;
        drop(records);

        fs::create_dir_all(&target).map_err(UploadError::internal)?;
        joined
            .persist(self.dir.join(symbfile_path(id, kind)))
            .map_err(|e| UploadError::internal(e.error))?;
        self.publish_index(&target, index)
            .map_err(UploadError::internal)?;
        if is_new {
            self.stored.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn temp_file(&self) -> io::Result<NamedTempFile> {
        tempfile::Builder::new()
            .prefix(".index")
            .tempfile_in(self.dir.join(TMP_DIR))
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
            Ok(view) => match parse_index(view) {
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
                read_file(&file, &mut records).map_err(|e| CacheError::Malformed(e.to_string()))?;
            }
        }
        let index = self.write_index(&records).map_err(CacheError::internal)?;
        drop(records);
        let path = self
            .publish_index(&target, index)
            .map_err(CacheError::internal)?;
        let view = ByteView::open(&path).map_err(CacheError::internal)?;
        parse_index(view).map(Some)
    }
}

fn parse_index(view: ByteView<'static>) -> CacheResult<OwnedSymCache> {
    SelfCell::try_new(view, |bytes| SymCache::parse(unsafe { &*bytes }))
        .map(Arc::new)
        .map_err(|e| CacheError::Malformed(e.to_string()))
}

/// Reads one stored or uploaded symbfile into `records`; a reader panic is a
/// malformed file, not a dead request.
fn read_file(path: &Path, records: &mut Records) -> Result<(), UploadError> {
    let view = ByteView::open(path).map_err(UploadError::internal)?;
    std::panic::catch_unwind(AssertUnwindSafe(|| read_into(&view, records))).unwrap_or_else(
        |payload| {
            Err(FormatError::Malformed {
                offset: 0,
                message: panicked("symbfile reader", payload).to_string(),
            })
        },
    )?;
    Ok(())
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
