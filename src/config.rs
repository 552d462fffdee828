//! YAML configuration: keys, defaults and validation. Keys follow the upstream
//! Symbolicator where the concept is the same, so an existing self-hosted config file
//! works unchanged; keys omnisym does not know are accepted with a warning naming them.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::cache::{CachesConfig, SharedCacheConfig};
use crate::fetch::{DenyListConfig, FetchConfig};
use crate::lookup::ObjectLimits;
use crate::sources::{Secret, SourceConfig};
use crate::store::StoreConfig;
use crate::telemetry::MetricsConfig;
use crate::types::UnwindOrder;
use crate::units::{deserialize_duration, deserialize_limit, deserialize_size};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Auto,
    Pretty,
    Simplified,
    Json,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct LoggingConfig {
    pub level: String,
    pub format: LogFormat,
    /// Upstream's key: backtraces on panics and errors (sets `RUST_BACKTRACE=1`).
    pub enable_backtraces: bool,
    /// Lines each of the server's two log queues (formatted lines, and access lines'
    /// parts) holds while its thread catches up: past it, access lines are dropped (and
    /// counted) and other lines wait.
    pub queue_lines: usize,
}

/// Half a second of `GET /healthcheck` at its highest rate on two cores, so that a log
/// thread kept off the CPU a while drops nothing; about 10 MiB of queued access lines,
/// the most a stalled log reader can make the process hold, and 2 MiB of slots per
/// queue, allocated at start.
pub const DEFAULT_LOG_QUEUE_LINES: usize = 65_536;

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: "info".into(),
            format: LogFormat::Auto,
            enable_backtraces: true,
            queue_lines: DEFAULT_LOG_QUEUE_LINES,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct Config {
    pub bind: SocketAddr,
    /// Names the server answers for in the `Host` header, beside `localhost` and IP
    /// addresses (omnisym only); `*` for any. Empty: any, unless `bind` is a loopback
    /// address. See [`AllowedHost`].
    pub allowed_hosts: Vec<String>,
    /// `null` (upstream: no cache) is a fresh directory that is removed at exit.
    #[serde(deserialize_with = "deserialize_cache_dir")]
    pub cache_dir: PathBuf,
    /// Keeps the directory of a `cache_dir: null` config alive while the config is.
    #[serde(skip)]
    pub ephemeral_cache_dir: Option<Arc<tempfile::TempDir>>,
    pub connect_to_reserved_ips: bool,
    /// Whether `s3` and `gcs` sources without credentials that a request names are read
    /// with the server's own cloud credentials (omnisym only; upstream always does).
    pub server_credentials_for_request_sources: bool,
    /// `null`: no limit.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_concurrent_requests: usize,
    /// Largest JSON request body accepted, in bytes (larger: 413).
    #[serde(
        alias = "symbolicate_body_max_bytes",
        deserialize_with = "deserialize_size"
    )]
    pub max_request_body_size: u64,
    /// Largest crash file (minidump, Apple crash report) accepted, in bytes, whether
    /// uploaded or fetched from a `storage_url`, before and after decompression
    /// (larger: 413 for uploads, a `failed` answer for fetched ones).
    #[serde(
        alias = "crash_file_body_max_bytes",
        deserialize_with = "deserialize_size"
    )]
    pub max_crash_file_size: u64,
    /// Upstream's switch for the in-process cleanup (on here unless set to `false`).
    pub enable_cache_cleanup: Option<bool>,
    /// Upstream's name for `caches.cleanup_interval`; wins when both are given.
    #[serde(deserialize_with = "deserialize_opt_interval")]
    pub cache_cleanup_interval: Option<Option<Duration>>,
    pub deny_list_enabled: bool,
    #[serde(deserialize_with = "deserialize_duration")]
    pub deny_list_time_window: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub deny_list_bucket_size: Duration,
    pub deny_list_threshold: usize,
    #[serde(deserialize_with = "deserialize_duration")]
    pub deny_list_block_time: Duration,
    pub deny_list_never_block_hosts: BTreeSet<String>,
    pub logging: LoggingConfig,
    pub metrics: MetricsConfig,
    pub caches: CachesConfig,
    /// A cache of derived files shared by a fleet of replicas.
    pub shared_cache: Option<SharedCacheConfig>,
    /// Sources used when a request carries no `sources` key at all.
    pub sources: Vec<SourceConfig>,
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_timeout: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub head_timeout: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub streaming_timeout: Duration,
    #[serde(deserialize_with = "deserialize_duration")]
    pub max_download_timeout: Duration,
    /// A download that brings no byte for this long fails (omnisym only).
    #[serde(deserialize_with = "deserialize_duration")]
    pub max_download_stall: Duration,
    /// Free disk a download must leave (at most a 20th of the disk); `0`: no check
    /// (omnisym only).
    #[serde(deserialize_with = "deserialize_size")]
    pub download_disk_margin: u64,
    /// Largest debug file downloaded, in bytes (compressed and decompressed); `null`: no limit.
    #[serde(deserialize_with = "deserialize_size")]
    pub max_download_size: u64,
    /// Downloads from one source running at once (omnisym only).
    pub max_concurrent_downloads_per_source: usize,
    /// Largest decompressed size of one compressed section of a debug file; `null`: no
    /// limit.
    #[serde(deserialize_with = "deserialize_size")]
    pub object_file_max_decompressed_section_size: u64,
    /// Largest decompressed size of one source file embedded in a debug file (source
    /// bundles, portable PDBs); `null`: no limit.
    #[serde(deserialize_with = "deserialize_size")]
    pub object_file_max_decompressed_source_size: u64,
    /// Files in one JavaScript artifact bundle; a bundle with more is refused as
    /// malformed. `null`: no limit (omnisym only).
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_artifact_bundle_entries: usize,
    /// Longest chain of PE unwind infos followed for one function; `null`: no limit.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_unwind_chain_len: usize,
    /// Largest il2cpp line mapping read beside a debug file; a larger one is passed
    /// over. `null`: no limit (omnisym only).
    #[serde(deserialize_with = "deserialize_size")]
    pub max_il2cpp_mapping_size: u64,
    /// Largest WebAssembly source map read beside a module; a larger one is passed over.
    /// `null`: no limit (omnisym only).
    #[serde(deserialize_with = "deserialize_size")]
    pub max_wasm_source_map_size: u64,
    /// Maximums on the lists of one request: modules, stack traces, frames, sources.
    pub request_limits: RequestLimits,
    /// Where the server reports its own errors, panics and (sampled) request traces,
    /// as upstream does; unset: nothing is sent anywhere.
    pub sentry_dsn: Option<Secret>,
    /// The share of requests whose traces go to `sentry_dsn` (0 to 1).
    pub traces_sample_rate: f32,
    /// How long a connection may take to send a request's headers, and may sit idle
    /// between requests, before it is closed.
    #[serde(deserialize_with = "deserialize_duration")]
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive in full, from its headers; past it
    /// the request is answered 408 and its connection closed.
    #[serde(deserialize_with = "deserialize_duration")]
    pub body_read_timeout: Duration,
    /// How long an answer may make no progress because its client reads nothing
    /// before the connection is dropped.
    #[serde(deserialize_with = "deserialize_duration")]
    pub write_timeout: Duration,
    /// How long requests in progress may take to finish after SIGTERM; then their
    /// connections are dropped and the process exits.
    #[serde(deserialize_with = "deserialize_duration")]
    pub shutdown_timeout: Duration,
    /// How long, after SIGTERM, `GET /ready` answers 503 while everything is still
    /// served, so that a balancer stops sending before the listener closes (omnisym only).
    #[serde(deserialize_with = "deserialize_duration")]
    pub drain_delay: Duration,
    /// Connections open at once; past them, `health_connections` more may ask for
    /// `/healthcheck` only, and further ones wait in the listen backlog. `null`: no
    /// limit.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_connections: usize,
    /// Connections accepted past `max_connections` that answer `GET /healthcheck` (and
    /// 503 to anything else), one request each.
    #[serde(deserialize_with = "deserialize_limit")]
    pub health_connections: usize,
    /// The longest a `GET /requests/{id}` waits for its answer; a missing or longer
    /// `?timeout=` is cut to it, and the poll answers `pending` again.
    #[serde(deserialize_with = "deserialize_duration")]
    pub max_poll_timeout: Duration,
    /// Largest decompressed/compressed size ratio of a downloaded file; `null`: no limit
    /// (omnisym only).
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_decompression_ratio: usize,
    /// Decompressed payloads up to this size are never refused for their ratio.
    #[serde(deserialize_with = "deserialize_size")]
    pub decompression_ratio_floor: u64,
    /// Bytes of index segments read for one symstore `has_index` source; past it the
    /// index is not used (omnisym only).
    #[serde(deserialize_with = "deserialize_size")]
    pub max_symstore_index_size: u64,
    /// Symbfile uploads (`POST /api/symbols-ranges`, `/api/symbols-returnpads`).
    pub symbfile: SymbfileConfig,
    /// The team's symbol store: uploads, and a source for every endpoint (omnisym only).
    pub store: StoreConfig,
    /// Upstream's switch for the symbol-server proxy: `GET`/`HEAD /proxy/<symstore path>`
    /// serve debug files from `sources`.
    pub symstore_proxy: bool,
    /// SymCache over HTTP: `GET /symcache/v<version>/<debug_file>/<debug_id>`.
    pub symcache_http: SymCacheHttpConfig,
    /// Mozilla's symbolication API (`/symbolicate/v5`, `/symbolicate/v4`).
    pub mozilla: MozillaConfig,
    /// The debuginfod front (`GET`/`HEAD /buildid/<id>/...`), for gdb, lldb, perf and
    /// elfutils' clients (omnisym only).
    pub debuginfod: DebuginfodConfig,
    /// Who may use the compatibility fronts (`/proxy`, `/symcache`, the Mozilla API).
    pub fronts: FrontsConfig,
    /// Replicas behind one load balancer answering as one service (omnisym only).
    pub fleet: FleetConfig,
    /// The browser console at `GET /console` (omnisym only).
    pub console: ConsoleConfig,
    /// The minidump stack walk's strategies, in order, for requests that name none
    /// (omnisym only; see [`UnwindOrder`]). Unset: upstream's walk. Sentry sends no such
    /// option, so this is how a self-hosted server walks steered.
    pub unwind_order: Option<UnwindOrder>,
}

