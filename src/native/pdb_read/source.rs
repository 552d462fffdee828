//! The pdb crate's view of a PDB file, over the file's own mapping.
//!
//! A PDB is a multi-stream file: each stream (types, ids, symbols, each module's
//! records) is a list of pages anywhere in the file, and the pdb crate asks its `Source`
//! for a stream as one contiguous slice. Its default `Source` (what symbolic and a
//! `Cursor` give) copies every stream it reads onto the heap, which for a large PDB
//! (several GiB of Unreal Engine types and ids) is most of the file. This one answers a
//! stream whose pages follow one another with the mapped bytes themselves. A large
//! stream is never one run of pages: the free page map takes two pages of every
//! interval of page-size pages (every 64 MiB with 8 KiB pages), and linkers leave
//! their streams scattered besides. Its runs of pages are mapped again, side by side,
//! into one range of address space (Linux, from the cacher's shared mapping), and
//! otherwise copied into a spill file (file-backed, like the mapping). Only small views
//! are copied onto the heap.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use pdb::{Source, SourceSlice, SourceView};

use crate::lookup::ObjectHandle;
use crate::native::spill::FileVec;

/// Views smaller than this are copied to the heap: the pdb crate asks for many small
/// ones (headers, the stream directory, a module's small streams), and a spill file
/// each would cost more than the bytes.
const HEAP_VIEW_MAX: usize = 256 << 10;

/// A PDB's bytes as the pdb crate reads them, for as long as any view of them lives.
pub struct MappedSource {
    handle: Arc<ObjectHandle>,
    spill_dir: PathBuf,
    heap_view_max: usize,
}

impl MappedSource {
    pub fn new(handle: Arc<ObjectHandle>, spill_dir: PathBuf) -> Self {
        MappedSource {
            handle,
            spill_dir,
            heap_view_max: HEAP_VIEW_MAX,
        }
    }
}

impl fmt::Debug for MappedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MappedSource")
    }
}

impl Source<'static> for MappedSource {
    fn view(&mut self, slices: &[SourceSlice]) -> io::Result<Box<dyn SourceView<'static>>> {
        let data = self.handle.data();
        let mut len = 0usize;
        for slice in slices {
            let end = usize::try_from(slice.offset)
                .ok()
                .and_then(|start| start.checked_add(slice.size));
            if end.is_none_or(|end| end > data.len()) {
                // What the default source's `read_exact` says past the end of the file.
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            len = len
                .checked_add(slice.size)
                .ok_or_else(|| io::Error::other("a PDB stream larger than memory"))?;
        }
        let contiguous = slices
            .windows(2)
            .all(|pair| pair[0].offset + pair[0].size as u64 == pair[1].offset);
        if contiguous {
            let start = slices.first().map_or(0, |s| s.offset as usize);
            return Ok(Box::new(Mapped {
                handle: self.handle.clone(),
                start,
                len,
            }));
        }
        if len >= self.heap_view_max
            && let Some(mapping) = self.handle.file_mapping()
            && let Some(stitched) = Stitched::map(mapping, slices, len)
        {
            return Ok(Box::new(stitched));
        }
        let copy = |into: &mut [u8]| {
            let mut at = 0;
            for slice in slices {
                let start = slice.offset as usize;
                into[at..at + slice.size].copy_from_slice(&data[start..start + slice.size]);
                at += slice.size;
            }
        };
        if len < self.heap_view_max {
            let mut bytes = vec![0; len];
            copy(&mut bytes);
            return Ok(Box::new(Heap(bytes)));
        }
        let mut spilled = FileVec::new_in(&self.spill_dir)?;
        spilled.extend_zeroed(len)?;
        copy(spilled.as_mut_slice());
        Ok(Box::new(Spilled(spilled)))
    }
}

/// Pages that follow one another in the file: the mapping itself.
struct Mapped {
    handle: Arc<ObjectHandle>,
    start: usize,
    len: usize,
}

impl SourceView<'static> for Mapped {
    fn as_slice(&self) -> &[u8] {
        &self.handle.data()[self.start..self.start + self.len]
    }
}

/// Runs of a stream's pages, mapped again from the file's mapping one after the other
/// into an address range of their own: a contiguous view with no copy, whose pages are
/// the page cache's, as the mapping's are.
struct Stitched {
    base: *mut u8,
    /// Bytes of address space taken: `len` rounded up to whole pages.
    reserved: usize,
    len: usize,
}

// SAFETY: the range is read-only memory, owned by the view and unmapped only on drop.
unsafe impl Send for Stitched {}
unsafe impl Sync for Stitched {}

/// Past this many runs a stream is copied: each run is a mapping of its own, and a
/// process has some 65,000 (`vm.max_map_count`) for everything.
const MAX_STITCHED_RUNS: usize = 1024;

