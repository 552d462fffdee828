//! Source context for native frames, as one step after symbolication: find a file with
//! sources for each module that symbolicated frames point into (a source bundle or
//! portable PDB, else the debug file itself when it embeds sources or links them), cut
//! the lines around each frame, fetch linked sources once per request, and report every
//! file consulted as a candidate. Frames left without context then ask the request's
//! debuginfod sources (`/buildid/<build id>/source/<path>`), which is how distributions'
//! debuginfod servers hand out their packages' sources (libc frames get context).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future;
use symbolic::debuginfo::Object;
use url::Url;

use super::interface::{CompleteStacktrace, RawFrame};
use super::symbolicate::ModuleLookup;
use crate::cache::Scope;
use crate::fetch::RemoteFile;
use crate::lookup::{
    BundledSource, ObjectLookup, ObjectPurpose, SourceFiles, context_lines, fetchable_link,
    sourcelink_candidate,
};
use crate::sources::{DirectoryLayoutType, FileType, ObjectType, SourceConfig};
use crate::types::ObjectCandidate;

/// How much one request may ask of debuginfod sources for source files
/// (`debuginfod.source_files_per_request`, `debuginfod.source_files_timeout`): each file
/// is one download of up to the source-file size limit, and a distribution's server may
/// be slow or far.
#[derive(Clone, Copy, Debug)]
pub struct DebuginfodSourceLimits {
    pub max_files: usize,
    pub timeout: Duration,
}

/// Fills in `pre_context`/`context_line`/`post_context` (and `source_link`) of
/// `stacktraces`, and adds the candidates it consulted to `lookup`'s modules.
pub async fn apply_source_context(
    objects: &ObjectLookup,
    source_files: &SourceFiles,
    sources: &[SourceConfig],
    scope: &Scope,
    lookup: &mut ModuleLookup,
    stacktraces: &mut [CompleteStacktrace],
    debuginfod: DebuginfodSourceLimits,
) {
    lookup
        .fetch_sources(objects, sources, scope, stacktraces)
        .await;
    let remote = lookup.context_from_local_sources(stacktraces);
    let fetched = future::join_all(remote.into_iter().map(|source| async {
        let result = source_files.fetch(scope, &source.url).await;
        (source, result)
    }))
    .await;
    for (source, result) in fetched {
        if let Ok(bytes) = &result {
            let text = String::from_utf8_lossy(bytes);
            for &(t, f) in &source.frames {
                set_context(&mut stacktraces[t].frames[f].raw, &text);
            }
        }
        lookup.add_candidate(source.module, sourcelink_candidate(&source.url, &result));
    }
    from_debuginfod(
        source_files,
        sources,
        scope,
        lookup,
        stacktraces,
        debuginfod,
    )
    .await;
}

