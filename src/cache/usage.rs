//! How much of `cache_dir` each cache kind takes, as the console shows it next to the
//! disk budget (`caches.max_disk_size`). A read-only walk that never follows links and
//! stops after a bounded number of entries, since a large cache holds millions of files;
//! callers keep its result for a while rather than walking per request.

use std::path::{Component, Path};
use std::time::SystemTime;

use serde::Serialize;

use super::CacheKind;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindUsage {
    pub kind: &'static str,
    pub files: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DiskUsage {
    /// Every kind that has a directory, in the order of `kinds`.
    pub kinds: Vec<KindUsage>,
    /// All files under `cache_dir`: the kinds, crash files waiting, uploads stored there.
    pub used_bytes: u64,
    pub measured: SystemTime,
    /// False when the walk stopped at its entry limit: the sums are then lower bounds.
    pub complete: bool,
}

/// Walks `cache_dir`, looking at no more than `max_entries` directory entries.
pub fn measure(cache_dir: &Path, kinds: &[CacheKind], max_entries: u64) -> DiskUsage {
    let mut usage: Vec<KindUsage> = kinds
        .iter()
        .map(|kind| KindUsage {
            kind: kind.name,
            files: 0,
            bytes: 0,
        })
        .collect();
    let mut seen = vec![false; kinds.len()];
    let mut used_bytes = 0u64;
    let mut entries = 0u64;
    let mut complete = true;
    let walk = walkdir::WalkDir::new(cache_dir)
        .follow_links(false)
        .min_depth(1);
    for entry in walk {
        entries += 1;
        if entries > max_entries {
            complete = false;
            break;
        }
        // A file removed by cleanup while the walk runs is simply not counted.
        let Ok(entry) = entry else { continue };
        let Ok(relative) = entry.path().strip_prefix(cache_dir) else {
            continue;
        };
        let top = match relative.components().next() {
            Some(Component::Normal(top)) => top.to_str(),
            _ => None,
        };
        let kind = top.and_then(|top| kinds.iter().position(|k| k.name == top));
        if entry.file_type().is_dir() {
            if let Some(kind) = kind {
                seen[kind] = true;
            }
            continue;
        }
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        used_bytes += metadata.len();
        if let Some(kind) = kind {
            usage[kind].files += 1;
            usage[kind].bytes += metadata.len();
        }
    }
    DiskUsage {
        kinds: usage
            .into_iter()
            .zip(seen)
            .filter_map(|(usage, seen)| seen.then_some(usage))
            .collect(),
        used_bytes,
        measured: SystemTime::now(),
        complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::kinds::{OBJECTS, SYMCACHES};

    #[test]
    fn sums_files_per_kind_and_in_all() {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str, len: usize| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, vec![0u8; len]).unwrap();
        };
        write("objects/1/global/a", 100);
        write("objects/1/global/b", 50);
        write("symcaches/1/global/c", 7);
        write("tmp/crash", 3);
        std::fs::create_dir_all(dir.path().join("cficaches")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("/", dir.path().join("objects/1/loop")).unwrap();

        let kinds = [OBJECTS, SYMCACHES, crate::cache::kinds::CFICACHES];
        let usage = measure(dir.path(), &kinds, 1_000);
        assert!(usage.complete);
        assert_eq!(usage.used_bytes, 160, "links are not followed");
        assert_eq!(
            usage.kinds,
            vec![
                KindUsage {
                    kind: "objects",
                    files: 2,
                    bytes: 150
                },
                KindUsage {
                    kind: "symcaches",
                    files: 1,
                    bytes: 7
                },
                KindUsage {
                    kind: "cficaches",
                    files: 0,
                    bytes: 0
                },
            ]
        );

        let cut = measure(dir.path(), &kinds, 3);
        assert!(!cut.complete, "the walk stops at its limit");
        assert!(cut.used_bytes < 160);
    }
}