/// The browser console: a page to try a crash, see why a frame did not symbolicate, and
/// watch the service. It shows request outcomes, source ids and deny-listed hosts, so it
/// is on by default only where the server listens on loopback, and it is behind
/// `fronts.token` when one is set.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ConsoleConfig {
    /// `null` (the default): on when `bind` is a loopback address.
    pub enabled: Option<bool>,
    /// How far back the status view's charts reach (one point every 2 s).
    #[serde(deserialize_with = "deserialize_duration")]
    pub history: Duration,
    /// Entries the disk-use walk of `cache_dir` looks at, at most.
    pub max_disk_walk_entries: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: None,
            history: Duration::from_secs(10 * 60),
            max_disk_walk_entries: 1_000_000,
        }
    }
}

impl Config {
    /// Whether `GET /console` and its API are served.
    pub fn console_enabled(&self) -> bool {
        self.console
            .enabled
            .unwrap_or_else(|| self.bind.ip().is_loopback())
    }
}

/// Maximums on what one request may list, checked before its body is parsed into
/// structures (a JSON frame of 25 bytes becomes a few hundred bytes in memory, so the
/// body size alone does not bound memory). Past one, the request is refused with 400
/// naming the limit. `null` in the config: no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct RequestLimits {
    /// `modules` of a request; the modules listed by a minidump.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_modules: usize,
    /// `stacktraces` of a request (and JVM `exceptions`, on their own); the threads of
    /// a minidump.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_stacktraces: usize,
    /// Frames of all stack traces of a request together (and JVM `classes`, on their
    /// own); a per-request total because that is what the work scales with.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_frames: usize,
    /// `sources` of a request or an upload form.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_sources: usize,
}

impl Default for RequestLimits {
    /// Far above what Sentry sends: events carry at most a few hundred images and a few
    /// hundred frames per thread, profiles a few thousand unique frames, and projects a
    /// few dozen sources.
    fn default() -> Self {
        RequestLimits {
            max_modules: 10_000,
            max_stacktraces: 10_000,
            max_frames: 250_000,
            max_sources: 100,
        }
    }
}

/// The `fronts` section: access to the compatibility fronts (omnisym only).
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct FrontsConfig {
    /// When set, requests to every front not in `open` must carry
    /// `Authorization: Bearer <token>` (else 401). `symcache_http.token` is an alias.
    pub token: Option<Secret>,
    /// Fronts that answer without the token.
    pub open: Vec<Front>,
    /// Origins (`https://host[:port]`, or `*`) whose pages may call the Mozilla API;
    /// Firefox's profiler by default (`[]` sends no CORS headers).
    pub cors_allowed_origins: Vec<String>,
}

impl Default for FrontsConfig {
    fn default() -> Self {
        Self {
            token: None,
            open: Vec::new(),
            // Mozilla's API is made to be called from pages: the Firefox profiler
            // symbolicates in the browser. Mozilla's service allows every origin because
            // its symbols are public; the sources here are usually not, and without
            // `fronts.token` any page a browser loads could read what they answer.
            cors_allowed_origins: vec![PROFILER_ORIGIN.to_owned()],
        }
    }
}

/// The Firefox profiler's origin, the one origin allowed by default.
pub const PROFILER_ORIGIN: &str = "https://profiler.firefox.com";

/// A compatibility front, as `fronts.open` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Front {
    /// `GET`/`HEAD /proxy/...`
    Proxy,
    /// `GET /symcache/...`
    Symcache,
    /// `POST /symbolicate/v5`, `/symbolicate/v4`
    Mozilla,
    /// `GET /console` and its API (when `console.enabled`)
    Console,
    /// `GET`/`HEAD /buildid/...` (when `debuginfod.enabled`)
    Debuginfod,
}

/// The debuginfod front: what elfutils' clients (gdb, `debuginfod-find`, perf,
/// valgrind) ask a debuginfod server for, answered from the configured sources.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DebuginfodConfig {
    pub enabled: bool,
    /// Largest source file `/buildid/<id>/source/<path>` hands out; past it, 404 (as
    /// for a file that is not there, with the reason in the log).
    #[serde(deserialize_with = "deserialize_size")]
    pub max_source_size: u64,
    /// Longest `<path>` of a source request, in bytes, decoded (400 past it).
    pub max_path_length: usize,
    /// How long one request may look and fetch before it is answered 504.
    #[serde(deserialize_with = "deserialize_duration")]
    pub timeout: Duration,
    /// Source files one request's source context may ask of its debuginfod sources
    /// (`http` sources with `layout.type: debuginfod`).
    pub source_files_per_request: usize,
    /// How long source context waits for those files; what has not arrived is left out.
    #[serde(deserialize_with = "deserialize_duration")]
    pub source_files_timeout: Duration,
}

impl Default for DebuginfodConfig {
    fn default() -> Self {
        DebuginfodConfig {
            enabled: true,
            // The size source context accepts for a linked file: no hand-written source
            // file is larger; generated ones that are have no business in a debugger.
            max_source_size: 10 * 1024 * 1024,
            // PATH_MAX on Linux, which is what a build can have recorded.
            max_path_length: 4096,
            // elfutils' client waits 90 s for a transfer to make progress
            // (`DEBUGINFOD_TIMEOUT`); a first download of a large debug file from a
            // bucket may take minutes, and then is served from the cache.
            timeout: Duration::from_secs(300),
            // A crash's frames with lines are rarely from more than a few dozen files.
            source_files_per_request: 64,
            source_files_timeout: Duration::from_secs(10),
        }
    }
}

/// The SymCache HTTP front (omnisym only).
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct SymCacheHttpConfig {
    pub enabled: bool,
    /// The former name of `fronts.token`, still read.
    pub token: Option<Secret>,
    /// What a `404` with `Retry-After` asks the client to wait before asking again.
    #[serde(deserialize_with = "deserialize_duration")]
    pub retry_after: Duration,
    /// How long a client that accepts `Retry-After` waits for its SymCache before it is
    /// told to come back: long enough for one that is already built to be looked up.
    #[serde(deserialize_with = "deserialize_duration")]
    pub answer_within: Duration,
}

impl Default for SymCacheHttpConfig {
    fn default() -> Self {
        SymCacheHttpConfig {
            enabled: true,
            token: None,
            // The protocol's sample server asks for one second.
            retry_after: Duration::from_secs(1),
            // A built SymCache is found in milliseconds (memory or disk); a first build
            // downloads a debug file and takes seconds to minutes.
            answer_within: Duration::from_millis(250),
        }
    }
}

/// `scheme://host[:port]` with nothing after it, as browsers send `Origin`.
fn is_origin(text: &str) -> bool {
    url::Url::parse(text).is_ok_and(|url| {
        url.has_host()
            && url.path() == "/"
            && !text.ends_with('/')
            && url.query().is_none()
            && url.fragment().is_none()
            && url.username().is_empty()
            && url.password().is_none()
            && url.origin().ascii_serialization() == text.to_ascii_lowercase()
    })
}

