//! An artifact bundle (the `SYSB`-headed zip that Sentry's tooling uploads) as the JS
//! pipeline uses one: opened (`ArtifactBundle::parse`), searched for a minified file by
//! debug id and by the candidate URLs of a frame's `abs_path`, its source map found by
//! the file's reference (or inline `data:` URL) and by debug id, then the two turned
//! into a SourceMapCache and asked for a position.
//!
//! The seeds' files live under `~/static/app.min.js` (and `.map`) with the debug id
//! below, so mutations of them reach the lookups.
//!
//! The server opens bundles and builds SourceMapCaches inside `isolate` (the isolating
//! policy); searching an opened bundle is not isolated.

#![no_main]

use libfuzzer_sys::fuzz_target;
use omnisym::error::{CacheResult, isolate};
use omnisym::fetch::DecompressLimits;
use omnisym::js::bundle::{ArtifactBundle, ArtifactBundles, BundleLimits};
use omnisym::js::discovery::SourceMapUrl;
use omnisym::js::interface::{FileKey, ResolvedWith};
use omnisym::js::sourcemap_cache::{OwnedSourceMapCache, load, write_sourcemap_cache};
use omnisym::js::text::SourceText;
use omnisym_fuzz::{install_isolating_hook, isolating};
use symbolic::common::{ByteView, DebugId};
use symbolic::sourcemapcache::SourcePosition;

const ABS_PATH: &str = "https://example.com/static/app.min.js";
const DEBUG_ID: &str = "2f259f80-58b7-44cb-bb4d-cd0b4e3e8a0b";

/// The server's limits, with the largest file far below its 1 GiB, so that an input
/// whose file would inflate further hits the limit rather than the fuzzer's RSS limit.
const BUNDLE_LIMITS: BundleLimits = BundleLimits {
    max_entries: 100_000,
    entries: DecompressLimits {
        max_size: 16 << 20,
        max_ratio: 200,
        ratio_floor: 1 << 20,
    },
};

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("artifact_bundle", data, run);
});

fn run(data: &[u8]) {
    let bundle = isolate("artifact_bundle", || {
        ArtifactBundle::parse(ByteView::from_vec(data.to_vec()), &BUNDLE_LIMITS)
    });
    let mut bundles = ArtifactBundles::new();
    bundles.insert(
        "sentry://project_debug_file/1",
        bundle,
        ResolvedWith::Release,
    );
    let debug_id: DebugId = DEBUG_ID.parse().expect("a valid debug id");
    for debug_id in [Some(debug_id), None] {
        let minified = bundles.find(&FileKey::MinifiedSource {
            abs_path: ABS_PATH.into(),
            debug_id,
        });
        let Some(minified) = minified else {
            continue;
        };
        let file = minified.file;
        let map = match file.sourcemap_url(ABS_PATH) {
            Ok(Some(SourceMapUrl::Data(inline))) => Some(SourceText::from(inline)),
            Ok(Some(SourceMapUrl::Remote(url))) => bundles
                .find(&FileKey::SourceMap {
                    abs_path: Some(url),
                    debug_id: debug_id.or(file.debug_id),
                })
                .map(|found| found.file.contents.clone()),
            Ok(None) => debug_id
                .or(file.debug_id)
                .and_then(|debug_id| {
                    bundles.find(&FileKey::SourceMap {
                        abs_path: None,
                        debug_id: Some(debug_id),
                    })
                })
                .map(|found| found.file.contents.clone()),
            Err(_) => None,
        };
        if let Some(map) = map
            && let Ok(cache) = build(file.contents.as_str(), map.as_str())
        {
            let _ = cache.get().lookup(SourcePosition::new(0, 0));
        }
    }
}

fn build(minified: &str, map: &str) -> CacheResult<OwnedSourceMapCache> {
    let mut out = Vec::new();
    isolate("sourcemap_caches", || {
        write_sourcemap_cache(minified.as_bytes(), map.as_bytes(), &mut out)
    })?;
    isolate("sourcemap_caches", || load(ByteView::from_vec(out)))
}
