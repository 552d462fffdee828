//! What a JS frame's minified position is resolved against: the SourceMapCache built
//! from the minified file and its map, or, while that cache does not exist yet, the
//! decoded map and the minified file's scopes themselves ([`DirectMap`]).
//!
//! Writing a SourceMapCache for a large map takes most of a second, most of it in work
//! no single frame needs (a scope and an interned string for every token, the whole
//! file serialised). A `DirectMap` answers the first request from the same two inputs
//! the writer starts from, decoded on two threads at once, and resolves only the
//! scopes the asked positions fall in. Its answers are the cache's, by construction
//! (the rules below repeat symbolic's writer and lookup) and by a differential test
//! over every position of the fixture maps and of generated ones.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

pub use js_source_scopes::Scopes;
use js_source_scopes::{NameResolver, ScopeIndex, SourceContext, extract_scope_names};
use sourcemap::DecodedMap;
use symbolic::sourcemapcache::{File, ScopeLookupResult, SourcePosition};

use super::sourcemap_cache::OwnedSourceMapCache;
use super::text::{SourceText, indexed_line, line_starts, without_line_ending};
use crate::error::{CacheError, CacheResult};

/// A source map ready to resolve positions.
#[derive(Clone)]
pub enum JsMapping {
    Cache(OwnedSourceMapCache),
    Direct(Arc<DirectMap>),
}

impl JsMapping {
    /// The original location of minified position `sp`, exactly as
    /// `SourceMapCache::lookup` gives it.
    pub fn lookup(&self, sp: SourcePosition) -> Option<MappedLocation<'_>> {
        match self {
            JsMapping::Cache(cache) => {
                let token = cache.get().lookup(sp)?;
                Some(MappedLocation {
                    file: token.file().map(MappedFile::Cache),
                    line: token.line(),
                    column: token.column(),
                    name: token.name(),
                    scope: token.scope(),
                })
            }
            JsMapping::Direct(direct) => direct.lookup(sp),
        }
    }
}

impl std::fmt::Debug for JsMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JsMapping::Cache(cache) => write!(f, "JsMapping::Cache({:?})", cache.get()),
            JsMapping::Direct(_) => f.write_str("JsMapping::Direct"),
        }
    }
}

/// An original location: symbolic's `SourceLocation`, from either kind of mapping.
#[derive(Debug, PartialEq)]
pub struct MappedLocation<'a> {
    pub file: Option<MappedFile<'a>>,
    pub line: u32,
    pub column: u32,
    pub name: Option<&'a str>,
    pub scope: ScopeLookupResult<'a>,
}

impl<'a> MappedLocation<'a> {
    pub fn file_name(&self) -> Option<&'a str> {
        self.file.and_then(|file| file.name())
    }
}

/// An original source file named by a map, with its text when the map carries it.
#[derive(Clone, Copy, Debug)]
pub enum MappedFile<'a> {
    Cache(File<'a>),
    Direct {
        name: &'a str,
        source: Option<&'a str>,
        /// Where each line of `source` starts, built on first use.
        lines: &'a OnceLock<Box<[usize]>>,
    },
}

impl PartialEq for MappedFile<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.name(), self.source()) == (other.name(), other.source())
    }
}

impl<'a> MappedFile<'a> {
    pub fn name(&self) -> Option<&'a str> {
        match self {
            MappedFile::Cache(file) => file.name(),
            MappedFile::Direct { name, .. } => Some(name),
        }
    }

    pub fn source(&self) -> Option<&'a str> {
        match self {
            MappedFile::Cache(file) => file.source(),
            MappedFile::Direct { source, .. } => *source,
        }
    }

    /// Line `index` (0-based) of the source, without its ending, as `str::lines` gives
    /// it; read through a line index rather than a scan from the start.
    pub fn line(&self, index: usize) -> Option<&'a str> {
        let source = self.source()?;
        match self {
            MappedFile::Cache(file) => {
                let line = file.line(index)?;
                // The cache's index has one more, empty line starting at the very end
                // of a source that ends with a line break (or is empty); `lines` has
                // none.
                if line.is_empty() && line.as_ptr() == source.as_ptr().wrapping_add(source.len()) {
                    return None;
                }
                Some(without_line_ending(line))
            }
            MappedFile::Direct { lines, .. } => {
                indexed_line(source, lines.get_or_init(|| line_starts(source)), index)
            }
        }
    }
}

