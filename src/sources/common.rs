//! What every source config shares: its id, the settings of bucket-like sources
//! (filters, layout, visibility, index), and how URLs appear on the wire.

use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::filters::SourceFilters;

/// Identifier of a source, chosen freely by whoever configures it (e.g. `sentry:microsoft`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SourceId(String);

/// The id of the store's source for the team; a scope's is `omnisym:store:<scope>`.
/// Reserved: no other source takes one (`store::first_sources` drops them).
pub const STORE_SOURCE_ID: &str = "omnisym:store";

impl SourceId {
    pub fn new(id: impl Into<String>) -> Self {
        SourceId(id.into())
    }

    /// Whether this is one of the store's sources, whose files are replaced in place
    /// (a better upload), so that their cache entries are named by their version too.
    pub fn is_store(&self) -> bool {
        self.0
            .strip_prefix(STORE_SOURCE_ID)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SourceId {
    fn from(id: &str) -> Self {
        SourceId::new(id)
    }
}

impl From<String> for SourceId {
    fn from(id: String) -> Self {
        SourceId(id)
    }
}

/// Settings every bucket-like source has; flattened into the source object on the wire.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CommonSourceConfig {
    pub filters: SourceFilters,
    pub layout: DirectoryLayout,
    /// Whether files from this source may be shared across scopes (e.g. in caches).
    pub is_public: bool,
    /// Whether the source publishes a Symstore index (`000Admin`) that is authoritative for
    /// which files exist.
    pub has_index: bool,
    /// Whether the server's config file names this source (rather than a request). Never
    /// read from JSON or YAML: only loading the config file sets it, so no client can.
    #[serde(skip)]
    pub from_config_file: bool,
}

/// How files are named on a source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct DirectoryLayout {
    #[serde(rename = "type")]
    pub ty: DirectoryLayoutType,
    /// Overrides the layout's casing; needed where lookups are case-sensitive in practice
    /// (S3 buckets, many self-hosted "symstore" servers) although the protocol says otherwise.
    pub casing: FilenameCasing,
}

/// Naming convention of a source. See `docs/advanced/symbol-server-compatibility.md` upstream.
/// The command line (`--layout`) takes the same names as configs and requests.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
pub enum DirectoryLayoutType {
    /// The format native to each file type: LLDB for Mach-O, GDB build-id for ELF/WASM,
    /// Microsoft Symbol Server for PE/PDB, plus Breakpad and source bundles.
    #[default]
    #[serde(rename = "native")]
    #[value(name = "native")]
    Native,
    /// Microsoft Symbol Server (with SSQP key conventions for non-Windows formats).
    #[serde(rename = "symstore")]
    #[value(name = "symstore")]
    Symstore,
    /// Symbol Server with the two-tier `index2.txt` layout.
    #[serde(rename = "symstore_index2")]
    #[value(name = "symstore_index2")]
    SymstoreIndex2,
    /// Symbol Server with SSQP casing rules.
    #[serde(rename = "ssqp")]
    #[value(name = "ssqp")]
    Ssqp,
    /// debuginfod (`{build-id}/executable`, `{build-id}/debuginfo`).
    #[serde(rename = "debuginfod")]
    #[value(name = "debuginfod")]
    Debuginfod,
    /// Sentry's own format produced by `symsorter`.
    #[serde(rename = "unified")]
    #[value(name = "unified")]
    Unified,
    /// `{code_file}/{code_id}/symbols`, for every file type.
    #[serde(rename = "slashsymbols")]
    #[value(name = "slashsymbols")]
    SlashSymbols,
}

/// Casing forced onto every generated location.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilenameCasing {
    /// Keep the layout's own conventions.
    #[default]
    Default,
    Uppercase,
    Lowercase,
}

/// (De)serializes a [`Url`] as its string form, so that `url`'s own `serde` feature is not needed.
pub(crate) mod url_as_string {
    use std::borrow::Cow;

    use serde::{Deserialize, Deserializer, Serializer};
    use url::Url;

    pub fn serialize<S: Serializer>(url: &Url, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(url.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Url, D::Error> {
        let s = Cow::<str>::deserialize(deserializer)?;
        Url::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// [`url_as_string`] for optional URLs.
pub(crate) mod optional_url_as_string {
    use serde::{Deserialize, Deserializer, Serializer};
    use url::Url;

    pub fn serialize<S: Serializer>(url: &Option<Url>, serializer: S) -> Result<S::Ok, S::Error> {
        match url {
            Some(url) => serializer.serialize_some(url.as_str()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Url>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|s| Url::parse(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A source config's digests, each computed once: every warm lookup names its sources
/// by them, and each is a serialisation and a SHA-256 of the whole config.
///
/// A clone starts empty, so a config that is cloned to be changed (the only way to
/// change one behind its `Arc`) computes its own. Whoever changes a config in place
/// must [`reset`](Self::reset) it.
#[derive(Default)]
pub struct DigestCells {
    full: OnceLock<[u8; 32]>,
    access: OnceLock<Option<[u8; 32]>>,
}

impl DigestCells {
    pub fn full(&self, compute: impl FnOnce() -> [u8; 32]) -> [u8; 32] {
        *self.full.get_or_init(compute)
    }

    pub fn access(&self, compute: impl FnOnce() -> Option<[u8; 32]>) -> Option<[u8; 32]> {
        *self.access.get_or_init(compute)
    }

    pub fn reset(&mut self) {
        *self = DigestCells::default();
    }
}

impl Clone for DigestCells {
    fn clone(&self) -> Self {
        DigestCells::default()
    }
}

impl fmt::Debug for DigestCells {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestCells")
    }
}
