//! CFI caches: loading one (`native::cfi`: one pass over the text that indexes its
//! records) against parsing the whole text into a `SymbolFile` (what loading did
//! before), and walking one frame through each.
//!
//! The text is generated: 60,000 `STACK CFI INIT` blocks of x86_64 rules with three
//! `STACK CFI` lines each, about 8 MiB, as symbolic writes them from DWARF CFI. Set
//! `OMNISYM_BENCH_CFI_SYM` to a Breakpad `.sym` file to bench its CFI instead. Frames are
//! walked at 512 addresses spread over the records.
//!
//! Run with `cargo bench --bench cfi`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use minidump::MinidumpModule;
use minidump_unwind::{FrameWalker, SymbolFile};
use omnisym::cache::DerivedFormat;
use omnisym::native::cfi::CfiFormat;
use symbolic::cfi::{CFICACHE_LATEST_VERSION, CFICACHE_MAGIC, CfiCache};
use symbolic::common::ByteView;

const BASE: u64 = 0x7f00_0000_0000;

fn generated_text() -> (Vec<u8>, Vec<u64>) {
    let mut text = String::new();
    let mut addresses = Vec::new();
    let mut start = 0x1000u64;
    for i in 0..60_000u64 {
        let size = 0x40 + (i * 37) % 0x400;
        text.push_str(&format!(
            "STACK CFI INIT {start:x} {size:x} .cfa: $rsp 8 + .ra: .cfa -8 + ^\n\
             STACK CFI {:x} .cfa: $rsp 16 + $rbp: .cfa -16 + ^\n\
             STACK CFI {:x} .cfa: $rbp 16 +\n\
             STACK CFI {:x} .cfa: $rsp 8 +\n",
            start + 1,
            start + 4,
            start + size - 1,
        ));
        addresses.push(start + size / 2);
        start += size;
    }
    (text.into_bytes(), addresses)
}

/// The CFI text of `path`, and an address in every record.
fn sym_text(path: &str) -> (Vec<u8>, Vec<u64>) {
    let data = std::fs::read(path).expect("the .sym file is readable");
    let object = symbolic::debuginfo::Object::parse(&data).expect("the .sym file parses");
    let text = CfiCache::from_object(&object)
        .expect("it has CFI")
        .as_slice()
        .to_vec();
    let addresses = SymbolFile::from_bytes(&text)
        .expect("its CFI parses")
        .cfi_stack_info
        .ranges_values()
        .map(|(range, _)| range.start + (range.end - range.start) / 2)
        .collect();
    (text, addresses)
}

/// `text` as a cache file holds it.
fn cache_file(text: &[u8]) -> ByteView<'static> {
    let mut bytes = CFICACHE_MAGIC.to_ne_bytes().to_vec();
    bytes.extend(CFICACHE_LATEST_VERSION.to_ne_bytes());
    bytes.extend(text);
    ByteView::from_vec(bytes)
}

/// A walker that knows every register and stack word.
struct Walker(u64);

impl FrameWalker for Walker {
    fn get_instruction(&self) -> u64 {
        self.0
    }
    fn has_grand_callee(&self) -> bool {
        false
    }
    fn get_grand_callee_parameter_size(&self) -> u32 {
        0
    }
    fn get_register_at_address(&self, address: u64) -> Option<u64> {
        Some(address ^ 0x5555)
    }
    fn get_callee_register(&self, name: &str) -> Option<u64> {
        Some(BASE + name.len() as u64 * 0x100)
    }
    fn set_caller_register(&mut self, _: &str, _: u64) -> Option<()> {
        Some(())
    }
    fn clear_caller_register(&mut self, _: &str) {}
    fn set_cfa(&mut self, _: u64) -> Option<()> {
        Some(())
    }
    fn set_ra(&mut self, _: u64) -> Option<()> {
        Some(())
    }
}

fn bench(c: &mut Criterion) {
    let (text, addresses) = match std::env::var("OMNISYM_BENCH_CFI_SYM") {
        Ok(path) => sym_text(&path),
        Err(_) => generated_text(),
    };
    let step = (addresses.len() / 512).max(1);
    let probes: Vec<u64> = addresses.iter().step_by(step).copied().collect();
    let file = cache_file(&text);

    let mut load = c.benchmark_group("cfi_load");
    load.throughput(Throughput::Bytes(text.len() as u64));
    load.sample_size(10);
    load.bench_function("index", |b| {
        b.iter(|| CfiFormat::load(black_box(file.clone())).unwrap())
    });
    load.bench_function("whole_symbol_file", |b| {
        b.iter(|| SymbolFile::from_bytes(black_box(&text)).unwrap())
    });
    load.finish();

    let module = MinidumpModule::new(BASE, u32::MAX, "module");
    let indexed = CfiFormat::load(file.clone()).unwrap().unwrap();
    let whole = SymbolFile::from_bytes(&text).unwrap();
    let mut walk = c.benchmark_group("cfi_walk_frame");
    walk.throughput(Throughput::Elements(probes.len() as u64));
    walk.bench_function("index", |b| {
        b.iter(|| {
            for &relative in &probes {
                let mut walker = Walker(BASE + relative);
                black_box(indexed.walk_frame(&module, &mut walker));
            }
        })
    });
    walk.bench_function("whole_symbol_file", |b| {
        b.iter(|| {
            for &relative in &probes {
                let mut walker = Walker(BASE + relative);
                black_box(whole.walk_frame(&module, &mut walker));
            }
        })
    });
    walk.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
