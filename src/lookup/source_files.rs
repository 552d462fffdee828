//! Source files for source context, for every platform: the lines around a frame's line
//! (trimmed as upstream trims them, so long minified or generated lines do not bloat
//! responses), and source files that debug files link to (SourceLink, SRCSRV), fetched
//! through the fetch layer and cached as `sourcefiles`.

use std::collections::BTreeMap;

use symbolic::common::ByteView;
use url::Url;

use super::downloads::{Downloads, Plain, PlainFormat};
use crate::cache::kinds;
use crate::cache::{CacheKind, Caches, Scope};
use crate::error::CacheResult;
use crate::fetch::{Downloader, RemoteFile};
use crate::sources::SourceId;
use crate::types::{ObjectCandidate, ObjectDownloadInfo, ObjectFeatures, ObjectUseInfo};

/// Lines of context before and after the frame's line.
const CONTEXT_LINES: usize = 5;

/// `(pre_context, context_line, post_context)` around 1-based `lineno`, or `None` when
/// the source has no such line.
pub fn context_lines(
    source: &str,
    lineno: usize,
    column: usize,
) -> Option<(Vec<String>, String, Vec<String>)> {
    if lineno == 0 {
        return None;
    }
    let first = lineno.saturating_sub(CONTEXT_LINES + 1);
    let mut lines = source.lines().skip(first);
    let pre = (&mut lines)
        .take(lineno - 1 - first)
        .map(|l| trim_line(l, column))
        .collect();
    let line = trim_line(lines.next()?, column);
    let post = lines
        .take(CONTEXT_LINES)
        .map(|l| trim_line(l, column))
        .collect();
    Some((pre, line, post))
}

/// [`context_lines`] for a source whose lines are already indexed: `line` gives the
/// 0-based line without its line ending, `None` past the last line (as `str::lines`
/// would count them). Reads only the lines it shows, where [`context_lines`] scans the
/// source up to them.
pub fn context_lines_by<'a>(
    line: impl Fn(usize) -> Option<&'a str>,
    lineno: usize,
    column: usize,
) -> Option<(Vec<String>, String, Vec<String>)> {
    let index = lineno.checked_sub(1)?;
    let current = trim_line(line(index)?, column);
    let first = index.saturating_sub(CONTEXT_LINES);
    let pre = (first..index)
        .map_while(&line)
        .map(|l| trim_line(l, column))
        .collect();
    let post = (index + 1..=index + CONTEXT_LINES)
        .map_while(&line)
        .map(|l| trim_line(l, column))
        .collect();
    Some((pre, current, post))
}

struct SourceFile;

impl PlainFormat for SourceFile {
    const KIND: CacheKind = kinds::SOURCEFILES;
    /// No source file worth showing context from is this big; a link to one is a
    /// mistake or an attack.
    const MAX_SIZE: u64 = 10 * 1024 * 1024;
}

/// Where linked source downloads show up in candidate reports and cache keys.
const LINKED_SOURCES: &str = "sourcelink";

/// Fetches and caches the source files that SourceLink (and SRCSRV) entries point to.
pub struct SourceFiles {
    files: Downloads<Plain<SourceFile>>,
}

impl SourceFiles {
    pub fn new(caches: &Caches, downloader: Downloader) -> Self {
        SourceFiles {
            files: Downloads::new(caches, downloader),
        }
    }

    /// Links are data from the debug file: the same reserved-IP rule and limits as for
    /// sources apply, through the fetch layer.
    pub async fn fetch(&self, scope: &Scope, url: &Url) -> CacheResult<ByteView<'static>> {
        let file =
            RemoteFile::from_url(SourceId::new(LINKED_SOURCES), url.clone(), BTreeMap::new());
        self.files.get(&file, scope, ()).await
    }

    /// A source file at a location on a configured source (a debuginfod server's
    /// `buildid/<id>/source/<path>`): fetched with that source's own headers and
    /// credentials, and cached under its identity, within the same size limit.
    pub async fn fetch_file(
        &self,
        scope: &Scope,
        file: &RemoteFile,
    ) -> CacheResult<ByteView<'static>> {
        self.files.get(file, scope, ()).await
    }
}

