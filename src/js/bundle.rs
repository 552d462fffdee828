//! Artifact bundles: the zip (behind symbolic's `SYSB` source-bundle header) that
//! Sentry's tooling uploads, whose `manifest.json` lists each file with its URL, type
//! (`minified_source`, `source_map`, `source`) and headers (`Sourcemap`, `debug-id`).
//! Files are found by debug id and type, or by URL; several bundles of one request are
//! searched in a stable order, as upstream searches them.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use symbolic::common::{ByteView, DebugId, SelfCell};
use symbolic::debuginfo::ParseObjectOptions;
use symbolic::debuginfo::sourcebundle::{
    SourceBundle, SourceBundleDebugSession, SourceBundleWriter, SourceFileDescriptor,
    SourceFileInfo, SourceFileType,
};

use super::discovery::SourceMapUrl;
use super::interface::{CachedFileUri, FileKey, ResolvedWith};
use super::paths::release_file_candidate_urls;
use super::text::SourceText;
use crate::error::{CacheError, CacheResult, isolate};
use crate::fetch::DecompressLimits;

/// What one artifact bundle may hold: its entries are inflated on demand, each into a
/// string of its declared size, so a small bundle could otherwise claim gigabytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleLimits {
    /// Files in the zip, the manifest included.
    pub max_entries: usize,
    /// How far one entry may inflate: `object_file_max_decompressed_source_size`, and
    /// `max_decompression_ratio` above `decompression_ratio_floor`.
    pub entries: DecompressLimits,
}

impl Default for BundleLimits {
    fn default() -> Self {
        let objects = crate::lookup::ObjectLimits::default();
        BundleLimits {
            max_entries: 100_000,
            entries: objects.sources(),
        }
    }
}

/// What is kept of artifact bundles between requests: bundles kept opened (their zip
/// directory and manifest parsed), and bytes of files read out of them kept inflated
/// (`caches.in_memory.artifact_bundles` and `artifact_bundle_files`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleMemory {
    pub opened: u64,
    pub file_bytes: u64,
}

/// One opened artifact bundle.
#[derive(Clone)]
pub struct ArtifactBundle {
    session: Arc<SelfCell<ByteView<'static>, SourceBundleDebugSession<'static>>>,
    /// The largest entry's inflated size: what one lookup may read into memory.
    largest_entry: u64,
    /// Where files read out of this bundle are remembered (see [`BundleFileMemo`]).
    memo: Option<BundleFileMemo>,
    /// Tells this opening apart in the memo: two openings of one bundle share nothing.
    id: u64,
}

/// A file asked of one bundle: by debug id and type, or by URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileQuery {
    DebugId(DebugId, SourceFileType),
    Url(String),
}

/// Files already read (inflated) out of opened bundles, and the queries a bundle has no
/// file for, bounded by their bytes. symbolic inflates a file whenever it is asked for
/// it: on warm `/symbolicate-js` traffic that, with opening the bundle, costs a third
/// of every request's work.
#[derive(Clone)]
pub struct BundleFileMemo(moka::sync::Cache<(u64, FileQuery), Option<Arc<BundleFile>>>);

impl BundleFileMemo {
    /// Keeps up to `max_bytes` of files' contents (a miss weighs as its query).
    pub fn new(max_bytes: u64) -> Self {
        BundleFileMemo(
            moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(
                    |(_, query): &(u64, FileQuery), file: &Option<Arc<BundleFile>>| {
                        let query = match query {
                            FileQuery::DebugId(..) => 32,
                            FileQuery::Url(url) => url.len(),
                        };
                        let file = file.as_ref().map_or(0, |f| f.contents.len());
                        u32::try_from(query.saturating_add(file)).unwrap_or(u32::MAX)
                    },
                )
                .build(),
        )
    }
}

/// Every opening gets its own memo entries, so a bundle downloaded again with other
/// contents is never answered from the old one's files.
static OPENINGS: AtomicU64 = AtomicU64::new(0);

