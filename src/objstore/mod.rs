//! Object stores the operator runs: a directory every replica mounts, an S3 bucket (or
//! any store speaking S3) or a GCS bucket. This module owns their config blocks
//! ([`ObjectStoreConfig`]), [`ObjectStore`] (whole objects by path: read, sized,
//! written, removed), and the S3 and GCS clients and credentials, which `fetch/`'s
//! bucket sources build too. The clients apply no rule of a download: `fetch/` adds the
//! reserved-IP filter, retries and size limits for what requests name, while the
//! operator's own store is reached as configured. The shared cache (`cache/`) keeps its
//! files in one.

mod config;
mod directory;
pub(crate) mod gcs;
pub(crate) mod s3;

use std::time::Duration;

use symbolic::common::ByteView;
use tempfile::NamedTempFile;

pub use config::{GcsStoreConfig, ObjectStoreConfig, S3StoreConfig};

/// One configured store. Paths are `/`-separated and relative (below the bucket's
/// `prefix`, or the directory); the caller makes them safe.
pub struct ObjectStore(Backend);

enum Backend {
    Directory(directory::DirectoryStore),
    S3(Box<s3::S3Store>),
    Gcs(Box<gcs::GcsStore>),
}

impl ObjectStore {
    /// `connect_timeout` bounds connecting to S3 (the GCS crate's client takes none).
    /// A directory is created if missing.
    pub fn new(config: &ObjectStoreConfig, connect_timeout: Duration) -> anyhow::Result<Self> {
        Ok(ObjectStore(match config {
            ObjectStoreConfig::Filesystem { path } => {
                Backend::Directory(directory::DirectoryStore::new(path)?)
            }
            ObjectStoreConfig::S3(s3) => {
                Backend::S3(Box::new(s3::S3Store::new(s3, connect_timeout)))
            }
            ObjectStoreConfig::Gcs(gcs) => Backend::Gcs(Box::new(gcs::GcsStore::new(gcs)?)),
        }))
    }

    /// Copies the object at `path` into `dest`; `false` when there is none. In a bucket
    /// an empty object counts as none: stores answer some missing keys with one.
    pub async fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        match &self.0 {
            Backend::Directory(dir) => dir.fetch(path, dest),
            Backend::S3(s3) => s3.fetch(path, dest).await,
            Backend::Gcs(gcs) => gcs.fetch(path, dest).await,
        }
    }

    /// The size of the object at `path`; `None` when there is none.
    pub async fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        match &self.0 {
            Backend::Directory(dir) => dir.size(path),
            Backend::S3(s3) => s3.size(path).await,
            Backend::Gcs(gcs) => gcs.size(path).await,
        }
    }

    /// Writes `data` at `path`; a reader never sees part of it.
    pub async fn store(&self, path: &str, data: ByteView<'static>) -> anyhow::Result<()> {
        match &self.0 {
            Backend::Directory(dir) => dir.store(path, &data),
            Backend::S3(s3) => s3.store(path, data).await,
            Backend::Gcs(gcs) => gcs.store(path, data).await,
        }
    }

    /// Writes the file at `file` to `path`, read through a memory map rather than into
    /// memory (a store's uploads run to gigabytes); a reader never sees part of it.
    pub async fn store_file(&self, path: &str, file: &std::path::Path) -> anyhow::Result<()> {
        match &self.0 {
            Backend::Directory(dir) => dir.store_file(path, file),
            Backend::S3(s3) => s3.store(path, ByteView::open(file)?).await,
            Backend::Gcs(gcs) => gcs.store(path, ByteView::open(file)?).await,
        }
    }

    /// Removes the object at `path`, if there is one.
    pub async fn remove(&self, path: &str) -> anyhow::Result<()> {
        match &self.0 {
            Backend::Directory(dir) => dir.remove(path),
            Backend::S3(s3) => s3.remove(path).await,
            // The crate deletes only through its gRPC control client; an empty object
            // reads as none (see `fetch`), and the bucket's lifecycle rules collect it.
            Backend::Gcs(gcs) => gcs.store(path, ByteView::from_slice(&[])).await,
        }
    }
}

/// `path` below a bucket's `prefix`.
fn object_key(prefix: &str, path: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        path.to_owned()
    } else {
        format!("{prefix}/{path}")
    }
}
