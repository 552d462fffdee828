//! The writer against symbolic's `SymCacheConverter`: for every debug file under
//! `fixtures/` (every object of a fat archive), both write a SymCache and the bytes must
//! be the same; so symbolic's reader gives the same answer (function, file, line, inline
//! chain) for every address from either. Also with the secondary inputs applied
//! (BCSymbolMap, il2cpp line mapping), through each side's own transformer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use symbolic::common::ByteView;
use symbolic::debuginfo::macho::BcSymbolMap;
use symbolic::debuginfo::{Archive, Object};
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::writer::SpillingWriter;
use super::{HiddenNames, spill_error};
use crate::lookup::{ObjectHandle, ObjectLimits};
use crate::native::il2cpp_mapping::Il2cppMapping;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn files_under(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, into);
        } else {
            into.push(path);
        }
    }
}

/// Ours, as a conversion writes it: from a handle on the object's own bytes (DWARF goes
/// through our walk there, the rest through symbolic's session).
fn ours(object: &Object<'_>, inputs: Inputs<'_>) -> Vec<u8> {
    let data = ByteView::from_vec(object.data().to_vec());
    let handle = Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap());
    let scratch = tempfile::tempdir().unwrap();
    let mut writer = SpillingWriter::new_in(scratch.path()).unwrap();
    if let Some(map) = inputs.bcsymbolmap {
        writer.add_rewrite(HiddenNames(map));
    }
    if let Some(mapping) = inputs.il2cpp {
        writer.add_rewrite(mapping);
    }
    writer
        .process_handle(&handle, scratch.path())
        .map_err(spill_error)
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    writer.serialize(&mut out, scratch.path()).unwrap();
    out
}

fn theirs(object: &Object<'_>, inputs: Inputs<'_>) -> Vec<u8> {
    let mut converter = SymCacheConverter::new();
    if let Some(map) = inputs.bcsymbolmap {
        converter.add_transformer(map);
    }
    if let Some(mapping) = inputs.il2cpp {
        converter.add_transformer(mapping);
    }
    converter.process_object(object).unwrap();
    let mut out = Vec::new();
    converter.serialize(&mut out).unwrap();
    out
}

#[derive(Default)]
struct Inputs<'a> {
    bcsymbolmap: Option<BcSymbolMap<'a>>,
    il2cpp: Option<Il2cppMapping>,
}

/// Both writers' bytes for `object`, which must be equal; returns ours.
fn same_bytes(
    label: &str,
    object: &Object<'_>,
    inputs: fn() -> (Inputs<'static>, Inputs<'static>),
) -> Vec<u8> {
    let (mine, symbolic) = inputs();
    let ours = ours(object, mine);
    let theirs = theirs(object, symbolic);
    if ours != theirs {
        let at = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        panic!(
            "{label}: our SymCache differs from symbolic's ({} vs {} bytes, first at {at:?})",
            ours.len(),
            theirs.len()
        );
    }
    // And it reads: one lookup per range start, so a file that is the same but
    // unreadable cannot pass either.
    let cache = SymCache::parse(&ours).unwrap();
    assert_eq!(cache.debug_id(), object.debug_id(), "{label}");
    ours
}

#[test]
fn every_fixture_debug_file_writes_symbolics_bytes() {
    let mut files = Vec::new();
    files_under(&fixtures(), &mut files);
    // More trees to compare on, beside the repository's (another project's corpus,
    // generated large files): `:`-separated directories.
    if let Some(extra) = std::env::var_os("OMNISYM_DIFFERENTIAL_DIRS") {
        for dir in std::env::split_paths(&extra) {
            files_under(&dir, &mut files);
        }
    }
    files.sort();
    let mut compared = 0;
    for path in &files {
        let Ok(data) = ByteView::open(path) else {
            continue;
        };
        let Ok(archive) = Archive::parse(&data) else {
            continue;
        };
        for (index, object) in archive.objects().enumerate() {
            let Ok(object) = object else { continue };
            if !object.has_debug_info() && !object.has_symbols() {
                continue;
            }
            // Files symbolic cannot convert are no test of ours.
            let mut converter = SymCacheConverter::new();
            if converter.process_object(&object).is_err() {
                continue;
            }
            let label = format!("{}#{index}", path.display());
            if std::env::var_os("OMNISYM_DIFFERENTIAL_VERBOSE").is_some() {
                eprintln!("comparing {label}");
            }
            same_bytes(&label, &object, || (Inputs::default(), Inputs::default()));
            compared += 1;
        }
    }
    // fixtures/ holds ELF, Mach-O, PE/PDB, Breakpad and Wasm debug files, some two dozen:
    // far fewer compared means the walk found nothing.
    assert!(compared >= 20, "only {compared} debug files compared");
}

