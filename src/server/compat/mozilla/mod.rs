//! Mozilla's symbolication API, as its Tecken/Eliot service answers it:
//! `POST /symbolicate/v5` and the older `POST /symbolicate/v4`.
//!
//! A job names its modules `[debug_file, debug_id]` (the Breakpad id: GUID and age in
//! 33 hex digits) and its frames `[module_index, module_offset]`. All jobs of a request
//! become one native symbolication: each module a native module at address 0, each
//! offset a `rel:N` address looked up as it is (Mozilla's clients send offsets that
//! need no return-address adjustment). The debug files therefore come from the
//! configured sources through the native lookup: Breakpad `.sym` files where the
//! layouts put them, and PDBs, Mach-O and ELF files wherever the lookup finds those.
//! The native answer is then cut back into Mozilla's shapes.

mod count;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json};
use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use symbolic::common::DebugId;

use crate::cache::Scope;
use crate::cache::kinds::SYMCACHES;
use crate::config::MozillaConfig;
use crate::native::SymbolicateRequest;
use crate::native::interface::{
    AddrMode, CompleteObjectInfo, CompletedSymbolicationResponse, FrameStatus, HexValue,
    ObjectFileStatus, RawFrame, RawObjectInfo, RawStacktrace, RequestOptions, SymbolicatedFrame,
};
use crate::server::error::RequestBody;
use crate::server::{ApiError, AppState, RequestSlot, Routes, parse_json};
use crate::service::Outcome;
use crate::sources::ObjectType;
use crate::telemetry::{RequestStats, RequestStatsData};
use crate::types::ObjectDownloadInfo;
use count::{Version, count_first};

/// What a frame of an unknown module (index -1, or a module without a name) is called.
const UNKNOWN_MODULE: &str = "<unknown>";

/// The two routes, with the `mozilla` config section (who may call them is
/// `access`'s).
pub fn routes(config: MozillaConfig) -> Routes {
    Routes::default()
        .route(
            "/symbolicate/v5",
            post(symbolicate_v5).fallback(wrong_method),
        )
        .route(
            "/symbolicate/v4",
            post(symbolicate_v4).fallback(wrong_method),
        )
        .map(|router| router.layer(Extension(config)))
}

/// Any method but `POST`: 405, with a JSON body as every other answer of these routes
/// (Mozilla's clients read its errors as JSON), and the method to use.
async fn wrong_method(method: Method) -> Response {
    let mut response = ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!("method {method} is not allowed: use POST"),
    }
    .into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

/// `[debug_file, debug_id]`.
#[derive(Debug, Deserialize)]
struct Module(String, String);

impl Module {
    /// Mozilla's service looks nothing up for a module without a name or an id.
    fn can_be_looked_up(&self) -> bool {
        !self.0.is_empty() && !self.1.is_empty()
    }

    fn key(&self) -> String {
        format!("{}/{}", self.0, self.1)
    }
}

/// `[module_index, module_offset]`; index -1 is "in no module".
#[derive(Debug, Deserialize)]
struct Frame(i64, Offset);

/// A module offset: an integer from 0, or -1, which the service passes through without
/// symbolicating it (but still looks the module up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Offset(Option<u64>);

