//! Writing sorted files into the output tree: compressed or not, never half a file at
//! a path a source reads (each file goes to a temporary name in its directory and is
//! renamed into place), never over a file that was there before the run, and in the
//! unified layout with symsorter's `.meta` beside it and its `refs/<bundle>` marker.

use std::collections::HashMap;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::store::layout::{Meta, Rank};
use anyhow::{Context, Result};

/// symsorter's `-z` count to a zstd level: more `z`s trade speed for size, and past
/// three the maximum.
pub fn zstd_level(count: u8) -> i32 {
    match count {
        0 => 0,
        1 => 3,
        2 => 10,
        3 => 19,
        _ => 22,
    }
}

/// Writes `data` to the empty `file`, leaving holes where it holds whole blocks of
/// zeros: a sparse debug file (padding, reserved regions) is placed without taking its
/// whole size on disk, as `cp --sparse=auto` would copy it.
fn write_sparse(file: &mut fs::File, data: &[u8]) -> std::io::Result<()> {
    const BLOCK: usize = 64 * 1024;
    // Compared against, as a `memcmp`: fast in any build.
    static ZEROS: [u8; BLOCK] = [0; BLOCK];
    for chunk in data.chunks(BLOCK) {
        if *chunk == ZEROS[..chunk.len()] {
            file.seek(SeekFrom::Current(chunk.len() as i64))?;
        } else {
            file.write_all(chunk)?;
        }
    }
    // A hole at the end has no write to extend the file over it.
    file.set_len(data.len() as u64)
}

pub enum Outcome {
    Written(PathBuf),
    /// A file of this run at the same path ranked lower and was replaced.
    Replaced(PathBuf),
    /// The path was taken, before this run or by a file of this run that ranks as
    /// high; nothing was written.
    Duplicate(PathBuf),
}

/// The output tree of one run (one bundle).
pub struct Store {
    root: PathBuf,
    level: i32,
    /// `.meta` files and `refs/`: only the unified layout has them (elsewhere their
    /// names could collide with the layout's own files).
    unified: bool,
    bundle_id: Option<String>,
    /// What this run wrote, and how highly it ranks.
    written: Mutex<HashMap<PathBuf, Rank>>,
}

impl Store {
    pub fn new(root: PathBuf, level: i32, unified: bool, bundle_id: Option<String>) -> Store {
        Store {
            root,
            level,
            unified,
            bundle_id,
            written: Mutex::new(HashMap::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `data` at `rel` (a `/`-separated path from `sources`, so one that stays
    /// below the root).
    pub fn put(&self, rel: &str, data: &[u8], rank: Rank, meta: &Meta) -> Result<Outcome> {
        let target = rel.split('/').fold(self.root.clone(), |p, s| p.join(s));
        let dir = target.parent().expect("a layout path has a directory");
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if self.unified
            && let Some(bundle_id) = &self.bundle_id
        {
            // The bundle holds this file even when an earlier copy is kept.
            let refs = dir.join("refs");
            fs::create_dir_all(&refs)?;
            fs::write(refs.join(bundle_id), b"")?;
        }
        // Compressing a file that will be thrown away costs the most: look first.
        if !self.may_replace(&target, rank) {
            return Ok(Outcome::Duplicate(target));
        }

        let mut temp = tempfile::Builder::new()
            .prefix(".sorting-")
            .tempfile_in(dir)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        if self.level > 0 {
            zstd::stream::copy_encode(data, temp.as_file_mut(), self.level)?;
        } else {
            write_sparse(temp.as_file_mut(), data)?;
        }

        let mut written = self.written.lock().unwrap();
        let outcome = match written.get(&target) {
            Some(&earlier) if earlier >= rank => return Ok(Outcome::Duplicate(target)),
            Some(_) => {
                temp.persist(&target)?;
                Outcome::Replaced(target.clone())
            }
            None => match temp.persist_noclobber(&target) {
                Ok(_) => Outcome::Written(target.clone()),
                Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Ok(Outcome::Duplicate(target));
                }
                Err(e) => return Err(e.error.into()),
            },
        };
        written.insert(target.clone(), rank);
        if self.unified {
            fs::write(meta.path_beside(&target), meta.to_json())?;
        }
        Ok(outcome)
    }

    fn may_replace(&self, target: &Path, rank: Rank) -> bool {
        match self.written.lock().unwrap().get(target) {
            Some(&earlier) => earlier < rank,
            None => !target.exists(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str) -> Meta {
        Meta {
            name: Some(name.into()),
            arch: Some("x86_64".into()),
            file_format: Some("elf".into()),
        }
    }

    #[test]
    fn compression_levels_are_symsorters() {
        let levels: Vec<i32> = (0..=6).map(zstd_level).collect();
        assert_eq!(levels, [0, 3, 10, 19, 22, 22, 22]);
        assert_eq!(zstd_level(u8::MAX), 22);
    }

    #[test]
    fn first_wins_unless_outranked_and_files_from_before_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().into(), 0, true, Some("b1".into()));
        let put = |data: &[u8], rank, name| store.put("ab/cd/debuginfo", data, rank, &meta(name));
        assert!(matches!(
            put(b"code", Rank::Code, "a").unwrap(),
            Outcome::Written(_)
        ));
        assert!(matches!(
            put(b"other code", Rank::Code, "b").unwrap(),
            Outcome::Duplicate(_)
        ));
        assert!(matches!(
            put(b"debug", Rank::Debug, "c").unwrap(),
            Outcome::Replaced(_)
        ));
        assert!(matches!(
            put(b"breakpad", Rank::Breakpad, "d").unwrap(),
            Outcome::Duplicate(_)
        ));
        let file = dir.path().join("ab/cd/debuginfo");
        assert_eq!(fs::read(&file).unwrap(), b"debug");
        assert_eq!(
            fs::read_to_string(dir.path().join("ab/cd/debuginfo.meta")).unwrap(),
            r#"{"name":"c","arch":"x86_64","file_format":"elf"}"#
        );
        assert!(dir.path().join("ab/cd/refs/b1").is_file());

        // A later run never replaces what is there.
        let again = Store::new(dir.path().into(), 3, true, None);
        assert!(matches!(
            again
                .put("ab/cd/debuginfo", b"x", Rank::Debug, &meta("e"))
                .unwrap(),
            Outcome::Duplicate(_)
        ));
        assert_eq!(fs::read(&file).unwrap(), b"debug");
        let names: Vec<_> = fs::read_dir(dir.path().join("ab/cd"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(".sorting-")),
            "{names:?}"
        );
    }

    #[test]
    fn compressed_files_are_zstd_frames_and_other_layouts_get_no_meta() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().into(), zstd_level(2), false, Some("b".into()));
        let data = vec![7u8; 100_000];
        store
            .put("x/y.debug", &data, Rank::Debug, &meta("y"))
            .unwrap();
        let written = fs::read(dir.path().join("x/y.debug")).unwrap();
        assert_eq!(&written[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
        assert!(written.len() < 1000);
        assert_eq!(zstd::decode_all(&written[..]).unwrap(), data);
        assert!(!dir.path().join("x/y.meta").exists());
        assert!(!dir.path().join("x/refs").exists());
    }
}
