//! A file on a source ([`RemoteFile`]): what names it in candidate reports and cache keys
//! without its credentials, and whose download slots it waits for.

use std::sync::Arc;

use url::Url;

use super::shown_url;
use crate::sources::Headers;
use crate::sources::{
    CommonSourceConfig, HttpSourceConfig, SourceConfig, SourceId, sentry_file_uri,
};

/// One file at one source: where a debug file could be. Its `uri` is what candidate
/// reports show, so it never carries credentials (those stay in the source config).
#[derive(Clone, Debug)]
pub struct RemoteFile {
    pub source: SourceConfig,
    /// Private so that only [`RemoteFile::whole_url`] names a file by its URL, and
    /// then always on an HTTP source.
    location: Location,
    /// Computed once: every warm lookup needs it twice (cache key, candidate report).
    uri: Arc<str>,
    /// What the file's cache entry is named by: see [`Self::cache_identity`].
    identity: Arc<str>,
    /// Where a Sentry file is downloaded from, when Sentry named the URL itself (its
    /// JavaScript artifact lookup does); otherwise the source's download endpoint.
    download_url: Option<Url>,
}

/// Where on its source a file is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Location {
    /// A location in the source's layout; for a Sentry source, Sentry's file id.
    Path(String),
    /// The HTTP source's URL itself: the file is named by a whole URL (a scraped
    /// script, a download URL an API returned, a linked source file).
    Url,
}

/// The location of a file of the store's directory with its version: the store
/// replaces a file in place when a better one is uploaded (a rename, so a new inode and
/// mtime), and the next request must read the new bytes, not a cache entry (or a cached
/// miss) of the old. A stat per lookup; a missing file has a version of its own, so a
/// miss is cached only until the file arrives.
fn store_version(path: &std::path::Path) -> String {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::MetadataExt;
            format!(
                "{shown}\n{}:{}:{}:{}",
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ino()
            )
        }
        Err(_) => format!("{shown}\nabsent"),
    }
}

impl RemoteFile {
    /// The file at `path` in `source`'s layout (for a Sentry source, its file id).
    pub fn new(source: SourceConfig, path: String) -> Self {
        let (uri, location) = match &source {
            SourceConfig::Http(http) => match http.join_url(&path) {
                Some(url) => (shown_url(&url, true), url.to_string()),
                None => (
                    format!("{}{}", shown_url(&http.url, true), path),
                    format!("{}{}", http.url, path),
                ),
            },
            SourceConfig::Filesystem(fs) if fs.id.is_store() => {
                let joined = fs.join_path(&path);
                (joined.display().to_string(), store_version(&joined))
            }
            SourceConfig::Filesystem(fs) => {
                let path = fs.join_path(&path).display().to_string();
                (path.clone(), path)
            }
            SourceConfig::Sentry(_) => (sentry_file_uri(&path), sentry_file_uri(&path)),
            SourceConfig::S3(s3) => (s3.uri(&path), s3.uri(&path)),
            SourceConfig::Gcs(gcs) => (gcs.uri(&path), gcs.uri(&path)),
        };
        RemoteFile::at(source, Location::Path(path), uri, location)
    }

    /// The file at `http`'s URL itself. That URL is the file's own address (from an
    /// event or a debug file), not the source's, so only its userinfo is the source's
    /// secret: the query stays in the `uri`.
    pub fn whole_url(http: HttpSourceConfig) -> Self {
        let (uri, location) = (shown_url(&http.url, false), http.url.to_string());
        let source = SourceConfig::Http(Arc::new(http));
        RemoteFile::at(source, Location::Url, uri, location)
    }

    fn at(source: SourceConfig, location: Location, uri: String, full: String) -> Self {
        let identity = match source.access_digest() {
            Some(digest) => format!("{full}\n{}", hex::encode(digest)),
            None => full,
        };
        RemoteFile {
            source,
            location,
            uri: uri.into(),
            identity: identity.into(),
            download_url: None,
        }
    }

    /// The file Sentry knows as `file_id`, downloaded from `url`. It is reported and
    /// cached under its Sentry id, like a file the debug-file search found.
    pub fn sentry_file(source: SourceConfig, file_id: String, url: Url) -> Self {
        RemoteFile {
            download_url: Some(url),
            ..RemoteFile::new(source, file_id)
        }
    }

    /// The location in the source's layout; `None` for a file named by a whole URL.
    pub fn path(&self) -> Option<&str> {
        match &self.location {
            Location::Path(path) => Some(path),
            Location::Url => None,
        }
    }

    pub fn source_id(&self) -> &SourceId {
        self.source.id()
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// What names this file in cache keys (with its source id): its full location, and
    /// for sources where more decides its bytes (the endpoint, region or URL of a bucket
    /// or Sentry, credentials, headers) a digest of that too, so that a request naming a
    /// configured source's id cannot fill or poison that source's cache entries.
    pub fn cache_identity(&self) -> &str {
        &self.identity
    }

    /// A file named by an absolute URL rather than by a location on a configured source
    /// (a scraped script, a download URL an API returned, a linked source file). It is
    /// fetched like a file of an HTTP source with `headers`, under the same reserved-IP
    /// rule and limits; `source` names it in candidate reports and cache keys.
    pub fn from_url(source: SourceId, url: Url, headers: Headers) -> Self {
        RemoteFile::whole_url(HttpSourceConfig {
            id: source,
            url,
            headers,
            files: CommonSourceConfig::default(),
            accept_invalid_certs: false,
            digests: Default::default(),
        })
    }

    /// Whether files of this source may be shared across request scopes.
    pub fn is_public(&self) -> bool {
        self.source.files().is_public
    }

    /// Which download slots this file waits for: those of its source's whole
    /// configuration, so a client that names a source with a configured source's id does
    /// not queue behind it (nor it behind the client). Files named by a whole URL share
    /// the slots of whatever fetches them (linked sources, scraping) whatever their URL.
    pub(super) fn slot_key(&self) -> [u8; 32] {
        match &self.source {
            SourceConfig::Http(_) if self.location == Location::Url => {
                self.source.fingerprint_without_url()
            }
            source => source.fingerprint(),
        }
    }

    /// Where Sentry said to download this file from, if it named a URL itself.
    pub(super) fn sentry_download_url(&self) -> Option<&Url> {
        self.download_url.as_ref()
    }
}
