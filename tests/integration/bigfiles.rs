//! The small versions of scripts/bigfiles/generate.sh's debug files (fixtures/bigfiles/,
//! one per format; the README says how they were made): every truth address of each,
//! asked of the real server over a filesystem source, must come back with the truth's
//! frames, the whole inline chain (function, file, line of each frame, innermost first).
//! The truth is llvm-symbolizer's (llvm-19's for the PDB). Where the two readers differ
//! after investigation, fixtures/bigfiles/disputes.json records both answers; there the
//! test holds omnisym to its own recorded answer, so that no answer changes unnoticed.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Server, fixtures};
use regex::Regex;
use serde_json::{Value, json};

/// (format, debug file under fixtures/bigfiles, request module type).
const FORMATS: [(&str, &str, &str); 6] = [
    ("elf-dwarf4", "elf-dwarf4/bigfile", "elf"),
    ("elf-dwarf5", "elf-dwarf5/bigfile", "elf"),
    ("elf-dwarf64", "elf-dwarf64/bigfile", "elf"),
    (
        "macho-fat",
        "macho-fat/bigfile.dSYM/Contents/Resources/DWARF/bigfile",
        "macho",
    ),
    ("pdb", "pdb/bigfile.pdb", "pe"),
    ("breakpad", "breakpad/bigfile.sym", "elf"),
];

/// Where the request puts each image: the truth is relative to its own image_vmaddr.
const IMAGE_ADDR: u64 = 0x7f00_0000_0000;
/// Frames per request: well below the server's default limits.
const BATCH: usize = 100;

