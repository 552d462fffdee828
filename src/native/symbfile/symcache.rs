//! The SymCache of one executable's uploaded symbfiles: a derived cache kind
//! (`kinds::SYMBFILE_SYMCACHES`) with the lifecycle of every other (memory, disk,
//! shared cache, one build per key, negative caching, cleanup), built from every
//! symbfile stored for a FileID, ranges first.
//!
//! Its key is made of the FileID and, for each stored symbfile, its kind, size,
//! modification time and inode, read from the open file that is then read: an upload
//! renames a new file into place (a new inode, while the old one is still there; its
//! time set to the nanosecond), which gives it a new key, so the next lookup asks for
//! the SymCache of the symbfiles as they are now. The upload that completes builds
//! that SymCache (it has read the files already), so that lookup finds it ready.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::time::SystemTime;

use symbolic::common::ByteView;

use super::convert::write_symcache;
use super::file_id::FileId;
use super::layout::SymbfileKind;
use super::read::{Records, read_isolated};
use crate::cache::{CacheKey, CacheKind, Caches, DerivedCache, DerivedFormat, Scope, kinds};
use crate::error::{CacheError, CacheResult, isolate_blocking};
use crate::native::symcache::{OwnedSymCache, SymCacheFormat};

/// Everything read from the symbfiles of one executable, and their size.
pub struct ReadSymbfiles {
    pub records: Records,
    pub bytes: u64,
}

pub struct SymbfileSymCacheFormat;

impl DerivedFormat for SymbfileSymCacheFormat {
    type Input = ReadSymbfiles;
    type Item = OwnedSymCache;
    const KIND: CacheKind = kinds::SYMBFILE_SYMCACHES;

    fn input_size(input: &ReadSymbfiles) -> u64 {
        input.bytes
    }

    fn convert(
        input: ReadSymbfiles,
        out: &mut BufWriter<File>,
        _scratch: &Path,
    ) -> CacheResult<()> {
        #[cfg(test)]
        for string in input.records.strings() {
            crate::error::panic_if_marked("convert", string.as_bytes());
        }
        write_symcache(&input.records, out).map_err(CacheError::internal)
    }

    fn load(data: ByteView<'static>) -> CacheResult<OwnedSymCache> {
        SymCacheFormat::load(data)
    }
}

/// One stored symbfile, open: what it is read through (a later upload renames another
/// file into its place and never changes this one) and what names its content.
pub struct StoredSymbfile {
    kind: SymbfileKind,
    file: File,
    len: u64,
    modified_ns: u128,
    inode: u64,
}

impl StoredSymbfile {
    /// The symbfile of `kind` at `path`; `None` when there is none.
    pub fn open(kind: SymbfileKind, path: &Path) -> io::Result<Option<Self>> {
        match File::open(path) {
            Ok(file) => Self::from_file(kind, file).map(Some),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// `file`, which is, or is about to be renamed into, the symbfile of `kind`: a rename
    /// keeps what names it.
    pub fn from_file(kind: SymbfileKind, file: File) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata()?;
        let modified_ns = meta
            .modified()?
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        Ok(StoredSymbfile {
            kind,
            len: meta.len(),
            modified_ns,
            inode: meta.ino(),
            file,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Maps the file for reading.
    pub fn view(&self) -> io::Result<ByteView<'static>> {
        ByteView::map_file(self.file.try_clone()?)
    }

    fn key(&self, id: FileId) -> CacheKey {
        let parts = [
            "symbfile",
            &id.to_string(),
            self.kind.as_str(),
            &self.len.to_string(),
            &self.modified_ns.to_string(),
            &self.inode.to_string(),
        ];
        // Uploads are not scoped: every request with the FileID sees them.
        CacheKey::new(Scope::Global, &parts)
    }
}

/// The SymCaches of uploaded symbfiles, one per FileID and set of stored files.
#[derive(Clone)]
pub struct SymbfileSymCaches {
    cache: DerivedCache<SymbfileSymCacheFormat>,
    max_inline_depth: u32,
}

impl SymbfileSymCaches {
    pub fn new(caches: &Caches, max_inline_depth: u32) -> Self {
        SymbfileSymCaches {
            cache: DerivedCache::new(caches),
            max_inline_depth,
        }
    }

    /// The SymCache of `files`, the stored symbfiles of `id` in [`SymbfileKind::ALL`]
    /// order; they are read only when it has to be built.
    pub async fn get(&self, id: FileId, files: Vec<StoredSymbfile>) -> CacheResult<OwnedSymCache> {
        let keys = keys(id, &files);
        let max_depth = self.max_inline_depth;
        let input = Box::pin(isolate_blocking("symbfile reader", move || {
            read_stored(&files, max_depth)
        }));
        self.cache
            .get(&keys.iter().collect::<Vec<_>>(), input)
            .await
    }

    /// The SymCache of `files` (as [`get`](Self::get)), from `input`, what an upload
    /// that completes has read of them.
    pub async fn build(
        &self,
        id: FileId,
        files: &[StoredSymbfile],
        input: ReadSymbfiles,
    ) -> CacheResult<OwnedSymCache> {
        let keys = keys(id, files);
        let input = Box::pin(std::future::ready(Ok(input)));
        self.cache
            .get(&keys.iter().collect::<Vec<_>>(), input)
            .await
    }
}

/// The parent keys of the SymCache of `files`, the symbfiles of `id`.
fn keys(id: FileId, files: &[StoredSymbfile]) -> Vec<CacheKey> {
    files.iter().map(|file| file.key(id)).collect()
}

/// Reads `files` into one [`ReadSymbfiles`]; any of them malformed makes it malformed.
fn read_stored(files: &[StoredSymbfile], max_depth: u32) -> CacheResult<ReadSymbfiles> {
    let mut records = Records::default();
    let mut bytes = 0;
    for file in files {
        let view = file.view().map_err(CacheError::internal)?;
        read_isolated(&view, &mut records, max_depth)
            .map_err(|err| CacheError::Malformed(err.to_string()))?;
        bytes += file.len();
    }
    Ok(ReadSymbfiles { records, bytes })
}

#[cfg(test)]
mod tests {
    #[test]
    fn symcache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the SymCache format: bump
        // cache::kinds::SYMBFILE_SYMCACHES (and SYMCACHES, whose test says the same).
        assert_eq!(symbolic::symcache::SYMCACHE_VERSION, 9);
    }
}
