//! The cold path of one module: answering 50 addresses straight from a debug file with
//! the lazy reader (`native::lazy`), against converting the whole file into a SymCache
//! and looking them up there, which is what a cold request waited for before.
//!
//! The file is `fixtures/lazy/elf/prog` (about 420 functions over ten units, DWARF 5),
//! and the addresses are every 23rd return address of its manifest. On a file this
//! small both are quick; `scripts/cold-bench.sh` measures a 200+ MiB one.
//!
//! Run with `cargo bench --bench lazy_lookup`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use omnisym::lookup::{ObjectHandle, ObjectLimits};
use omnisym::native::lazy;
use symbolic::common::ByteView;
use symbolic::symcache::{SymCache, SymCacheConverter};

fn fixture() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/lazy"))
}

fn addresses() -> Vec<u64> {
    let text = std::fs::read_to_string(fixture().join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "elf/prog")
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

fn handle() -> Arc<ObjectHandle> {
    let data = ByteView::open(fixture().join("elf/prog")).unwrap();
    Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap())
}

fn bench(c: &mut Criterion) {
    let addrs = addresses();
    assert_eq!(addrs.len(), 50);
    let mut group = c.benchmark_group("cold_module_50_addresses");
    group.bench_function("lazy_open_and_lookup", |b| {
        b.iter(|| {
            let handle = handle();
            let reader = lazy::open(&handle).unwrap();
            for &addr in &addrs {
                black_box(reader.lookup(addr));
            }
        })
    });
    group.bench_function("symcache_convert_and_lookup", |b| {
        b.iter(|| {
            let handle = handle();
            let mut converter = SymCacheConverter::new();
            converter.process_object(handle.object()).unwrap();
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
    let reader = lazy::open(&handle).unwrap();
    for &addr in &addrs {
        reader.lookup(addr);
    }
    c.bench_function("lazy_lookup_read_units/50", |b| {
        b.iter(|| {
            for &addr in &addrs {
                black_box(reader.lookup(addr));
            }
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