impl std::fmt::Debug for ArtifactBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactBundle")
            .field("files", &self.session.get().files().count())
            .finish()
    }
}

/// Checks what the zip of a bundle declares against `limits`, before symbolic reads any
/// of it; returns the largest file's inflated size.
fn check_entries(data: &[u8], limits: &BundleLimits) -> CacheResult<u64> {
    let malformed = |msg: String| CacheError::Malformed(format!("artifact bundle: {msg}"));
    let mut archive =
        zip::ZipArchive::new(Cursor::new(data)).map_err(|e| malformed(e.to_string()))?;
    if archive.len() > limits.max_entries {
        return Err(malformed(format!(
            "{} files, more than max_artifact_bundle_entries ({})",
            archive.len(),
            limits.max_entries
        )));
    }
    // symbolic finds files by name with a zip reader of its own: with one entry per
    // name, both see the same entries, and the sizes checked here are those it reads.
    if archive.has_duplicate_names() {
        return Err(malformed("two files of one name".into()));
    }
    let mut largest_entry = 0;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_data(index)
            .map_err(|e| malformed(e.to_string()))?;
        let (size, compressed) = (entry.size(), entry.compressed_size());
        let name = entry.name().map_err(|e| malformed(e.to_string()))?;
        let why =
            limits
                .entries
                .refuse(compressed, size, "object_file_max_decompressed_source_size");
        if let Some(why) = why {
            return Err(malformed(format!("{name} {why}")));
        }
        largest_entry = largest_entry.max(size);
    }
    // symbolic reads every other entry up to its declared size, but parses the manifest
    // from the whole stream: it must really end where it says.
    let mut manifest = archive
        .by_name(MANIFEST)
        .map_err(|e| malformed(format!("{MANIFEST}: {e}")))?;
    let declared = manifest.size();
    let inflated = std::io::copy(
        &mut (&mut manifest).take(declared.saturating_add(1)),
        &mut std::io::sink(),
    )
    .map_err(|e| malformed(format!("{MANIFEST}: {e}")))?;
    if inflated != declared {
        return Err(malformed(format!(
            "{MANIFEST} inflates to more than its declared {declared} bytes"
        )));
    }
    Ok(largest_entry)
}

const MANIFEST: &str = "manifest.json";

/// A file of a bundle, with what its manifest entry says about it.
#[derive(Debug, Clone)]
pub struct BundleFile {
    /// Shared, so a remembered file (and its line index) is handed out without copying.
    pub contents: SourceText,
    pub ty: SourceFileType,
    pub url: Option<String>,
    /// The `Sourcemap` (or `X-SourceMap`) header, names compared case-insensitively,
    /// else the file's own `sourceMappingURL` comment.
    pub sourcemap_reference: Option<String>,
    /// The `debug-id` header, else the file's `debugId` comment (or a map's field).
    pub debug_id: Option<DebugId>,
}

impl BundleFile {
    fn from_descriptor(descriptor: SourceFileDescriptor<'_>) -> Option<Self> {
        let ty = descriptor.ty();
        let url = descriptor.url().map(str::to_owned);
        let sourcemap_reference = descriptor.source_mapping_url().map(str::to_owned);
        let debug_id = descriptor.debug_id();
        let contents = SourceText::from(descriptor.into_contents()?.into_owned());
        Some(BundleFile {
            contents,
            ty,
            url,
            sourcemap_reference,
            debug_id,
        })
    }

    /// The file's text.
    pub fn text(&self) -> &str {
        self.contents.as_str()
    }

    /// The file's source map, resolved against `abs_path` (the URL the file was asked
    /// for). `Err` for a `data:` URL that does not decode.
    pub fn sourcemap_url(&self, abs_path: &str) -> CacheResult<Option<SourceMapUrl>> {
        self.sourcemap_reference
            .as_deref()
            .map(|r| SourceMapUrl::parse_with_prefix(abs_path, r))
            .transpose()
    }
}

