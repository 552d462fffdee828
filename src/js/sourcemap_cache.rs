//! SourceMapCaches: the compact, memory-mappable lookup table symbolic builds from a
//! minified file and its source map (regular, indexed/sectioned, and Hermes / React
//! Native maps), with the original sources' text when the map carries it. What every
//! JS frame is resolved against.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use symbolic::common::{AccessPattern, ByteView, SelfCell};
use symbolic::sourcemapcache::{SourceMapCache, SourceMapCacheWriter};

use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};

pub type OwnedSourceMapCache = Arc<SelfCell<ByteView<'static>, SourceMapCache<'static>>>;

/// Builds the SourceMapCache of `minified` and `sourcemap` into `out`. A map symbolic
/// cannot read (or a file that is not UTF-8) is `Malformed`; a minified file that does
/// not parse as JavaScript still gives a cache, only without scope names.
pub fn write_sourcemap_cache(
    minified: &[u8],
    sourcemap: &[u8],
    out: &mut impl Write,
) -> CacheResult<()> {
    let minified = std::str::from_utf8(minified)
        .map_err(|e| CacheError::Malformed(format!("minified source is not UTF-8: {e}")))?;
    let sourcemap = std::str::from_utf8(sourcemap)
        .map_err(|e| CacheError::Malformed(format!("source map is not UTF-8: {e}")))?;
    let writer = SourceMapCacheWriter::new(minified, sourcemap)
        .map_err(|e| CacheError::Malformed(e.to_string()))?;
    writer.serialize(out).map_err(CacheError::internal)
}

/// Reads a SourceMapCache file (memory-mapped) into a shareable cache.
pub fn load(data: ByteView<'static>) -> CacheResult<OwnedSourceMapCache> {
    // Lookups jump around the file; read-ahead would only waste memory.
    let _ = data.hint(AccessPattern::Random);
    SelfCell::try_new(data, |bytes| SourceMapCache::parse(unsafe { &*bytes }))
        .map(Arc::new)
        .map_err(|e| CacheError::Malformed(e.to_string()))
}

/// The two files a SourceMapCache is built from, as fetched (often memory maps).
pub struct SourceMapCacheInput {
    pub minified: ByteView<'static>,
    pub sourcemap: ByteView<'static>,
}

/// SourceMapCaches as a derived cache: keyed by the minified file's and the map's
/// cache keys, in that order (`DerivedCache::<SourceMapCacheFormat>::get(&[&minified,
/// &sourcemap], input)`). For scraped files, whose keys say nothing about their
/// contents, upstream keys by the contents' hashes instead.
pub struct SourceMapCacheFormat;

impl DerivedFormat for SourceMapCacheFormat {
    type Input = SourceMapCacheInput;
    type Item = OwnedSourceMapCache;
    const KIND: CacheKind = kinds::SOURCEMAP_CACHES;

    fn input_size(input: &SourceMapCacheInput) -> u64 {
        (input.minified.len() + input.sourcemap.len()) as u64
    }

    fn convert(
        input: SourceMapCacheInput,
        out: &mut BufWriter<File>,
        _scratch: &Path,
    ) -> CacheResult<()> {
        write_sourcemap_cache(&input.minified, &input.sourcemap, out)?;
        out.flush().map_err(CacheError::internal)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        load(data)
    }
}

#[cfg(test)]
mod tests {
    use symbolic::sourcemapcache::{ScopeLookupResult, SourcePosition};

    use super::*;

    pub(crate) fn build(minified: &str, sourcemap: &str) -> CacheResult<OwnedSourceMapCache> {
        let mut out = Vec::new();
        write_sourcemap_cache(minified.as_bytes(), sourcemap.as_bytes(), &mut out)?;
        load(ByteView::from_vec(out))
    }