#[test]
fn secondary_inputs_rewrite_as_symbolics_transformers_do() {
    let dir = fixtures();
    let dwarf = ByteView::open(dir.join("bcsymbolmap/game.dwarf")).unwrap();
    let object = Object::parse(&dwarf).unwrap();
    let plain = ours(&object, Inputs::default());
    let rewritten = same_bytes("bcsymbolmap", &object, || {
        let map = || {
            let data = std::fs::read(fixtures().join("bcsymbolmap/game.bcsymbolmap")).unwrap();
            BcSymbolMap::parse(Box::leak(data.into_boxed_slice())).unwrap()
        };
        (
            Inputs {
                bcsymbolmap: Some(map()),
                il2cpp: None,
            },
            Inputs {
                bcsymbolmap: Some(map()),
                il2cpp: None,
            },
        )
    });

    // A map that rewrote nothing would pass the comparison vacuously.
    assert_ne!(plain, rewritten, "the BCSymbolMap restored no name");

    let debug = ByteView::open(dir.join("il2cpp/game.debug")).unwrap();
    let object = Object::parse(&debug).unwrap();
    let plain = ours(&object, Inputs::default());
    let rewritten = same_bytes("il2cpp", &object, || {
        let mapping = || {
            let data = std::fs::read(fixtures().join("il2cpp/LineNumberMapping.json")).unwrap();
            Il2cppMapping::parse(&data).unwrap()
        };
        (
            Inputs {
                bcsymbolmap: None,
                il2cpp: Some(mapping()),
            },
            Inputs {
                bcsymbolmap: None,
                il2cpp: Some(mapping()),
            },
        )
    });
    assert_ne!(plain, rewritten, "the il2cpp mapping moved no line");
}

