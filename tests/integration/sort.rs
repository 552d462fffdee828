//! `omnisym sort` end to end: the built binary sorts the project's own fixtures (native,
//! lazy, mozilla, minidump, jvm, js, native-srcsrv, native-embedded, with some of them
//! inside a zip made here) into every layout, and the real server, given a filesystem
//! source of that layout over the sorted tree, finds and symbolicates with what it wrote.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, assert_elf_symbolicated, elf_request, fixtures, object, unified_path};
use serde_json::{Value, json};

const LAYOUTS: &[&str] = &[
    "unified",
    "native",
    "symstore",
    "symstore_index2",
    "ssqp",
    "debuginfod",
    "slashsymbols",
];

struct Sorted {
    stdout: String,
    stderr: String,
}

fn sort<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Sorted {
    let (status, sorted) = sort_any(args);
    assert!(status.success(), "{}\n{}", sorted.stdout, sorted.stderr);
    sorted
}

/// A zip of the native ELF and PE fixtures (and a mapping), which are then sorted only
/// from it.
fn zip_of_natives(dir: &Path) -> PathBuf {
    let path = dir.join("natives.zip");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    for rel in [
        "native/elf/crash",
        "native/elf/crash.debug",
        "native/elf/crash.stripped",
        "native/pe/crash.exe",
        "native/pe/crash.pdb",
        "jvm/inline.txt",
    ] {
        zip.start_file(format!("some/folder/{rel}"), options)
            .unwrap();
        zip.write_all(&std::fs::read(fixtures().join(rel)).unwrap())
            .unwrap();
    }
    zip.finish().unwrap();
    path
}

fn inputs(zip: &Path) -> Vec<PathBuf> {
    let mut inputs: Vec<PathBuf> = [
        "native/breakpad",
        "native/corrupt",
        "lazy",
        "mozilla",
        "minidump",
        "jvm",
        "js",
        "native-srcsrv",
        "native-embedded",
    ]
    .iter()
    .map(|rel| fixtures().join(rel))
    .collect();
    inputs.push(zip.to_owned());
    inputs
}

fn source(root: &Path, layout: &str) -> Value {
    json!([{"type": "filesystem", "id": format!("sorted-{layout}"), "path": root,
            "layout": {"type": layout}}])
}

