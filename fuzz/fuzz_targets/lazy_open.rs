//! A cold debug file through the lazy path as the server takes it: the parse with the
//! object limits (`ObjectFile::load`, where the sizes the headers of compressed ELF
//! sections claim are checked before anything inflates them), the reader's weight on the
//! conversion budget, `cold::open_within` (the permit, then the open on a blocking
//! thread inside `isolate`) and lookups at the file's symbol addresses inside `isolate`,
//! as each frame's are. The seeds are ELF files with DWARF compressed every way symbolic
//! reads it (`SHF_COMPRESSED` zlib and zstd, GNU `.zdebug_*`), sections whose headers
//! claim more than they hold or more than the limits allow, and the other formats with a
//! lazy reader.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use omnisym::cache::ConversionBudget;
use omnisym::error::isolate;
use omnisym::lookup::{FileFormat, ObjectFile, ObjectHandle, ObjectHint, ObjectLimits};
use omnisym::native::cold;
use omnisym::sources::ObjectId;
use omnisym_fuzz::{install_isolating_hook, isolating, runtime};
use symbolic::common::ByteView;

/// Lookups per input: enough to reach several units without making every input slow.
const MAX_LOOKUPS: usize = 32;

/// The conversion budget of the target; an open may take all of it, never more.
const BUDGET: u64 = 64 << 20;

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("lazy_open", data, run);
});

fn run(data: &[u8]) {
    // The server's ratio (200), with a floor and a largest section far below its 64 MiB
    // and 4 GiB, so that an input which inflates a section hits the limits rather than
    // the fuzzer's RSS limit.
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
        ObjectFile::load(ByteView::from_vec(data.to_vec()), &hint)
    }) else {
        return;
    };
    let weight = cold::budget_weight(&handle);
    let budget = ConversionBudget::new(BUDGET);
    let total = budget.available_kib();
    let opened = runtime().block_on(cold::open_within(&budget, handle.clone()));
    // The permit ends with the open, whatever the open did.
    assert_eq!(budget.available_kib(), total, "the open kept its permit");
    let Some((reader, taken)) = opened else {
        return;
    };
    assert_eq!(taken, weight);
    for addr in addresses(&handle) {
        let _ = isolate("lazy reader", || Ok(reader.lookup(addr)));
    }
}

/// Relative addresses of the file's first symbols, the byte after each, and 0; read
/// inside `isolate`, as symbol tables are only walked inside it in the server.
fn addresses(handle: &Arc<ObjectHandle>) -> Vec<u64> {
    isolate("objects", || {
        let object = handle.object();
        let load = object.load_address();
        let mut out = vec![0];
        for symbol in object.symbols().take(MAX_LOOKUPS / 2) {
            let rel = symbol.address.wrapping_sub(load);
            out.extend([rel, rel.wrapping_add(1)]);
        }
        Ok(out)
    })
    .unwrap_or_default()
}
