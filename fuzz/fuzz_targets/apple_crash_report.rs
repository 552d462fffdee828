//! An Apple crash report upload, processed as the server processes it once the upload
//! is on disk and unpacked: `NativeService::process_crash_file`, with no symbol
//! sources, then symbolication of the threads it lists.
//!
//! apple-crash-report-parser reads the text; the server runs that inside `isolate`, so
//! a panic there costs the request, not the process (the isolating policy).

#![no_main]

use libfuzzer_sys::fuzz_target;
use omnisym::native::CrashKind;
use omnisym_fuzz::{install_isolating_hook, isolating, process_crash_file};

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("apple_crash_report", data, |data| process_crash_file(CrashKind::AppleCrashReport, data));
});
