//! `--with-sources`: a source bundle for a debug file that came without one, made from
//! the source files its debug information names, as they are on this machine. A debug
//! file can name any path (`/etc/shadow`, `~/.ssh/id_rsa`), and the bundle is served to
//! whoever reads the source (`/proxy` among them), so `--source-root` limits what is
//! read to the folders given, after resolving symlinks and `..`.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use symbolic::common::ByteView;
use symbolic::debuginfo::sourcebundle::{SourceBundleWriter, SourceFileDescriptor};
use symbolic::debuginfo::{Archive, FileEntry};

use crate::sources::ObjectType;
use crate::store::layout::describe;

/// Sources above this size are left out, as symsorter leaves them out: generated or
/// vendored blobs that nobody reads as context.
const MAX_SOURCE_SIZE: u64 = 10 * 1024 * 1024;

/// The folders sources may be read from; none given, any file.
pub struct SourceRoots(Vec<PathBuf>);

impl SourceRoots {
    /// Each of `roots` resolved, so that a path is compared with where the root really
    /// is; one that does not exist is an error rather than a root that admits nothing.
    pub fn new(roots: &[PathBuf]) -> Result<Self> {
        let resolved = roots
            .iter()
            .map(|root| {
                std::fs::canonicalize(root)
                    .with_context(|| format!("--source-root {}", root.display()))
            })
            .collect::<Result<_>>()?;
        Ok(SourceRoots(resolved))
    }

    /// The source at `path`, open, when it is a regular file of at most
    /// [`MAX_SOURCE_SIZE`] below a root; `log` hears why it is not.
    fn open(
        &self,
        path: &str,
        log: &(dyn Fn(String) + Sync),
    ) -> Option<std::io::Take<BufReader<File>>> {
        // Resolved before it is compared, and the resolved path opened: a `..` or a
        // symlink below a root cannot lead out of it.
        let resolved = std::fs::canonicalize(path).ok()?;
        if !self.0.is_empty() && !self.0.iter().any(|root| resolved.starts_with(root)) {
            log(format!("Skipping source outside --source-root: {path}"));
            return None;
        }
        let file = File::open(&resolved).ok()?;
        let meta = file.metadata().ok()?;
        // A device or a pipe (`/dev/zero`) never ends.
        if !meta.is_file() {
            log(format!("Skipping source that is not a file: {path}"));
            return None;
        }
        if meta.len() > MAX_SOURCE_SIZE {
            log(format!(
                "Source exceeded maximum item size limit ({}). {path}",
                meta.len()
            ));
            return None;
        }
        // Read no more than was checked, should the file grow meanwhile.
        Some(BufReader::new(file).take(MAX_SOURCE_SIZE))
    }
}

/// A bundle of the sources of the object in `path` whose unified id is `unified_id`, and
/// that object's type; `None` when none of its sources are here (or below `roots`).
/// `log` hears about each file left out. The bundle lives in an unnamed temporary file
/// next to `scratch`.
pub fn make_bundle(
    path: &Path,
    unified_id: &str,
    scratch: &Path,
    roots: &SourceRoots,
    log: &(dyn Fn(String) + Sync),
) -> Result<Option<(ByteView<'static>, ObjectType)>> {
    let data = ByteView::open(path)?;
    let archive = Archive::parse(&data).map_err(|e| anyhow!(e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for object in archive.objects() {
        let object = object.map_err(|e| anyhow!(e))?;
        let Ok(Some(described)) = describe(&object, &name, None) else {
            continue;
        };
        if described.unified_id().as_deref() != Some(unified_id) {
            continue;
        }
        let mut out: File = tempfile::tempfile_in(scratch)?;
        let writer = SourceBundleWriter::start(&mut out).map_err(|e| anyhow!(e))?;
        let (written, _) = writer
            .write_object_with_filter_and_provider(
                &object,
                &name,
                |entry, embedded| worth_bundling(entry, embedded, log),
                |path| roots.open(path, log),
            )
            .map_err(|e| anyhow!(e))?;
        if written {
            return Ok(Some((ByteView::map_file(out)?, described.id.object_type)));
        }
    }
    Ok(None)
}

fn worth_bundling(
    entry: &FileEntry,
    embedded: &Option<SourceFileDescriptor<'_>>,
    log: &(dyn Fn(String) + Sync),
) -> bool {
    let path = entry.abs_path_str();
    if path.ends_with(".pch") {
        log(format!("Skipping precompiled header: {path}"));
        return false;
    }
    // The debug file carries it already; a copy would only disagree with it some day.
    if embedded.is_some() {
        log(format!("Skipping embedded source file: {path}"));
        return false;
    }
    true
}