impl ArtifactBundle {
    /// Opens a bundle; anything that is not a readable source bundle, or that declares
    /// more files than `limits` or a file inflating past them, is `Malformed`. Reads the
    /// zip's directory and inflates the manifest: call it on a blocking thread, with
    /// [`ArtifactBundle::open_size`] of the conversion budget.
    pub fn parse(data: ByteView<'static>, limits: &BundleLimits) -> CacheResult<Self> {
        if !SourceBundle::test(&data) {
            return Err(CacheError::Malformed("not an artifact bundle".into()));
        }
        let mut options = ParseObjectOptions::default();
        options.max_decompressed_embedded_source_size =
            Some(usize::try_from(limits.entries.max_size).unwrap_or(usize::MAX));
        isolate("artifact bundle", || {
            let largest_entry = check_entries(&data, limits)?;
            let session = SelfCell::try_new(data, |bytes| {
                let bundle = SourceBundle::parse_with_opts(unsafe { &*bytes }, options)?;
                bundle.debug_session()
            })
            .map_err(|e| CacheError::Malformed(e.to_string()))?;
            Ok(ArtifactBundle {
                session: Arc::new(session),
                largest_entry,
                memo: None,
                id: OPENINGS.fetch_add(1, Ordering::Relaxed),
            })
        })
    }

    /// What opening `data` holds in memory at most, for the conversion budget: the file
    /// and its manifest (as declared; [`ArtifactBundle::parse`] refuses a manifest that
    /// inflates further).
    pub fn open_size(data: &[u8], limits: &BundleLimits) -> u64 {
        let manifest = zip::ZipArchive::new(Cursor::new(data))
            .ok()
            .and_then(|archive| {
                let index = archive.index_for_name(MANIFEST)?;
                let size = archive.by_index_data(index).ok()?.size();
                Some(size.min(limits.entries.max_size))
            })
            .unwrap_or(0);
        (data.len() as u64).saturating_add(manifest)
    }

    /// Remembers the files read out of this opening in `memo`.
    pub fn remembering(mut self, memo: &BundleFileMemo) -> Self {
        self.memo = Some(memo.clone());
        self
    }

    /// The file listed under exactly this URL.
    pub fn file_by_url(&self, url: &str) -> Option<Arc<BundleFile>> {
        self.file(FileQuery::Url(url.to_owned()), true)
            .ok()
            .flatten()
    }

    /// The file of type `ty` with this debug id; a minified file and its map share one.
    pub fn file_by_debug_id(
        &self,
        debug_id: DebugId,
        ty: SourceFileType,
    ) -> Option<Arc<BundleFile>> {
        self.file(FileQuery::DebugId(debug_id, ty), true)
            .ok()
            .flatten()
    }

    /// The file for `query`, from the memo, else read out of the bundle when `read`
    /// (inflating it: on a blocking thread).
    fn file(&self, query: FileQuery, read: bool) -> Result<Option<Arc<BundleFile>>, NotRemembered> {
        let key = (self.id, query);
        if let Some(memo) = &self.memo
            && let Some(file) = memo.0.get(&key)
        {
            return Ok(file);
        }
        if !read {
            return Err(NotRemembered);
        }
        let file = self.read(&key.1).map(Arc::new);
        if let Some(memo) = &self.memo {
            memo.0.insert(key, file.clone());
        }
        Ok(file)
    }

    fn read(&self, query: &FileQuery) -> Option<BundleFile> {
        // Entries are read (unzipped) on demand, from a downloaded archive.
        let session = self.session.get();
        let descriptor = isolate("artifact bundle", || {
            Ok(match query {
                FileQuery::Url(url) => session.source_by_url(url),
                FileQuery::DebugId(debug_id, ty) => session.source_by_debug_id(*debug_id, *ty),
            })
        })
        .and_then(|r| r.map_err(|e| CacheError::Malformed(e.to_string())));
        match descriptor {
            Ok(descriptor) => descriptor.and_then(BundleFile::from_descriptor),
            Err(err) => {
                tracing::debug!(error = %err, ?query, "unreadable file in artifact bundle");
                None
            }
        }
    }
}

