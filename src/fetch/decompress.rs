//! Unwrapping of compressed downloads and uploads. Symbol servers serve gzip/zstd-
//! compressed files, zips, and Microsoft's CAB-compressed `.pd_`/`.ex_`/`.dl_` files;
//! crash reporters upload minidumps compressed with gzip, zstd, xz or bzip2. All of them
//! are recognised by their content, not their name, because the name often lies.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::Path;

use flate2::read::{MultiGzDecoder, ZlibDecoder};
use tempfile::NamedTempFile;

use super::too_large;
use crate::error::{CacheError, CacheResult};

const COPY_BUF: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Gzip,
    Zstd,
    Zlib,
    Zip,
    Cab,
    Xz,
    Bzip2,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Gzip => "gzip",
            Format::Zstd => "zstd",
            Format::Zlib => "zlib",
            Format::Zip => "zip",
            Format::Cab => "CAB",
            Format::Xz => "xz",
            Format::Bzip2 => "bzip2",
        }
    }
}

fn detect(magic: [u8; 4]) -> Option<Format> {
    // https://en.wikipedia.org/wiki/List_of_file_signatures
    match magic {
        [0x28, 0xb5, 0x2f, 0xfd] => Some(Format::Zstd),
        [0x1f, 0x8b, _, _] => Some(Format::Gzip),
        // The zlib header's second byte encodes the compression level; these are the
        // three that zlib itself writes.
        [0x78, 0x01 | 0x9c | 0xda, _, _] => Some(Format::Zlib),
        // Local file header; an empty zip has nothing worth unwrapping anyway.
        [0x50, 0x4b, 0x03, 0x04] => Some(Format::Zip),
        [b'M', b'S', b'C', b'F'] => Some(Format::Cab),
        [0xfd, b'7', b'z', b'X'] => Some(Format::Xz),
        // "BZh" and the block size digit.
        [b'B', b'Z', b'h', b'1'..=b'9'] => Some(Format::Bzip2),
        _ => None,
    }
}

/// Whether `data` starts as one of the formats [`decompress_file`] unpacks.
pub fn is_compressed(data: &[u8]) -> bool {
    data.first_chunk::<4>()
        .is_some_and(|magic| detect(*magic).is_some())
}

fn malformed(format: Format, err: impl std::fmt::Display) -> CacheError {
    CacheError::Malformed(format!("invalid {} data: {err}", format.name()))
}

/// How far a compressed file may expand while it is unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecompressLimits {
    /// Largest payload; past it the file is [`CacheError::TooLarge`].
    pub max_size: u64,
    /// Largest payload per byte of compressed input; `u64::MAX`: no limit.
    pub max_ratio: u64,
    /// Payloads up to this size are never refused for their ratio, so that a small file
    /// of mostly zeros still unpacks.
    pub ratio_floor: u64,
}

impl DecompressLimits {
    /// Only a size limit (crash uploads, which `max_crash_file_size` bounds already).
    pub fn size_only(max_size: u64) -> Self {
        DecompressLimits {
            max_size,
            max_ratio: u64::MAX,
            ratio_floor: 0,
        }
    }

    /// The payload bytes allowed for `compressed` bytes of input.
    pub fn ratio_cap(&self, compressed: u64) -> u64 {
        compressed
            .saturating_mul(self.max_ratio)
            .max(self.ratio_floor)
    }

    /// Why a part of a file (a section, an archive entry) that holds `compressed` bytes
    /// and claims to inflate to `inflated` is refused before it is inflated, or `None`;
    /// `size_key` is the setting that `max_size` comes from.
    pub fn refuse(&self, compressed: u64, inflated: u64, size_key: &str) -> Option<String> {
        if inflated > self.max_size {
            return Some(format!(
                "inflates to {inflated} bytes, past {size_key} ({})",
                self.max_size
            ));
        }
        (inflated > self.ratio_cap(compressed)).then(|| {
            format!(
                "inflates from {compressed} to {inflated} bytes, more than {} times \
                 (max_decompression_ratio); a decompression bomb",
                self.max_ratio
            )
        })
    }
}

