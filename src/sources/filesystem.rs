//! Directories on the local file system.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::common::{CommonSourceConfig, DigestCells, SourceId};

/// A directory on the local file system.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FilesystemSourceConfig {
    pub id: SourceId,
    /// Root directory of the symbols.
    pub path: PathBuf,
    #[serde(flatten)]
    pub files: CommonSourceConfig,
    /// This config's digests, computed on first use (see `SourceConfig::fingerprint`).
    #[serde(skip)]
    pub digests: DigestCells,
}

impl FilesystemSourceConfig {
    /// The file system path of `path` (a `/`-separated location) below this source's root.
    ///
    /// Segments that are empty, `.` or `..`, or that are not a single plain file name for the
    /// host OS (e.g. `C:` on Windows), are dropped, mirroring [`HttpSourceConfig::join_url`]. The
    /// result is therefore always inside `self.path`, even for hostile input.
    pub fn join_path(&self, path: &str) -> PathBuf {
        let mut joined = self.path.clone();
        for segment in path.split('/') {
            let mut components = Path::new(segment).components();
            if let (Some(Component::Normal(name)), None) = (components.next(), components.next()) {
                // Parsing collapses things like a trailing `.`; push the original segment only if
                // it really is that single name.
                if name == segment {
                    joined.push(name);
                }
            }
        }
        joined
    }
}
