//! The differential test of lazy readers: for every debug file the project has made, a
//! lazy reader must answer each address exactly as the SymCache built from the same
//! file does (whole inline chain: names, languages, entry addresses, paths, lines).
//! Addresses: every call's return address minus one from `fixtures/lazy/manifest.json`,
//! every symbol's start and the byte after it, and pseudo-random ones across the code;
//! for Breakpad text, every record's start, middle and end and the bytes around them
//! (`differential_breakpad.rs`, which also checks generated, hostile and damaged text).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use symbolic::common::ByteView;
use symbolic::debuginfo::FileFormat;
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::{open, symcache_answer};
use crate::lookup::{ObjectHandle, ObjectLimits};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Debug files with the return addresses their manifest lists (none for most).
fn fixture_files() -> Vec<(PathBuf, Vec<u64>)> {
    let mut files = Vec::new();
    let text = std::fs::read_to_string(root().join("lazy/manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    for file in manifest["files"].as_array().unwrap() {
        let addrs = file["return_addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| u64::from_str_radix(a.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
            .collect();
        files.push((
            root().join("lazy").join(file["path"].as_str().unwrap()),
            addrs,
        ));
    }
    for path in [
        "native/elf/crash.debug",
        "native/elf/crash",
        "native/elf/crash.stripped",
        "native/pe/crash.pdb",
        "native-srcsrv/crash.pdb",
        "native-embedded/crash.debug",
        "minidump/fp/crash.debug",
        "minidump/nofp/crash.debug",
        "mozilla/libinline.so",
        "lazy/macho/prog",
        "lazy/elf/prog-dwarf4",
        "native/breakpad/crash.sym",
        "native/breakpad/crash_pe.sym",
        "minidump/fp/crash.sym",
        "minidump/nofp/crash.sym",
        "mozilla/libinline.so.sym",
    ] {
        files.push((root().join(path), Vec::new()));
    }
    files
}

/// Fixed-seed xorshift64*: the same addresses every run.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Checked {
    addresses: usize,
    inline_chains: usize,
    lazy_time: Duration,
    convert_time: Duration,
}

/// Compares every address; returns how many were checked, or every difference.
fn check_file(path: &Path, return_addresses: &[u64]) -> Result<Checked, Vec<String>> {
    let data = ByteView::open(path).unwrap();
    let handle = Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap());
    let object = handle.symbolic_object().unwrap();

    let started = Instant::now();
    let mut converter = SymCacheConverter::new();
    converter.process_object(&*object).unwrap();
    let mut buf = Vec::new();
    converter.serialize(&mut buf).unwrap();
    let convert_time = started.elapsed();
    let symcache = SymCache::parse(&buf).unwrap();

    let mut addrs: Vec<u64> = return_addresses.iter().map(|a| a - 1).collect();
    let symbols: Vec<u64> = object.symbols().map(|s| s.address).collect();
    for &address in &symbols {
        addrs.extend([address, address + 1]);
    }
    let lo = symbols.iter().copied().min().unwrap_or(0);
    let hi = symbols.iter().copied().max().unwrap_or(0x10000) + 0x100;
    if object.file_format() == FileFormat::Breakpad {
        addrs.extend(super::differential_breakpad::breakpad_addresses(
            object.data(),
        ));
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ path.as_os_str().len() as u64);
    for _ in 0..2000 {
        addrs.push(lo + rng.next() % (hi - lo).max(1));
    }

    let started = Instant::now();
    let Some(reader) = open(&handle, &std::env::temp_dir()) else {
        return Err(vec![format!("{}: no lazy reader", path.display())]);
    };
    let mut lazy_time = started.elapsed();
    let mut differences = Vec::new();
    let mut inline_chains = 0;
    for &addr in &addrs {
        let started = Instant::now();
        let lazy = reader.lookup(addr);
        lazy_time += started.elapsed();
        let expected = symcache_answer(&symcache, addr);
        inline_chains += usize::from(expected.len() > 1);
        if lazy != expected && differences.len() < 20 {
            differences.push(format!(
                "{} at {addr:#x}:\n  symcache: {expected:?}\n  lazy:     {lazy:?}",
                path.display()
            ));
        }
    }
    if differences.is_empty() {
        Ok(Checked {
            addresses: addrs.len(),
            inline_chains,
            lazy_time,
            convert_time,
        })
    } else {
        Err(differences)
    }
}

/// Formats with a lazy reader; the others wait for their SymCache.
fn has_lazy_reader(format: FileFormat) -> bool {
    matches!(
        format,
        FileFormat::Elf
            | FileFormat::MachO
            | FileFormat::Wasm
            | FileFormat::Pdb
            | FileFormat::Breakpad
    )
}

#[test]
fn lazy_readers_answer_as_the_symcache_does() {
    let mut failures = Vec::new();
    let mut formats = std::collections::BTreeSet::new();
    for (path, return_addresses) in fixture_files() {
        let data = ByteView::open(&path).unwrap();
        let handle = ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap();
        let format = handle.file_format();
        if !has_lazy_reader(format) {
            continue;
        }
        if !handle.symbolic_object().unwrap().has_debug_info() {
            // Symbol tables convert in no time; there is nothing to read lazily.
            assert!(
                open(&Arc::new(handle), &std::env::temp_dir()).is_none(),
                "{}",
                path.display()
            );
            continue;
        }
        formats.insert(format.to_string());
        match check_file(&path, &return_addresses) {
            Ok(checked) => eprintln!(
                "{}: {} addresses ({} inline chains) equal; lazy {:?}, conversion {:?}",
                path.display(),
                checked.addresses,
                checked.inline_chains,
                checked.lazy_time,
                checked.convert_time
            ),
            Err(differences) => failures.extend(differences),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for format in ["elf", "macho", "wasm", "pdb", "breakpad"] {
        assert!(formats.contains(format), "no {format} file was checked");
    }
}

/// Damaged DWARF: bytes of the debug sections overwritten at pseudo-random places. The
/// reader must open or refuse each file and answer lookups without panicking (gimli
/// reports errors rather than panicking; the walk bounds its own recursion).
#[test]
fn damaged_dwarf_never_panics_the_lazy_reader() {
    let original = std::fs::read(root().join("lazy/elf/prog-dwarf4.debug")).unwrap();
    let handle = ObjectHandle::from_bytes(
        ByteView::from_vec(original.clone()),
        ObjectLimits::default(),
    )
    .unwrap();
    let symbols: Vec<u64> = handle
        .symbolic_object()
        .unwrap()
        .symbols()
        .map(|s| s.address)
        .collect();
    drop(handle);
    let mut rng = Rng(0xdead_beef);
    let mut opened = 0;
    for round in 0..100 {
        let mut bytes = original.clone();
        // Past the headers, where the debug sections are.
        for _ in 0..1 + round % 20 {
            let at = 4096 + (rng.next() as usize) % (bytes.len() - 4096);
            bytes[at] = rng.next() as u8;
        }
        let Ok(handle) =
            ObjectHandle::from_bytes(ByteView::from_vec(bytes), ObjectLimits::default())
        else {
            continue;
        };
        let handle = Arc::new(handle);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(reader) = open(&handle, &std::env::temp_dir()) {
                for i in 0..40 {
                    let addr = symbols[(rng.0 as usize + i * 7919) % symbols.len()];
                    reader.lookup(addr + (i as u64 % 5));
                }
                true
            } else {
                false
            }
        }));
        match outcome {
            Ok(true) => opened += 1,
            Ok(false) => {}
            Err(_) => panic!("round {round}: the lazy reader panicked"),
        }
    }
    assert!(opened > 30, "only {opened} damaged files opened");
}