/// Where a scope of the minified file starts, and which one it is.
#[derive(Clone, Copy)]
enum ScopeSlot {
    /// Outside every function: the cache's global scope.
    Unknown,
    /// A scope the parser found no name for.
    Anonymous,
    /// Index into [`DirectMap::scopes`]; its original name is resolved on first use.
    Named(u32),
}

/// The decoded map and the minified file's scopes, answering as the SourceMapCache
/// built from them will.
pub struct DirectMap {
    /// Always `DecodedMap::Regular` (an indexed map flattened, as the writer does).
    map: DecodedMap,
    minified: SourceContext<SourceText>,
    scopes: Arc<Scopes>,
    /// The writer's scope index, by byte offset in the minified file: the writer keys
    /// it by each offset's position, and so does [`DirectMap::scope_at`], converting
    /// only the offsets its search looks at (converting all of them would be most of
    /// what building a `DirectMap` takes). Offsets past the file's last character, which have
    /// no position and which the writer drops, are left out.
    index: Vec<(u32, ScopeSlot)>,
    /// The original name of each of `scopes`, once asked for.
    resolved: Box<[OnceLock<Option<String>>]>,
    /// Line starts of each source's text, once asked for.
    source_lines: Box<[OnceLock<Box<[usize]>>]>,
    /// Run once no frame needs the map any more (the lookup starts the cache's build).
    then: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Drop for DirectMap {
    fn drop(&mut self) {
        if let Some(then) = self.then.take() {
            then();
        }
    }
}

const NO_FILE: u32 = u32::MAX;

/// The part of a token the writer compares to drop a token that repeats the one before
/// it (`OriginalSourceLocation`, with strings compared as the interned offsets are).
#[derive(PartialEq)]
struct TokenLocation<'a> {
    file: u32,
    line: u32,
    column: u32,
    name: Option<&'a str>,
    scope: ScopeLookupResult<'a>,
}

/// What the map's thread hands over: the decoded, flattened map and the minified file's
/// line index (built there, while the other thread still parses the file's scopes), or
/// `None` when a `DirectMap` could not answer as the cache does and the cache must be
/// built first.
pub struct DecodedForDirect(Option<(DecodedMap, SourceContext<SourceText>, Option<u32>)>);

impl DirectMap {
    /// Decodes a source map as symbolic's writer does. Hermes maps (scopes from the
    /// map, not the file) and maps with two tokens at one minified position (where the
    /// cache's binary search may land on either) are left to the cache, as is a minified
    /// file the writer refuses.
    pub fn decode(sourcemap: &[u8], minified: SourceText) -> CacheResult<DecodedForDirect> {
        let map =
            sourcemap::decode_slice(sourcemap).map_err(|e| CacheError::Malformed(e.to_string()))?;
        let map = match map {
            DecodedMap::Regular(map) => map,
            DecodedMap::Index(index) => index
                .flatten()
                .map_err(|e| CacheError::Malformed(e.to_string()))?,
            DecodedMap::Hermes(_) => return Ok(DecodedForDirect(None)),
        };
        // `SourceMap` sorts its tokens by minified position; strictly increasing means
        // no position holds two.
        let strictly_increasing = map
            .tokens()
            .zip(map.tokens().skip(1))
            .all(|(a, b)| a.get_dst() < b.get_dst());
        if !strictly_increasing {
            return Ok(DecodedForDirect(None));
        }
        // The last offset with a position: where the file's last character starts.
        let last = (minified.as_str().char_indices().next_back())
            .and_then(|(offset, _)| u32::try_from(offset).ok());
        let minified = SourceContext::new(minified).ok();
        Ok(DecodedForDirect(minified.map(|minified| {
            (DecodedMap::Regular(map), minified, last)
        })))
    }

