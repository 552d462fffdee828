//! ProGuard caches: the `proguard` crate's compact, memory-mappable form of a ProGuard/R8
//! mapping file, built once per mapping file and what every warm `/symbolicate-jvm`
//! reads. This file says how the cache is written and read; the derived-cache machinery
//! decides when.

use std::io::Write;
use std::sync::Arc;

use proguard::{ProguardCache, ProguardMapping};
use symbolic::common::{AccessPattern, AsSelf, ByteView, SelfCell};

use crate::error::{CacheError, CacheResult};

/// Writes the ProGuard cache of the mapping file `mapping` into `out`.
///
/// A file that is not a ProGuard mapping (no class line followed by a member line near
/// its start, the `proguard` crate's test) is `Malformed`, which the response reports as
/// an `invalid` mapping.
pub fn write_cache(mapping: &[u8], out: &mut impl Write) -> CacheResult<()> {
    let mapping = ProguardMapping::new(mapping);
    if !mapping.is_valid() {
        return Err(CacheError::Malformed(
            "the file is not a valid ProGuard mapping".into(),
        ));
    }
    ProguardCache::write(&mapping, out).map_err(CacheError::internal)?;
    // Surfaces a failed write now; a `BufWriter` would drop the error on drop.
    out.flush().map_err(CacheError::internal)
}

/// Maps a ProGuard cache file. The header, format version and section sizes are checked
/// here; a file that fails them (torn, or written by another `proguard` version) is
/// `Malformed`, so the cache layer computes it afresh. Past that, every lookup in the
/// `proguard` crate is bounds-checked, so damaged contents give wrong names, never a
/// panic.
pub fn load(data: ByteView<'static>) -> CacheResult<ProguardMapper> {
    // Lookups binary-search classes and members all over the file.
    if let Err(err) = data.hint(AccessPattern::Random) {
        tracing::debug!(error = %err, "madvise on a ProGuard cache failed");
    }
    SelfCell::try_new(data, |bytes| {
        // SAFETY: `SelfCell` keeps the bytes alive and in place as long as the cache.
        ProguardCache::parse(unsafe { &*bytes }).map(MappedCache)
    })
    .map(|cell| ProguardMapper(Arc::new(cell)))
    .map_err(|e| CacheError::Malformed(format!("invalid ProGuard cache: {e}")))
}

/// A loaded ProGuard cache; cheap to clone, shared by all requests that use the mapping.
#[derive(Clone)]
pub struct ProguardMapper(Arc<SelfCell<ByteView<'static>, MappedCache<'static>>>);

impl ProguardMapper {
    pub fn cache(&self) -> &ProguardCache<'_> {
        &self.0.get().0
    }

    /// Size of the cache file, for the memory layer's weights.
    pub fn len(&self) -> usize {
        self.0.owner().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.owner().is_empty()
    }
}

impl std::fmt::Debug for ProguardMapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cache().fmt(f)
    }
}

/// `SelfCell` needs `AsSelf`, which the foreign `ProguardCache` cannot implement here.
pub struct MappedCache<'data>(ProguardCache<'data>);

impl<'slf, 'data: 'slf> AsSelf<'slf> for MappedCache<'data> {
    type Ref = MappedCache<'slf>;

    fn as_self(&'slf self) -> &'slf Self::Ref {
        self
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds and loads the cache of a mapping the way the server does, through a file.
    pub(crate) fn mapper(mapping: &[u8]) -> ProguardMapper {
        let mut file = tempfile::tempfile().unwrap();
        write_cache(mapping, &mut std::io::BufWriter::new(&mut file)).unwrap();
        load(ByteView::map_file(file).unwrap()).unwrap()
    }

    pub(crate) fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/jvm/");
        std::fs::read(format!("{path}{name}")).unwrap()
    }

    #[test]
    fn proguard_cache_format_is_the_one_our_version_was_written_for() {
        // If this fails, the proguard crate changed its cache format: bump cache::kinds::PROGUARD.
        assert_eq!(proguard::PRGCACHE_VERSION, 4);
    }

    #[test]
    fn a_built_cache_loads_and_remaps() {
        let mapper = mapper(&fixture("inline.txt"));
        assert!(!mapper.is_empty());
        assert_eq!(
            mapper.cache().remap_class("a.a"),
            Some("org.birdwatch.app.SightingActivity")
        );
    }

    #[test]
    fn files_that_are_not_mappings_are_malformed() {
        for junk in [
            &b""[..],
            b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
            b"{\"version\": 3, \"sources\": [], \"mappings\": \"\"}",
            b"just some text\nwith lines\n",
            // A class line alone is not enough: nothing follows that could be remapped.
            b"com.example.Foo -> a:\n",
        ] {
            let result = write_cache(junk, &mut Vec::new());
            assert!(
                matches!(result, Err(CacheError::Malformed(_))),
                "{junk:?}: {result:?}"
            );
        }
    }

    #[test]
    fn damaged_cache_files_are_malformed_not_panics() {
        let mut bytes = Vec::new();
        write_cache(&fixture("inline.txt"), &mut bytes).unwrap();
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            bytes[..8].to_vec(),
            bytes[..bytes.len() / 2].to_vec(),
            // Another format's magic.
            [b"SYMC".as_slice(), &bytes[4..]].concat(),
            // A future format version.
            [&bytes[..4], 99u32.to_le_bytes().as_slice(), &bytes[8..]].concat(),
        ];
        for damaged in cases {
            let len = damaged.len();
            let result = load(ByteView::from_vec(damaged));
            assert!(
                matches!(result, Err(CacheError::Malformed(_))),
                "{len} bytes: {result:?}"
            );
        }
    }
}