/// Only web links are followed: a `file://` link would read the server's own disk.
pub fn fetchable_link(url: &str) -> Option<Url> {
    let url = Url::parse(url).ok()?;
    matches!(url.scheme(), "http" | "https").then_some(url)
}

/// The candidate that reports a linked source download, as upstream lists it.
pub fn sourcelink_candidate(url: &Url, result: &CacheResult<ByteView<'static>>) -> ObjectCandidate {
    let download = ObjectDownloadInfo::from_result(result.as_ref().map(|_| ObjectFeatures {
        has_sources: true,
        ..Default::default()
    }));
    ObjectCandidate {
        source: LINKED_SOURCES.into(),
        location: crate::fetch::redact_url(url),
        download,
        unwind: ObjectUseInfo::None,
        debug: ObjectUseInfo::None,
    }
}

/// Keeps about 140 bytes of a line longer than 150, centred 60 bytes before `column`,
/// marking cut edges with `{snip}`.
fn trim_line(line: &str, column: usize) -> String {
    let len = line.len();
    if len <= 150 {
        return line.to_owned();
    }
    let mut start = column.min(len).saturating_sub(60);
    if start < 5 {
        start = 0;
    }
    let mut end = (start + 140).min(len);
    if end > len.saturating_sub(5) {
        end = len;
    }
    if end == len {
        start = end.saturating_sub(140);
    }
    let start = floor_char_boundary(line, start);
    let end = floor_char_boundary(line, end);
    let mut out = String::with_capacity(end - start + 14);
    if start > 0 {
        out.push_str("{snip} ");
    }
    out.push_str(&line[start..end]);
    if end < len {
        out.push_str(" {snip}");
    }
    out
}

fn floor_char_boundary(s: &str, mut idx: usize) -> usize {
    if idx >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(idx) {
        idx -= 1;
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_clamped_at_both_ends() {
        let src = (1..=20)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let (pre, line, post) = context_lines(&src, 3, 0).unwrap();
        assert_eq!(pre, ["line 1", "line 2"]);
        assert_eq!(line, "line 3");
        assert_eq!(post.len(), 5);
        let (pre, line, post) = context_lines(&src, 20, 0).unwrap();
        assert_eq!(pre.len(), 5);
        assert_eq!(line, "line 20");
        assert!(post.is_empty());
        assert!(context_lines(&src, 21, 0).is_none());
        assert!(context_lines(&src, 0, 0).is_none());
    }

    #[test]
    fn only_web_links_are_fetched() {
        assert!(fetchable_link("https://raw.example.com/a.cs").is_some());
        assert!(fetchable_link("http://example.com/a.c").is_some());
        assert!(fetchable_link("file:///etc/passwd").is_none());
        assert!(fetchable_link("/etc/passwd").is_none());
    }

    #[test]
    fn long_lines_are_snipped_around_the_column() {
        let long = "abcdefghij".repeat(30);
        let start = trim_line(&long, 0);
        assert!(start.ends_with(" {snip}") && !start.starts_with("{snip}"));
        assert_eq!(start.len(), 140 + 7);
        let middle = trim_line(&long, 150);
        assert!(middle.starts_with("{snip} ") && middle.ends_with(" {snip}"));
        let end = trim_line(&long, 10_000);
        assert!(end.starts_with("{snip} ") && !end.ends_with("{snip}"));
        let unicode = "❤️🧡💛".repeat(30);
        assert!(trim_line(&unicode, 70).contains("{snip}"));
    }

    const LONG: &str = "The public is more familiar with bad design than good design. It is, in effect, conditioned to prefer bad design, because that is what it lives with. The new becomes threatening, the old reassuring.";

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let head = "The public is more familiar with bad design than good design. It is, in effect, conditioned to prefer bad design, because that is what it li {snip}";
        assert_eq!(trim_line(LONG, 0), head);
        assert_eq!(trim_line(LONG, 10), head);
        assert_eq!(
            trim_line(LONG, 66),
            "{snip} blic is more familiar with bad design than good design. It is, in effect, conditioned to prefer bad design, because that is what it lives wi {snip}"
        );
        let tail = "{snip} gn. It is, in effect, conditioned to prefer bad design, because that is what it lives with. The new becomes threatening, the old reassuring.";
        assert_eq!(trim_line(LONG, 190), tail);
        assert_eq!(trim_line(LONG, 9999), tail);
    }
}
