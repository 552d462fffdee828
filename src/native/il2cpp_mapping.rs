//! Unity il2cpp line mappings (`LineNumberMappings.json`: C++ file -> C# file -> C++
//! line -> C# line), read straight from the JSON text into the table lookups need.
//! symbolic's `LineMapping::parse` reads the whole file into a `serde_json::Value`
//! first, about ten times the file's size; this reads it in one pass, keeping twelve
//! bytes per line, and [`Il2cppMapping::check`] reads it keeping nothing at all, for
//! the download check. What it answers is symbolic's: the same file is accepted or
//! refused alike, and the same source location maps to the same C# line.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use indexmap::IndexSet;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The key symbolic's writer puts beside the C++ files, naming the debug file.
const DEBUG_ID_KEY: &str = "__debug-id__";
/// How far past the last mapped C++ line a line still maps to it, as symbolic's lookup.
const MAX_DISTANCE: u32 = 50;

/// One mapped C++ line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LineEntry {
    cpp_line: u32,
    cs_line: u32,
    /// Index into `cs_files`.
    cs_file: u32,
}

/// A parsed line mapping, applied to a SymCache as a transformer.
#[derive(Debug, Default)]
pub struct Il2cppMapping {
    cs_files: IndexSet<String>,
    /// By C++ file, its mapped lines in order.
    cpp_files: HashMap<String, Vec<LineEntry>>,
}

impl Il2cppMapping {
    /// Reads a mapping, or says why `data` is none.
    pub fn parse(data: &[u8]) -> Result<Self, String> {
        let mut mapping = Il2cppMapping::default();
        read(data, Some(&mut mapping))?;
        Ok(mapping)
    }

    /// Whether `data` is a mapping [`Il2cppMapping::parse`] (and symbolic) would read,
    /// keeping none of it.
    pub fn check(data: &[u8]) -> Result<(), String> {
        read(data, None)
    }

    /// The C# file and line of `line` of the C++ file `file`: the nearest mapped line at
    /// or above it, within [`MAX_DISTANCE`].
    pub fn lookup(&self, file: &str, line: u32) -> Option<(&str, u32)> {
        let lines = self.cpp_files.get(file)?;
        let at = match lines.binary_search_by_key(&line, |entry| entry.cpp_line) {
            Ok(at) => at,
            Err(0) => return None,
            Err(after) => after - 1,
        };
        let entry = lines.get(at)?;
        if line.saturating_sub(entry.cpp_line) > MAX_DISTANCE {
            return None;
        }
        let cs_file = self.cs_files.get_index(entry.cs_file as usize)?;
        Some((cs_file, entry.cs_line))
    }
}

impl Il2cppMapping {
    /// The C# file and line for a line of generated C++, the file named as symbolic's
    /// transformer joins it (compilation dir, directory, name, cleaned).
    pub fn remap(
        &self,
        comp_dir: Option<&str>,
        directory: Option<&str>,
        name: &str,
        line: u32,
    ) -> Option<(&str, u32)> {
        let prefix = symbolic::common::join_path(
            comp_dir.unwrap_or_default(),
            directory.unwrap_or_default(),
        );
        let joined = symbolic::common::join_path(&prefix, name);
        self.lookup(&symbolic::common::clean_path(&joined), line)
    }
}

/// For the differential test, which builds symbolic's own SymCache beside ours.
#[cfg(test)]
impl symbolic::symcache::transform::Transformer for Il2cppMapping {
    fn transform_source_location<'f>(
        &'f mut self,
        mut sl: symbolic::symcache::transform::SourceLocation<'f>,
    ) -> symbolic::symcache::transform::SourceLocation<'f> {
        let this: &'f Self = self;
        let found = this.remap(
            sl.file.comp_dir.as_deref(),
            sl.file.directory.as_deref(),
            &sl.file.name,
            sl.line,
        );
        if let Some((cs_file, cs_line)) = found {
            sl.file.name = Cow::Borrowed(cs_file);
            sl.file.comp_dir = None;
            sl.file.directory = None;
            sl.line = cs_line;
        }
        sl
    }
}

