//! The in-memory budget (`caches.in_memory.capacity`) split between cache kinds, in one
//! table, so the shares visibly add up.

/// Each kind's share of the budget, in thousandths. Kinds that every warm request reads
/// (SymCaches, SourcemapCaches, ProGuard caches) get most; downloaded files are big and
/// parsed on demand, so they get little, since what is hot lives in the derived caches.
pub const MEMORY_SHARES: &[(&str, u64)] = &[
    ("symcaches", 530),
    ("objects", 110),
    ("cficaches", 60),
    ("ppdb_caches", 50),
    ("sourcemap_caches", 90),
    ("sourcemap_files", 50),
    ("proguard", 60),
    ("proguard_files", 10),
    ("object_meta", 15),
    ("sourcefiles", 15),
    ("symstore_index", 10),
];

/// Thousandths of the budget for a kind missing from the table: enough to work, and a
/// test keeps every kind the server builds in the table.
const UNLISTED_SHARE: u64 = 1;

/// Bytes of `capacity` that the kind `name` may hold in memory.
pub fn memory_share(capacity: u64, name: &str) -> u64 {
    let share = MEMORY_SHARES
        .iter()
        .find(|(kind, _)| *kind == name)
        .map_or(UNLISTED_SHARE, |(_, share)| *share);
    capacity / 1000 * share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_whole_budget() {
        let total: u64 = MEMORY_SHARES.iter().map(|(_, share)| share).sum();
        assert_eq!(total, 1000);
        let mut names: Vec<_> = MEMORY_SHARES.iter().map(|(name, _)| name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), MEMORY_SHARES.len(), "a kind is listed twice");
    }
}