impl Stitched {
    /// `slices` of `mapping` (`ObjectHandle::file_mapping`), `len` bytes in all, or
    /// `None` where they cannot be mapped (pages smaller than the system's, too many
    /// runs, not Linux, or the kernel refuses): the caller copies them then.
    #[cfg(target_os = "linux")]
    fn map(mapping: &[u8], slices: &[SourceSlice], len: usize) -> Option<Self> {
        // SAFETY: sysconf takes no pointers.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        if page == 0 || !(mapping.as_ptr() as usize).is_multiple_of(page) {
            return None;
        }
        // Runs of slices that follow one another in the file. Every run must start on a
        // page, and all but the last end on one, for its pages to land where the stream
        // has them.
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for slice in slices {
            let offset = slice.offset as usize;
            if let Some((start, size)) = runs.last_mut()
                && *start + *size == offset
            {
                *size += slice.size;
            } else if runs.len() == MAX_STITCHED_RUNS {
                return None;
            } else {
                runs.push((offset, slice.size));
            }
        }
        let (last, whole) = runs.split_last()?;
        if !runs.iter().all(|(start, _)| start.is_multiple_of(page))
            || !whole.iter().all(|(_, size)| size.is_multiple_of(page))
        {
            return None;
        }
        // The mapping covers the file's last page whole.
        if (last.0 + last.1).next_multiple_of(page) > mapping.len().next_multiple_of(page) {
            return None;
        }
        let reserved = len.next_multiple_of(page);
        // SAFETY: a fresh anonymous reservation, touching no existing mapping.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let stitched = Stitched {
            base: base.cast(),
            reserved,
            len,
        };
        let mut at = 0;
        for &(start, size) in &runs {
            // SAFETY: `old_size` 0 asks for a second mapping of the same pages of a shared
            // mapping (what the cacher's is), placed over our own reservation; the source
            // range lies within `mapping`'s pages, the target within the reservation.
            let placed = unsafe {
                libc::mremap(
                    mapping.as_ptr().add(start) as *mut libc::c_void,
                    0,
                    size.next_multiple_of(page),
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                    stitched.base.add(at),
                )
            };
            if placed == libc::MAP_FAILED {
                tracing::debug!(error = %io::Error::last_os_error(), "mremap of a PDB stream failed");
                return None;
            }
            at += size;
        }
        Some(stitched)
    }

    #[cfg(not(target_os = "linux"))]
    fn map(_mapping: &[u8], _slices: &[SourceSlice], _len: usize) -> Option<Self> {
        None
    }
}

impl Drop for Stitched {
    fn drop(&mut self) {
        // SAFETY: the range is the reservation `map` made, with the runs mapped inside it;
        // nothing borrows it past the view.
        unsafe { libc::munmap(self.base.cast(), self.reserved) };
    }
}

impl SourceView<'static> for Stitched {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes from `base` are mapped readable for as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

struct Heap(Vec<u8>);

impl SourceView<'static> for Heap {
    fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

/// Scattered pages gathered into a spill file.
struct Spilled(FileVec<u8>);

impl SourceView<'static> for Spilled {
    fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }
}

