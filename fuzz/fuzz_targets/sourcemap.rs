//! A minified script and its source map through the JS pipeline: the script's own
//! source-map reference and debug id as the lookup discovers them (an inline `data:`
//! map is used when the input has no map of its own), the SourceMapCache written and
//! mapped back as the cache layer does, then stack traces resolved against it by
//! `symbolicate_stacktraces` (naming, paths, source context), at positions taken from
//! the script's own lines.
//!
//! The input is the script, a NUL byte, then the map. `JsLookup` is the one part
//! played here: it hands out these two files for every `abs_path`, as the real lookup
//! would after fetching them.
//!
//! symbolic (and the `sourcemap` crate) parse the map inside `isolate` in the server,
//! so the isolating policy applies; resolving frames is not isolated.

#![no_main]

use std::io::BufWriter;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use omnisym::cache::DerivedFormat;
use omnisym::error::{CacheError, CacheResult, isolate};
use omnisym::js::discovery::{
    SourceMapUrl, discover_debug_id, resolve_sourcemap_url, sourcemap_debug_id,
};
use omnisym::js::interface::{
    CachedFileUri, JsFrame, JsRequestOptions, JsStacktrace, ResolvedWith,
};
use omnisym::js::sourcemap_cache::{
    OwnedSourceMapCache, SourceMapCacheFormat, SourceMapCacheInput,
};
use omnisym::js::lookup::{
    FileError, Found, JsLookup, JsModuleFiles, MinifiedSource, SourceText,
};
use omnisym::js::mapping::{DirectMap, JsMapping};
use omnisym::js::symbolicate::symbolicate_stacktraces;
use omnisym::types::FrameOrder;
use omnisym_fuzz::{install_isolating_hook, isolating, runtime, scratch_dir, split_once};
use symbolic::common::ByteView;

const ABS_PATH: &str = "https://example.com/static/app.min.js";
/// Frames per input: a few per line of the script's first lines.
const MAX_LINES: usize = 8;

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("sourcemap", data, run);
});

fn run(data: &[u8]) {
    let (minified, map) = split_once(data, 0);
    let Ok(minified) = SourceText::new(ByteView::from_vec(minified.to_vec())) else {
        return;
    };
    let text = minified.as_str();
    let sourcemap_url = resolve_sourcemap_url(ABS_PATH, [], text);
    let debug_id = discover_debug_id(text);
    let (map, map_uri) = match (&sourcemap_url, map.is_empty()) {
        (Some(SourceMapUrl::Data(inline)), true) => {
            (inline.as_bytes().to_vec(), CachedFileUri::Embedded)
        }
        _ => (
            map.to_vec(),
            CachedFileUri::IndividualFile(format!("{ABS_PATH}.map")),
        ),
    };
    if let Ok(map) = std::str::from_utf8(&map) {
        let _ = sourcemap_debug_id(map);
    }
    let map = ByteView::from_vec(map);
    let smcache = build(minified.bytes().clone(), map.clone());
    // The answer of a cold map, straight from the map and the file's scopes.
    let direct = isolate(SourceMapCacheFormat::KIND.name, || {
        let decoded = DirectMap::decode(&map)?;
        let scopes = DirectMap::scopes(minified.as_str());
        Ok(DirectMap::new(decoded, minified.clone(), scopes))
    });
    let options = JsRequestOptions {
        apply_source_context: true,
        frame_order: if data.len().is_multiple_of(2) {
            FrameOrder::CallerFirst
        } else {
            FrameOrder::CalleeFirst
        },
    };
    let answer = |mapping: Result<JsMapping, FileError>| {
        let module = Arc::new(JsModuleFiles {
            minified_source: Found {
                uri: Some(CachedFileUri::IndividualFile(ABS_PATH.into())),
                entry: Ok(MinifiedSource {
                    contents: minified.clone(),
                    sourcemap_url: sourcemap_url.clone(),
                    debug_id,
                }),
                resolved_with: ResolvedWith::Release,
            },
            mapping: Some(Found {
                uri: Some(map_uri.clone()),
                entry: mapping,
                resolved_with: ResolvedWith::Release,
            }),
        });
        let mut lookup = Files { module };
        let stacktraces = vec![JsStacktrace { frames: frames(text) }];
        let done = runtime().block_on(symbolicate_stacktraces(&mut lookup, stacktraces, options));
        format!("{:?}", done.stacktraces)
    };
    let cached = smcache.is_ok();
    let from_cache = answer(smcache.map(JsMapping::Cache).map_err(FileError::from));
    // Where both answer, they answer alike: a cold request gets what a warm one gets.
    if let Ok(Some(direct)) = direct
        && cached
    {
        let from_map = answer(Ok(JsMapping::Direct(Arc::new(direct))));
        assert_eq!(from_map, from_cache, "the direct answer differs from the cache's");
    }
}

/// Writes the SourceMapCache into a file and maps it back, as the cache layer does.
fn build(
    minified: ByteView<'static>,
    sourcemap: ByteView<'static>,
) -> CacheResult<OwnedSourceMapCache> {
    let temp = tempfile::NamedTempFile::new_in(scratch_dir()).expect("a temp file");
    let file = temp.reopen().expect("reopening the temp file");
    let kind = SourceMapCacheFormat::KIND.name;
    isolate(kind, move || {
        let mut out = BufWriter::new(file);
        SourceMapCacheFormat::convert(
            SourceMapCacheInput {
                minified,
                sourcemap,
            },
            &mut out,
        )
    })?;
    let view = ByteView::open(temp.path()).map_err(CacheError::internal)?;
    isolate(kind, || SourceMapCacheFormat::load(view))
}

/// Frames at the start, middle and end (and past the end) of the script's first
/// lines, one past its last line, and at line 0, which is never valid.
fn frames(text: &str) -> Vec<JsFrame> {
    let frame = |lineno: u32, colno: u32, function: Option<&str>| JsFrame {
        abs_path: ABS_PATH.into(),
        lineno,
        colno: Some(colno),
        function: function.map(str::to_owned),
        ..JsFrame::default()
    };
    let mut frames = Vec::new();
    let mut lines = 0;
    for (index, line) in text.lines().take(MAX_LINES).enumerate() {
        let lineno = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let len = u32::try_from(line.len()).unwrap_or(u32::MAX);
        for colno in [1, len / 2 + 1, len, len.saturating_add(2)] {
            frames.push(frame(lineno, colno, (colno % 2 == 0).then_some("e")));
        }
        lines = lineno;
    }
    frames.push(frame(lines.saturating_add(1), 1, None));
    frames.push(frame(0, 0, None));
    frames.push(frame(u32::MAX, u32::MAX, Some("x")));
    frames
}

/// The files of the input, for whatever `abs_path` a frame (or a map's `sources`
/// entry) names; original source files are not there to fetch.
struct Files {
    module: Arc<JsModuleFiles>,
}

impl JsLookup for Files {
    fn module(&mut self, _abs_path: &str) -> impl Future<Output = Arc<JsModuleFiles>> + Send {
        std::future::ready(self.module.clone())
    }

    fn source_file(
        &mut self,
        _abs_path: &str,
    ) -> impl Future<Output = Result<SourceText, FileError>> + Send {
        std::future::ready(Err(CacheError::NotFound.into()))
    }
}
