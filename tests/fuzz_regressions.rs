//! What the fuzzers found, replayed by `cargo test`: every input kept in
//! `fuzz/regressions/lazy_open/` goes through the lazy path as the `lazy_open` target
//! (and the server) takes it: the parse with the object limits, `cold::open_within`
//! under the conversion budget, and lookups at the file's symbols, each inside
//! `isolate`. A `contained-*` input makes a third-party reader panic where the server
//! isolates it: the panic must happen (else the input no longer tests anything, and
//! becomes `fixed-*` after a dependency's fix) and must not escape. `fixed-*` inputs
//! must not panic at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use omnisym::cache::ConversionBudget;
use omnisym::error::isolate;
use omnisym::lookup::{FileFormat, ObjectFile, ObjectHandle, ObjectHint, ObjectLimits};
use omnisym::native::cold;
use omnisym::sources::ObjectId;
use symbolic::common::ByteView;

/// Panics seen by the hook: contained ones included, as `isolate` catches them after
/// the hook ran.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn regressions(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
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
        let object = handle.object();
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

#[tokio::test]
async fn lazy_open_regressions_are_contained() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let files = regressions("lazy_open");
    assert!(!files.is_empty(), "no regressions kept for lazy_open");
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let before = PANICS.load(Ordering::SeqCst);
        lazy_path(std::fs::read(&file).unwrap()).await;
        let panics = PANICS.load(Ordering::SeqCst) - before;
        if name.starts_with("contained-") {
            assert!(
                panics > 0,
                "{name} no longer makes a reader panic: rename it fixed-*"
            );
        } else {
            assert_eq!(panics, 0, "{name} panicked");
        }
    }
}
