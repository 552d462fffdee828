//! The secondary inputs of a SymCache, looked for beside its debug file on the same
//! sources. A WebAssembly module's source map (omnisym only) is named by the module:
//! the file its `sourceMappingURL` ends in, or the module's path plus `.map`, on the
//! module's own source. The others where and as upstream looks for them, for any
//! module with a debug id: a
//! Unity il2cpp line mapping (`LineNumberMapping.json`), which moves the lines of
//! generated C++ to the C# they came from, and the BCSymbolMap of a bitcode build,
//! reached through the dSYM's UUID map, which restores the names the build hid as
//! `__hidden#N_`. Both rewrite the functions and lines the SymCache writer is given.
//!
//! Not only for `macho` modules: the module's type is a hint, and the dSYM is found for
//! other types too (every native type asks for Mach-O debug files; the SymCache front
//! tries ELF first), so a type check would answer otherwise than upstream does.
//!
//! A mapping that does not parse is a malformed entry of its own download cache and is
//! passed over, so the SymCache is built as if it were missing; the module never pays
//! for it. So is one larger than `max_il2cpp_mapping_size`, refused while it downloads.
//! The download's check reads a mapping keeping nothing of it; the conversion reads it
//! into a table (`il2cpp_mapping`) under the conversion budget, which counts it twice
//! (the file's pages and the table, about the file's size).

use std::path::Path;
use std::sync::Arc;

use futures::future::{self, BoxFuture};
use sourcemap::SourceMap;
use symbolic::common::{Arch, ByteView, DebugId};
use symbolic::debuginfo::macho::{BcSymbolMap, UuidMapping};

use super::il2cpp_mapping::Il2cppMapping;

use crate::cache::{CacheKey, CacheKind, Caches, Scope, kinds};
use crate::error::{CacheError, CacheResult};
use crate::fetch::RemoteFile;
use crate::lookup::{
    Downloads, FileFormat, FoundObject, Locator, Lookup, ObjectMeta, SecondaryFile,
    SecondaryInputs, file_key, first_found, source_map_file_name,
};
use crate::sources::{FileType, ObjectId, SourceConfig};

/// What was found beside a module's debug file.
#[derive(Default)]
pub struct SymCacheInputs {
    bcsymbolmap: Option<SecondaryFile<ByteView<'static>>>,
    il2cpp: Option<SecondaryFile<ByteView<'static>>>,
    wasm_source_map: Option<SecondaryFile<ByteView<'static>>>,
}

impl SymCacheInputs {
    /// What was found, parsed, for the SymCache writer to apply to every function and
    /// line. Both files were checked when they were downloaded; one that no longer
    /// parses is the SymCache's failure, as upstream's. Logged, since candidates do not
    /// list them.
    pub fn parse(&self) -> CacheResult<ParsedInputs<'_>> {
        let mut parsed = ParsedInputs::default();
        if let Some(found) = &self.bcsymbolmap {
            let map = BcSymbolMap::parse(&found.item)
                .map_err(|e| CacheError::Malformed(format!("BCSymbolMap: {e}")))?;
            tracing::debug!(location = found.file.uri(), "applying a BCSymbolMap");
            parsed.bcsymbolmap = Some(map);
        }
        if let Some(found) = &self.il2cpp {
            let mapping = Il2cppMapping::parse(&found.item).map_err(CacheError::Malformed)?;
            tracing::debug!(
                location = found.file.uri(),
                "applying an il2cpp line mapping"
            );
            parsed.il2cpp = Some(mapping);
        }
        if let Some(found) = &self.wasm_source_map {
            let map = SourceMap::from_slice(&found.item)
                .map_err(|e| CacheError::Malformed(format!("source map: {e}")))?;
            tracing::debug!(location = found.file.uri(), "applying a Wasm source map");
            parsed.wasm_source_map = Some(map);
        }
        Ok(parsed)
    }
}

/// A SymCache's secondary inputs, ready to apply.
#[derive(Default)]
pub struct ParsedInputs<'a> {
    pub bcsymbolmap: Option<BcSymbolMap<'a>>,
    pub il2cpp: Option<Il2cppMapping>,
    /// The lines of a WebAssembly module without DWARF.
    pub wasm_source_map: Option<SourceMap>,
}

