//! A symstore's `000Admin` index as `lookup/index.rs` loads it: `lastid.txt`, then
//! that many segments (read lossily as UTF-8, as they are fetched), the index written
//! as the cache file and read back the way a later request loads it, then asked for
//! every path it lists.
//!
//! The input is `lastid.txt`, a NUL byte, then the segments separated by NUL bytes.
//!
//! Our own code: any panic is a crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use omnisym::sources::index::{SymstoreIndex, parse_lastid};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0);
    let lastid = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let Some(lastid) = parse_lastid(&lastid) else {
        return;
    };
    let mut index = SymstoreIndex::default();
    for segment in parts.take(usize::try_from(lastid).unwrap_or(usize::MAX)) {
        index.add_segment(&String::from_utf8_lossy(segment));
    }
    let cached = index.to_lines();
    let text = std::str::from_utf8(cached.as_bytes()).expect("the cache file is UTF-8");
    let loaded = SymstoreIndex::from_lines(text);
    assert_eq!(loaded, index, "the cached index is the computed one");
    for path in cached.split('\n').filter(|p| !p.is_empty()) {
        assert!(loaded.contains(path));
    }
});
