//! Resolving JS frames with the files a lookup found for them: the minified position
//! through the SourceMapCache to the original file, line, column and function name,
//! source context from the map's `sourcesContent` or the original files, and the
//! per-`abs_path` errors, all as upstream does it. Finding the files is the caller's
//! ([`JsLookup`]); this module never fetches.

use std::collections::BTreeSet;

use symbolic::sourcemapcache::SourcePosition;

use super::interface::{JsFrame, JsModuleError, JsModuleErrorKind, JsRequestOptions, JsStacktrace};
use super::lookup::{FileError, Found, JsLookup};
use super::mapping::{JsMapping, MappedFile, MappedLocation};
use super::names::{fold_function_name, function_for_token, scope_name};
use super::paths::{frame_filename_and_module, join_paths};
use crate::error::{CacheError, isolate};
use crate::lookup::context_lines_by;
use crate::types::FrameOrder;

/// The symbolicated and the raw stack traces (with minified context), and the errors
/// by `abs_path`, sorted as upstream sorts them. The lookup adds `scraping_attempts`
/// and `used_artifact_bundles` to make the response.
#[derive(Debug, Clone, Default)]
pub struct JsSymbolication {
    pub stacktraces: Vec<JsStacktrace>,
    pub raw_stacktraces: Vec<JsStacktrace>,
    pub errors: Vec<JsModuleError>,
}

/// Strips the `async ` prefix some old SDKs left on `abs_path`; the raw stack traces
/// show the stripped path too, and the lookup must be asked for it.
pub fn strip_async_prefixes(stacktraces: &mut [JsStacktrace]) {
    for frame in stacktraces.iter_mut().flat_map(|s| s.frames.iter_mut()) {
        if let Some(path) = frame.abs_path.strip_prefix("async ") {
            frame.abs_path = path.to_owned();
        }
    }
}

/// Symbolicates every frame of `stacktraces`. Frames are resolved outermost first
/// whatever `frame_order` says, because a callee may be named after its call site.
pub async fn symbolicate_stacktraces<L: JsLookup + Send>(
    lookup: &mut L,
    mut stacktraces: Vec<JsStacktrace>,
    options: JsRequestOptions,
) -> JsSymbolication {
    strip_async_prefixes(&mut stacktraces);
    let mut errors = BTreeSet::new();
    let mut symbolicated = Vec::with_capacity(stacktraces.len());

    for raw in &mut stacktraces {
        let callee_first = options.frame_order == FrameOrder::CalleeFirst;
        if callee_first {
            raw.frames.reverse();
        }
        let mut frames = Vec::with_capacity(raw.frames.len());
        let mut callsite_name: Option<String> = None;
        for raw_frame in &mut raw.frames {
            let result = symbolicate_frame(
                lookup,
                raw_frame,
                &mut errors,
                callsite_name.take(),
                options.apply_source_context,
            )
            .await;
            match result {
                Ok(mut frame) => {
                    callsite_name = frame.token_name.take();
                    frames.push(frame);
                }
                Err(kind) => {
                    errors.insert(JsModuleError {
                        abs_path: raw_frame.abs_path.clone(),
                        kind,
                    });
                    frames.push(raw_frame.clone());
                }
            }
        }
        if callee_first {
            frames.reverse();
            raw.frames.reverse();
        }
        symbolicated.push(JsStacktrace { frames });
    }

    JsSymbolication {
        stacktraces: symbolicated,
        raw_stacktraces: stacktraces,
        errors: errors.into_iter().collect(),
    }
}

