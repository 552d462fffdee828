//! Source context for native frames, as one step after symbolication: find a file with
//! sources for each module that symbolicated frames point into (a source bundle or
//! portable PDB, else the debug file itself when it embeds sources or links them), cut
//! the lines around each frame, fetch linked sources once per request, and report every
//! file consulted as a candidate.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future;
use symbolic::debuginfo::Object;
use url::Url;

use super::interface::{CompleteStacktrace, RawFrame};
use super::symbolicate::ModuleLookup;
use crate::cache::Scope;
use crate::lookup::{
    BundledSource, ObjectLookup, ObjectPurpose, SourceFiles, context_lines, fetchable_link,
    sourcelink_candidate,
};
use crate::sources::{FileType, SourceConfig};
use crate::types::ObjectCandidate;

/// Fills in `pre_context`/`context_line`/`post_context` (and `source_link`) of
/// `stacktraces`, and adds the candidates it consulted to `lookup`'s modules.
pub async fn apply_source_context(
    objects: &ObjectLookup,
    source_files: &SourceFiles,
    sources: &[SourceConfig],
    scope: &Scope,
    lookup: &mut ModuleLookup,
    stacktraces: &mut [CompleteStacktrace],
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
                    Object::SourceBundle(_) | Object::PortablePdb(_)
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
