//! One warm `/symbolicate` request in process, without HTTP, split into the steps the
//! server takes: parse the JSON body, symbolicate (cache lookups for every candidate
//! file of every module, SymCache lookups, the source-context pass), serialise the
//! answer. The body is `benches/load/symbolicate-body.json` (the one `scripts/load.sh`
//! sends), its symbols laid out in a temp dir like the load test does.
//!
//! Run with `cargo bench --bench symbolicate_request` (1 s warm-up, 3 s measurement).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use omnisym::cache::Scope;
use omnisym::config::Config;
use omnisym::native::SymbolicateRequest;
use omnisym::native::interface::{CompletedSymbolicationResponse, FrameStatus};
use omnisym::server::AppState;
use omnisym::sources::SourceConfig;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Copies the ELF debug file and the PDB into `symbols` in the `native` layout.
fn lay_out_symbols(symbols: &Path) {
    let fixtures = root().join("fixtures/native");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("manifest.json")).unwrap()).unwrap();
    let (elf, pe) = (&manifest["objects"]["elf"], &manifest["objects"]["pe"]);
    let code_id = elf["code_id"].as_str().unwrap().to_lowercase();
    let debug_file = pe["debug_file"].as_str().unwrap();
    let layout = [
        (
            format!("{}/{}.debug", &code_id[..2], &code_id[2..]),
            elf["files"]["debug"].as_str().unwrap(),
        ),
        (
            format!(
                "{debug_file}/{}/{debug_file}",
                pe["breakpad_id"].as_str().unwrap().to_uppercase()
            ),
            pe["files"]["debug"].as_str().unwrap(),
        ),
    ];
    for (dest, src) in layout {
        let dest = symbols.join(dest);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(fixtures.join(src), dest).unwrap();
    }
}

/// The server's `parse_json` (private to the crate), replicated.
fn parse_with_path<T: serde::de::DeserializeOwned>(body: &[u8]) -> T {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).expect("body parses");
    de.end().expect("nothing after the body");
    value
}

/// The server's `completed_body` (private to the crate), replicated: serialise, then
/// splice `"status":"completed"` in front.
fn completed_body(response: &CompletedSymbolicationResponse) -> Vec<u8> {
    let inner = serde_json::to_vec(response).unwrap();
    const HEAD: &[u8] = br#"{"status":"completed""#;
    let mut out = Vec::with_capacity(inner.len() + HEAD.len() + 1);
    out.extend_from_slice(HEAD);
    out.push(b',');
    out.extend_from_slice(&inner[1..]);
    out
}

fn bench(c: &mut Criterion) {
    let temp = tempfile::tempdir().unwrap();
    let symbols = temp.path().join("symbols");
    lay_out_symbols(&symbols);
    let template = std::fs::read_to_string(root().join("benches/load/symbolicate-body.json"))
        .expect("body template is readable");
    let symbols_json = serde_json::to_string(symbols.to_str().unwrap()).unwrap();
    let body = template
        .replace("@SYMBOLS@", &symbols_json[1..symbols_json.len() - 1])
        .into_bytes();

    let config = Config {
        cache_dir: temp.path().join("cache"),
        ..Config::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let state = runtime.block_on(async { AppState::new(&config) }).unwrap();
    let native = state.native.clone();

    let request: SymbolicateRequest = parse_with_path(&body);
    let sources: Arc<[SourceConfig]> = request.sources.clone().unwrap().into();
    let mut no_context = request.clone();
    no_context.options.apply_source_context = false;
    let symbolicate = |request: SymbolicateRequest| {
        runtime.block_on(native.symbolicate(Scope::Global, sources.clone(), request))
    };

    // The cold request builds the caches; every frame must come back symbolicated.
    let response = symbolicate(request.clone());
    let frames: Vec<_> = response
        .stacktraces
        .iter()
        .flat_map(|s| &s.frames)
        .collect();
    assert!(
        frames.iter().all(|f| f.status == FrameStatus::Symbolicated),
        "not every frame is symbolicated"
    );
    eprintln!(
        "request: {} bytes, {} input frames -> {} frames; response {} bytes",
        body.len(),
        request
            .stacktraces
            .iter()
            .map(|s| s.frames.len())
            .sum::<usize>(),
        frames.len(),
        completed_body(&response).len()
    );

    let mut group = c.benchmark_group("symbolicate_request");
    group.bench_function("parse_json_path_to_error", |b| {
        b.iter(|| parse_with_path::<SymbolicateRequest>(black_box(&body)))
    });
    group.bench_function("parse_json_plain", |b| {
        b.iter(|| serde_json::from_slice::<SymbolicateRequest>(black_box(&body)).unwrap())
    });
    group.bench_function("symbolicate_warm", |b| {
        b.iter_batched(|| request.clone(), symbolicate, BatchSize::SmallInput)
    });
    group.bench_function("symbolicate_warm_no_source_context", |b| {
        b.iter_batched(|| no_context.clone(), symbolicate, BatchSize::SmallInput)
    });
    group.bench_function("serialize_response", |b| {
        b.iter(|| completed_body(black_box(&response)))
    });
    group.bench_function("drop_response", |b| {
        b.iter_batched(|| response.clone(), drop, BatchSize::SmallInput)
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