    /// The scopes of the minified file; a file that does not parse has none, as in the
    /// writer.
    pub fn scopes(minified: &str) -> Scopes {
        extract_scope_names(minified).unwrap_or_default()
    }

    /// Puts the two halves together; `None` when the cache must answer (see
    /// [`DirectMap::decode`], and inputs the writer refuses).
    pub fn new(decoded: DecodedForDirect, scopes: Arc<Scopes>) -> Option<DirectMap> {
        let (map, minified, last) = decoded.0?;
        // The writer's index, built by the same code from the same ranges. Names do not
        // shape it, so each named scope stands in as its own number, resolved later.
        let placeholders = scopes
            .iter()
            .enumerate()
            .map(|(i, (range, name))| (range.clone(), name.as_ref().map(|_| i.to_string())))
            .collect();
        let scope_index = ScopeIndex::new(placeholders).ok()?;
        let index = scope_index
            .iter()
            .filter(|&(offset, _)| last.is_some_and(|last| offset <= last))
            .map(|(offset, scope)| {
                let slot = match scope {
                    ScopeLookupResult::NamedScope(i) => {
                        i.parse().map_or(ScopeSlot::Unknown, ScopeSlot::Named)
                    }
                    ScopeLookupResult::AnonymousScope => ScopeSlot::Anonymous,
                    ScopeLookupResult::Unknown => ScopeSlot::Unknown,
                };
                (offset, slot)
            })
            .collect();
        let sources = match &map {
            DecodedMap::Regular(map) => map.get_source_count() as usize,
            _ => return None,
        };
        Some(DirectMap {
            resolved: (0..scopes.len()).map(|_| OnceLock::new()).collect(),
            source_lines: (0..sources).map(|_| OnceLock::new()).collect(),
            map,
            minified,
            scopes,
            index,
            then: None,
        })
    }

    /// Runs `then` when this map is dropped.
    pub fn then(mut self, then: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.then = Some(Box::new(then));
        self
    }

    fn regular(&self) -> &sourcemap::SourceMap {
        match &self.map {
            DecodedMap::Regular(map) => map,
            // `new` takes only regular maps.
            _ => unreachable!("a DirectMap holds a regular map"),
        }
    }

    /// `SourceMapCache::lookup` over the cache the writer would write: the last kept
    /// token at or before `sp`, on `sp`'s line, unless it is unmapped. The writer keeps
    /// a token unless it repeats the one before it, so the kept token is the first of
    /// the run of repeats the last token at or before `sp` belongs to.
    pub fn lookup(&self, sp: SourcePosition) -> Option<MappedLocation<'_>> {
        let map = self.regular();
        let dst = |i: usize| map.get_token(i).map(|token| token.get_dst());
        let count = map.get_token_count() as usize;
        let (mut low, mut high) = (0, count);
        while low < high {
            let mid = low + (high - low) / 2;
            if dst(mid)? <= (sp.line, sp.column) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        let last = low.checked_sub(1)?;
        if dst(last)?.0 < sp.line {
            return None;
        }
        let location = self.token_location(last)?;
        let mut first = last;
        while first > 0 {
            let before = first - 1;
            if self.token_location(before).as_ref() != Some(&location) {
                break;
            }
            if dst(before)?.0 < sp.line {
                return None;
            }
            first = before;
        }
        if location.file == NO_FILE && location.line == u32::MAX && location.column == u32::MAX {
            return None;
        }
        let file = (location.file != NO_FILE).then(|| {
            let i = location.file;
            MappedFile::Direct {
                name: map.get_source(i).unwrap_or_default(),
                source: map.get_source_contents(i),
                lines: &self.source_lines[i as usize],
            }
        });
        Some(MappedLocation {
            file,
            line: location.line,
            column: location.column,
            name: location.name,
            scope: location.scope,
        })
    }

