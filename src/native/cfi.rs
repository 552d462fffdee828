//! CFI caches: the unwind information of a module (ELF `.eh_frame`/`.debug_frame`,
//! Mach-O compact unwind, PE `.pdata`, PDB frame data, Breakpad `STACK` records) in
//! Breakpad's text form, wrapped in symbolic's `CfiCache` container, and parsed into a
//! `minidump_unwind::SymbolFile` that the stack walker evaluates.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;

use minidump::Module;
use minidump_unwind::{FrameWalker, SymbolFile};
use symbolic::cfi::CfiCache;
use symbolic::common::{ByteView, DebugId};
use symbolic::debuginfo::breakpad::BreakpadModuleRecord;

use crate::cache::kinds;
use crate::cache::{CacheKind, DerivedFormat};
use crate::error::{CacheError, CacheResult};
use crate::lookup::{ObjectDerived, ObjectDerivedFormat, ObjectHandle, ObjectPurpose};

/// Unwind rules of one module, ready for the stack walker.
pub struct CfiModule {
    symbols: SymbolFile,
    /// The ids the file names in its `MODULE` record; used to fill in what a
    /// minidump's module list lacks.
    pub debug_id: Option<DebugId>,
    pub debug_file: Option<String>,
}

impl CfiModule {
    /// Whether the rules cover `relative_addr`. A module with rules that do not cover
    /// an address cannot have code there, which is what rejects scanned frames.
    pub fn covers(&self, relative_addr: u64) -> bool {
        self.symbols.cfi_stack_info.is_empty()
            || self.symbols.cfi_stack_info.get(relative_addr).is_some()
    }

    pub fn walk_frame(&self, module: &dyn Module, walker: &mut dyn FrameWalker) -> Option<()> {
        self.symbols.walk_frame(module, walker)
    }
}

/// `None` when the module's file has no unwind information at all.
pub type CfiItem = Option<Arc<CfiModule>>;

fn parse_cfi(data: ByteView<'static>) -> CacheResult<CfiItem> {
    let malformed = |e: &dyn std::fmt::Display| CacheError::Malformed(e.to_string());
    let cache = CfiCache::from_bytes(data).map_err(|e| malformed(&e))?;
    let text = cache.as_slice();
    if text.is_empty() {
        return Ok(None);
    }
    let symbols = SymbolFile::from_bytes(text).map_err(|e| malformed(&e))?;
    let first_line = text.split(|b| *b == b'\n').next().unwrap_or_default();
    let record = BreakpadModuleRecord::parse(first_line).ok();
    Ok(Some(Arc::new(CfiModule {
        symbols,
        debug_id: record.as_ref().and_then(|r| r.id.parse().ok()),
        debug_file: record.map(|r| r.name.to_owned()),
    })))
}

pub struct CfiFormat;

impl DerivedFormat for CfiFormat {
    type Input = Arc<ObjectHandle>;
    type Item = CfiItem;
    const KIND: CacheKind = kinds::CFICACHES;
    /// The parsed rules take 1.6 to 2.1 times their text on the heap (measured on the
    /// fixtures and on 10 to 30 MiB Breakpad files), 3 with the allocator's rounding to
    /// spare. An overstated factor is not free: it made the large modules of a crash
    /// weigh more than the memory layer's share, so every warm request that walked
    /// through them parsed their rules again, most of its time.
    const MEMORY_FACTOR: u32 = 3;

    fn input_size(input: &Arc<ObjectHandle>) -> u64 {
        input.conversion_size()
    }

    fn convert(input: Arc<ObjectHandle>, out: &mut BufWriter<File>) -> CacheResult<()> {
        let object = input.object();
        let cache = CfiCache::from_object_with_opts(object, input.limits().cfi_options());
        input.release_pages();
        let cache = cache.map_err(|e| CacheError::Malformed(e.to_string()))?;
        cache.write_to(out).map_err(CacheError::internal)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        parse_cfi(data)
    }
}

