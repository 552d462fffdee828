//! Where everything lives under the store's directory, and the two kinds of upload.
//!
//! Every path component built here is hex digits, a fixed literal, or a decimal
//! number, so no request data reaches a path as text.

use std::path::PathBuf;

use super::file_id::FileId;

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

    /// Beside the stored file: the hex SHA-256 of its content, by which the replicas of
    /// a fleet tell one upload of a FileID from another of the same size.
    pub fn checksum_name(self) -> &'static str {
        match self {
            SymbfileKind::Ranges => "ranges.sha256",
            SymbfileKind::ReturnPads => "returnpads.sha256",
        }
    }
}

/// Everything being written, renamed into place when it is whole.
pub const TMP_DIR: &str = "tmp";
/// Completed uploads, one directory per FileID, fanned out by its first byte.
pub const FILES_DIR: &str = "files";
/// Parts of uploads still coming in.
pub const PENDING_DIR: &str = "pending";

/// The directory of one FileID's symbfiles, relative to the store.
pub fn file_dir(id: FileId) -> PathBuf {
    let hex = id.to_string();
    [FILES_DIR, &hex[..2], &hex].iter().collect()
}

/// A completed symbfile of `kind`, relative to the store.
pub fn symbfile_path(id: FileId, kind: SymbfileKind) -> PathBuf {
    file_dir(id).join(kind.file_name())
}

/// The checksum of the completed symbfile of `kind`, relative to the store.
pub fn checksum_path(id: FileId, kind: SymbfileKind) -> PathBuf {
    file_dir(id).join(kind.checksum_name())
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
