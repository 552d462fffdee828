//! The conversion budget (`caches.conversion_budget`): how many bytes of input files
//! are being turned into caches, or read lazily, at once; and giving back what a
//! conversion leaves in memory once it is done (its freed heap, the pages of the files
//! it read). (The in-memory budget's split between kinds is in the table of `kinds`.)

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A weighted semaphore over input bytes. A conversion's memory grows with the file it
/// reads (a SymCache conversion peaks at about five times a DWARF file's size), so
/// several large files arriving together queue here instead of growing the process;
/// small files pass at once beside them. A file larger than the whole budget waits until
/// it runs alone.
pub struct ConversionBudget {
    semaphore: Arc<Semaphore>,
    /// In KiB, so a budget of terabytes still fits the semaphore's `u32`.
    total_kib: u32,
    /// Where lazy readers put what they would otherwise hold on the heap (indexes of a
    /// large file's symbols and units): on the cache's disk, not the process's memory.
    spill_dir: PathBuf,
}

/// Held while a conversion (or lazy read) runs; returns its share on drop.
pub struct BudgetPermit {
    _permit: OwnedSemaphorePermit,
    pub kib: u32,
    /// How long it waited for its share.
    pub waited: std::time::Duration,
}

impl ConversionBudget {
    pub fn new(bytes: u64) -> Self {
        let total_kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        ConversionBudget {
            semaphore: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
            spill_dir: std::env::temp_dir(),
        }
    }

    /// Readers within this budget spill to `dir` (created when first needed).
    pub fn with_spill_dir(mut self, dir: PathBuf) -> Self {
        self.spill_dir = dir;
        self
    }

    /// The spill directory, created if it is missing (the cache cleanup may remove it
    /// while empty: spill files are unlinked as they are made).
    pub fn spill_dir(&self) -> std::io::Result<&Path> {
        std::fs::create_dir_all(&self.spill_dir)?;
        Ok(&self.spill_dir)
    }

    /// Waits until `bytes` (at least 1 KiB, at most the whole budget) are free.
    pub async fn acquire(&self, bytes: u64) -> BudgetPermit {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total_kib);
        let started = Instant::now();
        let permit = self
            .semaphore
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the budget's semaphore is never closed");
        BudgetPermit {
            _permit: permit,
            kib,
            waited: started.elapsed(),
        }
    }

    /// KiB free right now.
    pub fn available_kib(&self) -> usize {
        self.semaphore.available_permits()
    }
}

/// Hands the calling thread's free heap back to the OS. A conversion frees most of what
/// it allocated (a parsed DWARF file, a JavaScript AST: hundreds of MiB) when it ends,
/// but mimalloc returns freed pages only as the owning thread allocates again, and a
/// blocking-pool thread that converted once may sit idle: its pages stayed resident,
/// the process's RSS grew with every large conversion's peak instead of falling back.
/// Call it at the end of a conversion (or another job that allocates in proportion to
/// a file), on the thread that ran it; after a small one it finds little to do. Under another global
/// allocator (the tests') it tidies mimalloc's unused heap of this thread and nothing
/// else.
pub fn return_freed_heap() {
    // SAFETY: `mi_collect` takes no pointers; it walks the calling thread's own heap.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Drops the process's resident pages of `data`, a read-only mapping of a whole file
/// that a conversion has read through: they leave the RSS and stay in the kernel's page
/// cache, and a later read faults them back in unchanged. Bytes that do not start on a
/// page boundary, as a mapping does, are left alone.
///
/// # Safety
/// `data` must be a private read-only mapping of a file (`ByteView::map_file`) that
/// nothing writes: pages of the heap given up this way would come back zeroed.
pub unsafe fn release_mapped_pages(data: &[u8]) {
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(page).unwrap_or(4096).max(1);
    if data.is_empty() || !(data.as_ptr() as usize).is_multiple_of(page) {
        return;
    }
    // SAFETY: the range is the caller's read-only file mapping; `MADV_DONTNEED` on a
    // private file mapping only drops this process's copies of clean pages, which read
    // back from the file with the same bytes.
    let result = unsafe {
        libc::madvise(
            data.as_ptr() as *mut libc::c_void,
            data.len(),
            libc::MADV_DONTNEED,
        )
    };
    if result != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "madvise(MADV_DONTNEED) failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident KiB of the mapping that starts at `ptr`.
    fn resident_kib(ptr: *const u8) -> u64 {
        let start = format!("{:x}-", ptr as usize);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines().skip_while(|line| !line.starts_with(&start));
        assert!(lines.next().is_some(), "no mapping at {start}");
        let rss = lines.find(|line| line.starts_with("Rss:")).unwrap();
        rss.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn released_pages_of_a_mapping_leave_the_rss_and_read_back_unchanged() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let content: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        std::io::Write::write_all(&mut file, &content).unwrap();
        let view = symbolic::common::ByteView::open(file.path()).unwrap();
        assert_eq!(&view[..], &content[..]);
        assert!(
            resident_kib(view.as_ptr()) >= 4096,
            "read whole, it is resident"
        );
        // SAFETY: a read-only mapping of a file nothing writes.
        unsafe { release_mapped_pages(&view) };
        assert_eq!(resident_kib(view.as_ptr()), 0);
        assert_eq!(&view[..], &content[..], "the bytes read back from the file");
    }

    #[test]
    fn bytes_off_a_page_boundary_are_left_alone() {
        let data = vec![7u8; 3 * 4096];
        let unaligned = &data[1..];
        // SAFETY: not a mapping, but off a page boundary: never given up.
        unsafe { release_mapped_pages(unaligned) };
        assert!(unaligned.iter().all(|&b| b == 7));
    }

    #[tokio::test]
    async fn large_files_queue_while_small_ones_pass() {
        let budget = ConversionBudget::new(100 << 20);
        let big = budget.acquire(80 << 20).await;
        // A second large file must wait for the first.
        let second = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            budget.acquire(80 << 20),
        )
        .await;
        assert!(second.is_err(), "two large conversions ran at once");
        // A small one passes beside it.
        let small = budget.acquire(1 << 20).await;
        assert_eq!(small.kib, 1024);
        drop(big);
        let second = budget.acquire(80 << 20).await;
        assert_eq!(second.kib, 80 * 1024);
        // Larger than the whole budget: clamped, so it runs once alone.
        drop((second, small));
        let huge = budget.acquire(1 << 40).await;
        assert_eq!(huge.kib, 100 * 1024);
        assert_eq!(budget.available_kib(), 0);
    }
}