/// An entry of `allowed_hosts`, as the `Host` header is compared with it. A page that
/// rebinds its own DNS name to this server sends that name as the `Host`; the server
/// answers only names it knows, so that such a page cannot read what it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedHost {
    /// `*`: every host.
    Any,
    /// An IP address, always allowed (a rebinding page sends its own name, never an
    /// address); listing one changes nothing.
    Address,
    /// A host name: lowercase, in its ASCII form, without a trailing dot.
    Name(String),
}

impl AllowedHost {
    /// A host as a URL writes it (`symbols.example.com`, `10.0.0.5`, `[fd00::5]`), or
    /// `*`; no scheme, port or path. Else what is wrong with it.
    pub fn parse(entry: &str) -> Result<AllowedHost, &'static str> {
        if entry == "*" {
            return Ok(AllowedHost::Any);
        }
        match url::Host::parse(entry) {
            Ok(url::Host::Domain(name)) => {
                let name = name.strip_suffix('.').unwrap_or(&name);
                if name.is_empty() || name.contains(['*', '%']) {
                    return Err("is not a host name (write `*` alone for any)");
                }
                Ok(AllowedHost::Name(name.to_owned()))
            }
            Ok(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => Ok(AllowedHost::Address),
            Err(_) => Err("is not a host name or address (no scheme, port or path)"),
        }
    }
}

/// The `mozilla` section: limits of Mozilla's symbolication API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct MozillaConfig {
    /// Jobs one `/symbolicate/v5` request may carry (more: 400).
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_jobs: usize,
}

impl Default for MozillaConfig {
    /// Mozilla's own service allows 10.
    fn default() -> Self {
        MozillaConfig { max_jobs: 10 }
    }
}

/// The largest `max_inline_depth` a config may set: a chain this deep converts in half
/// of a blocking thread's 2 MiB stack (the tests of `native::symbfile`'s converter
/// check it, in a debug build).
pub const MAX_INLINE_DEPTH: u32 = 256;

/// The `symbfile` section of the config: who may upload, where uploads live, and how
/// much they may take. Defined here rather than beside the store (`native::symbfile`):
/// the config is part of the core, which imports no pipeline.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct SymbfileConfig {
    /// Keys accepted in `Authorization: APIKey <key>`. None: uploads are refused (403)
    /// and only symbols already stored are served.
    pub api_keys: Vec<Secret>,
    /// Where uploads are stored; default `<cache_dir>/symbfiles` (cache cleanup deletes
    /// only its abandoned temp files: uploads are data, not cache).
    pub dir: Option<PathBuf>,
    /// Largest symbfile, all parts together, in bytes.
    #[serde(deserialize_with = "deserialize_size")]
    pub max_file_size: u64,
    /// Bytes all unfinished uploads may hold together: their stored parts and the parts
    /// being received (more: 429). At least `max_file_size`.
    #[serde(deserialize_with = "deserialize_size")]
    pub max_pending_size: u64,
    /// Most functions in one inline chain: a return pad's frames, a range's `depth`
    /// plus one. A deeper upload is refused (400). At most [`MAX_INLINE_DEPTH`]:
    /// converting a chain into a SymCache takes stack for every level.
    pub max_inline_depth: u32,
    /// Largest `FileParts` accepted.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_parts: usize,
    /// Uploads whose parts are still coming in, at once.
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_pending_uploads: usize,
    /// An unfinished upload that received no part for this long is discarded.
    #[serde(deserialize_with = "deserialize_duration")]
    pub pending_upload_timeout: Duration,
    /// Executables (FileIDs) with stored symbols; past it new ones are refused (507).
    #[serde(deserialize_with = "deserialize_limit")]
    pub max_stored_files: usize,
}

impl Default for SymbfileConfig {
    fn default() -> Self {
        SymbfileConfig {
            api_keys: Vec::new(),
            dir: None,
            // Reading a symbfile into memory takes a few times its size; this keeps one
            // upload's conversion within a gigabyte or so.
            max_file_size: 256 * 1024 * 1024,
            // Four of the largest uploads at once.
            max_pending_size: 1024 * 1024 * 1024,
            // Inline chains of real programs stay within a few dozen functions.
            max_inline_depth: 128,
            max_parts: 1024,
            max_pending_uploads: 64,
            pending_upload_timeout: Duration::from_secs(3600),
            max_stored_files: 100_000,
        }
    }
}

/// The `fleet` section of the config (omnisym only). Defined here rather than beside
/// its user (`fleet/`): the config is part of the core, which imports no upper layer.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct FleetConfig {
    /// This replica's address as its peers reach it (`http://10.0.0.5:3021`; in
    /// Kubernetes, `http://${POD_IP}:3021`). Unset: no fleet, ids name no replica.
    pub advertise_url: Option<Url>,
    /// Peers' addresses, this replica's own among them or not.
    pub peers: Vec<Url>,
    /// `host:port` whose addresses (every A and AAAA record) are peers, reached over
    /// plain HTTP: a headless Service's name, with `publishNotReadyAddresses` so that
    /// a draining replica still answers polls for its requests.
    pub peers_dns: Option<String>,
    /// How old the resolved `peers_dns` may be before a poll for an unknown owner
    /// resolves it again.
    #[serde(deserialize_with = "deserialize_duration")]
    pub peers_refresh: Duration,
    /// How long connecting to a peer may take before the poll is answered 404.
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_timeout: Duration,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            advertise_url: None,
            peers: Vec::new(),
            peers_dns: None,
            peers_refresh: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

impl FleetConfig {
    /// Why the section cannot work, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let advertised = self.advertise_url.is_some();
        if !advertised && (!self.peers.is_empty() || self.peers_dns.is_some()) {
            return Err(
                "fleet.advertise_url is needed with peers: the ids a replica \
                        hands out must name it"
                    .into(),
            );
        }
        for url in self.advertise_url.iter().chain(&self.peers) {
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(format!("fleet: `{url}` is not an http(s) address"));
            }
        }
        if let Some(name) = &self.peers_dns {
            host_and_port(name)
                .ok_or_else(|| format!("fleet.peers_dns: `{name}` is not host:port"))?;
        }
        Ok(())
    }
}

/// `host:port`, the port a number.
pub fn host_and_port(name: &str) -> Option<(&str, u16)> {
    let (host, port) = name.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then_some(())?;
    Some((host, port.parse().ok()?))
}

impl Default for Config {
    fn default() -> Self {
        let fetch = FetchConfig::default();
        let deny_list = DenyListConfig::default();
        let objects = ObjectLimits::default();
        Config {
            bind: "127.0.0.1:3021".parse().expect("valid default address"),
            allowed_hosts: Vec::new(),
            cache_dir: PathBuf::from("omnisym-cache"),
            ephemeral_cache_dir: None,
            connect_to_reserved_ips: false,
            server_credentials_for_request_sources: false,
            max_concurrent_requests: 200,
            // Upstream's: Sentry sends profiles of up to 50 MiB to /symbolicate.
            max_request_body_size: 55 * 1024 * 1024,
            // Upstream's: Sentry accepts minidumps of up to 200 MiB.
            max_crash_file_size: 250 * 1024 * 1024,
            enable_cache_cleanup: None,
            cache_cleanup_interval: None,
            deny_list_enabled: deny_list.enabled,
            deny_list_time_window: deny_list.time_window,
            deny_list_bucket_size: deny_list.bucket_size,
            deny_list_threshold: deny_list.threshold,
            deny_list_block_time: deny_list.block_time,
            deny_list_never_block_hosts: deny_list.never_block_hosts,
            logging: LoggingConfig::default(),
            metrics: MetricsConfig::default(),
            caches: CachesConfig::default(),
            shared_cache: None,
            sources: Vec::new(),
            connect_timeout: fetch.connect_timeout,
            head_timeout: fetch.head_timeout,
            streaming_timeout: fetch.streaming_timeout,
            max_download_timeout: fetch.max_download_timeout,
            max_download_stall: fetch.max_download_stall,
            download_disk_margin: fetch.download_disk_margin,
            max_download_size: fetch.max_download_size,
            max_concurrent_downloads_per_source: fetch.max_concurrent_downloads_per_source,
            object_file_max_decompressed_section_size: objects.max_decompressed_section_size,
            object_file_max_decompressed_source_size: objects.max_decompressed_source_size,
            max_unwind_chain_len: objects.max_unwind_chain_len,
            max_il2cpp_mapping_size: objects.max_il2cpp_mapping_size,
            max_wasm_source_map_size: objects.max_wasm_source_map_size,
            // Sentry's tooling puts a file and its map per script: large web apps
            // upload a few thousand.
            max_artifact_bundle_entries: 100_000,
            request_limits: RequestLimits::default(),
            sentry_dsn: None,
            // Upstream's.
            traces_sample_rate: 0.05,
            // A client's headers arrive in one packet; keep-alive clients (Sentry's
            // requests sessions) reconnect when an idle connection was closed.
            header_read_timeout: Duration::from_secs(10),
            // The largest crash file (250 MiB) at 2 MiB/s.
            body_read_timeout: Duration::from_secs(120),
            // Room for every request slot, the polls of pending ones and healthchecks,
            // and below the usual open-file limits.
            max_connections: 1024,
            // A client whose receive window stays shut this long has stopped reading;
            // a slow but reading client makes progress every few milliseconds.
            write_timeout: Duration::from_secs(30),
            // Kubernetes' default grace period before SIGKILL.
            shutdown_timeout: Duration::from_secs(30),
            // Alone, nothing needs telling; behind a balancer, set it to a few of its
            // health-check intervals.
            drain_delay: Duration::ZERO,
            // Enough for an orchestrator's probes and an operator's curl.
            health_connections: 16,
            // Sentry polls with `?timeout=5`.
            max_poll_timeout: Duration::from_secs(60),
            max_decompression_ratio: usize::try_from(fetch.max_decompression_ratio)
                .unwrap_or(usize::MAX),
            decompression_ratio_floor: fetch.decompression_ratio_floor,
            max_symstore_index_size: fetch.max_symstore_index_size,
            symbfile: SymbfileConfig::default(),
            store: StoreConfig::default(),
            // Upstream's default.
            symstore_proxy: true,
            symcache_http: SymCacheHttpConfig::default(),
            fronts: FrontsConfig::default(),
            mozilla: MozillaConfig::default(),
            debuginfod: DebuginfodConfig::default(),
            fleet: FleetConfig::default(),
            console: ConsoleConfig::default(),
            unwind_order: None,
        }
    }
}

