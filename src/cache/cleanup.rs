//! Deleting cache files: `omnisym cleanup` and the server's periodic task. It applies
//! the time rules (`max_unused_for`, placeholder lifetimes), removes stray temp files,
//! files of cache versions no kind reads, and then, over the disk budget,
//! the least recently used files, originals before derived caches.
//!
//! It never takes a lock with the server: a reader has its file memory-mapped (an
//! unlinked file stays readable), writers publish by rename, and directories are never
//! removed except those of dead versions, which nobody writes to.
//!
//! Uploaded symbfiles are data, not cache: cleanup removes only their abandoned temp
//! files. When they lie inside `cache_dir`, their bytes count towards the disk budget,
//! so that cache files make room for them.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::cacher::{is_placeholder, placeholder_ttl, read_placeholder};
use super::{CacheConfig, CachesConfig};
use super::{CacheKind, Family, Scope};

/// Temp files younger than this may belong to a write in progress. Downloads update
/// their file's mtime as they stream, so only an abandoned one gets this old.
pub const TEMP_GRACE: Duration = Duration::from_secs(30 * 60);

/// Where uploaded and fetched crash files wait while their request runs (and lazy
/// readers spill their indexes, to files unlinked as soon as they are made).
pub const TMP_DIR: &str = "tmp";

/// Every rule cleanup applies, and where.
#[derive(Clone, Debug)]
pub struct Cleanup {
    pub cache_dir: PathBuf,
    /// Kinds the server knows, by name; a directory of another name gets the derived
    /// rules but keeps all its versions (it may belong to a newer binary).
    pub kinds: HashMap<&'static str, CacheKind>,
    pub downloaded: CacheConfig,
    pub derived: CacheConfig,
    /// Leftover crash files older than this are removed (upstream's
    /// `caches.diagnostics.retention`, never below [`TEMP_GRACE`]).
    pub crash_file_retention: Duration,
    pub max_disk_size: Option<u64>,
    /// The symbfile store's directory (`symbfile.dir`).
    pub symbfiles: Option<PathBuf>,
    pub dry_run: bool,
}

/// What a run freed and what it kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CleanupReport {
    pub removed_files: u64,
    pub removed_bytes: u64,
    /// Of those, removed only to get under `max_disk_size`.
    pub evicted_files: u64,
    pub kept_files: u64,
    pub kept_bytes: u64,
    /// Uploaded symbfiles in `cache_dir`: never removed, counted in the disk budget.
    pub upload_bytes: u64,
    pub errors: u64,
}

impl std::fmt::Display for CleanupReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "removed {} files ({} bytes, {} of them to fit the disk budget), kept {} files ({} bytes) and {} bytes of uploads, {} errors",
            self.removed_files,
            self.removed_bytes,
            self.evicted_files,
            self.kept_files,
            self.kept_bytes,
            self.upload_bytes,
            self.errors
        )
    }
}

/// A file that survived the time rules: a candidate for the disk budget.
struct Kept {
    path: PathBuf,
    len: u64,
    modified: SystemTime,
    family: Family,
}

impl Cleanup {
    pub fn new(
        cache_dir: &Path,
        config: &CachesConfig,
        kinds: &[CacheKind],
        dry_run: bool,
    ) -> Self {
        Cleanup {
            cache_dir: cache_dir.to_owned(),
            kinds: kinds.iter().map(|kind| (kind.name, *kind)).collect(),
            downloaded: config.downloaded.clone(),
            derived: config.derived.clone(),
            crash_file_retention: config.diagnostics.retention.max(TEMP_GRACE),
            max_disk_size: config.max_disk_size,
            symbfiles: None,
            dry_run,
        }
    }

    /// Also looks after the symbfile store at `dir`.
    pub fn with_symbfiles(mut self, dir: PathBuf) -> Self {
        self.symbfiles = Some(dir);
        self
    }