macro_rules! view_debug {
    ($($view:ident),*) => {$(
        impl fmt::Debug for $view {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({} bytes)", stringify!($view), self.as_slice().len())
            }
        }
    )*};
}
view_debug!(Mapped, Stitched, Heap, Spilled);

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::path::Path;

    use pdb::{PDB, StreamIndex};
    use symbolic::common::ByteView;

    use super::*;
    use crate::lookup::{FileFormat, ObjectFile, ObjectHint, ObjectLimits};
    use crate::sources::ObjectId;

    /// `pdb` rewritten with its streams' pages interleaved (page `k` of every stream,
    /// then page `k + 1` of every stream, ...): the same PDB as the pdb crate reads it,
    /// but with no stream of more than one page contiguous, as incremental linkers
    /// leave large PDBs. MSF 7.0: a superblock, two free page map pages, the pages, the
    /// stream directory and the page that lists the directory's pages.
    fn scattered(pdb: &[u8]) -> Vec<u8> {
        let u32_at =
            |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let page = u32_at(pdb, 32) as usize;
        let directory_bytes = u32_at(pdb, 44) as usize;
        let map_page = u32_at(pdb, 52) as usize;
        let mut directory = Vec::new();
        for i in 0..directory_bytes.div_ceil(page) {
            let at = u32_at(pdb, map_page * page + 4 * i) as usize * page;
            directory.extend_from_slice(&pdb[at..at + page]);
        }
        let count = u32_at(&directory, 0) as usize;
        let sizes: Vec<u32> = (0..count).map(|i| u32_at(&directory, 4 + 4 * i)).collect();
        let mut at = 4 + 4 * count;
        let mut streams: Vec<Vec<u8>> = Vec::new();
        for &size in &sizes {
            let mut bytes = Vec::new();
            if size != u32::MAX {
                for _ in 0..(size as usize).div_ceil(page) {
                    let from = u32_at(&directory, at) as usize * page;
                    at += 4;
                    bytes.extend_from_slice(&pdb[from..from + page]);
                }
                bytes.truncate(size as usize);
            }
            streams.push(bytes);
        }
        let mut out = vec![0u8; 3 * page];
        let mut pages: Vec<Vec<u32>> = vec![Vec::new(); count];
        for k in 0.. {
            let mut any = false;
            for (stream, bytes) in streams.iter().enumerate() {
                if let Some(chunk) = bytes.chunks(page).nth(k) {
                    pages[stream].push((out.len() / page) as u32);
                    out.extend_from_slice(chunk);
                    out.resize(out.len().next_multiple_of(page), 0);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        let mut new_directory = (count as u32).to_le_bytes().to_vec();
        sizes
            .iter()
            .for_each(|s| new_directory.extend_from_slice(&s.to_le_bytes()));
        pages
            .iter()
            .flatten()
            .for_each(|p| new_directory.extend_from_slice(&p.to_le_bytes()));
        let mut directory_pages = Vec::new();
        for chunk in new_directory.chunks(page) {
            directory_pages.push((out.len() / page) as u32);
            out.extend_from_slice(chunk);
            out.resize(out.len().next_multiple_of(page), 0);
        }
        let new_map_page = out.len() / page;
        directory_pages
            .iter()
            .for_each(|p| out.extend_from_slice(&p.to_le_bytes()));
        out.resize(out.len().next_multiple_of(page), 0);
        assert!(
            out.len() / page < page * 8,
            "past the first free page map interval"
        );
        out[..56].copy_from_slice(&pdb[..56]);
        let total_pages = (out.len() / page) as u32;
        out[40..44].copy_from_slice(&total_pages.to_le_bytes());
        out[44..48].copy_from_slice(&(new_directory.len() as u32).to_le_bytes());
        out[52..56].copy_from_slice(&(new_map_page as u32).to_le_bytes());
        out
    }

    /// Every stream of the fixture PDBs, as linked and with their pages scattered, reads
    /// the same through the mapping (whole, or gathered on the heap or in spill files) as
    /// through the pdb crate's own source.
    #[test]
    fn every_stream_reads_as_the_default_source_reads_it() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let spill = tempfile::tempdir().unwrap();
        let mut kinds = std::collections::BTreeSet::new();
        for path in ["native/pe/crash.pdb", "bigfiles/pdb/bigfile.pdb"] {
            let linked = std::fs::read(fixtures.join(path)).unwrap();
            for data in [scattered(&linked), linked] {
                let on_heap = Arc::new(
                    ObjectHandle::from_bytes(
                        ByteView::from_vec(data.clone()),
                        ObjectLimits::default(),
                    )
                    .unwrap(),
                );
                // As the cacher loads it: a shared mapping of the file, whose scattered
                // streams are mapped again rather than copied.
                let file = spill.path().join("loaded.pdb");
                std::fs::write(&file, &data).unwrap();
                let mapped = ByteView::map_file(std::fs::File::open(&file).unwrap()).unwrap();
                let hint = ObjectHint {
                    id: ObjectId::default(),
                    limits: ObjectLimits::default(),
                };
                let in_file = ObjectFile::load(mapped, &hint).unwrap();
                for (handle, heap_view_max) in [
                    (on_heap.clone(), HEAP_VIEW_MAX),
                    (on_heap, 0),
                    (in_file.clone(), 0),
                    (in_file, HEAP_VIEW_MAX),
                ] {
                    let mut theirs = PDB::open(Cursor::new(data.as_slice())).unwrap();
                    let mut ours = PDB::open(MappedSource {
                        heap_view_max,
                        ..MappedSource::new(handle.clone(), spill.path().to_owned())
                    })
                    .unwrap();
                    let mut index = 0u32;
                    loop {
                        let theirs = theirs.raw_stream(StreamIndex(index as u16));
                        let ours = ours.raw_stream(StreamIndex(index as u16));
                        match (theirs, ours) {
                            (Ok(Some(theirs)), Ok(Some(ours))) => {
                                assert_eq!(theirs.as_slice(), ours.as_slice(), "{path} {index}");
                                let view = format!("{ours:?}");
                                kinds.extend(
                                    ["Mapped", "Stitched", "Heap", "Spilled"]
                                        .into_iter()
                                        .filter(|kind| view.contains(kind)),
                                );
                            }
                            (Ok(None), Ok(None)) => {}
                            (Err(_), Err(_)) => break,
                            (theirs, ours) => {
                                panic!("{path} {index}: {:?} vs {:?}", theirs.is_ok(), ours.is_ok())
                            }
                        }
                        index += 1;
                    }
                    assert!(index > 4, "{path} has streams");
                    // And the reader symbolic's conversion and ours use parses it.
                    assert!(ours.debug_information().is_ok(), "{path}");
                }
            }
        }
        // Each way of answering was taken, so each was compared.
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }
}
