//! Wire types shared by the endpoints: what clients send and what they get back, field
//! for field as the upstream Symbolicator speaks them (names, defaults, which fields are
//! skipped when empty). Internal state does not live here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use symbolic::common::{Arch, Language};

use crate::error::{CacheError, CacheResult};
use crate::sources::{ObjectType, SourceId};
use crate::units::deserialize_limit;

/// A `u64` that travels as a `"0x…"` string, and is accepted as a hex string, a decimal
/// string or a JSON number, because SDKs send all three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HexValue(pub u64);

impl fmt::Display for HexValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl FromStr for HexValue {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).map(HexValue),
            None => s.parse().map(HexValue),
        }
    }
}

impl Serialize for HexValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HexValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = HexValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address as a hex string or a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<HexValue, E> {
                Ok(HexValue(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<HexValue, E> {
                u64::try_from(v)
                    .map(HexValue)
                    .map_err(|_| E::custom("negative address"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<HexValue, E> {
                v.parse()
                    .map_err(|_| E::custom(format_args!("invalid address {v:?}")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// How an address is to be read: absolute in the process' address space, or relative to
/// the module at an index of the request's module list (Wasm, .NET).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AddrMode {
    #[default]
    Abs,
    Rel(usize),
}

impl fmt::Display for AddrMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrMode::Abs => f.write_str("abs"),
            AddrMode::Rel(idx) => write!(f, "rel:{idx}"),
        }
    }
}

impl FromStr for AddrMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "abs" {
            return Ok(AddrMode::Abs);
        }
        s.strip_prefix("rel:")
            .and_then(|idx| idx.parse().ok())
            .map(AddrMode::Rel)
            .ok_or_else(|| format!("invalid address mode {s:?} (expected \"abs\" or \"rel:N\")"))
    }
}

impl Serialize for AddrMode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AddrMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(deserializer)?;
        s.parse().map_err(de::Error::custom)
    }
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// How far a frame's instruction pointer can be trusted (set by stack walkers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameTrust {
    #[default]
    None,
    Scan,
    CfiScan,
    Fp,
    Cfi,
    PreWalked,
    Context,
}

/// OS-specific signal number of the crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal(pub u32);

pub type Registers = BTreeMap<String, HexValue>;

/// A frame as clients send it; the symbolicated frame carries the same fields, filled in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RawFrame {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub addr_mode: AddrMode,
    pub instruction_addr: HexValue,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjust_instruction_addr: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_id: Option<HexValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<Language>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sym_addr: Option<HexValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineno: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_context: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_line: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_context: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_app: Option<bool>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub trust: FrameTrust,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RawStacktrace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_requesting: Option<bool>,
    #[serde(default)]
    pub registers: Registers,
    pub frames: Vec<RawFrame>,
}

/// Symbolication outcome of one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameStatus {
    #[default]
    Symbolicated,
    MissingSymbol,
    UnknownImage,
    Missing,
    Malformed,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SymbolicatedFrame {
    pub status: FrameStatus,
    pub original_index: Option<usize>,
    #[serde(flatten)]
    pub raw: RawFrame,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompleteStacktrace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_requesting: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub registers: Registers,
    pub frames: Vec<SymbolicatedFrame>,
}

/// A module (loaded image) as clients describe it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawObjectInfo {
    #[serde(rename = "type")]
    pub ty: ObjectType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_checksum: Option<String>,
    #[serde(default)]
    pub image_addr: HexValue,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<u64>,
    /// The FileID of Elastic's profiler (base64 or hex): symbols uploaded as symbfiles
    /// for it are used before any source (omnisym only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
}

/// Status of fetching the file that serves one purpose (debug info, unwind info).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectFileStatus {
    Found,
    #[default]
    Unused,
    Missing,
    Malformed,
    FetchingFailed,
    Timeout,
    TooLarge,
    Unsupported,
    Other,
}

/// The version control system a PDB's SRCSRV stream fetches sources from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrcSrvVcs {
    Git,
    Perforce,
    Other,
}