    #[test]
    fn format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the format: bump cache::kinds::SOURCEMAP_CACHES.
        // The header is the magic, then the format version, both little-endian u32.
        let mut out = Vec::new();
        write_sourcemap_cache(MINIFIED.as_bytes(), regular_map(true).as_bytes(), &mut out).unwrap();
        assert_eq!(&out[0..4], b"SMCA");
        assert_eq!(u32::from_le_bytes(out[4..8].try_into().unwrap()), 2);
    }

    /// `function add(a,b){return a+b}` from `add.js`, hand-mapped token by token.
    const MINIFIED: &str = "function x(n,r){return n+r}\n";
    const SOURCE: &str = "function add(left, right) {\n  return left + right;\n}\n";

    fn regular_map(with_contents: bool) -> String {
        let contents = if with_contents {
            format!(
                ",\"sourcesContent\":[{}]",
                serde_json::to_string(SOURCE).unwrap()
            )
        } else {
            String::new()
        };
        // Minified column → original (line:column, name): 9 → 0:9 add, 11 → 0:13 left,
        // 13 → 0:19 right, 16 → 1:2 (`return`), 23 → 1:9 left, 25 → 1:16 right.
        format!(
            r#"{{"version":3,"file":"add.min.js","sources":["add.js"],"names":["add","left","right"]{contents},"mappings":"AAAA,SAASA,EAAIC,EAAMC,GACjB,OAAOD,EAAOC"}}"#
        )
    }

    #[test]
    fn a_regular_map_resolves_to_the_original_position() {
        let cache = build(MINIFIED, &regular_map(true)).unwrap();
        let token = cache.get().lookup(SourcePosition::new(0, 17)).unwrap();
        assert_eq!(token.file_name(), Some("add.js"));
        assert_eq!((token.line(), token.column()), (1, 2));
        assert_eq!(token.scope(), ScopeLookupResult::NamedScope("add"));
        assert_eq!(
            token.file().and_then(|f| f.source()),
            Some(SOURCE),
            "sourcesContent is kept"
        );
    }

    #[test]
    fn the_derived_format_writes_and_maps_a_file() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let input = SourceMapCacheInput {
            minified: ByteView::from_slice(MINIFIED.as_bytes()),
            sourcemap: ByteView::from_vec(regular_map(true).into_bytes()),
        };
        let mut out = BufWriter::new(file.reopen().unwrap());
        SourceMapCacheFormat::convert(input, &mut out, &std::env::temp_dir()).unwrap();
        drop(out);
        let cache = SourceMapCacheFormat::load(ByteView::open(file.path()).unwrap()).unwrap();
        let token = cache.get().lookup(SourcePosition::new(0, 17)).unwrap();
        assert_eq!((token.file_name(), token.line()), (Some("add.js"), 1));
        assert_eq!(SourceMapCacheFormat::KIND.name, "sourcemap_caches");
    }

    #[test]
    fn a_map_without_contents_has_no_source() {
        let cache = build(MINIFIED, &regular_map(false)).unwrap();
        let token = cache.get().lookup(SourcePosition::new(0, 17)).unwrap();
        assert_eq!(token.file_name(), Some("add.js"));
        assert_eq!(token.file().and_then(|f| f.source()), None);
    }

    #[test]
    fn an_indexed_map_is_flattened() {
        let section = regular_map(true);
        let indexed = format!(
            r#"{{"version":3,"sections":[{{"offset":{{"line":0,"column":0}},"map":{section}}}]}}"#
        );
        let cache = build(MINIFIED, &indexed).unwrap();
        let token = cache.get().lookup(SourcePosition::new(0, 17)).unwrap();
        assert_eq!((token.file_name(), token.line()), (Some("add.js"), 1));
    }

    #[test]
    fn a_map_without_file_names_still_maps_positions() {
        let map = r#"{"version":3,"sources":[null],"names":[],"mappings":"AAAA,gBACE"}"#;
        let cache = build(MINIFIED, map).unwrap();
        let token = cache.get().lookup(SourcePosition::new(0, 17)).unwrap();
        assert_eq!((token.line(), token.column()), (1, 2));
        assert!(token.file_name().is_none_or(str::is_empty));
    }

    #[test]
    fn broken_maps_are_malformed() {
        for map in ["", "{", r#"{"version":3,"mappings":"!!!"}"#, "[1,2]"] {
            assert!(
                matches!(build(MINIFIED, map), Err(CacheError::Malformed(_))),
                "{map:?}"
            );
        }
        assert!(matches!(
            write_sourcemap_cache(b"\xff\xfe", regular_map(true).as_bytes(), &mut Vec::new()),
            Err(CacheError::Malformed(_))
        ));
    }

    #[test]
    fn unparsable_javascript_still_maps_positions() {
        let cache = build("function x(n,r){return n+r\n", &regular_map(true)).unwrap();
        let token = cache.get().lookup(SourcePosition::new(0, 17)).unwrap();
        assert_eq!((token.line(), token.column()), (1, 2));
    }

    #[test]
    fn a_file_that_is_no_cache_is_malformed() {
        assert!(matches!(
            load(ByteView::from_slice(b"not a cache")),
            Err(CacheError::Malformed(_))
        ));
    }
}
