//! Every kind of cache file the server keeps, in one table, as upstream's `CacheName`
//! and its versions are: each kind's name (its directory under `cache_dir`), the
//! version of its format and the older versions still read, whether its files are
//! downloaded or derived (which decides their lifetime rules, whether replicas share
//! them, and what a full disk gives up first), and its share of the in-memory budget.
//! Pipelines name their kinds from here; cleanup, offline too, learns them from here.
//!
//! Bump a version when what is written into that kind's files changes. The formats of
//! `symbolic` (SymCache, CFI, SourcemapCache) and of the `proguard` crate are pinned by
//! tests beside their conversions, so a dependency upgrade that changes one forces a
//! bump here.

use serde::Serialize;

/// Whether files of a kind came from sources or were computed from such files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Fetched from sources; local but for original debug files (see
    /// [`CacheKind::is_shared`]).
    Downloaded,
    /// Computed from downloaded files; shared between replicas when a shared cache is
    /// configured.
    Derived,
}

/// A kind of cache file. Files of `version` live in `cache_dir/<name>/<version>`; files
/// of a `compatible` older version are still served (and recomputed in the
/// background), files of any other version count as absent and are removed by cleanup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheKind {
    pub name: &'static str,
    pub version: u32,
    /// Older versions whose files `load` still reads correctly, newest first.
    pub compatible: &'static [u32],
    pub family: Family,
    /// Thousandths of `caches.in_memory.capacity` its items may hold in memory.
    pub memory_share: u64,
}

impl CacheKind {
    /// Whether replicas share files of this kind through the shared cache: derived
    /// ones, and the original debug files, as upstream shares them, so that a fleet
    /// downloads each from its source once. Other downloads (source files, indexes,
    /// JavaScript files) are small or per request, and stay local.
    pub fn is_shared(&self) -> bool {
        self.family == Family::Derived || *self == OBJECTS
    }

    /// Whether files of `version` may be served.
    pub fn is_live(&self, version: u32) -> bool {
        version == self.version || self.compatible.contains(&version)
    }

    /// Bytes of `capacity` this kind may hold in memory.
    pub fn memory(&self, capacity: u64) -> u64 {
        capacity / 1000 * self.memory_share
    }
}

// Memory shares: kinds that every warm request reads (SymCaches, SourcemapCaches,
// ProGuard caches) get most; downloaded files are big and parsed on demand, so they
// get little, since what is hot lives in the derived caches. They add up to 1000.

/// Debug files and executables as downloaded (decompressed).
pub const OBJECTS: CacheKind = kind("objects", Family::Downloaded, (1, &[]), 100);
/// Unity il2cpp line mappings (`LineNumberMapping.json`), secondary inputs of SymCaches.
pub const IL2CPP: CacheKind = kind("il2cpp", Family::Downloaded, (1, &[]), 5);
/// Apple's UUID maps and BCSymbolMaps, secondary inputs of SymCaches (upstream's name).
pub const AUXDIFS: CacheKind = kind("auxdifs", Family::Downloaded, (1, &[]), 5);
/// WebAssembly modules' source maps (Emscripten's, dart2wasm's), read beside the module
/// into its SymCache.
pub const WASM_SOURCEMAPS: CacheKind = kind("wasm_sourcemaps", Family::Downloaded, (1, &[]), 5);
/// What a debug file holds (features, ids), for candidates and lookups.
/// 2: `has_sources` also counts sources embedded in DWARF line tables; v1 is served
/// while v2 is built.
/// 3: the file's own debug id and Breakpad module name; older versions (without them)
/// are served while v3 is built.
/// 4: a WebAssembly module's `sourceMappingURL`; older versions are served while v4 is
/// built (the source map is looked for at `<module>.map` meanwhile).
pub const OBJECT_META: CacheKind = kind("object_meta", Family::Derived, (4, &[3, 2, 1]), 15);
pub const SYMCACHES: CacheKind = kind("symcaches", Family::Derived, (1, &[]), 410);
/// SymCaches built from the symbfiles uploaded for one executable (`native/symbfile`);
/// their own kind, so that a change of what `native/symbfile/convert.rs` writes bumps
/// only them.
pub const SYMBFILE_SYMCACHES: CacheKind = kind("symbfile_symcaches", Family::Derived, (1, &[]), 30);
/// More than its files' share of the disk would say: a SymCache that falls out of
/// memory is mapped again for next to nothing, a CFI cache is indexed again, every
/// request that walks through its module (about 1 ms per MiB of rules).
pub const CFICACHES: CacheKind = kind("cficaches", Family::Derived, (1, &[]), 150);
/// .NET portable PDBs, converted.
pub const PPDB_CACHES: CacheKind = kind("ppdb_caches", Family::Derived, (1, &[]), 50);
/// Source files downloaded from the links in debug files.
pub const SOURCEFILES: CacheKind = kind("sourcefiles", Family::Downloaded, (1, &[]), 15);
/// Segments of symstore `000Admin` indexes.
pub const SYMSTORE_INDEX: CacheKind = kind("symstore_index", Family::Downloaded, (1, &[]), 10);
/// Fetched JavaScript files of every kind (minified sources, source maps, bundles).
pub const SOURCEMAP_FILES: CacheKind = kind("sourcemap_files", Family::Downloaded, (1, &[]), 45);
pub const SOURCEMAP_CACHES: CacheKind = kind("sourcemap_caches", Family::Derived, (1, &[]), 90);
/// ProGuard mapping files as downloaded; kept so a new cache version rebuilds without
/// a download.
pub const PROGUARD_FILES: CacheKind = kind("proguard_files", Family::Downloaded, (1, &[]), 10);
pub const PROGUARD: CacheKind = kind("proguard", Family::Derived, (1, &[]), 60);

/// Every kind, for cleanup and the memory budget.
pub const ALL: &[CacheKind] = &[
    OBJECTS,
    IL2CPP,
    AUXDIFS,
    WASM_SOURCEMAPS,
    OBJECT_META,
    SYMCACHES,
    SYMBFILE_SYMCACHES,
    CFICACHES,
    PPDB_CACHES,
    SOURCEFILES,
    SYMSTORE_INDEX,
    SOURCEMAP_FILES,
    SOURCEMAP_CACHES,
    PROGUARD_FILES,
    PROGUARD,
];

const fn kind(
    name: &'static str,
    family: Family,
    (version, compatible): (u32, &'static [u32]),
    memory_share: u64,
) -> CacheKind {
    CacheKind {
        name,
        version,
        compatible,
        family,
        memory_share,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_whole_budget_and_names_are_unique() {
        let total: u64 = ALL.iter().map(|kind| kind.memory_share).sum();
        assert_eq!(total, 1000);
        let mut names: Vec<_> = ALL.iter().map(|kind| kind.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a kind is listed twice");
        for kind in ALL {
            assert!(!kind.compatible.contains(&kind.version), "{kind:?}");
            assert!(kind.memory_share > 0, "{kind:?}");
        }
    }
}