impl SrcSrvVcs {
    pub fn from_vcs_name(name: &str) -> Self {
        let name = name.to_ascii_lowercase();
        if name.contains("git") {
            SrcSrvVcs::Git
        } else if name.contains("perforce") {
            SrcSrvVcs::Perforce
        } else {
            SrcSrvVcs::Other
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectFeatures {
    pub has_debug_info: bool,
    pub has_unwind_info: bool,
    pub has_symbols: bool,
    #[serde(default)]
    pub has_sources: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srcsrv_vcs: Option<SrcSrvVcs>,
}

impl ObjectFeatures {
    pub fn merge(&mut self, other: &ObjectFeatures) {
        self.has_debug_info |= other.has_debug_info;
        self.has_unwind_info |= other.has_unwind_info;
        self.has_symbols |= other.has_symbols;
        self.has_sources |= other.has_sources;
        if self.srcsrv_vcs.is_none() {
            self.srcsrv_vcs.clone_from(&other.srcsrv_vcs);
        }
    }
}

/// What happened when a candidate file was fetched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ObjectDownloadInfo {
    Ok { features: ObjectFeatures },
    Malformed,
    NoPerm { details: String },
    NotFound,
    Error { details: String },
}

/// What happened when a fetched candidate was used for one purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ObjectUseInfo {
    Ok,
    Malformed,
    Error {
        details: String,
    },
    #[default]
    None,
}

impl ObjectUseInfo {
    pub fn is_none(&self) -> bool {
        matches!(self, ObjectUseInfo::None)
    }
}

// The one place where the error kind becomes what a response says: module statuses,
// frame statuses and candidate reports.

impl ObjectFileStatus {
    pub fn from_error(err: &CacheError) -> Self {
        match err {
            CacheError::NotFound => ObjectFileStatus::Missing,
            CacheError::PermissionDenied(_) | CacheError::DownloadError(_) => {
                ObjectFileStatus::FetchingFailed
            }
            CacheError::TooLarge(_) => ObjectFileStatus::TooLarge,
            CacheError::Timeout(_) => ObjectFileStatus::Timeout,
            CacheError::Malformed(_) => ObjectFileStatus::Malformed,
            CacheError::Unsupported(_) => ObjectFileStatus::Unsupported,
            CacheError::InternalError => ObjectFileStatus::Other,
        }
    }