/// A config that could not be used, with the key and line at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config{location}: key `{key}`: {message}")]
    Invalid {
        key: String,
        location: String,
        message: String,
    },
    #[error("invalid config: {0}")]
    Semantic(String),
    /// Any of the above, read from a file: every message a user sees names the file.
    #[error("config file {}: {error}", path.display())]
    InFile {
        path: PathBuf,
        error: Box<ConfigError>,
    },
}

impl Config {
    /// Parses YAML; returns the config and the keys that were ignored, so the caller
    /// can warn once logging is set up. A value that is exactly `${NAME}` is replaced by
    /// the environment variable `NAME`, as upstream does (an unset one is an error).
    pub fn from_yaml(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
        // As upstream: a file with no document in it (empty, or only comments) is
        // refused rather than read as the defaults, as it is more likely a config that
        // was not written out than a wish for the defaults (which need no file).
        let document: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).unwrap_or(serde_yaml_ng::Value::Bool(true));
        if document.is_null() {
            return Err(ConfigError::Semantic(
                "the config is empty; write at least one key, or leave out --config for the defaults"
                    .into(),
            ));
        }
        let mut ignored = Vec::new();
        let mut env = serde_vars::EnvSource::default();
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let de = serde_vars::Deserializer::new(de, &mut env);
        let mut on_ignored = |path: serde_ignored::Path<'_>| ignored.push(path.to_string());
        let de = serde_ignored::Deserializer::new(de, &mut on_ignored);
        let mut config: Config = serde_path_to_error::deserialize(de).map_err(|err| {
            let key = err.path().to_string();
            let inner = err.into_inner();
            let location = inner
                .location()
                .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
                .unwrap_or_default();
            ConfigError::Invalid {
                key,
                location,
                message: redact_values(&strip_location(&inner.to_string())),
            }
        })?;
        config.resolve_upstream_names()?;
        config.sources = std::mem::take(&mut config.sources)
            .into_iter()
            .map(SourceConfig::from_config_file)
            .collect();
        config.validate()?;
        Ok((config, ignored))
    }

    /// Folds upstream's spellings of settings that live elsewhere here into one place.
    fn resolve_upstream_names(&mut self) -> Result<(), ConfigError> {
        if let Some(interval) = self.cache_cleanup_interval {
            self.caches.cleanup_interval = interval;
        }
        if self.cache_dir.as_os_str().is_empty() {
            let dir = tempfile::Builder::new()
                .prefix("omnisym-cache-")
                .tempdir()
                .map_err(|err| {
                    ConfigError::Semantic(format!(
                        "cache_dir: null needs a temporary directory: {err}"
                    ))
                })?;
            self.cache_dir = dir.path().to_owned();
            self.ephemeral_cache_dir = Some(Arc::new(dir));
        }
        if let Some(alias) = self.symcache_http.token.take() {
            match &self.fronts.token {
                Some(token) if *token != alias => {
                    return Err(ConfigError::Semantic(
                        "fronts.token and symcache_http.token (its former name) differ; set one"
                            .into(),
                    ));
                }
                _ => self.fronts.token = Some(alias),
            }
        }
        Ok(())
    }

    /// How often the server cleans its cache itself; `None`: never.
    pub fn in_process_cleanup(&self) -> Option<Duration> {
        match self.enable_cache_cleanup {
            Some(false) => None,
            _ => self.caches.cleanup_interval,
        }
    }

    pub fn deny_list(&self) -> DenyListConfig {
        DenyListConfig {
            enabled: self.deny_list_enabled,
            time_window: self.deny_list_time_window,
            bucket_size: self.deny_list_bucket_size,
            threshold: self.deny_list_threshold,
            block_time: self.deny_list_block_time,
            never_block_hosts: self.deny_list_never_block_hosts.clone(),
        }
    }

    pub fn from_file(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|error| ConfigError::InFile {
            path: path.to_owned(),
            error: Box::new(error),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        validate_log_level(&self.logging.level)?;
        if let Some(dsn) = &self.sentry_dsn
            && dsn.expose().parse::<sentry::types::Dsn>().is_err()
        {
            // The DSN carries a key: the message does not repeat it.
            return Err(ConfigError::Semantic(
                "sentry_dsn is not a Sentry DSN (scheme://key@host/project)".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.traces_sample_rate) {
            return Err(ConfigError::Semantic(
                "traces_sample_rate must be between 0 and 1".into(),
            ));
        }
        if self.max_concurrent_requests == 0 {
            return Err(ConfigError::Semantic(
                "max_concurrent_requests must be at least 1".into(),
            ));
        }
        if self.deny_list_enabled && self.deny_list_bucket_size.is_zero() {
            return Err(ConfigError::Semantic(
                "deny_list_bucket_size must be longer than 0".into(),
            ));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Semantic(
                "max_connections must be at least 1".into(),
            ));
        }
        for (key, value) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("write_timeout", self.write_timeout),
            ("max_download_stall", self.max_download_stall),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Semantic(format!(
                    "{key} must be longer than 0"
                )));
            }
        }
        if self.max_concurrent_downloads_per_source == 0 {
            return Err(ConfigError::Semantic(
                "max_concurrent_downloads_per_source must be at least 1".into(),
            ));
        }
        self.fleet.check().map_err(ConfigError::Semantic)?;
        self.store
            .check(&self.cache_dir, self.max_download_size)
            .map_err(ConfigError::Semantic)?;
        if self.fronts.token.as_ref().is_some_and(Secret::is_empty) {
            return Err(ConfigError::Semantic(
                "fronts.token is empty; remove it to leave the fronts open".into(),
            ));
        }
        for entry in &self.allowed_hosts {
            AllowedHost::parse(entry).map_err(|message| {
                ConfigError::Semantic(format!("allowed_hosts: `{entry}` {message}"))
            })?;
        }
        for origin in &self.fronts.cors_allowed_origins {
            if origin != "*" && !is_origin(origin) {
                return Err(ConfigError::Semantic(format!(
                    "fronts.cors_allowed_origins: `{origin}` is not an origin (scheme://host[:port], or *)"
                )));
            }
        }
        if self.symcache_http.retry_after.is_zero() {
            return Err(ConfigError::Semantic(
                "symcache_http.retry_after must be longer than 0".into(),
            ));
        }
        if self.max_decompression_ratio == 0 {
            return Err(ConfigError::Semantic(
                "max_decompression_ratio must be at least 1".into(),
            ));
        }
        for (key, value) in [
            (
                "max_artifact_bundle_entries",
                self.max_artifact_bundle_entries,
            ),
            ("symbfile.max_parts", self.symbfile.max_parts),
            ("logging.queue_lines", self.logging.queue_lines),
            (
                "symbfile.max_pending_uploads",
                self.symbfile.max_pending_uploads,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Semantic(format!("{key} must be at least 1")));
            }
        }
        if !(1..=MAX_INLINE_DEPTH).contains(&self.symbfile.max_inline_depth) {
            return Err(ConfigError::Semantic(format!(
                "symbfile.max_inline_depth must be between 1 and {MAX_INLINE_DEPTH}"
            )));
        }
        if self.symbfile.max_pending_size < self.symbfile.max_file_size {
            return Err(ConfigError::Semantic(
                "symbfile.max_pending_size must be at least symbfile.max_file_size: \
                 an upload that fits one cannot be held by the other"
                    .into(),
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for source in &self.sources {
            if !ids.insert(source.id().to_string()) {
                return Err(ConfigError::Semantic(format!(
                    "sources: duplicate source id `{}`",
                    source.id()
                )));
            }
        }
        Ok(())
    }

    /// Where uploaded symbfiles are stored.
    pub fn symbfile_dir(&self) -> PathBuf {
        (self.symbfile.dir.clone()).unwrap_or_else(|| self.cache_dir.join("symbfiles"))
    }

    /// What reading one debug file may cost (symbolic's parser options).
    pub fn object_limits(&self) -> ObjectLimits {
        ObjectLimits {
            max_decompressed_section_size: self.object_file_max_decompressed_section_size,
            max_decompressed_source_size: self.object_file_max_decompressed_source_size,
            max_unwind_chain_len: self.max_unwind_chain_len,
            max_il2cpp_mapping_size: self.max_il2cpp_mapping_size,
            max_wasm_source_map_size: self.max_wasm_source_map_size,
            max_decompression_ratio: u64::try_from(self.max_decompression_ratio)
                .unwrap_or(u64::MAX),
            decompression_ratio_floor: self.decompression_ratio_floor,
        }
    }

    pub fn fetch_config(&self) -> FetchConfig {
        FetchConfig {
            connect_timeout: self.connect_timeout,
            head_timeout: self.head_timeout,
            streaming_timeout: self.streaming_timeout,
            max_download_timeout: self.max_download_timeout,
            max_download_stall: self.max_download_stall,
            download_disk_margin: self.download_disk_margin,
            max_download_size: self.max_download_size,
            connect_to_reserved_ips: self.connect_to_reserved_ips,
            server_credentials_for_request_sources: self.server_credentials_for_request_sources,
            max_concurrent_downloads_per_source: self.max_concurrent_downloads_per_source,
            max_decompression_ratio: u64::try_from(self.max_decompression_ratio)
                .unwrap_or(u64::MAX),
            decompression_ratio_floor: self.decompression_ratio_floor,
            sentry_index_capacity: self.caches.in_memory.sentry_index_capacity,
            sentry_index_max_bytes: self.caches.in_memory.sentry_index_max_bytes,
            max_symstore_index_size: self.max_symstore_index_size,
            sentry_index_ttl: self.caches.in_memory.sentry_index_ttl,
            s3_client_capacity: self.caches.in_memory.s3_client_capacity,
            gcs_token_capacity: self.caches.in_memory.gcs_token_capacity,
            deny_list: self.deny_list(),
            ..FetchConfig::default()
        }
    }
}

/// Levels as upstream reads them (`log`'s names, any case).
const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `logging.level` is a level, or a tracing filter (`info,omnisym=debug`). A single
/// word that is not a level would be read as a filter enabling only the target of that
/// name, which mutes every log line: `warning` is the usual slip.
fn validate_log_level(level: &str) -> Result<(), ConfigError> {
    let trimmed = level.trim();
    let is_level = LOG_LEVELS
        .iter()
        .any(|name| name.eq_ignore_ascii_case(trimmed));
    let is_filter = trimmed.contains(['=', ',']);
    let refused = |why: String| {
        Err(ConfigError::Invalid {
            key: "logging.level".into(),
            location: String::new(),
            message: why,
        })
    };
    if is_level {
        Ok(())
    } else if !is_filter {
        refused(format!(
            "`{trimmed}` is not a level: use one of {} (or a filter such as `info,omnisym=debug`)",
            LOG_LEVELS.join(", ")
        ))
    } else if let Err(err) = tracing_subscriber::EnvFilter::try_new(trimmed) {
        refused(format!("`{trimmed}` is not a valid filter: {err}"))
    } else {
        Ok(())
    }
}

fn deserialize_cache_dir<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    // The empty path stands for `null` until `resolve_upstream_names` replaces it.
    Option::<PathBuf>::deserialize(d).map(Option::unwrap_or_default)
}