/// Resolves one frame. On success the symbolicated frame; on failure the error for the
/// caller to record, and the caller keeps `raw_frame` (which may by then carry the
/// minified context, and, for a malformed map, where the map came from).
pub async fn symbolicate_frame<L: JsLookup + Send>(
    lookup: &mut L,
    raw_frame: &mut JsFrame,
    errors: &mut BTreeSet<JsModuleError>,
    callsite_name: Option<String>,
    apply_source_context: bool,
) -> Result<JsFrame, JsModuleErrorKind> {
    // Checked before any lookup: line 0 mostly comes with non-JS files (HTML), and
    // scraping those would be wasted.
    if raw_frame.lineno == 0 {
        return Err(JsModuleErrorKind::InvalidLocation {
            line: raw_frame.lineno,
            col: raw_frame.colno,
        });
    }
    let line = raw_frame.lineno;
    let col = raw_frame.colno.unwrap_or_default();

    let module = lookup.module(&raw_frame.abs_path).await;

    // The symbolicated frame starts as the raw one *before* the raw one gets minified
    // context, so a frame without original sources does not show minified lines.
    let mut frame = match &module.minified_source.entry {
        Ok(minified) => {
            let frame = raw_frame.clone();
            if apply_source_context {
                apply_context(raw_frame, |i| minified.contents.line(i));
            }
            frame
        }
        Err(FileError::ScrapingDisabled) => return Err(JsModuleErrorKind::ScrapingDisabled),
        Err(FileError::Cache(_)) => return Err(JsModuleErrorKind::MissingSource),
    };

    let sourcemap_label = module.sourcemap_label(&raw_frame.abs_path);
    let Some(mapping) = &module.mapping else {
        // A plain file without source map or debug id: nothing to resolve.
        return Ok(raw_frame.clone());
    };
    let map = usable_mapping(mapping, raw_frame, &sourcemap_label)?;
    frame.data.sourcemap = Some(sourcemap_label.clone());
    frame.data.sourcemap_origin = mapping.uri.clone();
    frame.data.resolved_with = Some(mapping.resolved_with);

    let position = SourcePosition::new(line - 1, col.saturating_sub(1));
    // The cache was built from a downloaded map: a lookup that panics in it makes the
    // map unusable for this frame, as a malformed map is.
    let token = isolate("sourcemap cache", || Ok(map.lookup(position)))
        .map_err(|_| JsModuleErrorKind::MalformedSourcemap {
            url: sourcemap_label.clone(),
        })?
        .ok_or(JsModuleErrorKind::InvalidLocation {
            line,
            col: Some(col),
        })?;
    let base = module.source_file_base(&raw_frame.abs_path);
    move_to_token(&mut frame, raw_frame, &token, callsite_name, base);

    if apply_source_context
        && let Some(file) = token.file
        && let Err(source) = apply_original_context(lookup, &mut frame, &file, base).await
    {
        errors.insert(JsModuleError {
            abs_path: raw_frame.abs_path.clone(),
            kind: JsModuleErrorKind::MissingSourceContent {
                source,
                sourcemap: sourcemap_label,
            },
        });
    }
    Ok(frame)
}

/// Context for a resolved frame from the map's `sourcesContent`, else from the original
/// file itself, which may have been uploaded (or be scrapable). Without either, the URL
/// the file was looked for at (empty if the map names none), for the error.
async fn apply_original_context<L: JsLookup + Send>(
    lookup: &mut L,
    frame: &mut JsFrame,
    file: &MappedFile<'_>,
    base: &str,
) -> Result<(), String> {
    if file.source().is_some() {
        apply_context(frame, |index| file.line(index));
        return Ok(());
    }
    let Some(url) = file.name().map(|name| join_paths(base, name)) else {
        return Err(String::new());
    };
    match lookup.source_file(&url).await {
        Ok(source) => {
            apply_context(frame, |i| source.line(i));
            Ok(())
        }
        Err(_) => Err(url),
    }
}

/// The mapping to resolve a frame with, or the error the frame gets instead.
fn usable_mapping<'m>(
    mapping: &'m Found<JsMapping>,
    raw_frame: &mut JsFrame,
    sourcemap_label: &str,
) -> Result<&'m JsMapping, JsModuleErrorKind> {
    match &mapping.entry {
        Ok(cache) => Ok(cache),
        Err(FileError::Cache(CacheError::Malformed(_))) => {
            // The map was found, only unusable: say where it came from.
            raw_frame.data.resolved_with = Some(mapping.resolved_with);
            raw_frame.data.sourcemap_origin = mapping.uri.clone();
            Err(JsModuleErrorKind::MalformedSourcemap {
                url: sourcemap_label.to_owned(),
            })
        }
        Err(FileError::ScrapingDisabled) => Err(JsModuleErrorKind::ScrapingDisabled),
        Err(FileError::Cache(_)) => Err(JsModuleErrorKind::MissingSourcemap),
    }
}