    pub fn from_result<T>(result: &CacheResult<T>) -> Self {
        match result {
            Ok(_) => ObjectFileStatus::Found,
            Err(err) => Self::from_error(err),
        }
    }
}

impl FrameStatus {
    /// The status of a frame whose module has no usable debug file because of `err`.
    pub fn from_module_error(err: &CacheError) -> Self {
        match err {
            CacheError::Malformed(_) => FrameStatus::Malformed,
            _ => FrameStatus::Missing,
        }
    }
}

impl ObjectDownloadInfo {
    /// The report for a fetch that gave `features`, or failed with an error.
    pub fn from_result(result: Result<ObjectFeatures, &CacheError>) -> Self {
        match result {
            Ok(features) => ObjectDownloadInfo::Ok { features },
            Err(CacheError::NotFound) => ObjectDownloadInfo::NotFound,
            Err(CacheError::PermissionDenied(details)) => ObjectDownloadInfo::NoPerm {
                details: details.clone(),
            },
            Err(CacheError::Malformed(_)) => ObjectDownloadInfo::Malformed,
            Err(err) => ObjectDownloadInfo::Error {
                details: err.to_string(),
            },
        }
    }
}

impl ObjectUseInfo {
    /// The report for using a fetched candidate, e.g. building a derived cache from it.
    pub fn from_result<T>(result: &CacheResult<T>) -> Self {
        match result {
            Ok(_) => ObjectUseInfo::Ok,
            Err(CacheError::Malformed(_)) => ObjectUseInfo::Malformed,
            Err(err) => ObjectUseInfo::Error {
                details: err.to_string(),
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCandidate {
    pub source: SourceId,
    pub location: String,
    pub download: ObjectDownloadInfo,
    #[serde(default, skip_serializing_if = "ObjectUseInfo::is_none")]
    pub unwind: ObjectUseInfo,
    #[serde(default, skip_serializing_if = "ObjectUseInfo::is_none")]
    pub debug: ObjectUseInfo,
}

/// Every file consulted for a module, kept sorted and unique by `(source, location)`
/// because that is the order upstream reports them in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllObjectCandidates(Vec<ObjectCandidate>);

impl AllObjectCandidates {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, ObjectCandidate> {
        self.0.iter()
    }

    fn position(&self, source: &SourceId, location: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|c| (&c.source, c.location.as_str()).cmp(&(source, location)))
    }

    /// Inserts or updates a candidate; use infos only overwrite when they say something.
    pub fn merge_one(&mut self, candidate: ObjectCandidate) {
        match self.position(&candidate.source, &candidate.location) {
            Ok(idx) => {
                let existing = &mut self.0[idx];
                existing.download = candidate.download;
                if !candidate.unwind.is_none() {
                    existing.unwind = candidate.unwind;
                }
                if !candidate.debug.is_none() {
                    existing.debug = candidate.debug;
                }
            }
            Err(idx) => self.0.insert(idx, candidate),
        }
    }

    pub fn merge(&mut self, other: AllObjectCandidates) {
        for candidate in other.0 {
            self.merge_one(candidate);
        }
    }

    pub fn set_debug(&mut self, source: &SourceId, location: &str, info: ObjectUseInfo) {
        if let Ok(idx) = self.position(source, location) {
            self.0[idx].debug = info;
        }
    }

    pub fn set_unwind(&mut self, source: &SourceId, location: &str, info: ObjectUseInfo) {
        if let Ok(idx) = self.position(source, location) {
            self.0[idx].unwind = info;
        }
    }
}

impl From<Vec<ObjectCandidate>> for AllObjectCandidates {
    fn from(candidates: Vec<ObjectCandidate>) -> Self {
        let mut all = AllObjectCandidates::default();
        for candidate in candidates {
            all.merge_one(candidate);
        }
        all
    }
}

/// A module in a response: what the client sent, plus what we found out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteObjectInfo {
    pub debug_status: ObjectFileStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwind_status: Option<ObjectFileStatus>,
    pub features: ObjectFeatures,
    pub arch: Arch,
    #[serde(flatten)]
    pub raw: RawObjectInfo,
    #[serde(default, skip_serializing_if = "AllObjectCandidates::is_empty")]
    pub candidates: AllObjectCandidates,
}

impl From<RawObjectInfo> for CompleteObjectInfo {
    fn from(raw: RawObjectInfo) -> Self {
        CompleteObjectInfo {
            debug_status: ObjectFileStatus::Unused,
            unwind_status: None,
            features: Default::default(),
            arch: Default::default(),
            raw,
            candidates: Default::default(),
        }
    }
}

impl CompleteObjectInfo {
    pub fn supports_absolute_addresses(&self) -> bool {
        self.raw.image_addr.0 != 0
    }

    pub fn abs_to_rel_addr(&self, addr: u64) -> Option<u64> {
        if self.supports_absolute_addresses() {
            addr.checked_sub(self.raw.image_addr.0)
        } else {
            None
        }
    }

    pub fn rel_to_abs_addr(&self, addr: u64) -> Option<u64> {
        if self.supports_absolute_addresses() {
            self.raw.image_addr.0.checked_add(addr)
        } else {
            None
        }
    }
}

/// Per-request switches that change what is computed or reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct RequestOptions {
    pub dif_candidates: bool,
    pub apply_source_context: bool,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            dif_candidates: false,
            apply_source_context: true,
        }
    }
}

/// Order of frames in the request's stack traces. Each endpoint has its own default,
/// as upstream does (native stack traces come innermost first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameOrder {
    CallerFirst,
    CalleeFirst,
}

/// The operating system and CPU a crash report was written on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemInfo {
    pub os_name: String,
    pub os_version: String,
    pub os_build: String,
    pub cpu_arch: Arch,
    pub device_model: String,
}

impl SystemInfo {
    /// A crash file that does not name its CPU still tells it through its modules.
    pub fn fill_arch_from(&mut self, modules: &[CompleteObjectInfo]) {
        if self.cpu_arch == Arch::Unknown {
            self.cpu_arch = modules
                .iter()
                .map(|m| m.arch)
                .find(|a| *a != Arch::Unknown)
                .unwrap_or_default();
        }
    }
}

/// A finished symbolication, as `/symbolicate`, `/minidump` and friends return it.
/// The crash metadata fields are only set for crash reports (minidumps, Apple crash
/// reports).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletedSymbolicationResponse {
    /// Unix seconds, as upstream sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<Signal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_info: Option<SystemInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash_details: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assertion: Option<String>,
    pub stacktraces: Vec<CompleteStacktrace>,
    pub modules: Vec<CompleteObjectInfo>,
}

/// One rule of `rewrite_first_module`: a regex and its replacement (`$name` refers to
/// capture groups).
#[derive(Clone, Debug)]
struct RewriteRule {
    from: regex::Regex,
    to: String,
}

