//! `SourceConfig`: one source of any kind, as it appears in requests and in the server
//! config file. Each kind's own settings live in a file of their own.

use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::common::{CommonSourceConfig, DigestCells, SourceId};
use super::filesystem::FilesystemSourceConfig;
use super::gcs::GcsSourceConfig;
use super::http::HttpSourceConfig;
use super::s3::S3SourceConfig;
use super::secret::Secret;
use super::sentry::SentrySourceConfig;

/// A configured place to fetch debug files from.
///
/// On the wire this is an object tagged by `"type"`. Unknown fields are ignored, since clients
/// (Sentry) send extra keys such as `"name"`.
///
/// To add a source type: add a variant here and to both wire mirrors below, plus the match arms.
#[derive(Clone, Debug)]
pub enum SourceConfig {
    /// A directory on the local file system.
    Filesystem(Arc<FilesystemSourceConfig>),
    /// An HTTP(S) symbol server.
    Http(Arc<HttpSourceConfig>),
    /// Sentry's debug-file store, searched by id.
    Sentry(Arc<SentrySourceConfig>),
    /// An S3 or S3-compatible bucket.
    S3(Arc<S3SourceConfig>),
    /// A Google Cloud Storage bucket.
    Gcs(Arc<GcsSourceConfig>),
}

// The wire mirrors exist so that the public enum can hold `Arc`s without requiring serde's `rc`
// feature: deserialization builds owned configs and wraps them, serialization borrows.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OwnedSourceConfig {
    Filesystem(FilesystemSourceConfig),
    Http(HttpSourceConfig),
    Sentry(SentrySourceConfig),
    S3(S3SourceConfig),
    Gcs(GcsSourceConfig),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BorrowedSourceConfig<'a> {
    Filesystem(&'a FilesystemSourceConfig),
    Http(&'a HttpSourceConfig),
    Sentry(&'a SentrySourceConfig),
    S3(&'a S3SourceConfig),
    Gcs(&'a GcsSourceConfig),
}

impl<'de> Deserialize<'de> for SourceConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match OwnedSourceConfig::deserialize(deserializer)? {
            OwnedSourceConfig::Filesystem(c) => SourceConfig::Filesystem(Arc::new(c)),
            OwnedSourceConfig::Http(c) => SourceConfig::Http(Arc::new(c)),
            OwnedSourceConfig::Sentry(c) => SourceConfig::Sentry(Arc::new(c)),
            OwnedSourceConfig::S3(c) => SourceConfig::S3(Arc::new(c)),
            OwnedSourceConfig::Gcs(c) => SourceConfig::Gcs(Arc::new(c)),
        })
    }
}

impl Serialize for SourceConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            SourceConfig::Filesystem(c) => BorrowedSourceConfig::Filesystem(c),
            SourceConfig::Http(c) => BorrowedSourceConfig::Http(c),
            SourceConfig::Sentry(c) => BorrowedSourceConfig::Sentry(c),
            SourceConfig::S3(c) => BorrowedSourceConfig::S3(c),
            SourceConfig::Gcs(c) => BorrowedSourceConfig::Gcs(c),
        };
        wire.serialize(serializer)
    }
}

impl SourceConfig {
    pub fn id(&self) -> &SourceId {
        match self {
            SourceConfig::Filesystem(c) => &c.id,
            SourceConfig::Http(c) => &c.id,
            SourceConfig::Sentry(c) => &c.id,
            SourceConfig::S3(c) => &c.id,
            SourceConfig::Gcs(c) => &c.id,
        }
    }

