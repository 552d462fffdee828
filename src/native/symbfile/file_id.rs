//! The FileID that names an executable in Elastic's profiler (and in the `file_id` of a
//! `/symbolicate` module), in the forms clients send it.

use std::fmt;
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
}
