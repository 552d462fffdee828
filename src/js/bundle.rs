//! Artifact bundles: the zip (behind symbolic's `SYSB` source-bundle header) that
//! Sentry's tooling uploads, whose `manifest.json` lists each file with its URL, type
//! (`minified_source`, `source_map`, `source`) and headers (`Sourcemap`, `debug-id`).
//! Files are found by debug id and type, or by URL; several bundles of one request are
//! searched in a stable order, as upstream searches them.

use std::collections::BTreeMap;

use symbolic::common::{ByteView, DebugId, SelfCell};
use symbolic::debuginfo::sourcebundle::{
    SourceBundle, SourceBundleDebugSession, SourceBundleWriter, SourceFileDescriptor,
    SourceFileInfo, SourceFileType,
};

use super::discovery::SourceMapUrl;
use super::interface::{CachedFileUri, FileKey, ResolvedWith};
use super::paths::release_file_candidate_urls;
use crate::error::{CacheError, CacheResult, isolate};

/// One opened artifact bundle.
pub struct ArtifactBundle {
    session: SelfCell<ByteView<'static>, SourceBundleDebugSession<'static>>,
}

impl std::fmt::Debug for ArtifactBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactBundle")
            .field("files", &self.session.get().files().count())
            .finish()
    }
}

/// A file of a bundle, with what its manifest entry says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    pub contents: String,
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
        let contents = descriptor.into_contents()?.into_owned();
        Some(BundleFile {
            contents,
            ty,
            url,
            sourcemap_reference,
            debug_id,
        })
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
    /// Opens a bundle; anything that is not a readable source bundle is `Malformed`.
    pub fn parse(data: ByteView<'static>) -> CacheResult<Self> {
        if !SourceBundle::test(&data) {
            return Err(CacheError::Malformed("not an artifact bundle".into()));
        }
        isolate("artifact bundle", || {
            let session = SelfCell::try_new(data, |bytes| {
                let bundle = SourceBundle::parse(unsafe { &*bytes })?;
                bundle.debug_session()
            })
            .map_err(|e| CacheError::Malformed(e.to_string()))?;
            Ok(ArtifactBundle { session })
        })
    }

    /// The file listed under exactly this URL.
    pub fn file_by_url(&self, url: &str) -> Option<BundleFile> {
        // Entries are read (unzipped) on demand, from a downloaded archive.
        match isolate("artifact bundle", || {
            Ok(self.session.get().source_by_url(url))
        })
        .and_then(|r| r.map_err(|e| CacheError::Malformed(e.to_string())))
        {
            Ok(descriptor) => descriptor.and_then(BundleFile::from_descriptor),
            Err(err) => {
                tracing::debug!(error = %err, url, "unreadable file in artifact bundle");
                None
            }
        }
    }

    /// The file of type `ty` with this debug id; a minified file and its map share one.
    pub fn file_by_debug_id(&self, debug_id: DebugId, ty: SourceFileType) -> Option<BundleFile> {
        match isolate("artifact bundle", || {
            Ok(self.session.get().source_by_debug_id(debug_id, ty))
        })
        .and_then(|r| r.map_err(|e| CacheError::Malformed(e.to_string())))
        {
            Ok(descriptor) => descriptor.and_then(BundleFile::from_descriptor),
            Err(err) => {
                tracing::debug!(error = %err, %debug_id, "unreadable file in artifact bundle");
                None
            }
        }
    }
}

/// A file found in one of a request's bundles.
#[derive(Debug, Clone)]
pub struct FoundInBundle {
    /// `Bundled(bundle_uri, key)`, as `data.sourcemap_origin` reports it.
    pub uri: CachedFileUri,
    pub file: BundleFile,
    /// `DebugId` when found by debug id, else how the bundle itself was found.
    pub resolved_with: ResolvedWith,
}

/// The bundles a request has opened, by URI. Later URIs (in string order) are searched
/// first, as upstream does, so the answer does not depend on the order the lookup API
/// listed them in.
#[derive(Debug, Default)]
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

    fn opened(&self) -> impl Iterator<Item = (&String, &ArtifactBundle, ResolvedWith)> {
        self.bundles
            .iter()
            .rev()
            .filter_map(|(uri, b)| b.as_ref().ok().map(|(b, rw)| (uri, b, *rw)))
    }

    /// Finds the file for `key`: by its debug id (and type) in any bundle first, then
    /// by each of its candidate URLs in turn, each in every bundle.
    pub fn find(&self, key: &FileKey) -> Option<FoundInBundle> {
        if let Some(debug_id) = key.debug_id() {
            for (uri, bundle, _) in self.opened() {
                if let Some(file) = bundle.file_by_debug_id(debug_id, key.file_type()) {
                    return Some(FoundInBundle {
                        uri: CachedFileUri::Bundled(uri.clone(), key.clone()),
                        file,
                        resolved_with: ResolvedWith::DebugId,
                    });
                }
            }
        }
        let abs_path = key.abs_path()?;
        for url in release_file_candidate_urls(abs_path) {
            for (uri, bundle, resolved_with) in self.opened() {
                if let Some(file) = bundle.file_by_url(&url) {
                    return Some(FoundInBundle {
                        uri: CachedFileUri::Bundled(uri.clone(), key.clone()),
                        file,
                        resolved_with,
                    });
                }
            }
        }
        None
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
        ArtifactBundle::parse(write_bundle(entries).unwrap()).unwrap()
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
        assert_eq!(file.contents, "a();");
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
        assert_eq!(
            (map.contents.as_str(), map.url.as_deref()),
            ("{}", Some("~/a.js.map"))
        );
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
    fn junk_is_malformed() {
        for data in [&b""[..], b"PK\x03\x04", b"SYSB\x02\x00\x00\x00garbage"] {
            assert!(matches!(
                ArtifactBundle::parse(ByteView::from_slice(data)),
                Err(CacheError::Malformed(_))
            ));
        }
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
        assert_eq!(found.file.contents, "correct");
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
            (found.file.contents.as_str(), found.resolved_with),
            ("by id", ResolvedWith::DebugId)
        );

        let without_id = FileKey::MinifiedSource {
            abs_path: "http://example.com/a.js?v=1".into(),
            debug_id: None,
        };
        let found = bundles.find(&without_id).unwrap();
        // `http://example.com/a.js` (query dropped) comes before `~/a.js`.
        assert_eq!(
            (found.file.contents.as_str(), found.resolved_with),
            ("absolute", ResolvedWith::Index)
        );

        let missing = FileKey::Source {
            abs_path: "http://example.com/b.js".into(),
        };
        assert!(bundles.find(&missing).is_none());
    }
}
