//! The lazy reader on one large debug file, outside the server: how long opening it and
//! answering N function addresses takes, and (with `--compare`) how long the whole
//! SymCache conversion takes and whether both answer every checked address alike.
//! `scripts/cold-bench.sh` runs it on the project's own release binary.
//!
//!     cargo run --release --example lazy_check -- FILE [--addrs 50] [--compare 20000]

use std::sync::Arc;
use std::time::Instant;

use omnisym::lookup::{ObjectHandle, ObjectLimits};
use omnisym::native::cold::{self, LazyLocation};
use symbolic::common::ByteView;
use symbolic::symcache::{SymCache, SymCacheConverter};

/// Fixed-seed xorshift64*, so runs pick the same addresses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[path = "common/rss.rs"]
mod rss;

/// `VmRSS` in KiB (the file's mapped pages that were read count too), or the field
/// `RSS_FIELD` names.
fn rss_kib() -> u64 {
    rss::status_kib(std::env::var("RSS_FIELD").as_deref().unwrap_or("VmRSS:"))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: FILE [--addrs N] [--compare M]"))?;
    let (mut addrs, mut compare) = (50usize, 0usize);
    while let Some(flag) = args.next() {
        let value: usize = args.next().unwrap_or_default().parse()?;
        match flag.as_str() {
            "--addrs" => addrs = value,
            "--compare" => compare = value,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }

    let data = ByteView::open(&path)?;
    let handle = Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default())?);
    let object = handle.symbolic_object()?;
    let mut functions: Vec<(u64, u64)> = object
        .symbols()
        .filter(|s| s.size > 0)
        .map(|s| (s.address, s.size))
        .collect();
    if functions.is_empty() {
        // Breakpad text: its PUBLIC records have no size, its FUNC records do.
        let session = object.debug_session()?;
        functions = session
            .functions()
            .filter_map(Result::ok)
            .filter(|f| f.size > 0)
            .map(|f| (f.address, f.size))
            .collect();
    }
    functions.sort_unstable();
    anyhow::ensure!(
        !functions.is_empty(),
        "{path} has no sized symbols or functions"
    );
    let mut rng = Rng(0x5eed);
    let mut pick = |n: usize| -> Vec<u64> {
        (0..n)
            .map(|_| {
                let (address, size) = functions[(rng.next() % functions.len() as u64) as usize];
                address + rng.next() % size
            })
            .collect()
    };
    let sample = pick(addrs);

    let rss_before = rss_kib();
    let started = Instant::now();
    let reader = cold::open(&handle, &std::env::temp_dir())
        .ok_or_else(|| anyhow::anyhow!("no lazy reader"))?;
    let opened = started.elapsed();
    let rss_opened = rss_kib();
    let answered: Vec<Vec<LazyLocation>> = sample.iter().map(|&a| reader.lookup(a)).collect();
    let lazy_total = started.elapsed();
    let named = answered.iter().filter(|a| !a.is_empty()).count();
    println!(
        "lazy: open {:.3}s, open + {} lookups {:.3}s, {} named; RSS {} MiB before, {} MiB open, {} MiB after",
        opened.as_secs_f64(),
        sample.len(),
        lazy_total.as_secs_f64(),
        named,
        rss_before / 1024,
        rss_opened / 1024,
        rss_kib() / 1024,
    );

    if compare > 0 {
        let started = Instant::now();
        let mut converter = SymCacheConverter::new();
        converter.process_object(&*object)?;
        let mut buf = Vec::new();
        converter.serialize(&mut buf)?;
        let symcache = SymCache::parse(&buf)?;
        println!(
            "symcache: conversion {:.3}s",
            started.elapsed().as_secs_f64()
        );
        let mut checked = sample.clone();
        checked.extend(pick(compare));
        let mut differences = 0;
        for &addr in &checked {
            let expected = cold::symcache_answer(&symcache, addr);
            let got = reader.lookup(addr);
            if got != expected {
                differences += 1;
                if differences <= 10 {
                    println!(
                        "difference at {addr:#x}:\n  symcache {expected:?}\n  lazy     {got:?}"
                    );
                }
            }
        }
        println!(
            "compared {} addresses: {differences} differences",
            checked.len()
        );
        anyhow::ensure!(
            differences == 0,
            "the lazy reader differs from the SymCache"
        );
    }
    Ok(())
}