impl<'de> Deserialize<'de> for RewriteRule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            from: String,
            to: String,
        }
        let wire = Wire::deserialize(deserializer)?;
        let from = regex::Regex::new(&wire.from)
            .map_err(|e| de::Error::custom(format_args!("invalid regex `from`: {e}")))?;
        Ok(RewriteRule { from, to: wire.to })
    }
}

/// Rules that rename the debug file of the lowest-addressed module for the lookup only
/// (Electron apps ship renamed main executables whose symbols are uploaded under the
/// framework's name). The first rule that changes the name wins.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(transparent)]
pub struct RewriteRules(Vec<RewriteRule>);

impl RewriteRules {
    pub fn rewrite(&self, debug_file: &str) -> Option<String> {
        self.0.iter().find_map(
            |rule| match rule.from.replace(debug_file, rule.to.as_str()) {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(new) => Some(new),
            },
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Every answer a symbolication request or a poll can get.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SymbolicationResponse {
    Pending {
        request_id: RequestId,
        retry_after: u64,
    },
    Completed(Box<serde_json::Value>),
    Failed {
        message: String,
    },
    Timeout,
    InternalError,
}

/// Opaque id of a request that is still running or recently finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub uuid::Uuid);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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

/// A list a request may hold, and the limit that bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    Modules,
    Stacktraces,
    Frames,
    Sources,
}

impl Counted {
    /// The config key under `request_limits`.
    pub fn key(self) -> &'static str {
        match self {
            Counted::Modules => "max_modules",
            Counted::Stacktraces => "max_stacktraces",
            Counted::Frames => "max_frames",
            Counted::Sources => "max_sources",
        }
    }

    fn limit(self, limits: &RequestLimits) -> usize {
        match self {
            Counted::Modules => limits.max_modules,
            Counted::Stacktraces => limits.max_stacktraces,
            Counted::Frames => limits.max_frames,
            Counted::Sources => limits.max_sources,
        }
    }
}

/// Why a request body was refused before it was parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefused {
    #[error("more than {limit} {what} (limit `request_limits.{key}`)", key = .counted.key())]
    TooMany {
        /// What was counted, as the client would call it (`frames`, `minidump threads`).
        what: String,
        counted: Counted,
        limit: usize,
    },
    /// An object sent as a JSON array (serde reads structs from arrays, field by field,
    /// which would hide its lists from the count).
    #[error("field `{0}`: expected an object")]
    NotAnObject(String),
}

impl RequestLimits {
    /// Refuses `count` entries of `what` when they exceed the limit of `counted`.
    pub fn check(&self, counted: Counted, what: &str, count: usize) -> Result<(), RequestRefused> {
        let limit = counted.limit(self);
        if count > limit {
            return Err(RequestRefused::TooMany {
                what: what.to_owned(),
                counted,
                limit,
            });
        }
        Ok(())
    }

    /// Counts the lists of a JSON request body without building it: `modules`,
    /// `sources`, `stacktraces` and the `frames` of all of them together, plus `extra`
    /// top-level lists (JVM `exceptions` and `classes`). Stops at the first limit
    /// passed. A body that is not valid JSON, or not of the expected types, passes:
    /// the real parse reports it better, naming the field.
    pub fn check_json(
        &self,
        body: &[u8],
        extra: &[(&'static str, Counted)],
    ) -> Result<(), RequestRefused> {
        let mut tally = Tally {
            limits: self,
            extra,
            frames: 0,
            refused: None,
        };
        let mut de = serde_json::Deserializer::from_slice(body);
        // A walk that stopped for another reason (not JSON, not the expected types) is
        // left to the real parse, whose error names the field.
        let _ = de::DeserializeSeed::deserialize(TopLevel(&mut tally), &mut de);
        tally.refused.map_or(Ok(()), Err)
    }
}

/// The running count of one body walk; `refused` is set when the walk stopped at a limit
/// (the serde error that stopped it carries no detail of its own).
struct Tally<'a> {
    limits: &'a RequestLimits,
    extra: &'a [(&'static str, Counted)],
    frames: usize,
    refused: Option<RequestRefused>,
}

impl Tally<'_> {
    fn refuse<E: de::Error>(&mut self, refused: RequestRefused) -> E {
        let err = E::custom(&refused);
        self.refused = Some(refused);
        err
    }
}

