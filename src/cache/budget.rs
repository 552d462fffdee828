//! The conversion budget (`caches.conversion_budget`): how many bytes of input files
//! are being turned into caches, or read lazily, at once. (The in-memory budget's split
//! between kinds is in the table of `kinds`.)

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
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
