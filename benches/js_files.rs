//! The per-request work of a warm `/symbolicate-js` request that depends on its files,
//! not on HTTP: finding a file in an opened artifact bundle (read out of the zip, as
//! every request did, or answered from the memo of files already read), and source
//! context for a frame deep in a large file (scanning the text up to the line, or from
//! the line index the file's text keeps).
//!
//! The bundle holds the committed fixture `fixtures/js/dist/debugid.min.js` and its map;
//! the large file is that map's text repeated to about 4 MB of lines.
//!
//! Run with `cargo bench --bench js_files`.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use omnisym::js::bundle::{
    ArtifactBundle, ArtifactBundles, BundleEntry, BundleFileMemo, BundleLimits, write_bundle,
};
use omnisym::js::discovery::discover_debug_id;
use omnisym::js::interface::{FileKey, ResolvedWith};
use omnisym::js::text::SourceText;
use omnisym::lookup::{context_lines, context_lines_by};
use symbolic::debuginfo::sourcebundle::SourceFileType;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/js/dist")
        .join(name);
    std::fs::read_to_string(path).expect("committed fixture")
}

fn bundles(memo: Option<&BundleFileMemo>) -> ArtifactBundles {
    let minified = fixture("debugid.min.js");
    let map = fixture("debugid.min.js.map");
    let id = discover_debug_id(&minified)
        .expect("the fixture has a debug id")
        .to_string();
    let data = write_bundle(&[
        BundleEntry {
            url: "~/assets/debugid.min.js",
            ty: SourceFileType::MinifiedSource,
            contents: &minified,
            headers: &[("debug-id", &id)],
        },
        BundleEntry {
            url: "~/assets/debugid.min.js.map",
            ty: SourceFileType::SourceMap,
            contents: &map,
            headers: &[("debug-id", &id)],
        },
    ])
    .unwrap();
    let mut bundle = ArtifactBundle::parse(data, &BundleLimits::default()).unwrap();
    if let Some(memo) = memo {
        bundle = bundle.remembering(memo);
    }
    let mut bundles = ArtifactBundles::new();
    bundles.insert(
        "sentry://project_debug_file/1",
        Ok(bundle),
        ResolvedWith::DebugId,
    );
    bundles
}

fn bench(c: &mut Criterion) {
    let minified = fixture("debugid.min.js");
    let debug_id = discover_debug_id(&minified).unwrap();
    let keys = [
        FileKey::MinifiedSource {
            abs_path: "https://app.example/assets/debugid.min.js".into(),
            debug_id: Some(debug_id),
        },
        FileKey::SourceMap {
            abs_path: Some("https://app.example/assets/debugid.min.js.map".into()),
            debug_id: Some(debug_id),
        },
    ];
    let mut group = c.benchmark_group("js_files");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));

    let reading = bundles(None);
    group.bench_function("bundle_find_read", |b| {
        b.iter(|| {
            for key in &keys {
                black_box(reading.find(key).expect("bundled"));
            }
        })
    });
    let memo = BundleFileMemo::new(32 * 1024 * 1024);
    let remembering = bundles(Some(&memo));
    for key in &keys {
        remembering.find(key).expect("bundled");
    }
    group.bench_function("bundle_find_remembered", |b| {
        b.iter(|| {
            for key in &keys {
                black_box(remembering.find_remembered(key).unwrap().expect("bundled"));
            }
        })
    });

    let map = fixture("debugid.min.js.map");
    let large = map.repeat(4 * 1024 * 1024 / map.len().max(1) + 1);
    let large = large.replace(',', ",\n");
    let lines = large.lines().count();
    let lineno = lines - 10;
    let text = SourceText::from(large.clone());
    text.line(0);
    group.bench_function("context_scan_deep_line", |b| {
        b.iter(|| black_box(context_lines(&large, lineno, 20)))
    });
    group.bench_function("context_indexed_deep_line", |b| {
        b.iter(|| black_box(context_lines_by(|i| text.line(i), lineno, 20)))
    });
    assert_eq!(
        context_lines(&large, lineno, 20),
        context_lines_by(|i| text.line(i), lineno, 20)
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