    /// The `"type"` tag of this source.
    pub fn type_name(&self) -> &'static str {
        match self {
            SourceConfig::Filesystem(_) => "filesystem",
            SourceConfig::Http(_) => "http",
            SourceConfig::Sentry(_) => "sentry",
            SourceConfig::S3(_) => "s3",
            SourceConfig::Gcs(_) => "gcs",
        }
    }

    /// Filters and layout shared by all bucket-like sources. Sentry sources have none (files
    /// are found by search, never shared across scopes), so they get the defaults.
    pub fn files(&self) -> &CommonSourceConfig {
        static SEARCHED: LazyLock<CommonSourceConfig> = LazyLock::new(CommonSourceConfig::default);
        match self {
            SourceConfig::Filesystem(c) => &c.files,
            SourceConfig::Http(c) => &c.files,
            SourceConfig::Sentry(_) => &SEARCHED,
            SourceConfig::S3(c) => &c.files,
            SourceConfig::Gcs(c) => &c.files,
        }
    }

    /// Upstream's convention: built-in sources configured by Sentry have ids prefixed `sentry:`.
    pub fn is_builtin(&self) -> bool {
        self.id().as_str().starts_with("sentry:")
    }

    /// This source as the server's config file names it: trusted with the server's own
    /// cloud credentials. A Sentry source always brings its own token, so it has no mark.
    pub fn from_config_file(self) -> Self {
        fn mark<T: Clone>(
            config: Arc<T>,
            parts: impl FnOnce(&mut T) -> (&mut CommonSourceConfig, &mut DigestCells),
        ) -> Arc<T> {
            let mut config = Arc::unwrap_or_clone(config);
            let (files, digests) = parts(&mut config);
            files.from_config_file = true;
            digests.reset();
            Arc::new(config)
        }
        match self {
            SourceConfig::Filesystem(c) => {
                SourceConfig::Filesystem(mark(c, |c| (&mut c.files, &mut c.digests)))
            }
            SourceConfig::Http(c) => {
                SourceConfig::Http(mark(c, |c| (&mut c.files, &mut c.digests)))
            }
            SourceConfig::S3(c) => SourceConfig::S3(mark(c, |c| (&mut c.files, &mut c.digests))),
            SourceConfig::Gcs(c) => SourceConfig::Gcs(mark(c, |c| (&mut c.files, &mut c.digests))),
            sentry @ SourceConfig::Sentry(_) => sentry,
        }
    }

    /// Whether the server's config file names this source.
    pub fn is_from_config_file(&self) -> bool {
        self.files().from_config_file
    }

    /// A digest of everything this source is: every setting, its credentials, and whether
    /// the config file names it. Two sources share it only if they fetch the same files the
    /// same way, so it names a source where a client-chosen id cannot.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.digest_cells().full(|| self.digest(&[]))
    }

    fn digest_cells(&self) -> &DigestCells {
        match self {
            SourceConfig::Filesystem(c) => &c.digests,
            SourceConfig::Http(c) => &c.digests,
            SourceConfig::Sentry(c) => &c.digests,
            SourceConfig::S3(c) => &c.digests,
            SourceConfig::Gcs(c) => &c.digests,
        }
    }

    /// [`Self::fingerprint`] without the base URL: for files named by a whole URL (linked
    /// sources, scraped scripts), whose URL names the file, not how it is fetched.
    pub fn fingerprint_without_url(&self) -> [u8; 32] {
        self.digest(&["url"])
    }

    /// What decides the bytes of a file besides its location: the endpoint, region or
    /// URL it is read from, the credentials (and headers) it is read with, and, without
    /// credentials, whether the server's own may be used. Files whose source differs in
    /// these must never share a cache entry, whatever their ids. `None` where nothing
    /// but the location counts (directories, HTTP without headers), so their keys stay.
    /// Filters and layout only choose which files are asked for, so they do not count.
    pub fn access_digest(&self) -> Option<[u8; 32]> {
        const CHOOSING: &[&str] = &["filters", "layout", "is_public", "has_index"];
        self.digest_cells().access(|| match self {
            SourceConfig::Filesystem(_) => None,
            SourceConfig::Http(c) if c.headers.is_empty() && !c.accept_invalid_certs => None,
            _ => Some(self.digest(CHOOSING)),
        })
    }

    fn digest(&self, leave_out: &[&str]) -> [u8; 32] {
        // Serialising cannot fail (every map key is a string). Object keys come out
        // sorted, so equal configs hash equally.
        let mut settings = serde_json::to_value(self).unwrap_or_default();
        if let Some(settings) = settings.as_object_mut() {
            settings.retain(|key, _| !leave_out.contains(&key.as_str()));
        }
        let mut hasher = Sha256::new();
        let mut part = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        part(settings.to_string().as_bytes());
        // Serialised, credentials read `[redacted]`; two tokens must not look alike.
        for secret in self.secrets() {
            part(secret.expose().as_bytes());
        }
        part(&[u8::from(self.is_from_config_file())]);
        hasher.finalize().into()
    }

    /// The credentials of this source, in a fixed order.
    pub fn secrets(&self) -> Vec<&Secret> {
        match self {
            SourceConfig::Filesystem(_) => Vec::new(),
            SourceConfig::Http(c) => c.headers.values().collect(),
            SourceConfig::Sentry(c) => vec![&c.token],
            SourceConfig::S3(c) => vec![&c.secret_key],
            SourceConfig::Gcs(c) => c.private_key.iter().chain(&c.bearer_token).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Component, Path, PathBuf};

    use super::*;
    use crate::sources::{
        DirectoryLayout, DirectoryLayoutType, FileType, FilenameCasing, FilesystemSourceConfig,
        HttpSourceConfig,
    };

    fn http(url: &str) -> HttpSourceConfig {
        HttpSourceConfig {
            id: SourceId::new("test"),
            url: url.parse().unwrap(),
            headers: BTreeMap::new(),
            files: CommonSourceConfig::default(),
            accept_invalid_certs: false,
            digests: Default::default(),
        }
    }

    fn fs(path: &str) -> FilesystemSourceConfig {
        FilesystemSourceConfig {
            id: SourceId::new("local"),
            path: PathBuf::from(path),
            files: CommonSourceConfig::default(),
            digests: Default::default(),
        }
    }

    fn join(base: &str, path: &str) -> String {
        http(base).join_url(path).unwrap().to_string()
    }

    #[test]
    fn source_id() {
        let id = SourceId::new("sentry:microsoft");
        assert_eq!(id.to_string(), "sentry:microsoft");
        assert_eq!(id.as_str(), "sentry:microsoft");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"sentry:microsoft\"");
        assert_eq!(
            serde_json::from_str::<SourceId>("\"abc\"").unwrap(),
            SourceId::from("abc")
        );
    }

    #[test]
    fn http_source_from_request() {
        let json = r#"{
            "type": "http",
            "id": "sentry:microsoft",
            "name": "Microsoft",
            "not-a-field": {"nested": [1, 2, 3]},
            "url": "https://msdl.microsoft.com/download/symbols/",
            "headers": {"Authorization": "Bearer x"},
            "filters": {"filetypes": ["pe", "pdb"], "path_patterns": ["*.dll"], "unknown": true},
            "layout": {"type": "symstore", "casing": "default", "extra": "x"},
            "is_public": true
        }"#;
        let source: SourceConfig = serde_json::from_str(json).unwrap();
        assert_eq!(source.id().as_str(), "sentry:microsoft");
        assert_eq!(source.type_name(), "http");
        assert!(source.is_builtin());
        let SourceConfig::Http(ref http) = source else {
            panic!("not http: {source:?}");
        };
        assert_eq!(
            http.url.as_str(),
            "https://msdl.microsoft.com/download/symbols/"
        );
        assert_eq!(http.headers["Authorization"].expose(), "Bearer x");
        // Header values are credentials: never shown, yet told apart in cache keys.
        assert!(!format!("{source:?}").contains("Bearer x"));
        assert!(!serde_json::to_string(&source).unwrap().contains("Bearer x"));
        let other: SourceConfig =
            serde_json::from_str(&json.replace("Bearer x", "Bearer y")).unwrap();
        assert_ne!(source.access_digest(), other.access_digest());
        assert!(!http.accept_invalid_certs);
        let files = source.files();
        assert_eq!(files.filters.filetypes, vec![FileType::Pe, FileType::Pdb]);
        assert_eq!(files.layout.ty, DirectoryLayoutType::Symstore);
        assert_eq!(files.layout.casing, FilenameCasing::Default);
        assert!(files.is_public);
        assert!(!files.has_index);
    }

    #[test]
    fn defaults() {
        let source: SourceConfig =
            serde_json::from_str(r#"{"type": "http", "id": "a", "url": "http://x/"}"#).unwrap();
        let files = source.files();
        assert!(files.filters.filetypes.is_empty());
        assert!(files.filters.path_patterns.is_empty());
        assert!(!files.filters.requires_checksum);
        assert_eq!(files.layout, DirectoryLayout::default());
        assert_eq!(files.layout.ty, DirectoryLayoutType::Native);
        assert_eq!(files.layout.casing, FilenameCasing::Default);
        assert!(!files.is_public);
        assert!(!files.has_index);
        let SourceConfig::Http(http) = source else {
            panic!()
        };
        assert!(http.headers.is_empty());

        // A layout object may omit either key.
        let layout: DirectoryLayout = serde_json::from_str(r#"{"casing": "lowercase"}"#).unwrap();
        assert_eq!(layout.ty, DirectoryLayoutType::Native);
        assert_eq!(layout.casing, FilenameCasing::Lowercase);
    }

    #[test]
    fn filesystem_source() {
        let json = r#"{"type": "filesystem", "id": "local", "path": "/srv/symbols",
                       "layout": {"type": "unified"}, "has_index": true, "name": "Local"}"#;
        let source: SourceConfig = serde_json::from_str(json).unwrap();
        assert_eq!(source.type_name(), "filesystem");
        assert!(!source.is_builtin());
        let SourceConfig::Filesystem(ref fs) = source else {
            panic!()
        };
        assert_eq!(fs.path, Path::new("/srv/symbols"));
        assert_eq!(source.files().layout.ty, DirectoryLayoutType::Unified);
        assert!(source.files().has_index);
    }

    #[test]
    fn all_layout_names() {
        for (name, ty) in [
            ("native", DirectoryLayoutType::Native),
            ("symstore", DirectoryLayoutType::Symstore),
            ("symstore_index2", DirectoryLayoutType::SymstoreIndex2),
            ("ssqp", DirectoryLayoutType::Ssqp),
            ("debuginfod", DirectoryLayoutType::Debuginfod),
            ("unified", DirectoryLayoutType::Unified),
            ("slashsymbols", DirectoryLayoutType::SlashSymbols),
        ] {
            let json = format!("\"{name}\"");
            assert_eq!(
                serde_json::from_str::<DirectoryLayoutType>(&json).unwrap(),
                ty
            );
            assert_eq!(serde_json::to_string(&ty).unwrap(), json);
        }
        assert!(serde_json::from_str::<DirectoryLayoutType>("\"slash_symbols\"").is_err());
        for (name, casing) in [
            ("default", FilenameCasing::Default),
            ("uppercase", FilenameCasing::Uppercase),
            ("lowercase", FilenameCasing::Lowercase),
        ] {
            let json = format!("\"{name}\"");
            assert_eq!(
                serde_json::from_str::<FilenameCasing>(&json).unwrap(),
                casing
            );
        }
    }

    #[test]
    fn rejected_configs() {
        // Missing required fields, unknown (not yet supported) types and bad values fail.
        for json in [
            r#"{"type": "http", "id": "a"}"#,
            r#"{"type": "http", "url": "http://x/"}"#,
            r#"{"type": "http", "id": "a", "url": "not a url"}"#,
            r#"{"type": "filesystem", "id": "a"}"#,
            r#"{"type": "ftp", "id": "a", "url": "ftp://x/"}"#,
            r#"{"id": "a", "url": "http://x/"}"#,
            r#"{"type": "http", "id": "a", "url": "http://x/", "layout": {"type": "bogus"}}"#,
            r#"{"type": "http", "id": "a", "url": "http://x/", "filters": {"path_patterns": ["[z-a"]}}"#,
        ] {
            assert!(
                serde_json::from_str::<SourceConfig>(json).is_err(),
                "{json}"
            );
        }
    }

    /// The server config file is YAML; the same shapes must work there.
    #[test]
    fn yaml_config() {
        let yaml = r#"
- id: local
  type: filesystem
  path: /srv/symbols
  layout:
    type: symstore
    casing: lowercase
  filters:
    filetypes: [pe, pdb]
- id: ms
  type: http
  url: https://msdl.microsoft.com/download/symbols/
  is_public: true
  comment: ignored
"#;
        let sources: Vec<SourceConfig> = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(sources.len(), 2);
        assert_eq!(sources[0].files().layout.casing, FilenameCasing::Lowercase);
        assert_eq!(
            sources[0].files().filters.filetypes,
            vec![FileType::Pe, FileType::Pdb]
        );
        assert_eq!(sources[1].type_name(), "http");
        assert!(sources[1].files().is_public);
    }

    #[test]
    fn serde_roundtrip() {
        let json = r#"[
            {"type": "http", "id": "h", "url": "https://example.org/sym",
             "headers": {"X": "y"}, "accept_invalid_certs": true,
             "filters": {"filetypes": ["elf_code"], "path_patterns": ["*libc*"], "requires_checksum": true},
             "layout": {"type": "ssqp", "casing": "uppercase"}, "is_public": true, "has_index": true},
            {"type": "filesystem", "id": "f", "path": "/tmp/s"}
        ]"#;
        let sources: Vec<SourceConfig> = serde_json::from_str(json).unwrap();
        let value = serde_json::to_value(&sources).unwrap();
        assert_eq!(value[0]["type"], "http");
        assert_eq!(value[0]["url"], "https://example.org/sym");
        assert_eq!(value[0]["layout"]["type"], "ssqp");
        assert_eq!(value[0]["layout"]["casing"], "uppercase");
        assert_eq!(value[0]["filters"]["filetypes"][0], "elf_code");
        assert_eq!(value[0]["filters"]["requires_checksum"], true);
        assert_eq!(value[0]["has_index"], true);
        assert_eq!(value[0]["accept_invalid_certs"], true);
        assert_eq!(value[1]["type"], "filesystem");
        assert_eq!(value[1]["path"], "/tmp/s");
        assert_eq!(value[1]["layout"]["type"], "native");

        let again: Vec<SourceConfig> = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&again).unwrap(), value);
    }

    #[test]
    fn join_url_like_upstream() {
        assert_eq!(
            join("https://example.org/base", ""),
            "https://example.org/base"
        );
        assert_eq!(
            join("https://example.org/base", "foo bar"),
            "https://example.org/base/foo%20bar"
        );
        assert_eq!(
            join("https://example.org/base", "foo/bar"),
            "https://example.org/base/foo/bar"
        );
        assert_eq!(
            join("https://example.org/base/", "foo"),
            "https://example.org/base/foo"
        );
        assert_eq!(
            join("https://example.org/base", "/foo"),
            "https://example.org/base/foo"
        );
        assert_eq!(
            join("https://example.org/base", "foo//bar"),
            "https://example.org/base/foo/bar"
        );
        assert_eq!(
            join("https://example.org/", "foo"),
            "https://example.org/foo"
        );
        assert_eq!(
            join("https://example.org", "foo"),
            "https://example.org/foo"
        );
        assert_eq!(
            join("https://example.org/a/b/?token=1", "x/y"),
            "https://example.org/a/b/x/y?token=1"
        );
        assert_eq!(
            join(
                "https://msdl.microsoft.com/download/symbols/",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_"
            ),
            "https://msdl.microsoft.com/download/symbols/crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_"
        );
    }

    #[test]
    fn join_url_encodes_segments() {
        assert_eq!(
            join("https://example.org/s/", "a%2Fb/c?d#e/x\\y"),
            "https://example.org/s/a%252Fb/c%3Fd%23e/x%5Cy"
        );
        assert_eq!(
            join(
                "https://example.org/s/",
                "Slack Helper (GPU)/ABC/Slack Helper (GPU)"
            ),
            "https://example.org/s/Slack%20Helper%20(GPU)/ABC/Slack%20Helper%20(GPU)"
        );
    }

    #[test]
    fn join_url_never_leaves_base() {
        let base = "https://example.org/symbols/";
        for hostile in [
            "..",
            "../..",
            "../../etc/passwd",
            "./../x",
            "a/../../b",
            "%2e%2e/x",
            ".%2E/x",
            ".\t./x",
            "\n..\r/x",
            "..\\..\\x",
        ] {
            let url = http(base).join_url(hostile).unwrap();
            // Nothing left to append yields the base itself, as for an empty location.
            assert!(
                url.path() == "/symbols" || url.path().starts_with("/symbols/"),
                "{hostile:?} escaped to {url}"
            );
            assert_eq!(url.host_str(), Some("example.org"));
        }
        assert_eq!(join(base, "a/../b"), "https://example.org/symbols/a/b");
        assert_eq!(
            join(base, "%2e%2e"),
            "https://example.org/symbols/%252e%252e"
        );
    }

    #[test]
    fn join_url_cannot_be_base() {
        assert!(http("mailto:someone@example.org").join_url("x").is_none());
        assert!(http("data:text/plain,hi").join_url("x").is_none());
    }

    #[test]
    fn join_path() {
        let source = fs("/srv/symbols");
        assert_eq!(
            source.join_path("crash.pdb/ABC1/crash.pdb"),
            Path::new("/srv/symbols/crash.pdb/ABC1/crash.pdb")
        );
        assert_eq!(source.join_path(""), Path::new("/srv/symbols"));
        assert_eq!(source.join_path("/a//b/"), Path::new("/srv/symbols/a/b"));
        assert_eq!(source.join_path("./a/."), Path::new("/srv/symbols/a"));
        assert_eq!(
            source.join_path("Slack Helper (GPU)/x"),
            Path::new("/srv/symbols/Slack Helper (GPU)/x")
        );
        // Relative roots stay relative.
        assert_eq!(fs("syms").join_path("a/b"), Path::new("syms/a/b"));
    }

    #[test]
    fn join_path_never_leaves_base() {
        let source = fs("/srv/symbols");
        for hostile in [
            "..",
            "../../etc/passwd",
            "/etc/passwd",
            "a/../../../b",
            "//etc",
            "./..",
        ] {
            let joined = source.join_path(hostile);
            assert!(
                joined.starts_with("/srv/symbols"),
                "{hostile:?} -> {joined:?}"
            );
            assert!(
                !joined
                    .components()
                    .any(|c| matches!(c, Component::ParentDir)),
                "{hostile:?} -> {joined:?}"
            );
        }
        assert_eq!(
            source.join_path("../../etc/passwd"),
            Path::new("/srv/symbols/etc/passwd")
        );
        // On Unix a backslash is an ordinary file name character, not a separator.
        assert_eq!(
            source.join_path("..\\..\\x"),
            Path::new("/srv/symbols/..\\..\\x")
        );
    }
}