/// Decompresses the file at `path` if it is gzip, zstd, zlib, xz, bzip2, a zip holding
/// exactly one file, or a CAB holding exactly one file, writing the payload to a new temp file in
/// `temp_dir` (so a later persist is a same-filesystem rename) and returning it rewound.
/// Returns `Ok(None)` if the file is not compressed.
///
/// More than `max_size` bytes of payload (or of an uncompressed file) is
/// [`CacheError::TooLarge`]; a corrupt archive is [`CacheError::Malformed`].
///
/// This blocks; call it from `spawn_blocking`.
pub fn decompress_file(
    path: &Path,
    temp_dir: &Path,
    max_size: u64,
) -> CacheResult<Option<NamedTempFile>> {
    decompress_bounded(path, temp_dir, &DecompressLimits::size_only(max_size))
}

/// [`decompress_file`] that also refuses, as [`CacheError::Malformed`], a payload past
/// `limits.max_ratio` times the compressed size (and past the floor): no real debug file
/// expands that far, and a decompression bomb is refused after writing at most that much.
/// The partial payload is deleted before this returns.
pub fn decompress_bounded(
    path: &Path,
    temp_dir: &Path,
    limits: &DecompressLimits,
) -> CacheResult<Option<NamedTempFile>> {
    let max_size = limits.max_size;
    let mut file = File::open(path).map_err(CacheError::internal)?;
    let len = file.metadata().map_err(CacheError::internal)?.len();

    let format = if len >= 4 {
        let mut magic = [0u8; 4];
        file.read_exact(&mut magic).map_err(CacheError::internal)?;
        file.rewind().map_err(CacheError::internal)?;
        detect(magic)
    } else {
        None
    };

    let Some(format) = format else {
        if len > max_size {
            return Err(too_large(format!(
                "file of {len} bytes exceeds the limit of {max_size} bytes"
            )));
        }
        return Ok(None);
    };
    tracing::debug!(format = format.name(), "decompressing download");

    let limit = OutputLimit {
        format,
        max_size,
        ratio_cap: limits.ratio_cap(len),
        max_ratio: limits.max_ratio,
    };
    // Dropped on every error path, which deletes the partial payload at once.
    let mut dst = NamedTempFile::new_in(temp_dir).map_err(CacheError::internal)?;
    let out = dst.as_file_mut();
    match format {
        Format::Gzip => copy_limited(MultiGzDecoder::new(file), out, &limit)?,
        Format::Zlib => copy_limited(ZlibDecoder::new(file), out, &limit)?,
        Format::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::new(file).map_err(|e| malformed(format, e))?;
            copy_limited(decoder, out, &limit)?
        }
        Format::Zip => unzip_single(file, out, &limit)?,
        Format::Cab => uncab_single(file, out, &limit)?,
        Format::Xz => copy_limited(
            liblzma::read::XzDecoder::new_multi_decoder(file),
            out,
            &limit,
        )?,
        Format::Bzip2 => copy_limited(bzip2::read::MultiBzDecoder::new(file), out, &limit)?,
    };
    out.flush().map_err(CacheError::internal)?;
    out.rewind().map_err(CacheError::internal)?;
    Ok(Some(dst))
}

/// What one unpacking may write.
struct OutputLimit {
    format: Format,
    max_size: u64,
    /// Bytes allowed by the ratio limit (and its floor).
    ratio_cap: u64,
    max_ratio: u64,
}

impl OutputLimit {
    fn check(&self, total: u64) -> CacheResult<()> {
        let name = self.format.name();
        if total > self.max_size {
            return Err(too_large(format!(
                "decompressed {name} payload exceeds the limit of {} bytes",
                self.max_size
            )));
        }
        if total > self.ratio_cap {
            return Err(CacheError::Malformed(format!(
                "decompressed {name} payload exceeds {} times its compressed size \
                 (max_decompression_ratio); a decompression bomb",
                self.max_ratio
            )));
        }
        Ok(())
    }
}