/// A memo-only search met a file the memo does not hold.
#[derive(Debug)]
pub struct NotRemembered;

/// A file found in one of a request's bundles.
#[derive(Debug, Clone)]
pub struct FoundInBundle {
    /// `Bundled(bundle_uri, key)`, as `data.sourcemap_origin` reports it.
    pub uri: CachedFileUri,
    pub file: Arc<BundleFile>,
    /// `DebugId` when found by debug id, else how the bundle itself was found.
    pub resolved_with: ResolvedWith,
}

/// The bundles a request has opened, by URI. Later URIs (in string order) are searched
/// first, as upstream does, so the answer does not depend on the order the lookup API
/// listed them in. Cloning shares the opened bundles.
#[derive(Clone, Debug, Default)]
pub struct ArtifactBundles {
    bundles: BTreeMap<String, CacheResult<(ArtifactBundle, ResolvedWith)>>,
}

impl ArtifactBundles {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn contains(&self, uri: &str) -> bool {
        self.bundles.contains_key(uri)
    }

    pub fn is_empty(&self) -> bool {
        self.bundles.is_empty()
    }

    /// Records a bundle (or why it could not be had); returns `false` if `uri` was
    /// already known, and then keeps the first.
    pub fn insert(
        &mut self,
        uri: impl Into<String>,
        bundle: CacheResult<ArtifactBundle>,
        resolved_with: ResolvedWith,
    ) -> bool {
        let uri = uri.into();
        if self.bundles.contains_key(&uri) {
            return false;
        }
        self.bundles.insert(uri, bundle.map(|b| (b, resolved_with)));
        true
    }

    /// What one [`ArtifactBundles::find`] may read into memory: the largest file of any
    /// opened bundle (it reads one file, where it finds it).
    pub fn largest_entry(&self) -> u64 {
        self.opened()
            .map(|(_, bundle, _)| bundle.largest_entry)
            .max()
            .unwrap_or(0)
    }

    fn opened(&self) -> impl Iterator<Item = (&String, &ArtifactBundle, ResolvedWith)> {
        self.bundles
            .iter()
            .rev()
            .filter_map(|(uri, b)| b.as_ref().ok().map(|(b, rw)| (uri, b, *rw)))
    }

    /// Finds the file for `key`: by its debug id (and type) in any bundle first, then
    /// by each of its candidate URLs in turn, each in every bundle. May inflate files:
    /// call it on a blocking thread.
    pub fn find(&self, key: &FileKey) -> Option<FoundInBundle> {
        self.search(key, true).ok().flatten()
    }

    /// [`ArtifactBundles::find`] from the bundles' memos alone: `Err` when the answer
    /// needs a file read, so that only then a blocking thread is taken.
    pub fn find_remembered(&self, key: &FileKey) -> Result<Option<FoundInBundle>, NotRemembered> {
        self.search(key, false)
    }

    fn search(&self, key: &FileKey, read: bool) -> Result<Option<FoundInBundle>, NotRemembered> {
        if let Some(debug_id) = key.debug_id() {
            for (uri, bundle, _) in self.opened() {
                let query = FileQuery::DebugId(debug_id, key.file_type());
                if let Some(file) = bundle.file(query, read)? {
                    return Ok(Some(FoundInBundle {
                        uri: CachedFileUri::Bundled(uri.clone(), key.clone()),
                        file,
                        resolved_with: ResolvedWith::DebugId,
                    }));
                }
            }
        }
        let Some(abs_path) = key.abs_path() else {
            return Ok(None);
        };
        for url in release_file_candidate_urls(abs_path) {
            for (uri, bundle, resolved_with) in self.opened() {
                if let Some(file) = bundle.file(FileQuery::Url(url.clone()), read)? {
                    return Ok(Some(FoundInBundle {
                        uri: CachedFileUri::Bundled(uri.clone(), key.clone()),
                        file,
                        resolved_with,
                    }));
                }
            }
        }
        Ok(None)
    }
}