impl ObjectDerivedFormat for CfiFormat {
    const PURPOSE: ObjectPurpose = ObjectPurpose::Unwind;
    type Secondary = ();

    fn input(object: Arc<ObjectHandle>, _: Arc<()>) -> Arc<ObjectHandle> {
        object
    }
}

pub type CfiCaches = ObjectDerived<CfiFormat>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cficache_format_is_the_one_our_version_was_written_for() {
        // If this fails, symbolic changed the CfiCache format: bump cache::kinds::CFICACHES.
        assert_eq!(symbolic::cfi::CFICACHE_LATEST_VERSION, 2);
    }

    #[test]
    fn breakpad_stack_records_parse_into_rules() {
        let sym = b"MODULE Linux x86_64 C0BCC3F19827FE653058404B2831D9E60 crash\n\
                    STACK CFI INIT 1000 20 .cfa: $rsp 8 + .ra: .cfa -8 + ^\n";
        let object = symbolic::debuginfo::Object::parse(sym).unwrap();
        let cache = CfiCache::from_object(&object).unwrap();
        let mut bytes = Vec::new();
        cache.write_to(&mut bytes).unwrap();
        let module = parse_cfi(ByteView::from_vec(bytes)).unwrap().unwrap();
        assert!(module.covers(0x1010));
        assert!(!module.covers(0x2000));
        // symbolic names the module only for PE files (whose dumps may lack the PDB
        // name); the other formats carry their ids in the dump's module list.
        assert_eq!(module.debug_file, None);
    }

    /// The parsed rules' heap: the range map's entries and the rule strings they own
    /// (the fixtures are x86_64 and have no `STACK WIN` records).
    fn heap_bytes(symbols: &SymbolFile) -> usize {
        assert!(
            symbols.win_stack_framedata_info.is_empty() && symbols.win_stack_fpo_info.is_empty()
        );
        symbols
            .cfi_stack_info
            .ranges_values()
            .map(|entry| {
                let info = &entry.1;
                std::mem::size_of_val(entry)
                    + info.init.rules.capacity()
                    + info.add_rules.capacity() * std::mem::size_of_val(&info.init)
                    + info
                        .add_rules
                        .iter()
                        .map(|r| r.rules.capacity())
                        .sum::<usize>()
            })
            .sum()
    }

    #[test]
    fn the_memory_factor_covers_the_parsed_rules() {
        let fixtures = [
            "fixtures/native/elf/crash",
            "fixtures/native/pe/crash.exe",
            "fixtures/native/breakpad/crash_pe.sym",
            "fixtures/minidump/nofp/crash",
        ];
        for fixture in fixtures {
            let path = format!("{}/{fixture}", env!("CARGO_MANIFEST_DIR"));
            let data = std::fs::read(path).unwrap();
            let object = symbolic::debuginfo::Object::parse(&data).unwrap();
            let cache = CfiCache::from_object(&object).unwrap();
            let symbols = SymbolFile::from_bytes(cache.as_slice()).unwrap();
            // A quarter more for the allocator's size classes and spare capacity.
            let weighed = heap_bytes(&symbols) * 5 / 4;
            let allowed = cache.as_slice().len() * CfiFormat::MEMORY_FACTOR as usize;
            assert!(weighed <= allowed, "{fixture}: {weighed} > {allowed}");
        }
    }

    #[test]
    fn pe_unwind_info_names_its_pdb() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/native/pe/crash.exe");
        let data = std::fs::read(path).unwrap();
        let object = symbolic::debuginfo::Object::parse(&data).unwrap();
        let cache = CfiCache::from_object(&object).unwrap();
        let mut bytes = Vec::new();
        cache.write_to(&mut bytes).unwrap();
        let module = parse_cfi(ByteView::from_vec(bytes)).unwrap().unwrap();
        assert_eq!(module.debug_file.as_deref(), Some("crash.pdb"));
        assert_eq!(
            module.debug_id.unwrap().to_string(),
            "8e0a63ce-e693-fdc7-4c4c-44205044422e-1"
        );
    }
}
