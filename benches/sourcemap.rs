//! SourceMapCaches of a large real-world bundle: how long building one takes (what the
//! first JS request for a new release waits for), and one frame lookup on a loaded
//! cache (what every JS frame costs afterwards).
//!
//! The bundle is made by `scripts/gen-big-sourcemap.sh` (esbuild over pinned npm
//! packages, a ~30 MB source map) into `$OMNISYM_BIG_SOURCEMAP_DIR`, or else into
//! `<tmp>/omnisym-big-sourcemap`, once; later runs reuse it. Without node and npm the
//! build bench is skipped with a message, and the lookup bench runs on the small
//! committed fixture (`fixtures/js/dist/app.min.js`) instead.
//!
//! - `build_30mb`: minified file + map → SourceMapCache bytes (10 samples);
//! - `direct_30mb`: what a cold request waits for instead (see `js::mapping`): the map
//!   decoded and the minified file's scopes parsed on two threads, then 30 positions
//!   resolved (10 samples);
//! - `lookup_frame`: one `lookup` of a (seeded) random position of the minified file,
//!   reading what a frame needs: file name, line, column, scope and token name;
//! - `lookup_frame_direct`: the same on the decoded map, scopes resolved already.
//!
//! Before measuring, the 4096 positions the lookups use are resolved both ways and
//! must agree.
//!
//! Run with `cargo bench --bench sourcemap` (add `-- lookup_frame` for only the lookup).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use omnisym::js::mapping::{DirectMap, JsMapping};
use omnisym::js::sourcemap_cache::{load, write_sourcemap_cache};
use omnisym::js::text::SourceText;
use symbolic::common::ByteView;
use symbolic::sourcemapcache::{ScopeLookupResult, SourcePosition};

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The big bundle's directory, generated on first use; `None` when it cannot be made.
fn big_bundle() -> Option<PathBuf> {
    // `cargo test --all-targets` runs benches once as a smoke test (without the `--bench`
    // that `cargo bench` passes), in a debug build: no npm install and 30 MB build there.
    if !std::env::args().any(|arg| arg == "--bench") {
        eprintln!("sourcemap bench: smoke test, so build_30mb is skipped");
        return None;
    }
    let dir = std::env::var_os("OMNISYM_BIG_SOURCEMAP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("omnisym-big-sourcemap"));
    if dir.join("big.min.js.map").is_file() && dir.join("big.min.js").is_file() {
        return Some(dir);
    }
    let have_node = ["node", "npm"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !have_node {
        eprintln!(
            "sourcemap bench: node/npm not found, so the ~30 MB bundle cannot be made; \
             skipping build_30mb and looking up in the small fixture instead"
        );
        return None;
    }
    eprintln!(
        "sourcemap bench: generating the big bundle into {}",
        dir.display()
    );
    let status = Command::new(manifest_dir().join("scripts/gen-big-sourcemap.sh"))
        .arg(&dir)
        .status();
    match status {
        Ok(s) if s.success() => Some(dir),
        other => {
            eprintln!(
                "sourcemap bench: gen-big-sourcemap.sh failed ({other:?}); skipping build_30mb"
            );
            None
        }
    }
}

fn build(minified: &[u8], map: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(map.len() / 2);
    write_sourcemap_cache(minified, map, &mut out).expect("the bundle's map is valid");
    out
}

/// Positions spread over the minified file, from a fixed seed so runs compare.
fn positions(minified: &str, count: usize) -> Vec<SourcePosition> {
    let lines: Vec<&str> = minified.lines().collect();
    let mut state: u64 = 0x5eed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    (0..count)
        .map(|_| {
            let line = next() % lines.len();
            let column = next() % lines[line].len().max(1);
            SourcePosition::new(line as u32, column as u32)
        })
        .collect()
}

/// The map decoded and the file's scopes parsed at once, as a cold request does.
fn direct(minified: &str, map: &[u8]) -> JsMapping {
    let (decoded, scopes) = std::thread::scope(|threads| {
        let text = SourceText::from(minified.to_owned());
        let decoded = threads.spawn(|| DirectMap::decode(map, text).expect("the map decodes"));
        let scopes = DirectMap::scopes(minified);
        (decoded.join().expect("decoding does not panic"), scopes)
    });
    let direct = DirectMap::new(decoded, scopes.into()).expect("a map the direct answer covers");
    JsMapping::Direct(std::sync::Arc::new(direct))
}

fn resolve(mapping: &JsMapping, position: SourcePosition) -> usize {
    let Some(token) = mapping.lookup(black_box(position)) else {
        return 0;
    };
    let scope_len = match token.scope {
        ScopeLookupResult::NamedScope(name) => name.len(),
        _ => 0,
    };
    black_box((token.file_name(), token.line, token.column, token.name));
    scope_len
}

fn lookup_bench(c: &mut Criterion, name: &str, mapping: &JsMapping, positions: &[SourcePosition]) {
    let mut i = 0;
    c.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % positions.len();
            resolve(mapping, positions[i])
        })
    });
}

fn benches(c: &mut Criterion) {
    let (minified, map) = match big_bundle() {
        Some(dir) => {
            let minified = std::fs::read(dir.join("big.min.js")).expect("readable");
            let map = std::fs::read(dir.join("big.min.js.map")).expect("readable");
            eprintln!(
                "sourcemap bench: minified {:.1} MB, map {:.1} MB",
                minified.len() as f64 / 1e6,
                map.len() as f64 / 1e6
            );
            let mut group = c.benchmark_group("sourcemap_cache");
            group
                .sample_size(10)
                .measurement_time(Duration::from_secs(30));
            group.bench_function("build_30mb", |b| b.iter(|| build(&minified, &map)));
            let text = std::str::from_utf8(&minified).expect("UTF-8");
            let asked = positions(text, 30);
            group.bench_function("direct_30mb", |b| {
                b.iter(|| {
                    let mapping = direct(text, &map);
                    asked.iter().map(|&p| resolve(&mapping, p)).sum::<usize>()
                })
            });
            group.finish();
            (minified, map)
        }
        None => {
            let dist = manifest_dir().join("fixtures/js/dist");
            (
                std::fs::read(dist.join("app.min.js")).expect("fixture"),
                std::fs::read(dist.join("app.min.js.map")).expect("fixture"),
            )
        }
    };
    let cache = JsMapping::Cache(
        load(ByteView::from_vec(build(&minified, &map))).expect("the cache loads"),
    );
    let minified = String::from_utf8(minified).expect("UTF-8");
    let direct = direct(&minified, &map);
    let positions = positions(&minified, 4096);
    for &position in &positions {
        assert_eq!(
            direct.lookup(position),
            cache.lookup(position),
            "{position:?} resolves alike both ways"
        );
    }
    lookup_bench(c, "lookup_frame", &cache, &positions);
    lookup_bench(c, "lookup_frame_direct", &direct, &positions);
}

criterion_group!(sourcemap, benches);
criterion_main!(sourcemap);
