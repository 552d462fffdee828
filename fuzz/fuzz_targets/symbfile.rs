//! A symbfile upload as the server receives it: the parts streamed into the store
//! (`SymbfileStore::begin_part`, `PartWriter::write` and `finish`), the upload joined,
//! read and converted into the FileID's SymCache when its last part lands, the
//! SymCache mapped and asked at every function it holds. Then the SymCache is removed
//! from the cache and rebuilt from the stored symbfiles, as a restarted server whose
//! cache lost it does.
//!
//! One target for reader and converter: the server never reaches one without the
//! other, and the converter's input is what the reader makes of the upload.
//!
//! The input is one control byte, then the symbfile. Control bits: 0-1 the number of
//! parts less one (byte ranges of near-equal size), 2 the endpoint (ranges or return
//! pads), 3-5 the size of the chunks a part arrives in (16 bytes to 2 KiB), 6 the same
//! bytes uploaded again as the other kind, so that both are read into one SymCache.
//!
//! Every input gets a store and a cache of its own. The converter is symbolic's: the store
//! contains panics, so the isolating policy applies.

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use omnisym::cache::{Caches, CachesConfig, kinds};
use omnisym::config::SymbfileConfig;
use omnisym::fetch::{Downloader, FetchConfig};
use omnisym::native::symbfile::{FileId, SymbfileKind, SymbfileStore, UploadProgress};
use omnisym_fuzz::{install_isolating_hook, isolating, runtime, scratch_dir};

/// Functions looked up per input; a SymCache may hold many thousands.
const MAX_LOOKUPS: usize = 256;
const ID: FileId = FileId(0x77ef_a716_a912_a492_1744_5787_329f_d29a);

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("symbfile", data, run);
});

fn run(data: &[u8]) {
    let Some((&control, symbfile)) = data.split_first() else {
        return;
    };
    let parts = u32::from(control & 3) + 1;
    let kind = SymbfileKind::ALL[usize::from(control >> 2 & 1)];
    let chunk = 16 << (control >> 3 & 7);
    let dir = tempfile::tempdir_in(scratch_dir()).expect("a store directory");
    let (store_dir, cache_dir) = (dir.path().join("symbfiles"), dir.path().join("cache"));
    let config = SymbfileConfig::default();
    runtime().block_on(async {
        let store = SymbfileStore::open(store_dir.clone(), &config, &caches(&cache_dir))
            .expect("the store");
        if !upload(&store, kind, parts, chunk, symbfile).await {
            return;
        }
        if control & 0x40 != 0 {
            let other = SymbfileKind::ALL[usize::from(control >> 2 & 1 ^ 1)];
            upload(&store, other, 1, chunk, symbfile).await;
        }
        look_up(&store).await;
        // A restarted server whose cache lost the SymCache rebuilds it from the symbfiles.
        std::fs::remove_dir_all(cache_dir.join(kinds::SYMBFILE_SYMCACHES.name))
            .expect("removing the SymCaches");
        let restarted =
            SymbfileStore::open(store_dir, &config, &caches(&cache_dir)).expect("the store");
        look_up(&restarted).await;
    });
}

/// The caches of a server whose `cache_dir` is `dir`.
fn caches(dir: &Path) -> Caches {
    static DOWNLOADER: OnceLock<Downloader> = OnceLock::new();
    let downloader =
        DOWNLOADER.get_or_init(|| Downloader::new(FetchConfig::default()).expect("a downloader"));
    Caches::new(dir, &CachesConfig::default(), None, downloader).expect("the caches")
}

/// Sends every part in order; whether the upload completed.
async fn upload(
    store: &SymbfileStore,
    kind: SymbfileKind,
    parts: u32,
    chunk: usize,
    data: &[u8],
) -> bool {
    let size = data.len().div_ceil(parts as usize).max(1);
    let mut bodies: Vec<&[u8]> = data.chunks(size).collect();
    bodies.resize(parts as usize, &[]);
    for (part, body) in bodies.into_iter().enumerate() {
        let Ok(mut writer) = store.begin_part(ID, kind, part as u32, parts).await else {
            return false;
        };
        for piece in body.chunks(chunk) {
            if writer.write(piece).await.is_err() {
                return false;
            }
        }
        match writer.finish().await {
            Ok(UploadProgress::Complete) => return true,
            Ok(UploadProgress::Partial { .. }) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Maps the FileID's SymCache and asks it at the start and the next byte of every
/// function, reading every frame as a `/symbolicate` answer does.
async fn look_up(store: &SymbfileStore) {
    let Ok(Some(cache)) = store.symcache(ID).await else {
        return;
    };
    let cache = cache.get();
    for function in cache.functions().take(MAX_LOOKUPS) {
        let start = u64::from(function.entry_pc());
        for addr in [start, start + 1] {
            for location in cache.lookup(addr) {
                let _ = location.function().name();
                let _ = location.file().map(|f| f.full_path());
                let _ = location.line();
            }
        }
    }
}