/// Moves `frame` to the original position `token` names, under the function name
/// upstream would give it; `base` is what the map's source paths are joined onto.
fn move_to_token(
    frame: &mut JsFrame,
    raw_frame: &JsFrame,
    token: &MappedLocation<'_>,
    callsite_name: Option<String>,
    base: &str,
) {
    frame.data.symbolicated = true;
    frame.token_name = token.name.map(str::to_owned);

    let scope = scope_name(token.scope, token.name, raw_frame.function.as_deref());
    frame.function = Some(fold_function_name(function_for_token(
        raw_frame.function.as_deref(),
        &scope,
        callsite_name.as_deref(),
    )));

    if let Some(file_name) = token.file_name().filter(|name| !name.is_empty()) {
        frame.abs_path = join_paths(base, file_name);
        let (filename, module_name) = frame_filename_and_module(file_name, &frame.abs_path);
        frame.filename = Some(filename);
        if module_name.is_some() {
            frame.module = module_name;
        }
    }
    frame.lineno = token.line.saturating_add(1);
    frame.colno = Some(token.column.saturating_add(1));
}

/// Context around the frame's line from a source's lines (`line` gives them by 0-based
/// index, as `str::lines` would).
fn apply_context<'a>(frame: &mut JsFrame, line: impl Fn(usize) -> Option<&'a str>) {
    let column = frame.colno.unwrap_or_default() as usize;
    if let Some((pre, line, post)) = context_lines_by(line, frame.lineno as usize, column) {
        frame.pre_context = pre;
        frame.context_line = Some(line);
        frame.post_context = post;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Arc;

    use serde::Deserialize;
    use symbolic::common::ByteView;

    use super::*;
    use crate::js::discovery::{SourceMapUrl, discover_debug_id, resolve_sourcemap_url};
    use crate::js::interface::{CachedFileUri, ResolvedWith};
    use crate::js::lookup::{JsModuleFiles, MinifiedSource, SourceText};
    use crate::js::sourcemap_cache::{load, write_sourcemap_cache};

    const BASE: &str = "http://example.com/assets";

    fn fixture(name: &str) -> String {
        let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "fixtures", "js", name]
            .iter()
            .collect();
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[derive(Deserialize)]
    struct Manifest {
        frames: Vec<ManifestFrame>,
    }

    #[derive(Deserialize)]
    struct ManifestFrame {
        minified: Position,
        original: Position,
    }

    #[derive(Deserialize)]
    struct Position {
        file: String,
        line: u32,
        column: u32,
        function: Option<String>,
        #[serde(default)]
        r#async: bool,
    }

    fn manifest() -> Manifest {
        serde_json::from_str(&fixture("manifest.json")).unwrap()
    }

    fn smcache(minified: &str, map: &str) -> Result<JsMapping, FileError> {
        let mut out = Vec::new();
        write_sourcemap_cache(minified.as_bytes(), map.as_bytes(), &mut out)?;
        Ok(JsMapping::Cache(load(ByteView::from_vec(out))?))
    }

    /// The fetching side over files in memory: minified files and maps by URL, as an
    /// individual-artifact lookup would find them, and original sources by URL.
    #[derive(Default)]
    struct MemoryLookup {
        files: HashMap<String, String>,
        asked: Vec<String>,
    }

    impl MemoryLookup {
        fn with(mut self, url: &str, contents: String) -> Self {
            self.files.insert(url.to_owned(), contents);
            self
        }

        fn dist(self, name: &str) -> Self {
            let url = format!("{BASE}/{name}");
            self.with(&url, fixture(&format!("dist/{name}")))
        }

        fn artifact(url: &str) -> CachedFileUri {
            CachedFileUri::IndividualFile(format!("memory://{url}"))
        }
    }

    impl JsLookup for MemoryLookup {
        async fn module(&mut self, abs_path: &str) -> Arc<JsModuleFiles> {
            self.asked.push(abs_path.to_owned());
            let Some(contents) = self.files.get(abs_path).cloned() else {
                return Arc::new(JsModuleFiles {
                    minified_source: Found {
                        uri: Some(CachedFileUri::ScrapedFile(abs_path.to_owned())),
                        entry: Err(FileError::ScrapingDisabled),
                        resolved_with: ResolvedWith::Unknown,
                    },
                    mapping: None,
                });
            };
            let sourcemap_url = resolve_sourcemap_url(abs_path, [], &contents);
            let debug_id = discover_debug_id(&contents);
            let mapping = match &sourcemap_url {
                None => None,
                Some(SourceMapUrl::Data(map)) => Some(Found {
                    uri: Some(CachedFileUri::Embedded),
                    entry: smcache(&contents, map),
                    resolved_with: ResolvedWith::Release,
                }),
                Some(SourceMapUrl::Remote(url)) => Some(Found {
                    uri: Some(Self::artifact(url)),
                    entry: match self.files.get(url) {
                        Some(map) => smcache(&contents, map),
                        None => Err(CacheError::NotFound.into()),
                    },
                    resolved_with: ResolvedWith::Release,
                }),
            };
            Arc::new(JsModuleFiles {
                minified_source: Found {
                    uri: Some(Self::artifact(abs_path)),
                    entry: Ok(MinifiedSource {
                        contents: contents.into(),
                        sourcemap_url,
                        debug_id,
                    }),
                    resolved_with: ResolvedWith::Release,
                },
                mapping,
            })
        }

        async fn source_file(&mut self, abs_path: &str) -> Result<SourceText, FileError> {
            self.asked.push(abs_path.to_owned());
            self.files
                .get(abs_path)
                .cloned()
                .map(SourceText::from)
                .ok_or(CacheError::NotFound.into())
        }
    }

    fn raw_frames(bundle: &str) -> Vec<JsFrame> {
        manifest()
            .frames
            .iter()
            .map(|f| JsFrame {
                function: f.minified.function.clone(),
                abs_path: format!(
                    "{}{BASE}/{bundle}",
                    if f.minified.r#async { "async " } else { "" }
                ),
                lineno: f.minified.line,
                colno: Some(f.minified.column),
                ..Default::default()
            })
            .collect()
    }

    fn callee_first() -> JsRequestOptions {
        JsRequestOptions {
            apply_source_context: true,
            frame_order: FrameOrder::CalleeFirst,
        }
    }

    async fn run<L: JsLookup + Send>(lookup: &mut L, frames: Vec<JsFrame>) -> JsSymbolication {
        let stacktraces = vec![JsStacktrace { frames }];
        symbolicate_stacktraces(lookup, stacktraces, callee_first()).await
    }

    fn original_line(file: &str, line: u32) -> String {
        fixture(file)
            .lines()
            .nth(line as usize - 1)
            .unwrap()
            .to_owned()
    }

    /// Every fixture frame maps back to where V8 put it in the original sources.
    fn assert_frames_are_original(result: &JsSymbolication, sourcemap: &str) {
        let manifest = manifest();
        let frames = &result.stacktraces[0].frames;
        assert_eq!(frames.len(), manifest.frames.len());
        for (frame, expected) in frames.iter().zip(&manifest.frames) {
            let want = &expected.original;
            assert_eq!(frame.abs_path, format!("http://example.com/{}", want.file));
            assert_eq!(
                frame.filename.as_deref(),
                Some(&*format!("../{}", want.file))
            );
            assert_eq!(
                frame.module.as_deref(),
                want.file.strip_suffix(".js"),
                "{frame:?}"
            );
            assert_eq!((frame.lineno, frame.colno), (want.line, Some(want.column)));
            assert_eq!(frame.function, want.function, "{frame:?}");
            assert_eq!(
                frame.context_line,
                Some(original_line(&want.file, want.line))
            );
            assert!(frame.data.symbolicated);
            assert_eq!(frame.data.sourcemap.as_deref(), Some(sourcemap));
            assert_eq!(frame.data.resolved_with, Some(ResolvedWith::Release));
        }
    }

    #[tokio::test]
    async fn fixture_frames_map_back_to_their_sources() {
        let mut lookup = MemoryLookup::default()
            .dist("app.min.js")
            .dist("app.min.js.map");
        let result = run(&mut lookup, raw_frames("app.min.js")).await;
        assert_eq!(result.errors, []);
        assert_frames_are_original(&result, &format!("{BASE}/app.min.js.map"));
        let origin = MemoryLookup::artifact(&format!("{BASE}/app.min.js.map"));
        assert_eq!(
            result.stacktraces[0].frames[0].data.sourcemap_origin,
            Some(origin)
        );

        // The raw frames keep their minified positions, lose the `async ` prefix, and
        // show the minified line as context.
        let raw = &result.raw_stacktraces[0].frames;
        for (frame, expected) in raw.iter().zip(&manifest().frames) {
            assert_eq!(frame.abs_path, format!("{BASE}/app.min.js"));
            assert_eq!(frame.lineno, expected.minified.line);
            assert!(frame.context_line.as_deref().unwrap().contains("{snip}"));
            assert!(!frame.data.symbolicated);
        }
    }

    #[tokio::test]
    async fn frame_order_only_changes_the_order() {
        let mut lookup = MemoryLookup::default()
            .dist("app.min.js")
            .dist("app.min.js.map");
        let callee_first = run(&mut lookup, raw_frames("app.min.js")).await;
        let mut frames = raw_frames("app.min.js");
        frames.reverse();
        let options = JsRequestOptions {
            apply_source_context: true,
            frame_order: FrameOrder::CallerFirst,
        };
        let stacktraces = vec![JsStacktrace { frames }];
        let mut caller_first = symbolicate_stacktraces(&mut lookup, stacktraces, options).await;
        caller_first.stacktraces[0].frames.reverse();
        assert_eq!(caller_first.stacktraces, callee_first.stacktraces);
    }

    #[tokio::test]
    async fn without_source_context_frames_have_none() {
        let mut lookup = MemoryLookup::default()
            .dist("app.min.js")
            .dist("app.min.js.map");
        let options = JsRequestOptions {
            apply_source_context: false,
            frame_order: FrameOrder::CalleeFirst,
        };
        let stacktraces = vec![JsStacktrace {
            frames: raw_frames("app.min.js"),
        }];
        let result = symbolicate_stacktraces(&mut lookup, stacktraces, options).await;
        let all = result.stacktraces.iter().chain(&result.raw_stacktraces);
        for frame in all.flat_map(|s| &s.frames) {
            assert_eq!(
                (frame.context_line.as_ref(), frame.pre_context.len()),
                (None, 0)
            );
        }
        assert!(result.stacktraces[0].frames[0].data.symbolicated);
    }

    #[tokio::test]
    async fn inline_maps_are_embedded_and_labelled_by_the_minified_file() {
        let mut lookup = MemoryLookup::default().dist("inline.min.js");
        let result = run(&mut lookup, raw_frames("inline.min.js")).await;
        assert_eq!(result.errors, []);
        assert_frames_are_original(&result, &format!("{BASE}/inline.min.js"));
        let frame = &result.stacktraces[0].frames[0];
        assert_eq!(frame.data.sourcemap_origin, Some(CachedFileUri::Embedded));
    }

    #[tokio::test]
    async fn debug_id_builds_map_to_their_sources() {
        let mut lookup = MemoryLookup::default()
            .dist("debugid.min.js")
            .dist("debugid.min.js.map");
        let result = run(&mut lookup, raw_frames("debugid.min.js")).await;
        assert_eq!(result.errors, []);
        assert_frames_are_original(&result, &format!("{BASE}/debugid.min.js.map"));
    }

    /// The fetching side over one artifact bundle, as upstream looks files up in
    /// bundles: the minified file by URL, its map by debug id.
    struct BundleLookup(crate::js::bundle::ArtifactBundles);

    impl JsLookup for BundleLookup {
        async fn module(&mut self, abs_path: &str) -> Arc<JsModuleFiles> {
            use crate::js::interface::FileKey;
            let key = FileKey::MinifiedSource {
                abs_path: abs_path.to_owned(),
                debug_id: None,
            };
            let found = self.0.find(&key).expect("the minified file is bundled");
            let sourcemap_url = found.file.sourcemap_url(abs_path).unwrap();
            let debug_id = found.file.debug_id;
            let map_key = FileKey::SourceMap {
                abs_path: sourcemap_url
                    .as_ref()
                    .and_then(SourceMapUrl::remote_url)
                    .map(str::to_owned),
                debug_id,
            };
            let map = self.0.find(&map_key).expect("the map is bundled");
            Arc::new(JsModuleFiles {
                mapping: Some(Found {
                    uri: Some(map.uri),
                    entry: smcache(found.file.text(), map.file.text()),
                    resolved_with: map.resolved_with,
                }),
                minified_source: Found {
                    uri: Some(found.uri),
                    entry: Ok(MinifiedSource {
                        contents: found.file.contents.clone(),
                        sourcemap_url,
                        debug_id,
                    }),
                    resolved_with: found.resolved_with,
                },
            })
        }

        async fn source_file(&mut self, _: &str) -> Result<SourceText, FileError> {
            Err(CacheError::NotFound.into())
        }
    }

    #[tokio::test]
    async fn bundled_debug_id_builds_map_to_their_sources() {
        use crate::js::bundle::{ArtifactBundle, ArtifactBundles};
        use crate::js::bundle::{BundleEntry as Entry, write_bundle};
        use crate::js::interface::FileKey;
        use symbolic::debuginfo::sourcebundle::SourceFileType;

        let minified = fixture("dist/debugid.min.js");
        let map = fixture("dist/debugid.min.js.map");
        let debug_id = discover_debug_id(&minified).unwrap();
        let id = debug_id.to_string();
        // The map is filed under a URL no frame names: only its debug id finds it.
        let data = write_bundle(&[
            Entry {
                url: "~/assets/debugid.min.js",
                ty: SourceFileType::MinifiedSource,
                contents: &minified,
                headers: &[("debug-id", &id)],
            },
            Entry {
                url: "~/maps/elsewhere.js.map",
                ty: SourceFileType::SourceMap,
                contents: &map,
                headers: &[("debug-id", &id)],
            },
        ])
        .unwrap();
        let mut bundles = ArtifactBundles::new();
        let bundle = ArtifactBundle::parse(data, &Default::default());
        bundles.insert(
            "sentry://project_debug_file/9",
            bundle,
            ResolvedWith::Release,
        );
        let mut lookup = BundleLookup(bundles);

        let result = run(&mut lookup, raw_frames("debugid.min.js")).await;
        assert_eq!(result.errors, []);
        let map_url = format!("{BASE}/debugid.min.js.map");
        let frames = &result.stacktraces[0].frames;
        for (frame, expected) in frames.iter().zip(&manifest().frames) {
            let want = &expected.original;
            assert_eq!((frame.lineno, frame.colno), (want.line, Some(want.column)));
            assert_eq!(frame.function, want.function);
            assert_eq!(
                frame.context_line,
                Some(original_line(&want.file, want.line))
            );
            assert_eq!(frame.data.resolved_with, Some(ResolvedWith::DebugId));
            assert_eq!(
                frame.data.sourcemap_origin,
                Some(CachedFileUri::Bundled(
                    "sentry://project_debug_file/9".into(),
                    FileKey::SourceMap {
                        abs_path: Some(map_url.clone()),
                        debug_id: Some(debug_id)
                    }
                ))
            );
        }
    }

    #[tokio::test]
    async fn without_sources_content_the_original_files_give_context() {
        let mut lookup = MemoryLookup::default()
            .dist("nocontent.min.js")
            .dist("nocontent.min.js.map");
        for file in ["src/main.js", "src/store.js", "src/util.js"] {
            lookup = lookup.with(&format!("http://example.com/{file}"), fixture(file));
        }
        let result = run(&mut lookup, raw_frames("nocontent.min.js")).await;
        assert_eq!(result.errors, []);
        assert_frames_are_original(&result, &format!("{BASE}/nocontent.min.js.map"));
        assert!(
            lookup
                .asked
                .contains(&"http://example.com/src/store.js".to_owned())
        );
    }

    #[tokio::test]
    async fn missing_original_files_are_reported_once_per_file() {
        let mut lookup = MemoryLookup::default()
            .dist("nocontent.min.js")
            .dist("nocontent.min.js.map");
        let result = run(&mut lookup, raw_frames("nocontent.min.js")).await;
        let frames = &result.stacktraces[0].frames;
        assert!(
            frames
                .iter()
                .all(|f| f.data.symbolicated && f.context_line.is_none())
        );
        let sources: Vec<_> = result
            .errors
            .iter()
            .map(|e| match &e.kind {
                JsModuleErrorKind::MissingSourceContent { source, sourcemap } => {
                    assert_eq!(sourcemap, &format!("{BASE}/nocontent.min.js.map"));
                    assert_eq!(e.abs_path, format!("{BASE}/nocontent.min.js"));
                    source.as_str()
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            sources,
            [
                "http://example.com/src/main.js",
                "http://example.com/src/store.js",
                "http://example.com/src/util.js"
            ]
        );
    }

    #[tokio::test]
    async fn line_zero_is_an_invalid_location_and_fetches_nothing() {
        let mut lookup = MemoryLookup::default().dist("app.min.js");
        let frame = JsFrame {
            abs_path: format!("{BASE}/app.min.js"),
            lineno: 0,
            colno: Some(0),
            function: Some("e".into()),
            ..Default::default()
        };
        let result = run(&mut lookup, vec![frame.clone()]).await;
        assert_eq!(result.stacktraces[0].frames, std::slice::from_ref(&frame));
        assert_eq!(result.raw_stacktraces[0].frames, [frame]);
        assert_eq!(
            result.errors,
            [JsModuleError {
                abs_path: format!("{BASE}/app.min.js"),
                kind: JsModuleErrorKind::InvalidLocation {
                    line: 0,
                    col: Some(0)
                },
            }]
        );
        assert!(lookup.asked.is_empty());
    }

    #[tokio::test]
    async fn a_column_past_every_token_still_resolves_to_the_last_one() {
        let mut lookup = MemoryLookup::default()
            .dist("app.min.js")
            .dist("app.min.js.map");
        let frame = JsFrame {
            abs_path: format!("{BASE}/app.min.js"),
            lineno: 99,
            colno: Some(1),
            ..Default::default()
        };
        let result = run(&mut lookup, vec![frame]).await;
        // There is no line 99: no token, and the frame is reported as it was sent.
        assert_eq!(
            result.errors[0].kind,
            JsModuleErrorKind::InvalidLocation {
                line: 99,
                col: Some(1)
            }
        );
        assert!(!result.stacktraces[0].frames[0].data.symbolicated);
    }

    #[tokio::test]
    async fn unfound_files_are_missing_or_not_scraped() {
        struct Failing(FileError);
        impl JsLookup for Failing {
            async fn module(&mut self, abs_path: &str) -> Arc<JsModuleFiles> {
                Arc::new(JsModuleFiles {
                    minified_source: Found {
                        uri: Some(CachedFileUri::ScrapedFile(abs_path.to_owned())),
                        entry: Err(self.0.clone()),
                        resolved_with: ResolvedWith::Scraping,
                    },
                    mapping: None,
                })
            }
            async fn source_file(&mut self, _: &str) -> Result<SourceText, FileError> {
                Err(self.0.clone())
            }
        }
        let frame = JsFrame {
            abs_path: "http//example.com/test.min.js".into(),
            filename: Some("test.js".into()),
            lineno: 1,
            colno: Some(1),
            ..Default::default()
        };
        let cases = [
            (
                CacheError::NotFound.into(),
                JsModuleErrorKind::MissingSource,
            ),
            (
                CacheError::DownloadError("relative URL without a base".into()).into(),
                JsModuleErrorKind::MissingSource,
            ),
            (
                FileError::ScrapingDisabled,
                JsModuleErrorKind::ScrapingDisabled,
            ),
        ];
        for (err, kind) in cases {
            let stacktraces = vec![JsStacktrace {
                frames: vec![frame.clone()],
            }];
            let result =
                symbolicate_stacktraces(&mut Failing(err), stacktraces, callee_first()).await;
            assert_eq!(result.stacktraces[0].frames, std::slice::from_ref(&frame));
            assert_eq!(
                result.raw_stacktraces[0].frames,
                std::slice::from_ref(&frame)
            );
            assert_eq!(
                result.errors,
                [JsModuleError {
                    abs_path: frame.abs_path.clone(),
                    kind
                }]
            );
        }
    }

    #[tokio::test]
    async fn a_file_without_map_keeps_its_frame_and_gets_context() {
        let source = "function f() {\n  throw new Error('x');\n}\nf();\n";
        let mut lookup = MemoryLookup::default().with("http://example.com/plain.js", source.into());
        let frame = JsFrame {
            abs_path: "http://example.com/plain.js".into(),
            function: Some("f".into()),
            lineno: 2,
            colno: Some(9),
            ..Default::default()
        };
        let result = run(&mut lookup, vec![frame]).await;
        assert_eq!(result.errors, []);
        let out = &result.stacktraces[0].frames[0];
        assert_eq!(out.context_line.as_deref(), Some("  throw new Error('x');"));
        assert_eq!(out.pre_context, ["function f() {"]);
        assert_eq!(out.post_context, ["}", "f();"]);
        assert!(!out.data.symbolicated);
        assert_eq!(out, &result.raw_stacktraces[0].frames[0]);
    }

    #[tokio::test]
    async fn a_malformed_map_is_reported_with_its_origin() {
        let mut lookup = MemoryLookup::default()
            .dist("app.min.js")
            .with(&format!("{BASE}/app.min.js.map"), "{not json".into());
        let frames = raw_frames("app.min.js");
        let result = run(&mut lookup, frames[..1].to_vec()).await;
        let map_url = format!("{BASE}/app.min.js.map");
        assert_eq!(
            result.errors,
            [JsModuleError {
                abs_path: format!("{BASE}/app.min.js"),
                kind: JsModuleErrorKind::MalformedSourcemap {
                    url: map_url.clone()
                },
            }]
        );
        let frame = &result.stacktraces[0].frames[0];
        assert!(!frame.data.symbolicated);
        assert_eq!(
            frame.data.sourcemap_origin,
            Some(MemoryLookup::artifact(&map_url))
        );
        assert_eq!(frame.data.resolved_with, Some(ResolvedWith::Release));
        assert_eq!(frame, &result.raw_stacktraces[0].frames[0]);
    }

    #[tokio::test]
    async fn a_missing_map_is_reported() {
        let mut lookup = MemoryLookup::default().dist("app.min.js");
        let frames = raw_frames("app.min.js");
        let result = run(&mut lookup, frames[..1].to_vec()).await;
        assert_eq!(result.errors[0].kind, JsModuleErrorKind::MissingSourcemap);
        assert_eq!(result.stacktraces[0].frames[0].data.sourcemap_origin, None);
    }

    #[tokio::test]
    async fn an_anonymous_callee_is_named_by_its_call_site() {
        // `(function(){ throw 1 })` called as `boom` by `outer`, by hand:
        // minified `function o(){(function(){throw 1})()}` with names for both.
        let minified = "function o(){(function(){throw 1})()}\n";
        let source =
            "function outer() {\n  boom();\n}\nconst boom = function () {\n  throw 1;\n};\n";
        // Minified column → original: 0 → 0:0; 9 → 0:9 `outer`; 13 → 1:2 `boom` (the
        // call); 25 → 4:2 (`throw`).
        let map = format!(
            r#"{{"version":3,"sources":["a.js"],"names":["outer","boom"],"sourcesContent":[{}],"mappings":"AAAA,SAASA,IACPC,YAGA"}}"#,
            serde_json::to_string(source).unwrap()
        );
        let mut lookup = MemoryLookup::default()
            .with(
                "http://example.com/a.min.js",
                format!("{minified}//# sourceMappingURL=a.min.js.map\n"),
            )
            .with("http://example.com/a.min.js.map", map);
        let frame = |col| JsFrame {
            abs_path: "http://example.com/a.min.js".into(),
            lineno: 1,
            colno: Some(col),
            ..Default::default()
        };
        // Callee first: the anonymous function, then `o` at its call.
        let result = run(&mut lookup, vec![frame(26), frame(14)]).await;
        let names: Vec<_> = result.stacktraces[0]
            .frames
            .iter()
            .map(|f| f.function.as_deref())
            .collect();
        assert_eq!(names, [Some("boom"), Some("outer")]);
    }
}