/// Context for frames that still have none, from the request's debuginfod sources:
/// one download per distinct (source, build id, path), at most `limits.max_files` of
/// them, all within `limits.timeout` (what has not arrived by then is left out).
async fn from_debuginfod(
    source_files: &SourceFiles,
    sources: &[SourceConfig],
    scope: &Scope,
    lookup: &mut ModuleLookup,
    stacktraces: &mut [CompleteStacktrace],
    limits: DebuginfodSourceLimits,
) {
    let servers: Vec<&SourceConfig> = sources
        .iter()
        .filter(|s| {
            matches!(s, SourceConfig::Http(_))
                && s.files().layout.ty == DirectoryLayoutType::Debuginfod
        })
        .collect();
    if servers.is_empty() || limits.max_files == 0 {
        return;
    }
    let mut wanted: HashMap<(String, String), Wanted> = HashMap::new();
    for (t, trace) in stacktraces.iter().enumerate() {
        for (f, frame) in trace.frames.iter().enumerate() {
            let raw = &frame.raw;
            if raw.context_line.is_some() || raw.lineno.is_none() {
                continue;
            }
            let Some(path) = raw.abs_path.as_deref().filter(|p| is_plain_abs_path(p)) else {
                continue;
            };
            let Some(entry) = lookup.entry_for(raw.instruction_addr.0, raw.addr_mode) else {
                continue;
            };
            let Ok(ids) = &entry.ids else { continue };
            let Some(build_id) = ids
                .code_id
                .as_ref()
                .filter(|_| ids.object_type == ObjectType::Elf)
            else {
                continue;
            };
            let key = (build_id.as_str().to_owned(), path.to_owned());
            if !wanted.contains_key(&key) && wanted.len() >= limits.max_files {
                continue;
            }
            wanted
                .entry(key)
                .or_insert_with(|| Wanted {
                    module: entry.index,
                    frames: Vec::new(),
                })
                .frames
                .push((t, f));
        }
    }
    if wanted.is_empty() {
        return;
    }
    let fetches = wanted.into_iter().map(|((build_id, path), wanted)| {
        let Wanted { module, frames } = wanted;
        let servers = &servers;
        async move {
            // The servers in the request's order; the first that has the file answers.
            let mut tried = Vec::new();
            for server in servers.iter() {
                // The source's URL is the server's `/buildid/` (where the layout finds
                // `<build id>/debuginfo`), so the source file is beside those.
                let file = RemoteFile::new((*server).clone(), format!("{build_id}/source{path}"));
                let result = source_files.fetch_file(scope, &file).await;
                let found = result.is_ok();
                tried.push((file, result));
                if found {
                    break;
                }
            }
            (module, frames, tried)
        }
    });
    let fetched = tokio::time::timeout(limits.timeout, future::join_all(fetches)).await;
    let Ok(fetched) = fetched else {
        tracing::info!(
            timeout = ?limits.timeout,
            "debuginfod sources: source files past debuginfod.source_files_timeout left out"
        );
        return;
    };
    for (module, frames, tried) in fetched {
        for (file, result) in tried {
            if let Ok(bytes) = &result {
                let text = String::from_utf8_lossy(bytes);
                for &(t, f) in &frames {
                    set_context(&mut stacktraces[t].frames[f].raw, &text);
                }
            }
            lookup.add_candidate(module, debuginfod_candidate(&file, &result));
        }
    }
}

/// A source file (by build id and path) that frames want from a debuginfod source.
struct Wanted {
    /// The request index of the module whose candidates report the downloads.
    module: usize,
    /// `(stack trace, frame)` positions that want its lines.
    frames: Vec<(usize, usize)>,
}

/// An absolute path a debuginfod URL can name as it is: no empty, `.` or `..`
/// segments (a URL would lose or resolve them, and so ask for another file) and no
/// backslashes.
fn is_plain_abs_path(path: &str) -> bool {
    path.strip_prefix('/').is_some_and(|rest| {
        !rest.contains('\\')
            && rest
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != "..")
    })
}

/// The candidate that reports a source file asked of a debuginfod source.
fn debuginfod_candidate(
    file: &RemoteFile,
    result: &crate::error::CacheResult<symbolic::common::ByteView<'static>>,
) -> ObjectCandidate {
    use crate::types::{ObjectDownloadInfo, ObjectFeatures, ObjectUseInfo};
    ObjectCandidate {
        source: file.source_id().clone(),
        location: file.uri().to_owned(),
        download: ObjectDownloadInfo::from_result(result.as_ref().map(|_| ObjectFeatures {
            has_sources: true,
            ..Default::default()
        })),
        unwind: ObjectUseInfo::None,
        debug: ObjectUseInfo::None,
    }
}

impl ModuleLookup {
    /// Looks for files with sources (source bundles, portable PDBs) for the modules
    /// that symbolicated frames point into; every candidate is reported.
    async fn fetch_sources(
        &mut self,
        objects: &ObjectLookup,
        sources: &[SourceConfig],
        scope: &Scope,
        stacktraces: &[CompleteStacktrace],
    ) {
        let referenced =
            self.referenced(stacktraces.iter().flat_map(|s| &s.frames).map(|f| &f.raw));
        let jobs = self
            .modules
            .iter_mut()
            .filter(|m| referenced.contains(&m.index))
            .filter_map(|m| {
                let id = m.ids.as_ref().ok()?.clone();
                Some(async move {
                    let find = objects
                        .find(
                            sources,
                            FileType::sources(),
                            &id,
                            scope,
                            ObjectPurpose::Source,
                        )
                        .await;
                    m.info.candidates.merge(find.candidates);
                    // Without a source bundle, the debug file itself may carry the
                    // sources (DWARF 5 embedded sources).
                    let found = find
                        .found
                        .filter(|f| f.meta.is_ok())
                        .or_else(|| m.debug_file_with_sources.take());
                    if let Some(found) = found
                        && let Ok(handle) = objects.fetch(&found, &id).await
                    {
                        // A PDB that only points to its sources (SRCSRV) has none itself.
                        m.info.features.has_sources |= found
                            .meta
                            .as_ref()
                            .is_ok_and(|meta| meta.features.has_sources);
                        m.sources = Some(handle);
                    }
                })
            });
        future::join_all(jobs).await;
    }

