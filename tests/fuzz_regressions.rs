//! What the fuzzers found, replayed by `cargo test`: every input kept in
//! `fuzz/regressions/<target>/` goes through what its target drives, as the server
//! runs it (each step the server isolates inside `isolate` here too):
//!
//! - `lazy_open`: the parse with the object limits, `cold::open_within` under the
//!   conversion budget, and lookups at the file's symbols;
//! - `object_file`: the download check, the parse, the lazy reader and its lookups,
//!   and the SymCache and CFI conversions;
//! - `decompress`: `decompress_file` under a small size limit;
//! - `sourcemap`: the script and its map (split at the first NUL byte) into a
//!   SourceMapCache;
//! - `minidump`: the real server, which must answer the upload with a result.
//!
//! A `contained-*` input makes a third-party parser panic where the server isolates
//! it: the panic must happen (else the input no longer tests anything, and becomes
//! `fixed-*` after a dependency's fix) and must not escape. A `fixed-*` input crashed
//! the server before a fix of ours: it must go through without anything escaping.

mod common;

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use omnisym::cache::{ConversionBudget, DerivedFormat};
use omnisym::error::{CacheResult, isolate};
use omnisym::js::sourcemap_cache::{SourceMapCacheFormat, SourceMapCacheInput};
use omnisym::lookup::{FileFormat, ObjectFile, ObjectHandle, ObjectHint, ObjectLimits};
use omnisym::native::cfi::CfiFormat;
use omnisym::native::cold;
use omnisym::native::symcache::SymCacheFormat;
use omnisym::sources::ObjectId;
use symbolic::common::ByteView;

/// Panics seen by the hook: contained ones included, as `isolate` catches them after
/// the hook ran.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// What an input's name says it tests.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kept {
    /// `contained-*`: a third-party parser still panics on it, where the server isolates.
    Contained,
    /// `fixed-*`: it crashed the server before a fix of ours.
    Fixed,
}

/// The inputs kept for `target`, each with what its name says. An empty directory, or
/// a name with neither prefix, fails: either would pass without testing anything.
fn regressions(target: &str) -> Vec<(PathBuf, Kept)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no regressions kept in {}",
        dir.display()
    );
    files
        .into_iter()
        .map(|file| {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let kept = if name.starts_with("contained-") {
                Kept::Contained
            } else if name.starts_with("fixed-") {
                Kept::Fixed
            } else {
                panic!("{target}/{name}: a kept input's name starts with contained- or fixed-")
            };
            (file, kept)
        })
        .collect()
}

/// The `lazy_open` target's path; the limits are the target's.
async fn lazy_path(data: Vec<u8>) {
    let hint = ObjectHint {
        id: ObjectId::default(),
        limits: ObjectLimits {
            max_decompressed_section_size: 16 << 20,
            max_decompressed_source_size: 16 << 20,
            max_decompression_ratio: 200,
            decompression_ratio_floor: 1 << 20,
            ..ObjectLimits::default()
        },
    };
    let Ok(handle) = isolate("objects", || {
        ObjectFile::load(ByteView::from_vec(data), &hint)
    }) else {
        return;
    };
    let budget = ConversionBudget::new(64 << 20);
    let total = budget.available_kib();
    let opened = cold::open_within(&budget, handle.clone()).await;
    assert_eq!(budget.available_kib(), total, "the open kept its permit");
    let Some((reader, _)) = opened else {
        return;
    };
    for addr in addresses(&handle) {
        let _ = isolate("lazy reader", || Ok(reader.lookup(addr)));
    }
}

fn addresses(handle: &Arc<ObjectHandle>) -> Vec<u64> {
    isolate("objects", || {
        let Ok(object) = handle.symbolic_object() else {
            return Ok(vec![0]);
        };
        let load = object.load_address();
        let mut out = vec![0];
        for symbol in object.symbols().take(16) {
            let rel = symbol.address.wrapping_sub(load);
            out.extend([rel, rel.wrapping_add(1)]);
        }
        Ok(out)
    })
    .unwrap_or_default()
}

/// Runs every input kept for `target` through `replay`, and holds each to its name.
async fn replay_all<F, Fut>(target: &str, replay: F)
where
    F: Fn(PathBuf) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    count_panics();
    for (file, kept) in regressions(target) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let before = PANICS.load(Ordering::SeqCst);
        replay(file).await;
        let panics = PANICS.load(Ordering::SeqCst) - before;
        if kept == Kept::Contained {
            assert!(
                panics > 0,
                "{target}/{name} no longer makes a parser panic: rename it fixed-*"
            );
        }
        // A `fixed-*` input crashed before a fix of ours; reaching here is its test.
    }
}

