//! The text of a JS file (minified or original) as frames read it: the bytes it was read
//! as (often a memory map), checked to be UTF-8 once, with its lines indexed once for
//! everyone holding it, so that source context does not scan the file for every frame.

use std::sync::{Arc, OnceLock};

use symbolic::common::ByteView;

use crate::error::{CacheError, CacheResult};

/// Cloning shares the bytes and the line index.
#[derive(Clone)]
pub struct SourceText {
    bytes: ByteView<'static>,
    /// Where each line starts, as `str::lines` splits them; built on first use.
    lines: Arc<OnceLock<Box<[usize]>>>,
}

impl SourceText {
    pub fn new(bytes: ByteView<'static>) -> CacheResult<Self> {
        std::str::from_utf8(&bytes)
            .map_err(|e| CacheError::Malformed(format!("not UTF-8: {e}")))?;
        Ok(SourceText::checked(bytes))
    }

    fn checked(bytes: ByteView<'static>) -> Self {
        SourceText {
            bytes,
            lines: Arc::default(),
        }
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: both constructors check the bytes or take them from a `String`, and
        // the bytes behind a ByteView never change. Checking again here cost a pass over
        // the file for every frame.
        unsafe { std::str::from_utf8_unchecked(&self.bytes) }
    }

    pub fn bytes(&self) -> &ByteView<'static> {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Line `index` (0-based) without its line ending, exactly as `str::lines` gives it.
    pub fn line(&self, index: usize) -> Option<&str> {
        let text = self.as_str();
        indexed_line(text, self.lines.get_or_init(|| line_starts(text)), index)
    }
}

/// Where each line of `text` starts, as `str::lines` splits them.
pub fn line_starts(text: &str) -> Box<[usize]> {
    text.lines()
        .map(|line| line.as_ptr() as usize - text.as_ptr() as usize)
        .collect()
}

/// Line `index` of `text` by its [`line_starts`], without its line ending, as
/// `str::lines` gives it.
pub fn indexed_line<'a>(text: &'a str, starts: &[usize], index: usize) -> Option<&'a str> {
    let start = *starts.get(index)?;
    let end = starts.get(index + 1).copied().unwrap_or(text.len());
    Some(without_line_ending(&text[start..end]))
}

/// A line without the `\n` or `\r\n` that ends it, as `str::lines` gives it (a bare `\r`
/// stays).
pub fn without_line_ending(line: &str) -> &str {
    match line.strip_suffix('\n') {
        Some(line) => line.strip_suffix('\r').unwrap_or(line),
        None => line,
    }
}

impl AsRef<str> for SourceText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for SourceText {
    fn from(text: String) -> Self {
        SourceText::checked(ByteView::from_vec(text.into_bytes()))
    }
}

impl std::fmt::Debug for SourceText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SourceText({} bytes)", self.bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_the_lines_str_gives() {
        for text in [
            "",
            "a",
            "a\n",
            "a\n\n",
            "\n",
            "a\r\nb",
            "a\r\nb\r\n",
            "a\rb\n",
            "a\r",
            "é\nü\r\n",
        ] {
            let source = SourceText::from(text.to_owned());
            let indexed: Vec<&str> = (0..).map_while(|i| source.line(i)).collect();
            assert_eq!(indexed, text.lines().collect::<Vec<_>>(), "{text:?}");
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_malformed() {
        assert!(matches!(
            SourceText::new(ByteView::from_slice(b"\xff\xfe")),
            Err(CacheError::Malformed(_))
        ));
    }
}