    fn token_location(&self, i: usize) -> Option<TokenLocation<'_>> {
        let map = self.regular();
        let token = map.get_token(i)?;
        let (line, column) = token.get_dst();
        let file = match token.get_src_id() {
            id if id < map.get_source_count() => id,
            _ => NO_FILE,
        };
        Some(TokenLocation {
            file,
            line: token.get_src_line(),
            column: token.get_src_col(),
            name: token.get_name(),
            scope: self.scope_at(SourcePosition::new(line, column)),
        })
    }

    /// The writer's `lookup_scope`: the same binary search, over the same keys.
    fn scope_at(&self, sp: SourcePosition) -> ScopeLookupResult<'_> {
        let position = |offset| self.minified.offset_to_position(offset);
        // Every offset kept has a position (see `index`).
        let found = self
            .index
            .binary_search_by(|entry| position(entry.0).cmp(&Some(sp)));
        let idx = match found {
            Ok(idx) => idx,
            Err(0) => 0,
            Err(idx) => idx - 1,
        };
        match self.index.get(idx).map(|entry| entry.1) {
            None | Some(ScopeSlot::Unknown) => ScopeLookupResult::Unknown,
            Some(ScopeSlot::Anonymous) => ScopeLookupResult::AnonymousScope,
            Some(ScopeSlot::Named(i)) => match self.original_name(i as usize) {
                Some(name) => ScopeLookupResult::NamedScope(name),
                None => ScopeLookupResult::AnonymousScope,
            },
        }
    }

    /// The writer's name for scope `i`: its minified name resolved through the map, or
    /// (Flutter) the name at the scope's end when resolving changed nothing.
    fn original_name(&self, i: usize) -> Option<&str> {
        self.resolved
            .get(i)?
            .get_or_init(|| {
                let (range, name) = self.scopes.get(i)?;
                let name = name.as_ref()?;
                let resolver = NameResolver::new(&self.minified, &self.map);
                let minified_name = name.to_string();
                let resolved = Some(resolver.resolve_name(name)).filter(|s| !s.is_empty());
                let at_end = if Some(&minified_name) == resolved.as_ref() {
                    self.closing_name(range)
                } else {
                    None
                };
                at_end.or(resolved)
            })
            .as_deref()
    }

    /// The writer's `try_resolve_closing_name`: the name on the token exactly at the
    /// scope's last character, unless the token past the end is the same one.
    fn closing_name(&self, range: &Range<u32>) -> Option<String> {
        let sp = self
            .minified
            .offset_to_position(range.end.wrapping_sub(1))?;
        let token = self.map.lookup_token(sp.line, sp.column)?;
        if token.get_dst() != (sp.line, sp.column) {
            return None;
        }
        let past_end = self
            .minified
            .offset_to_position(range.end)
            .and_then(|sp| self.map.lookup_token(sp.line, sp.column));
        if past_end == Some(token) {
            return None;
        }
        token.get_name().map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use symbolic::common::ByteView;

    use super::*;
    use crate::js::sourcemap_cache::{load, write_sourcemap_cache};
    use crate::lookup::{context_lines, context_lines_by};

    fn cache(minified: &str, map: &str) -> JsMapping {
        let mut out = Vec::new();
        write_sourcemap_cache(minified.as_bytes(), map.as_bytes(), &mut out).unwrap();
        JsMapping::Cache(load(ByteView::from_vec(out)).unwrap())
    }

    fn direct(minified: &str, map: &str) -> Option<JsMapping> {
        let decoded =
            DirectMap::decode(map.as_bytes(), SourceText::from(minified.to_owned())).unwrap();
        let scopes = DirectMap::scopes(minified);
        DirectMap::new(decoded, scopes.into()).map(|direct| JsMapping::Direct(Arc::new(direct)))
    }

    /// Every position of `minified` (and a few past each line's end and past the last
    /// line) resolves the same both ways, down to every line of the files it names.
    /// Returns how many positions resolved.
    fn assert_same_everywhere(minified: &str, map: &str) -> usize {
        let cache = cache(minified, map);
        let direct = direct(minified, map).expect("a map the direct answer covers");
        let lines: Vec<&str> = minified.split('\n').collect();
        let mut resolved = 0;
        for line in 0..lines.len() as u32 + 2 {
            let width = lines.get(line as usize).map_or(0, |l| l.len()) as u32;
            for column in 0..width + 3 {
                let sp = SourcePosition::new(line, column);
                let (expected, got) = (cache.lookup(sp), direct.lookup(sp));
                assert_eq!(got, expected, "line {line} column {column}");
                if let (Some(expected), Some(got)) = (expected, got) {
                    resolved += 1;
                    if let (Some(a), Some(b)) = (expected.file, got.file) {
                        for i in 0..=a.source().map_or(0, |s| s.lines().count() + 1) {
                            assert_eq!(b.line(i), a.line(i), "line {i} of {:?}", a.name());
                        }
                    }
                }
            }
        }
        resolved
    }

    fn fixture(name: &str) -> String {
        let path = format!("{}/fixtures/js/dist/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn fixture_maps_resolve_as_their_caches_do() {
        for name in ["app.min.js", "debugid.min.js", "nocontent.min.js"] {
            let resolved = assert_same_everywhere(&fixture(name), &fixture(&format!("{name}.map")));
            assert!(resolved > 100, "{name}: only {resolved} positions resolved");
        }
    }

    /// A small deterministic generator (no test should depend on a seed it cannot show).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n.max(1)
        }
    }

    /// Minified code of nested functions, classes, arrows and object methods over
    /// several lines, and where each identifier in it starts.
    fn generated_code(rng: &mut Lcg) -> (String, Vec<(u32, u32)>) {
        let mut code = String::new();
        let mut idents = Vec::new();
        let (mut line, mut open) = (0u32, 0);
        for i in 0..120 {
            let column = code.rsplit('\n').next().map_or(0, str::len) as u32;
            let piece = match rng.below(7) {
                0 => format!("function f{i}(a){{return a+{i}}}"),
                1 => format!("var v{i}=function(){{return {i}}};"),
                2 => format!("const a{i}=()=>{i};"),
                3 => format!("class C{i}{{m(){{return {i}}}}}"),
                4 => format!("o.p{i}={{g(){{return {i}}}}};"),
                5 if open < 4 => {
                    open += 1;
                    format!("function n{i}(b){{")
                }
                // Characters of two and four bytes, one and two UTF-16 units.
                6 if i % 2 == 0 => format!("var s{i}=function(){{return 'é😀'}};"),
                _ if open > 0 => {
                    open -= 1;
                    "}".to_owned()
                }
                _ => format!("x{i}();"),
            };
            // The name each piece gives its scope starts after its keyword, if any.
            let name_at = piece
                .find(|c: char| c.is_ascii_uppercase() || "fvaonx".contains(c))
                .map(|skip| {
                    let keyword = ["function ", "var ", "const ", "class ", "o."]
                        .iter()
                        .find(|k| piece.starts_with(*k))
                        .map_or(skip, |k| k.len());
                    keyword as u32
                });
            if let Some(offset) = name_at {
                idents.push((line, column + offset));
            }
            code.push_str(&piece);
            if rng.below(5) == 0 {
                code.push('\n');
                line += 1;
            }
        }
        code.push_str(&"}".repeat(open));
        code.push('\n');
        (code, idents)
    }

    /// A map over `code` whose tokens often repeat the one before them (runs the writer
    /// drops, some across lines), some unmapped, some named like the code they sit on.
    fn generated_map(rng: &mut Lcg, code: &str, idents: &[(u32, u32)]) -> String {
        let mut builder = sourcemap::SourceMapBuilder::new(Some("gen.min.js"));
        let sources = ["src/a.js", "src/b.js", ""];
        for (i, source) in sources.iter().enumerate() {
            let id = builder.add_source(source);
            if i == 0 {
                builder.set_source_contents(id, Some("line 0\nline 1\r\nline 2\n\nline 4"));
            }
        }
        let names = ["outer", "inner", "f3", "n5", "", "get"];
        let mut positions: Vec<(u32, u32)> = idents.to_vec();
        for (line, text) in code.split('\n').enumerate() {
            for _ in 0..text.len() / 3 {
                positions.push((line as u32, rng.below(text.len() as u64 + 1) as u32));
            }
        }
        positions.sort_unstable();
        positions.dedup();
        let mut last: Option<(u32, u32, Option<u32>, Option<u32>)> = None;
        for (dst_line, dst_col) in positions {
            let token = match (last, rng.below(10)) {
                (Some(last), 0..=4) => last,
                (_, 5) => (u32::MAX, u32::MAX, None, None),
                _ => (
                    rng.below(6) as u32,
                    rng.below(12) as u32,
                    Some(rng.below(sources.len() as u64) as u32),
                    match rng.below(3) {
                        0 => None,
                        _ => Some(builder.add_name(names[rng.below(6) as usize])),
                    },
                ),
            };
            let (src_line, src_col, source, name) = token;
            builder.add_raw(dst_line, dst_col, src_line, src_col, source, name, false);
            last = Some(token);
        }
        let mut out = Vec::new();
        builder.into_sourcemap().to_writer(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn generated_maps_resolve_as_their_caches_do() {
        for seed in 0..40 {
            let mut rng = Lcg(seed);
            let (code, idents) = generated_code(&mut rng);
            let map = generated_map(&mut rng, &code, &idents);
            let resolved = assert_same_everywhere(&code, &map);
            assert!(
                resolved > 100,
                "seed {seed}: only {resolved} positions resolved"
            );
        }
    }

    #[test]
    fn an_indexed_map_resolves_as_its_cache_does() {
        let (minified, map) = (fixture("app.min.js"), fixture("app.min.js.map"));
        let indexed = format!(
            r#"{{"version":3,"sections":[{{"offset":{{"line":0,"column":0}},"map":{map}}}]}}"#
        );
        assert_same_everywhere(&minified, &indexed);
    }

    #[test]
    fn code_that_does_not_parse_resolves_as_its_cache_does() {
        let (minified, map) = (fixture("app.min.js"), fixture("app.min.js.map"));
        let broken = minified.replacen('{', "{{", 1);
        assert!(extract_scope_names(&broken).is_err());
        assert_same_everywhere(&broken, &map);
    }

    #[test]
    fn two_tokens_at_one_position_are_left_to_the_cache() {
        let map = r#"{"version":3,"sources":["a.js"],"names":[],"mappings":"AAAA,AACA"}"#;
        assert!(direct("x", map).is_none());
        assert!(DirectMap::decode(b"{", SourceText::from(String::new())).is_err());
    }

    #[test]
    fn lines_are_the_lines_a_scan_gives() {
        let sources = [
            "",
            "a",
            "a\n",
            "a\n\n",
            "\n",
            "\n\n",
            "a\r\nb",
            "a\r\nb\r\n",
            "a\rb\n",
            "a\r",
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13",
            "é\nü\r\n",
        ];
        let long = format!("{}\nshort\n{}", "x".repeat(400), "y".repeat(200));
        for source in sources.iter().copied().chain([long.as_str()]) {
            let map = serde_json::json!({
                "version": 3, "sources": ["a.js"], "sourcesContent": [source],
                "names": [], "mappings": "AAAA",
            })
            .to_string();
            for mapping in [cache("x", &map), direct("x", &map).unwrap()] {
                let file = mapping
                    .lookup(SourcePosition::new(0, 0))
                    .unwrap()
                    .file
                    .unwrap();
                assert_eq!(file.source(), Some(source), "sourcesContent is kept");
                for lineno in 0..=16 {
                    for column in [0, 3, 170, 390] {
                        assert_eq!(
                            context_lines_by(|i| file.line(i), lineno, column),
                            context_lines(source, lineno, column),
                            "{source:?} line {lineno} column {column} ({mapping:?})"
                        );
                    }
                }
            }
        }
    }
}