/// Counts panics (every test of this file runs its replays one after another, so the
/// counts before and after one input are that input's).
fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default_hook(info);
        }));
    });
}

/// Serialises the tests of this file: the panic counts are process-wide.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn lazy_open_regressions_are_contained() {
    let _serial = SERIAL.lock().await;
    replay_all("lazy_open", |file| async move {
        lazy_path(std::fs::read(file).unwrap()).await;
    })
    .await;
}

#[tokio::test]
async fn object_file_regressions_are_contained() {
    let _serial = SERIAL.lock().await;
    replay_all("object_file", |file| async move {
        let hint = ObjectHint {
            id: ObjectId::default(),
            limits: ObjectLimits {
                max_decompressed_section_size: 64 << 20,
                max_decompressed_source_size: 16 << 20,
                ..ObjectLimits::default()
            },
        };
        let data = std::fs::read(&file).unwrap();
        let bytes = match isolate("objects", || ObjectFile::prepare(&file, &hint)) {
            Ok(Some(kept)) => data[kept.start as usize..kept.end as usize].to_vec(),
            Ok(None) => data,
            Err(_) => return,
        };
        let Ok(handle) = isolate("objects", || {
            ObjectFile::load(ByteView::from_vec(bytes), &hint)
        }) else {
            return;
        };
        if let Ok(Some(reader)) = isolate("lazy reader", || {
            Ok(cold::open(&handle, &std::env::temp_dir()))
        }) {
            for addr in addresses(&handle) {
                let _ = isolate("lazy reader", || Ok(reader.lookup(addr)));
            }
        }
        let _ = convert::<SymCacheFormat>(handle.clone().into());
        let _ = convert::<CfiFormat>(handle);
    })
    .await;
}

#[tokio::test]
async fn decompress_regressions_are_contained() {
    let _serial = SERIAL.lock().await;
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_owned();
    replay_all("decompress", |file| {
        let dir = dir.clone();
        async move {
            if let Ok(Some(out)) = omnisym::fetch::decompress_file(&file, &dir, 1 << 20) {
                assert!(out.as_file().metadata().unwrap().len() <= 1 << 20);
            }
        }
    })
    .await;
}

#[tokio::test]
async fn sourcemap_regressions_are_contained() {
    let _serial = SERIAL.lock().await;
    replay_all("sourcemap", |file| async move {
        let data = std::fs::read(file).unwrap();
        let at = data.iter().position(|&b| b == 0).unwrap_or(data.len());
        let input = SourceMapCacheInput {
            minified: ByteView::from_vec(data[..at].to_vec()),
            sourcemap: ByteView::from_vec(data.get(at + 1..).unwrap_or_default().to_vec()),
        };
        let _ = convert::<SourceMapCacheFormat>(input);
    })
    .await;
}

/// The minidumps go to the real server (the stack walker runs there): each is
/// answered with a result, and the server lives on. A `contained-*` one must make a
/// parser panic in the server, as its `parser_panics_total` counts.
#[tokio::test]
async fn minidump_regressions_are_answered() {
    let _serial = SERIAL.lock().await;
    let server = common::Server::start("");
    let panics = |metrics: &common::prometheus::Exposition| metrics.sum("parser_panics_total", &[]);
    for (file, kept) in regressions("minidump") {
        let before = panics(&server.scrape().await);
        let dump = std::fs::read(&file).unwrap();
        let (content_type, form) =
            common::minidump_form(&dump, &serde_json::json!([]), &serde_json::json!({}));
        let (status, body) = server.post_typed("/minidump", &content_type, form).await;
        assert_eq!(status, 200, "{}: {body}", file.display());
        assert!(body["status"].is_string(), "{}: {body}", file.display());
        if kept == Kept::Contained {
            assert!(
                panics(&server.scrape().await) > before,
                "{} no longer makes a parser panic: rename it fixed-*",
                file.display()
            );
        }
    }
    assert_eq!(server.get("/healthcheck").await.0, 200);
}

/// Writes the derived cache of `F` and maps it back, each inside `isolate`, as the
/// cache layer does.
fn convert<F: DerivedFormat>(input: F::Input) -> CacheResult<F::Item> {
    let temp = tempfile::NamedTempFile::new().unwrap();
    let file = temp.reopen().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    isolate(F::KIND.name, move || {
        let mut out = BufWriter::new(file);
        F::convert(input, &mut out, scratch.path())?;
        out.into_inner()
            .map_err(|e| omnisym::error::CacheError::internal(e.error()))?;
        Ok(())
    })?;
    let view = ByteView::open(temp.path()).unwrap();
    isolate(F::KIND.name, || F::load(view))
}
