//! The symbol store: a team's own uploaded debug files, ProGuard mappings and JS
//! artifacts, on a directory, an S3 bucket or a GCS bucket, and a source for every
//! endpoint. It owns publishing (atomic: a reader sees a whole file or none), the
//! layout, replace-by-better and its recorded outcome, retention, the internal state
//! area the upload protocols keep their chunks in, and the sources it is read through.
//! The upload protocols themselves (sentry-cli, Tecken, symupload) are fronts
//! (`server/compat/`) that call this module.
//!
//! # Layout
//!
//! ```text
//! <root>/                      the team's namespace: exactly the tree `omnisym sort`
//!   ab/cdef…/debuginfo         writes in its unified layout (so `omnisym sort -o
//!   ab/cdef…/debuginfo.meta    <root>` output can seed a store), `.meta` included;
//!   ab/cdef…/executable        JS artifacts at `<id[..2]>/<id[2..]>/minified_source`
//!   ab/cdef…/proguard          and `/source_map`
//!   scopes/<scope>/ab/cdef…/…  one namespace per scope of `store.scopes`, same layout
//!   state/                     the store's own: never a layout path
//!     tmp/                     uploads staging (a directory store: same filesystem,
//!                              so publishing is a rename)
//!     records/<date>.jsonl     one line per publish outcome (directory stores)
//!     superseded/<ns>/<path>.<unix time>   files a better upload replaced
//!     <anything else>          `state_put`'s paths (sentry-cli chunks, …)
//! ```
//! A layout path always starts with a two-character directory (the first two hex
//! digits of an id), so `scopes/` and `state/` can never be one.

pub mod config;
pub mod layout;

mod artifacts;
mod backend;
mod chunk_upload_config;
mod publish;
pub mod retention;
mod state_list;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use http::StatusCode;
use symbolic::common::{ByteView, CodeId, DebugId};
use tempfile::NamedTempFile;

use crate::cache::Scope;
use crate::objstore::ObjectStore;
use crate::sources::{
    CommonSourceConfig, DirectoryLayout, DirectoryLayoutType, FileType, FilesystemSourceConfig,
    SourceConfig, SourceId,
};
use backend::Backend;
pub use chunk_upload_config::ChunkUploadConfig;
pub use config::{Access, StoreBackend, StoreConfig, StoreToken};
pub use publish::Feature;

/// The source id of the team's namespace; a scope's is `omnisym:store:<scope>`.
pub const SOURCE_ID: &str = crate::sources::STORE_SOURCE_ID;
/// The store's own folder: staging, records, superseded files, protocol state.
const STATE: &str = "state";
/// Where scopes' namespaces live.
const SCOPES: &str = "scopes";
/// Below `state/`: files a better upload replaced, at `<key>.<unix time>`.
const SUPERSEDED: &str = "superseded";

/// The store of the config, shared by every front.
#[derive(Clone)]
pub struct Store(Arc<Inner>);

struct Inner {
    config: StoreConfig,
    backend: Backend,
    /// Where uploads stream to before they are published.
    staging: PathBuf,
    /// Publishing one path decides on what is there: one decision at a time per path.
    locks: Vec<tokio::sync::Mutex<()>>,
    /// Every namespace's source, made once: requests take them on their hot path, and
    /// a source made anew would digest its config again (and a GCS source read its
    /// key file) for every request.
    sources: std::sync::OnceLock<NamespaceSources>,
}

struct NamespaceSources {
    team: SourceConfig,
    /// By scope, for each scope `store.scopes` maps a project to.
    scopes: std::collections::HashMap<String, SourceConfig>,
}

/// Whose files: the team's (the default), or one scope's (`store.scopes`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Namespace {
    Team,
    Scope(String),
}

impl Namespace {
    /// The folder of this namespace below the root (`""` or `scopes/<name>/`), the
    /// scope's name made a safe file name as cache scopes are.
    fn prefix(&self) -> String {
        match self {
            Namespace::Team => String::new(),
            Namespace::Scope(scope) => format!("{SCOPES}/{}/", Scope::new(scope).dir_name()),
        }
    }
}

