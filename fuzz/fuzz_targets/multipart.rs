//! The multipart form of `POST /minidump` and `POST /applecrashreport`: axum's own
//! `Multipart` extractor over the body, fed in chunks of a size the input picks, then
//! the server's `read_form` (the upload spooled under a small size limit, the JSON
//! fields parsed), then the upload unpacked as the handler unpacks it.
//!
//! The first byte picks the endpoint (bit 0) and the chunk size (the other bits; 0 is
//! one chunk); the rest is the body, with the boundary `fuzzboundary`.
//!
//! Our own code (and axum's multipart parser under it): any panic is a crash.

#![no_main]

use axum::body::Body;
use axum::extract::{FromRequest, Multipart};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use omnisym::fetch::{decompress_file, is_compressed};
use omnisym::native::CrashKind;
use omnisym::server::{CrashFiles, Upload, read_form};
use omnisym::config::RequestLimits;
use omnisym_fuzz::{runtime, scratch_dir};

/// Small, so that the size checks are reached by inputs the fuzzer can make.
const MAX_FILE: u64 = 16 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&head, body)) = data.split_first() else {
        return;
    };
    let kind = if head & 1 == 0 {
        CrashKind::Minidump
    } else {
        CrashKind::AppleCrashReport
    };
    let chunk = usize::from(head >> 1);
    let chunks: Vec<Result<Bytes, std::io::Error>> = if chunk == 0 {
        vec![Ok(Bytes::copy_from_slice(body))]
    } else {
        body.chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect()
    };
    let request = axum::http::Request::post("/minidump")
        .header(
            axum::http::header::CONTENT_TYPE,
            "multipart/form-data; boundary=fuzzboundary",
        )
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .expect("a valid request");
    let files = CrashFiles::new(scratch_dir().join("uploads"), MAX_FILE);
    // Small, like MAX_FILE, so that the count checks are reachable too.
    let limits = RequestLimits {
        max_sources: 4,
        ..RequestLimits::default()
    };
    runtime().block_on(async {
        let multipart = Multipart::from_request(request, &())
            .await
            .expect("the content type is multipart");
        let Ok(form) = read_form(multipart, kind, &files, &limits).await else {
            return;
        };
        // Unpacked as the handler unpacks it: a compressed upload held in memory is
        // written out first.
        let file = match form.file {
            Some(Upload::File(file)) => file,
            Some(Upload::Memory { data, .. }) if is_compressed(&data) => {
                let mut file = tempfile::NamedTempFile::new_in(scratch_dir()).expect("scratch");
                std::io::Write::write_all(&mut file, &data).expect("scratch");
                file
            }
            _ => return,
        };
        let _ = decompress_file(file.path(), &files.dir, files.max_size);
    });
});
