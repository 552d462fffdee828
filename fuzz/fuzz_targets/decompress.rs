//! `decompress_file`, which unpacks every download and every crash upload (gzip, zstd,
//! zlib, xz, bzip2, single-file zip and CAB), under a small size limit so that bombs
//! and the limit checks are within reach: more than the limit never lands on disk.
//!
//! The isolating policy: the server runs the CAB reader inside `isolate` (the `cab`
//! crate panics on some hostile archives); any other panic, in our code or in the
//! stream decoders, is a crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use omnisym::fetch::decompress_file;
use omnisym_fuzz::{install_isolating_hook, isolating, scratch_dir, write_input};

const MAX_SIZE: u64 = 1024 * 1024;

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("decompress", data, run);
});

fn run(data: &[u8]) {
    let path = write_input("compressed", data);
    if let Ok(Some(file)) = decompress_file(&path, scratch_dir(), MAX_SIZE) {
        let len = file.as_file().metadata().expect("the payload's size").len();
        assert!(len <= MAX_SIZE, "{len} bytes unpacked past the limit");
    }
}