/// One file to put into an artifact bundle.
pub struct BundleEntry<'a> {
    pub url: &'a str,
    pub ty: SourceFileType,
    pub contents: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
}

/// Writes an artifact bundle as Sentry's tooling uploads it, with symbolic's own writer:
/// what the project's tests, fixtures and load script serve.
pub fn write_bundle(entries: &[BundleEntry<'_>]) -> CacheResult<ByteView<'static>> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut writer = SourceBundleWriter::start(&mut out).map_err(CacheError::internal)?;
    for (i, entry) in entries.iter().enumerate() {
        let mut info = SourceFileInfo::new();
        info.set_ty(entry.ty);
        info.set_url(entry.url.to_owned());
        for (name, value) in entry.headers {
            info.add_header(name.to_string(), value.to_string());
        }
        writer
            .add_file(format!("files/_/_/{i}"), entry.contents.as_bytes(), info)
            .map_err(CacheError::internal)?;
    }
    writer.finish().map_err(CacheError::internal)?;
    Ok(ByteView::from_vec(out.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::{BundleEntry as Entry, *};

    const ID: &str = "5943c33d-70f5-499d-b4e1-9b5d5cac3781";

    fn bundle(entries: &[Entry<'_>]) -> ArtifactBundle {
        ArtifactBundle::parse(write_bundle(entries).unwrap(), &BundleLimits::default()).unwrap()
    }

    fn minified(url: &'static str, contents: &'static str) -> Entry<'static> {
        Entry {
            url,
            ty: SourceFileType::MinifiedSource,
            contents,
            headers: &[],
        }
    }

    #[test]
    fn files_are_found_by_url_with_their_headers() {
        let b = bundle(&[Entry {
            url: "~/app.min.js",
            ty: SourceFileType::MinifiedSource,
            contents: "a();",
            headers: &[("Sourcemap", "app.min.js.map")],
        }]);
        let file = b.file_by_url("~/app.min.js").unwrap();
        assert_eq!(file.text(), "a();");
        assert_eq!(file.ty, SourceFileType::MinifiedSource);
        assert_eq!(file.sourcemap_reference.as_deref(), Some("app.min.js.map"));
        assert_eq!(
            file.sourcemap_url("http://example.com/js/app.min.js"),
            Ok(Some(SourceMapUrl::Remote(
                "http://example.com/js/app.min.js.map".into()
            )))
        );
        assert!(b.file_by_url("~/other.js").is_none());
    }

    #[test]
    fn without_a_header_the_comment_names_the_map() {
        let b = bundle(&[minified("~/a.js", "a();\n//# sourceMappingURL=a.js.map\n")]);
        let file = b.file_by_url("~/a.js").unwrap();
        assert_eq!(file.sourcemap_reference.as_deref(), Some("a.js.map"));
    }

    #[test]
    fn files_are_found_by_debug_id_and_type() {
        let debug_id: DebugId = ID.parse().unwrap();
        let b = bundle(&[
            Entry {
                url: "~/a.js",
                ty: SourceFileType::MinifiedSource,
                contents: "a();",
                headers: &[("debug-id", ID)],
            },
            Entry {
                url: "~/a.js.map",
                ty: SourceFileType::SourceMap,
                contents: "{}",
                headers: &[("Debug-Id", ID)],
            },
        ]);
        let map = b
            .file_by_debug_id(debug_id, SourceFileType::SourceMap)
            .unwrap();
        assert_eq!((map.text(), map.url.as_deref()), ("{}", Some("~/a.js.map")));
        let js = b
            .file_by_debug_id(debug_id, SourceFileType::MinifiedSource)
            .unwrap();
        assert_eq!(js.debug_id, Some(debug_id));
        assert!(
            b.file_by_debug_id(debug_id, SourceFileType::Source)
                .is_none()
        );
    }

    #[test]
    fn bundles_past_their_limits_are_malformed() {
        let zeros = "\0".repeat(256 << 10);
        let data = write_bundle(&[
            minified("~/a.js", "a();"),
            Entry {
                url: "~/zeros.js",
                ty: SourceFileType::MinifiedSource,
                contents: &zeros,
                headers: &[],
            },
        ])
        .unwrap();
        assert!(data.len() < 16 << 10, "{} bytes", data.len());
        let limits = |max_entries, max_size, max_ratio| BundleLimits {
            max_entries,
            entries: DecompressLimits {
                max_size,
                max_ratio,
                ratio_floor: 0,
            },
        };
        let refused = |limits: BundleLimits, because: &str| match ArtifactBundle::parse(
            data.clone(),
            &limits,
        ) {
            Err(CacheError::Malformed(msg)) => assert!(msg.contains(because), "{msg}"),
            other => panic!("{other:?}"),
        };
        // Two files and the manifest.
        let roomy = limits(3, 1 << 20, 1000);
        let bundle = ArtifactBundle::parse(data.clone(), &roomy).unwrap();
        assert_eq!(bundle.largest_entry, 256 << 10);
        assert_eq!(bundle.file_by_url("~/zeros.js").unwrap().text(), zeros);
        refused(limits(2, 1 << 20, 1000), "max_artifact_bundle_entries");
        refused(
            limits(3, 128 << 10, 1000),
            "object_file_max_decompressed_source_size",
        );
        refused(limits(3, 1 << 20, 100), "max_decompression_ratio");
        // What opening costs: the file and its manifest.
        let size = ArtifactBundle::open_size(&data, &roomy);
        assert!(
            size > data.len() as u64 && size < data.len() as u64 + (4 << 10),
            "{size}"
        );
    }

    #[test]
    fn junk_is_malformed() {
        for data in [&b""[..], b"PK\x03\x04", b"SYSB\x02\x00\x00\x00garbage"] {
            assert!(matches!(
                ArtifactBundle::parse(ByteView::from_slice(data), &BundleLimits::default()),
                Err(CacheError::Malformed(_))
            ));
        }
    }

    #[test]
    fn remembered_files_answer_without_reading_and_never_cross_openings() {
        let memo = BundleFileMemo::new(1024 * 1024);
        let key = FileKey::MinifiedSource {
            abs_path: "http://example.com/a.js".into(),
            debug_id: None,
        };
        let missing = FileKey::MinifiedSource {
            abs_path: "http://example.com/b.js".into(),
            debug_id: None,
        };
        // Two openings of the same URLs with other contents, as after a new download.
        let mut first = ArtifactBundles::new();
        let one = bundle(&[minified("~/a.js", "one")]).remembering(&memo);
        first.insert(
            "sentry://project_debug_file/1",
            Ok(one),
            ResolvedWith::Release,
        );
        let mut second = ArtifactBundles::new();
        let two = bundle(&[minified("~/a.js", "two")]).remembering(&memo);
        second.insert(
            "sentry://project_debug_file/1",
            Ok(two),
            ResolvedWith::Release,
        );

        assert!(first.find_remembered(&key).is_err(), "nothing read yet");
        assert_eq!(first.find(&key).unwrap().file.text(), "one");
        let remembered = first.find_remembered(&key).unwrap().unwrap();
        assert_eq!(remembered.file.text(), "one");
        assert_eq!(remembered.resolved_with, ResolvedWith::Release);
        // A miss is remembered too, once every candidate URL was asked.
        assert!(first.find(&missing).is_none());
        assert!(matches!(first.find_remembered(&missing), Ok(None)));

        assert!(second.find_remembered(&key).is_err(), "another opening");
        assert_eq!(second.find(&key).unwrap().file.text(), "two");
        assert_eq!(first.find(&key).unwrap().file.text(), "one");
    }

    #[test]
    fn without_room_nothing_is_remembered() {
        let memo = BundleFileMemo::new(0);
        let mut bundles = ArtifactBundles::new();
        let one = bundle(&[minified("~/a.js", "one")]).remembering(&memo);
        bundles.insert(
            "sentry://project_debug_file/1",
            Ok(one),
            ResolvedWith::Release,
        );
        let key = FileKey::MinifiedSource {
            abs_path: "http://example.com/a.js".into(),
            debug_id: None,
        };
        assert_eq!(bundles.find(&key).unwrap().file.text(), "one");
        memo.0.run_pending_tasks();
        assert!(bundles.find_remembered(&key).is_err());
    }

    #[test]
    fn the_last_bundle_in_uri_order_wins() {
        let mut bundles = ArtifactBundles::new();
        // Inserted in the "wrong" order: the answer must not depend on it.
        let correct = bundle(&[minified("~/a.js", "correct")]);
        let wrong = bundle(&[minified("~/a.js", "wrong")]);
        assert!(bundles.insert(
            "sentry://project_debug_file/2",
            Ok(correct),
            ResolvedWith::Release
        ));
        assert!(bundles.insert(
            "sentry://project_debug_file/1",
            Ok(wrong),
            ResolvedWith::Release
        ));
        assert!(!bundles.insert(
            "sentry://project_debug_file/1",
            Err(CacheError::NotFound),
            ResolvedWith::Release
        ));
        let key = FileKey::MinifiedSource {
            abs_path: "http://example.com/a.js".into(),
            debug_id: None,
        };
        let found = bundles.find(&key).unwrap();
        assert_eq!(found.file.text(), "correct");
        assert_eq!(found.resolved_with, ResolvedWith::Release);
        assert_eq!(
            found.uri,
            CachedFileUri::Bundled("sentry://project_debug_file/2".into(), key)
        );
    }

    #[test]
    fn debug_ids_beat_urls_and_urls_are_tried_in_candidate_order() {
        let mut bundles = ArtifactBundles::new();
        let by_url = bundle(&[
            minified("~/a.js", "tilde"),
            minified("http://example.com/a.js", "absolute"),
        ]);
        let by_id = bundle(&[Entry {
            url: "~/elsewhere.js",
            ty: SourceFileType::MinifiedSource,
            contents: "by id",
            headers: &[("debug-id", ID)],
        }]);
        bundles.insert("b", Ok(by_url), ResolvedWith::Index);
        bundles.insert("a", Ok(by_id), ResolvedWith::DebugId);
        bundles.insert("c", Err(CacheError::NotFound), ResolvedWith::Release);

        let with_id = FileKey::MinifiedSource {
            abs_path: "http://example.com/a.js?v=1".into(),
            debug_id: Some(ID.parse().unwrap()),
        };
        let found = bundles.find(&with_id).unwrap();
        assert_eq!(
            (found.file.text(), found.resolved_with),
            ("by id", ResolvedWith::DebugId)
        );

        let without_id = FileKey::MinifiedSource {
            abs_path: "http://example.com/a.js?v=1".into(),
            debug_id: None,
        };
        let found = bundles.find(&without_id).unwrap();
        // `http://example.com/a.js` (query dropped) comes before `~/a.js`.
        assert_eq!(
            (found.file.text(), found.resolved_with),
            ("absolute", ResolvedWith::Index)
        );

        let missing = FileKey::Source {
            abs_path: "http://example.com/b.js".into(),
        };
        assert!(bundles.find(&missing).is_none());
    }
}
