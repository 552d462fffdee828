//! The wire types of `POST /symbolicate`, `/minidump`, `/applecrashreport` and
//! `/symbolicate-any`: what clients send and what they get back, field for field as
//! upstream Symbolicator speaks them (names, defaults, which fields are skipped when
//! empty). Candidate reports, shared with the lookup, are `crate::types`'s.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use symbolic::common::{Arch, DebugId, Language};

use crate::error::{CacheError, CacheResult};
use crate::sources::ObjectType;
use crate::types::{AllObjectCandidates, ObjectFeatures, UnwindOrder};

/// A `u64` that travels as a `"0x…"` string, and is accepted as a hex string, a decimal
/// string or a JSON number, because SDKs send all three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HexValue(pub u64);

impl HexValue {
    /// `0x` and the lowercase digits without leading zeros, as `{:#x}` writes them.
    /// Every answer carries a few of these per frame; formatting through `fmt` (and
    /// serde's `collect_str`, which escapes what it is handed piece by piece) cost more
    /// than the SymCache lookup behind the frame.
    fn encode(self, buf: &mut [u8; 18]) -> &str {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let len = (64 - self.0.leading_zeros()).div_ceil(4).max(1) as usize;
        buf[0] = b'0';
        buf[1] = b'x';
        for (i, out) in buf[2..2 + len].iter_mut().enumerate() {
            let shift = 4 * (len - 1 - i);
            *out = DIGITS[((self.0 >> shift) & 0xf) as usize];
        }
        std::str::from_utf8(&buf[..2 + len]).expect("hex digits are ASCII")
    }
}

impl fmt::Display for HexValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.encode(&mut [0; 18]))
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
        serializer.serialize_str(self.encode(&mut [0; 18]))
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
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct RawFrame {
    #[serde(default)]
    pub platform: Option<String>,
    #[serde(default)]
    pub addr_mode: AddrMode,
    pub instruction_addr: HexValue,
    #[serde(default)]
    pub adjust_instruction_addr: Option<bool>,
    #[serde(default)]
    pub function_id: Option<HexValue>,
    #[serde(default)]
    pub package: Option<String>,
    #[serde(default)]
    pub lang: Option<Language>,
    #[serde(default)]
    pub symbol: Option<String>,
    #[serde(default)]
    pub sym_addr: Option<HexValue>,
    #[serde(default)]
    pub function: Option<String>,
    #[serde(default)]
    pub filename: Option<String>,
    #[serde(default)]
    pub abs_path: Option<String>,
    #[serde(default)]
    pub lineno: Option<u32>,
    #[serde(default)]
    pub pre_context: Vec<String>,
    #[serde(default)]
    pub context_line: Option<String>,
    #[serde(default)]
    pub post_context: Vec<String>,
    #[serde(default)]
    pub source_link: Option<String>,
    #[serde(default)]
    pub in_app: Option<bool>,
    #[serde(default)]
    pub trust: FrameTrust,
}

/// Fields a frame can have (what `serialize_struct` is told; JSON ignores it).
const RAW_FRAME_FIELDS: usize = 19;

/// By hand, and shared with [`SymbolicatedFrame`] rather than flattened into it: a
/// flattened struct is written as a map, one entry through an adapter per field, which
/// costs a fifth of a warm answer's serialization. Fields in upstream's order, unset
/// ones left out.
impl RawFrame {
    fn serialize_fields<S: SerializeStruct>(&self, s: &mut S) -> Result<(), S::Error> {
        fn some<S: SerializeStruct, T: Serialize + ?Sized>(
            s: &mut S,
            key: &'static str,
            value: Option<&T>,
        ) -> Result<(), S::Error> {
            match value {
                Some(value) => s.serialize_field(key, value),
                None => s.skip_field(key),
            }
        }
        fn nonempty(lines: &[String]) -> Option<&[String]> {
            (!lines.is_empty()).then_some(lines)
        }
        some(s, "platform", self.platform.as_ref())?;
        some(
            s,
            "addr_mode",
            Some(&self.addr_mode).filter(|m| !is_default(*m)),
        )?;
        s.serialize_field("instruction_addr", &self.instruction_addr)?;
        some(
            s,
            "adjust_instruction_addr",
            self.adjust_instruction_addr.as_ref(),
        )?;
        some(s, "function_id", self.function_id.as_ref())?;
        some(s, "package", self.package.as_ref())?;
        some(s, "lang", self.lang.as_ref())?;
        some(s, "symbol", self.symbol.as_ref())?;
        some(s, "sym_addr", self.sym_addr.as_ref())?;
        some(s, "function", self.function.as_ref())?;
        some(s, "filename", self.filename.as_ref())?;
        some(s, "abs_path", self.abs_path.as_ref())?;
        some(s, "lineno", self.lineno.as_ref())?;
        some(s, "pre_context", nonempty(&self.pre_context))?;
        some(s, "context_line", self.context_line.as_ref())?;
        some(s, "post_context", nonempty(&self.post_context))?;
        some(s, "source_link", self.source_link.as_ref())?;
        some(s, "in_app", self.in_app.as_ref())?;
        some(s, "trust", Some(&self.trust).filter(|t| !is_default(*t)))
    }
}

