//! The shared shape of every cache derived from a debug file (SymCache, PpdbCache,
//! CFI caches): pick the best candidate for the purpose, build or load the derived cache
//! from it, and record on that candidate whether it could be used.

use std::fs::File;
use std::io::BufWriter;

use symbolic::debuginfo::Object;
use tempfile::NamedTempFile;

use super::objects::{FoundObject, ObjectPurpose, ObjectsActor};
use crate::cache::{CacheError, CacheItemRequest, CacheResult, Cacher, Scope};
use crate::sources::{FileType, ObjectId, SourceConfig};
use crate::types::{AllObjectCandidates, ObjectFeatures, ObjectUseInfo};

/// A derived cache (or why there is none), every candidate consulted, and the features
/// of the file it was built from.
pub struct Derived<T> {
    pub cache: CacheResult<T>,
    pub candidates: AllObjectCandidates,
    pub features: ObjectFeatures,
    /// The file the cache was built from, when it also carries sources (embedded in
    /// DWARF, a portable PDB), so source context needs no second lookup.
    pub with_sources: Option<FoundObject>,
}

/// What a derived cache needs besides the generic flow.
pub struct DerivedLookup<'a> {
    pub sources: &'a [SourceConfig],
    pub filetypes: &'a [FileType],
    pub id: &'a ObjectId,
    pub scope: &'a Scope,
    pub purpose: ObjectPurpose,
}

pub async fn fetch_derived<R: CacheItemRequest>(
    objects: &ObjectsActor,
    cacher: &Cacher<R>,
    lookup: DerivedLookup<'_>,
    request: impl FnOnce(FoundObject) -> R,
) -> Derived<R::Item> {
    let find = objects
        .find(
            lookup.sources,
            lookup.filetypes,
            lookup.id,
            lookup.scope,
            lookup.purpose,
        )
        .await;
    let mut candidates = find.candidates;
    let found = match find.found {
        Some(found) => found,
        None => {
            return Derived {
                cache: Err(CacheError::NotFound),
                candidates,
                features: ObjectFeatures::default(),
                with_sources: None,
            };
        }
    };
    let features = match &found.meta {
        Ok(meta) => meta.features.clone(),
        Err(err) => {
            return Derived {
                cache: Err(err.clone()),
                candidates,
                features: ObjectFeatures::default(),
                with_sources: None,
            };
        }
    };
    let with_sources = features.has_sources.then(|| found.clone());
    let key = found.key.derived(cacher.kind().name);
    let (source, location) = (found.file.source_id().clone(), found.file.uri().to_owned());
    let cache = cacher.get(key, request(found)).await;
    let use_info = match &cache {
        Ok(_) => ObjectUseInfo::Ok,
        Err(CacheError::Malformed(_)) => ObjectUseInfo::Malformed,
        Err(err) => ObjectUseInfo::Error {
            details: err.to_string(),
        },
    };
    match lookup.purpose {
        ObjectPurpose::Unwind => candidates.set_unwind(&source, &location, use_info),
        _ => candidates.set_debug(&source, &location, use_info),
    }
    Derived {
        cache,
        candidates,
        features,
        with_sources,
    }
}

/// Fetches the debug file behind `found` and runs `convert` on it off the async workers
/// (conversion is CPU-bound), writing its output into `temp_file`.
pub async fn convert_object(
    objects: &ObjectsActor,
    found: &FoundObject,
    id: &ObjectId,
    temp_file: &mut NamedTempFile,
    convert: impl FnOnce(&Object<'_>, &mut BufWriter<File>) -> CacheResult<()> + Send + 'static,
) -> CacheResult<()> {
    let handle = objects.fetch(found, id).await?;
    let file = temp_file
        .as_file()
        .try_clone()
        .map_err(CacheError::internal)?;
    tokio::task::spawn_blocking(move || {
        let mut writer = BufWriter::new(file);
        convert(handle.object(), &mut writer)?;
        writer.into_inner().map_err(CacheError::internal)?;
        Ok(())
    })
    .await
    .map_err(CacheError::internal)?
}