/// Where symbolic refuses a file, so does our walk: a unit header that cannot be read
/// fails symbolic's whole debug session, and must fail ours (not yield the units before
/// it as if the file ended there).
#[test]
fn dwarf_symbolic_refuses_is_refused() {
    let mut data = std::fs::read(fixtures().join("native/elf/crash.debug")).unwrap();
    let at = {
        let object = Object::parse(&data).unwrap();
        let Object::Elf(elf) = &object else {
            panic!("an ELF fixture")
        };
        use symbolic::debuginfo::dwarf::Dwarf;
        let info = elf.section("debug_info").unwrap();
        info.data.as_ptr() as usize - data.as_ptr() as usize
    };
    // A DWARF 32-bit unit length in the reserved range (0xfffffff0..): unreadable.
    data[at..at + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let object = Object::parse(&data).unwrap();
    let mut converter = SymCacheConverter::new();
    assert!(
        converter.process_object(&object).is_err(),
        "symbolic reads it"
    );

    let handle = Arc::new(
        ObjectHandle::from_bytes(ByteView::from_vec(data.clone()), ObjectLimits::default())
            .unwrap(),
    );
    let scratch = tempfile::tempdir().unwrap();
    let mut writer = SpillingWriter::new_in(scratch.path()).unwrap();
    let outcome = writer.process_handle(&handle, scratch.path()).unwrap();
    assert!(outcome.is_err(), "our writer read a file symbolic refuses");
}

/// A PDB indexed for Perforce: symbolic's session puts each file's depot path and
/// changelist into its files, and so must ours (the bytes are compared above too; this
/// makes sure the fixture maps files at all, so that the comparison is not vacuous).
#[test]
fn pdb_source_server_paths_are_symbolics() {
    let data = ByteView::open(fixtures().join("native-srcsrv-perforce/crash.pdb")).unwrap();
    let object = Object::parse(&data).unwrap();
    let ours = same_bytes("perforce", &object, || {
        (Inputs::default(), Inputs::default())
    });
    let cache = SymCache::parse(&ours).unwrap();
    let mut places: Vec<_> = cache
        .files()
        .map(|file| {
            (
                file.full_path(),
                file.full_srcsrv_path(),
                file.srcsrv_revision().map(str::to_owned),
            )
        })
        .collect();
    places.sort();
    let place = |suffix: &str| {
        places
            .iter()
            .find(|(path, ..)| path.ends_with(suffix))
            .unwrap_or_else(|| panic!("no {suffix} in {places:?}"))
            .clone()
    };
    let (_, path, revision) = place("crash.c");
    assert_eq!(path.as_deref(), Some("depot/omnisym/src/crash.c"));
    assert_eq!(revision.as_deref(), Some("4521"));
    let (_, path, revision) = place("util.cpp");
    assert_eq!(path.as_deref(), Some("depot/omnisym/src/util.cpp"));
    assert_eq!(revision, None, "an empty changelist is no revision");
    assert!(
        places.iter().any(|(_, path, _)| path.is_none()),
        "a file the stream does not index keeps no source server path: {places:?}"
    );
}

/// PDBs with scrambled records: wherever symbolic's conversion succeeds, ours writes the
/// same bytes, and wherever symbolic refuses the file, so does ours (not a SymCache
/// of what it read before the damage). Panics in the pdb crate are the caller's to
/// contain on either side, and are not compared.
#[test]
fn scrambled_pdbs_convert_or_fail_as_symbolic_does() {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    let original = std::fs::read(fixtures().join("native-srcsrv-perforce/crash.pdb")).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut same, mut both_refused) = (0, 0);
    for round in 0..60 {
        let mut data = original.clone();
        // Past the MSF header and stream directory, so that most still open.
        for _ in 0..(1 + round % 8) * 8 {
            let at = 0x3000 + (next() as usize) % (data.len() - 0x3000);
            data[at] = next() as u8;
        }
        let Ok(object) = Object::parse(&data) else {
            continue;
        };
        let theirs = catch_unwind(AssertUnwindSafe(|| {
            let mut converter = SymCacheConverter::new();
            converter.process_object(&object).ok()?;
            let mut out = Vec::new();
            converter.serialize(&mut out).unwrap();
            Some(out)
        }));
        let ours = catch_unwind(AssertUnwindSafe(|| {
            let handle = Arc::new(
                ObjectHandle::from_bytes(ByteView::from_vec(data.clone()), ObjectLimits::default())
                    .unwrap(),
            );
            let scratch = tempfile::tempdir().unwrap();
            let mut writer = SpillingWriter::new_in(scratch.path()).unwrap();
            writer
                .process_handle(&handle, scratch.path())
                .unwrap()
                .ok()?;
            let mut out = Vec::new();
            writer.serialize(&mut out, scratch.path()).unwrap();
            Some(out)
        }));
        match (theirs, ours) {
            (Ok(Some(theirs)), Ok(Some(ours))) => {
                assert!(theirs == ours, "round {round}: the SymCaches differ");
                same += 1;
            }
            (Ok(None), Ok(None)) => both_refused += 1,
            (Ok(theirs), Ok(ours)) => panic!(
                "round {round}: symbolic {}, ours {}",
                if theirs.is_some() {
                    "converts"
                } else {
                    "refuses"
                },
                if ours.is_some() {
                    "converts"
                } else {
                    "refuses"
                },
            ),
            _ => {}
        }
    }
    println!("scrambled PDBs: {same} converted alike, {both_refused} refused by both");
    assert!(same >= 10, "{same}");
    assert!(both_refused >= 3, "{both_refused}");
}
