//! A directory as an object store: every replica mounts the same one.

use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

pub(super) struct DirectoryStore {
    root: PathBuf,
}

impl DirectoryStore {
    pub fn new(root: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(root)
            .map_err(|err| anyhow::anyhow!("cannot create {}: {err}", root.display()))?;
        Ok(DirectoryStore {
            root: root.to_owned(),
        })
    }

    pub fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        match std::fs::copy(self.root.join(path), dest.path()) {
            Ok(_) => Ok(true),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err.into()),
        }
    }

    pub fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        match std::fs::metadata(self.root.join(path)) {
            Ok(meta) => Ok(Some(meta.len())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Other replicas read the same directory: they must never see a partial file.
    pub fn store(&self, path: &str, data: &[u8]) -> anyhow::Result<()> {
        use std::io::Write;
        let path = self.root.join(path);
        let dir = path.parent().expect("a store path has a parent");
        std::fs::create_dir_all(dir)?;
        let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
        temp.write_all(data)?;
        temp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }

    pub fn store_file(&self, path: &str, file: &Path) -> anyhow::Result<()> {
        let path = self.root.join(path);
        let dir = path.parent().expect("a store path has a parent");
        std::fs::create_dir_all(dir)?;
        let temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
        std::fs::copy(file, temp.path())?;
        temp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }

    pub fn remove(&self, path: &str) -> anyhow::Result<()> {
        match std::fs::remove_file(self.root.join(path)) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(()),
        }
    }
}
