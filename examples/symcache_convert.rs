//! One SymCache conversion of one debug file, outside the server: ours (the writer the
//! server runs, spilling to a scratch directory) or symbolic's `SymCacheConverter`
//! (what upstream runs), with the time and the peak anonymous memory of the process.
//! For profiling the writer (`valgrind --tool=callgrind`) and for comparing the two on
//! the same file without a server around them.
//!
//!     cargo run --release --example symcache_convert -- FILE [--symbolic] [--out PATH]

use std::io::BufWriter;
use std::sync::Arc;
use std::time::Instant;

use omnisym::cache::DerivedFormat;
use omnisym::lookup::{ObjectHandle, ObjectLimits};
use omnisym::native::symcache::{SymCacheFormat, SymCacheInput};
use symbolic::common::ByteView;
use symbolic::symcache::SymCacheConverter;

#[path = "common/rss.rs"]
mod rss;

/// `RssAnon` now; its peak is sampled by a thread (`VmHWM` counts file pages too).
fn rss_anon_kib() -> u64 {
    rss::status_kib("RssAnon:")
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: symcache_convert FILE [--symbolic] [--out PATH]"))?;
    let (mut symbolic, mut out_path) = (false, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--symbolic" => symbolic = true,
            "--out" => out_path = args.next(),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }

    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let peak = peak.clone();
        std::thread::spawn(move || {
            loop {
                peak.fetch_max(rss_anon_kib(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
    }

    let data = ByteView::open(&path)?;
    let handle = Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default())?);
    let scratch = tempfile::tempdir()?;
    let out = match &out_path {
        Some(p) => std::fs::File::create(p)?,
        None => tempfile::tempfile()?,
    };
    // What the parsed object holds before the conversion starts (a PDB's object copies
    // its symbol records and DBI stream onto the heap when it is opened).
    let opened = rss_anon_kib();
    let started = Instant::now();
    let mut writer = BufWriter::new(out);
    if symbolic {
        let mut converter = SymCacheConverter::new();
        converter.process_object(&*handle.symbolic_object()?)?;
        converter.serialize(&mut writer)?;
    } else {
        SymCacheFormat::convert(
            SymCacheInput::from(handle.clone()),
            &mut writer,
            scratch.path(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let written = writer
        .into_inner()
        .map_err(|e| e.into_error())?
        .metadata()?
        .len();
    let secs = started.elapsed().as_secs_f64();
    peak.fetch_max(rss_anon_kib(), std::sync::atomic::Ordering::Relaxed);
    println!(
        "{}: {secs:.2} s, {} MiB written, peak RssAnon {} MiB ({} MiB once the file was opened)",
        if symbolic { "symbolic" } else { "omnisym" },
        written >> 20,
        peak.load(std::sync::atomic::Ordering::Relaxed) / 1024,
        opened / 1024,
    );
    Ok(())
}
