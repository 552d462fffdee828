//! Warm SymCache lookups: what `/symbolicate` does per frame once the SymCache of a
//! module is in memory.
//!
//! SymCaches are built in memory from the native fixtures (`fixtures/native/elf/crash.debug`
//! and `fixtures/native/pe/crash.pdb`) and every probe address of
//! `fixtures/native/manifest.json` is looked up once per iteration, in four variants:
//!
//! - `lookup_only`: the lookup and walking the inline chain, reading line, entry pc and
//!   the borrowed function name (no allocation, no demangling);
//! - `lookup_full_path`: plus `File::full_path()` (what every frame's `abs_path` costs);
//! - `frame_no_demangle`: plus what the server allocates per (inline) frame: the full
//!   file path, its file name, the symbol name;
//! - `frame_memo_demangle`: plus demangling through the server's own `DemangleCache`
//!   (a bounded memo that plain C names skip);
//! - `frame_demangle_uncached`: the same, demangling every name from scratch.
//!
//! Run with `cargo bench --bench symcache_lookup` (defaults: 1 s warm-up, 3 s measurement).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use omnisym::native::demangle::DemangleCache;
use symbolic::common::{Name, split_path};
use symbolic::debuginfo::Object;
use symbolic::demangle::{Demangle, DemangleOptions};
use symbolic::symcache::{SymCache, SymCacheConverter};

/// What the server uses: full signatures without return types.
const DEMANGLE: DemangleOptions = DemangleOptions::complete().return_type(false);

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/native"))
}

/// The SymCache bytes for one debug file, exactly as the server's `FetchSymCache` writes them.
fn build_symcache(debug_file: &str) -> Vec<u8> {
    let data = std::fs::read(fixtures().join(debug_file)).expect("fixture is readable");
    let object = Object::parse(&data).expect("fixture parses");
    let mut converter = SymCacheConverter::new();
    converter
        .process_object(&object)
        .expect("fixture converts to a SymCache");
    let mut out = Vec::new();
    converter.serialize(&mut out).expect("SymCache serialises");
    out
}

/// `objects.<name>.probes[].rel_addr` from the manifest.
fn probes(manifest: &serde_json::Value, name: &str) -> Vec<u64> {
    manifest["objects"][name]["probes"]
        .as_array()
        .expect("manifest lists probes")
        .iter()
        .map(|probe| {
            let hex = probe["rel_addr"].as_str().expect("rel_addr is a string");
            u64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("rel_addr is hex")
        })
        .collect()
}

/// The strings the server puts into one symbolicated (inline) frame.
struct Frame {
    function: String,
    symbol: String,
    filename: String,
    abs_path: String,
    lineno: u32,
    sym_addr: u32,
}

/// Lookup and inline walk only; returns the number of (inline) frames.
fn lookup_only(cache: &SymCache<'_>, addrs: &[u64]) -> usize {
    let mut frames = 0;
    for &addr in addrs {
        for location in cache.lookup(addr) {
            let func = location.function();
            black_box((location.line(), func.entry_pc(), func.name()));
            frames += 1;
        }
    }
    frames
}

/// Lookup plus `File::full_path` (join and clean, allocating) per (inline) frame.
fn full_paths(cache: &SymCache<'_>, addrs: &[u64]) -> usize {
    let mut bytes = 0;
    for &addr in addrs {
        for location in cache.lookup(addr) {
            bytes += location.file().map_or(0, |f| f.full_path().len());
        }
    }
    bytes
}

/// The per-frame work of `symbolicate_frame`, with a pluggable demangler.
fn frames_with(
    cache: &SymCache<'_>,
    addrs: &[u64],
    demangle: impl Fn(&Name<'_>) -> Option<String>,
) -> Vec<Frame> {
    let mut out = Vec::new();
    for &addr in addrs {
        for location in cache.lookup(addr) {
            let abs_path = location.file().map(|f| f.full_path()).unwrap_or_default();
            let filename = split_path(&abs_path).1.to_owned();
            let func = location.function();
            let function =
                demangle(&func.name_for_demangling()).unwrap_or_else(|| func.name().to_owned());
            out.push(Frame {
                function,
                symbol: func.name().to_owned(),
                filename,
                abs_path,
                lineno: location.line(),
                sym_addr: func.entry_pc(),
            });
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("manifest.json")).expect("manifest is readable"),
    )
    .expect("manifest is JSON");

    for (name, debug_file) in [("elf", "elf/crash.debug"), ("pe", "pe/crash.pdb")] {
        let bytes = build_symcache(debug_file);
        let cache = SymCache::parse(&bytes).expect("SymCache parses");
        let addrs = probes(&manifest, name);

        // Every probe must resolve, or the benchmark measures misses.
        let frames = frames_with(&cache, &addrs, |_| None);
        for &addr in &addrs {
            assert!(
                cache.lookup(addr).next().is_some(),
                "{name} probe {addr:#x} has no symbol"
            );
        }
        for f in &frames {
            assert!(f.lineno > 0 && f.sym_addr > 0, "{name}: frame without line");
            assert!(!f.function.is_empty() && !f.symbol.is_empty());
            assert!(f.abs_path.ends_with(&f.filename) && !f.filename.is_empty());
        }
        eprintln!(
            "{name}: SymCache {} bytes, {} probes -> {} frames (inlinees included)",
            bytes.len(),
            addrs.len(),
            frames.len()
        );

        let mut group = c.benchmark_group(format!("symcache_lookup/{name}"));
        group.throughput(Throughput::Elements(addrs.len() as u64));
        group.bench_function("lookup_only", |b| {
            b.iter(|| lookup_only(black_box(&cache), black_box(&addrs)))
        });
        group.bench_function("lookup_full_path", |b| {
            b.iter(|| full_paths(black_box(&cache), black_box(&addrs)))
        });
        group.bench_function("frame_no_demangle", |b| {
            b.iter(|| frames_with(black_box(&cache), black_box(&addrs), |_| None))
        });
        let memo = DemangleCache::new(10 * 1024 * 1024);
        group.bench_function("frame_memo_demangle", |b| {
            b.iter(|| frames_with(black_box(&cache), black_box(&addrs), |n| memo.demangle(n)))
        });
        group.bench_function("frame_demangle_uncached", |b| {
            b.iter(|| {
                frames_with(black_box(&cache), black_box(&addrs), |n| {
                    n.demangle(DEMANGLE)
                })
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