impl<'de> Deserialize<'de> for Offset {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Offset;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer module offset (>= -1)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Offset, E> {
                Ok(Offset(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Offset, E> {
                match v {
                    -1 => Ok(Offset(None)),
                    0.. => Ok(Offset(Some(v.unsigned_abs()))),
                    _ => Err(E::custom(format_args!("invalid module offset {v}"))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl fmt::Display for Offset {
    /// As Python's `hex()` writes it, which is what the service answers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(offset) => write!(f, "{offset:#x}"),
            None => f.write_str("-0x1"),
        }
    }
}

/// One job; also the whole v4 body (whose `version` is ignored).
#[derive(Debug, Deserialize)]
struct Job {
    #[serde(rename = "memoryMap")]
    memory_map: Vec<Module>,
    stacks: Vec<Vec<Frame>>,
}

impl Job {
    /// The module a frame names, if its index is one.
    fn module_of(&self, frame: &Frame) -> Option<&Module> {
        usize::try_from(frame.0)
            .ok()
            .and_then(|i| self.memory_map.get(i))
    }

    /// The module index of a frame that is symbolicated (natively), with its offset.
    fn lookup_of(&self, frame: &Frame) -> Option<(usize, Option<u64>)> {
        let index = usize::try_from(frame.0).ok()?;
        self.memory_map
            .get(index)
            .filter(|m| m.can_be_looked_up())
            .map(|_| (index, frame.1.0))
    }
}

/// The v5 body: `{"jobs": [...]}`, or a single job's fields at the top level.
#[derive(Debug, Deserialize)]
struct V5Body {
    jobs: Option<Vec<Job>>,
    #[serde(rename = "memoryMap")]
    memory_map: Option<Vec<Module>>,
    stacks: Option<Vec<Vec<Frame>>>,
}

/// Where a request's jobs sit, for naming fields in errors.
#[derive(Clone, Copy)]
enum Shape {
    Jobs,
    Single,
}

impl Shape {
    fn field(self, job: usize, field: &str) -> String {
        match self {
            Shape::Jobs => format!("jobs[{job}].{field}"),
            Shape::Single => field.to_owned(),
        }
    }
}

impl V5Body {
    fn into_jobs(self) -> Result<(Vec<Job>, Shape), ApiError> {
        if let Some(jobs) = self.jobs {
            return Ok((jobs, Shape::Jobs));
        }
        let missing = |field| {
            ApiError::bad_request(format!(
                "invalid JSON body: missing field `{field}` (or `jobs`)"
            ))
        };
        let job = Job {
            memory_map: self.memory_map.ok_or_else(|| missing("memoryMap"))?,
            stacks: self.stacks.ok_or_else(|| missing("stacks"))?,
        };
        Ok((vec![job], Shape::Single))
    }
}

/// What Mozilla's service checks by hand, with its rules: names and ids it can put in
/// a URL, module indexes within the memory map, at least one stack. (This server's
/// request limits were checked on the body, by `count_first`.)
fn validate(jobs: &[Job], shape: Shape) -> Result<(), ApiError> {
    for (j, job) in jobs.iter().enumerate() {
        for (i, Module(debug_file, debug_id)) in job.memory_map.iter().enumerate() {
            let field = shape.field(j, &format!("memoryMap[{i}]"));
            if !debug_file.bytes().all(is_debug_file_byte) {
                return Err(ApiError::bad_request(format!(
                    "invalid JSON body: field `{field}`: invalid debug_file (letters, digits, spaces and `_.+{{}}@<>~-` only)"
                )));
            }
            if !debug_id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ApiError::bad_request(format!(
                    "invalid JSON body: field `{field}`: invalid debug_id (hex digits only)"
                )));
            }
        }
        if job.stacks.is_empty() {
            return Err(ApiError::bad_request(format!(
                "invalid JSON body: field `{}`: no stacks specified",
                shape.field(j, "stacks")
            )));
        }
        for (s, stack) in job.stacks.iter().enumerate() {
            for (f, frame) in stack.iter().enumerate() {
                if frame.0 != -1 && job.module_of(frame).is_none() {
                    return Err(ApiError::bad_request(format!(
                        "invalid JSON body: field `{}`: module index {} is not in memoryMap ({} modules)",
                        shape.field(j, &format!("stacks[{s}][{f}]")),
                        frame.0,
                        job.memory_map.len(),
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The characters Mozilla's service allows in a debug file name.
fn is_debug_file_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_.+{}@<> ~-".contains(&b)
}

/// The kind of module a debug file name stands for. It decides which files the native
/// lookup tries besides the Breakpad `.sym`, which every kind tries: a PDB for Windows
/// names; for other names the Mach-O dSYM, whose place follows from the debug id (an
/// ELF file's place needs the full build id, which Mozilla's modules do not carry).
fn object_type(debug_file: &str) -> ObjectType {
    let name = debug_file.to_ascii_lowercase();
    if [".pdb", ".dll", ".exe"]
        .iter()
        .any(|ext| name.ends_with(ext))
    {
        ObjectType::Pe
    } else if name.ends_with(".so") || name.contains(".so.") {
        ObjectType::Elf
    } else {
        ObjectType::Macho
    }
}

fn native_module(module: &Module) -> RawObjectInfo {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    RawObjectInfo {
        ty: object_type(&module.0),
        code_id: None,
        code_file: None,
        debug_id: non_empty(&module.1),
        debug_file: non_empty(&module.0),
        debug_checksum: None,
        // Offsets are relative: every frame addresses its module by index.
        image_addr: HexValue(0),
        image_size: None,
        file_id: None,
    }
}

fn native_frame(module: usize, offset: u64) -> RawFrame {
    RawFrame {
        addr_mode: AddrMode::Rel(module),
        instruction_addr: HexValue(offset),
        adjust_instruction_addr: Some(false),
        ..Default::default()
    }
}

/// All jobs as one native request. Stack `k` of the request (counting over all jobs)
/// is native stack trace `k`, holding the frames that are looked up, in order; module
/// `i` of job `j` is native module `module_base[j] + i`.
struct NativeBatch {
    request: SymbolicateRequest,
    module_base: Vec<usize>,
    /// `debug_file/debug_id` of each native module, as the client wrote it (the native
    /// answer has the id in its canonical form).
    keys: Vec<String>,
}

fn plan(jobs: &[Job]) -> NativeBatch {
    let mut modules = Vec::new();
    let mut keys = Vec::new();
    let mut module_base = Vec::with_capacity(jobs.len());
    let mut stacktraces = Vec::new();
    let mut referenced = HashSet::new();
    let mut offsetless = Vec::new();
    for job in jobs {
        let base = modules.len();
        module_base.push(base);
        modules.extend(job.memory_map.iter().map(native_module));
        keys.extend(job.memory_map.iter().map(Module::key));
        for stack in &job.stacks {
            let frames = stack
                .iter()
                .filter_map(|frame| {
                    let (index, offset) = job.lookup_of(frame)?;
                    let Some(offset) = offset else {
                        offsetless.push(base + index);
                        return None;
                    };
                    referenced.insert(base + index);
                    Some(native_frame(base + index, offset))
                })
                .collect();
            stacktraces.push(RawStacktrace {
                frames,
                ..Default::default()
            });
        }
    }
    // The service looks up a module that only -1 offsets point into, too: its
    // `found_modules` entry says whether it has symbols. The native lookup fetches a
    // module's file only for a frame in it, so one more stack holds a frame at offset 0
    // for each such module; its answer is not used.
    let mut probed = HashSet::new();
    let probes: Vec<RawFrame> = offsetless
        .into_iter()
        .filter(|m| !referenced.contains(m) && probed.insert(*m))
        .map(|m| native_frame(m, 0))
        .collect();
    if !probes.is_empty() {
        stacktraces.push(RawStacktrace {
            frames: probes,
            ..Default::default()
        });
    }
    NativeBatch {
        request: SymbolicateRequest {
            platform: None,
            signal: None,
            sources: None,
            stacktraces,
            modules,
            options: RequestOptions {
                // The candidates tell a source that failed for a while (503) from one
                // that refused access (the module is not found).
                dif_candidates: true,
                apply_source_context: false,
                unwind_order: None,
            },
        },
        module_base,
        keys,
    }
}

/// Runs the native symbolication in the request's slot, recording what it costs.
async fn run(
    state: &AppState,
    RequestSlot(slot): RequestSlot,
    request: SymbolicateRequest,
    keys: &[String],
) -> Result<(CompletedSymbolicationResponse, RequestStatsData), ApiError> {
    let native = state.native.clone();
    let sources =
        crate::store::first_sources(state.store.as_ref(), &Scope::Global, &state.default_sources);
    let stats = Arc::new(RequestStats::default());
    let recorder = stats.clone();
    let work = async move {
        let work = native.symbolicate(Scope::new("global"), sources, request);
        Ok(recorder.scope(work).await)
    };
    let response = match slot.run(work).await {
        Outcome::Done(response) => response,
        Outcome::Failed(_) | Outcome::Panicked => return Err(ApiError::internal()),
        Outcome::Timeout => {
            return Err(ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: "symbolication took too long".into(),
            });
        }
    };
    check_sources(&response.modules, keys)?;
    Ok((response, stats.snapshot()))
}

/// Validates the jobs, symbolicates them in the request's slot and answers each.
async fn symbolicate_jobs(
    state: &AppState,
    slot: RequestSlot,
    jobs: &[Job],
    shape: Shape,
) -> Result<(Vec<JobResult>, RequestStatsData), ApiError> {
    validate(jobs, shape)?;
    let NativeBatch {
        request,
        module_base,
        keys,
    } = plan(jobs);
    let (response, stats) = run(state, slot, request, &keys).await?;
    Ok((render(jobs, &module_base, &response), stats))
}

/// 503 when a source failed in a way that may pass (a timeout, a refused connection, a
/// server error), as Mozilla's service answers: its clients wait and try again.
/// Refused access is no such failure: that module is simply not found.
fn check_sources(modules: &[CompleteObjectInfo], keys: &[String]) -> Result<(), ApiError> {
    let failed: Vec<&str> = modules
        .iter()
        .zip(keys)
        .filter(|(m, _)| match m.debug_status {
            ObjectFileStatus::Timeout => true,
            ObjectFileStatus::FetchingFailed => m
                .candidates
                .iter()
                .any(|c| matches!(c.download, ObjectDownloadInfo::Error { .. })),
            _ => false,
        })
        .map(|(_, key)| key.as_str())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!(
            "symbol sources failed for {}; try again later",
            failed.join(", ")
        ),
    })
}

/// A symbolicated frame, as v5 answers it.
#[derive(Debug, Serialize)]
struct V5Frame {
    frame: usize,
    module: String,
    module_offset: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    function: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_offset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    /// The calls inlined at this address, innermost first; the frame itself is the
    /// function they were inlined into.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    inlines: Vec<Inline>,
}

#[derive(Debug, Serialize)]
struct Inline {
    function: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

impl Inline {
    /// The service gives a line only with a file, and never line 0.
    fn of(frame: &SymbolicatedFrame) -> Inline {
        let raw = &frame.raw;
        let file = raw.abs_path.clone().filter(|p| !p.is_empty());
        Inline {
            function: raw.function.clone().or_else(|| raw.symbol.clone()),
            line: raw.lineno.filter(|&l| l != 0 && file.is_some()),
            file,
        }
    }
}

impl V5Frame {
    fn new(index: usize, module: &str, offset: Offset) -> V5Frame {
        V5Frame {
            frame: index,
            module: module.to_owned(),
            module_offset: offset.to_string(),
            function: None,
            function_offset: None,
            file: None,
            line: None,
            inlines: Vec::new(),
        }
    }

    /// Fills in what the native answer for this frame says: `expanded` is its frame
    /// and the calls inlined there, innermost first.
    fn fill(&mut self, expanded: &[SymbolicatedFrame], offset: u64) {
        let Some((outer, inlined)) = expanded.split_last() else {
            return;
        };
        if outer.status != FrameStatus::Symbolicated {
            return;
        }
        let Inline {
            function,
            file,
            line,
        } = Inline::of(outer);
        self.function = function;
        self.file = file;
        self.line = line;
        self.function_offset = outer
            .raw
            .sym_addr
            .and_then(|start| offset.checked_sub(start.0))
            .map(|o| format!("{o:#x}"));
        self.inlines = inlined.iter().map(Inline::of).collect();
    }
}

/// `"debug_file/debug_id"` → found (true), not found (false) or not looked up (null), in
/// memory-map order; a module listed twice appears once.
#[derive(Debug, Default)]
struct FoundModules(Vec<(String, Option<bool>)>);

impl FoundModules {
    fn get(&self, key: &str) -> Option<bool> {
        self.0.iter().find(|(k, _)| k == key).and_then(|(_, v)| *v)
    }
}

impl Serialize for FoundModules {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, found) in &self.0 {
            map.serialize_entry(key, found)?;
        }
        map.end()
    }
}

fn found(status: ObjectFileStatus) -> Option<bool> {
    match status {
        ObjectFileStatus::Unused => None,
        ObjectFileStatus::Found => Some(true),
        _ => Some(false),
    }
}

#[derive(Debug, Serialize)]
struct JobResult {
    stacks: Vec<Vec<V5Frame>>,
    found_modules: FoundModules,
}

/// The native answer's frames by the index of the frame they came from: an inlined call
/// expands one frame into several, consecutive ones.
fn frames_by_input(frames: &[SymbolicatedFrame], inputs: usize) -> Vec<&[SymbolicatedFrame]> {
    let mut out = vec![&frames[..0]; inputs];
    let mut start = 0;
    while start < frames.len() {
        let index = frames[start].original_index;
        let len = frames[start..]
            .iter()
            .take_while(|f| f.original_index == index)
            .count();
        if let Some(slot) = index.and_then(|i| out.get_mut(i)) {
            *slot = &frames[start..start + len];
        }
        start += len;
    }
    out
}

/// Mozilla's answer for every job, from the native answer to [`plan`]'s request.
fn render(
    jobs: &[Job],
    module_base: &[usize],
    response: &CompletedSymbolicationResponse,
) -> Vec<JobResult> {
    let mut native_stacks = response.stacktraces.iter();
    jobs.iter()
        .zip(module_base)
        .map(|(job, &base)| {
            let outcomes = module_outcomes(job, base, &response.modules);
            let stacks = job
                .stacks
                .iter()
                .map(|stack| {
                    let native = native_stacks.next().map_or(&[][..], |s| &s.frames[..]);
                    let sent = stack
                        .iter()
                        .filter(|f| matches!(job.lookup_of(f), Some((_, Some(_)))))
                        .count();
                    let expanded = frames_by_input(native, sent);
                    let mut next_input = 0;
                    stack
                        .iter()
                        .enumerate()
                        .map(|(i, frame)| {
                            // As `module_of`: the module a frame names, looked up or not.
                            let outcome =
                                usize::try_from(frame.0).ok().and_then(|i| outcomes.get(i));
                            let module = outcome
                                .map(|o| o.name)
                                .filter(|name| !name.is_empty())
                                .unwrap_or(UNKNOWN_MODULE);
                            let mut out = V5Frame::new(i, module, frame.1);
                            if let Some((_, Some(offset))) = job.lookup_of(frame) {
                                if let Some(frames) = expanded.get(next_input)
                                    && !outcome.is_some_and(|o| o.refused)
                                {
                                    out.fill(frames, offset);
                                }
                                next_input += 1;
                            }
                            out
                        })
                        .collect()
                })
                .collect();
            JobResult {
                stacks,
                found_modules: found_modules(job, &outcomes),
            }
        })
        .collect()
}

/// What the service says of one module of a job, worked out once for all its frames.
struct ModuleOutcome<'a> {
    /// Its `found_modules` value.
    found: Option<bool>,
    /// Its debug file records another id than the one asked for: its frames stay
    /// unsymbolicated.
    refused: bool,
    /// What its frames are named: a found `.sym`'s PE file, else the debug file sent.
    name: &'a str,
}

fn module_outcomes<'a>(
    job: &'a Job,
    base: usize,
    modules: &'a [CompleteObjectInfo],
) -> Vec<ModuleOutcome<'a>> {
    job.memory_map
        .iter()
        .enumerate()
        .map(|(i, module)| {
            let native = modules.get(base + i);
            let refused = refused(Some(module), native);
            let found = native.and_then(|m| {
                if refused {
                    Some(false)
                } else {
                    found(m.debug_status)
                }
            });
            let name = native
                .filter(|_| found == Some(true))
                .and_then(|n| n.debug_file_says.as_ref())
                .and_then(|says| says.breakpad_name.as_deref())
                .unwrap_or(&module.0);
            ModuleOutcome {
                found,
                refused,
                name,
            }
        })
        .collect()
}

/// Whether the debug file found for `module` records another id than the one asked for.
/// Mozilla's service takes a `.sym` only for the id its `MODULE` line names (the lookup,
/// like upstream's, takes what a source serves at the id's path). A newer age of the
/// same GUID counts as the same file, as symbol servers serve one for an older request.
fn refused(module: Option<&Module>, native: Option<&CompleteObjectInfo>) -> bool {
    let Some(says) = native.and_then(|n| n.debug_file_says.as_ref()) else {
        return false;
    };
    let (Some(found), Some(module)) = (says.debug_id, module) else {
        return false;
    };
    match DebugId::from_breakpad(&module.1) {
        Ok(asked) => found.uuid() != asked.uuid() || found.appendix() < asked.appendix(),
        Err(_) => false,
    }
}

fn found_modules(job: &Job, outcomes: &[ModuleOutcome<'_>]) -> FoundModules {
    let mut out = FoundModules::default();
    let mut seen = HashMap::new();
    for (module, outcome) in job.memory_map.iter().zip(outcomes) {
        let value = outcome.found;
        let key = module.key();
        match seen.get(&key) {
            Some(&at) => {
                let entry: &mut (String, Option<bool>) = &mut out.0[at];
                entry.1 = entry.1.or(value);
            }
            None => {
                seen.insert(key.clone(), out.0.len());
                out.0.push((key, value));
            }
        }
    }
    out
}

/// The `debug` block of a `Debug: true` request, with the service's keys where it has
/// them; times in seconds.
#[derive(Debug, Serialize)]
struct DebugInfo {
    time: f64,
    /// SymCache lookups (one per module whose debug file was found: the service's own
    /// cache holds SymCaches too); `hits` were answered from a cache, the others built
    /// one. `by_kind` has every cache the request used.
    cache_lookups: CacheLookups,
    downloads: DownloadStats,
    modules: Modules,
    stacks: Stacks,
}

#[derive(Debug, Serialize)]
struct CacheLookups {
    count: u64,
    hits: u64,
    time: f64,
    by_kind: BTreeMap<&'static str, KindLookups>,
}

#[derive(Debug, Serialize)]
struct KindLookups {
    count: u64,
    computed: u64,
    time: f64,
}

#[derive(Debug, Serialize)]
struct DownloadStats {
    /// Files fetched from sources, a "not found" answer included.
    count: u64,
    failed: u64,
    /// Bytes, as they came over the wire.
    size: u64,
    /// Summed over all downloads, which run concurrently: it may exceed `time`.
    time: f64,
}

#[derive(Debug, Serialize)]
struct Modules {
    /// Modules looked up, over all jobs.
    count: usize,
    /// For each module looked up: how many stacks have frames in it.
    stacks_per_module: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize)]
struct Stacks {
    count: usize,
    frames: usize,
}

fn debug_info(
    jobs: &[Job],
    results: &[JobResult],
    stats: &RequestStatsData,
    time: Duration,
) -> DebugInfo {
    let symcaches = stats.cache.get(SYMCACHES.name).copied().unwrap_or_default();
    let mut stacks_per_module: BTreeMap<String, usize> = BTreeMap::new();
    let mut looked_up = 0;
    for (job, result) in jobs.iter().zip(results) {
        looked_up += result
            .found_modules
            .0
            .iter()
            .filter(|(_, f)| f.is_some())
            .count();
        for stack in &job.stacks {
            let keys: HashSet<String> = stack
                .iter()
                .filter_map(|f| job.module_of(f))
                .filter(|m| result.found_modules.get(&m.key()).is_some())
                .map(Module::key)
                .collect();
            for key in keys {
                *stacks_per_module.entry(key).or_default() += 1;
            }
        }
    }
    DebugInfo {
        time: time.as_secs_f64(),
        cache_lookups: CacheLookups {
            count: symcaches.lookups,
            hits: symcaches.lookups - symcaches.computed.min(symcaches.lookups),
            time: symcaches.time.as_secs_f64(),
            by_kind: stats
                .cache
                .iter()
                .map(|(kind, s)| {
                    let lookups = KindLookups {
                        count: s.lookups,
                        computed: s.computed,
                        time: s.time.as_secs_f64(),
                    };
                    (*kind, lookups)
                })
                .collect(),
        },
        downloads: DownloadStats {
            count: stats.downloads.count,
            failed: stats.downloads.failed,
            size: stats.downloads.bytes,
            time: stats.downloads.time.as_secs_f64(),
        },
        modules: Modules {
            count: looked_up,
            stacks_per_module,
        },
        stacks: Stacks {
            count: jobs.iter().map(|j| j.stacks.len()).sum(),
            frames: jobs.iter().flat_map(|j| &j.stacks).map(Vec::len).sum(),
        },
    }
}

/// `Debug: true` (or `1`) asks for the `debug` block.
fn wants_debug(headers: &HeaderMap) -> bool {
    headers
        .get("debug")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true") || v.trim() == "1")
}

#[derive(Serialize)]
struct V5Response {
    results: Vec<JobResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    debug: Option<DebugInfo>,
}

/// `POST /symbolicate/v5`: jobs of stacks, each answered in order.
pub(in crate::server) async fn symbolicate_v5(
    State(state): State<AppState>,
    Extension(config): Extension<MozillaConfig>,
    headers: HeaderMap,
    slot: RequestSlot,
    RequestBody(body): RequestBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    count_first(&body, Version::V5, &state.request_limits, config.max_jobs)?;
    let (jobs, shape) = parse_json::<V5Body>(&body)?.into_jobs()?;
    drop(body);
    let (results, stats) = symbolicate_jobs(&state, slot, &jobs, shape).await?;
    let debug =
        wants_debug(&headers).then(|| debug_info(&jobs, &results, &stats, started.elapsed()));
    Ok(Json(V5Response { results, debug }).into_response())
}

#[derive(Serialize)]
struct V4Response {
    #[serde(rename = "symbolicatedStacks")]
    symbolicated_stacks: Vec<Vec<String>>,
    #[serde(rename = "knownModules")]
    known_modules: Vec<Option<bool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    debug: Option<DebugInfo>,
}

/// `POST /symbolicate/v4`: one job; frames as `function (in module)` strings.
async fn symbolicate_v4(
    State(state): State<AppState>,
    headers: HeaderMap,
    slot: RequestSlot,
    RequestBody(body): RequestBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    count_first(&body, Version::V4, &state.request_limits, 1)?;
    let job: Job = parse_json(&body)?;
    drop(body);
    let jobs = [job];
    let (mut results, stats) = symbolicate_jobs(&state, slot, &jobs, Shape::Single).await?;
    let debug =
        wants_debug(&headers).then(|| debug_info(&jobs, &results, &stats, started.elapsed()));
    let result = results.pop().expect("one result per job");
    let symbolicated_stacks = result
        .stacks
        .iter()
        .map(|stack| {
            stack
                .iter()
                .map(|f| {
                    let what = f.function.as_deref().unwrap_or(&f.module_offset);
                    format!("{what} (in {})", f.module)
                })
                .collect()
        })
        .collect();
    let known_modules = jobs[0]
        .memory_map
        .iter()
        .map(|m| result.found_modules.get(&m.key()))
        .collect();
    Ok(Json(V4Response {
        symbolicated_stacks,
        known_modules,
        debug,
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::interface::FileSays;

    #[test]
    fn offsets_read_and_print_as_the_service_does() {
        let parse = |s: &str| serde_json::from_str::<Offset>(s);
        assert_eq!(parse("65802").unwrap().to_string(), "0x1010a");
        assert_eq!(parse("-1").unwrap().to_string(), "-0x1");
        assert_eq!(parse("18446744073709551615").unwrap().0, Some(u64::MAX));
        for bad in ["-2", "1.5", "\"0x10\"", "null"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_is_refused_for_another_guid_or_an_older_age() {
        let module = |id: &str| Module("a.pdb".into(), id.into());
        let says = |id: &str| {
            let mut info = CompleteObjectInfo::from(native_module(&module(id)));
            info.debug_file_says = Some(FileSays {
                debug_id: Some(DebugId::from_breakpad(id).unwrap()),
                breakpad_name: None,
            });
            info
        };
        let id = "44E4EC8C2F41492B9369D6B9A059577C2";
        let cases = [
            (id, id, false),
            ("44E4EC8C2F41492B9369D6B9A059577C3", id, true),
            (id, "44E4EC8C2F41492B9369D6B9A059577C3", false),
            ("000000000000000000000000000000000", id, true),
            ("not-an-id", id, false),
        ];
        for (asked, file, is_refused) in cases {
            let native = says(file);
            assert_eq!(
                refused(Some(&module(asked)), Some(&native)),
                is_refused,
                "{asked} answered by {file}"
            );
        }
        let unknown = CompleteObjectInfo::from(native_module(&module(id)));
        assert!(!refused(Some(&module(id)), Some(&unknown)));
    }

    #[test]
    fn debug_file_names_pick_the_files_the_lookup_tries() {
        assert_eq!(object_type("xul.pdb"), ObjectType::Pe);
        assert_eq!(object_type("NTDLL.DLL"), ObjectType::Pe);
        assert_eq!(object_type("libxul.so"), ObjectType::Elf);
        assert_eq!(object_type("libstdc++.so.6"), ObjectType::Elf);
        assert_eq!(object_type("XUL"), ObjectType::Macho);
        assert_eq!(object_type("libmozglue.dylib"), ObjectType::Macho);
    }

    #[test]
    fn expanded_frames_are_grouped_by_the_frame_they_came_from() {
        let frame = |index| SymbolicatedFrame {
            original_index: Some(index),
            ..Default::default()
        };
        let frames = [frame(0), frame(0), frame(0), frame(2)];
        let groups = frames_by_input(&frames, 3);
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [3, 0, 1]
        );
    }

    #[test]
    fn a_module_listed_twice_is_found_if_either_entry_was_looked_up() {
        let job: Job = serde_json::from_str(
            r#"{"memoryMap": [["a.so", "AB"], ["a.so", "AB"], ["b.so", "CD"]], "stacks": [[]]}"#,
        )
        .unwrap();
        let module = |status| CompleteObjectInfo {
            debug_status: status,
            ..native_module(&job.memory_map[0]).into()
        };
        let modules = [
            module(ObjectFileStatus::Unused),
            module(ObjectFileStatus::Found),
            module(ObjectFileStatus::Missing),
        ];
        let found = found_modules(&job, &module_outcomes(&job, 0, &modules));
        assert_eq!(
            serde_json::to_value(&found).unwrap(),
            serde_json::json!({"a.so/AB": true, "b.so/CD": false})
        );
    }
}