/// The ELF fixture's module of `elf_request`, as a lookup sees it.
fn elf_object_id() -> omnisym::sources::ObjectId {
    let module = common::elf_module();
    let text = |key: &str| module[key].as_str().unwrap().to_owned();
    omnisym::sources::ObjectId {
        debug_id: Some(text("debug_id").parse().unwrap()),
        code_id: Some(text("code_id").parse().unwrap()),
        debug_file: Some(text("debug_file")),
        code_file: Some(text("code_file")),
        object_type: omnisym::sources::ObjectType::Elf,
        ..Default::default()
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The uuid sentry-cli gives a mapping (and the proguard crate computes).
fn mapping_uuid(name: &str) -> String {
    let data = std::fs::read(fixtures().join("jvm").join(name)).unwrap();
    proguard::ProguardMapping::new(&data).uuid().to_string()
}

#[tokio::test]
async fn sorted_fixtures_are_served_in_every_layout() {
    let work = tempfile::tempdir().unwrap();
    let zip = zip_of_natives(work.path());
    let server = Server::start("");
    let elf_code_id = object("elf")["code_id"].as_str().unwrap().to_owned();

    for layout in LAYOUTS {
        let out = work.path().join(layout);
        let mut args: Vec<std::ffi::OsString> = vec![
            "-I".into(),
            "--layout".into(),
            layout.into(),
            "-o".into(),
            out.clone().into(),
        ];
        if *layout == "unified" {
            args.extend(["-zz", "-p", "ios", "-b", "fixtures-1"].map(Into::into));
        }
        args.extend(inputs(&zip).into_iter().map(Into::into));
        let run = sort(&args);

        // The broken fixtures are reported and passed over; the stripped ELF has the
        // same id as the unstripped one, and only the layouts that name a file by its
        // name as well keep both.
        assert!(
            run.stderr.contains("error: ignored error") && run.stderr.contains("corrupt"),
            "{layout}: {}",
            run.stderr
        );
        let by_id_only = ["unified", "native", "debuginfod"].contains(layout);
        assert_eq!(
            run.stderr.contains("Skipping crash.stripped."),
            by_id_only,
            "{layout}: {}",
            run.stderr
        );
        assert!(run.stdout.contains("Done.\nSorted "), "{}", run.stdout);

        let root = if *layout == "unified" {
            out.join("ios")
        } else {
            out.clone()
        };
        let (status, answer) = server
            .post("/symbolicate", &elf_request(source(&root, layout)))
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_elf_symbolicated(&answer);
        // Found in the sorted tree, at the path the reader asked first: the layout's
        // first location for the first file type an ELF module is looked for as.
        let used = common::candidates(&answer)
            .into_iter()
            .find(|c| c["debug"]["status"] == "ok")
            .unwrap_or_else(|| panic!("{layout}: {answer:#}"));
        assert_eq!(used["source"], format!("sorted-{layout}"), "{used}");
        let config: omnisym::sources::SourceConfig =
            serde_json::from_value(source(&root, layout)[0].clone()).unwrap();
        let asked = omnisym::sources::source_locations(
            config.files(),
            omnisym::sources::FileType::from_object_type(omnisym::sources::ObjectType::Elf),
            &elf_object_id(),
        );
        assert_eq!(
            used["location"],
            root.join(&asked[0]).display().to_string(),
            "{layout}: {used}"
        );
    }

    // The unified tree: symsorter's shape, compressed with -zz.
    let root = work.path().join("unified/ios");
    let debug = root.join(unified_path(&elf_code_id, "debuginfo"));
    let compressed = std::fs::read(&debug).unwrap();
    assert_eq!(&compressed[..4], [0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
    assert!(
        zstd::decode_all(&compressed[..]).unwrap()
            == std::fs::read(fixtures().join("native/elf/crash.debug")).unwrap(),
        "the DWARF file beat the Breakpad file of the same id"
    );
    assert_eq!(
        read_json(&debug.with_extension("meta")),
        json!({"name": "crash.debug", "arch": "x86_64", "file_format": "elf"})
    );
    assert_eq!(
        read_json(&root.join(unified_path(&elf_code_id, "executable.meta"))),
        json!({"name": "crash", "arch": "x86_64", "file_format": "elf"})
    );
    assert!(debug.parent().unwrap().join("refs/fixtures-1").is_file());
    let index = read_json(&root.join("bundles/fixtures-1"));
    assert_eq!(index["name"], "fixtures-1");
    assert!(humantime::parse_rfc3339(index["timestamp"].as_str().unwrap()).is_ok());
    let ids: Vec<&str> = index["debug_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    let pe_id = object("pe")["breakpad_id"].as_str().unwrap().to_lowercase();
    for id in [elf_code_id.as_str(), pe_id.as_str()] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    assert_eq!(
        ids.iter().filter(|&&id| id == elf_code_id).count(),
        2,
        "the executable and the debug file, once each: {ids:?}"
    );
    // A mapping from the zip, and one from the folder, found by the JVM pipeline.
    for mapping in ["inline.txt", "rewrite.txt"] {
        let uuid = mapping_uuid(mapping);
        assert!(
            root.join(unified_path(&uuid, "proguard.meta")).is_file(),
            "{mapping}"
        );
    }
    let body = json!({
        "platform": "java",
        "sources": source(&root, "unified"),
        "modules": [{"type": "proguard", "uuid": mapping_uuid("inline.txt")},
                    {"type": "proguard", "uuid": mapping_uuid("rewrite.txt")}],
        "stacktraces": [],
        "classes": ["a.a"],
    });
    let (status, answer) = server.post("/symbolicate-jvm", &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["classes"]["a.a"], "org.birdwatch.app.SightingActivity",
        "{answer:#}"
    );
    // The source bundle fixtures land beside their debug files, by code id.
    for variant in ["fp", "nofp"] {
        let original = std::fs::read(
            fixtures()
                .join("minidump")
                .join(variant)
                .join("crash.src.zip"),
        )
        .unwrap();
        let code_id = symbolic::debuginfo::Object::parse(&original)
            .unwrap()
            .code_id()
            .unwrap()
            .to_string();
        let sorted = std::fs::read(root.join(unified_path(&code_id, "sourcebundle"))).unwrap();
        assert_eq!(
            zstd::decode_all(&sorted[..]).unwrap(),
            original,
            "{variant}"
        );
    }

    // Sorting again changes nothing: every file is a duplicate.
    let again = sort([
        "-q".into(),
        "-o".into(),
        work.path().join("unified"),
        "-p".into(),
        "ios".into(),
        fixtures().join("native-srcsrv"),
    ]);
    assert_eq!(again.stdout, "", "-q prints nothing");
    assert_eq!(again.stderr.matches("duplicate debug files").count(), 2);
}

/// A universal binary's slices are sorted one by one, and a `.dSYM` folder is a folder
/// like any other.
#[test]
fn fat_mach_o_slices_and_dsym_bundles() {
    let work = tempfile::tempdir().unwrap();
    let macho = std::fs::read(fixtures().join("lazy/macho/prog")).unwrap();
    let dwarf =
        std::fs::read(fixtures().join("lazy/macho/prog.dSYM/Contents/Resources/DWARF/prog"))
            .unwrap();
    // A fat header (big-endian) with two x86_64 slices at 4 KiB boundaries: the
    // executable and its dSYM's DWARF file.
    let align = |n: usize| n.div_ceil(4096) * 4096;
    let (first, second) = (4096, 4096 + align(macho.len()));
    let mut fat = Vec::new();
    fat.extend(0xcafe_babe_u32.to_be_bytes());
    fat.extend(2u32.to_be_bytes());
    for (offset, size) in [(first, macho.len()), (second, dwarf.len())] {
        for field in [0x0100_0007, 3, offset as u32, size as u32, 12] {
            fat.extend(u32::to_be_bytes(field));
        }
    }
    fat.resize(first, 0);
    fat.extend(&macho);
    fat.resize(second, 0);
    fat.extend(&dwarf);
    let input = work.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("prog"), &fat).unwrap();

    let out = work.path().join("out");
    let run = sort([Path::new("-o"), &out, &input]);
    assert!(
        run.stdout.starts_with("WARNING: No compression used."),
        "{}",
        run.stdout
    );
    let code_id = symbolic::debuginfo::Object::parse(&macho)
        .unwrap()
        .code_id()
        .unwrap()
        .to_string();
    let exe = out.join(unified_path(&code_id, "executable"));
    assert_eq!(std::fs::read(&exe).unwrap(), macho);
    assert_eq!(
        std::fs::read(out.join(unified_path(&code_id, "debuginfo"))).unwrap(),
        dwarf
    );
    assert_eq!(
        read_json(&exe.with_extension("meta")),
        json!({"name": "prog", "arch": "x86_64", "file_format": "macho"})
    );
    assert!(!out.join("bundles").exists(), "no bundle without -b");

    // The dSYM folder given as it is sorts its DWARF file (the Info.plist is no debug
    // file); natively, by the LLDB convention.
    let native = work.path().join("native");
    sort([
        "--layout".into(),
        "native".into(),
        "-o".into(),
        native.clone(),
        fixtures().join("lazy/macho/prog.dSYM"),
    ]);
    assert_eq!(code_id, "4c4c443f55553144a1474877f85f887f");
    let lldb = "4C4C/443F/5555/3144/A147/4877F85F887F";
    assert_eq!(std::fs::read(native.join(lldb)).unwrap(), dwarf);
    assert_eq!(common::files_under(&native).len(), 1, "no .meta, no refs");
}

/// `omnisym sort` with `args`, however it ends.
fn sort_any<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> (std::process::ExitStatus, Sorted) {
    let out = Command::new(env!("CARGO_BIN_EXE_omnisym"))
        .arg("sort")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let sorted = Sorted {
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    (out.status, sorted)
}

/// A zip at `path` of `entries` (name, bytes), deflated.
fn deflated_zip(path: &Path, entries: &[(&str, &[u8])]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap();
}

/// A zip entry that inflates far past what its size allows (80 MiB of zeros in some
/// 80 KB) is refused with the defaults, by name, before it fills the output's disk; the
/// rest of the zip and the other inputs are sorted all the same, into an output folder
/// that did not exist. The run fails unless `-I` says to go on.
#[test]
fn a_zip_bomb_is_skipped_and_named_and_the_rest_sorted() {
    let work = tempfile::tempdir().unwrap();
    let debug = std::fs::read(fixtures().join("native/elf/crash.debug")).unwrap();
    let zip = work.path().join("bomb.zip");
    let zeros = vec![0u8; 80 << 20];
    deflated_zip(&zip, &[("bomb", &zeros), ("dir/crash.debug", &debug)]);
    drop(zeros);
    let zip_size = std::fs::metadata(&zip).unwrap().len();
    assert!(zip_size < 1 << 20, "{zip_size}");
    let code_id = "6cdc6fd968168a6de479531b3d99327bca9dc649";
    let pdb = fixtures().join("native/pe/crash.pdb");

    let out = work.path().join("new/out");
    let (status, run) = sort_any([Path::new("-o"), &out, &zip, &pdb]);
    assert!(!status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "error: skipped zip entry bomb of {}: it claims more than 200 times",
            zip.display()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("(--max-entry-ratio)"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("1 zip entries were past the size limits"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains("Sorted 2 debug files"),
        "{}",
        run.stdout
    );
    assert_eq!(
        std::fs::read(out.join(unified_path(code_id, "debuginfo"))).unwrap(),
        debug
    );
    // Nothing of the bomb is left, nor anything it was unpacked to.
    let names: Vec<String> = common::files_under(&out)
        .iter()
        .map(|p| p.strip_prefix(&out).unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| n.len() < 60), "{names:?}");
    let written: u64 = common::files_under(&out)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(written < 10 << 20, "{written}");

    // With -I the run goes on and succeeds, and says what it skipped.
    let again = work.path().join("again");
    let run = sort([Path::new("-I"), Path::new("-o"), &again, &zip]);
    assert!(
        run.stderr.contains("skipped zip entry bomb"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout
            .contains("Skipped 1 zip entries past the size limits"),
        "{}",
        run.stdout
    );
    assert!(again.join(unified_path(code_id, "debuginfo")).is_file());

    // --max-entry-size refuses what is merely large.
    let small = work.path().join("small");
    let (status, run) = sort_any([
        Path::new("--max-entry-size"),
        Path::new("4KiB"),
        Path::new("-o"),
        &small,
        &zip,
    ]);
    assert!(!status.success());
    assert!(
        run.stderr.contains(&format!(
            "skipped zip entry crash.debug of {}: it claims more than 4096 bytes (--max-entry-size)",
            zip.display()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("2 zip entries"), "{}", run.stderr);
}

/// An entry larger than what is unpacked in memory (16 MiB) goes to a temporary file
/// beside the output, which is made first when it is not there yet.
#[test]
fn a_large_zip_entry_is_sorted_into_a_new_output_folder() {
    let work = tempfile::tempdir().unwrap();
    let mut debug = std::fs::read(fixtures().join("native/elf/crash.debug")).unwrap();
    debug.resize(17 << 20, 0);
    let zip = work.path().join("large.zip");
    deflated_zip(&zip, &[("crash.debug", &debug)]);
    let out = work.path().join("not/yet");
    let run = sort([Path::new("-o"), &out, &zip]);
    assert!(
        run.stdout.contains("Sorted 1 debug files"),
        "{}",
        run.stdout
    );
    let code_id = "6cdc6fd968168a6de479531b3d99327bca9dc649";
    assert_eq!(
        std::fs::read(out.join(unified_path(code_id, "debuginfo"))).unwrap(),
        debug
    );
}

/// `-b .` and `-b ..` would make `bundles/<id>` the folder itself or its parent: they
/// are refused before anything is sorted.
#[test]
fn bundle_ids_that_are_no_file_names_are_refused_first() {
    let work = tempfile::tempdir().unwrap();
    for id in [".", "..", "..."] {
        let out = work.path().join("out");
        let (status, run) = sort_any([
            Path::new("-b"),
            Path::new(id),
            Path::new("-o"),
            &out,
            &fixtures().join("native/elf"),
        ]);
        assert!(!status.success(), "{id}: {}", run.stdout);
        assert!(
            run.stderr.contains(&format!("Invalid bundle id {id:?}")),
            "{id}: {}",
            run.stderr
        );
        assert!(!out.exists(), "{id}: sorted before refusing");
    }
}

/// A Breakpad file naming `files` as its sources, with a module name and id of its own.
fn breakpad_naming(files: &[PathBuf]) -> String {
    let mut sym = String::from("MODULE Linux x86_64 3F2A6B8E4C1D4E0F9A7B6C5D4E3F2A1B0 srcs\n");
    sym.push_str("INFO CODE_ID 8E6B2A3F1D4C0F4E9A7B6C5D4E3F2A1B\n");
    for (i, file) in files.iter().enumerate() {
        sym.push_str(&format!("FILE {i} {}\n", file.display()));
    }
    sym.push_str("FUNC 1000 30 0 f\n");
    for i in 0..files.len() {
        sym.push_str(&format!("{:x} 10 {} {i}\n", 0x1000 + i * 0x10, i + 1));
    }
    sym
}

/// The paths of the files in the source bundle at `path`.
fn bundled_paths(path: &Path) -> Vec<String> {
    let data = std::fs::read(path).unwrap();
    let bundle = symbolic::debuginfo::sourcebundle::SourceBundle::parse(&data).unwrap();
    let session = bundle.debug_session().unwrap();
    let mut paths: Vec<String> = session
        .files()
        .map(|file| file.unwrap().abs_path_str())
        .collect();
    paths.sort();
    paths
}

/// `--with-sources` reads whatever file a debug file names, unless `--source-root`
/// limits it: then a symlink below the root that leads out of it, and a `..` that does,
/// are left out, and so is what is not a regular file.
#[cfg(unix)]
#[test]
fn with_sources_reads_only_below_the_source_roots() {
    let work = tempfile::tempdir().unwrap();
    let work_path = std::fs::canonicalize(work.path()).unwrap();
    let (root, outside) = (work_path.join("src"), work_path.join("secret"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("main.c"), "int main() { return 0; }\n").unwrap();
    std::fs::write(outside.join("key.pem"), "PRIVATE KEY\n").unwrap();
    std::os::unix::fs::symlink(outside.join("key.pem"), root.join("link.c")).unwrap();
    let named = [
        root.join("main.c"),
        root.join("link.c"),
        root.join("../secret/key.pem"),
        PathBuf::from("/dev/zero"),
    ];
    let input = work_path.join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("srcs.sym"), breakpad_naming(&named)).unwrap();
    // A source bundle made from a Breakpad file lands by its debug id.
    let bundle_at = |out: &Path| {
        out.join(unified_path(
            "3f2a6b8e4c1d4e0f9a7b6c5d4e3f2a1b",
            "sourcebundle",
        ))
    };

    // Without roots, any file it names: what the docs warn of.
    let open = work_path.join("open");
    sort([Path::new("--with-sources"), Path::new("-o"), &open, &input]);
    let everything = bundled_paths(&bundle_at(&open));
    assert!(
        everything.iter().any(|p| p.ends_with("key.pem")),
        "{everything:?}"
    );
    assert!(
        !everything.iter().any(|p| p == "/dev/zero"),
        "{everything:?}"
    );

    let limited = work_path.join("limited");
    let run = sort([
        Path::new("--with-sources"),
        Path::new("--source-root"),
        &root,
        Path::new("-o"),
        &limited,
        &input,
    ]);
    assert_eq!(
        bundled_paths(&bundle_at(&limited)),
        [root.join("main.c").to_string_lossy()],
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "Skipping source outside --source-root: {}",
            root.join("link.c").display()
        )),
        "{}",
        run.stdout
    );

    // A root that is not there is an error, not a root that admits nothing.
    let (status, run) = sort_any([
        Path::new("--with-sources"),
        Path::new("--source-root"),
        &work_path.join("missing"),
        Path::new("-o"),
        &limited,
        &input,
    ]);
    assert!(!status.success());
    assert!(run.stderr.contains("--source-root"), "{}", run.stderr);
}