/// Copies until EOF, failing as soon as more came out than `limit` allows, so a small
/// decompression bomb cannot fill the disk.
fn copy_limited(mut reader: impl Read, writer: &mut File, limit: &OutputLimit) -> CacheResult<u64> {
    let mut buf = vec![0u8; COPY_BUF];
    let mut total: u64 = 0;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Upstream counts every decoding failure as a corrupt file: that is far more
            // likely than a local read error on a file just written.
            Err(e) => return Err(malformed(limit.format, e)),
        };
        total = total.saturating_add(n as u64);
        limit.check(total)?;
        writer.write_all(&buf[..n]).map_err(CacheError::internal)?;
    }
    Ok(total)
}

fn unzip_single(file: File, out: &mut File, limit: &OutputLimit) -> CacheResult<u64> {
    let format = Format::Zip;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| malformed(format, e))?;
    // Directory entries are skipped; upstream rejects any archive whose entry count is
    // not one, which would refuse a zip that merely records its folder.
    let mut only_file = None;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| malformed(format, e))?;
        if entry.is_dir() {
            continue;
        }
        if only_file.is_some() {
            return Err(CacheError::Malformed(
                "zip archive contains more than one file".to_owned(),
            ));
        }
        only_file = Some(index);
    }
    let index = only_file
        .ok_or_else(|| CacheError::Malformed("zip archive contains no file".to_owned()))?;
    let entry = archive.by_index(index).map_err(|e| malformed(format, e))?;
    copy_limited(entry, out, limit)
}