    /// One pass over `cache_dir`, as if the time were `now`.
    pub fn run(&self, now: SystemTime) -> CleanupReport {
        let mut report = CleanupReport::default();
        let mut kept = Vec::new();
        for (name, path) in subdirs(&self.cache_dir) {
            if name == TMP_DIR {
                self.clean_crash_files(&path, now, &mut report);
                continue;
            }
            // Only directories of cache kinds this build knows are ours to delete from:
            // `cache_dir` may be shared with other data.
            let Some(&kind) = self.kinds.get(name.as_str()) else {
                tracing::debug!(dir = %path.display(), "cleanup skips a directory it does not own");
                continue;
            };
            for (version, version_dir) in subdirs(&path) {
                let live = version.parse::<u32>().is_ok_and(|v| kind.is_live(v));
                if !live {
                    self.remove_tree(&version_dir, &mut report);
                    continue;
                }
                for (scope, scope_dir) in subdirs(&version_dir) {
                    // Only the global scope's directory is named "global" (see `Scope`).
                    let scope = Scope::new(&scope);
                    self.clean_scope(&scope_dir, &scope, kind.family, now, &mut report, &mut kept);
                }
            }
        }
        let uploads = self.clean_symbfiles(now, &mut report);
        self.enforce_budget(kept, uploads, &mut report);
        report
    }

    /// Removes the symbfile store's abandoned temp files; the bytes of the store that
    /// count towards the disk budget.
    fn clean_symbfiles(&self, now: SystemTime, report: &mut CleanupReport) -> u64 {
        let Some(dir) = &self.symbfiles else {
            return 0;
        };
        // The store's own layout (native/symbfile/layout.rs): temp files are the only
        // files that are not uploads (their SymCaches are a cache kind).
        for (path, meta) in files(&dir.join("tmp")) {
            if age(&meta, now) >= TEMP_GRACE {
                self.remove(&path, meta.len(), report);
            }
        }
        if !dir.starts_with(&self.cache_dir) {
            return 0;
        }
        walk_files(dir).iter().map(|(_, meta)| meta.len()).sum()
    }

    fn clean_crash_files(&self, dir: &Path, now: SystemTime, report: &mut CleanupReport) {
        for (path, meta) in files(dir) {
            if age(&meta, now) >= self.crash_file_retention {
                self.remove(&path, meta.len(), report);
            }
        }
    }

    fn clean_scope(
        &self,
        dir: &Path,
        scope: &Scope,
        family: Family,
        now: SystemTime,
        report: &mut CleanupReport,
        kept: &mut Vec<Kept>,
    ) {
        let config = match family {
            Family::Downloaded => &self.downloaded,
            Family::Derived => &self.derived,
        };
        for (path, meta) in files(dir) {
            let age = age(&meta, now);
            let is_temp = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".tmp"));
            let expired = if is_temp {
                age >= TEMP_GRACE
            } else if let Some(ttl) = placeholder_lifetime(&path, config, scope) {
                age >= ttl
            } else {
                age >= config.max_unused_for
            };
            if expired {
                self.remove(&path, meta.len(), report);
            } else if !is_temp {
                kept.push(Kept {
                    path,
                    len: meta.len(),
                    modified: meta.modified().unwrap_or(now),
                    family,
                });
            }
        }
    }

    /// Least recently used first, and all originals before any derived cache: an
    /// original is only needed to build derived caches, which are smaller and hotter.
    fn enforce_budget(&self, mut kept: Vec<Kept>, uploads: u64, report: &mut CleanupReport) {
        let mut total: u64 = kept.iter().map(|k| k.len).sum::<u64>() + uploads;
        if let Some(budget) = self.max_disk_size {
            kept.sort_by_key(|k| (k.family == Family::Derived, k.modified));
            let mut survivors = Vec::with_capacity(kept.len());
            for file in kept {
                if total > budget {
                    total -= file.len;
                    if self.remove(&file.path, file.len, report) {
                        report.evicted_files += 1;
                    }
                } else {
                    survivors.push(file);
                }
            }
            kept = survivors;
        }
        report.kept_files = kept.len() as u64;
        report.kept_bytes = kept.iter().map(|k| k.len).sum();
        report.upload_bytes = uploads;
    }

    fn remove_tree(&self, dir: &Path, report: &mut CleanupReport) {
        for (path, meta) in walk_files(dir) {
            self.remove(&path, meta.len(), report);
        }
        if !self.dry_run {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Whether the file is gone (or would be, in a dry run).
    fn remove(&self, path: &Path, len: u64, report: &mut CleanupReport) -> bool {
        let result = if self.dry_run {
            Ok(())
        } else {
            std::fs::remove_file(path)
        };
        match result {
            Ok(()) => {
                tracing::debug!(path = %path.display(), dry_run = self.dry_run, "cleanup removes");
                report.removed_files += 1;
                report.removed_bytes += len;
                true
            }
            // The server (or another cleanup) got there first.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "cleanup cannot remove");
                report.errors += 1;
                false
            }
        }
    }

    /// Runs every `interval` on a blocking thread, for as long as the runtime lives.
    pub fn spawn_periodic(self, interval: Duration) {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let cleanup = self.clone();
                match tokio::task::spawn_blocking(move || cleanup.run(SystemTime::now())).await {
                    Ok(report) => tracing::info!(%report, "cache cleanup"),
                    Err(err) => tracing::error!(error = %err, "cache cleanup failed"),
                }
            }
        });
    }
}

