//! Files past 4 GiB (issue 45): a real debug file from Debian's gcc, moved apart so that
//! its section headers and a section's contents sit past the 32-bit offsets, placed by
//! `omnisym sort`, served from a filesystem source through the download cache, and
//! asked for over HTTP by `/proxy` and debuginfod, whole and in ranges. The file is
//! sparse: every copy of it (the sorted tree, the cache) must stay sparse too, so the
//! test writes a few MiB to disk, not GiBs.

use crate::common;

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use axum::http::{StatusCode, header};
use common::{Server, client, files_under, unified_path};

/// Where the moved section's contents start: past `u32::MAX`.
const FAR: u64 = (4 << 30) + (1 << 20);
/// What one copy of the file may take on disk; its size is over 4 GiB.
const MAX_DISK: u64 = 16 << 20;

const PROGRAM: &str = "__attribute__((noinline)) int work(int x) { return x * 3 + 1; }\n\
                       int main(int argc, char **argv) { (void)argv; return work(argc); }\n";

struct BigDebugFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
    build_id: String,
    /// The contents of `.comment`, which the file keeps at [`FAR`].
    comment: Vec<u8>,
    size: u64,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap()).into()
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// A gcc debug companion (`objcopy --only-keep-debug`) whose `.comment` contents and
/// section header table are moved past 4 GiB, with a hole in between: every reader
/// must follow 64-bit offsets (`e_shoff`, `sh_offset`) to find its sections.
fn big_debug_file() -> BigDebugFile {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("prog.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let full = dir.path().join("prog");
    run(Command::new("gcc")
        .args(["-g", "-O1", "-Wl,--build-id=sha1", "-o"])
        .arg(&full)
        .arg(&source));
    let debug = dir.path().join("prog.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    let mut bytes = std::fs::read(&debug).unwrap();
    let build_id = {
        let object = symbolic::debuginfo::Object::parse(&bytes).unwrap();
        object.code_id().unwrap().as_str().to_owned()
    };

    // ELF64, little-endian: gcc's output on this machine.
    assert_eq!(&bytes[..6], b"\x7fELF\x02\x01");
    let shoff = u64_at(&bytes, 0x28) as usize;
    let (entsize, count, names) = (
        u16_at(&bytes, 0x3a),
        u16_at(&bytes, 0x3c),
        u16_at(&bytes, 0x3e),
    );
    let mut table = bytes[shoff..shoff + entsize * count].to_vec();
    let entry = |i: usize| i * entsize;
    let strtab = u64_at(&table, entry(names) + 0x18) as usize;
    let comment_index = (0..count)
        .find(|&i| {
            let name =
                strtab + u32::from_le_bytes(table[entry(i)..][..4].try_into().unwrap()) as usize;
            bytes[name..].starts_with(b".comment\0")
        })
        .expect("gcc writes a .comment section");
    let at = u64_at(&table, entry(comment_index) + 0x18) as usize;
    let len = u64_at(&table, entry(comment_index) + 0x20) as usize;
    let comment = bytes[at..at + len].to_vec();
    assert!(!comment.is_empty() && comment.iter().any(|&b| b != 0));
    table[entry(comment_index) + 0x18..][..8].copy_from_slice(&FAR.to_le_bytes());
    let table_at = (FAR + len as u64).next_multiple_of(4096);
    bytes[0x28..0x30].copy_from_slice(&table_at.to_le_bytes());

    let path = dir.path().join("big.debug");
    let file = std::fs::File::create(&path).unwrap();
    file.write_all_at(&bytes, 0).unwrap();
    file.write_all_at(&comment, FAR).unwrap();
    file.write_all_at(&table, table_at).unwrap();
    let size = table_at + table.len() as u64;
    assert_eq!(file.metadata().unwrap().len(), size);
    assert_sparse(&path, size);
    BigDebugFile {
        _dir: dir,
        path,
        build_id,
        comment,
        size,
    }
}

/// `path` is `size` bytes long and holds at most [`MAX_DISK`] of them on disk.
fn assert_sparse(path: &Path, size: u64) {
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.len(), size, "{}", path.display());
    let on_disk = meta.blocks() * 512;
    assert!(
        on_disk <= MAX_DISK,
        "{} takes {on_disk} bytes on disk",
        path.display()
    );
}

/// `omnisym sort` places the file whole, keeps it sparse; the server serves it through
/// its download cache (which keeps its size, sparse) to `/proxy` and debuginfod, with
/// the right `Content-Length`, and a `Range` past 4 GiB gets the bytes that are there.
#[tokio::test(flavor = "multi_thread")]
async fn a_debug_file_past_4_gib_is_sorted_cached_and_served_in_ranges() {
    let big = big_debug_file();
    let (first, last) = (FAR, FAR + big.comment.len() as u64 - 1);

    let root = tempfile::tempdir().unwrap();
    run(Command::new(common::binary())
        .arg("sort")
        .arg("-o")
        .arg(root.path())
        .arg(&big.path)
        .env_remove("RUST_LOG"));
    let sorted = root.path().join(unified_path(&big.build_id, "debuginfo"));
    assert_sparse(&sorted, big.size);
    let mut moved = vec![0; big.comment.len()];
    std::fs::File::open(&sorted)
        .unwrap()
        .read_exact_at(&mut moved, FAR)
        .unwrap();
    assert_eq!(moved, big.comment);

    let server = Server::start(&format!(
        "sources:\n  - {{id: sorted, type: filesystem, path: \"{}\", layout: {{type: unified}}}}\n",
        root.path().display()
    ));
    let id = &big.build_id;
    for path in [
        format!("/buildid/{id}/debuginfo"),
        format!("/proxy/_.debug/elf-buildid-sym-{id}/_.debug"),
    ] {
        let url = format!("{}{path}", server.url);
        let head = client().head(&url).send().await.unwrap();
        assert_eq!(head.status(), StatusCode::OK, "{path}: {}", server.log());
        assert_eq!(head.headers()[header::CONTENT_LENGTH], big.size.to_string());
        assert_eq!(head.headers()[header::ACCEPT_RANGES], "bytes");

        let part = client()
            .get(&url)
            .header(header::RANGE, format!("bytes={first}-{last}"))
            .send()
            .await
            .unwrap();
        assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT, "{path}");
        assert_eq!(
            part.headers()[header::CONTENT_RANGE],
            format!("bytes {first}-{last}/{}", big.size)
        );
        assert_eq!(
            part.headers()[header::CONTENT_LENGTH],
            big.comment.len().to_string()
        );
        assert_eq!(part.bytes().await.unwrap(), big.comment, "{path}");

        // The last bytes: the section header table, past 4 GiB too.
        let tail = client()
            .get(&url)
            .header(header::RANGE, "bytes=-64")
            .send()
            .await
            .unwrap();
        assert_eq!(tail.status(), StatusCode::PARTIAL_CONTENT);
        let mut expected = vec![0; 64];
        std::fs::File::open(&big.path)
            .unwrap()
            .read_exact_at(&mut expected, big.size - 64)
            .unwrap();
        assert_eq!(tail.bytes().await.unwrap(), expected);

        let past = client()
            .get(&url)
            .header(header::RANGE, format!("bytes={}-", big.size))
            .send()
            .await
            .unwrap();
        assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(
            past.headers()[header::CONTENT_RANGE],
            format!("bytes */{}", big.size)
        );
    }

    // A section found by its 64-bit offset, served as it is stored.
    let section = client()
        .get(format!("{}/buildid/{id}/section/.comment", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(section.status(), StatusCode::OK);
    assert_eq!(section.bytes().await.unwrap(), big.comment);

    // The download cache took the whole file and kept it sparse.
    let cached: Vec<PathBuf> = files_under(&server.cache_dir)
        .into_iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == big.size))
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_sparse(&cached[0], big.size);
}

