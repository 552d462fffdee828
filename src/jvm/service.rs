//! Where a JVM request's files come from: ProGuard mappings by uuid and source bundles by
//! debug id, found on the request's sources through the shared lookup (Sentry's search,
//! or the unified layout on any other source kind), downloaded once, and the mapping
//! turned into a ProGuard cache once per file. Then the pure remapping runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use futures::future;
use symbolic::common::{ByteView, DebugId};
use symbolic::debuginfo::Object;
use symbolic::debuginfo::sourcebundle::SourceBundleDebugSession;

use super::interface::{CompletedJvmSymbolicationResponse, SymbolicateJvmRequest};
use super::mapping::{self, ProguardMapper};
use super::symbolicate::symbolicate_jvm;
use crate::cache::kinds;
use crate::cache::{CacheKind, Caches, DerivedCache, DerivedFormat, Scope};
use crate::error::{CacheError, CacheResult, isolate};
use crate::lookup::{
    Downloads, FileFormat, Locator, ObjectHandle, ObjectLookup, ObjectPurpose, file_key,
};
use crate::sources::{FileType, ObjectId, SourceConfig};

/// A downloaded ProGuard/R8 mapping, checked to be one as it lands, so a wrong file is
/// remembered as `malformed` rather than kept.
struct MappingFile;

impl FileFormat for MappingFile {
    type Item = ByteView<'static>;
    type Hint = ();
    const KIND: CacheKind = kinds::PROGUARD_FILES;

    fn prepare(path: &Path, _hint: &()) -> CacheResult<Option<std::ops::Range<u64>>> {
        let view = ByteView::open(path).map_err(CacheError::internal)?;
        if proguard::ProguardMapping::new(&view).is_valid() {
            Ok(None)
        } else {
            Err(CacheError::Malformed(
                "the file is not a valid ProGuard mapping".into(),
            ))
        }
    }

    fn load(data: ByteView<'static>, _hint: &()) -> CacheResult<Self::Item> {
        Ok(data)
    }
}

/// The ProGuard cache of one mapping file.
struct ProguardFormat;

impl DerivedFormat for ProguardFormat {
    type Input = ByteView<'static>;
    type Item = ProguardMapper;
    const KIND: CacheKind = kinds::PROGUARD;

    fn input_size(input: &ByteView<'static>) -> u64 {
        input.len() as u64
    }

    fn convert(
        input: ByteView<'static>,
        out: &mut std::io::BufWriter<std::fs::File>,
        _scratch: &std::path::Path,
    ) -> CacheResult<()> {
        mapping::write_cache(&input, out)
    }

    fn load(data: ByteView<'static>) -> CacheResult<Self::Item> {
        mapping::load(data)
    }
}

pub struct JvmService {
    locator: Arc<Locator>,
    objects: Arc<ObjectLookup>,
    mapping_files: Arc<Downloads<MappingFile>>,
    mappers: DerivedCache<ProguardFormat>,
}

impl JvmService {
    pub fn new(caches: &Caches, lookup: &crate::lookup::Lookup) -> Self {
        JvmService {
            locator: lookup.locator.clone(),
            objects: lookup.objects.clone(),
            mapping_files: Arc::new(Downloads::new(caches, lookup.locator.downloader().clone())),
            mappers: DerivedCache::new(caches),
        }
    }

    pub async fn symbolicate(
        &self,
        scope: Scope,
        sources: Arc<[SourceConfig]>,
        request: SymbolicateJvmRequest,
    ) -> CompletedJvmSymbolicationResponse {
        let mapping_ids: Vec<DebugId> = dedup(request.mapping_ids());
        let bundle_ids: Vec<DebugId> = if request.options.apply_source_context {
            dedup(request.source_bundle_ids())
        } else {
            Vec::new()
        };
        let (sources, scope) = (&*sources, &scope);
        let (mappings, bundles) = future::join(
            future::join_all(
                mapping_ids
                    .iter()
                    .map(|&id| async move { (id, self.mapper(sources, scope, id).await) }),
            ),
            future::join_all(
                bundle_ids
                    .iter()
                    .map(|&id| async move { (id, self.source_bundle(sources, scope, id).await) }),
            ),
        )
        .await;
        let mappings: HashMap<DebugId, CacheResult<ProguardMapper>> =
            mappings.into_iter().collect();
        let bundles: HashMap<DebugId, Arc<ObjectHandle>> = bundles
            .into_iter()
            .filter_map(|(id, bundle)| Some((id, bundle?)))
            .collect();
        // One session per bundle and request: opening one reads the bundle's manifest.
        let sessions: HashMap<DebugId, SourceBundleDebugSession<'_>> = bundles
            .iter()
            .filter_map(|(id, handle)| match handle.object()? {
                Object::SourceBundle(bundle) => {
                    let session = isolate("source bundle", || Ok(bundle.debug_session().ok()));
                    Some((*id, session.ok()??))
                }
                _ => None,
            })
            .collect();
        let bundle_sources = |bundle: DebugId, path: &str| -> Option<String> {
            let session = sessions.get(&bundle)?;
            // Unzips an entry of a downloaded bundle.
            let descriptor = isolate("source bundle", || {
                Ok(session.source_by_url(path).ok().flatten())
            })
            .ok()??;
            descriptor.contents().map(str::to_owned)
        };
        symbolicate_jvm(request, &mappings, &bundle_sources)
    }

    /// The ProGuard cache for mapping `uuid`: the first file the sources list for it.
    async fn mapper(
        &self,
        sources: &[SourceConfig],
        scope: &Scope,
        uuid: DebugId,
    ) -> CacheResult<ProguardMapper> {
        let id = ObjectId {
            debug_id: Some(uuid),
            ..ObjectId::default()
        };
        let files = self
            .locator
            .list_files(sources, &[FileType::Proguard], &id, scope)
            .await;
        let mut outcome = Err(CacheError::NotFound);
        // A location that does not have the file says nothing; the next one may.
        for file in files {
            let key = file_key(&file, scope);
            let input = {
                let files = self.mapping_files.clone();
                let key = key.clone();
                Box::pin(async move { files.get_keyed(key, &file, ()).await })
            };
            outcome = self.mappers.get(&[&key], input).await;
            if !matches!(outcome, Err(CacheError::NotFound)) {
                break;
            }
        }
        outcome
    }

    /// The source bundle with debug id `id`, if any source has one that parses.
    async fn source_bundle(
        &self,
        sources: &[SourceConfig],
        scope: &Scope,
        id: DebugId,
    ) -> Option<Arc<ObjectHandle>> {
        let id = ObjectId {
            debug_id: Some(id),
            ..ObjectId::default()
        };
        let find = self
            .objects
            .find(
                sources,
                &[FileType::SourceBundle],
                &id,
                scope,
                ObjectPurpose::Source,
            )
            .await;
        let found = find.found.filter(|found| found.meta.is_ok())?;
        self.objects.fetch(&found, &id).await.ok()
    }
}

/// Ids in request order, each once: the client may list a module twice.
fn dedup(ids: impl Iterator<Item = DebugId>) -> Vec<DebugId> {
    let mut seen = std::collections::HashSet::new();
    ids.filter(|id| seen.insert(*id)).collect()
}
