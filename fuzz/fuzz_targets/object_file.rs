//! A downloaded debug file (ELF, Mach-O and fat archives, PE, PDB, Breakpad, Wasm,
//! portable PDB, source bundle) through everything the server does with one: the
//! download check (`ObjectFile::prepare`, which picks one object out of a fat archive),
//! the parse (`ObjectFile::load`), the metadata that ranks candidates (`ObjectMeta`,
//! with the DWARF walk for embedded sources and the SRCSRV stream), SymCache, CFI and
//! PpdbCache conversion and loading, the lazy reader of a cold file, then lookups at
//! addresses taken from the file's own symbols and from its last bytes, with demangling
//! and source context as a symbolicated frame gets them.
//!
//! Each step that the server runs inside `isolate` runs inside it here (the isolating
//! policy); the lookups do not, as the server's do not.

#![no_main]

use std::io::BufWriter;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use omnisym::cache::DerivedFormat;
use omnisym::error::{CacheResult, isolate};
use omnisym::lookup::{
    FileFormat, ObjectFile, ObjectHandle, ObjectHint, ObjectLimits, ObjectMeta, context_lines,
    fetchable_link,
};
use omnisym::native::cfi::{CfiFormat, CfiItem};
use omnisym::native::demangle::DemangleCache;
use omnisym::native::ppdb::{OwnedPpdbCache, PpdbFormat, symbolicate_dotnet_frame};
use omnisym::native::symcache::{OwnedSymCache, SymCacheFormat};
use omnisym::sources::ObjectId;
use omnisym::native::interface::{HexValue, RawFrame};
use omnisym_fuzz::{install_isolating_hook, isolating, scratch_dir, write_input};
use symbolic::common::ByteView;
use symbolic::debuginfo::Object;

/// Enough addresses to walk a symbol table's shape without making every input slow.
const MAX_ADDRESSES: usize = 64;

fuzz_target!(init: install_isolating_hook(), |data: &[u8]| {
    isolating("object_file", data, run);
});

fn run(data: &[u8]) {
    let path = write_input("download", data);
    // Far below the server's defaults (4 GiB, 1 GiB), so that an input which decompresses
    // a section hits the limit rather than the fuzzer's RSS limit.
    let hint = ObjectHint {
        id: ObjectId::default(),
        limits: ObjectLimits {
            max_decompressed_section_size: 64 << 20,
            max_decompressed_source_size: 16 << 20,
            ..ObjectLimits::default()
        },
    };
    let kept = isolate("objects", || ObjectFile::prepare(&path, &hint));
    let bytes = match kept {
        Ok(Some(kept)) => data[kept.start as usize..kept.end as usize].to_vec(),
        Ok(None) => data.to_vec(),
        Err(_) => return,
    };
    let Ok(handle) = isolate("objects", || {
        ObjectFile::load(ByteView::from_vec(bytes), &hint)
    }) else {
        return;
    };
    let Ok(meta) = isolate("object_meta", || Ok(ObjectMeta::of(handle.object()))) else {
        return;
    };

    // Symbol tables are only ever walked inside `isolate` in the server (by the
    // conversions and `ObjectMeta`), so here too.
    let addresses = isolate("objects", || Ok(addresses(&handle, data))).unwrap_or_default();
    // The cold path: a lazy reader of the file, opened and asked inside `isolate` as the
    // server opens it (`cold::answer_from`) and asks it (each frame's lookup).
    if let Ok(Some(reader)) = isolate("lazy reader", || Ok(omnisym::native::cold::open(&handle))) {
        for &addr in &addresses {
            let _ = isolate("lazy reader", || Ok(reader.lookup(addr)));
        }
    }
    let symcache: CacheResult<OwnedSymCache> = derive::<SymCacheFormat>(&handle);
    let cfi: CacheResult<CfiItem> = derive::<CfiFormat>(&handle);
    if let Ok(symcache) = &symcache {
        let demangle = DemangleCache::new(1024 * 1024);
        for &addr in &addresses {
            for location in symcache.get().lookup(addr) {
                let func = location.function();
                let _ = demangle.demangle(&func.name_for_demangling());
                let _ = (func.entry_pc(), func.language(), location.line());
                if let Some(file) = location.file() {
                    source_context(&handle, &file.full_path(), location.line());
                }
            }
        }
    }
    if let Ok(Some(cfi)) = &cfi {
        for &addr in &addresses {
            let _ = cfi.covers(addr);
        }
    }
    if meta.features.has_debug_info && matches!(handle.object(), Object::PortablePdb(_)) {
        let ppdb: CacheResult<OwnedPpdbCache> = derive::<PpdbFormat>(&handle);
        if let Ok(ppdb) = ppdb {
            for (method, &offset) in addresses.iter().enumerate() {
                let frame = RawFrame {
                    function_id: Some(HexValue(method as u64 + 1)),
                    instruction_addr: HexValue(offset),
                    ..RawFrame::default()
                };
                let _ = symbolicate_dotnet_frame(ppdb.get(), &frame, 0);
            }
        }
    }
}