impl SecondaryInputs for SymCacheInputs {
    type Finder = InputFinder;

    fn find<'a>(
        finder: &'a InputFinder,
        sources: &'a [SourceConfig],
        id: &'a ObjectId,
        object: &'a FoundObject,
        scope: &'a Scope,
    ) -> BoxFuture<'a, Self> {
        Box::pin(async move {
            // A Wasm module's source map is named by the module (where it was found,
            // what its `sourceMappingURL` says), not by an id; one with DWARF answers
            // from it, so its map is not looked for and its SymCache keeps its key.
            if let Ok(meta) = &object.meta
                && meta.arch == Arch::Wasm32
            {
                if meta.features.has_debug_info {
                    return Self::default();
                }
                let wasm_source_map = finder.wasm_source_map(object, meta, scope).await;
                return SymCacheInputs {
                    wasm_source_map,
                    ..Self::default()
                };
            }
            let Some(debug_id) = id.debug_id else {
                return Self::default();
            };
            let bcsymbolmap = finder.bcsymbolmap(sources, debug_id, scope);
            let il2cpp = first_found(
                &finder.locator,
                &finder.il2cpp,
                (sources, id, scope),
                FileType::Il2cpp,
                "il2cpp",
                finder.max_il2cpp_size,
            );
            let (bcsymbolmap, il2cpp) = future::join(bcsymbolmap, il2cpp).await;
            SymCacheInputs {
                bcsymbolmap,
                il2cpp,
                wasm_source_map: None,
            }
        })
    }

    /// In upstream's order: the BCSymbolMap, then the line mapping. The UUID map is not
    /// a part: the BCSymbolMap's location already names the UUID it led to. A Wasm
    /// module's source map is never found beside either.
    fn keys(&self) -> Vec<CacheKey> {
        [&self.bcsymbolmap, &self.il2cpp, &self.wasm_source_map]
            .into_iter()
            .flatten()
            .map(|found| found.key.clone())
            .collect()
    }

    /// A mapping counts twice: its table is about as large as its text; so does a
    /// source map, whose tokens are.
    fn size(&self) -> u64 {
        let len = |f: &Option<SecondaryFile<ByteView<'static>>>| {
            f.as_ref().map_or(0, |f| f.item.len() as u64)
        };
        let tables = len(&self.il2cpp).saturating_add(len(&self.wasm_source_map));
        len(&self.bcsymbolmap).saturating_add(tables.saturating_mul(2))
    }
}

/// The download caches the secondary inputs come from, shared by all requests.
pub struct InputFinder {
    locator: Arc<Locator>,
    il2cpp: Downloads<Il2cppFile>,
    auxdifs: Downloads<AuxDifFile>,
    wasm_source_maps: Downloads<WasmSourceMapFile>,
    /// `max_il2cpp_mapping_size`.
    max_il2cpp_size: u64,
    /// `max_wasm_source_map_size`.
    max_wasm_source_map_size: u64,
}

impl InputFinder {
    pub fn new(caches: &Caches, lookup: &Lookup) -> Self {
        let downloader = lookup.locator.downloader().clone();
        InputFinder {
            locator: lookup.locator.clone(),
            il2cpp: Downloads::new(caches, downloader.clone()),
            auxdifs: Downloads::new(caches, downloader.clone()),
            wasm_source_maps: Downloads::new(caches, downloader),
            max_il2cpp_size: lookup.objects.limits().max_il2cpp_mapping_size,
            max_wasm_source_map_size: lookup.objects.limits().max_wasm_source_map_size,
        }
    }

