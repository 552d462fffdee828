//! The differential test of the Breakpad reader on texts the fixtures do not have: what
//! `scripts/gen-large-minidump.py` writes, hand-written hostile texts, random texts of
//! overlapping and unsorted records, and damaged ones. At every address a record names
//! (and the bytes around it), the reader answers as the SymCache of the whole text does,
//! or it refused to open; where it refuses is counted and checked.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use symbolic::common::ByteView;
use symbolic::debuginfo::FileFormat;
use symbolic::symcache::{SymCache, SymCacheConverter};

use super::differential::Rng;
use super::{open, symcache_answer};
use crate::lookup::{ObjectHandle, ObjectLimits};

/// Every address a record of `text` starts or ends at, the bytes on either side and the
/// middle of each range (gaps between records are the bytes past ends and before
/// starts), and addresses below, far above and past 4 GiB. Read loosely: damaged text
/// still yields the numbers it has.
pub(super) fn breakpad_addresses(text: &[u8]) -> Vec<u64> {
    let mut ranges = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let hex = |i: usize| fields.get(i).and_then(|f| u64::from_str_radix(f, 16).ok());
        let skip = usize::from(fields.get(1) == Some(&"m"));
        match fields.first().copied() {
            Some("STACK") => break,
            Some("FUNC") => ranges.extend(hex(1 + skip).zip(hex(2 + skip))),
            Some("PUBLIC") => ranges.extend(hex(1 + skip).map(|a| (a, 1))),
            Some("INLINE") => {
                let mut i = 5;
                while let (Some(address), Some(size)) = (hex(i), hex(i + 1)) {
                    ranges.push((address, size));
                    i += 2;
                }
            }
            Some(_) if fields.len() == 4 => ranges.extend(hex(0).zip(hex(1))),
            _ => {}
        }
    }
    let mut addrs = BTreeSet::from([0, 1, 0xffff_ffff, 0x1_0000_0000, u64::MAX]);
    let mut highest = 0u64;
    for (address, size) in ranges {
        let end = address.saturating_add(size);
        highest = highest.max(end);
        for a in [address, address + size / 2, end] {
            addrs.extend([a.saturating_sub(1), a, a.saturating_add(1)]);
        }
    }
    addrs.extend([highest + 0x100, highest + 0x10_0000]);
    addrs.into_iter().collect()
}

pub(super) enum Outcome {
    /// The text is no Breakpad object.
    NotBreakpad,
    /// The reader refused it; `converts` says whether the whole conversion succeeds.
    Refused { converts: bool },
    /// Every address was answered as the SymCache answers it.
    Equal { addresses: usize },
}

/// Opens the reader on `text` and compares it with the SymCache of the whole text at
/// every address of [`breakpad_addresses`]. A reader that opens on a text whose
/// conversion fails, or a panic, is a difference too.
pub(super) fn compare(name: &str, text: &[u8]) -> Result<Outcome, Vec<String>> {
    let Ok(handle) =
        ObjectHandle::from_bytes(ByteView::from_vec(text.to_vec()), ObjectLimits::default())
    else {
        return Ok(Outcome::NotBreakpad);
    };
    if handle.file_format() != FileFormat::Breakpad {
        return Ok(Outcome::NotBreakpad);
    }
    let handle = Arc::new(handle);
    let full = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut converter = SymCacheConverter::new();
        converter.process_object(handle.object()?).ok()?;
        let mut buf = Vec::new();
        converter.serialize(&mut buf).ok()?;
        Some(buf)
    }))
    .ok()
    .flatten();
    let reader = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        open(&handle, &std::env::temp_dir())
    }))
    .map_err(|_| vec![format!("{name}: opening panicked")])?;
    let Some(reader) = reader else {
        return Ok(Outcome::Refused {
            converts: full.is_some(),
        });
    };
    let Some(full) = full else {
        return Err(vec![format!("{name}: opened, but the conversion fails")]);
    };
    let symcache = SymCache::parse(&full).unwrap();
    let addrs = breakpad_addresses(text);
    let mut differences = Vec::new();
    for &addr in &addrs {
        let lazy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.lookup(addr)))
            .map_err(|_| vec![format!("{name}: lookup at {addr:#x} panicked")])?;
        let expected = symcache_answer(&symcache, addr);
        if lazy != expected && differences.len() < 10 {
            differences.push(format!(
                "{name} at {addr:#x}:\n  symcache: {expected:?}\n  lazy:     {lazy:?}"
            ));
        }
    }
    if differences.is_empty() {
        Ok(Outcome::Equal {
            addresses: addrs.len(),
        })
    } else {
        Err(differences)
    }
}