impl Serialize for RawFrame {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("RawFrame", RAW_FRAME_FIELDS)?;
        self.serialize_fields(&mut s)?;
        s.end()
    }
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

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct SymbolicatedFrame {
    pub status: FrameStatus,
    pub original_index: Option<usize>,
    #[serde(flatten)]
    pub raw: RawFrame,
}

impl Serialize for SymbolicatedFrame {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("SymbolicatedFrame", 2 + RAW_FRAME_FIELDS)?;
        s.serialize_field("status", &self.status)?;
        s.serialize_field("original_index", &self.original_index)?;
        self.raw.serialize_fields(&mut s)?;
        s.end()
    }
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
    /// The debug file the module was symbolicated with, as it names itself. Not in the
    /// wire answer, as upstream has none; the Mozilla front reports it.
    #[serde(skip)]
    pub debug_file_says: Option<FileSays>,
}

/// What a debug file records about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSays {
    pub debug_id: Option<DebugId>,
    /// A Breakpad file's module name as Mozilla's service reports it.
    pub breakpad_name: Option<String>,
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
            debug_file_says: None,
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
    /// A minidump walk's strategies in order (omnisym only); unset: the server's
    /// `unwind_order`, and without that upstream's walk.
    pub unwind_order: Option<UnwindOrder>,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            dif_candidates: false,
            apply_source_context: true,
            unwind_order: None,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame's JSON, field by field in upstream's order, with the unset fields left
    /// out, as the derived, flattened serialisation wrote it; by both JSON writers.
    #[test]
    fn frames_serialise_in_upstreams_order_without_unset_fields() {
        let full = SymbolicatedFrame {
            status: FrameStatus::Symbolicated,
            original_index: Some(3),
            raw: RawFrame {
                platform: Some("native".into()),
                addr_mode: AddrMode::Rel(1),
                instruction_addr: HexValue(0x1010),
                adjust_instruction_addr: Some(false),
                function_id: Some(HexValue(7)),
                package: Some("/lib/a.so".into()),
                lang: Some(Language::Cpp),
                symbol: Some("_Z1fv".into()),
                sym_addr: Some(HexValue(0x1000)),
                function: Some("f()".into()),
                filename: Some("a.cc".into()),
                abs_path: Some("/src/a.cc".into()),
                lineno: Some(12),
                pre_context: vec!["{".into()],
                context_line: Some("  f();".into()),
                post_context: vec!["}".into()],
                source_link: Some("https://x/a.cc".into()),
                in_app: Some(true),
                trust: FrameTrust::Cfi,
            },
        };
        let expected = concat!(
            r#"{"status":"symbolicated","original_index":3,"platform":"native","#,
            r#""addr_mode":"rel:1","instruction_addr":"0x1010","adjust_instruction_addr":false,"#,
            r#""function_id":"0x7","package":"/lib/a.so","lang":"cpp","symbol":"_Z1fv","#,
            r#""sym_addr":"0x1000","function":"f()","filename":"a.cc","abs_path":"/src/a.cc","#,
            r#""lineno":12,"pre_context":["{"],"context_line":"  f();","post_context":["}"],"#,
            r#""source_link":"https://x/a.cc","in_app":true,"trust":"cfi"}"#
        );
        assert_eq!(serde_json::to_string(&full).unwrap(), expected);
        assert_eq!(sonic_rs::to_string(&full).unwrap(), expected);
        let back: SymbolicatedFrame = serde_json::from_str(expected).unwrap();
        assert_eq!(back, full);

        let bare = SymbolicatedFrame {
            status: FrameStatus::Missing,
            original_index: None,
            raw: RawFrame {
                instruction_addr: HexValue(0x10),
                ..RawFrame::default()
            },
        };
        let expected = r#"{"status":"missing","original_index":null,"instruction_addr":"0x10"}"#;
        assert_eq!(sonic_rs::to_string(&bare).unwrap(), expected);
        assert_eq!(
            serde_json::to_string(&bare.raw).unwrap(),
            r#"{"instruction_addr":"0x10"}"#
        );
    }

    #[test]
    fn hex_value_accepts_strings_and_numbers() {
        for v in [0, 1, 0xf, 0x10, 0x7f00_0000_1234, u64::MAX >> 4, u64::MAX] {
            assert_eq!(HexValue(v).to_string(), format!("{v:#x}"));
            assert_eq!(
                serde_json::to_string(&HexValue(v)).unwrap(),
                format!("\"{v:#x}\"")
            );
        }
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
    fn addr_mode_round_trips() {
        assert_eq!("rel:3".parse::<AddrMode>().unwrap(), AddrMode::Rel(3));
        assert_eq!(AddrMode::Rel(0).to_string(), "rel:0");
        assert!("rel:x".parse::<AddrMode>().is_err());
    }
}