/// Reads `data` into `into`, or only checks it when `into` is `None`.
fn read(data: &[u8], into: Option<&mut Il2cppMapping>) -> Result<(), String> {
    let mut deserializer = serde_json::Deserializer::from_slice(data);
    (Top(into))
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end())
        .map_err(|err| format!("not an il2cpp line mapping: {err}"))
}

/// A map key, borrowed from the text unless it holds escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Accepts any value, as symbolic passes over what is not an object where it wants one;
/// `on_map` reads the value when it is one. Every other value is read through (and so
/// checked to be JSON) and gives `T::default()`.
macro_rules! any_but_map {
    ($t:ty) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$t, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$t, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$t, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$t, E> {
            Ok(Default::default())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$t, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<$t, E> {
            Ok(Default::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$t, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// Any value, read through and dropped. Not serde's `IgnoredAny`: serde_json skips that
/// without its nesting limit, which symbolic's reader (into a `Value`) holds a file to.
#[derive(Default)]
struct Skip;

impl<'de> de::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    any_but_map!(Skip);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
}

/// The whole file: C++ file -> its map.
struct Top<'a>(Option<&'a mut Il2cppMapping>);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    any_but_map!(());

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(Key(cpp_file)) = map.next_key()? {
            if cpp_file == DEBUG_ID_KEY {
                map.next_value::<Skip>()?;
                continue;
            }
            let cs_files = self.0.as_deref_mut().map(|m| &mut m.cs_files);
            let mut lines = map.next_value_seed(FileMap(cs_files))?;
            if let Some(mapping) = self.0.as_deref_mut() {
                // As symbolic's map iterates them: by line, then by C# file name.
                let cs_files = &mapping.cs_files;
                lines.sort_by(|a, b| {
                    (a.cpp_line.cmp(&b.cpp_line)).then_with(|| {
                        cs_files
                            .get_index(a.cs_file as usize)
                            .cmp(&cs_files.get_index(b.cs_file as usize))
                    })
                });
                lines.shrink_to_fit();
                mapping.cpp_files.insert(cpp_file.into_owned(), lines);
            }
        }
        Ok(())
    }
}

/// One C++ file's map: C# file -> lines; its lines, when they are kept.
struct FileMap<'a>(Option<&'a mut IndexSet<String>>);

impl<'de> DeserializeSeed<'de> for FileMap<'_> {
    type Value = Vec<LineEntry>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FileMap<'_> {
    type Value = Vec<LineEntry>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    any_but_map!(Vec<LineEntry>);

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut lines = Vec::new();
        while let Some(Key(cs_file)) = map.next_key()? {
            let seed = LineMap {
                cs_file,
                cs_files: self.0.as_deref_mut(),
                lines: &mut lines,
            };
            map.next_value_seed(seed)?;
        }
        Ok(lines)
    }
}

/// One C# file's lines: C++ line (a string) -> C# line.
struct LineMap<'a, 'de> {
    cs_file: Cow<'de, str>,
    cs_files: Option<&'a mut IndexSet<String>>,
    lines: &'a mut Vec<LineEntry>,
}

impl<'de> DeserializeSeed<'de> for LineMap<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LineMap<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    any_but_map!(());

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // A C# file is named only when it has a map of lines, as symbolic names it.
        let cs_file = match self.cs_files {
            Some(cs_files) => {
                let index = cs_files.insert_full(self.cs_file.into_owned()).0;
                Some(u32::try_from(index).map_err(de::Error::custom)?)
            }
            None => None,
        };
        while let Some(Key(cpp_line)) = map.next_key()? {
            let cpp_line: u32 = cpp_line.parse().map_err(|_| {
                de::Error::custom(format_args!("C++ line {cpp_line:?} is not a line number"))
            })?;
            let cs_line = map.next_value_seed(CsLine)?;
            if let Some(cs_file) = cs_file {
                self.lines.push(LineEntry {
                    cpp_line,
                    cs_line,
                    cs_file,
                });
            }
        }
        Ok(())
    }
}

