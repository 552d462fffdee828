//! End-to-end tests of what a hostile file or a hostile request cannot make the server do
//! with its sources: unpack a decompression bomb onto the disk, show a source's
//! credentials in a candidate report, send a source's headers to another origin, reach a
//! reserved address through a proxy, or read a bucket with the server's own credentials.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Server, SymbolServer, elf_debug_path, elf_request};
use serde_json::{Value, json};

fn candidates(response: &Value) -> Vec<Value> {
    response["modules"][0]["candidates"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The candidate for the fixture's debug file, found by the end of its location.
fn debug_file_candidate(response: &Value) -> Value {
    let path = elf_debug_path();
    candidates(response)
        .into_iter()
        .find(|c| c["location"].as_str().unwrap_or_default().contains(&path))
        .unwrap_or_else(|| panic!("no candidate for {path}: {response:#}"))
}

// ---------------------------------------------------------------------------------------
// Decompression bombs

/// A valid zstd frame of `size` zero bytes made of RLE blocks: 4 bytes per 128 KiB, so
/// 2 GiB take 64 KiB.
fn zstd_bomb(size: u64) -> Vec<u8> {
    const BLOCK: u64 = 128 * 1024;
    // Magic; a descriptor without content size or checksum; a 128 KiB window.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
    let blocks = size.div_ceil(BLOCK);
    for index in 0..blocks {
        let len = BLOCK.min(size - index * BLOCK) as u32;
        let last = u32::from(index + 1 == blocks);
        // Last-block bit, block type 1 (RLE), the regenerated size; then the byte.
        let header = (len << 3) | (1 << 1) | last;
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(0);
    }
    frame
}

/// Bytes of every file under `dir`, ignoring files that vanish while it looks.
fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => disk_usage(&entry.path()),
            _ => entry.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

#[test]
fn zstd_bomb_is_valid_zstd() {
    let bomb = zstd_bomb(300 * 1024);
    assert_eq!(zstd::decode_all(&bomb[..]).unwrap(), vec![0u8; 300 * 1024]);
}

#[tokio::test]
async fn decompression_bomb_is_malformed_without_filling_the_disk() {
    // 64 KiB that unpack to 2 GiB, under the default limits.
    let bomb = zstd_bomb(2 << 30);
    assert!(bomb.len() <= 64 * 1024 + 6);
    let symbols = SymbolServer::start().await;
    symbols.put_bytes(&elf_debug_path(), &bomb);
    let server = Server::start("");

    // Samples the cache's size while the request runs.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (done, peak, dir) = (done.clone(), peak.clone(), server.cache_dir.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(disk_usage(&dir), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let sources = json!([{"type": "http", "id": "bombs", "url": symbols.url}]);
    let started = Instant::now();
    let (_, response) = server.post("/symbolicate", &elf_request(sources)).await;
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();

    assert_eq!(response["status"], "completed", "{response}");
    let bomb = debug_file_candidate(&response);
    assert_eq!(bomb["download"]["status"], "malformed", "{bomb}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // The ratio floor (64 MiB) and the bomb itself, never the 2 GiB.
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak < 96 << 20, "cache_dir reached {peak} bytes");
    // Nothing of the payload is left behind.
    assert!(disk_usage(&server.cache_dir) < 1 << 20);
}
