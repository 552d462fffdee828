//! Where the store's bytes live: a directory (published by rename, so a reader never
//! sees part of a file), or an S3 or GCS bucket through `objstore` (published by one
//! put, which readers see whole or not at all). Keys are `/`-separated paths relative to
//! the store's root, made by the store itself (layout paths, its reserved folders).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use crate::objstore::ObjectStore;

pub(super) enum Backend {
    Directory { root: PathBuf },
    Bucket(ObjectStore),
}

/// A stored file's bytes, mapped; for a bucket, the temp file they were fetched to
/// stays open with them.
pub(super) struct Existing {
    pub data: ByteView<'static>,
    _temp: Option<NamedTempFile>,
}

impl Backend {
    fn local(root: &Path, key: &str) -> PathBuf {
        key.split('/').fold(root.to_owned(), |p, s| p.join(s))
    }

    /// The file at `key`, mapped; `None` when there is none.
    pub async fn read(&self, key: &str, scratch: &Path) -> anyhow::Result<Option<Existing>> {
        match self {
            Backend::Directory { root } => {
                let path = Self::local(root, key);
                match File::open(&path) {
                    Ok(file) => Ok(Some(Existing {
                        data: ByteView::map_file(file)?,
                        _temp: None,
                    })),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
                }
            }
            Backend::Bucket(store) => {
                let mut temp = NamedTempFile::new_in(scratch)?;
                if !store.fetch(key, &mut temp).await? {
                    return Ok(None);
                }
                let data = ByteView::map_file(temp.reopen()?)?;
                Ok(Some(Existing {
                    data,
                    _temp: Some(temp),
                }))
            }
        }
    }

    pub async fn fetch(&self, key: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        match self {
            Backend::Directory { root } => {
                match std::fs::copy(Self::local(root, key), dest.path()) {
                    Ok(_) => Ok(true),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
                    Err(err) => Err(err.into()),
                }
            }
            Backend::Bucket(store) => store.fetch(key, dest).await,
        }
    }

    pub async fn size(&self, key: &str) -> anyhow::Result<Option<u64>> {
        match self {
            Backend::Directory { root } => match std::fs::metadata(Self::local(root, key)) {
                Ok(meta) => Ok(Some(meta.len())),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(err) => Err(err.into()),
            },
            Backend::Bucket(store) => store.size(key).await,
        }
    }

    pub async fn remove(&self, key: &str) -> anyhow::Result<()> {
        match self {
            Backend::Directory { root } => match std::fs::remove_file(Self::local(root, key)) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
                _ => Ok(()),
            },
            Backend::Bucket(store) => store.remove(key).await,
        }
    }

    /// Publishes the whole of `file` at `key`. In a directory the file must lie on the
    /// store's filesystem (the staging area): it is synced and renamed into place.
    pub async fn put_file(&self, key: &str, file: NamedTempFile) -> anyhow::Result<()> {
        match self {
            Backend::Directory { root } => {
                let target = Self::local(root, key);
                tokio::task::spawn_blocking(move || persist(file, &target)).await?
            }
            Backend::Bucket(store) => store.store_file(key, file.path()).await,
        }
    }

    /// Publishes `data` (small: a `.meta`, a record) at `key`, written first to a
    /// temp file in `scratch`.
    pub async fn put_bytes(&self, key: &str, data: &[u8], scratch: &Path) -> anyhow::Result<()> {
        let mut temp = NamedTempFile::new_in(scratch)?;
        temp.write_all(data)?;
        self.put_file(key, temp).await
    }

    /// Keeps the file at `key` at `dest` too (before it is replaced): a hard link in a
    /// directory, so the file is never missing from `key`; a copy in a bucket.
    pub async fn keep_copy(&self, key: &str, dest: &str, scratch: &Path) -> anyhow::Result<()> {
        match self {
            Backend::Directory { root } => {
                let from = Self::local(root, key);
                let to = Self::local(root, dest);
                if let Some(dir) = to.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                if std::fs::hard_link(&from, &to).is_err() {
                    std::fs::copy(&from, &to)?;
                }
                Ok(())
            }
            Backend::Bucket(store) => {
                let mut temp = NamedTempFile::new_in(scratch)?;
                if store.fetch(key, &mut temp).await? {
                    store.store_file(dest, temp.path()).await?;
                }
                Ok(())
            }
        }
    }
}

/// Syncs `file` and renames it to `target` (creating its directory), then syncs the
/// directory, so an acknowledged upload survives a crash.
pub(super) fn persist(file: NamedTempFile, target: &Path) -> anyhow::Result<()> {
    let dir = target.parent().context("a store path has a directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    file.as_file().sync_all()?;
    file.persist(target)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot publish {}", target.display()))?;
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}
