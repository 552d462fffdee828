//! The cold path of one module: answering 50 addresses straight from a debug file with
//! the lazy reader (`native::cold`), against converting the whole file into a SymCache
//! and looking them up there, which is what a cold request waited for before.
//!
//! The files are `fixtures/lazy/elf/prog` (about 420 functions over ten units, DWARF 5)
//! and `fixtures/lazy/pe/prog.pdb` (the same program built for Windows), and the
//! addresses are every 23rd return address of their manifest. On files this small both
//! are quick; `scripts/cold-bench.sh` measures a 200+ MiB one.
//!
//! Run with `cargo bench --bench lazy_lookup`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use omnisym::lookup::{ObjectHandle, ObjectLimits};
use omnisym::native::cold;
use symbolic::common::ByteView;
use symbolic::symcache::{SymCache, SymCacheConverter};

fn fixture() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/lazy"))
}

/// The files benched, by their path in the manifest.
const FILES: [&str; 2] = ["elf/prog", "pe/prog.pdb"];

fn addresses(path: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(fixture().join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap();
    file["return_addresses"]
        .as_array()
        .unwrap()
        .iter()
        .step_by(23)
        .map(|a| u64::from_str_radix(a.as_str().unwrap().trim_start_matches("0x"), 16).unwrap() - 1)
        .take(50)
        .collect()
}

fn handle(path: &str) -> Arc<ObjectHandle> {
    let data = ByteView::open(fixture().join(path)).unwrap();
    Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap())
}

fn bench(c: &mut Criterion) {
    for path in FILES {
        bench_file(c, path);
    }
}

fn bench_file(c: &mut Criterion, path: &str) {
    let addrs = addresses(path);
    assert_eq!(addrs.len(), 50);
    let handle = || self::handle(path);
    let mut group = c.benchmark_group(format!("cold_module_50_addresses/{path}"));
    group.bench_function("lazy_open_and_lookup", |b| {
        b.iter(|| {
            let handle = handle();
            let reader = cold::open(&handle, &std::env::temp_dir()).unwrap();
            for &addr in &addrs {
                black_box(reader.lookup(addr));
            }
        })
    });
    group.bench_function("symcache_convert_and_lookup", |b| {
        b.iter(|| {
            let handle = handle();
            let mut converter = SymCacheConverter::new();
            converter
                .process_object(&*handle.symbolic_object().unwrap())
                .unwrap();
            let mut buf = Vec::new();
            converter.serialize(&mut buf).unwrap();
            let symcache = SymCache::parse(&buf).unwrap();
            for &addr in &addrs {
                black_box(symcache.lookup(addr).count());
            }
        })
    });
    group.finish();

    // Once its units are read, a reader's lookups are quick: what later frames of the
    // same cold request cost.
    let handle = handle();
    let reader = cold::open(&handle, &std::env::temp_dir()).unwrap();
    for &addr in &addrs {
        reader.lookup(addr);
    }
    c.bench_function(&format!("lazy_lookup_read_units/{path}/50"), |b| {
        b.iter(|| {
            for &addr in &addrs {
                black_box(reader.lookup(addr));
            }
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
