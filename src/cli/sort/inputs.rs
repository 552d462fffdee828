//! The inputs of `omnisym sort`: every file below the given paths, and the entries of
//! zip archives among them, each memory-mapped (or, for a small zip entry, read) rather
//! than read whole into memory.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use anyhow::Result;
use symbolic::common::ByteView;
use walkdir::WalkDir;

/// A zip entry up to this size is inflated in memory; a larger one goes to an unnamed
/// temporary file and is mapped, so a zip of SDKs does not need its size in RAM.
const IN_MEMORY_ENTRY: u64 = 16 << 20;

/// Every regular file below `paths` (a path that is a file is itself), with its size;
/// unreadable directories are passed over, as symsorter does.
pub fn files(paths: &[PathBuf]) -> Vec<(PathBuf, u64)> {
    paths
        .iter()
        .flat_map(WalkDir::new)
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            meta.is_file().then(|| (entry.into_path(), meta.len()))
        })
        .collect()
}

/// A zip archive's name by its magic, as symsorter tells one (a source bundle starts
/// with its own magic, so it is never taken for one).
pub fn is_zip(data: &[u8]) -> bool {
    data.starts_with(b"PK")
}

/// Calls `each` with every file entry of the zip archive in `data`: its base name and
/// its bytes.
pub fn zip_entries<R: Read + Seek>(
    data: R,
    scratch: &Path,
    mut each: impl FnMut(String, ByteView<'static>) -> Result<()>,
) -> Result<()> {
    let mut zip = zip::ZipArchive::new(data)?;
    for index in 0..zip.len() {
        let mut entry = zip.by_index(index)?;
        if !entry.is_file() {
            continue;
        }
        // An entry name need not be UTF-8; it is only shown and, as a base name,
        // offered to the layouts (which check it).
        let name = String::from_utf8_lossy(entry.name_raw())
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or_default()
            .to_owned();
        let bytes = if entry.size() <= IN_MEMORY_ENTRY {
            // The declared size is only a hint: a lying entry still stops at the cap.
            let mut buf = Vec::with_capacity(entry.size() as usize);
            (&mut entry)
                .take(IN_MEMORY_ENTRY + 1)
                .read_to_end(&mut buf)?;
            if buf.len() as u64 > IN_MEMORY_ENTRY {
                let mut file = tempfile::tempfile_in(scratch)?;
                std::io::Write::write_all(&mut file, &buf)?;
                std::io::copy(&mut entry, &mut file)?;
                ByteView::map_file(file)?
            } else {
                ByteView::from_vec(buf)
            }
        } else {
            let mut file = tempfile::tempfile_in(scratch)?;
            std::io::copy(&mut entry, &mut file)?;
            ByteView::map_file(file)?
        };
        each(name, bytes)?;
    }
    Ok(())
}

/// A ProGuard mapping's uuid, the one sentry-cli uploads it under (derived from its
/// contents), when `data` is one.
pub fn proguard_uuid(data: &[u8]) -> Option<symbolic::common::Uuid> {
    let mapping = proguard::ProguardMapping::new(data);
    mapping.is_valid().then(|| mapping.uuid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn zip_entries_are_named_by_base_name_and_large_ones_spill() {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        zip.add_directory("dir/", options).unwrap();
        zip.start_file("dir/small.debug", options).unwrap();
        zip.write_all(b"small").unwrap();
        zip.start_file("big", options).unwrap();
        let big = vec![1u8; (IN_MEMORY_ENTRY + 10) as usize];
        zip.write_all(&big).unwrap();
        let data = zip.finish().unwrap();
        let scratch = tempfile::tempdir().unwrap();

        let mut seen = Vec::new();
        zip_entries(data, scratch.path(), |name, bytes| {
            seen.push((name, bytes.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [("small.debug".to_owned(), 5), ("big".to_owned(), big.len())]
        );
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }

    #[test]
    fn mappings_are_told_from_other_text() {
        let mapping = b"com.example.Main -> a:\n    void run() -> a\n";
        let uuid = proguard_uuid(mapping).unwrap();
        assert_eq!(uuid, proguard::ProguardMapping::new(mapping).uuid());
        assert!(proguard_uuid(b"# README\n\nsome text -> here\n").is_none());
        assert!(proguard_uuid(b"").is_none());
    }
}