    /// A WebAssembly module's source map, beside the module on the source it came
    /// from: first under the name its `sourceMappingURL` section ends in, then at the
    /// module's own path with `.map` added (Emscripten's and dart2wasm's default name
    /// where the module is stored under its own). The URL itself is never fetched: a
    /// module is data a client uploaded, and would otherwise choose what the server
    /// connects to.
    async fn wasm_source_map(
        &self,
        object: &FoundObject,
        meta: &ObjectMeta,
        scope: &Scope,
    ) -> Option<SecondaryFile<ByteView<'static>>> {
        let source = &object.file.source;
        if matches!(source, SourceConfig::Sentry(_)) {
            // Files there are named by ids, so nothing lies beside another.
            return None;
        }
        let module = object.file.path()?;
        let named = meta
            .source_mapping_url
            .as_deref()
            .and_then(source_map_file_name);
        let beside = named.map(|name| match module.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{name}"),
            None => name.to_owned(),
        });
        let paths = beside.into_iter().chain([format!("{module}.map")]);
        for path in paths {
            let file = RemoteFile::new(source.clone(), path);
            let key = file_key(&file, scope);
            let hint = self.max_wasm_source_map_size;
            if let Ok(item) = self
                .wasm_source_maps
                .get_keyed(key.clone(), &file, hint)
                .await
            {
                return Some(SecondaryFile {
                    file,
                    key: key.derived("wasm_source_map"),
                    item,
                });
            }
        }
        None
    }

    /// The BCSymbolMap of the bitcode build the dSYM `debug_id` came from: the dSYM's UUID
    /// map names that build's UUID, under which the map is stored.
    async fn bcsymbolmap(
        &self,
        sources: &[SourceConfig],
        debug_id: DebugId,
        scope: &Scope,
    ) -> Option<SecondaryFile<ByteView<'static>>> {
        let dsym = ObjectId::from(debug_id);
        let hint = AuxDif::UuidMap(debug_id);
        let query = (sources, &dsym, scope);
        let uuid_map = first_found(
            &self.locator,
            &self.auxdifs,
            query,
            FileType::UuidMap,
            "uuidmap",
            hint,
        );
        let AuxItem::UuidMap(original) = uuid_map.await?.item else {
            return None;
        };
        let build = ObjectId::from(original);
        let query = (sources, &build, scope);
        let hint = AuxDif::BcSymbolMap;
        let map = first_found(
            &self.locator,
            &self.auxdifs,
            query,
            FileType::BcSymbolMap,
            "bcsymbolmap",
            hint,
        );
        let found = map.await?;
        let AuxItem::BcSymbolMap(data) = found.item else {
            return None;
        };
        Some(SecondaryFile {
            file: found.file,
            key: found.key,
            item: data,
        })
    }
}

/// A downloaded secondary input, refused when it is larger than `max` (the `setting`
/// that says so): one the download's limit let through unpacked, say, from an archive.
fn open_within(path: &Path, max: u64, what: &str, setting: &str) -> CacheResult<ByteView<'static>> {
    let data = ByteView::open(path).map_err(CacheError::internal)?;
    if data.len() as u64 > max {
        return Err(CacheError::TooLarge(format!(
            "{what} of {} bytes, past {setting} ({max})",
            data.len()
        )));
    }
    Ok(data)
}

/// A WebAssembly source map, checked to parse as one when it lands; the hint is the
/// largest size accepted (`max_wasm_source_map_size`).
pub struct WasmSourceMapFile;

impl FileFormat for WasmSourceMapFile {
    type Item = ByteView<'static>;
    type Hint = u64;
    const KIND: CacheKind = kinds::WASM_SOURCEMAPS;

    fn max_size(max: &u64) -> u64 {
        *max
    }

    fn prepare(path: &Path, max: &u64) -> CacheResult<Option<std::ops::Range<u64>>> {
        let data = open_within(path, *max, "source map", "max_wasm_source_map_size")?;
        match SourceMap::from_slice(&data) {
            Ok(_) => Ok(None),
            Err(e) => Err(CacheError::Malformed(format!("source map: {e}"))),
        }
    }

    fn load(data: ByteView<'static>, _: &u64) -> CacheResult<Self::Item> {
        Ok(data)
    }
}

/// An il2cpp line mapping, checked to parse when it lands; the hint is the largest
/// size accepted (`max_il2cpp_mapping_size`).
pub struct Il2cppFile;

impl FileFormat for Il2cppFile {
    type Item = ByteView<'static>;
    type Hint = u64;
    const KIND: CacheKind = kinds::IL2CPP;

    fn max_size(max: &u64) -> u64 {
        *max
    }

    fn prepare(path: &Path, max: &u64) -> CacheResult<Option<std::ops::Range<u64>>> {
        let data = open_within(path, *max, "il2cpp line mapping", "max_il2cpp_mapping_size")?;
        Il2cppMapping::check(&data).map_err(CacheError::Malformed)?;
        Ok(None)
    }