fn uncab_single(file: File, out: &mut File, limit: &OutputLimit) -> CacheResult<u64> {
    // The `cab` crate indexes its block table with offsets from the archive (a file
    // entry past the folder's last data block panics), so it is a parser that can
    // panic on hostile input: isolated, that costs one download or upload.
    crate::error::isolate("cab", || {
        let format = Format::Cab;
        let mut cabinet = cab::Cabinet::new(file).map_err(|e| malformed(format, e))?;
        let names: Vec<String> = cabinet
            .folder_entries()
            .flat_map(|folder| folder.file_entries())
            .map(|entry| entry.name().to_owned())
            .take(2)
            .collect();
        let name = match names.as_slice() {
            [name] => name,
            [] => return Err(CacheError::Malformed("CAB archive is empty".to_owned())),
            _ => {
                return Err(CacheError::Malformed(
                    "CAB archive contains more than one file".to_owned(),
                ));
            }
        };
        let reader = cabinet.read_file(name).map_err(|e| malformed(format, e))?;
        copy_limited(reader, out, limit)
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};

    use flate2::Compression;
    use flate2::write::{GzEncoder, ZlibEncoder};

    use super::*;

    const PAYLOAD: &[u8] = b"MZ\x90\x00 pretend this is a PE file with some repetition repetition";

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn write(&self, name: &str, bytes: &[u8]) -> std::path::PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        }

        fn decompress(&self, bytes: &[u8], max: u64) -> CacheResult<Option<Vec<u8>>> {
            let path = self.write("input", bytes);
            let out = decompress_file(&path, self.dir.path(), max)?;
            Ok(out.map(|f| {
                assert_eq!(f.path().parent(), Some(self.dir.path()));
                std::fs::read(f.path()).unwrap()
            }))
        }
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn zip_of(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        for (name, data) in entries {
            match data {
                Some(data) => {
                    writer.start_file(*name, options).unwrap();
                    writer.write_all(data).unwrap();
                }
                None => writer.add_directory(*name, options).unwrap(),
            }
        }
        writer.finish().unwrap().into_inner()
    }

    fn cab_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = cab::CabinetBuilder::new();
        {
            let folder = builder.add_folder(cab::CompressionType::MsZip);
            for (name, _) in entries {
                folder.add_file(*name);
            }
        }
        let mut writer = builder.build(Cursor::new(Vec::new())).unwrap();
        let mut data = entries.iter();
        while let Some(mut file) = writer.next_file().unwrap() {
            file.write_all(data.next().unwrap().1).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }

    #[test]
    fn xz_and_bzip2_are_unwrapped() {
        let fx = Fixture::new();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
        xz.write_all(PAYLOAD).unwrap();
        let xz = xz.finish().unwrap();
        assert_eq!(fx.decompress(&xz, 1 << 20).unwrap().unwrap(), PAYLOAD);
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        bz.write_all(PAYLOAD).unwrap();
        let bz = bz.finish().unwrap();
        assert_eq!(fx.decompress(&bz, 1 << 20).unwrap().unwrap(), PAYLOAD);
        // A truncated stream is a corrupt upload, not a crash.
        let err = fx.decompress(&bz[..bz.len() / 2], 1 << 20).unwrap_err();
        assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");
    }

    #[test]
    fn uncompressed_is_left_alone() {
        let fx = Fixture::new();
        assert_eq!(fx.decompress(PAYLOAD, 1 << 20).unwrap(), None);
        assert_eq!(fx.decompress(b"", 1 << 20).unwrap(), None);
        assert_eq!(fx.decompress(b"\x1f", 1 << 20).unwrap(), None);
    }

    #[test]
    fn uncompressed_over_limit_is_too_large() {
        let fx = Fixture::new();
        let err = fx.decompress(PAYLOAD, 10).unwrap_err();
        assert!(matches!(err, CacheError::TooLarge(_)), "{err:?}");
    }

    #[test]
    fn gzip_roundtrip() {
        let fx = Fixture::new();
        let out = fx.decompress(&gzip(PAYLOAD), 1 << 20).unwrap();
        assert_eq!(out.as_deref(), Some(PAYLOAD));
    }

    #[test]
    fn multi_member_gzip() {
        let fx = Fixture::new();
        let mut data = gzip(b"first ");
        data.extend(gzip(b"second"));
        let out = fx.decompress(&data, 1 << 20).unwrap();
        assert_eq!(out.as_deref(), Some(&b"first second"[..]));
    }

    #[test]
    fn zstd_roundtrip() {
        let fx = Fixture::new();
        let data = zstd::encode_all(PAYLOAD, 3).unwrap();
        let out = fx.decompress(&data, 1 << 20).unwrap();
        assert_eq!(out.as_deref(), Some(PAYLOAD));
    }

    #[test]
    fn zlib_roundtrip() {
        let fx = Fixture::new();
        let mut enc = ZlibEncoder::new(Vec::new(), Compression::default());
        enc.write_all(PAYLOAD).unwrap();
        let out = fx.decompress(&enc.finish().unwrap(), 1 << 20).unwrap();
        assert_eq!(out.as_deref(), Some(PAYLOAD));
    }

    #[test]
    fn zip_single_file() {
        let fx = Fixture::new();
        let data = zip_of(&[("dir/", None), ("dir/crash.pdb", Some(PAYLOAD))]);
        let out = fx.decompress(&data, 1 << 20).unwrap();
        assert_eq!(out.as_deref(), Some(PAYLOAD));
    }

    #[test]
    fn zip_with_two_files_is_malformed() {
        let fx = Fixture::new();
        let data = zip_of(&[("a.pdb", Some(PAYLOAD)), ("b.pdb", Some(PAYLOAD))]);
        let err = fx.decompress(&data, 1 << 20).unwrap_err();
        assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");
    }

    #[test]
    fn cab_single_file() {
        let fx = Fixture::new();
        let data = cab_of(&[("crash.pdb", PAYLOAD)]);
        assert_eq!(&data[..4], b"MSCF");
        let out = fx.decompress(&data, 1 << 20).unwrap();
        assert_eq!(out.as_deref(), Some(PAYLOAD));
    }

    #[test]
    fn cab_with_two_files_is_malformed() {
        let fx = Fixture::new();
        let data = cab_of(&[("a.pdb", PAYLOAD), ("b.pdb", PAYLOAD)]);
        let err = fx.decompress(&data, 1 << 20).unwrap_err();
        assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");
    }

    /// Found by the `decompress` fuzz target: archives that panic inside the `cab`
    /// crate (a file entry past its folder's absent data blocks; a block table whose
    /// sizes make it subtract below zero).
    #[test]
    fn cab_archives_that_panic_the_reader_are_malformed() {
        let fx = Fixture::new();
        let entry_past_blocks: &[u8] = &[
            0x4d, 0x53, 0x43, 0x46, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00,
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x46, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x54,
        ];
        let block_underflow: &[u8] = &[
            0x4d, 0x53, 0x43, 0x46, 0x00, 0x00, 0x00, 0x00, 0x2a, 0x0c, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00,
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x46, 0x00, 0x00, 0x00, 0x21, 0x00,
            0x00, 0x00, 0xdc, 0x0b, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x96,
            0xc9, 0x6e, 0xdb, 0x48, 0x58, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x27, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x35, 0x00,
        ];
        for data in [entry_past_blocks, block_underflow] {
            let err = fx.decompress(data, 1 << 20).unwrap_err();
            assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");
        }
    }

    #[test]
    fn corrupt_gzip_is_malformed() {
        let fx = Fixture::new();
        let mut data = gzip(PAYLOAD);
        let mid = data.len() / 2;
        for byte in &mut data[10..mid] {
            *byte ^= 0x5a;
        }
        let err = fx.decompress(&data, 1 << 20).unwrap_err();
        assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");

        let truncated = &gzip(PAYLOAD)[..12];
        let err = fx.decompress(truncated, 1 << 20).unwrap_err();
        assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");
    }

    #[test]
    fn corrupt_archives_are_malformed() {
        let fx = Fixture::new();
        for data in [
            &b"PK\x03\x04 not really a zip archive"[..],
            &b"MSCF not really a cabinet at all......"[..],
            &b"\x28\xb5\x2f\xfd garbage garbage"[..],
        ] {
            let err = fx.decompress(data, 1 << 20).unwrap_err();
            assert!(matches!(err, CacheError::Malformed(_)), "{err:?}");
        }
    }

    #[test]
    fn ratio_limit_refuses_bombs_as_malformed() {
        let fx = Fixture::new();
        let big = vec![0u8; 4 << 20];
        let limits = |max_ratio, ratio_floor| DecompressLimits {
            max_size: u64::MAX,
            max_ratio,
            ratio_floor,
        };
        let unpack = |data: &[u8], limits: DecompressLimits| {
            let path = fx.write("input", data);
            decompress_bounded(&path, fx.dir.path(), &limits).map(|out| out.is_some())
        };
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
        xz.write_all(&big).unwrap();
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        bz.write_all(&big).unwrap();
        for data in [
            gzip(&big),
            zstd::encode_all(&big[..], 3).unwrap(),
            xz.finish().unwrap(),
            bz.finish().unwrap(),
            zip_of(&[("big", Some(&big))]),
            cab_of(&[("big", &big)]),
        ] {
            let ratio = big.len() as u64 / data.len() as u64;
            assert!(ratio > 200, "{ratio}");
            let err = unpack(&data, limits(200, 1 << 20)).unwrap_err();
            assert!(matches!(&err, CacheError::Malformed(_)), "{err:?}");
            // Within the floor, or under a ratio it stays below, the same file is fine.
            assert_eq!(unpack(&data, limits(200, 4 << 20)), Ok(true));
            assert_eq!(unpack(&data, limits(ratio + 1, 0)), Ok(true));
            assert_eq!(unpack(&data, limits(u64::MAX, 0)), Ok(true));
        }
        // The refused payload is gone at once: only the input is left in the directory.
        let left: Vec<_> = std::fs::read_dir(fx.dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        // The size limit keeps its own error where it is the lower one.
        let bounded = DecompressLimits {
            max_size: 1 << 20,
            ..limits(200, 2 << 20)
        };
        let err = unpack(&gzip(&big), bounded).unwrap_err();
        assert!(matches!(&err, CacheError::TooLarge(_)), "{err:?}");
    }

    #[test]
    fn decompression_bomb_is_too_large() {
        let fx = Fixture::new();
        let big = vec![0u8; 1 << 20];
        for data in [
            gzip(&big),
            zstd::encode_all(&big[..], 3).unwrap(),
            zip_of(&[("big", Some(&big))]),
            cab_of(&[("big", &big)]),
        ] {
            assert!(data.len() < 64 * 1024);
            let err = fx.decompress(&data, 64 * 1024).unwrap_err();
            assert!(matches!(err, CacheError::TooLarge(_)), "{err:?}");
        }
        // Exactly at the limit is fine.
        let out = fx.decompress(&gzip(&big), 1 << 20).unwrap().unwrap();
        assert_eq!(out.len(), 1 << 20);
    }
}