#[test]
fn generated_large_crash_symbols_answer_as_the_symcache_does() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for seed in [1, 7, 42] {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gen-large-minidump.py"))
            .arg(dir.path())
            .args([
                "--seed",
                &seed.to_string(),
                "--modules",
                "3",
                "--threads",
                "2",
            ])
            .args(["--large", "1", "--large-mib", "1", "--small-kib", "50"])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("python3 runs");
        assert!(status.success());
        let mut stack = vec![dir.path().join("symbols")];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let text = std::fs::read(&path).unwrap();
            let name = format!("seed {seed} {}", path.display());
            match compare(&name, &text) {
                Ok(Outcome::Equal { addresses }) => {
                    eprintln!("{name}: {} bytes, {addresses} addresses equal", text.len());
                    checked += 1;
                }
                Ok(_) => failures.push(format!("{name}: refused")),
                Err(differences) => failures.extend(differences),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, 9, "three modules per seed");
}

const HEAD: &str = "MODULE Linux x86_64 D96FDC6C16686D8AE479531B3D99327B0 crash\n\
                    INFO CODE_ID 6CDC6FD968168A6DE479531B3D99327BCA9DC649\n\
                    FILE 0 /src/a.c\n\
                    FILE 1 /src/b.h\n\
                    FILE 2 c.cpp\n\
                    INLINE_ORIGIN 0 inl_zero\n\
                    INLINE_ORIGIN 1 inl_one\n\
                    INLINE_ORIGIN 2 inl_two\n";