/// The two thin Mach-O executables of the fat64 fixture (fixtures/large_files/build.sh)
/// and their UUIDs, the code ids symstore keys name them by.
fn fat64_fixture() -> (PathBuf, Vec<(String, Vec<u8>)>) {
    let dir = common::fixtures().join("large_files/fat64");
    let thin = ["prog-x86_64", "prog-arm64"].map(|name| {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let code_id = symbolic::debuginfo::Object::parse(&bytes)
            .unwrap()
            .code_id()
            .unwrap()
            .as_str()
            .to_owned();
        (code_id, bytes)
    });
    (dir.join("prog"), thin.into())
}

/// A fat Mach-O in the 64-bit layout (what a universal dSYM past 4 GiB must be, and
/// what symbolic does not read): `omnisym sort` places each slice, and a server whose
/// source holds the fat file itself serves each module's own slice at `/proxy`.
#[tokio::test(flavor = "multi_thread")]
async fn each_slice_of_a_fat64_mach_o_is_sorted_and_served() {
    let (fat, thin) = fat64_fixture();
    let sorted = tempfile::tempdir().unwrap();
    run(Command::new(common::binary())
        .arg("sort")
        .arg("-o")
        .arg(sorted.path())
        .arg(&fat)
        .env_remove("RUST_LOG"));
    let placed: Vec<PathBuf> = files_under(sorted.path())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "executable"))
        .collect();
    assert_eq!(placed.len(), 2, "{placed:?}");
    for (_, bytes) in &thin {
        assert!(
            placed.iter().any(|p| std::fs::read(p).unwrap() == *bytes),
            "a slice is not placed as itself"
        );
    }

    // The fat file where each thin one was: the server must cut out the module's slice.
    for path in &placed {
        std::fs::copy(&fat, path).unwrap();
    }
    let server = Server::start(&format!(
        "sources:\n  - {{id: sorted, type: filesystem, path: \"{}\", layout: {{type: unified}}}}\n",
        sorted.path().display()
    ));
    for (uuid, bytes) in &thin {
        let response = client()
            .get(format!("{}/proxy/prog/mach-uuid-{uuid}/prog", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{uuid}: {}",
            server.log()
        );
        assert_eq!(response.bytes().await.unwrap(), *bytes, "{uuid}");
    }
}