fn deserialize_opt_interval<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<Duration>>, D::Error> {
    crate::units::deserialize_opt_duration(d).map(Some)
}

/// serde_yaml_ng appends "at line X column Y" itself; we report the location separately.
/// A parse error's text without the values it quotes: any value may be a secret (a
/// token written under the wrong key, a password with a stray quote), and config
/// errors go to logs and terminals. The key and the expected type stay, which is what
/// tells the reader what to fix.
fn redact_values(message: &str) -> String {
    static QUOTED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#""(?:[^"\\]|\\.)*"?|(integer|floating point|character|boolean|unknown variant) `[^`]*`"#,
        )
        .expect("a valid pattern")
    });
    QUOTED
        .replace_all(message, |caps: &regex::Captures| match caps.get(1) {
            Some(kind) => format!("{} `[redacted]`", kind.as_str()),
            None => "\"[redacted]\"".to_owned(),
        })
        .into_owned()
}

fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(idx) => message[..idx].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::parse_size;

    #[test]
    fn an_empty_config_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["", "\n  \n", "# only a comment\n", "~\n"] {
            let path = dir.path().join("config.yml");
            std::fs::write(&path, text).unwrap();
            let err = Config::from_file(&path).unwrap_err().to_string();
            assert!(err.contains(&path.display().to_string()), "{err}");
            assert!(err.contains("empty"), "{text:?}: {err}");
        }
        // The defaults need no file.
        assert_eq!(Config::default().bind.port(), 3021);
        assert_eq!(Config::default().max_concurrent_requests, 200);
    }

    #[test]
    fn every_error_from_a_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("symbolicator.yml");
        for text in [
            "bind: [1, 2]\n",
            "max_concurrent_requests: 0\n",
            "caches: {max_disk_size: 5 parsecs}\n",
            "logging: {level: warning}\n",
            "bind: 127.0.0.1:3021\n  oops: [\n",
        ] {
            std::fs::write(&path, text).unwrap();
            let err = Config::from_file(&path).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("config file {}: ", path.display())),
                "{err}"
            );
        }
        let missing = dir.path().join("missing.yml");
        let err = Config::from_file(&missing).unwrap_err().to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }

    #[test]
    fn a_log_level_that_is_not_one_is_refused() {
        for level in ["warning", "WARNING", "verbose", "critical", "omnisym"] {
            let err = Config::from_yaml(&format!("logging: {{level: {level}}}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("logging.level"), "{level}: {err}");
            assert!(err.contains("warn, info"), "{level}: {err}");
        }
        let err = Config::from_yaml("logging: {level: 'info,omnisym=loud'}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a valid filter"), "{err}");
        for level in [
            "off",
            "error",
            "warn",
            "INFO",
            "Debug",
            "trace",
            "info,omnisym=debug",
        ] {
            let yaml = format!("logging: {{level: '{level}'}}\n");
            let (config, _) = Config::from_yaml(&yaml).unwrap();
            assert_eq!(config.logging.level, level);
        }
    }

    #[test]
    fn upstream_keys_and_durations() {
        let yaml = "bind: 0.0.0.0:3021\ncache_dir: /data\nsentry_dsn: https://x@y/1\ncaches:\n  downloaded:\n    max_unused_for: 1w\n    retry_misses_after: 5m\n  derived:\n    retry_malformed_after: 3600\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.sentry_dsn.unwrap().expose(), "https://x@y/1");
        for bad in ["sentry_dsn: not-a-dsn\n", "traces_sample_rate: 2\n"] {
            let err = Config::from_yaml(bad).unwrap_err().to_string();
            assert!(!err.contains("not-a-dsn"), "{err}");
        }
        assert_eq!(
            config.caches.downloaded.max_unused_for,
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(
            config.caches.downloaded.retry_misses_after,
            Duration::from_secs(300)
        );
        assert_eq!(
            config.caches.derived.retry_malformed_after,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn source_fetch_keys() {
        let yaml = "max_concurrent_downloads_per_source: 4\ncaches:\n  in_memory:\n    sentry_index_ttl: 5m\n    s3_client_capacity: 7\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let fetch = config.fetch_config();
        assert_eq!(fetch.max_concurrent_downloads_per_source, 4);
        assert_eq!(fetch.sentry_index_ttl, Duration::from_secs(300));
        assert_eq!(fetch.s3_client_capacity, 7);
        assert_eq!(fetch.gcs_token_capacity, 100);
        let err = Config::from_yaml("max_concurrent_downloads_per_source: 0\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("max_concurrent_downloads_per_source")
        );
    }

    /// The keys that hand their values to the downloads, some in other sections
    /// (`caches.in_memory`), default to the downloads' own defaults.
    #[test]
    fn the_default_config_fetches_as_the_default_downloads() {
        assert_eq!(Config::default().fetch_config(), FetchConfig::default());
    }

    #[test]
    fn cache_lifecycle_keys() {
        let yaml = "caches:\n  downloaded:\n    max_unused_for: {days: 3, hours: 2}\n  diagnostics:\n    retention: 1w\n  max_disk_size: 50GB\n  cleanup_interval: 5m\n  in_memory:\n    capacity: 512MiB\nshared_cache:\n  max_upload_queue_size: 7\n  s3:\n    bucket: b\n    region: [local, \"http://127.0.0.1:9000\"]\n    access_key: k\n    secret_key: s\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let caches = &config.caches;
        assert_eq!(
            caches.downloaded.max_unused_for,
            Duration::from_secs(3 * 86400 + 7200)
        );
        assert_eq!(caches.diagnostics.retention, Duration::from_secs(7 * 86400));
        assert_eq!(caches.max_disk_size, Some(50_000_000_000));
        assert_eq!(caches.cleanup_interval, Some(Duration::from_secs(300)));
        assert_eq!(caches.in_memory.capacity, 512 << 20);
        let shared = config.shared_cache.unwrap();
        assert_eq!(shared.max_upload_queue_size, 7);
        assert_eq!(shared.max_concurrent_uploads, 20);
        assert!(matches!(
            shared.backend,
            crate::objstore::ObjectStoreConfig::S3(ref s3) if s3.bucket == "b"
        ));

        let (config, _) = Config::from_yaml("caches:\n  cleanup_interval: 0\n").unwrap();
        assert_eq!(config.caches.cleanup_interval, None);
        assert_eq!(
            Config::default().caches.cleanup_interval,
            Some(Duration::from_secs(900))
        );
        let err = Config::from_yaml("caches:\n  max_disk_size: 5 parsecs\n").unwrap_err();
        assert!(err.to_string().contains("caches.max_disk_size"), "{err}");
    }

    /// Self-hosted Sentry's `symbolicator/config.example.yml`, as that repository ships
    /// it, from the peer data next to the clone; `None` (said aloud) without it, as that
    /// file is another project's and is not copied here.
    fn self_hosted_config() -> Option<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/peer/self-hosted/config.example.yml");
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(err) => {
                println!(
                    "SKIPPED: self-hosted's config is not at {} ({err})",
                    path.display()
                );
                None
            }
        }
    }

    #[test]
    fn environment_variables_in_values() {
        // SAFETY: the names are unique to this test; no other test reads them.
        unsafe {
            std::env::set_var("OMNISYM_TEST_CFG_BIND", "0.0.0.0:4021");
            std::env::set_var("OMNISYM_TEST_CFG_REQUESTS", "17");
            std::env::set_var("OMNISYM_TEST_CFG_DIR", "/srv/cache");
        }
        let yaml = "bind: ${OMNISYM_TEST_CFG_BIND}\nmax_concurrent_requests: \"${OMNISYM_TEST_CFG_REQUESTS}\"\ncache_dir: ${OMNISYM_TEST_CFG_DIR}\ncaches:\n  downloaded:\n    retry_misses_after: \"${OMNISYM_TEST_CFG_REQUESTS}\"\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.bind.port(), 4021);
        assert_eq!(config.max_concurrent_requests, 17);
        assert_eq!(config.cache_dir, PathBuf::from("/srv/cache"));
        assert_eq!(
            config.caches.downloaded.retry_misses_after,
            Duration::from_secs(17)
        );
        // Only whole values are variables; an unset one is an error naming the key.
        let err = Config::from_yaml("bind: ${OMNISYM_TEST_CFG_UNSET_VARIABLE}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bind"), "{err}");
        assert!(err.contains("OMNISYM_TEST_CFG_UNSET_VARIABLE"), "{err}");
    }

    #[test]
    fn self_hosted_config_loads_whole() {
        // SAFETY: a name unique to this test.
        unsafe { std::env::set_var("SYMBOLICATOR_STATSD_ADDR", "127.0.0.1:8125") };
        let Some(self_hosted) = self_hosted_config() else {
            return;
        };
        let (config, ignored) = Config::from_yaml(&self_hosted).unwrap();
        assert_eq!(config.bind, "0.0.0.0:3021".parse().unwrap());
        assert_eq!(config.cache_dir, PathBuf::from("/data"));
        assert_eq!(config.logging.level, "warn");
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.metrics.statsd.as_deref(), Some("127.0.0.1:8125"));
        assert_eq!(config.metrics.prefix, "sentry.symbolicator");
    }

    #[test]
    fn the_log_queue_is_bounded_and_can_be_set() {
        let (example, _) = Config::from_yaml(include_str!("../config.example.yml")).unwrap();
        assert_eq!(example.logging.queue_lines, DEFAULT_LOG_QUEUE_LINES);
        assert_eq!(
            Config::default().logging.queue_lines,
            DEFAULT_LOG_QUEUE_LINES
        );
        let (config, ignored) = Config::from_yaml("logging: {queue_lines: 8}\n").unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.logging.queue_lines, 8);
        assert_eq!(config.logging.level, "info", "the rest keeps its defaults");
        for bad in ["0", "null", "-1", "many"] {
            let yaml = format!("logging: {{queue_lines: {bad}}}\n");
            let err = Config::from_yaml(&yaml).unwrap_err().to_string();
            assert!(err.contains("queue_lines"), "{bad}: {err}");
        }
    }

    /// Every key of upstream's config (its `Config` struct, nested sections included),
    /// set to a value of the right type.
    const EVERY_UPSTREAM_KEY: &str = r#"
