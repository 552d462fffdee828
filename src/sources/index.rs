//! Symstore indexes: the `000Admin` directory of a Microsoft symbol store lists every
//! file ever added to it. A source configured with `has_index` is only asked for paths
//! its index lists, which saves a round trip per missing file on large stores.

use std::collections::HashSet;

/// Where a symstore keeps the number of its newest index segment.
pub const LASTID_PATH: &str = "000Admin/lastid.txt";

/// The path of index segment `id` (`000Admin/0000000042`).
pub fn segment_path(id: u32) -> String {
    format!("000Admin/{id:010}")
}

/// Reads `lastid.txt`: a decimal number, possibly padded with zeros and whitespace.
pub fn parse_lastid(text: &str) -> Option<u32> {
    text.trim().parse().ok()
}

/// The files a symstore says it holds, as symstore-layout paths (`name/ID/name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymstoreIndex {
    paths: HashSet<Box<str>>,
}

impl SymstoreIndex {
    /// Adds the entries of one index segment. Lines look like
    /// `"difx64.dll\4549B50183000","D:\some\build\path\difx64.dll"`; the first quoted
    /// field is the file name and its id, separated by a backslash. Lines of another
    /// shape are skipped.
    pub fn add_segment(&mut self, text: &str) {
        for line in text.lines() {
            let Some(entry) = line.split('"').nth(1) else {
                continue;
            };
            if let Some((name, id)) = entry.split_once('\\') {
                self.paths.insert(format!("{name}/{id}/{name}").into());
            }
        }
    }

    /// Whether the store holds `path`. Like upstream, the comparison is exact: a
    /// compressed variant (`.pd_`) or a file beside a listed one is not listed.
    pub fn contains(&self, path: &str) -> bool {
        self.paths.contains(path)
    }

    /// Every listed path, one per line: the form a loaded index is cached in.
    pub fn to_lines(&self) -> String {
        let mut out = String::with_capacity(self.paths.iter().map(|p| p.len() + 1).sum());
        for path in &self.paths {
            out.push_str(path);
            out.push('\n');
        }
        out
    }

    /// Reads what [`Self::to_lines`] wrote. Split on `\n` alone: `lines()` would also
    /// strip a `\r` that ends a path, and the index read back would differ from the one
    /// that was written.
    pub fn from_lines(text: &str) -> Self {
        SymstoreIndex {
            paths: text
                .split('\n')
                .filter(|l| !l.is_empty())
                .map(Into::into)
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_become_symstore_paths() {
        let mut index = SymstoreIndex::default();
        index.add_segment(
            "\"igdail32.dll\\5BA3F2382a000\",\"D:\\temp\\igdail32.dll\"\n\
             garbage line\n\
             \"app.pdb\\3249D99D0C4049318610F4E4FB0B69361\",\r\n",
        );
        assert_eq!(index.len(), 2);
        assert!(index.contains("igdail32.dll/5BA3F2382a000/igdail32.dll"));
        assert!(index.contains("app.pdb/3249D99D0C4049318610F4E4FB0B69361/app.pdb"));
        assert!(!index.contains("app.pdb/3249D99D0C4049318610F4E4FB0B69361/app.pd_"));
        assert!(!index.contains("app.pdb/3249D99D0C4049318610F4E4FB0B69361/app.src.zip"));
        assert_eq!(SymstoreIndex::from_lines(&index.to_lines()), index);
    }

    #[test]
    fn an_index_reads_back_as_it_was_written() {
        // Found by fuzzing (fuzz/fuzz_targets/symstore_index.rs): a name that ends in
        // `\r` lost it when the cached index was read back.
        let mut index = SymstoreIndex::default();
        index.add_segment("\"x\r\\AB\",\"\"\n");
        assert!(index.contains("x\r/AB/x\r"));
        assert_eq!(SymstoreIndex::from_lines(&index.to_lines()), index);
    }

    #[test]
    fn lastid_and_segment_names() {
        assert_eq!(parse_lastid("0000000012\r\n"), Some(12));
        assert_eq!(parse_lastid("x"), None);
        assert_eq!(segment_path(7), "000Admin/0000000007");
    }
}
