//! A minidump upload, processed as the server processes it once the upload is on disk
//! and unpacked: `NativeService::process_crash_file`, with no symbol sources (the stack
//! walker gets no CFI and scans), then symbolication of what it found.
//!
//! rust-minidump parses the file; the server runs that inside `isolate`, so a panic
//! there costs the request, not the process (the isolating policy).

#![no_main]

use libfuzzer_sys::fuzz_target;
use omnisym::native::CrashKind;
use omnisym_fuzz::{install_isolating_hook, isolating, process_crash_file};

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("minidump", data, |data| process_crash_file(CrashKind::Minidump, data));
});
