//! SourceMapCaches: the compact, memory-mappable lookup table symbolic builds from a
//! minified file and its source map (regular, indexed/sectioned, and Hermes / React
//! Native maps), with the original sources' text when the map carries it. What every
//! JS frame is resolved against.

use std::io::Write;
use std::sync::Arc;

use futures::future::BoxFuture;
use symbolic::common::{AccessPattern, ByteView, SelfCell};
use symbolic::sourcemapcache::{SourceMapCache, SourceMapCacheWriter};
use tempfile::NamedTempFile;

use crate::cache::{CacheItemRequest, CacheKind};
use crate::error::{CacheError, CacheResult};

/// Bump when what we write changes; symbolic's own format version is pinned by a test,
/// so an upgrade that changes it forces a bump here.
pub const SOURCEMAP_CACHES: CacheKind = CacheKind {
    name: "sourcemap_caches",
    version: 1,
    compatible: &[],
};

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

/// The `Cacher` request for one SourceMapCache: the two files it is built from. The
/// caller keys it (by where both files came from, or their hashes for scraped files).
pub struct BuildSourceMapCache {
    pub minified: ByteView<'static>,
    pub sourcemap: ByteView<'static>,
}

impl CacheItemRequest for BuildSourceMapCache {
    type Item = OwnedSourceMapCache;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            let minified = self.minified.clone();
            let sourcemap = self.sourcemap.clone();
            let file = temp_file
                .as_file()
                .try_clone()
                .map_err(CacheError::internal)?;
            // Building parses the whole minified file and map: seconds for large maps,
            // so off the async workers.
            tokio::task::spawn_blocking(move || {
                let mut out = std::io::BufWriter::new(file);
                write_sourcemap_cache(&minified, &sourcemap, &mut out)?;
                out.flush().map_err(CacheError::internal)
            })
            .await
            .map_err(CacheError::internal)?
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
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
        // If this fails, symbolic changed the format: bump SOURCEMAP_CACHES.version.
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
