//! The inputs of `omnisym sort`: every file below the given paths, and the entries of
//! zip archives among them, each memory-mapped (or, for a small zip entry, read) rather
//! than read whole into memory, and each entry inflated only as far as the limits a
//! download is held to.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use anyhow::Result;
use symbolic::common::ByteView;
use walkdir::WalkDir;

use crate::fetch::DecompressLimits;

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

/// How far a zip entry may inflate: the server's limits on a download
/// (`--max-entry-size`, `--max-entry-ratio` above the server's floor), so that a small
/// zip cannot fill the disk it is unpacked on.
pub fn entry_limits(max_size: u64, max_ratio: u64) -> DecompressLimits {
    DecompressLimits {
        max_size,
        max_ratio,
        ratio_floor: crate::fetch::FetchConfig::default().decompression_ratio_floor,
    }
}

/// A zip entry, as [`zip_entries`] hands it on.
pub enum Entry {
    Read(ByteView<'static>),
    /// Over `limits`, and why; no more of it was inflated than the limits allow, and
    /// that is gone again.
    Refused(String),
}

/// Calls `each` with every file entry of the zip archive in `data`: its base name and
/// its bytes, or why it was refused.
pub fn zip_entries<R: Read + Seek>(
    data: R,
    scratch: &Path,
    limits: &DecompressLimits,
    mut each: impl FnMut(String, Entry) -> Result<()>,
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
        let compressed = entry.compressed_size();
        if let Some(why) = refusal(limits, compressed, entry.size(), "claims") {
            each(name, Entry::Refused(why))?;
            continue;
        }
        // The zip reader fails an entry that inflates past the size it claims; what is
        // read is held to the limits all the same, whatever the reader does.
        let cap = limits.max_size.min(limits.ratio_cap(compressed));
        let mut limited = (&mut entry).take(cap.saturating_add(1));
        let mut buf = Vec::with_capacity(entry_hint(limited.get_ref().size()));
        (&mut limited)
            .take(IN_MEMORY_ENTRY + 1)
            .read_to_end(&mut buf)?;
        let (bytes, inflated) = if buf.len() as u64 > IN_MEMORY_ENTRY {
            let mut file = tempfile::tempfile_in(scratch)?;
            std::io::Write::write_all(&mut file, &buf)?;
            let rest = std::io::copy(&mut limited, &mut file)?;
            (ByteView::map_file(file)?, buf.len() as u64 + rest)
        } else {
            let inflated = buf.len() as u64;
            (ByteView::from_vec(buf), inflated)
        };
        if let Some(why) = refusal(limits, compressed, inflated, "inflates to") {
            drop(bytes);
            each(name, Entry::Refused(why))?;
            continue;
        }
        each(name, Entry::Read(bytes))?;
    }
    Ok(())
}

/// Why an entry of `compressed` bytes that `verb` (claims, inflates to) `inflated` bytes
/// is refused, naming the flag it is over; `None` within the limits.
fn refusal(
    limits: &DecompressLimits,
    compressed: u64,
    inflated: u64,
    verb: &str,
) -> Option<String> {
    if inflated > limits.max_size {
        return Some(format!(
            "it {verb} more than {} bytes (--max-entry-size)",
            limits.max_size
        ));
    }
    (inflated > limits.ratio_cap(compressed)).then(|| {
        format!(
            "it {verb} more than {} times its {compressed} compressed bytes \
             (--max-entry-ratio): a decompression bomb",
            limits.max_ratio
        )
    })
}

/// The buffer to start with for an entry that claims `size` bytes: no more than is
/// read in memory, however much it claims.
fn entry_hint(size: u64) -> usize {
    size.min(IN_MEMORY_ENTRY) as usize
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

    fn names_and_sizes(data: Vec<u8>, limits: &DecompressLimits) -> Vec<(String, String)> {
        let scratch = tempfile::tempdir().unwrap();
        let mut seen = Vec::new();
        zip_entries(
            std::io::Cursor::new(data),
            scratch.path(),
            limits,
            |name, entry| {
                seen.push(match entry {
                    Entry::Read(bytes) => (name, bytes.len().to_string()),
                    Entry::Refused(why) => (name, why),
                });
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
        seen
    }

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
        let data = zip.finish().unwrap().into_inner();

        let limits = entry_limits(u64::MAX, u64::MAX);
        assert_eq!(
            names_and_sizes(data, &limits),
            [
                ("small.debug".to_owned(), "5".to_owned()),
                ("big".to_owned(), big.len().to_string())
            ]
        );
    }

    /// A bomb is refused by its ratio, a large entry by its size, whether the size the
    /// entry claims gives it away or only inflating it does; the entries around them
    /// are read.
    #[test]
    fn entries_past_the_limits_are_refused_and_leave_nothing_behind() {
        let zeros = vec![0u8; 3 << 20];
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let deflated = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("bomb", deflated).unwrap();
        zip.write_all(&zeros).unwrap();
        zip.start_file("after", deflated).unwrap();
        zip.write_all(b"fine").unwrap();
        let data = zip.finish().unwrap().into_inner();

        let ratio = DecompressLimits {
            max_size: u64::MAX,
            max_ratio: 100,
            ratio_floor: 1 << 20,
        };
        let seen = names_and_sizes(data.clone(), &ratio);
        assert_eq!(seen[0].0, "bomb");
        assert!(seen[0].1.contains("(--max-entry-ratio)"), "{seen:?}");
        assert_eq!(seen[1], ("after".to_owned(), "4".to_owned()));

        let size = entry_limits(2 << 20, u64::MAX);
        let seen = names_and_sizes(data.clone(), &size);
        assert_eq!(
            seen[0].1,
            "it claims more than 2097152 bytes (--max-entry-size)"
        );
        assert_eq!(seen[1], ("after".to_owned(), "4".to_owned()));

        // The zip reader stops an entry that inflates past the size it claims.
        let lying = lie_about_sizes(data, 3 << 20, 16);
        let scratch = tempfile::tempdir().unwrap();
        let read = zip_entries(
            std::io::Cursor::new(lying),
            scratch.path(),
            &size,
            |_, _| Ok(()),
        );
        assert!(read.is_err());
    }

    /// `data` with every header's uncompressed size `from` replaced by `to`.
    fn lie_about_sizes(mut data: Vec<u8>, from: u32, to: u32) -> Vec<u8> {
        let (from, to) = (from.to_le_bytes(), to.to_le_bytes());
        let mut at = 0;
        while let Some(found) = data[at..].windows(4).position(|w| w == from) {
            data[at + found..at + found + 4].copy_from_slice(&to);
            at += found + 4;
        }
        data
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