/// Each walker takes whatever JSON value comes and is its own visitor.
macro_rules! seed_is_visitor {
    ($($walker:ident),*) => {$(
        impl<'de> de::DeserializeSeed<'de> for $walker<'_, '_> {
            type Value = ();

            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
    )*};
}

seed_is_visitor!(TopLevel, CountList, Stacktrace);

struct TopLevel<'t, 'a>(&'t mut Tally<'a>);

impl<'de> de::Visitor<'de> for TopLevel<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let tally = self.0;
        while let Some(key) = map.next_key::<KeyName>()? {
            let counted = match key.0 {
                Some("stacktraces") => Some(("stacktraces", Counted::Stacktraces)),
                Some("modules") => Some(("modules", Counted::Modules)),
                Some("sources") => Some(("sources", Counted::Sources)),
                Some(name) => tally
                    .extra
                    .iter()
                    .find(|(extra, _)| *extra == name)
                    .copied(),
                None => None,
            };
            match counted {
                Some((what, counted)) => map.next_value_seed(CountList {
                    tally: &mut *tally,
                    what,
                    counted,
                    elements: if what == "stacktraces" {
                        Elements::Stacktraces
                    } else {
                        Elements::Skipped
                    },
                })?,
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.0.refuse(RequestRefused::NotAnObject(".".into())))
    }
}