/// Hand-written texts symbolic converts, each with records a whole-file conversion
/// treats in some special way; and whether the reader must refuse it.
fn hostile() -> Vec<(&'static str, String, bool)> {
    let read = |name, body: &str| (name, format!("{HEAD}{body}"), false);
    let refused = |name, body: &str| (name, format!("{HEAD}{body}"), true);
    vec![
        read(
            "overlapping",
            "FUNC 1000 40 0 f\n1000 20 1 0\n1020 20 2 0\n\
             FUNC 1020 40 0 g\n1020 10 3 1\n1030 30 4 1\n",
        ),
        read(
            "nested",
            "FUNC 1000 100 0 outer\n1000 100 1 0\nFUNC 1010 10 0 inner\n1010 10 2 1\n\
             FUNC 1080 8 0 inner2\n",
        ),
        read(
            "size 0",
            "FUNC 1000 0 0 empty\n1000 10 1 0\nFUNC 1010 10 0 f\n1010 10 2 0\n\
             FUNC 1018 0 0 empty2\n",
        ),
        read(
            "public inside a func",
            "FUNC 1000 40 0 f\n1000 40 1 0\nPUBLIC 1010 0 p\nPUBLIC 1000 0 at_start\n\
             PUBLIC 1040 0 at_end\n",
        ),
        read(
            "publics in gaps",
            "PUBLIC 800 0 before\nFUNC 1000 10 0 f\n1000 10 1 0\nPUBLIC 1020 0 gap\n\
             FUNC 1040 10 0 g\n1040 8 2 0\nPUBLIC 1060 0 after\n",
        ),
        read(
            "duplicate addresses",
            "FUNC 1000 20 0 f\n1000 20 1 0\nFUNC 1000 10 0 f2\n1000 10 9 1\n\
             FUNC 1020 10 0 next\n1020 10 2 0\nPUBLIC 1000 0 p1\nPUBLIC 1000 0 p2\n\
             PUBLIC 1020 0 p3\nPUBLIC 1030 0 p4\nPUBLIC 1030 0 p5\n",
        ),
        read(
            "lines outside their func",
            "FUNC 1000 20 0 f\n0f00 10 1 0\n1000 8 2 0\n1018 20 3 0\n1040 10 4 0\n\
             FUNC 1030 10 0 g\n1030 10 5 1\nFUNC 1100 10 0 h\n1100 40 6 0\n\
             FUNC 1120 10 0 i\n1120 4 7 0\n",
        ),
        read(
            "missing ids",
            "FUNC 1000 40 0 f\nINLINE 0 5 77 99 1008 10\nINLINE 0 6 0 1 1020 8\n\
             1000 8 1 42\n1008 10 2 0\n1018 28 3 0\n",
        ),
        read(
            "inline depths",
            "FUNC 1000 80 0 f\nINLINE 0 10 0 0 1000 40 1050 20\nINLINE 1 11 1 1 1004 10 1030 20\n\
             INLINE 2 12 2 2 1006 4 1038 4\nINLINE 3 13 0 0 1007 1\nINLINE 2 14 1 1 1070 4\n\
             INLINE 0 15 1 2 1038 10\nINLINE 5 1 0 0 1060 4\n\
             1000 6 1 0\n1006 2 2 1\n1008 30 3 2\n1038 48 4 0\n",
        ),
        read(
            "inlinee past its func",
            "FUNC 1000 20 0 f\nINLINE 0 3 0 0 1010 40\n1000 10 1 0\n1010 10 2 1\n1020 30 3 1\n\
             FUNC 1030 10 0 g\n1030 10 4 0\nFUNC 1060 10 0 h\n1060 10 5 0\n",
        ),
        read(
            "multiple",
            "FUNC m 1000 10 0 folded\n1000 10 1 0\nPUBLIC m 1010 0 pub_folded\n\
             FUNC m 1020 8 4 \nPUBLIC m 1030 0\n",
        ),
        read(
            "unsorted",
            "FUNC 1100 10 0 d\n1100 10 4 0\nFUNC 1000 40 0 a\n1000 40 1 0\n\
             FUNC 1030 30 0 c\n1030 30 3 1\nFUNC 1010 10 0 b\n1010 10 2 2\n\
             PUBLIC 1200 0 z\nPUBLIC 1040 0 y\nPUBLIC 1000 0 x\n",
        ),
        (
            "duplicate file and origin ids",
            HEAD.replace(
                "FILE 2 c.cpp\n",
                "FILE 2 c.cpp\nFILE 0 /other/a.c\nINFO x\n",
            )
            .replace(
                "INLINE_ORIGIN 2 inl_two\n",
                "INLINE_ORIGIN 2 inl_two\nINLINE_ORIGIN 0 renamed\n",
            ) + "FUNC 1000 20 0 f\nINLINE 0 1 0 0 1008 8\n1000 8 1 0\n1008 8 2 0\n1010 10 3 2\n",
            false,
        ),
        read(
            "funcs after stack records",
            "FUNC 1000 10 0 f\n1000 10 1 0\nSTACK CFI INIT 1000 10 .cfa: $rsp 8 +\n\
             FUNC 1010 10 0 ignored\n1010 10 2 0\nPUBLIC 1020 0 ignored_too\n",
        ),
        read(
            "empty and negative lines",
            "FUNC 1000 20 0 f\n1000 0 1 0\n1000 8 -5 0\n1008 8 0 1\n1010 10 3 0\n",
        ),
        read(
            "no lines",
            "FUNC 1000 10 0 f\nFUNC 1010 10 0 g\nINLINE 0 1 0 0 1014 4\nPUBLIC 1020 0 p\n",
        ),
        read(
            "publics before funcs",
            "PUBLIC 1000 0 p\nINLINE_ORIGIN 3 late_but_before_funcs\n\
             FUNC 1000 10 0 f\nINLINE 0 1 0 3 1000 8\n1000 10 1 0\n",
        ),
        read(
            "near 4 GiB",
            "FUNC fffff000 fff 0 high\nfffff000 fff 1 0\nPUBLIC ffffffff 0 last\n",
        ),
        read(
            "line records reach the next func",
            "FUNC 1040 10 0 later\n1040 10 1 0\nFUNC 1000 10 0 early\n1000 50 2 0\n\
             FUNC 1080 10 0 last\n1060 30 3 0\n",
        ),
        refused("no func", "PUBLIC 1000 0 p\nPUBLIC 1010 0 q\n"),
        refused(
            "origin after a func",
            "FUNC 1000 10 0 f\n1000 10 1 0\nINLINE_ORIGIN 9 late\n",
        ),
        refused(
            "file after a func",
            "FUNC 1000 10 0 f\n1000 10 1 0\nFILE 9 late.c\n",
        ),
        refused("crlf", "FUNC 1000 10 0 f\r\n1000 10 1 0\r\n"),
        refused("empty line", "FUNC 1000 10 0 f\n\n1000 10 1 0\n"),
        refused("past 4 GiB", "FUNC 100000000 10 0 f\n100000000 10 1 0\n"),
        refused("tab", "FUNC 1000 10 0 f\n1000\t10 1 0\n"),
        refused("unknown record", "FUNC 1000 10 0 f\n1000 10 1 0\nEXTRA 1\n"),
    ]
}