    /// Fills in `pre_context`/`context_line`/`post_context` of frames whose module has
    /// a file with sources that knows the frame's path, and `source_link` where that
    /// file links the source. Sources that are only linked are returned, to be fetched.
    fn context_from_local_sources(
        &self,
        stacktraces: &mut [CompleteStacktrace],
    ) -> Vec<RemoteSource> {
        // Per module and path: several frames usually share a file.
        let mut bundled: HashMap<(usize, String), Option<Arc<BundledSource>>> = HashMap::new();
        let mut remote: HashMap<Url, RemoteSource> = HashMap::new();
        for (t, trace) in stacktraces.iter_mut().enumerate() {
            for (f, frame) in trace.frames.iter_mut().enumerate() {
                let raw = &mut frame.raw;
                let (Some(abs_path), Some(_)) = (raw.abs_path.as_deref(), raw.lineno) else {
                    continue;
                };
                let Some(entry) = self.entry_for(raw.instruction_addr.0, raw.addr_mode) else {
                    continue;
                };
                let Some(handle) = &entry.sources else {
                    continue;
                };
                // Only source bundles and portable PDBs answer through a debug session; a
                // debug file that carries (DWARF) or points to (SRCSRV) its sources is asked
                // directly, without building a session of a whole debug file per request.
                let link = if matches!(
                    handle.object(),
                    Some(Object::SourceBundle(_) | Object::PortablePdb(_))
                ) {
                    let source = bundled
                        .entry((entry.index, abs_path.to_owned()))
                        .or_insert_with(|| handle.bundled_source(abs_path));
                    let Some(source) = source else { continue };
                    if let Some(text) = &source.text {
                        set_context(raw, text);
                    }
                    let fetch = source.text.is_none();
                    source
                        .url
                        .as_deref()
                        .and_then(fetchable_link)
                        .map(|url| (url, fetch))
                } else if let Some(text) = handle.embedded_source(abs_path) {
                    set_context(raw, text);
                    None
                } else {
                    handle
                        .srcsrv_url(abs_path)
                        .and_then(|url| fetchable_link(&url))
                        .map(|url| (url, true))
                };
                if let Some((url, fetch)) = link {
                    raw.source_link = Some(url.to_string());
                    if fetch {
                        RemoteSource::want(&mut remote, url, entry.index, (t, f));
                    }
                }
            }
        }
        remote.into_values().collect()
    }

    /// Reports a linked source download on the module whose frames needed it.
    fn add_candidate(&mut self, module: usize, candidate: ObjectCandidate) {
        if let Some(entry) = self.modules.iter_mut().find(|m| m.index == module) {
            entry.info.candidates.merge_one(candidate);
        }
    }
}

/// A source file that frames' debug info links to instead of embedding.
struct RemoteSource {
    pub url: Url,
    /// The request index of the module whose candidates report the download.
    pub module: usize,
    /// `(stack trace, frame)` positions that want its lines.
    pub frames: Vec<(usize, usize)>,
}

impl RemoteSource {
    /// Notes that the frame at `position` wants `url`, fetched once per request.
    fn want(
        all: &mut HashMap<Url, RemoteSource>,
        url: Url,
        module: usize,
        position: (usize, usize),
    ) {
        all.entry(url.clone())
            .or_insert_with(|| RemoteSource {
                url,
                module,
                frames: Vec::new(),
            })
            .frames
            .push(position);
    }
}

pub fn set_context(frame: &mut RawFrame, text: &str) {
    let Some(lineno) = frame.lineno else { return };
    if let Some((pre, line, post)) = context_lines(text, lineno as usize, 0) {
        frame.pre_context = pre;
        frame.context_line = Some(line);
        frame.post_context = post;
    }
}