/// One object an upload published (or found already stored).
#[derive(Clone, Debug)]
pub struct Published {
    /// Relative path in its namespace (sort's unified layout).
    pub path: String,
    /// `None` for a JS artifact (a minified source or source map by debug id).
    pub file_type: Option<FileType>,
    pub debug_id: Option<DebugId>,
    pub code_id: Option<CodeId>,
    pub outcome: Outcome,
}

/// What publishing one object did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing was stored under its id.
    Stored,
    /// A file was there, and this one has a feature it lacks.
    Replaced,
    /// A file was there with every feature this one has: it stays.
    KeptExisting,
    /// The same bytes were there.
    AlreadyStored,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Stored => "stored",
            Outcome::Replaced => "replaced",
            Outcome::KeptExisting => "kept_existing",
            Outcome::AlreadyStored => "already_stored",
        }
    }
}

/// Why an upload was refused; nothing of it is published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// 400, 413 or 422; 500 when the store itself failed.
    pub status: StatusCode,
    pub reason: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.reason, self.status.as_u16())
    }
}

impl std::error::Error for Refused {}

fn internal(err: impl std::fmt::Display) -> Refused {
    tracing::error!(error = %err, "the store failed to publish");
    Refused {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        reason: "the store could not write the file".into(),
    }
}

/// A relative, `/`-separated path of plain segments: no `..`, `.`, empty segment,
/// backslash or control character.
fn is_safe_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|s| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && !s.contains('\\')
                && !s.contains(char::is_control)
        })
}