#[test]
fn hostile_breakpad_texts_answer_as_the_symcache_does_or_are_refused() {
    let mut failures = Vec::new();
    let mut refusals = 0;
    let cases = hostile();
    for (name, text, must_refuse) in &cases {
        match compare(name, text.as_bytes()) {
            Ok(Outcome::Equal { .. }) if !must_refuse => {}
            Ok(Outcome::Refused { converts }) if *must_refuse => {
                refusals += 1;
                eprintln!("{name}: refused (the whole text converts: {converts})");
            }
            Ok(Outcome::Equal { .. }) => failures.push(format!("{name}: read, not refused")),
            Ok(Outcome::Refused { .. }) => failures.push(format!("{name}: refused")),
            Ok(Outcome::NotBreakpad) => failures.push(format!("{name}: not Breakpad")),
            Err(differences) => failures.extend(differences),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(refusals, 8);
}

/// A random text of a few FUNC blocks and PUBLIC records crowded into a small range:
/// overlapping, nested, unsorted, duplicated, with lines and inlinees that stray out of
/// their function and ids that name nothing.
/// Also says whether any FUNC has a size (else the reader has nothing to read).
fn random_text(rng: &mut Rng) -> (String, bool) {
    let mut records = Vec::new();
    let mut sized = false;
    let base = 0x1000;
    for _ in 0..1 + rng.below(8) {
        let start = base + rng.below(0x100);
        let size = if rng.below(8) == 0 {
            0
        } else {
            rng.below(0x60)
        };
        sized |= size > 0;
        let mut block = format!(
            "FUNC {}{start:x} {size:x} 0 f{}\n",
            if rng.below(4) == 0 { "m " } else { "" },
            rng.below(6)
        );
        for _ in 0..rng.below(4) {
            let depth = rng.below(4);
            let mut line = format!(
                "INLINE {depth} {} {} {}",
                rng.below(30),
                rng.below(4),
                rng.below(4)
            );
            for _ in 0..1 + rng.below(2) {
                let at = start + rng.below(size + 0x10).saturating_sub(4);
                line += &format!(" {at:x} {:x}", rng.below(0x30));
            }
            block += &line;
            block.push('\n');
        }
        let mut at = start.saturating_sub(rng.below(2) * 8);
        for _ in 0..rng.below(8) {
            let len = rng.below(0x20);
            let line = if rng.below(6) == 0 {
                format!("-{}", rng.below(5))
            } else {
                rng.below(60).to_string()
            };
            block += &format!("{at:x} {len:x} {line} {}\n", rng.below(4));
            at += rng.below(0x20);
        }
        records.push(block);
    }
    for _ in 0..rng.below(5) {
        records.push(format!(
            "PUBLIC {}{:x} 0 p{}\n",
            if rng.below(4) == 0 { "m " } else { "" },
            base + rng.below(0x140),
            rng.below(4)
        ));
    }
    // Sorted by address most of the time, as dump_syms writes; shuffled otherwise.
    if rng.below(3) == 0 {
        for i in (1..records.len()).rev() {
            records.swap(i, rng.below(i as u64 + 1) as usize);
        }
    } else {
        records.sort_by_key(|r| {
            r.split_whitespace()
                .find_map(|f| u64::from_str_radix(f, 16).ok().filter(|&a| a >= 0x100))
        });
    }
    (format!("{HEAD}{}", records.concat()), sized)
}

#[test]
fn random_crowded_texts_answer_as_the_symcache_does() {
    let mut rng = Rng(0x5eed_b4ea_d000_0001);
    let mut failures = Vec::new();
    let mut equal = 0;
    for round in 0..400 {
        let (text, sized) = random_text(&mut rng);
        match compare(&format!("round {round}"), text.as_bytes()) {
            Ok(Outcome::Equal { .. }) => equal += 1,
            // Only when every FUNC has size 0, so the reader has nothing to read.
            Ok(Outcome::Refused { .. }) => assert!(!sized, "round {round} refused:\n{text}"),
            Ok(Outcome::NotBreakpad) => panic!("round {round}: not Breakpad"),
            Err(differences) => {
                failures.extend(differences);
                failures.push(text);
            }
        }
        if failures.len() > 20 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(equal > 350, "only {equal} texts read");
}

/// Damaged texts: bytes overwritten, lines cut, dropped, doubled or swapped, the text
/// truncated. No panic; the reader answers as the SymCache does or refuses, and never
/// opens a text whose conversion fails.
#[test]
fn damaged_breakpad_texts_never_panic_or_answer_differently() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut originals: Vec<Vec<u8>> = [
        "native/breakpad/crash.sym",
        "native/breakpad/crash_pe.sym",
        "mozilla/libinline.so.sym",
        "minidump/fp/crash.sym",
    ]
    .iter()
    .map(|p| std::fs::read(root.join(p)).unwrap())
    .collect();
    let hostile = hostile();
    originals.extend(hostile.iter().map(|(_, text, _)| text.as_bytes().to_vec()));
    let mut rng = Rng(0xdead_beef_0bad_cafe);
    let (mut equal, mut refused, mut failures) = (0, 0, Vec::new());
    for round in 0..600 {
        let original = &originals[round % originals.len()];
        let mut text = original.clone();
        // Past the MODULE line, which decides whether the text is Breakpad at all.
        let head = memchr::memchr(b'\n', &text).map_or(0, |n| n + 1);
        for _ in 0..1 + rng.below(3) {
            let body = text.len().saturating_sub(head).max(1) as u64;
            let at = head + rng.below(body) as usize;
            let lines: Vec<&[u8]> = text[head..].split_inclusive(|&b| b == b'\n').collect();
            if lines.is_empty() {
                break;
            }
            let pick = rng.below(lines.len() as u64) as usize;
            let other = rng.below(lines.len() as u64) as usize;
            text = match rng.below(7) {
                0 if at < text.len() => {
                    let mut t = text.clone();
                    let bytes = b"0123456789abcdef -\nFUNCm\r\xff";
                    t[at] = bytes[rng.below(bytes.len() as u64) as usize];
                    t
                }
                1 => text[..at.min(text.len())].to_vec(),
                2..=5 => {
                    let mut lines = lines.iter().map(|l| l.to_vec()).collect::<Vec<_>>();
                    match rng.below(4) {
                        0 => drop(lines.remove(pick)),
                        1 => lines.insert(other, lines[pick].clone()),
                        2 => lines.swap(pick, other),
                        _ => {
                            let line = &mut lines[pick];
                            let cut = rng.below(line.len() as u64) as usize;
                            line.truncate(cut);
                            line.push(b'\n');
                        }
                    }
                    [&text[..head], &lines.concat()].concat()
                }
                _ => {
                    let mut t = text.clone();
                    if at < t.len() {
                        t.insert(at, b"0123456789abcdef -"[rng.below(18) as usize]);
                    }
                    t
                }
            };
        }
        match compare(&format!("damaged {round}"), &text) {
            Ok(Outcome::Equal { .. }) => equal += 1,
            Ok(Outcome::Refused { .. }) => refused += 1,
            Ok(Outcome::NotBreakpad) => {}
            Err(differences) => {
                failures.extend(differences);
                failures.push(String::from_utf8_lossy(&text).into_owned());
            }
        }
        if failures.len() > 20 {
            break;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{equal} damaged texts read and equal, {refused} refused");
    assert!(
        equal > 150 && refused > 100,
        "{equal} read, {refused} refused"
    );
}
