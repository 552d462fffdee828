//! ProGuard caches: what a cold `/symbolicate-jvm` pays once per mapping file, and what
//! every warm one pays per frame.
//!
//! The mapping is a 50 MB R8 mapping made by `scripts/gen-proguard-mapping.py` (seed 1)
//! in a temporary directory; without `python3` the bench says so and measures nothing.
//!
//! - `proguard_cache/build_50mb`: the mapping's bytes to the ProGuard cache, as the
//!   server's `write_cache` does it (into memory, so disk speed does not count).
//! - `proguard_remap/frames_1000`: `symbolicate_jvm` on a warm, memory-mapped cache, for
//!   1000 frames of the mapping (every few hundredth method range, inline chains
//!   included) in 30-frame stack traces; the time per frame is the time / 1000.
//!
//! Run with `cargo bench --bench proguard`.

use std::collections::HashMap;
use std::hint::black_box;
use std::io::BufWriter;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use omnisym::jvm::interface::{JvmException, JvmFrame, JvmStacktrace};
use omnisym::jvm::mapping::{load, write_cache};
use omnisym::jvm::{NoSources, SymbolicateJvmRequest, symbolicate_jvm};
use proguard::{ProguardMapping, ProguardRecord};
use symbolic::common::{ByteView, DebugId};

const FRAMES: usize = 1000;
const FRAMES_PER_TRACE: usize = 30;

/// The generated mapping's bytes, made once per bench run; `None` without python3.
fn mapping() -> Option<&'static [u8]> {
    static MAPPING: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    MAPPING
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("mapping.txt");
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gen-proguard-mapping.py");
            // `cargo test --all-targets` runs benches once as a smoke test (without the
            // `--bench` that `cargo bench` passes), in a debug build: a small mapping
            // keeps that quick.
            let smoke_test = !std::env::args().any(|arg| arg == "--bench");
            let size_mb = if smoke_test { "2" } else { "50" };
            let status = Command::new("python3")
                .arg(&script)
                .arg(&path)
                .args(["--size-mb", size_mb, "--seed", "1"])
                .status();
            match status {
                Ok(status) if status.success() => Some(std::fs::read(&path).expect("mapping")),
                Ok(status) => panic!("{} failed: {status}", script.display()),
                Err(err) => {
                    eprintln!(
                        "proguard bench skipped: python3 is needed to generate the mapping ({err})"
                    );
                    None
                }
            }
        })
        .as_deref()
}

fn build(c: &mut Criterion) {
    let Some(mapping) = mapping() else { return };
    let mut group = c.benchmark_group("proguard_cache");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(40))
        .throughput(Throughput::Bytes(mapping.len() as u64));
    group.bench_function("build_50mb", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(mapping.len());
            write_cache(black_box(mapping), &mut out).expect("cache builds");
            out
        })
    });
    group.finish();
}

/// `FRAMES` obfuscated frames at the first line of evenly spread method ranges.
fn frames(mapping: &[u8]) -> Vec<JvmFrame> {
    let mut ranges = Vec::new();
    let mut class = "";
    for record in ProguardMapping::new(mapping).iter().flatten() {
        match record {
            ProguardRecord::Class { obfuscated, .. } => class = obfuscated,
            ProguardRecord::Method {
                obfuscated,
                line_mapping: Some(lines),
                ..
            } => {
                if let Some(start) = lines.startline {
                    ranges.push((class, obfuscated, start));
                }
            }
            _ => {}
        }
    }
    let step = ranges.len() / FRAMES;
    ranges
        .iter()
        .step_by(step)
        .take(FRAMES)
        .enumerate()
        .map(|(i, (class, method, line))| JvmFrame {
            module: (*class).to_owned(),
            function: (*method).to_owned(),
            lineno: Some(*line as u32),
            filename: Some("SourceFile".into()),
            abs_path: Some("SourceFile".into()),
            index: i % FRAMES_PER_TRACE,
            ..Default::default()
        })
        .collect()
}

fn remap(c: &mut Criterion) {
    let Some(mapping) = mapping() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("proguard.cache");
    let file = std::fs::File::create(&path).expect("cache file");
    write_cache(mapping, &mut BufWriter::new(file)).expect("cache builds");
    let mapper = load(ByteView::open(&path).expect("cache maps")).expect("cache loads");

    let uuid = DebugId::from_uuid(uuid::Uuid::from_u128(1));
    let mappings = HashMap::from([(uuid, Ok(mapper))]);
    let stacktraces = frames(mapping)
        .chunks(FRAMES_PER_TRACE)
        .map(|frames| JvmStacktrace {
            exception: Some(JvmException {
                ty: "NullPointerException".into(),
                module: "java.lang".into(),
            }),
            frames: frames.to_vec(),
        })
        .collect::<Vec<_>>();
    let request: SymbolicateJvmRequest = serde_json::from_value(serde_json::json!({
        "modules": [{"type": "proguard", "uuid": uuid.to_string()}],
        "options": {"frame_order": "callee_first"},
    }))
    .expect("request parses");
    let request = SymbolicateJvmRequest {
        stacktraces,
        ..request
    };

    // Warm: the cache's pages are in memory before measuring.
    let warm = symbolicate_jvm(request.clone(), &mappings, &NoSources);
    let remapped: usize = warm.stacktraces.iter().map(|st| st.frames.len()).sum();
    eprintln!("proguard_remap: {FRAMES} frames remap to {remapped} frames");

    let mut group = c.benchmark_group("proguard_remap");
    group.throughput(Throughput::Elements(FRAMES as u64));
    group.bench_function("frames_1000", |b| {
        b.iter_batched(
            || request.clone(),
            |request| symbolicate_jvm(request, &mappings, &NoSources),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, build, remap);
criterion_main!(benches);
