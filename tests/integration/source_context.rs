//! Source context from source bundles found beside debug files: embedded sources, and
//! sources the bundle only links to (SourceLink-style), which the server fetches through
//! its fetch layer and reports as `sourcelink` candidates.

use crate::common;

use std::io::{Cursor, Write};

use common::{ELF_BASE, Server, SymbolServer, elf_debug_path, elf_module, fixtures, object};
use serde_json::{Value, json};

/// A source bundle (symbolic's format: `SYSB`, format version 2, then a zip with a
/// `manifest.json`) holding `embedded` files and mapping `links` path patterns to URLs.
fn source_bundle(debug_id: &str, embedded: &[(&str, &str)], links: &[(&str, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"SYSB");
    out.extend_from_slice(&2u32.to_le_bytes());
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    let mut files = serde_json::Map::new();
    for (i, (path, text)) in embedded.iter().enumerate() {
        let name = format!("files/{i}");
        zip.start_file(name.as_str(), options).unwrap();
        zip.write_all(text.as_bytes()).unwrap();
        files.insert(name, json!({"type": "source", "path": path}));
    }
    let links: serde_json::Map<String, Value> = links
        .iter()
        .map(|(pattern, url)| (pattern.to_string(), json!(url)))
        .collect();
    let manifest = json!({
        "files": files,
        "source_links": links,
        "debug_id": debug_id,
        "object_name": "crash",
    });
    zip.start_file("manifest.json", options).unwrap();
    zip.write_all(manifest.to_string().as_bytes()).unwrap();
    out.extend_from_slice(&zip.finish().unwrap().into_inner());
    out
}

fn line_of(text: &str, lineno: u64) -> &str {
    text.lines().nth(lineno as usize - 1).unwrap()
}

/// The probe with the deepest inline chain: frames in `helpers.h` and in `crash.c`.
fn inlined_probe() -> Value {
    object("elf")["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "inlined")
        .max_by_key(|p| p["inline_depth"].as_u64())
        .unwrap()
        .clone()
}

/// A symbol server with the ELF debug file, a source bundle beside it that embeds
/// `helpers.h` and links `crash.c` to `<server>/linked/crash.c`, and that file.
async fn linked_bundle_server() -> (SymbolServer, String, String) {
    let elf = object("elf");
    let code_id = elf["code_id"].as_str().unwrap();
    let helpers = std::fs::read_to_string(fixtures().join("native/helpers.h")).unwrap();
    let crash_c = std::fs::read_to_string(fixtures().join("native/crash.c")).unwrap();
    let symbols = SymbolServer::start().await;
    symbols.put(
        &elf_debug_path(),
        &fixtures()
            .join("native")
            .join(elf["files"]["debug"].as_str().unwrap()),
    );
    symbols.put_bytes("linked/crash.c", crash_c.as_bytes());
    let bundle = source_bundle(
        elf["debug_id"].as_str().unwrap(),
        &[("/build/omnisym-fixtures/helpers.h", &helpers)],
        &[(
            "/build/omnisym-fixtures/*",
            format!("{}linked/*", symbols.url),
        )],
    );
    symbols.put_bytes(
        &format!("{}/{}.src.zip", &code_id[..2], &code_id[2..]),
        &bundle,
    );
    (symbols, helpers, crash_c)
}

/// A request for the inlined probe's exact address against `source`.
fn inlined_probe_request(source: Value) -> Value {
    let probe = inlined_probe();
    let rel = probe["rel_addr"].as_str().unwrap().trim_start_matches("0x");
    let rel = u64::from_str_radix(rel, 16).unwrap();
    json!({
        "sources": [source],
        "modules": [elf_module()],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", ELF_BASE + rel),
            "adjust_instruction_addr": false,
        }]}],
        "options": {"dif_candidates": true},
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn embedded_and_linked_sources_give_context() {
    let (symbols, helpers, crash_c) = linked_bundle_server().await;
    let server = Server::start("");
    let probe = inlined_probe();
    let request = inlined_probe_request(
        json!({"type": "http", "id": "symbols", "url": symbols.url, "layout": {"type": "native"}}),
    );
    let (status, body) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200, "{body}");
    let frames = body["stacktraces"][0]["frames"].as_array().unwrap();
    let expected = probe["frames"].as_array().unwrap();
    assert_eq!(frames.len(), expected.len(), "{body}");
    for (frame, want) in frames.iter().zip(expected) {
        let lineno = want["line"].as_u64().unwrap();
        let file = want["file"].as_str().unwrap();
        let text = if file.ends_with("helpers.h") {
            &helpers
        } else {
            &crash_c
        };
        assert_eq!(frame["abs_path"], file);
        assert_eq!(frame["context_line"], line_of(text, lineno), "{frame}");
        let pre = frame["pre_context"].as_array().unwrap();
        assert_eq!(pre.len(), 5.min(lineno as usize - 1));
        assert_eq!(pre.last().unwrap(), line_of(text, lineno - 1));
        if file.ends_with("crash.c") {
            assert_eq!(
                frame["source_link"],
                format!("{}linked/crash.c", symbols.url)
            );
        } else {
            assert!(frame.get("source_link").is_none(), "{frame}");
        }
    }
    // The linked file was fetched once, however many frames needed it, and reported.
    assert_eq!(
        symbols
            .hits()
            .iter()
            .filter(|h| *h == "linked/crash.c")
            .count(),
        1
    );
    let candidates = body["modules"][0]["candidates"].as_array().unwrap();
    let link = candidates
        .iter()
        .find(|c| c["source"] == "sourcelink")
        .expect("the linked source is a candidate");
    assert_eq!(link["location"], format!("{}linked/crash.c", symbols.url));
    assert_eq!(link["download"]["status"], "ok");
    assert_eq!(body["modules"][0]["features"]["has_sources"], true);

    // Without source context, nothing is fetched or filled in.
    let mut quiet = request.clone();
    quiet["options"]["apply_source_context"] = json!(false);
    let (_, body) = server.post("/symbolicate", &quiet).await;
    for frame in body["stacktraces"][0]["frames"].as_array().unwrap() {
        assert!(frame.get("context_line").is_none(), "{frame}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn links_to_reserved_addresses_are_refused_unless_allowed() {
    let (symbols, _, _) = linked_bundle_server().await;
    // The symbol source is a filesystem copy of the same tree, so only the link points
    // at a loopback address.
    let server = Server::start("connect_to_reserved_ips: false\n");
    let request = inlined_probe_request(
        json!({"type": "filesystem", "id": "local", "path": symbols.root, "layout": {"type": "native"}}),
    );
    let (status, body) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !symbols.hits().iter().any(|h| h.starts_with("linked/")),
        "the server fetched a loopback link"
    );
    let frames = body["stacktraces"][0]["frames"].as_array().unwrap();
    let last = frames.last().unwrap();
    assert!(last["abs_path"].as_str().unwrap().ends_with("crash.c"));
    assert!(last.get("context_line").is_none(), "{last}");
    let candidates = body["modules"][0]["candidates"].as_array().unwrap();
    let link = candidates
        .iter()
        .find(|c| c["source"] == "sourcelink")
        .expect("the refused link is still reported");
    assert_eq!(link["download"]["status"], "error", "{link}");
    // Embedded sources are unaffected.
    assert!(frames[0].get("context_line").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn dwarf_embedded_sources_give_context() {
    let common::EmbeddedProbe {
        path,
        code_id,
        debug_id,
        addr,
        line: lineno,
    } = common::embedded_probe();
    let crash_c = std::fs::read_to_string(fixtures().join("native/crash.c")).unwrap();

    let symbols = SymbolServer::start().await;
    symbols.put(&format!("{}/{}.debug", &code_id[..2], &code_id[2..]), &path);
    let server = Server::start("");
    let base = 0x5555_0000_0000u64;
    let request = json!({
        "sources": [{"type": "http", "id": "symbols", "url": symbols.url, "layout": {"type": "native"}}],
        "modules": [{
            "type": "elf",
            "code_id": code_id,
            "debug_id": debug_id,
            "image_addr": format!("{base:#x}"),
            "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", base + addr),
            "adjust_instruction_addr": false,
        }]}],
    });
    let (status, body) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200, "{body}");
    let module = &body["modules"][0];
    assert_eq!(module["features"]["has_sources"], true, "{body}");
    let frame = &body["stacktraces"][0]["frames"][0];
    assert_eq!(frame["function"], "dispatch");
    assert_eq!(frame["lineno"], lineno);
    assert_eq!(frame["context_line"], line_of(&crash_c, lineno), "{frame}");
    assert_eq!(
        frame["post_context"][0],
        line_of(&crash_c, lineno + 1),
        "{frame}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn srcsrv_download_entries_give_context() {
    use symbolic::debuginfo::Object;

    let dir = fixtures().join("native-srcsrv");
    let exe = std::fs::read(dir.join("crash.exe")).unwrap();
    let pdb = std::fs::read(dir.join("crash.pdb")).unwrap();
    let crash_c = std::fs::read_to_string(fixtures().join("native/crash.c")).unwrap();
    let symbols = SymbolServer::start().await;
    // The stream's URL holds a fixed-width port placeholder (see the fixture's build.sh).
    let port = symbols
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/');
    let placeholder = b"127.0.0.1:00000";
    let at = pdb
        .windows(placeholder.len())
        .position(|w| w == placeholder)
        .expect("the fixture has the URL placeholder");
    let mut pdb = pdb;
    pdb[at..at + placeholder.len()].copy_from_slice(format!("127.0.0.1:{port:0>5}").as_bytes());

    let object = Object::parse(&pdb).unwrap();
    let session = object.debug_session().unwrap();
    let function = session
        .functions()
        .map(Result::unwrap)
        // PDB function names carry their argument lists.
        .find(|f| f.name.as_str().starts_with("dispatch("))
        .expect("the PDB has dispatch()");
    let line = function.lines.first().unwrap();
    let (addr, lineno) = (line.address, line.line);
    let debug_id = object.debug_id();
    drop(session);
    let code_id = Object::parse(&exe).unwrap().code_id().unwrap().to_string();

    let breakpad_id = debug_id.breakpad().to_string();
    symbols.put_bytes(&format!("crash.pdb/{breakpad_id}/crash.pdb"), &pdb);
    symbols.put_bytes("srcsrv/crash.c", crash_c.as_bytes());
    let server = Server::start("");
    let base = 0x1_4000_0000u64;
    let request = json!({
        "sources": [{"type": "http", "id": "symbols", "url": symbols.url, "layout": {"type": "symstore"}}],
        "modules": [{
            "type": "pe",
            "code_id": code_id,
            "code_file": "C:\\app\\crash.exe",
            "debug_id": debug_id.to_string(),
            "debug_file": "crash.pdb",
            "image_addr": format!("{base:#x}"),
            "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", base + addr),
            "adjust_instruction_addr": false,
        }]}],
        "options": {"dif_candidates": true},
    });
    let (status, body) = server.post("/symbolicate", &request).await;
    assert_eq!(status, 200, "{body}");
    let frame = &body["stacktraces"][0]["frames"][0];
    assert_eq!(frame["function"], "dispatch(int)", "{frame}");
    // The zero-padded port reads as the server's own.
    let url = format!("{}srcsrv/crash.c", symbols.url);
    assert_eq!(frame["source_link"], url, "{frame}");
    assert_eq!(frame["context_line"], line_of(&crash_c, lineno), "{frame}");
    let module = &body["modules"][0];
    assert_eq!(module["features"]["srcsrv_vcs"], "other", "{module}");
    // The PDB only points to its sources.
    assert_eq!(module["features"]["has_sources"], false, "{module}");
    let link = module["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["source"] == "sourcelink")
        .expect("the SRCSRV download is a candidate");
    assert_eq!(link["download"]["status"], "ok", "{link}");
    assert_eq!(
        symbols
            .hits()
            .iter()
            .filter(|h| *h == "srcsrv/crash.c")
            .count(),
        1
    );
}
