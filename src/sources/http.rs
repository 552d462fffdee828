//! HTTP(S) symbol servers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use url::Url;

use super::common::{CommonSourceConfig, DigestCells, SourceId, url_as_string};
use super::secret::Secret;

/// Headers sent with every request to a source (or a scraped URL): names as they are,
/// values as [`Secret`]s, since they carry credentials (`Authorization`, `Cookie`).
pub type Headers = BTreeMap<String, Secret>;

/// An HTTP(S) symbol server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HttpSourceConfig {
    pub id: SourceId,
    /// Base URL; locations are appended below it as path segments.
    #[serde(with = "url_as_string")]
    pub url: Url,
    /// Extra headers for every request (e.g. authorization). Their values are
    /// credentials: never shown.
    #[serde(default)]
    pub headers: Headers,
    #[serde(flatten)]
    pub files: CommonSourceConfig,
    /// Skip TLS certificate verification for this source.
    #[serde(default)]
    pub accept_invalid_certs: bool,
    /// This config's digests, computed on first use (see `SourceConfig::fingerprint`).
    #[serde(skip)]
    pub digests: DigestCells,
}

impl HttpSourceConfig {
    /// The URL of `path` (a `/`-separated location) below this source's base URL.
    ///
    /// Like upstream, the base is treated as a directory even without a trailing slash, empty
    /// segments are dropped (`a//b` is `a/b`, a leading `/` does not reach the host root), and
    /// each segment is percent-encoded (including `%`, `?` and `#`). Segments that would navigate
    /// (`.`, `..`, or ones the URL parser turns into those by stripping tabs and newlines) are
    /// dropped as well, so the result always stays below the base. Query and fragment of the
    /// base are kept. Returns `None` if the base URL cannot be a base (e.g. `mailto:`).
    ///
    /// An empty `path` names the base URL itself, unchanged.
    pub fn join_url(&self, path: &str) -> Option<Url> {
        if path.is_empty() {
            return Some(self.url.clone());
        }
        let mut url = self.url.clone();
        url.path_segments_mut()
            .ok()?
            .pop_if_empty()
            .extend(path.split('/').filter(|s| is_plain_url_segment(s)));
        Some(url)
    }
}

fn is_plain_url_segment(segment: &str) -> bool {
    // The URL parser silently removes ASCII tab and newlines, so `.\t.` would become `..` *after*
    // the `extend` check for dot segments; judge segments by what the parser will see.
    let seen: String = segment
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    !matches!(seen.as_str(), "" | "." | "..")
}
