//! Source context for JS frames: the frame's line and up to five lines either side,
//! each cut to about 140 characters around the frame's column (with `{snip}` where
//! cut), as upstream cuts them, so one frame in a minified file does not return the
//! whole file.

/// Lines of context before and after the frame's line.
pub const CONTEXT_LINES: usize = 5;

/// `(pre_context, context_line, post_context)` around 1-based `lineno`, cut around
/// `column`; `None` when the source has no such line.
pub fn context_lines(
    source: &str,
    lineno: usize,
    column: usize,
) -> Option<(Vec<String>, String, Vec<String>)> {
    let first = lineno.saturating_sub(CONTEXT_LINES).saturating_sub(1);
    let before = lineno.saturating_sub(first).saturating_sub(1);
    let mut lines = source.lines().skip(first);
    let pre = (&mut lines)
        .take(before)
        .map(|l| trim_line(l, column))
        .collect();
    let line = trim_line(lines.next()?, column);
    let post = lines
        .take(CONTEXT_LINES)
        .map(|l| trim_line(l, column))
        .collect();
    Some((pre, line, post))
}

/// Cuts a line longer than 150 bytes to about 140, starting 60 before `column` (or at
/// an edge when that is within 5 bytes), never inside a UTF-8 character.
fn trim_line(line: &str, column: usize) -> String {
    let len = line.len();
    if len <= 150 {
        return line.to_owned();
    }
    let column = column.min(len);
    let mut start = column.saturating_sub(60);
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
    let start = line.floor_char_boundary(start);
    let end = line.floor_char_boundary(end);

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

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: &str = "The public is more familiar with bad design than good design. It is, in effect, conditioned to prefer bad design, because that is what it lives with. The new becomes threatening, the old reassuring.";

    #[test]
    fn short_lines_are_kept_whole() {
        assert_eq!(trim_line("foo", 0), "foo");
        assert_eq!(trim_line(&"x".repeat(150), 140), "x".repeat(150));
    }

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

    #[test]
    fn cuts_never_split_a_character() {
        let line = ".❤️🧡💛💚💙💜".repeat(10);
        let cut = trim_line(&line, 70);
        assert!(cut.starts_with("{snip} ") && cut.ends_with(" {snip}"));
        assert!(cut.len() < line.len());
    }

    #[test]
    fn five_lines_either_side() {
        let source: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let (pre, line, post) = context_lines(&source, 10, 0).unwrap();
        assert_eq!(pre, ["line 5", "line 6", "line 7", "line 8", "line 9"]);
        assert_eq!(line, "line 10");
        assert_eq!(
            post,
            ["line 11", "line 12", "line 13", "line 14", "line 15"]
        );
    }

    #[test]
    fn context_stops_at_the_edges() {
        let source = "a\nb\nc";
        assert_eq!(
            context_lines(source, 1, 0),
            Some((vec![], "a".to_owned(), vec!["b".to_owned(), "c".to_owned()]))
        );
        assert_eq!(
            context_lines(source, 3, 0),
            Some((vec!["a".to_owned(), "b".to_owned()], "c".to_owned(), vec![]))
        );
        assert_eq!(context_lines(source, 4, 0), None);
    }
}
