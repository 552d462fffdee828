//! Object identity as seen by the source layer: which object is wanted and what kind it is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use symbolic::common::{CodeId, DebugId, split_path};

/// The kind of executable object a module refers to.
///
/// Requests carry this as a free-form string; anything unrecognised must not fail the request,
/// it just degrades to [`ObjectType::Unknown`] (upstream does the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectType {
    Elf,
    Macho,
    Pe,
    Wasm,
    /// A PE carrying .NET code, whose debug companion is a Portable PDB.
    PeDotnet,
    #[default]
    #[serde(other)]
    Unknown,
}

impl ObjectType {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectType::Elf => "elf",
            ObjectType::Macho => "macho",
            ObjectType::Pe => "pe",
            ObjectType::Wasm => "wasm",
            ObjectType::PeDotnet => "pe_dotnet",
            ObjectType::Unknown => "unknown",
        }
    }
}

impl FromStr for ObjectType {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "elf" => ObjectType::Elf,
            "macho" => ObjectType::Macho,
            "pe" => ObjectType::Pe,
            "wasm" => ObjectType::Wasm,
            "pe_dotnet" => ObjectType::PeDotnet,
            _ => ObjectType::Unknown,
        })
    }
}

impl fmt::Display for ObjectType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything known about an object that is used to locate its files on a source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub debug_id: Option<DebugId>,
    pub code_id: Option<CodeId>,
    /// Path of the debug companion file as reported by the client (any OS path flavour).
    pub debug_file: Option<String>,
    /// Path of the executable or library as reported by the client (any OS path flavour).
    pub code_file: Option<String>,
    /// Checksum of the debug file, e.g. the Portable PDB checksum some servers require.
    pub debug_checksum: Option<String>,
    /// A hint only: the actual file found may be of another type.
    pub object_type: ObjectType,
}

impl From<DebugId> for ObjectId {
    fn from(debug_id: DebugId) -> Self {
        ObjectId {
            debug_id: Some(debug_id),
            ..ObjectId::default()
        }
    }
}

impl ObjectId {
    /// Last component of `code_file`, splitting on both `/` and `\`.
    pub fn code_file_basename(&self) -> Option<&str> {
        self.code_file.as_deref().map(basename)
    }

    /// Last component of `debug_file`, splitting on both `/` and `\`.
    pub fn debug_file_basename(&self) -> Option<&str> {
        self.debug_file.as_deref().map(basename)
    }

    /// [`Self::code_file_basename`], but only if it is safe to embed in a source path.
    pub fn validated_code_file_basename(&self) -> Option<&str> {
        self.code_file.as_deref().and_then(safe_file_name)
    }

    /// [`Self::debug_file_basename`], but only if it is safe to embed in a source path.
    pub fn validated_debug_file_basename(&self) -> Option<&str> {
        self.debug_file.as_deref().and_then(safe_file_name)
    }
}

fn basename(path: &str) -> &str {
    split_path(path).1
}

/// The basename of `path` if it can be used as a single path segment of a candidate location.
///
/// Upstream rejects names of 256 bytes or more and names containing control characters. On top
/// of that we reject names that are not a real file name segment (empty, `.` and `..`): those are
/// the only remaining basenames that could make a generated location point outside the source's
/// base (for example `/` yields an empty basename, which would turn `{name}/{id}/{name}` into an
/// absolute path). The basename can never contain `/` or `\` because both are split on.
pub(crate) fn safe_file_name(path: &str) -> Option<&str> {
    let name = basename(path);
    let valid =
        name.len() < 256 && !name.contains(char::is_control) && !matches!(name, "" | "." | "..");
    valid.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_type_serde() {
        for (s, ty) in [
            ("elf", ObjectType::Elf),
            ("macho", ObjectType::Macho),
            ("pe", ObjectType::Pe),
            ("wasm", ObjectType::Wasm),
            ("pe_dotnet", ObjectType::PeDotnet),
            ("unknown", ObjectType::Unknown),
        ] {
            let json = format!("\"{s}\"");
            assert_eq!(serde_json::from_str::<ObjectType>(&json).unwrap(), ty);
            assert_eq!(serde_json::to_string(&ty).unwrap(), json);
            assert_eq!(s.parse::<ObjectType>().unwrap(), ty);
            assert_eq!(ty.to_string(), s);
        }
        // Unknown values are tolerated, not rejected.
        let ty: ObjectType = serde_json::from_str("\"coff\"").unwrap();
        assert_eq!(ty, ObjectType::Unknown);
        assert_eq!("ELF".parse::<ObjectType>().unwrap(), ObjectType::Unknown);
        assert_eq!(ObjectType::default(), ObjectType::Unknown);
    }

    #[test]
    fn basenames_split_both_separators() {
        let id = ObjectId {
            code_file: Some("C:\\projects\\Release\\crash.exe".into()),
            debug_file: Some("/usr/lib/debug/libc.so.6".into()),
            ..Default::default()
        };
        assert_eq!(id.code_file_basename(), Some("crash.exe"));
        assert_eq!(id.debug_file_basename(), Some("libc.so.6"));
        assert_eq!(ObjectId::default().code_file_basename(), None);

        let mixed = ObjectId {
            debug_file: Some("..\\..\\etc/passwd".into()),
            ..Default::default()
        };
        assert_eq!(mixed.debug_file_basename(), Some("passwd"));
        // Trailing separators are ignored, like upstream.
        let trailing = ObjectId {
            code_file: Some("C:\\dir\\foo.dll\\".into()),
            ..Default::default()
        };
        assert_eq!(trailing.code_file_basename(), Some("foo.dll"));
    }

    #[test]
    fn validated_names() {
        let too_long = "foobar".repeat(50);
        assert_eq!(safe_file_name(&too_long), None);
        assert_eq!(safe_file_name(&format!("a/few\\segments/{too_long}")), None);
        assert_eq!(safe_file_name(&format!("{too_long}/last")), Some("last"));
        assert_eq!(
            safe_file_name("some\ninvalid\0stuff\r/correct"),
            Some("correct")
        );
        assert_eq!(safe_file_name("tab\there"), None);
        assert_eq!(safe_file_name(&"a".repeat(255)), Some(&*"a".repeat(255)));

        for bad in ["", "/", "\\", "///", ".", "..", "foo/..", "foo\\.", "..\\"] {
            assert_eq!(safe_file_name(bad), None, "{bad:?}");
        }
        assert_eq!(safe_file_name("..\\..\\etc\\passwd"), Some("passwd"));
        assert_eq!(safe_file_name("..."), Some("..."));
        assert_eq!(safe_file_name(".hidden"), Some(".hidden"));
    }

    #[test]
    fn from_debug_id() {
        let debug_id: DebugId = "3249d99d-0c40-4931-8610-f4e4fb0b6936-1".parse().unwrap();
        let id = ObjectId::from(debug_id);
        assert_eq!(id.debug_id, Some(debug_id));
        assert_eq!(id.object_type, ObjectType::Unknown);
        assert!(id.code_id.is_none() && id.debug_file.is_none());
    }
}