fn bigfiles() -> PathBuf {
    fixtures().join("bigfiles")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn hex(value: &Value) -> u64 {
    u64::from_str_radix(value.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The unified layout (symsorter's) for one format's files, copied into `root`.
fn unified_tree(format: &str, file: &Path, truth: &Value, root: &Path) {
    for module in truth["modules"].as_array().unwrap() {
        let text = |key: &str| module[key].as_str().unwrap().to_owned();
        let (key, kind) = match format {
            // A .sym of an ELF lives under the build id, as the ELF would.
            "breakpad" => (text("code_id"), "breakpad"),
            f if f.starts_with("elf") => (text("code_id"), "debuginfo"),
            _ => (text("debug_id"), "debuginfo"),
        };
        let place = |kind: &str, from: &Path| {
            let to = root.join(common::unified_path(&key, kind));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, to).unwrap();
        };
        place(kind, file);
        if format == "pdb" {
            place("executable", &file.with_file_name(text("code_file")));
        }
    }
}

/// A function name as both llvm-symbolizer and symbolic spell it: without parameters,
/// `const` or a return type (llvm-symbolizer prints `int ns::leaf<3>(int)` for a
/// template's linkage name, symbolic `ns::leaf<3>(int)`), closure types in GNU's
/// spelling (LLVM's demangler writes `'lambda0'(int)` for `{lambda(int)#2}`).
fn norm(name: &str) -> String {
    let lambda = Regex::new(r"'lambda(\d*)'\(([^()]*)\)").unwrap();
    let mut name = lambda
        .replace_all(name.trim(), |c: &regex::Captures| {
            let n = c[1].parse::<u32>().map_or(1, |n| n + 2);
            format!("{{lambda({})#{n}}}", &c[2])
        })
        .into_owned();
    if let Some(stripped) = name.strip_suffix(" const") {
        name = stripped.to_owned();
    }
    if name.ends_with(')') {
        let mut depth = 0;
        for (i, c) in name.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        let head = &name[..i];
                        if !head.ends_with("operator") && !head.ends_with("anonymous namespace") {
                            name.truncate(i);
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let mut depth = 0i32;
    let mut cut = None;
    for (i, c) in name.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ' ' if depth == 0 => cut = Some(i),
            _ => {}
        }
    }
    match cut {
        Some(i) if !name[..i].ends_with("operator") => name[i + 1..].to_owned(),
        _ => name,
    }
}

/// One frame as the comparison sees it.
#[derive(Debug, PartialEq)]
struct Frame {
    function: String,
    file: String,
    line: u64,
}

fn truth_frames(entry: &Value) -> Vec<Frame> {
    entry["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| Frame {
            function: norm(f["function"].as_str().unwrap()),
            file: f["file"].as_str().unwrap().to_owned(),
            line: f["line"].as_u64().unwrap(),
        })
        .collect()
}

/// The frames answered for input frame `index`, innermost first; panics on any frame
/// that is not symbolicated.
fn answered_frames(answer: &Value, index: usize, what: &str) -> Vec<Frame> {
    answer["stacktraces"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["original_index"].as_u64() == Some(index as u64))
        .map(|f| {
            assert_eq!(f["status"], "symbolicated", "{what}: {f}");
            Frame {
                function: norm(f["function"].as_str().unwrap()),
                file: f["abs_path"].as_str().unwrap().to_owned(),
                line: f["lineno"].as_u64().unwrap(),
            }
        })
        .collect()
}

/// Asks the server for every truth address of one format; returns the mismatches as
/// (address, truth, answer), each the whole chain.
async fn mismatches(
    server: &Server,
    format: &str,
    module_type: &str,
) -> Vec<(String, Vec<Frame>, Vec<Frame>)> {
    let (_, rel, _) = FORMATS.iter().find(|f| f.0 == format).unwrap();
    let file = bigfiles().join(rel);
    let truth = read_json(&file.with_file_name(format!(
        "{}.truth.json",
        file.file_name().unwrap().to_str().unwrap()
    )));
    let root = tempfile::tempdir().unwrap();
    unified_tree(format, &file, &truth, root.path());
    let sources = json!([{"type": "filesystem", "id": "bigfiles", "path": root.path(),
                          "layout": {"type": "unified"}}]);

    let entries = truth["addresses"].as_array().unwrap();
    assert!(
        entries.len() >= 200,
        "{format}: {} truth addresses",
        entries.len()
    );
    let mut wrong = Vec::new();
    for module in truth["modules"].as_array().unwrap() {
        let arch = module["arch"].as_str().unwrap();
        let vmaddr = hex(&module["image_vmaddr"]);
        let mut request_module = json!({
            "type": module_type,
            "arch": arch,
            "debug_id": module["debug_id"],
            "debug_file": module["debug_file"],
            "image_addr": format!("{IMAGE_ADDR:#x}"),
        });
        for key in ["code_id", "code_file", "image_size"] {
            if !module[key].is_null() {
                request_module[key] = module[key].clone();
            }
        }
        let rows: Vec<&Value> = entries.iter().filter(|e| e["arch"] == arch).collect();
        assert!(!rows.is_empty(), "{format}: no address for {arch}");
        for chunk in rows.chunks(BATCH) {
            let frames: Vec<Value> = chunk
                .iter()
                .map(|e| {
                    // The truth is for these very addresses: no return-address adjustment.
                    json!({"instruction_addr": format!("{:#x}", IMAGE_ADDR + hex(&e["addr"]) - vmaddr),
                           "adjust_instruction_addr": false})
                })
                .collect();
            let body = json!({
                "sources": sources,
                "modules": [request_module],
                "stacktraces": [{"frames": frames}],
            });
            let (status, answer) = server.post("/symbolicate", &body).await;
            assert_eq!(status, 200, "{format}: {answer}");
            assert_eq!(answer["status"], "completed", "{format}: {answer}");
            assert_eq!(
                answer["modules"][0]["debug_status"], "found",
                "{format}: {}",
                answer["modules"][0]
            );
            for (i, entry) in chunk.iter().enumerate() {
                let addr = entry["addr"].as_str().unwrap().to_owned();
                let got = answered_frames(&answer, i, &format!("{format} {arch} {addr}"));
                let want = truth_frames(entry);
                if got != want {
                    wrong.push((addr, want, got));
                }
            }
        }
    }
    wrong
}

/// What disputes.json says of one format: (address, frame index, truth line, omnisym line).
fn disputes(format: &str) -> Vec<(String, usize, u64, u64)> {
    read_json(&bigfiles().join("disputes.json"))
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["format"] == format)
        .map(|d| {
            (
                d["addr"].as_str().unwrap().to_owned(),
                d["frame"].as_u64().unwrap() as usize,
                d["truth_line"].as_u64().unwrap(),
                d["omnisym_line"].as_u64().unwrap(),
            )
        })
        .collect()
}

async fn check(format: &str) {
    let (_, _, module_type) = FORMATS.iter().find(|f| f.0 == format).unwrap();
    let server = Server::start("");
    let mut wrong = mismatches(&server, format, module_type).await;
    for (addr, frame, truth_line, omnisym_line) in disputes(format) {
        let at = wrong
            .iter()
            .position(|w| w.0 == addr)
            .unwrap_or_else(|| panic!("{format} {addr}: disputed, but omnisym now agrees with the truth: update disputes.json"));
        let (_, want, got) = wrong.remove(at);
        // Only the disputed line differs, and omnisym still answers what was recorded.
        assert_eq!(want.len(), got.len(), "{format} {addr}: {got:?}");
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            if i == frame {
                assert_eq!(
                    (w.line, g.line),
                    (truth_line, omnisym_line),
                    "{format} {addr}"
                );
                assert_eq!(
                    (&w.function, &w.file),
                    (&g.function, &g.file),
                    "{format} {addr}"
                );
            } else {
                assert_eq!(w, g, "{format} {addr} frame {i}");
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{format}: {} of the truth's addresses answered otherwise, first: {:#?}",
        wrong.len(),
        wrong.first()
    );
}

#[tokio::test]
async fn elf_dwarf4_answers_match_the_truth() {
    check("elf-dwarf4").await;
}

#[tokio::test]
async fn elf_dwarf5_answers_match_the_truth() {
    check("elf-dwarf5").await;
}

#[tokio::test]
async fn elf_dwarf64_answers_match_the_truth() {
    check("elf-dwarf64").await;
}

#[tokio::test]
async fn fat_macho_dsym_answers_match_the_truth_for_both_slices() {
    check("macho-fat").await;
}

#[tokio::test]
async fn pdb_answers_match_the_truth() {
    check("pdb").await;
}

#[tokio::test]
async fn breakpad_answers_match_the_truth() {
    check("breakpad").await;
}

#[test]
fn names_compare_on_what_both_readers_spell_alike() {
    assert_eq!(norm("int ns::leaf<3>(int)"), "ns::leaf<3>");
    assert_eq!(norm("ns::leaf<3>(int)"), "ns::leaf<3>");
    assert_eq!(
        norm("ns::f(int)::$_1::operator()(int) const"),
        "ns::f(int)::$_1::operator()"
    );
    assert_eq!(
        norm("int ns::apply<ns::f(int)::'lambda0'(int)>(ns::f(int)::'lambda0'(int), int)"),
        norm("ns::apply<ns::f(int)::{lambda(int)#2}>(ns::f(int)::{lambda(int)#2}, int)")
    );
    assert_ne!(norm("ns::leaf<3>(int)"), norm("ns::leaf<4>(int)"));
}
