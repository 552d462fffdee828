//! Object identity as seen by the source layer: which object is wanted and what kind it is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use symbolic::common::{CodeId, DebugId, Uuid, split_path};

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
    /// Other ids the same file may be stored under, looked for only when this one finds
    /// nothing: a Wasm build id under the other reading of its section
    /// ([`Self::wasm_build_id_alternates`]), and an ELF module whose code id is no build
    /// id but Breakpad's hash of its code (16 bytes, what a minidump's CodeView record
    /// holds for a library linked without one: the bytes of its debug id) under that
    /// debug id alone, as a file without a build id is stored.
    pub fn lookup_alternates(&self) -> Vec<ObjectId> {
        match self.object_type {
            ObjectType::Wasm => self.wasm_build_id_alternates(),
            ObjectType::Elf if self.code_id_is_breakpad_hash() => vec![ObjectId {
                code_id: None,
                ..self.clone()
            }],
            _ => Vec::new(),
        }
    }

    /// Whether the code id is the debug id's 16 bytes, as Breakpad's hash of a library
    /// without a build id makes both (a 16-byte build id, from `--build-id=md5` or
    /// `uuid`, looks the same, and costs one more location looked at).
    fn code_id_is_breakpad_hash(&self) -> bool {
        let (Some(code_id), Some(debug_id)) = (&self.code_id, &self.debug_id) else {
            return false;
        };
        let Ok(bytes) = hex::decode(code_id.as_str()) else {
            return false;
        };
        bytes.len() == 16
            && DebugId::from_guid_age(&bytes, 0).is_ok_and(|id| id.uuid() == debug_id.uuid())
    }

    /// A WebAssembly module's ids under the other reading of its `build_id` section,
    /// looked for after the id as sent. symbolic (so upstream, sentry-cli and the SDKs that
    /// follow them) takes the section's bytes as they are; the tool-conventions spec makes
    /// the section one length-prefixed byte vector, so a reader that follows it strips the
    /// leading LEB128 length (getsentry/symbolic#1069). A code id that starts with its own
    /// remaining length may be the spec's form, and is tried stripped; any code id may be
    /// the spec's reading of a module stored by symbolic's, and is tried with its length
    /// prepended. Both, since an id can look like either (`0f…` of 16 bytes). The debug id
    /// follows each code id, from its first 16 bytes, as symbolic derives it.
    pub fn wasm_build_id_alternates(&self) -> Vec<ObjectId> {
        let id = self;
        if id.object_type != ObjectType::Wasm {
            return Vec::new();
        }
        let Some(bytes) = id
            .code_id
            .as_ref()
            .and_then(|c| hex::decode(c.as_str()).ok())
        else {
            return Vec::new();
        };
        if bytes.is_empty() {
            return Vec::new();
        }
        let mut others = Vec::with_capacity(2);
        if let Some((length, prefix)) = read_leb128(&bytes)
            && prefix < bytes.len()
            && length == (bytes.len() - prefix) as u64
        {
            others.push(bytes[prefix..].to_vec());
        }
        let mut prefixed = leb128(bytes.len() as u64);
        prefixed.extend_from_slice(&bytes);
        others.push(prefixed);
        others
            .into_iter()
            .map(|other| ObjectId {
                debug_id: match other.get(..16) {
                    Some(first) => Uuid::from_slice(first).ok().map(DebugId::from_uuid),
                    None => id.debug_id,
                },
                code_id: Some(CodeId::from_binary(&other)),
                ..id.clone()
            })
            .collect()
    }

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

/// An unsigned LEB128 number at the start of `bytes`, and how many bytes it took.
fn read_leb128(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            return Some((value, index + 1));
        }
    }
    None
}

fn leb128(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wasm(code_id: &str) -> ObjectId {
        ObjectId {
            code_id: Some(CodeId::new(code_id.into())),
            object_type: ObjectType::Wasm,
            ..Default::default()
        }
    }

    fn code_ids(ids: Vec<ObjectId>) -> Vec<String> {
        ids.iter()
            .map(|id| id.code_id.as_ref().unwrap().as_str().to_owned())
            .collect()
    }

    /// symbolic#1069: a code id is tried with its length prepended, and, when it starts
    /// with its own remaining length, stripped of it; each with its own debug id.
    /// A minidump's ELF module whose code id is its debug id's 16 bytes (Breakpad's hash
    /// of a library without a build id) is also looked for without it; one with a real
    /// 20-byte build id is not.
    #[test]
    fn an_elf_code_id_that_is_breakpads_hash_is_also_dropped() {
        let hashed = ObjectId {
            code_id: Some(CodeId::new("ea868632608ea4a50137ff898116ced2".into())),
            debug_id: Some("328686ea-8e60-a5a4-0137-ff898116ced2".parse().unwrap()),
            object_type: ObjectType::Elf,
            ..Default::default()
        };
        let alternates = hashed.lookup_alternates();
        assert_eq!(alternates.len(), 1);
        assert_eq!(alternates[0].code_id, None);
        assert_eq!(alternates[0].debug_id, hashed.debug_id);
        let built = ObjectId {
            code_id: Some(CodeId::new(
                "8ed1e949a972843f3312cbcd487caee7ae2cc52d".into(),
            )),
            debug_id: Some("49e9d18e-72a9-3f84-3312-cbcd487caee7".parse().unwrap()),
            ..hashed.clone()
        };
        assert!(built.lookup_alternates().is_empty());
        let unrelated = ObjectId {
            debug_id: Some("49e9d18e-72a9-3f84-3312-cbcd487caee7".parse().unwrap()),
            ..hashed
        };
        assert!(unrelated.lookup_alternates().is_empty());
    }

    #[test]
    fn wasm_build_ids_are_tried_under_both_readings() {
        let alternates = wasm("67e9247c814e392ba027dbde6748fcbf").wasm_build_id_alternates();
        assert_eq!(
            code_ids(alternates.clone()),
            ["1067e9247c814e392ba027dbde6748fcbf"]
        );
        assert_eq!(
            alternates[0].debug_id,
            Some("1067e924-7c81-4e39-2ba0-27dbde6748fc".parse().unwrap())
        );
        assert_eq!(
            code_ids(wasm("1067e9247c814e392ba027dbde6748fcbf").wasm_build_id_alternates()),
            [
                "67e9247c814e392ba027dbde6748fcbf",
                "111067e9247c814e392ba027dbde6748fcbf"
            ]
        );
        // A raw id that happens to start with its remaining length is tried both ways.
        assert_eq!(
            code_ids(wasm("0f1e2d3c4b5a69788796a5b4c3d2e1f0").wasm_build_id_alternates()),
            [
                "1e2d3c4b5a69788796a5b4c3d2e1f0",
                "100f1e2d3c4b5a69788796a5b4c3d2e1f0"
            ]
        );
        // Only Wasm, and only hex.
        let elf = ObjectId {
            object_type: ObjectType::Elf,
            ..wasm("67e9247c814e392ba027dbde6748fcbf")
        };
        assert!(elf.wasm_build_id_alternates().is_empty());
        assert!(wasm("xyz").wasm_build_id_alternates().is_empty());
    }

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
