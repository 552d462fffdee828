//! Uploaded symbfiles as a source: the FileID that names an executable in Elastic's
//! profiler (and in the `file_id` of a `/symbolicate` module), the two kinds of upload,
//! and where each lives under the store's directory. Pure: no I/O.
//!
//! Every path component built here is hex digits, a fixed literal, or a decimal
//! number, so no request data reaches a path as text.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// The 128-bit id of an executable file, as the profiler computes it (a truncated
/// SHA-256 over the file's head, tail and length).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u128);

/// Why a FileID string was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid FileID {0:?}: expected 16 bytes in base64 (URL-safe or standard) or 32 hex digits"
)]
pub struct InvalidFileId(pub String);

fn engine(alphabet: &base64::alphabet::Alphabet) -> GeneralPurpose {
    GeneralPurpose::new(
        alphabet,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    )
}

impl FromStr for FileId {
    type Err = InvalidFileId;

    /// Base64 is what the upload headers and Elasticsearch carry (URL-safe without
    /// padding; the standard alphabet as Elasticsearch returns binary fields); hex is
    /// the agent's text form. The forms cannot be confused: 32 hex digits read as
    /// base64 are 24 bytes, not 16.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidFileId(s.chars().take(64).collect());
        let s = s.trim();
        for alphabet in [&base64::alphabet::URL_SAFE, &base64::alphabet::STANDARD] {
            if let Ok(bytes) = engine(alphabet).decode(s)
                && let Ok(bytes) = <[u8; 16]>::try_from(bytes.as_slice())
            {
                return Ok(FileId(u128::from_be_bytes(bytes)));
            }
        }
        if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return u128::from_str_radix(s, 16)
                .map(FileId)
                .map_err(|_| invalid());
        }
        Err(invalid())
    }
}

impl FileId {
    /// The form Elasticsearch indices and the upload header use.
    pub fn to_base64(self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.0.to_be_bytes())
    }
}

/// Lower-case hex, 32 digits: the canonical form in responses and on disk.
impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Which upload endpoint a symbfile came through. Both may carry any record type;
/// the profiler sends ranges (all addresses) and return pads (call sites) apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SymbfileKind {
    Ranges,
    ReturnPads,
}

impl SymbfileKind {
    pub const ALL: [SymbfileKind; 2] = [SymbfileKind::Ranges, SymbfileKind::ReturnPads];

    pub fn as_str(self) -> &'static str {
        match self {
            SymbfileKind::Ranges => "ranges",
            SymbfileKind::ReturnPads => "returnpads",
        }
    }

    /// The file a completed upload of this kind is stored as, in its FileID's directory.
    pub fn file_name(self) -> &'static str {
        match self {
            SymbfileKind::Ranges => "ranges.symbfile",
            SymbfileKind::ReturnPads => "returnpads.symbfile",
        }
    }
}

/// Completed uploads, one directory per FileID, fanned out by its first byte.
pub const FILES_DIR: &str = "files";
/// Parts of uploads still coming in.
pub const PENDING_DIR: &str = "pending";

/// The directory of one FileID's symbfiles and index, relative to the store.
pub fn file_dir(id: FileId) -> PathBuf {
    let hex = id.to_string();
    [FILES_DIR, &hex[..2], &hex].iter().collect()
}

/// A completed symbfile of `kind`, relative to the store.
pub fn symbfile_path(id: FileId, kind: SymbfileKind) -> PathBuf {
    file_dir(id).join(kind.file_name())
}

/// The directory collecting the parts of one upload, relative to the store. The part
/// count is part of the name: a client that restarts with another split starts anew.
pub fn pending_dir(id: FileId, kind: SymbfileKind, parts: u32) -> PathBuf {
    [PENDING_DIR, &format!("{}-{id}-{parts}", kind.as_str())]
        .iter()
        .collect()
}

/// The name of part `part` inside its upload's pending directory.
pub fn part_name(part: u32) -> String {
    format!("part-{part:08}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_ids_in_base64_and_hex() {
        let id: FileId = "d--nFqkSpJIXRFeHMp_Smg".parse().unwrap();
        assert_eq!(id.to_string(), "77efa716a912a49217445787329fd29a");
        assert_eq!(id.to_base64(), "d--nFqkSpJIXRFeHMp_Smg");
        assert_eq!("d++nFqkSpJIXRFeHMp/Smg==".parse::<FileId>(), Ok(id));
        assert_eq!("77EFA716A912A49217445787329FD29A".parse::<FileId>(), Ok(id));
        for bad in [
            "",
            "d--nFqkSpJIXRFeHMp_Sm",
            "abc",
            "../../etc/passwd",
            "zz".repeat(16).as_str(),
        ] {
            assert!(bad.parse::<FileId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_are_built_from_hex_only() {
        let id = FileId(0xab << 120 | 1);
        assert_eq!(
            symbfile_path(id, SymbfileKind::ReturnPads),
            PathBuf::from("files/ab/ab000000000000000000000000000001/returnpads.symbfile")
        );
        assert_eq!(
            pending_dir(id, SymbfileKind::Ranges, 3),
            PathBuf::from("pending/ranges-ab000000000000000000000000000001-3")
        );
        assert_eq!(part_name(7), "part-00000007");
    }
}