/// A placeholder's lifetime; `None` for content files.
fn placeholder_lifetime(path: &Path, config: &CacheConfig, scope: &Scope) -> Option<Duration> {
    // Placeholders are a few hundred bytes of JSON; content is never read here.
    let mut head = Vec::with_capacity(4096);
    let file = std::fs::File::open(path).ok()?;
    file.take(4096).read_to_end(&mut head).ok()?;
    if !is_placeholder(&head) {
        return None;
    }
    Some(match read_placeholder(&head) {
        Some((err, _)) => placeholder_ttl(config, &err, scope).unwrap_or_default(),
        // Unreadable placeholders have no business staying.
        None => Duration::ZERO,
    })
}

fn age(meta: &std::fs::Metadata, now: SystemTime) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .unwrap_or_default()
}

fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect()
}

fn files(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file().then(|| (e.path(), meta))
        })
        .collect()
}

fn walk_files(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = files(dir);
    for (_, sub) in subdirs(dir) {
        out.extend(walk_files(&sub));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cacher::placeholder_bytes;
    use crate::error::CacheError;

    const DAY: Duration = Duration::from_secs(86400);
    const MIN: Duration = Duration::from_secs(60);

    struct Tree {
        dir: tempfile::TempDir,
        now: SystemTime,
    }

    impl Tree {
        fn new() -> Self {
            Tree {
                dir: tempfile::tempdir().unwrap(),
                now: SystemTime::now(),
            }
        }

        fn put(&self, rel: &str, data: &[u8], age: Duration) -> PathBuf {
            let path = self.dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, data).unwrap();
            let file = std::fs::File::options().append(true).open(&path).unwrap();
            file.set_modified(self.now - age).unwrap();
            path
        }

        fn placeholder(&self, rel: &str, err: CacheError, age: Duration) -> PathBuf {
            self.put(rel, &placeholder_bytes(&err, "boot").unwrap(), age)
        }

        fn cleanup(&self, max_disk_size: Option<u64>, dry_run: bool) -> Cleanup {
            let objects = CacheKind {
                name: "objects",
                version: 1,
                compatible: &[],
                family: Family::Downloaded,
                memory_share: 1,
            };
            let symcaches = CacheKind {
                name: "symcaches",
                version: 2,
                compatible: &[1],
                family: Family::Derived,
                memory_share: 1,
            };
            Cleanup {
                cache_dir: self.dir.path().to_owned(),
                kinds: [("objects", objects), ("symcaches", symcaches)]
                    .into_iter()
                    .collect(),
                downloaded: CacheConfig::default(),
                derived: CacheConfig::default(),
                crash_file_retention: DAY,
                max_disk_size,
                symbfiles: Some(self.dir.path().join("symbfiles")),
                dry_run,
            }
        }
    }

    /// Every rule at once; returns (files that must go, files that must stay).
    fn populate(t: &Tree) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let gone = vec![
            t.put("objects/1/global/unused", b"ELF", 8 * DAY),
            t.put("objects/1/global/.tmpabandoned", b"EL", 31 * MIN),
            t.placeholder("symcaches/2/p/miss-old", CacheError::NotFound, 61 * MIN),
            t.placeholder(
                "symcaches/2/p/err-old",
                CacheError::DownloadError("503".into()),
                2 * MIN,
            ),
            t.put("symcaches/0/global/dead-version", b"SYMC", MIN),
            t.put("tmp/.upload-killed", b"MDMP", 2 * DAY),
        ];
        let kept = vec![
            t.put("objects/1/global/used", b"ELF", 6 * DAY),
            t.put("objects/1/global/.tmpwriting", b"E", MIN),
            t.placeholder("symcaches/2/p/miss-new", CacheError::NotFound, 59 * MIN),
            t.placeholder(
                "symcaches/2/p/malformed",
                CacheError::Malformed("x".into()),
                23 * 60 * MIN,
            ),
            t.put("symcaches/1/global/compatible", b"SYMC", DAY),
            // Not a cache kind: never ours to delete, however old.
            t.put("other/9/global/unused", b"?", 8 * DAY),
            t.put("other/9/global/used", b"?", DAY),
            t.put("tmp/.upload-running", b"MDMP", MIN),
        ];
        (gone, kept)
    }

    #[test]
    fn applies_the_time_rules_and_removes_dead_versions() {
        let t = Tree::new();
        let (gone, kept) = populate(&t);
        let gone_bytes: u64 = gone
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        let report = t.cleanup(None, false).run(t.now);
        for path in &gone {
            assert!(!path.exists(), "{} should be gone", path.display());
        }
        for path in &kept {
            assert!(path.exists(), "{} should stay", path.display());
        }
        assert!(!t.dir.path().join("symcaches/0").exists());
        assert_eq!(report.removed_files, gone.len() as u64);
        assert_eq!(report.removed_bytes, gone_bytes);
        assert_eq!(report.errors, 0);
        // Temp and crash files in progress are not cache files, and neither is what
        // lies in directories of no cache kind.
        assert_eq!(report.kept_files, kept.len() as u64 - 4);
    }

    #[test]
    fn dry_run_reports_without_deleting() {
        let t = Tree::new();
        let (gone, kept) = populate(&t);
        let dry = t.cleanup(None, true).run(t.now);
        for path in gone.iter().chain(&kept) {
            assert!(path.exists(), "{}", path.display());
        }
        let real = t.cleanup(None, false).run(t.now);
        assert_eq!(dry.removed_files, real.removed_files);
        assert_eq!(dry.removed_bytes, real.removed_bytes);
    }

    #[test]
    fn uploads_count_towards_the_budget_and_only_their_abandoned_temps_go() {
        let t = Tree::new();
        let data = [0u8; 100];
        let object = t.put("objects/1/global/o", &data, 3 * DAY);
        let derived = t.put("symcaches/2/global/d", &data, DAY);
        let upload = t.put("symbfiles/files/ab/ab00/ranges.symbfile", &data, 30 * DAY);
        let part = t.put(
            "symbfiles/pending/ranges-ab00-2/part-00000000",
            &data,
            2 * DAY,
        );
        let writing = t.put("symbfiles/tmp/.partwriting", &data, MIN);
        let abandoned = t.put("symbfiles/tmp/.partabandoned", &data, 31 * MIN);

        let report = t.cleanup(Some(400), false).run(t.now);
        assert!(!abandoned.exists());
        assert!(upload.exists() && part.exists() && writing.exists());
        // 300 bytes of uploads leave room for one cache file: the original goes first.
        assert!(!object.exists() && derived.exists());
        assert_eq!(report.upload_bytes, 300);
        assert_eq!((report.evicted_files, report.kept_bytes), (1, 100));
    }

    #[test]
    fn over_budget_evicts_least_recently_used_originals_first() {
        let t = Tree::new();
        let data = [0u8; 100];
        let derived_oldest = t.put("symcaches/2/global/d-old", &data, 5 * DAY);
        let derived_new = t.put("symcaches/2/global/d-new", &data, MIN);
        let object_old = t.put("objects/1/global/o-old", &data, 3 * DAY);
        let object_new = t.put("objects/1/global/o-new", &data, 2 * DAY);

        let report = t.cleanup(Some(300), false).run(t.now);
        assert!(!object_old.exists());
        assert!(object_new.exists() && derived_oldest.exists() && derived_new.exists());
        assert_eq!((report.evicted_files, report.kept_bytes), (1, 300));

        let report = t.cleanup(Some(150), false).run(t.now);
        assert!(!object_new.exists() && !derived_oldest.exists());
        assert!(derived_new.exists());
        assert_eq!((report.evicted_files, report.kept_bytes), (2, 100));
    }
}