/// Builds the derived cache of format `F` into a file and maps it back, as the cache
/// layer does (conversion and load each isolated).
fn derive<F: DerivedFormat<Input: From<Arc<ObjectHandle>>>>(
    handle: &Arc<ObjectHandle>,
) -> CacheResult<F::Item> {
    let temp = tempfile::NamedTempFile::new_in(scratch_dir()).expect("a temp file");
    let file = temp.reopen().expect("reopening the temp file");
    let input = F::Input::from(handle.clone());
    isolate(F::KIND.name, move || {
        let mut out = BufWriter::new(file);
        F::convert(input, &mut out)?;
        out.into_inner()
            .map_err(|e| omnisym::error::CacheError::internal(e.error()))?;
        Ok(())
    })?;
    let view = ByteView::open(temp.path()).expect("mapping the cache file");
    isolate(F::KIND.name, || F::load(view))
}

/// The object's own symbol addresses (and the byte after each), then two addresses
/// read from the input's last 16 bytes, relative to the load address.
fn addresses(handle: &ObjectHandle, data: &[u8]) -> Vec<u64> {
    let object = handle.object();
    let load = object.load_address();
    let mut out: Vec<u64> = object
        .symbols()
        .take(MAX_ADDRESSES / 2)
        .flat_map(|symbol| {
            let rel = symbol.address.wrapping_sub(load);
            [rel, rel.wrapping_add(1)]
        })
        .collect();
    if let Some(tail) = data.len().checked_sub(16).map(|at| &data[at..]) {
        out.push(u64::from_le_bytes(tail[..8].try_into().unwrap()));
        out.push(u64::from_le_bytes(tail[8..].try_into().unwrap()));
    }
    out.push(0);
    out
}

/// Source context for one frame, as `native/source_context.rs` asks for it: a source
/// bundle's or portable PDB's debug session, else sources embedded in DWARF, else the
/// PDB's SRCSRV link.
fn source_context(handle: &ObjectHandle, abs_path: &str, line: u32) {
    let line = line as usize;
    if matches!(
        handle.object(),
        Object::SourceBundle(_) | Object::PortablePdb(_)
    ) {
        let _ = isolate("source", || {
            let Ok(session) = handle.object().debug_session() else {
                return Ok(());
            };
            if let Ok(Some(descriptor)) = session.source_by_path(abs_path) {
                if let Some(text) = descriptor.contents() {
                    let _ = context_lines(text, line, 0);
                }
                let _ = descriptor.url().and_then(fetchable_link);
            }
            Ok(())
        });
        return;
    }
    match isolate("source", || {
        Ok(handle.embedded_source(abs_path).map(str::to_owned))
    }) {
        Ok(Some(text)) => {
            let _ = context_lines(&text, line, 0);
        }
        Ok(None) => {
            if let Ok(Some(url)) = isolate("source", || Ok(handle.srcsrv_url(abs_path))) {
                let _ = fetchable_link(&url);
            }
        }
        Err(_) => {}
    }
}
