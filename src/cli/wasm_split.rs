//! `omnisym wasm-split`, upstream's `wasm-split`: gives a WebAssembly module the
//! `build_id` custom section the lookup finds it by (code id, and debug id from its
//! first 16 bytes), and optionally writes a debug companion and strips the debug
//! sections from the module a browser loads.
//!
//! The companion is the whole module, not only its DWARF sections: DWARF addresses in
//! Wasm are offsets into the code section, so a reader needs every section before them.

use std::ops::Range;
use std::path::Path;

use anyhow::{Context, bail};
use uuid::Uuid;
use wasm_encoder::{CustomSection, Encode, RawSection};
use wasmparser::{Parser, Payload};

use super::WasmSplitArgs;

/// The custom section that carries the module's build id, read as is by the lookup.
const BUILD_ID: &str = "build_id";
/// Where a browser finds the module's separate DWARF (WebAssembly tool conventions):
/// its payload is one length-prefixed string.
const EXTERNAL_DEBUG_INFO: &str = "external_debug_info";

/// One section of the module as read: its id and bytes, and a custom section's name.
struct Section<'a> {
    id: u8,
    data: &'a [u8],
    custom_name: Option<&'a str>,
}

pub fn run(args: WasmSplitArgs) -> anyhow::Result<()> {
    let input = std::fs::read(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let mut sections = read_sections(&input)
        .with_context(|| format!("{} is not a WebAssembly module", args.input.display()))?;
    let mut added: Vec<(String, Vec<u8>)> = Vec::new();
    let mut changed = false;

    let existing = sections
        .iter()
        .find(|s| s.custom_name == Some(BUILD_ID))
        .map(|s| custom_payload(s).to_vec());
    let build_id = match existing {
        Some(id) => id,
        None => {
            let id = args
                .build_id
                .unwrap_or_else(Uuid::new_v4)
                .as_bytes()
                .to_vec();
            added.push((BUILD_ID.to_owned(), id.clone()));
            changed = true;
            id
        }
    };

    if let Some(debug_out) = &args.debug_out {
        write_module(debug_out, &sections, &added)?;
    }
    if args.strip {
        sections.retain(|s| !is_debug_section(s, args.strip_names));
        changed = true;
    }
    // As upstream and Emscripten: without an explicit URL, the companion's file name,
    // which resolves next to the module.
    let external_url = args.external_dwarf_url.clone().or_else(|| {
        args.debug_out
            .as_ref()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .map(str::to_owned)
    });
    if let Some(url) = external_url {
        let mut payload = Vec::new();
        url.as_str().encode(&mut payload);
        added.push((EXTERNAL_DEBUG_INFO.to_owned(), payload));
        changed = true;
    }
    if changed {
        let out = args.out.as_ref().unwrap_or(&args.input);
        write_module(out, &sections, &added)?;
    }
    if !args.quiet {
        println!("{}", hex::encode(&build_id));
    }
    Ok(())
}

/// The module's sections in order, after checking its header.
fn read_sections(bytes: &[u8]) -> anyhow::Result<Vec<Section<'_>>> {
    let mut sections = Vec::new();
    let mut saw_header = false;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload?;
        match &payload {
            Payload::Version { encoding, .. } => {
                if *encoding != wasmparser::Encoding::Module {
                    bail!("a component, not a module");
                }
                saw_header = true;
            }
            Payload::End(_) => break,
            _ => {}
        }
        if let Some((id, range)) = payload.as_section() {
            let custom_name = match &payload {
                Payload::CustomSection(reader) => Some(reader.name()),
                _ => None,
            };
            sections.push(Section {
                id,
                data: slice(bytes, range)?,
                custom_name,
            });
        }
    }
    if !saw_header {
        bail!("no WebAssembly header");
    }
    Ok(sections)
}

fn slice(bytes: &[u8], range: Range<usize>) -> anyhow::Result<&[u8]> {
    bytes.get(range).context("section past the end of the file")
}

/// A custom section's contents after its name.
fn custom_payload<'a>(section: &Section<'a>) -> &'a [u8] {
    let mut reader = wasmparser::BinaryReader::new(section.data, 0);
    match reader.read_string() {
        Ok(_) => &section.data[reader.original_position()..],
        Err(_) => &[],
    }
}

/// DWARF sections (`.debug_*`), and with `names` the `name` section too.
fn is_debug_section(section: &Section<'_>, names: bool) -> bool {
    match section.custom_name {
        Some("name") => names,
        Some(name) => name.starts_with(".debug_"),
        None => false,
    }
}

fn write_module(
    path: &Path,
    sections: &[Section<'_>],
    added: &[(String, Vec<u8>)],
) -> anyhow::Result<()> {
    let mut module = wasm_encoder::Module::new();
    for section in sections {
        module.section(&RawSection {
            id: section.id,
            data: section.data,
        });
    }
    for (name, data) in added {
        module.section(&CustomSection {
            name: name.as_str().into(),
            data: data.as_slice().into(),
        });
    }
    std::fs::write(path, module.finish())
        .with_context(|| format!("cannot write {}", path.display()))
}
