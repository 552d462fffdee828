//! `--with-sources`: a source bundle for a debug file that came without one, made from
//! the source files its debug information names, as they are on this machine.

use std::fs::File;
use std::path::Path;

use anyhow::{Result, anyhow};
use symbolic::common::ByteView;
use symbolic::debuginfo::sourcebundle::{SourceBundleWriter, SourceFileDescriptor};
use symbolic::debuginfo::{Archive, FileEntry};

use super::place::describe;
use crate::sources::ObjectType;

/// Sources above this size are left out, as symsorter leaves them out: generated or
/// vendored blobs that nobody reads as context.
const MAX_SOURCE_SIZE: u64 = 10 * 1024 * 1024;

/// A bundle of the sources of the object in `path` whose unified id is `unified_id`, and
/// that object's type; `None` when none of its sources are here. `log` hears about each
/// file left out. The bundle lives in an unnamed temporary file next to `scratch`.
pub fn make_bundle(
    path: &Path,
    unified_id: &str,
    scratch: &Path,
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
        let written = writer
            .write_object_with_filter(&object, &name, |entry, embedded| {
                worth_bundling(entry, embedded, log)
            })
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
    if let Ok(meta) = std::fs::metadata(&path)
        && meta.len() > MAX_SOURCE_SIZE
    {
        log(format!(
            "Source exceeded maximum item size limit ({}). {path}",
            meta.len()
        ));
        return false;
    }
    true
}
