//! Checks on fixtures/lazy (the larger program `fixtures/lazy/build.sh` builds for the
//! differential tests): every debug file in its manifest parses, carries debug info,
//! and its return addresses are addresses the SymCache answers for, so an address
//! list made with the wrong image base fails here rather than passing a differential
//! test vacuously.

use std::path::Path;

use symbolic::common::ByteView;
use symbolic::debuginfo::Object;
use symbolic::symcache::{SymCache, SymCacheConverter};

fn manifest() -> Vec<(String, String, Vec<u64>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/lazy");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| {
            let addrs = file["return_addresses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    u64::from_str_radix(a.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
                })
                .collect();
            let path = dir.join(file["path"].as_str().unwrap());
            (
                path.display().to_string(),
                file["format"].as_str().unwrap().to_owned(),
                addrs,
            )
        })
        .collect()
}

#[test]
fn every_lazy_fixture_parses_with_debug_info_and_covers_its_return_addresses() {
    let files = manifest();
    let formats: Vec<&str> = files.iter().map(|(_, format, _)| format.as_str()).collect();
    for format in ["elf", "macho", "wasm", "pdb"] {
        assert!(
            formats.contains(&format),
            "no {format} file in the manifest"
        );
    }
    for (path, format, addrs) in &files {
        let data = ByteView::open(path).unwrap();
        let object = Object::parse(&data).unwrap();
        assert_eq!(object.file_format().to_string(), format.as_str(), "{path}");
        assert!(object.has_debug_info(), "{path} has no debug info");
        assert!(
            addrs.len() > 1000,
            "{path}: only {} return addresses",
            addrs.len()
        );

        let mut converter = SymCacheConverter::new();
        converter.process_object(&object).unwrap();
        let mut buf = Vec::new();
        converter.serialize(&mut buf).unwrap();
        let symcache = SymCache::parse(&buf).unwrap();

        let mut inlined = 0;
        for &addr in addrs {
            // The call itself is the byte before its return address.
            let frames: Vec<_> = symcache.lookup(addr - 1).collect();
            let outer = frames
                .last()
                .unwrap_or_else(|| panic!("{path}: nothing at {:#x}", addr - 1));
            let entry = u64::from(outer.function().entry_pc());
            assert!(
                entry < addr,
                "{path}: {:#x} is before its function ({entry:#x})",
                addr - 1
            );
            assert!(
                frames.iter().all(|f| !f.function().name().is_empty()),
                "{path}: {:#x}",
                addr - 1
            );
            assert!(outer.line() > 0, "{path}: no line at {:#x}", addr - 1);
            inlined += usize::from(frames.len() > 1);
        }
        // Calls inside the four-level lz_level* chains.
        assert!(
            inlined > addrs.len() / 4,
            "{path}: only {inlined} calls inside inlinees"
        );
    }
}