/// An object key, named only when it is one of the lists counted (so that reading the
/// others allocates nothing).
struct KeyName(Option<&'static str>);

impl<'de> Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = KeyName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<KeyName, E> {
                const COUNTED: [&str; 6] = [
                    "stacktraces",
                    "frames",
                    "modules",
                    "sources",
                    "exceptions",
                    "classes",
                ];
                Ok(KeyName(COUNTED.into_iter().find(|name| *name == key)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Counts the elements of one list (`null` is an empty one).
struct CountList<'t, 'a> {
    tally: &'t mut Tally<'a>,
    what: &'static str,
    counted: Counted,
    elements: Elements,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Elements {
    /// Counted, not read.
    Skipped,
    /// Frames: added to the request's total, not read.
    Frames,
    /// Stack traces: each one's frames counted.
    Stacktraces,
}

impl<'de> de::Visitor<'de> for CountList<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let tally = self.tally;
        let mut count = 0usize;
        loop {
            let next = match self.elements {
                Elements::Stacktraces => seq.next_element_seed(Stacktrace {
                    tally: &mut *tally,
                    index: count,
                })?,
                Elements::Skipped | Elements::Frames => {
                    seq.next_element::<de::IgnoredAny>()?.map(drop)
                }
            };
            if next.is_none() {
                return Ok(());
            }
            count += 1;
            let total = if self.elements == Elements::Frames {
                tally.frames += 1;
                tally.frames
            } else {
                count
            };
            if let Err(refused) = tally.limits.check(self.counted, self.what, total) {
                return Err(tally.refuse(refused));
            }
        }
    }
}

struct Stacktrace<'t, 'a> {
    tally: &'t mut Tally<'a>,
    index: usize,
}

impl<'de> de::Visitor<'de> for Stacktrace<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a stack trace")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<KeyName>()? {
            if key.0 == Some("frames") {
                map.next_value_seed(CountList {
                    tally: &mut *self.tally,
                    what: "frames",
                    counted: Counted::Frames,
                    elements: Elements::Frames,
                })?;
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        let field = format!("stacktraces[{}]", self.index);
        Err(self.tally.refuse(RequestRefused::NotAnObject(field)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_value_accepts_strings_and_numbers() {
        let v: Vec<HexValue> = serde_json::from_str(r#"["0x0000000001509530", "42", 7]"#).unwrap();
        assert_eq!(v, vec![HexValue(0x1509530), HexValue(42), HexValue(7)]);
        assert_eq!(serde_json::to_string(&v[0]).unwrap(), r#""0x1509530""#);
        assert!(serde_json::from_str::<HexValue>(r#""0xzz""#).is_err());
    }

    #[test]
    fn rewrite_rules_apply_the_first_matching_rule() {
        let rules: RewriteRules = serde_json::from_str(
            r#"[{"from": "[^/\\\\]+ (?<suffix>Helper( \\(.+\\))?)$", "to": "Electron $suffix"},
                {"from": "[^/\\\\]+\\.exe\\.pdb$", "to": "electron.exe.pdb"}]"#,
        )
        .unwrap();
        assert_eq!(
            rules.rewrite("My App Helper (Renderer)").as_deref(),
            Some("Electron Helper (Renderer)")
        );
        assert_eq!(
            rules.rewrite("C:\\out\\myapp.exe.pdb").as_deref(),
            Some("C:\\out\\electron.exe.pdb")
        );
        assert_eq!(rules.rewrite("My App"), None);
        assert!(serde_json::from_str::<RewriteRules>(r#"[{"from": "(", "to": ""}]"#).is_err());
    }

    #[test]
    fn request_limits_count_lists_before_parsing() {
        let limits = RequestLimits {
            max_modules: 2,
            max_stacktraces: 2,
            max_frames: 3,
            max_sources: 1,
        };
        let check = |body: &str| limits.check_json(body.as_bytes(), &[]);
        let refused = |body: &str| check(body).unwrap_err().to_string();
        let at_limits =
            r#"{"modules":[{},{}],"sources":[{}],"stacktraces":[{"frames":[1,2]},{"frames":[3]}]}"#;
        assert_eq!(check(at_limits), Ok(()));
        assert_eq!(
            refused(r#"{"modules":[{},{},{}]}"#),
            "more than 2 modules (limit `request_limits.max_modules`)"
        );
        assert_eq!(
            refused(r#"{"sources":[{},{}]}"#),
            "more than 1 sources (limit `request_limits.max_sources`)"
        );
        assert_eq!(
            refused(r#"{"stacktraces":[{"frames":[]},{},{"frames":[]}]}"#),
            "more than 2 stacktraces (limit `request_limits.max_stacktraces`)"
        );
        // Frames add up over all stack traces of the request.
        assert_eq!(
            refused(r#"{"stacktraces":[{"frames":[1,2]},{"x":[5,5,5,5],"frames":[3,4]}]}"#),
            "more than 3 frames (limit `request_limits.max_frames`)"
        );
        // A key spelled with escapes is the same key to the real parse.
        assert!(check(r#"{"mod\u0075les":[1,2,3]}"#).is_err());

        // Lists of one endpoint only are counted where the caller names them.
        let classes = r#"{"classes":["a","b","c","d"]}"#;
        assert_eq!(check(classes), Ok(()));
        assert_eq!(
            limits
                .check_json(classes.as_bytes(), &[("classes", Counted::Frames)])
                .unwrap_err()
                .to_string(),
            "more than 3 classes (limit `request_limits.max_frames`)"
        );

        // Objects sent as arrays would hide their lists from the count.
        assert_eq!(
            check(r#"[null, null, [], [[], []]]"#),
            Err(RequestRefused::NotAnObject(".".into()))
        );
        assert_eq!(
            check(r#"{"stacktraces":[{"frames":[]},[null,null,null,{},[1,2,3,4]]]}"#),
            Err(RequestRefused::NotAnObject("stacktraces[1]".into()))
        );

        // What is not JSON or not of the expected types is left to the real parse.
        for body in [
            "{",
            "5",
            r#"{"modules":5}"#,
            r#"{"modules":null}"#,
            r#"{"stacktraces":[5]}"#,
        ] {
            assert_eq!(check(body), Ok(()), "{body}");
        }
    }

    #[test]
    fn addr_mode_round_trips() {
        assert_eq!("rel:3".parse::<AddrMode>().unwrap(), AddrMode::Rel(3));
        assert_eq!(AddrMode::Rel(0).to_string(), "rel:0");
        assert!("rel:x".parse::<AddrMode>().is_err());
    }

    #[test]
    fn candidates_stay_sorted_and_merge() {
        let c = |loc: &str, download| ObjectCandidate {
            source: SourceId::new("s"),
            location: loc.into(),
            download,
            unwind: ObjectUseInfo::None,
            debug: ObjectUseInfo::None,
        };
        let mut all: AllObjectCandidates = vec![
            c("b", ObjectDownloadInfo::NotFound),
            c("a", ObjectDownloadInfo::NotFound),
        ]
        .into();
        all.set_debug(&SourceId::new("s"), "b", ObjectUseInfo::Ok);
        all.merge_one(c("b", ObjectDownloadInfo::Malformed));
        let locs: Vec<_> = all.iter().map(|c| c.location.as_str()).collect();
        assert_eq!(locs, ["a", "b"]);
        assert_eq!(all.iter().nth(1).unwrap().debug, ObjectUseInfo::Ok);
        assert_eq!(
            all.iter().nth(1).unwrap().download,
            ObjectDownloadInfo::Malformed
        );
    }
}