    fn load(data: ByteView<'static>, _: &u64) -> CacheResult<Self::Item> {
        Ok(data)
    }
}

/// Which Apple auxiliary file is fetched: a dSYM's UUID map (read for the dSYM's UUID)
/// or a BCSymbolMap.
#[derive(Clone, Copy)]
pub enum AuxDif {
    UuidMap(DebugId),
    BcSymbolMap,
}

#[derive(Clone)]
pub enum AuxItem {
    /// The UUID of the bitcode build the dSYM was compiled from.
    UuidMap(DebugId),
    BcSymbolMap(ByteView<'static>),
}

/// UUID maps and BCSymbolMaps, one cache kind as upstream's `auxdifs`.
pub struct AuxDifFile;

/// More tags than any UUID map has (a dSYM's holds a dozen or two). The XML reader under
/// `UuidMapping` recurses once per level of nesting, so a hostile file nested deeply
/// enough would overflow the stack, which aborts the process whatever isolates the
/// parse; a file with fewer tags than this cannot nest that deep.
const UUID_MAP_MAX_TAGS: usize = 256;

impl AuxDifFile {
    fn original_uuid(dsym: DebugId, data: &[u8]) -> CacheResult<DebugId> {
        let tags = data.iter().filter(|&&b| b == b'<').count();
        if tags > UUID_MAP_MAX_TAGS {
            return Err(CacheError::Malformed(format!(
                "UUID map: {tags} tags, more than a UUID map has"
            )));
        }
        UuidMapping::parse_plist(dsym, data)
            .map(|mapping| mapping.original_uuid())
            .map_err(|e| CacheError::Malformed(format!("UUID map: {e}")))
    }
}

impl FileFormat for AuxDifFile {
    type Item = AuxItem;
    type Hint = AuxDif;
    const KIND: CacheKind = kinds::AUXDIFS;

    fn prepare(path: &Path, hint: &AuxDif) -> CacheResult<Option<std::ops::Range<u64>>> {
        let data = ByteView::open(path).map_err(CacheError::internal)?;
        match hint {
            AuxDif::UuidMap(dsym) => Self::original_uuid(*dsym, &data).map(|_| None),
            AuxDif::BcSymbolMap => BcSymbolMap::parse(&data)
                .map(|_| None)
                .map_err(|e| CacheError::Malformed(format!("BCSymbolMap: {e}"))),
        }
    }

    fn load(data: ByteView<'static>, hint: &AuxDif) -> CacheResult<Self::Item> {
        match hint {
            AuxDif::UuidMap(dsym) => Self::original_uuid(*dsym, &data).map(AuxItem::UuidMap),
            AuxDif::BcSymbolMap => Ok(AuxItem::BcSymbolMap(data)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `original_uuid` on a thread with the stack of tokio's threads (2 MiB), where the
    /// server parses UUID maps.
    fn on_a_server_stack(plist: String) -> CacheResult<DebugId> {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || AuxDifFile::original_uuid(DebugId::nil(), plist.as_bytes()))
            .unwrap()
            .join()
            .unwrap()
    }

    fn nested(levels: usize) -> String {
        format!("<plist version=\"1.0\">{}", "<dict>".repeat(levels))
    }

    /// Nesting past the stack is refused before the XML reader recurses into it (this
    /// test aborts otherwise), and the deepest file the limit lets through is read on
    /// that stack, in a debug build's larger frames.
    #[test]
    fn a_uuid_map_cannot_nest_deep_enough_to_overflow_the_stack() {
        let deep = on_a_server_stack(nested(100_000));
        assert!(matches!(deep, Err(CacheError::Malformed(_))), "{deep:?}");
        let at_limit = on_a_server_stack(nested(UUID_MAP_MAX_TAGS - 1));
        assert!(
            matches!(at_limit, Err(CacheError::Malformed(_))),
            "{at_limit:?}"
        );
    }

    #[test]
    fn the_fixture_uuid_map_names_the_bitcode_build() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bcsymbolmap");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        let plist = std::fs::read_to_string(dir.join("game.uuidmap.plist")).unwrap();
        let original: DebugId = manifest["original_uuid"].as_str().unwrap().parse().unwrap();
        assert_eq!(on_a_server_stack(plist), Ok(original));
    }
}
