//! Per-source filters deciding whether a source is asked for a file at all.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::filetype::FileType;
use super::types::ObjectId;

/// Path patterns are "fuzzy": ASCII case is ignored and `*` may cross directory separators, so
/// that `*electron*` matches a full Windows or Unix path.
const GLOB_OPTIONS: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: false,
    require_literal_separator: false,
    require_literal_leading_dot: false,
};

/// A glob pattern that (de)serializes as its source string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Glob(pub glob::Pattern);

impl Glob {
    /// Matches with the source filter semantics (case-insensitive, `\` already normalised).
    pub fn matches_path(&self, path: &str) -> bool {
        self.0.matches_with(path, GLOB_OPTIONS)
    }
}

impl FromStr for Glob {
    type Err = glob::PatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        glob::Pattern::new(s).map(Glob)
    }
}

impl Deref for Glob {
    type Target = glob::Pattern;

    fn deref(&self) -> &glob::Pattern {
        &self.0
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl Serialize for Glob {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Glob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Criteria to skip a source for some objects or file types.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceFilters {
    /// File types this source serves; empty means all.
    pub filetypes: Vec<FileType>,
    /// If non-empty, the object's code or debug file path must match one of these.
    ///
    /// An object without any path never matches a non-empty list.
    pub path_patterns: Vec<Glob>,
    /// Portable PDBs are only requested when the object carries a `debug_checksum`.
    ///
    /// Exists for the NuGet symbol server, which refuses Portable PDB downloads without a
    /// `SymbolChecksum` header.
    pub requires_checksum: bool,
}

impl SourceFilters {
    /// Whether `filetype` of `object_id` may be looked up on this source.
    pub fn is_allowed(&self, object_id: &ObjectId, filetype: FileType) -> bool {
        // Upstream scopes the checksum requirement to Portable PDBs: they are the only files a
        // checksum exists for, so other file types of such a source stay reachable.
        if self.requires_checksum
            && filetype == FileType::PortablePdb
            && object_id.debug_checksum.is_none()
        {
            return false;
        }

        (self.filetypes.is_empty() || self.filetypes.contains(&filetype))
            && matches_path_patterns(object_id, &self.path_patterns)
    }
}

/// Whether the object's code file or debug file matches any of `patterns`.
///
/// An empty pattern list matches everything. Backslashes are turned into slashes first, so
/// Windows paths can be matched with `/` patterns.
pub fn matches_path_patterns(object_id: &ObjectId, patterns: &[Glob]) -> bool {
    if patterns.is_empty() {
        return true;
    }

    let candidates: Vec<String> = [&object_id.code_file, &object_id.debug_file]
        .into_iter()
        .flatten()
        .map(|path| path.replace('\\', "/"))
        .collect();

    patterns
        .iter()
        .any(|pattern| candidates.iter().any(|path| pattern.matches_path(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(p: &str) -> Glob {
        p.parse().unwrap()
    }

    fn kernel32() -> ObjectId {
        ObjectId {
            code_file: Some("C:\\Windows\\System32\\kernel32.dll".into()),
            ..Default::default()
        }
    }

    #[test]
    fn empty_patterns_match_everything() {
        assert!(matches_path_patterns(&kernel32(), &[]));
        assert!(matches_path_patterns(&ObjectId::default(), &[]));
    }

    #[test]
    fn no_paths_never_match() {
        assert!(!matches_path_patterns(
            &ObjectId::default(),
            &[pattern("*")]
        ));
    }

    #[test]
    fn windows_paths_case_insensitive() {
        assert!(matches_path_patterns(
            &kernel32(),
            &[pattern("c:/windows/*")]
        ));
        assert!(matches_path_patterns(
            &kernel32(),
            &[pattern("?:/windows/*")]
        ));
        assert!(matches_path_patterns(
            &kernel32(),
            &[pattern("C:/WINDOWS/**")]
        ));
        assert!(!matches_path_patterns(
            &kernel32(),
            &[pattern("d:/windows/**")]
        ));
        // A later pattern can match when an earlier one does not.
        assert!(matches_path_patterns(
            &kernel32(),
            &[pattern("d:/*"), pattern("*kernel32*")]
        ));
    }

    #[test]
    fn debug_file_also_considered() {
        let id = ObjectId {
            code_file: Some("/usr/lib/libfoo.so".into()),
            debug_file: Some("C:\\build\\foo.pdb".into()),
            ..Default::default()
        };
        assert!(matches_path_patterns(&id, &[pattern("c:/build/*.pdb")]));
        assert!(matches_path_patterns(&id, &[pattern("*/libfoo.so")]));
        assert!(!matches_path_patterns(&id, &[pattern("*bar*")]));
    }

    /// A small set of substring patterns covers every path shape seen for Electron apps.
    #[test]
    fn electron_style_patterns() {
        let patterns: Vec<Glob> = [
            "*electron*",
            "*ffmpeg*",
            "*libEGL*",
            "*libGLESv2*",
            "*slack*",
        ]
        .into_iter()
        .map(pattern)
        .collect();
        let files = [
            (
                "C:\\Program Files\\WindowsApps\\Slack_4.35\\app\\Slack.exe",
                "C:\\projects\\src\\out\\Default\\electron.exe.pdb",
            ),
            (
                "/Applications/X.app/Contents/Frameworks/Electron Framework.framework/Versions/A/Electron Framework",
                "Electron Framework",
            ),
            (
                "C:\\Users\\me\\AppData\\Local\\Programs\\X\\ffmpeg.dll",
                "C:\\projects\\src\\out\\Default\\ffmpeg.dll.pdb",
            ),
            (
                "C:\\Users\\******\\AppData\\Local\\App\\libglesv2.dll",
                "C:\\projects\\src\\out\\Default\\libGLESv2.dll.pdb",
            ),
            ("libGLESv2.so", "libGLESv2.so"),
            (
                "/Applications/X.app/Contents/MacOS/Slack Helper (GPU)",
                "Slack Helper (GPU)",
            ),
        ];
        for (code_file, debug_file) in files {
            let id = ObjectId {
                code_file: Some(code_file.into()),
                debug_file: Some(debug_file.into()),
                ..Default::default()
            };
            assert!(matches_path_patterns(&id, &patterns), "{id:?}");
        }
    }

    #[test]
    fn filetype_filter() {
        let filters = SourceFilters {
            filetypes: vec![FileType::MachCode],
            ..Default::default()
        };
        assert!(filters.is_allowed(&kernel32(), FileType::MachCode));
        assert!(!filters.is_allowed(&kernel32(), FileType::Pe));
        assert!(!filters.is_allowed(&kernel32(), FileType::Pdb));
        assert!(SourceFilters::default().is_allowed(&kernel32(), FileType::Il2cpp));
    }

    #[test]
    fn filetype_and_pattern_both_required() {
        let filters = SourceFilters {
            filetypes: vec![FileType::Pe],
            path_patterns: vec![pattern("*kernel32*")],
            ..Default::default()
        };
        assert!(filters.is_allowed(&kernel32(), FileType::Pe));
        assert!(!filters.is_allowed(&kernel32(), FileType::Pdb));
        let other = ObjectId {
            code_file: Some("C:\\foo.dll".into()),
            ..Default::default()
        };
        assert!(!filters.is_allowed(&other, FileType::Pe));
    }

    #[test]
    fn requires_checksum_only_gates_portable_pdb() {
        let filters = SourceFilters {
            requires_checksum: true,
            ..Default::default()
        };
        let without = ObjectId::default();
        let with = ObjectId {
            debug_checksum: Some("SHA256:0123abcd".into()),
            ..Default::default()
        };
        assert!(!filters.is_allowed(&without, FileType::PortablePdb));
        assert!(filters.is_allowed(&with, FileType::PortablePdb));
        assert!(filters.is_allowed(&without, FileType::Pdb));
        assert!(filters.is_allowed(&without, FileType::SourceBundle));

        let not_required = SourceFilters::default();
        assert!(not_required.is_allowed(&without, FileType::PortablePdb));
    }

    #[test]
    fn serde_defaults_and_errors() {
        let filters: SourceFilters = serde_json::from_str("{}").unwrap();
        assert!(filters.filetypes.is_empty());
        assert!(filters.path_patterns.is_empty());
        assert!(!filters.requires_checksum);

        let filters: SourceFilters = serde_json::from_str(
            r#"{"filetypes": ["pe", "pdb", "portablepdb"], "path_patterns": ["*foo*"],
                "requires_checksum": true, "extra": 1}"#,
        )
        .unwrap();
        assert_eq!(
            filters.filetypes,
            vec![FileType::Pe, FileType::Pdb, FileType::PortablePdb]
        );
        assert_eq!(filters.path_patterns[0].to_string(), "*foo*");
        assert!(filters.requires_checksum);

        let back = serde_json::to_value(&filters).unwrap();
        assert_eq!(back["path_patterns"][0], "*foo*");
        assert_eq!(back["filetypes"][2], "portablepdb");

        assert!(serde_json::from_str::<SourceFilters>(r#"{"path_patterns": ["a[b"]}"#).is_err());
        assert!(serde_json::from_str::<SourceFilters>(r#"{"filetypes": ["exe"]}"#).is_err());
    }
}