impl Store {
    /// None when the config has no store.
    pub fn open(
        config: &StoreConfig,
        cache_dir: &Path,
        connect_timeout: Duration,
    ) -> anyhow::Result<Option<Store>> {
        let Some(backend_config) = &config.backend else {
            return Ok(None);
        };
        let (backend, staging) = match backend_config {
            StoreBackend::Filesystem { path } => {
                std::fs::create_dir_all(path)
                    .with_context(|| format!("cannot create the store {}", path.display()))?;
                let staging = path.join(STATE).join("tmp");
                (Backend::Directory { root: path.clone() }, staging)
            }
            other => {
                let store = ObjectStore::new(&other.object_store(), connect_timeout)?;
                let staging = config
                    .staging_dir
                    .clone()
                    .unwrap_or_else(|| cache_dir.join("store-staging"));
                (Backend::Bucket(store), staging)
            }
        };
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("cannot create {}", staging.display()))?;
        Ok(Some(Store(Arc::new(Inner {
            config: config.clone(),
            backend,
            staging,
            locks: (0..64).map(|_| tokio::sync::Mutex::new(())).collect(),
            sources: std::sync::OnceLock::new(),
        }))))
    }

    pub fn config(&self) -> &StoreConfig {
        &self.0.config
    }

    /// Starts the retention sweep when `store.retention` is set (directory stores; a
    /// bucket's own lifecycle rules do this for S3 and GCS). Needs the runtime.
    pub fn start_retention(&self) {
        let (Some(retention), Backend::Directory { root }) =
            (self.0.config.retention, &self.0.backend)
        else {
            return;
        };
        retention::spawn(
            root.clone(),
            retention,
            self.0.config.sweep_interval,
            self.0.config.max_sweep_files,
        );
    }

    /// store.scopes: the namespace of sentry-cli's org/project; Team when unmapped.
    pub fn namespace_of(&self, org: &str, project: &str) -> Namespace {
        match self.0.config.scopes.get(&format!("{org}/{project}")) {
            Some(scope) => Namespace::Scope(scope.clone()),
            None => Namespace::Team,
        }
    }

    /// store.tokens, compared in constant time. `None` token -> false.
    pub fn authorize(&self, token: Option<&str>, access: Access) -> bool {
        let Some(token) = token else {
            return false;
        };
        // Every token is compared, so the time taken does not tell which one matched.
        self.0
            .config
            .tokens
            .iter()
            .map(|t| {
                t.token.matches(token) && (t.access == Access::Write || access == Access::Read)
            })
            .fold(false, |any, ok| any | ok)
    }

    /// Refuses (413) an upload's staged `file` past `store.max_file_size`; `what` names
    /// it in the reason.
    fn within_max_file_size(&self, file: &NamedTempFile, what: &str) -> Result<(), Refused> {
        let size = file.as_file().metadata().map_err(internal)?.len();
        if size > self.max_file_size() {
            return Err(Refused {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                reason: format!(
                    "the {what} is {size} bytes, larger than store.max_file_size ({})",
                    self.max_file_size()
                ),
            });
        }
        Ok(())
    }

    pub fn max_file_size(&self) -> u64 {
        self.0.config.max_file_size
    }

    /// `store.max_archive_entries`: entries of one uploaded zip.
    pub fn max_archive_entries(&self) -> usize {
        self.0.config.max_archive_entries
    }

    /// `store.max_archive_ratio`: unpacked over compressed size of a large zip entry.
    pub fn max_archive_ratio(&self) -> u64 {
        self.0.config.max_archive_ratio
    }

    pub fn upload_url_hosts(&self) -> &[String] {
        &self.0.config.upload_url_hosts
    }

    /// An empty file on local disk, outside cache_dir's cleanup, where an upload streams
    /// to before publish (for a directory store, on its filesystem, so publish renames).
    pub fn staging_file(&self) -> std::io::Result<NamedTempFile> {
        std::fs::create_dir_all(&self.0.staging)?;
        tempfile::Builder::new()
            .prefix(".upload-")
            .tempfile_in(&self.0.staging)
    }

    /// Publishes every object in `file`: ELF, Mach-O (a fat file: each arch), PE, PDB,
    /// Breakpad, Wasm, portable PDB, source bundle, or a ProGuard mapping (its UUID as
    /// sentry-cli/Sentry compute it). `name` is the client's file name (a hint, e.g. for
    /// a PE/PDB's code/debug file name). Replace-by-better decides each object's
    /// Outcome. Refused if no object is a debug file, too large, malformed; then
    /// nothing of it is published.
    pub async fn publish(
        &self,
        ns: &Namespace,
        file: NamedTempFile,
        name: Option<&str>,
    ) -> Result<Vec<Published>, Refused> {
        self.within_max_file_size(&file, "file")?;
        let name = name
            .map(|n| n.rsplit(['/', '\\']).next().unwrap_or_default().to_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "upload".into());
        let data = ByteView::map_file_ref(file.as_file()).map_err(internal)?;
        let analysed = {
            let data = data.clone();
            let name = name.clone();
            tokio::task::spawn_blocking(move || publish::analyse(&data, &name))
                .await
                .map_err(internal)??
        };
        // A file of one object is published as it is: renamed, not copied.
        let whole = analysed.len() == 1 && analysed[0].range == (0..data.len());
        let mut file = Some(file);
        let mut published = Vec::with_capacity(analysed.len());
        for item in analysed {
            let source = if whole { file.take() } else { None };
            let outcome = self
                .publish_item(ns, &item, source, &data)
                .await
                .map_err(internal)?;
            record(ns, &item.path, &item.checksum, outcome);
            published.push(Published {
                path: item.path.clone(),
                file_type: Some(item.described.file_type),
                debug_id: item.described.id.debug_id,
                code_id: item.described.id.code_id.clone(),
                outcome,
            });
            self.append_record(ns, &item.path, &item.checksum, &item.features, outcome)
                .await;
        }
        Ok(published)
    }

    /// Decides on and publishes one object: `whole` is the upload itself when the
    /// object is all of it, else the object's bytes are copied out of `data`.
    async fn publish_item(
        &self,
        ns: &Namespace,
        item: &publish::Item,
        whole: Option<NamedTempFile>,
        data: &ByteView<'static>,
    ) -> anyhow::Result<Outcome> {
        let key = format!("{}{}", ns.prefix(), item.path);
        let file = || -> anyhow::Result<NamedTempFile> {
            match whole {
                Some(file) => Ok(file),
                None => {
                    let mut temp = self.staging_file()?;
                    std::io::Write::write_all(&mut temp, &data[item.range.clone()])?;
                    Ok(temp)
                }
            }
        };
        self.place(
            &key,
            &item.checksum,
            Some(&item.features),
            file,
            Some(item.meta.to_json()),
        )
        .await
    }

    /// Publishes at `key` what `file` makes, unless what is there is the same
    /// (`checksum`) or at least as good: with `features`, by replace-by-better; without
    /// (JS artifacts, named by their content's id), the newest wins.
    async fn place(
        &self,
        key: &str,
        checksum: &str,
        features: Option<&publish::Features>,
        file: impl FnOnce() -> anyhow::Result<NamedTempFile>,
        meta: Option<Vec<u8>>,
    ) -> anyhow::Result<Outcome> {
        let _lock = self.lock(key).await;
        let outcome = match self.0.backend.read(key, &self.0.staging).await? {
            None => Outcome::Stored,
            Some(existing) => {
                let existing = existing.data;
                let checksum = checksum.to_owned();
                let features = features.cloned();
                tokio::task::spawn_blocking(move || {
                    if publish::checksum(&existing) == checksum {
                        Outcome::AlreadyStored
                    } else if features.is_none_or(|new| {
                        publish::is_better(&new, &publish::stored_features(&existing))
                    }) {
                        Outcome::Replaced
                    } else {
                        Outcome::KeptExisting
                    }
                })
                .await?
            }
        };
        if matches!(outcome, Outcome::AlreadyStored | Outcome::KeptExisting) {
            return Ok(outcome);
        }
        let file = file()?;
        if outcome == Outcome::Replaced {
            let unix = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let kept = format!("{STATE}/{SUPERSEDED}/{key}.{unix}");
            self.0
                .backend
                .keep_copy(key, &kept, &self.0.staging)
                .await?;
        }
        self.0.backend.put_file(key, file).await?;
        if let Some(meta) = meta {
            self.0
                .backend
                .put_bytes(&format!("{key}.meta"), &meta, &self.0.staging)
                .await?;
        }
        Ok(outcome)
    }

    /// A sentry-cli artifact bundle (zip with manifest.json): each minified source and
    /// source map with a debug id is stored at its unified place (the kinds
    /// `sources::js_artifact_path` names, which `/symbolicate-js` asks for), so it is
    /// found by debug id. Entries are bounded (`store.max_archive_entries`,
    /// `store.max_file_size` each, `store.max_archive_ratio`); a bundle with an entry
    /// named `..`, absolute or with a backslash is refused whole.
    pub async fn publish_artifact_bundle(
        &self,
        ns: &Namespace,
        file: NamedTempFile,
    ) -> Result<Vec<Published>, Refused> {
        self.within_max_file_size(&file, "bundle")?;
        let bounds = artifacts::Bounds {
            max_entries: self.0.config.max_archive_entries,
            max_entry_size: self.max_file_size(),
            max_ratio: self.0.config.max_archive_ratio,
        };
        let store = self.clone();
        let unpacked = tokio::task::spawn_blocking(move || {
            let unpacked = artifacts::unpack(file.path(), &bounds, || store.staging_file());
            drop(file);
            unpacked.map(|artifacts| {
                artifacts
                    .into_iter()
                    .map(|a| {
                        let sum = ByteView::map_file_ref(a.file.as_file())
                            .map(|d| publish::checksum(&d))
                            .unwrap_or_default();
                        (a, sum)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .await
        .map_err(internal)??;
        let mut published = Vec::with_capacity(unpacked.len());
        for (artifact, checksum) in unpacked {
            let key = format!("{}{}", ns.prefix(), artifact.path);
            let staged = artifact.file;
            let outcome = self
                .place(&key, &checksum, None, || Ok(staged), None)
                .await
                .map_err(internal)?;
            record(ns, &artifact.path, &checksum, outcome);
            self.append_record(
                ns,
                &artifact.path,
                &checksum,
                &publish::Features::new(),
                outcome,
            )
            .await;
            published.push(Published {
                path: artifact.path,
                file_type: None,
                debug_id: Some(artifact.debug_id),
                code_id: None,
                outcome,
            });
        }
        Ok(published)
    }

    async fn lock(&self, key: &str) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        let shard = hasher.finish() as usize % self.0.locks.len();
        self.0.locks[shard].lock().await
    }

    /// One JSON line per outcome in `state/records/<date>.jsonl` of a directory store;
    /// a bucket has no append, so its outcomes are in the log and metrics only.
    async fn append_record(
        &self,
        ns: &Namespace,
        path: &str,
        checksum: &str,
        features: &publish::Features,
        outcome: Outcome,
    ) {
        let Backend::Directory { root } = &self.0.backend else {
            return;
        };
        let now = chrono::Utc::now();
        let line = serde_json::json!({
            "time": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "namespace": ns.prefix(),
            "path": path,
            "sha1": checksum,
            "features": features,
            "outcome": outcome,
        });
        let dir = root.join(STATE).join("records");
        let file = dir.join(format!("{}.jsonl", now.format("%Y-%m-%d")));
        let result = (|| -> std::io::Result<()> {
            use std::io::Write;
            std::fs::create_dir_all(&dir)?;
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)?;
            // One write per line: appends of whole lines do not interleave.
            out.write_all(format!("{line}\n").as_bytes())
        })();
        if let Err(err) = result {
            tracing::warn!(error = %err, "cannot append to the store's records");
        }
    }

    fn state_key(path: &str) -> anyhow::Result<String> {
        if !is_safe_path(path) {
            bail!("not a safe state path: {path:?}");
        }
        Ok(format!("{STATE}/{path}"))
    }

    /// Internal state area (sentry-cli chunks, records), below a reserved prefix of the
    /// backend; paths are relative, `/`-separated (unsafe ones are an error).
    pub async fn state_put(&self, path: &str, file: &Path) -> anyhow::Result<()> {
        let key = Self::state_key(path)?;
        match &self.0.backend {
            Backend::Directory { .. } => {
                let mut temp = self.staging_file()?;
                std::io::copy(&mut std::fs::File::open(file)?, temp.as_file_mut())?;
                self.0.backend.put_file(&key, temp).await
            }
            Backend::Bucket(store) => store.store_file(&key, file).await,
        }
    }

    pub async fn state_fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        self.0.backend.fetch(&Self::state_key(path)?, dest).await
    }

    pub async fn state_size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        self.0.backend.size(&Self::state_key(path)?).await
    }

    pub async fn state_remove(&self, path: &str) -> anyhow::Result<()> {
        self.0.backend.remove(&Self::state_key(path)?).await
    }

    /// The store as sources, first in order, for a request of `scope`: the scope's
    /// namespace (if `store.scopes` maps a project to it) then the team's.
    pub fn sources(&self, scope: &Scope) -> Vec<SourceConfig> {
        let built = self.0.sources.get_or_init(|| NamespaceSources {
            team: self.source(&Namespace::Team),
            scopes: (self.0.config.scopes.values())
                .map(|s| (s.clone(), self.source(&Namespace::Scope(s.clone()))))
                .collect(),
        });
        let mut out = Vec::with_capacity(2);
        if let Scope::Scoped(name) = scope
            && let Some(source) = built.scopes.get(&**name)
        {
            out.push(source.clone());
        }
        out.push(built.team.clone());
        out
    }

    fn source(&self, ns: &Namespace) -> SourceConfig {
        let id = match ns {
            Namespace::Team => SourceId::new(SOURCE_ID),
            Namespace::Scope(scope) => SourceId::new(format!("{SOURCE_ID}:{scope}")),
        };
        let files = CommonSourceConfig {
            layout: DirectoryLayout {
                ty: DirectoryLayoutType::Unified,
                ..DirectoryLayout::default()
            },
            // The team's files answer every scope; a scope's only its own requests.
            is_public: *ns == Namespace::Team,
            ..CommonSourceConfig::default()
        };
        let prefix = ns.prefix();
        let source = match (&self.0.config.backend, &self.0.backend) {
            (_, Backend::Directory { root }) => {
                SourceConfig::Filesystem(Arc::new(FilesystemSourceConfig {
                    id,
                    path: prefix
                        .split('/')
                        .filter(|s| !s.is_empty())
                        .fold(root.clone(), |p, s| p.join(s)),
                    files,
                    digests: Default::default(),
                }))
            }
            (Some(StoreBackend::S3(s3)), _) => {
                SourceConfig::S3(Arc::new(crate::sources::S3SourceConfig {
                    id,
                    bucket: s3.bucket.clone(),
                    prefix: join_prefix(&s3.prefix, &prefix),
                    region: s3.region.clone(),
                    aws_credentials_provider: Default::default(),
                    access_key: s3.access_key.clone(),
                    secret_key: s3.secret_key.clone(),
                    files,
                    digests: Default::default(),
                }))
            }
            (Some(StoreBackend::Gcs(gcs)), _) => {
                let key = gcs
                    .service_account_path
                    .as_deref()
                    .and_then(read_service_account);
                SourceConfig::Gcs(Arc::new(crate::sources::GcsSourceConfig {
                    id,
                    bucket: gcs.bucket.clone(),
                    prefix: join_prefix(&gcs.prefix, &prefix),
                    private_key: key.as_ref().map(|k| k.private_key.clone()),
                    client_email: key.as_ref().map(|k| k.client_email.clone()),
                    private_key_id: key.and_then(|k| k.private_key_id),
                    bearer_token: None,
                    endpoint: gcs.endpoint.clone(),
                    files,
                    digests: Default::default(),
                }))
            }
            // A bucket backend always comes from a bucket config.
            (_, Backend::Bucket(_)) => unreachable!("a bucket store has a bucket config"),
        };
        // The operator's own store: read with the server's credentials.
        source.from_config_file()
    }
}

/// Whether `id` names one of the store's sources: reserved, so a request cannot name a
/// source of its own like one and share its cache entries.
pub fn is_store_source_id(id: &str) -> bool {
    SourceId::new(id).is_store()
}

/// The sources a request of `scope` is served from: the store's first (when there is
/// one), then `sources`, the request's own or the configured ones. This is the one
/// place every front picks sources through. The store comes first even when a request
/// sends its own `sources` (Sentry always does): a deliberate exception to "a request's
/// sources replace the configured ones", since the team uploaded these files to be
/// used. A source in `sources` that takes a store id is dropped.
pub fn first_sources(
    store: Option<&Store>,
    scope: &Scope,
    sources: &[SourceConfig],
) -> Arc<[SourceConfig]> {
    let own = store.map(|s| s.sources(scope)).unwrap_or_default();
    own.into_iter()
        .chain(
            sources
                .iter()
                .filter(|s| !is_store_source_id(s.id().as_str()))
                .cloned(),
        )
        .collect()
}

fn join_prefix(base: &str, ns: &str) -> String {
    let base = base.trim_matches('/');
    let ns = ns.trim_matches('/');
    match (base.is_empty(), ns.is_empty()) {
        (true, _) => ns.to_owned(),
        (false, true) => base.to_owned(),
        (false, false) => format!("{base}/{ns}"),
    }
}

struct ServiceAccount {
    client_email: String,
    private_key: crate::sources::Secret,
    private_key_id: Option<String>,
}

fn read_service_account(path: &Path) -> Option<ServiceAccount> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(ServiceAccount {
        client_email: json.get("client_email")?.as_str()?.to_owned(),
        private_key: crate::sources::Secret::new(json.get("private_key")?.as_str()?),
        private_key_id: json
            .get("private_key_id")
            .and_then(|v| v.as_str())
            .map(str::to_owned),
    })
}

/// The outcome as a metric (by outcome) and a log line.
fn record(ns: &Namespace, path: &str, checksum: &str, outcome: Outcome) {
    metrics::counter!(crate::telemetry::STORE_PUBLISHED, "outcome" => outcome.as_str())
        .increment(1);
    tracing::info!(
        namespace = %ns.prefix(),
        path,
        sha1 = checksum,
        outcome = outcome.as_str(),
        "store publish"
    );
}

#[cfg(test)]
mod tests;