cache_dir: /data
bind: 0.0.0.0:3021
logging: {level: info, format: json, enable_backtraces: true}
metrics: {statsd: "127.0.0.1:8125", prefix: symbolicator, hostname_tag: host, environment_tag: env, platform_tag: platform, custom_tags: {a: b}}
sentry_dsn: null
caches:
  downloaded: {max_unused_for: 1d, retry_misses_after: 1h, retry_misses_after_public: 1d, retry_malformed_after: 1d, max_lazy_redownloads: 50}
  derived: {max_unused_for: 7d, retry_misses_after: 1h, retry_misses_after_public: 1d, retry_malformed_after: 1d, max_lazy_recomputations: 20}
  diagnostics: {retention: 1d}
  index: {max_unused_for: 7d, retry_misses_after: 10m, retry_misses_after_public: 10m, retry_malformed_after: 10m, max_lazy_recomputations: 20}
  in_memory: {sentry_index_capacity: 100000, sentry_index_ttl: 1h, gcs_token_capacity: 100, s3_client_capacity: 100, object_meta_capacity: 104857600, cficaches_capacity: 419430400, fileinbundle_capacity: 3221225472, source_index_capacity: 10485760}
enable_cache_cleanup: false
cache_cleanup_interval: 15m
symstore_proxy: true
sources: []
connect_to_reserved_ips: false
deny_list_enabled: true
deny_list_time_window: 1m
deny_list_bucket_size: 5s
deny_list_threshold: 60
deny_list_block_time: 1h
deny_list_never_block_hosts: []
connect_timeout: 5s
head_timeout: 10s
max_download_timeout: 5m
max_concurrent_requests: 200
shared_cache: null
_crash_db: null
traces_sample_rate: 0.05
propagate_traces: true
crash_file_body_max_bytes: 262144000
symbolicate_body_max_bytes: 57671680
object_file_max_decompressed_section_size: 4294967296
object_file_max_decompressed_source_size: 1073741824
max_unwind_chain_len: 128
max_download_size: 16106127360
"#;

    #[test]
    fn durations_past_a_century_are_forever() {
        let huge = u64::MAX;
        let yaml = format!(
            "connect_timeout: {huge}\nmax_download_timeout: {huge}\ncaches:\n  downloaded:\n    max_unused_for: {huge}\n    retry_misses_after: {{days: {huge}}}\n"
        );
        let (config, _) = Config::from_yaml(&yaml).unwrap();
        assert_eq!(config.connect_timeout, crate::units::FOREVER);
        assert_eq!(config.max_download_timeout, crate::units::FOREVER);
        assert_eq!(
            config.caches.downloaded.max_unused_for,
            crate::units::FOREVER
        );
        assert_eq!(
            config.caches.downloaded.retry_misses_after,
            crate::units::FOREVER
        );
        // Clocks take them without overflowing.
        assert!(
            std::time::Instant::now()
                .checked_add(config.connect_timeout)
                .is_some()
        );
    }

    #[test]
    fn every_upstream_key_is_honoured_or_listed_in_the_config_docs() {
        let (config, ignored) = Config::from_yaml(EVERY_UPSTREAM_KEY).unwrap();
        assert_eq!(
            config.object_limits(),
            ObjectLimits {
                max_decompressed_section_size: 4294967296,
                max_decompressed_source_size: 1073741824,
                max_unwind_chain_len: 128,
                ..ObjectLimits::default()
            }
        );
        // The list lives in the last section of docs/configuration.md, so everything
        // from its heading on is the list.
        let docs = include_str!("../docs/configuration.md");
        let table = &docs[docs
            .find("Upstream keys that are read and ignored")
            .expect("docs/configuration.md lists ignored upstream keys")..];
        for key in &ignored {
            let last = key.rsplit('.').next().unwrap();
            let section = key.split('.').take(2).collect::<Vec<_>>().join(".");
            assert!(
                table.contains(&format!("`{key}`"))
                    || table.contains(&format!("`{last}`"))
                    || table.contains(&format!("`{section}.*`")),
                "{key} is ignored but not listed in docs/configuration.md"
            );
        }
        // What docs/configuration.md lists as ignored really is: a key honoured later must
        // leave it.
        assert!(config.symstore_proxy);
        for listed in ["propagate_traces", "caches.index"] {
            assert!(
                ignored.iter().any(|k| k.starts_with(listed)),
                "{listed} is honoured now; remove it from docs/configuration.md's ignored list"
            );
        }
    }

    #[test]
    fn compatibility_fronts_are_configured() {
        let config = Config::default();
        assert!(config.symstore_proxy);
        assert!(config.symcache_http.enabled);
        assert!(config.symcache_http.token.is_none());
        let yaml = "symstore_proxy: false\nsymcache_http:\n  enabled: false\n  token: s3cret\n  retry_after: 5s\n  answer_within: 1s\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert!(!config.symstore_proxy);
        let http = &config.symcache_http;
        assert!(!http.enabled);
        // The former name of `fronts.token`.
        let token = config.fronts.token.as_ref().map(Secret::expose);
        assert_eq!(token, Some("s3cret"));
        assert_eq!(http.retry_after, Duration::from_secs(5));
        assert_eq!(http.answer_within, Duration::from_secs(1));
        // The token never shows in a printed config.
        assert!(!format!("{config:?}").contains("s3cret"));
        let err = Config::from_yaml("symcache_http: {retry_after: 0}\n").unwrap_err();
        assert!(err.to_string().contains("retry_after"), "{err}");
    }

    #[test]
    fn errors_name_the_key_but_never_a_value() {
        for yaml in [
            "max_connections: s3cret\n",
            "max_connections: \"s3cret\\\" more\"\n",
            "symstore_proxy: s3cret\n",
            "fronts: {open: [s3cret]}\n",
            "caches: {max_disk_size: s3cret}\n",
            "write_timeout: s3cret\n",
            "max_connections: 1.5\ns3cret: 1\n",
            "sources: [{id: a, type: http, url: \"http://a\", headers: {Authorization: [s3cret]}}]\n",
            "sources: [{id: a, type: s3cret}]\n",
        ] {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(!err.contains("s3cret"), "{yaml}: {err}");
            assert!(err.contains("key `"), "{yaml}: {err}");
        }
        let err = Config::from_yaml("max_connections: 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("floating point `[redacted]`"), "{err}");
    }

    #[test]
    fn allowed_hosts_are_names_addresses_or_a_star() {
        let yaml = "allowed_hosts: [\"Symbols.Example.com.\", 10.0.0.5, \"[fd00::5]\", \"*\", b\u{fc}cher.example]\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let parsed: Vec<_> = config
            .allowed_hosts
            .iter()
            .map(|entry| AllowedHost::parse(entry).unwrap())
            .collect();
        assert_eq!(
            parsed,
            [
                AllowedHost::Name("symbols.example.com".into()),
                AllowedHost::Address,
                AllowedHost::Address,
                AllowedHost::Any,
                // As a browser sends it.
                AllowedHost::Name("xn--bcher-kva.example".into()),
            ]
        );
        assert!(Config::default().allowed_hosts.is_empty());
        for entry in [
            "http://a.example",
            "a.example:3021",
            "a.example/path",
            "*.example.com",
            "a b",
            "",
            ".",
            "::1",
        ] {
            let yaml = format!("allowed_hosts: [\"{entry}\"]\n");
            let err = Config::from_yaml(&yaml).unwrap_err().to_string();
            assert!(err.contains("allowed_hosts"), "{entry}: {err}");
        }
    }

    #[test]
    fn fronts_take_one_token_and_a_list_of_origins() {
        let yaml = "fronts:\n  token: s3cret\n  open: [mozilla]\n  cors_allowed_origins: [\"https://profiler.firefox.com\", \"http://localhost:4242\"]\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.fronts.open, [Front::Mozilla]);
        assert_eq!(config.fronts.cors_allowed_origins.len(), 2);
        let same = "fronts: {token: s3cret}\nsymcache_http: {token: s3cret}\n";
        assert!(Config::from_yaml(same).is_ok());
        for (yaml, names) in [
            ("fronts: {token: a}\nsymcache_http: {token: b}\n", "differ"),
            ("fronts: {token: \"\"}\n", "fronts.token"),
            ("fronts: {open: [everything]}\n", "fronts.open"),
            (
                "fronts: {cors_allowed_origins: [\"https://a.example/path\"]}\n",
                "not an origin",
            ),
            (
                "fronts: {cors_allowed_origins: [\"profiler.firefox.com\"]}\n",
                "not an origin",
            ),
            (
                "fronts: {cors_allowed_origins: [\"https://a.example/\"]}\n",
                "not an origin",
            ),
        ] {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(err.contains(names), "{yaml}: {err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn upstream_key_names_and_null() {
        let yaml = "symbolicate_body_max_bytes: 1000\ncrash_file_body_max_bytes: 2000\nenable_cache_cleanup: false\ncache_cleanup_interval: 5m\nmax_concurrent_requests: null\nmax_download_size: null\ncache_dir: null\ndeny_list_enabled: true\ndeny_list_threshold: 3\ndeny_list_time_window: 10s\ndeny_list_bucket_size: 2s\ndeny_list_block_time: 1m\ndeny_list_never_block_hosts: [symbols.example]\ncaches:\n  downloaded:\n    max_unused_for: null\n    retry_misses_after_public: 2h\n  derived:\n    retry_malformed_after: null\n  max_disk_size: null\nlogging:\n  enable_backtraces: false\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.max_request_body_size, 1000);
        assert_eq!(config.max_crash_file_size, 2000);
        assert_eq!(
            config.caches.cleanup_interval,
            Some(Duration::from_secs(300))
        );
        assert_eq!(config.in_process_cleanup(), None);
        assert_eq!(config.max_concurrent_requests, usize::MAX);
        assert_eq!(config.max_download_size, u64::MAX);
        assert_eq!(config.fetch_config().max_download_size, u64::MAX);
        let unlimited = Config::from_yaml(
            "object_file_max_decompressed_section_size: null\nmax_unwind_chain_len: null\n",
        )
        .unwrap()
        .0
        .object_limits();
        assert_eq!(unlimited.max_decompressed_section_size, u64::MAX);
        assert_eq!(unlimited.max_unwind_chain_len, usize::MAX);
        assert_eq!(unlimited.cfi_options().max_unwind_chain_len, None);
        assert_eq!(
            config.caches.downloaded.max_unused_for,
            crate::units::FOREVER
        );
        assert_eq!(
            config.caches.downloaded.retry_misses_after_public,
            Duration::from_secs(7200)
        );
        assert_eq!(
            config.caches.derived.retry_malformed_after,
            crate::units::FOREVER
        );
        assert_eq!(config.caches.max_disk_size, None);
        assert!(!config.logging.enable_backtraces);
        // `cache_dir: null` is upstream's "no cache": a directory that goes with the config.
        assert!(config.cache_dir.is_dir());
        let ephemeral = config.cache_dir.clone();
        let deny = config.fetch_config().deny_list;
        assert_eq!(deny.threshold, 3);
        assert_eq!(deny.time_window, Duration::from_secs(10));
        assert_eq!(deny.bucket_size, Duration::from_secs(2));
        assert_eq!(deny.block_time, Duration::from_secs(60));
        assert!(deny.never_block_hosts.contains("symbols.example"));
        drop(config);
        assert!(!ephemeral.exists());

        // Upstream's defaults where the concept is the same.
        let config = Config::default();
        assert_eq!(config.max_request_body_size, 55 * 1024 * 1024);
        assert_eq!(config.max_crash_file_size, 250 * 1024 * 1024);
        assert_eq!(config.connect_timeout, Duration::from_secs(5));
        assert_eq!(config.head_timeout, Duration::from_secs(10));
        assert_eq!(config.max_download_size, 15 << 30);
        assert_eq!(
            config.caches.downloaded.retry_misses_after_public,
            Duration::from_secs(86400)
        );
        assert_eq!(config.in_process_cleanup(), Some(Duration::from_secs(900)));
        assert!(config.deny_list().enabled);
    }

    #[test]
    fn hostile_client_keys() {
        let yaml = "request_limits:\n  max_modules: 7\n  max_frames: null\nheader_read_timeout: 2s\nbody_read_timeout: 1m\nmax_connections: 50\nmax_poll_timeout: 5\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let limits = config.request_limits;
        assert_eq!(limits.max_modules, 7);
        assert_eq!(limits.max_frames, usize::MAX);
        assert_eq!(limits.max_stacktraces, 10_000);
        assert_eq!(limits.max_sources, 100);
        assert_eq!(config.header_read_timeout, Duration::from_secs(2));
        assert_eq!(config.body_read_timeout, Duration::from_secs(60));
        assert_eq!(config.max_connections, 50);
        assert_eq!(config.max_poll_timeout, Duration::from_secs(5));
        let defaults = Config::default();
        assert_eq!(defaults.request_limits, RequestLimits::default());
        assert_eq!(defaults.header_read_timeout, Duration::from_secs(10));
        assert_eq!(defaults.max_connections, 1024);
        for bad in [
            "max_connections: 0\n",
            "header_read_timeout: 0\n",
            "body_read_timeout: 0s\n",
        ] {
            let key = bad.split(':').next().unwrap();
            let err = Config::from_yaml(bad).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("50GB"), Ok(50_000_000_000));
        assert_eq!(parse_size("1.5 kb"), Ok(1500));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("123"), Ok(123));
        assert!(parse_size("GB").is_err());
        assert!(parse_size("1 XB").is_err());
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let yaml = "bind: 127.0.0.1:1\ncaches:\n  derived:\n    max_unused_for: soon\n";
        let err = Config::from_yaml(yaml).unwrap_err().to_string();
        assert!(err.contains("caches.derived.max_unused_for"), "{err}");
        assert!(err.contains("line 4"), "{err}");

        let err = Config::from_yaml("max_concurrent_requests: many\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_concurrent_requests"), "{err}");
    }

    #[test]
    fn console_keys_as_the_example_documents_them() {
        let (example, _) = Config::from_yaml(include_str!("../config.example.yml")).unwrap();
        assert_eq!(example.console, ConsoleConfig::default());
        let (on_loopback, _) = Config::from_yaml("bind: 127.0.0.1:3021\n").unwrap();
        assert!(on_loopback.console_enabled());
        let (everywhere, _) = Config::from_yaml("bind: 0.0.0.0:3021\n").unwrap();
        assert!(
            !everywhere.console_enabled(),
            "off where others may reach it"
        );
        let (chosen, ignored) = Config::from_yaml(
            "bind: 0.0.0.0:3021\nconsole: {enabled: true, history: 1h}\nfronts: {open: [console]}\n",
        )
        .unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert!(chosen.console_enabled());
        assert_eq!(chosen.console.history, Duration::from_secs(3600));
        assert_eq!(chosen.fronts.open, [Front::Console]);
        let (_, ignored) = Config::from_yaml("console: {enable: true}\n").unwrap();
        assert!(
            ignored.iter().any(|key| key.contains("enable")),
            "{ignored:?}"
        );
    }

    #[test]
    fn host_and_port_splits() {
        assert_eq!(
            host_and_port("peers.ns.svc:3021"),
            Some(("peers.ns.svc", 3021))
        );
        assert_eq!(host_and_port("[fd00::1]:3021"), Some(("fd00::1", 3021)));
        assert_eq!(host_and_port("peers.ns.svc"), None);
        assert_eq!(host_and_port(":3021"), None);
        assert_eq!(host_and_port("host:http"), None);
    }

    #[test]
    fn fleet_and_draining_keys_as_the_example_documents_them() {
        let (example, ignored) = Config::from_yaml(include_str!("../config.example.yml")).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        let defaults = FleetConfig::default();
        assert_eq!(example.fleet.advertise_url, defaults.advertise_url);
        assert_eq!(example.fleet.peers, defaults.peers);
        assert_eq!(example.fleet.peers_dns, defaults.peers_dns);
        assert_eq!(example.fleet.peers_refresh, defaults.peers_refresh);
        assert_eq!(example.fleet.connect_timeout, defaults.connect_timeout);
        assert_eq!(example.drain_delay, Config::default().drain_delay);
        assert_eq!(example.fronts.cors_allowed_origins, [PROFILER_ORIGIN]);
        assert_eq!(
            Config::default().fronts.cors_allowed_origins,
            [PROFILER_ORIGIN]
        );

        let yaml = "fleet:\n  advertise_url: http://10.0.0.5:3021\n  peers_dns: peers.ns.svc:3021\ndrain_delay: 5s\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.drain_delay, Duration::from_secs(5));
        assert_eq!(config.fleet.peers_dns.as_deref(), Some("peers.ns.svc:3021"));
        for (yaml, names) in [
            ("fleet: {peers: [\"http://a:1\"]}\n", "advertise_url"),
            ("fleet: {advertise_url: \"ftp://a:1\"}\n", "ftp://a:1"),
            (
                "fleet: {advertise_url: \"http://a:1\", peers_dns: peers}\n",
                "peers_dns",
            ),
        ] {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(err.contains(names), "{yaml}: {err}");
        }
    }

    #[test]
    fn symbfile_keys_as_the_example_documents_them() {
        let (example, ignored) = Config::from_yaml(include_str!("../config.example.yml")).unwrap();
        assert!(
            !ignored.iter().any(|k| k.starts_with("symbfile")),
            "{ignored:?}"
        );
        let defaults = SymbfileConfig::default();
        let documented = &example.symbfile;
        assert_eq!(documented.max_file_size, defaults.max_file_size);
        assert_eq!(documented.max_parts, defaults.max_parts);
        assert_eq!(documented.max_pending_size, defaults.max_pending_size);
        assert_eq!(documented.max_inline_depth, defaults.max_inline_depth);
        assert_eq!(documented.max_pending_uploads, defaults.max_pending_uploads);
        assert_eq!(
            documented.pending_upload_timeout,
            defaults.pending_upload_timeout
        );
        assert_eq!(documented.max_stored_files, defaults.max_stored_files);
        assert!(documented.api_keys.is_empty());
        assert_eq!(example.symbfile_dir(), example.cache_dir.join("symbfiles"));

        let yaml = "symbfile:\n  api_keys: [a]\n  dir: /srv/symbfiles\n  max_file_size: 1MiB\n  max_parts: null\n  pending_upload_timeout: 5m\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(config.symbfile.api_keys[0].expose(), "a");
        assert_eq!(config.symbfile_dir(), PathBuf::from("/srv/symbfiles"));
        assert_eq!(config.symbfile.max_file_size, 1024 * 1024);
        assert_eq!(config.symbfile.max_parts, usize::MAX);
        assert_eq!(
            config.symbfile.pending_upload_timeout,
            Duration::from_secs(300)
        );
        let err = Config::from_yaml("symbfile:\n  max_parts: 0\n").unwrap_err();
        assert!(err.to_string().contains("symbfile.max_parts"), "{err}");
        for bad in [
            "max_inline_depth: 0",
            "max_inline_depth: 100000",
            "max_pending_size: 1MiB",
            "max_file_size: null",
        ] {
            let err = Config::from_yaml(&format!("symbfile:\n  {bad}\n")).unwrap_err();
            let key = bad.split(':').next().unwrap();
            let key = if key == "max_file_size" {
                "max_pending_size"
            } else {
                key
            };
            assert!(err.to_string().contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn the_store_section_is_read_and_checked() {
        let yaml = "store:\n  backend:\n    type: filesystem\n    path: /srv/store\n  max_file_size: 1GiB\n  tokens:\n    - token: abc\n      access: write\n  scopes:\n    acme/web: \"42\"\n  retention: 30d\n";
        let (config, ignored) = Config::from_yaml(yaml).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert!(matches!(
            config.store.backend,
            Some(crate::store::StoreBackend::Filesystem { ref path }) if path == Path::new("/srv/store")
        ));
        assert_eq!(config.store.max_file_size, 1 << 30);
        assert_eq!(
            config.store.retention,
            Some(Duration::from_secs(30 * 86400))
        );
        assert_eq!(config.store.scopes["acme/web"], "42");
        for (bad, key) in [
            ("store:\n  scopes:\n    acme: \"1\"\n", "store.scopes"),
            ("store:\n  scopes:\n    a/b: global\n", "store.scopes.a/b"),
            ("store:\n  max_file_size: 0\n", "store.max_file_size"),
            (
                "max_download_size: 1MiB\nstore:\n  backend:\n    type: s3\n    bucket: b\n    region: us-east-1\n",
                "store.max_file_size",
            ),
        ] {
            let err = Config::from_yaml(bad).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }
}
