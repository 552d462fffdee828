//! Opening a lazy symbol reader for a cold file: which reader a format has, what it
//! weighs on the conversion budget, and one reader per file however many requests
//! read it at once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use symbolic::debuginfo::FileFormat;

use super::LAZY_READ_SHARE;
use super::reader::{LazySymbolizer, OwnedLazySymbolizer};
use super::{breakpad, dwarf, pdb};
use crate::cache::ConversionBudget;
use crate::error::isolate_blocking;
use crate::lookup::ObjectHandle;

/// What a lazy reader of `object` holds in memory, for the conversion budget: its share
/// of the file, and every section it inflates in full (DWARF in ELF). A PDB reader reads
/// its streams through the file's mapping (`native::pdb_read`: scattered ones are
/// gathered in spill files, not on the heap), and a Breakpad reader holds an index of
/// the text's records, each well under its share. 0 for formats without a lazy reader.
pub fn budget_weight(object: &ObjectHandle) -> u64 {
    match object.file_format() {
        FileFormat::Elf | FileFormat::MachO | FileFormat::Wasm => {
            let names: Vec<&str> = dwarf::SECTIONS.iter().map(|id| &id.name()[1..]).collect();
            (object.size() / LAZY_READ_SHARE).saturating_add(object.inflated_size(Some(&names)))
        }
        FileFormat::Pdb | FileFormat::Breakpad => object.size() / LAZY_READ_SHARE,
        _ => 0,
    }
}

/// [`open`] on a blocking thread (a panic there only means "no reader"), holding
/// [`budget_weight`] of the budget while it opens: opening is where sections are
/// inflated and indexes built, so many cold files opening at once queue here like
/// conversions do. The permit ends with the open, not the reader: a request opens
/// readers for several modules one by one and takes the budget again for all of its
/// lookups at once, so holding one reader's share while waiting for the next could
/// deadlock requests against each other (or against themselves). Returns the reader and
/// its weight, which the lookups take again.
pub async fn open_within(
    budget: &ConversionBudget,
    object: Arc<ObjectHandle>,
) -> Option<(OwnedLazySymbolizer, u64)> {
    if !has_reader(&object) {
        return None;
    }
    let weight = budget_weight(&object);
    let spill_dir = budget.spill_dir().ok()?.to_owned();
    let permit = budget.acquire(weight).await;
    let reader = isolate_blocking("lazy reader", move || {
        #[cfg(test)]
        crate::error::delay_if_marked("open", object.data());
        Ok(open(&object, &spill_dir))
    })
    .await
    .ok()
    .flatten();
    drop(permit);
    reader.map(|reader| (reader, weight))
}

fn has_reader(object: &ObjectHandle) -> bool {
    matches!(
        object.file_format(),
        FileFormat::Elf
            | FileFormat::MachO
            | FileFormat::Wasm
            | FileFormat::Pdb
            | FileFormat::Breakpad
    )
}

/// A lazy reader for `object`, or `None` when its format has none (the caller waits
/// for the SymCache then). Call it through [`open_within`], which takes its share of the
/// conversion budget first. Requests that need the same cold file at the same time share
/// one reader (and what it has parsed): `object` is the same handle for all of them
/// while the downloaded file is in memory. A large file's reader keeps its indexes in
/// files in `spill_dir`.
pub fn open(object: &Arc<ObjectHandle>, spill_dir: &Path) -> Option<OwnedLazySymbolizer> {
    let slot = {
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        // Only live readers are kept: the map is as large as the set of files being
        // read lazily right now.
        open.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_ref()
                    .is_some_and(|r| r.strong_count() > 0)
        });
        open.entry(Arc::as_ptr(object) as usize)
            .or_default()
            .clone()
    };
    // Per file, so a large file's index is built once while other files open beside it.
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(reader) = slot.as_ref().and_then(Weak::upgrade) {
        return Some(reader);
    }
    let reader = match object.file_format() {
        FileFormat::Elf | FileFormat::MachO | FileFormat::Wasm => dwarf::open(object, spill_dir)?,
        FileFormat::Pdb => pdb::open(object, spill_dir)?,
        FileFormat::Breakpad => breakpad::open(object)?,
        _ => return None,
    };
    *slot = Some(Arc::downgrade(&reader));
    Some(reader)
}

/// Readers in use, by the address of the handle they read. A live reader holds its
/// handle, so no other handle can have that address while its entry is alive.
type Slot = Arc<Mutex<Option<Weak<dyn LazySymbolizer>>>>;
static OPEN: LazyLock<Mutex<HashMap<usize, Slot>>> = LazyLock::new(Default::default);

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use symbolic::common::ByteView;

    use super::*;
    use crate::lookup::ObjectLimits;

    fn fixture(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(path)
    }

    /// The native ELF fixture's debug file with its DWARF compressed by objcopy.
    fn compressed_elf() -> Arc<ObjectHandle> {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("crash.debug");
        let status = std::process::Command::new("objcopy")
            .arg("--compress-debug-sections=zlib")
            .arg(fixture("native/elf/crash.debug"))
            .arg(&out)
            .status()
            .expect("objcopy (binutils) runs");
        assert!(status.success());
        let data = ByteView::read(std::fs::File::open(&out).unwrap()).unwrap();
        Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap())
    }

    #[test]
    fn readers_weigh_what_they_inflate_and_copy() {
        let elf = compressed_elf();
        let inflated = elf.inflated_size(Some(&["debug_info", "debug_line", "debug_str"]));
        assert!(inflated > 1024, "{inflated} bytes");
        assert!(budget_weight(&elf) >= elf.size() / LAZY_READ_SHARE + inflated);
        let data = ByteView::open(fixture("native/pe/crash.pdb")).unwrap();
        let pdb = ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap();
        assert_eq!(budget_weight(&pdb), pdb.size() / LAZY_READ_SHARE);
        let data = ByteView::open(fixture("native/pe/crash.exe")).unwrap();
        let pe = Arc::new(ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap());
        assert_eq!(budget_weight(&pe), 0);
        let data = ByteView::open(fixture("native/breakpad/crash.sym")).unwrap();
        let sym = ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap();
        assert_eq!(budget_weight(&sym), sym.size() / LAZY_READ_SHARE);
        assert!(budget_weight(&sym) > 0);
    }

    #[tokio::test]
    async fn a_lazy_open_waits_for_its_share_of_the_budget() {
        for handle in [
            compressed_elf(),
            Arc::new(
                ObjectHandle::from_bytes(
                    ByteView::open(fixture("native/pe/crash.pdb")).unwrap(),
                    ObjectLimits::default(),
                )
                .unwrap(),
            ),
        ] {
            let weight = budget_weight(&handle);
            let budget = ConversionBudget::new(weight * 4);
            let total = budget.available_kib();
            let everything = budget.acquire(u64::MAX).await;
            let open = open_within(&budget, handle.clone());
            tokio::pin!(open);
            assert!(
                tokio::time::timeout(Duration::from_millis(200), &mut open)
                    .await
                    .is_err(),
                "opened with the budget exhausted"
            );
            drop(everything);
            let (reader, taken) = tokio::time::timeout(Duration::from_secs(30), open)
                .await
                .expect("opens once the budget is free")
                .expect("a reader");
            assert_eq!(taken, weight);
            // The share ends with the open: lookups take it again, all at once.
            assert_eq!(budget.available_kib(), total);
            drop(reader);
        }
    }
}
