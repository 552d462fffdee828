//! The wire types of `POST /symbolicate-jvm`, field for field as upstream Symbolicator
//! reads and writes them (its `symbolicator-proguard` interface and its HTTP body):
//! which fields are required, which are skipped when empty, and in which order they are
//! written.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use symbolic::common::DebugId;

use crate::sources::SourceConfig;
use crate::types::FrameOrder;

/// The JSON body of `POST /symbolicate-jvm`. Unknown fields are ignored, as upstream does.
#[derive(Clone, Debug, Deserialize)]
pub struct SymbolicateJvmRequest {
    /// Upstream only uses it to label metrics; accepted so such bodies parse.
    #[serde(default)]
    pub platform: Option<String>,
    /// `None` (key absent) means the server's configured sources, as for `/symbolicate`.
    #[serde(default)]
    pub sources: Option<Vec<SourceConfig>>,
    /// Remapped on their own, independently of the stack traces' exceptions.
    #[serde(default)]
    pub exceptions: Vec<JvmException>,
    #[serde(default)]
    pub stacktraces: Vec<JvmStacktrace>,
    /// ProGuard mappings and source bundles, in the order the client lists them; the
    /// first mapping that knows a class wins.
    #[serde(default)]
    pub modules: Vec<JvmModule>,
    /// Remapped frames whose class starts with this get `in_app: true` unless the
    /// client already decided.
    #[serde(default)]
    pub release_package: Option<String>,
    /// Obfuscated class names (e.g. from a view hierarchy) to remap into `classes`.
    #[serde(default)]
    pub classes: Vec<String>,
    #[serde(default)]
    pub options: JvmRequestOptions,
}

impl SymbolicateJvmRequest {
    /// The ProGuard mappings to fetch, in request order (duplicates included, as upstream
    /// fetches and reports each listed module).
    pub fn mapping_ids(&self) -> impl Iterator<Item = DebugId> + '_ {
        self.module_ids(JvmModuleType::Proguard)
    }

    /// The source bundles to fetch for source context, in request order.
    pub fn source_bundle_ids(&self) -> impl Iterator<Item = DebugId> + '_ {
        self.module_ids(JvmModuleType::Source)
    }

    fn module_ids(&self, ty: JvmModuleType) -> impl Iterator<Item = DebugId> + '_ {
        self.modules
            .iter()
            .filter(move |module| module.r#type == ty)
            .map(|module| module.uuid)
    }
}

/// `options` of a JVM request. Defaults differ from `/symbolicate`: JVM stack traces
/// arrive outermost frame first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct JvmRequestOptions {
    pub apply_source_context: bool,
    pub frame_order: FrameOrder,
}

impl Default for JvmRequestOptions {
    fn default() -> Self {
        JvmRequestOptions {
            apply_source_context: true,
            frame_order: FrameOrder::CallerFirst,
        }
    }
}

/// One JVM stack frame; the remapped frames a request gets back have the same shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JvmFrame {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The method name.
    pub function: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The fully qualified class name.
    pub module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abs_path: Option<String>,
    /// 1-based; without it only class and method can be remapped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lineno: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_context: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_line: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_context: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_app: Option<bool>,
    /// The frame's position in the client's original stack trace; every frame expanded
    /// from one input frame keeps that frame's index, so clients can match them up.
    pub index: usize,
    /// A bytecode method signature (`(Landroid/view/View;)V`), used to pick the method
    /// when there is no line; answered deobfuscated and in Java notation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub method_synthesized: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// An exception: its class, split into simple name and package as the JVM SDKs send it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JvmException {
    #[serde(rename = "type")]
    pub ty: String,
    pub module: String,
}

impl JvmException {
    /// The fully qualified class name. R8's aggressive mode moves classes into the root
    /// package; the SDKs then send an empty `module`, and the bare type is the full name.
    pub fn full_class_name(&self) -> Cow<'_, str> {
        if self.module.is_empty() {
            Cow::Borrowed(&self.ty)
        } else {
            Cow::Owned(format!("{}.{}", self.module, self.ty))
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JvmStacktrace {
    /// What was thrown: R8 rewrite rules apply only to the frame that threw it.
    pub exception: Option<JvmException>,
    pub frames: Vec<JvmFrame>,
}

/// A file the request refers to by id: a ProGuard mapping or a source bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JvmModule {
    /// The mapping's uuid or the bundle's debug id; upstream names both `uuid`.
    pub uuid: DebugId,
    pub r#type: JvmModuleType,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JvmModuleType {
    Source,
    Proguard,
}

/// Why a listed mapping could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProguardErrorKind {
    /// Not found, or it could not be fetched.
    Missing,
    /// Fetched, but not a ProGuard mapping.
    Invalid,
}

impl fmt::Display for ProguardErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProguardErrorKind::Missing => f.write_str("the proguard mapping file is missing"),
            ProguardErrorKind::Invalid => f.write_str("the proguard mapping file is invalid"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProguardError {
    pub uuid: DebugId,
    #[serde(rename = "type")]
    pub kind: ProguardErrorKind,
}

/// The body of a completed `/symbolicate-jvm` answer (the service adds the status).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedJvmSymbolicationResponse {
    pub exceptions: Vec<JvmException>,
    pub stacktraces: Vec<JvmStacktrace>,
    /// Obfuscated → original name, for the requested classes that a mapping knows.
    /// Sorted, so equal requests give byte-equal answers (upstream's order is random).
    pub classes: BTreeMap<String, String>,
    /// One entry per listed mapping that could not be used, in request order.
    pub errors: Vec<ProguardError>,
}