/// A C# line: a JSON integer that fits 32 bits, nothing else.
struct CsLine;

impl<'de> DeserializeSeed<'de> for CsLine {
    type Value = u32;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u32, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CsLine {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a C# line number")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symbolic::il2cpp::LineMapping;

    /// What symbolic's reader and this one make of `json`, looked up at every line of
    /// the named C++ files: the same answers, and the same refusals.
    fn same_as_symbolic(json: &str, files: &[&str]) {
        let theirs = LineMapping::parse(json.as_bytes());
        let ours = Il2cppMapping::parse(json.as_bytes());
        assert_eq!(theirs.is_some(), ours.is_ok(), "{json}: {ours:?}");
        assert_eq!(ours.is_ok(), Il2cppMapping::check(json.as_bytes()).is_ok());
        let (Some(theirs), Ok(ours)) = (theirs, ours) else {
            return;
        };
        for file in files {
            for line in 0..200 {
                assert_eq!(
                    theirs.lookup(file, line),
                    ours.lookup(file, line),
                    "{json}: {file}:{line}"
                );
            }
        }
    }

    #[test]
    fn answers_and_refusals_are_symbolics() {
        let files = ["a.cpp", "b.cpp", "c.cpp"];
        for json in [
            r#"{"a.cpp": {"A.cs": {"5": 17, "15": 29}}}"#,
            r#"{"a.cpp": {"A.cs": {"5": 17}, "B.cs": {"5": 3, "90": 4}}, "b.cpp": {}}"#,
            r#"{"__debug-id__": "x", "a.cpp": {"A.cs": {"1": 1}}}"#,
            r#"{"__debug-id__": {"not": ["checked"]}, "a.cpp": {"A.cs": {"1": 1}}}"#,
            r#"{"a.cpp": 7, "b.cpp": {"B.cs": [1, 2]}, "c.cpp": {"C.cs": {"2": 4}}}"#,
            r#"{"a.cpp": {"A.cs": {"100": 1, "20": 2, "3": 3}}}"#,
            r#"{"a\u002ecpp": {"A\"s.cs": {"7": 70}}}"#,
            r#"[1, 2, {"a.cpp": {"A.cs": {"1": 1}}}]"#,
            r#""a string""#,
            "null",
            r#"{"a.cpp": {"A.cs": {"x": 1}}}"#,
            r#"{"a.cpp": {"A.cs": {"-1": 1}}}"#,
            r#"{"a.cpp": {"A.cs": {"1": -1}}}"#,
            r#"{"a.cpp": {"A.cs": {"1": 1.5}}}"#,
            r#"{"a.cpp": {"A.cs": {"1": "1"}}}"#,
            r#"{"a.cpp": {"A.cs": {"1": 4294967296}}}"#,
            r#"{"a.cpp": {"A.cs": {"4294967296": 1}}}"#,
            r#"{"a.cpp": {"A.cs": {"1": 1}}} trailing"#,
            r#"{"a.cpp": {"A.cs": {"1": 1}}"#,
            "",
        ] {
            same_as_symbolic(json, &files);
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        same_as_symbolic(&deep, &files);
    }

    #[test]
    fn the_fixture_mappings_are_read_alike() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/il2cpp");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        let cpp = manifest["frames"][0]["cpp_path"]
            .as_str()
            .unwrap()
            .to_owned();
        for name in ["LineNumberMapping.json", "LineNumberMapping-v2.json"] {
            let json = std::fs::read_to_string(dir.join(name)).unwrap();
            same_as_symbolic(&json, &[&cpp]);
        }
    }
}
