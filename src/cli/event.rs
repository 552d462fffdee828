//! Stored Sentry events ⇄ endpoint requests and answers, converted the way Sentry's own
//! processing does it: which frames each pipeline takes, the request it sends for them,
//! and how the answer is written back (symbolicated frames replace the raw ones, an
//! inlined call expands into several frames, the raw frames stay as `raw_stacktrace`,
//! images learn their statuses). The offline run and replay share it. It works on plain
//! JSON, so everything else the event holds survives untouched.

use std::collections::{BTreeMap, HashSet};

use anyhow::bail;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use symbolic::common::DebugId;

use crate::js::interface::{JsFrame, JsModule};
use crate::jvm::interface::{JvmException, JvmFrame, JvmModule};
use crate::native::interface::{AddrMode, RawFrame, RawObjectInfo, RawStacktrace, Registers};

/// The symbolication pipelines an event's frames can need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipeline {
    Native,
    Js,
    Jvm,
}

impl Pipeline {
    pub const ALL: [Pipeline; 3] = [Pipeline::Native, Pipeline::Js, Pipeline::Jvm];

    pub fn endpoint(self) -> &'static str {
        match self {
            Pipeline::Native => "/symbolicate",
            Pipeline::Js => "/symbolicate-js",
            Pipeline::Jvm => "/symbolicate-jvm",
        }
    }

    /// Whether a frame of `platform` (the frame's own, else the event's) is this
    /// pipeline's. Events that name no platform at all are taken as native.
    fn owns(self, platform: Option<&str>) -> bool {
        match (self, platform) {
            (Pipeline::Native, None) => true,
            (Pipeline::Native, Some(p)) => NATIVE_PLATFORMS.contains(&p),
            (Pipeline::Js, Some(p)) => JS_PLATFORMS.contains(&p),
            (Pipeline::Jvm, Some(p)) => p == "java",
            (_, None) => false,
        }
    }
}

const NATIVE_PLATFORMS: &[&str] = &["native", "c", "cocoa", "objc", "swift"];
const JS_PLATFORMS: &[&str] = &["javascript", "node"];
/// `debug_meta.images` types the native pipeline reads.
const NATIVE_IMAGE_TYPES: &[&str] = &["macho", "elf", "pe", "pe_dotnet", "wasm", "symbolic"];

/// Where a stack trace lives in an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Container {
    Exception(usize),
    Thread(usize),
    /// The event's own top-level `stacktrace`.
    Event,
}

impl Container {
    /// Every place of `event` that holds a stack trace, in Sentry's order.
    fn all(event: &Value) -> Vec<Container> {
        let count = |key: &str| {
            event[key]["values"]
                .as_array()
                .map_or(0, |values| values.len())
        };
        let mut all: Vec<Container> = (0..count("exception")).map(Container::Exception).collect();
        all.extend((0..count("threads")).map(Container::Thread));
        if event.get("stacktrace").is_some_and(Value::is_object) {
            all.push(Container::Event);
        }
        all
    }

    fn get(self, event: &Value) -> &Value {
        match self {
            Container::Exception(i) => &event["exception"]["values"][i],
            Container::Thread(i) => &event["threads"]["values"][i],
            Container::Event => event,
        }
    }

    fn get_mut(self, event: &mut Value) -> Option<&mut Map<String, Value>> {
        let holder = match self {
            Container::Exception(i) => event.pointer_mut(&format!("/exception/values/{i}"))?,
            Container::Thread(i) => event.pointer_mut(&format!("/threads/values/{i}"))?,
            Container::Event => event,
        };
        holder.as_object_mut()
    }

    /// The path of the container in the event, for error messages.
    fn path(self) -> String {
        match self {
            Container::Exception(i) => format!("exception.values[{i}]"),
            Container::Thread(i) => format!("threads.values[{i}]"),
            Container::Event => "event".to_owned(),
        }
    }

    /// The frames to symbolicate: the raw ones when Sentry processed the event before
    /// (it keeps them in `raw_stacktrace`), else the only ones there are.
    fn input_frames(self, event: &Value) -> &[Value] {
        let holder = self.get(event);
        holder["raw_stacktrace"]["frames"]
            .as_array()
            .or_else(|| holder["stacktrace"]["frames"].as_array())
            .map_or(&[], Vec::as_slice)
    }

    /// The frames a reader of the event sees.
    fn shown_frames(self, event: &Value) -> &[Value] {
        let holder = self.get(event);
        holder["stacktrace"]["frames"]
            .as_array()
            .or_else(|| holder["raw_stacktrace"]["frames"].as_array())
            .map_or(&[], Vec::as_slice)
    }

    /// A key of the stack trace the frames were read from.
    fn stacktrace_field(self, event: &Value, key: &str) -> Option<Value> {
        let holder = self.get(event);
        [&holder["stacktrace"][key], &holder["raw_stacktrace"][key]]
            .into_iter()
            .find(|v| !v.is_null())
            .cloned()
    }
}

fn platform_of<'a>(frame: &'a Value, event: &'a Value) -> Option<&'a str> {
    frame["platform"]
        .as_str()
        .or_else(|| event["platform"].as_str())
}

/// One endpoint request made from an event, and what writing its answer back needs.
#[derive(Debug)]
pub struct Plan {
    pub pipeline: Pipeline,
    /// The request body, without `sources`: the caller decides where files come from.
    pub body: Value,
    stacks: Vec<SentStack>,
    /// Native: the `debug_meta.images` index of each module of the request.
    images: Vec<usize>,
    /// JVM: the `exception.values` index of each exception of the request.
    exceptions: Vec<usize>,
}

/// A stack trace of the request: where it came from, and which input frame each of
/// its frames is.
#[derive(Debug)]
struct SentStack {
    container: Container,
    input: Vec<Value>,
    sent: Vec<usize>,
}

/// Every request `event` needs, one per pipeline that has frames in it.
pub fn plans(event: &Value) -> anyhow::Result<Vec<Plan>> {
    if !event.is_object() {
        bail!("a stored event is a JSON object");
    }
    let mut plans = Vec::new();
    for pipeline in Pipeline::ALL {
        let plan = match pipeline {
            Pipeline::Native => native_plan(event)?,
            Pipeline::Js => js_plan(event)?,
            Pipeline::Jvm => jvm_plan(event)?,
        };
        plans.extend(plan);
    }
    Ok(plans)
}

/// Deserialises one part of the event, naming it when it does not fit.
fn parse<T: DeserializeOwned>(value: Value, path: impl FnOnce() -> String) -> anyhow::Result<T> {
    serde_json::from_value(value).map_err(|err| anyhow::anyhow!("{}: {err}", path()))
}

fn images(event: &Value) -> impl Iterator<Item = (usize, &Value)> {
    event["debug_meta"]["images"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .enumerate()
}

/// The stack traces with frames `handles` takes, each listing those frames' input
/// indices in the order the request wants them.
fn stacks(
    event: &Value,
    handles: impl Fn(&Value) -> bool,
    innermost_first: bool,
) -> Vec<SentStack> {
    Container::all(event)
        .into_iter()
        .filter_map(|container| {
            let input = container.input_frames(event).to_vec();
            let mut sent: Vec<usize> = (0..input.len()).filter(|&i| handles(&input[i])).collect();
            if innermost_first {
                sent.reverse();
            }
            (!sent.is_empty()).then_some(SentStack {
                container,
                input,
                sent,
            })
        })
        .collect()
}

// ------------------------------------------------------------------------- native

fn native_plan(event: &Value) -> anyhow::Result<Option<Plan>> {
    let handles = |frame: &Value| {
        Pipeline::Native.owns(platform_of(frame, event)) && !frame["instruction_addr"].is_null()
    };
    // Sentry sends native frames innermost first.
    let stacks = stacks(event, handles, true);
    if stacks.is_empty() {
        return Ok(None);
    }
    let mut image_indices = Vec::new();
    let mut modules = Vec::new();
    for (i, image) in images(event) {
        if !image["type"]
            .as_str()
            .is_some_and(|ty| NATIVE_IMAGE_TYPES.contains(&ty))
        {
            continue;
        }
        let module: RawObjectInfo = parse(image.clone(), || format!("debug_meta.images[{i}]"))?;
        image_indices.push(i);
        modules.push(module);
    }
    let mut request_stacks = Vec::new();
    for stack in &stacks {
        let container = stack.container;
        let adjustment = container
            .stacktrace_field(event, "instruction_addr_adjustment")
            .and_then(|v| v.as_str().map(str::to_owned));
        let mut frames = Vec::with_capacity(stack.sent.len());
        for (n, &i) in stack.sent.iter().enumerate() {
            let path = || format!("{}.stacktrace.frames[{i}]", container.path());
            let mut frame = stack.input[i].clone();
            let addr_mode = frame
                .as_object_mut()
                .and_then(|f| f.remove("addr_mode"))
                .and_then(|mode| sanitize_addr_mode(mode.as_str()?, &modules));
            if let Some(frame) = frame.as_object_mut()
                && let Some(sym_addr) = frame.remove("symbol_addr")
            {
                frame.insert("sym_addr".into(), sym_addr);
            }
            let mut raw: RawFrame = parse(frame, path)?;
            raw.addr_mode = addr_mode.unwrap_or_default();
            raw.adjust_instruction_addr = match (adjustment.as_deref(), n) {
                (Some("none"), _) => Some(false),
                (Some("all"), 0) => Some(true),
                (Some("all_but_first"), 0) => Some(false),
                _ => raw.adjust_instruction_addr,
            };
            frames.push(raw);
        }
        let registers: Registers = match container.stacktrace_field(event, "registers") {
            Some(registers) if registers.is_object() => parse(registers, || {
                format!("{}.stacktrace.registers", container.path())
            })?,
            _ => Registers::default(),
        };
        request_stacks.push(RawStacktrace {
            registers,
            frames,
            ..RawStacktrace::default()
        });
    }
    let mut body = json!({
        "platform": event["platform"],
        "modules": modules,
        "stacktraces": request_stacks,
        // As Sentry asks: the candidates end up on the images, which tells why a
        // module was not found.
        "options": {"dif_candidates": true},
    });
    if let Some(signal) = event
        .pointer("/exception/values/0/mechanism/meta/signal/number")
        .and_then(Value::as_u64)
    {
        body["signal"] = signal.into();
    }
    Ok(Some(Plan {
        pipeline: Pipeline::Native,
        body,
        stacks,
        images: image_indices,
        exceptions: Vec::new(),
    }))
}

/// Sentry's reading of `addr_mode`: `rel:` names a module by index or by debug id; what
/// names no module falls back to absolute addressing.
fn sanitize_addr_mode(mode: &str, modules: &[RawObjectInfo]) -> Option<AddrMode> {
    let arg = mode.strip_prefix("rel:")?;
    let by_id = arg.parse::<DebugId>().ok().and_then(|id| {
        modules.iter().position(|m| {
            m.debug_id
                .as_deref()
                .and_then(|d| d.parse::<DebugId>().ok())
                == Some(id)
        })
    });
    let index = by_id.or_else(|| {
        arg.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| arg.parse().ok())?
    })?;
    Some(AddrMode::Rel(index))
}

/// The `keys` of `frame` that are set: what Sentry sends of a frame it hands on.
fn pick(frame: &Value, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter(|key| !frame[**key].is_null())
        .map(|key| ((*key).to_owned(), frame[*key].clone()))
        .collect()
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Copies `keys` of `from` that are set into `to`.
fn copy_truthy(to: &mut Map<String, Value>, from: &Value, keys: &[&str]) {
    for key in keys {
        if truthy(&from[*key]) {
            to.insert((*key).to_owned(), from[*key].clone());
        }
    }
}

fn posix_basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A raw native frame with what the answer says about it, as Sentry merges them.
fn merge_native_frame(frame: &mut Map<String, Value>, answer: &Value) {
    copy_truthy(
        frame,
        answer,
        &["function", "instruction_addr", "function_id"],
    );
    copy_truthy(frame, answer, &["symbol"]);
    if let Some(abs_path) = answer["abs_path"].as_str().filter(|p| !p.is_empty()) {
        frame.insert("abs_path".into(), abs_path.into());
        frame.insert("filename".into(), posix_basename(abs_path).into());
    }
    copy_truthy(
        frame,
        answer,
        &["filename", "lineno", "colno", "package", "trust"],
    );
    copy_truthy(
        frame,
        answer,
        &["pre_context", "post_context", "source_link"],
    );
    if !answer["context_line"].is_null() {
        frame.insert("context_line".into(), answer["context_line"].clone());
    }
    if truthy(&answer["sym_addr"]) {
        frame.insert("symbol_addr".into(), answer["sym_addr"].clone());
    }
    match &answer["addr_mode"] {
        Value::Null => {
            frame.remove("addr_mode");
        }
        mode => {
            frame.insert("addr_mode".into(), mode.clone());
        }
    }
    if truthy(&answer["status"]) {
        data_of(frame).insert("symbolicator_status".into(), answer["status"].clone());
    }
}

fn data_of(frame: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let data = frame
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    data.as_object_mut().expect("made an object above")
}

fn apply_native(event: &mut Value, plan: &Plan, answer: &Value) -> anyhow::Result<()> {
    let modules = answer["modules"].as_array().map_or(&[][..], Vec::as_slice);
    for (&i, module) in plan.images.iter().zip(modules) {
        let Some(image) = event
            .pointer_mut(&format!("/debug_meta/images/{i}"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        // Symbolicator may know more than the SDK did (arch, features, statuses).
        for (key, value) in module.as_object().into_iter().flatten() {
            let unknown = value == "unknown" && (key == "arch" || key == "type");
            if !value.is_null() && !unknown {
                image.insert(key.clone(), value.clone());
            }
        }
    }
    let stacktraces = answer_stacks(answer, "stacktraces", plan)?;
    for (stack, answered) in plan.stacks.iter().zip(stacktraces) {
        let mut by_index: BTreeMap<usize, Vec<&Value>> = BTreeMap::new();
        for frame in answered {
            if let Some(index) = frame["original_index"].as_u64() {
                by_index.entry(index as usize).or_default().push(frame);
            }
        }
        let mut raw_frames = stack.input.clone();
        let mut frames = Vec::with_capacity(raw_frames.len());
        // Walk innermost first, as the request was made; `sent` is in that order too.
        let mut next = 0;
        for i in (0..raw_frames.len()).rev() {
            let mut group: &[&Value] = &[];
            if stack.sent.get(next) == Some(&i) {
                group = by_index.get(&next).map_or(&[][..], Vec::as_slice);
                next += 1;
            }
            if group.is_empty() {
                frames.push(raw_frames[i].clone());
                continue;
            }
            for answer_frame in group {
                let mut merged = raw_frames[i].as_object().cloned().unwrap_or_default();
                merge_native_frame(&mut merged, answer_frame);
                if let Some(package) = merged.get("package").filter(|p| truthy(p))
                    && let Some(raw) = raw_frames[i].as_object_mut()
                {
                    raw.insert("package".into(), package.clone());
                }
                frames.push(Value::Object(merged));
            }
        }
        frames.reverse();
        let registers = stack.container.stacktrace_field(event, "registers");
        write_frames(
            event,
            stack.container,
            frames,
            json!({"frames": raw_frames, "registers": registers}),
        );
    }
    Ok(())
}

/// The answer's stack traces named `key`, one for each stack trace of the request.
fn answer_stacks<'a>(
    answer: &'a Value,
    key: &str,
    plan: &Plan,
) -> anyhow::Result<Vec<&'a [Value]>> {
    let stacks: Vec<&[Value]> = answer[key]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|stack| stack["frames"].as_array().map_or(&[][..], Vec::as_slice))
        .collect();
    if stacks.len() != plan.stacks.len() {
        bail!(
            "the answer has {} entries in `{key}` for the {} stack traces sent",
            stacks.len(),
            plan.stacks.len()
        );
    }
    Ok(stacks)
}

/// Puts the symbolicated frames where a reader of the event looks, and the raw ones
/// beside them (the event's own top-level stack trace has no place for those, in Sentry
/// either).
fn write_frames(event: &mut Value, container: Container, frames: Vec<Value>, raw: Value) {
    let Some(holder) = container.get_mut(event) else {
        return;
    };
    let stacktrace = holder
        .entry("stacktrace")
        .or_insert_with(|| Value::Object(Map::new()));
    if !stacktrace.is_object() {
        *stacktrace = Value::Object(Map::new());
    }
    stacktrace["frames"] = Value::Array(frames);
    if container != Container::Event {
        let mut raw = raw;
        if let Some(raw) = raw.as_object_mut() {
            raw.retain(|_, v| !v.is_null());
        }
        holder.insert("raw_stacktrace".into(), raw);
    }
}

// ----------------------------------------------------------------------------- js

/// Frames Sentry's JavaScript processing takes: a location in a script, not native code
/// and, in Node, not one of its built-in modules.
fn js_handles(frame: &Value, event: &Value) -> bool {
    let platform = platform_of(frame, event);
    if !Pipeline::Js.owns(platform) {
        return false;
    }
    let Some(abs_path) = frame["abs_path"].as_str().filter(|p| !p.is_empty()) else {
        return false;
    };
    truthy(&frame["lineno"]) && !is_native_code(abs_path) && !is_node_builtin(abs_path, event)
}

fn is_native_code(abs_path: &str) -> bool {
    abs_path == "native" || abs_path == "[native code]"
}

/// In Node, what is not a path or an `app:`, `webpack:` or drive-letter URL is one of
/// Node's own modules, which have no source maps.
fn is_node_builtin(abs_path: &str, event: &Value) -> bool {
    if event["platform"] != "node" {
        return false;
    }
    let app_path = abs_path.starts_with('/')
        || abs_path.starts_with("app:")
        || abs_path.starts_with("webpack:")
        || matches!(abs_path.as_bytes(), [letter, b':', ..] if letter.is_ascii_alphabetic());
    !app_path
}

fn js_plan(event: &Value) -> anyhow::Result<Option<Plan>> {
    let stacks = stacks(event, |frame| js_handles(frame, event), false);
    if stacks.is_empty() {
        return Ok(None);
    }
    let mut request_stacks = Vec::new();
    for stack in &stacks {
        let mut frames = Vec::with_capacity(stack.sent.len());
        for &i in &stack.sent {
            let normalized = pick(
                &stack.input[i],
                &["abs_path", "lineno", "colno", "function"],
            );
            let frame: JsFrame = parse(Value::Object(normalized), || {
                format!("{}.stacktrace.frames[{i}]", stack.container.path())
            })?;
            frames.push(frame);
        }
        request_stacks.push(json!({ "frames": frames }));
    }
    let modules: Vec<JsModule> = images(event)
        .filter(|(_, image)| {
            image["type"] == "sourcemap"
                && image["debug_id"].is_string()
                && image["code_file"].is_string()
        })
        .map(|(i, image)| parse(image.clone(), || format!("debug_meta.images[{i}]")))
        .collect::<anyhow::Result<_>>()?;
    let body = json!({
        "platform": event["platform"],
        "stacktraces": request_stacks,
        "modules": modules,
        "release": event["release"],
        "dist": event["dist"],
        // Stored frames run outermost first, which is the JS default order.
        "options": {"apply_source_context": true},
    });
    Ok(Some(Plan {
        pipeline: Pipeline::Js,
        body,
        stacks,
        images: Vec::new(),
        exceptions: Vec::new(),
    }))
}

fn merge_js_frame(frame: &Value, answer: &Value) -> Value {
    let mut merged = frame.as_object().cloned().unwrap_or_default();
    copy_truthy(
        &mut merged,
        answer,
        &[
            "function",
            "abs_path",
            "filename",
            "lineno",
            "colno",
            "pre_context",
            "context_line",
            "post_context",
            "module",
        ],
    );
    let data = &answer["data"];
    if data.is_object() {
        let meta = data_of(&mut merged);
        for key in ["sourcemap", "resolved_with"] {
            if truthy(&data[key]) {
                meta.insert(key.into(), data[key].clone());
            }
        }
        if !data["symbolicated"].is_null() {
            meta.insert("symbolicated".into(), data["symbolicated"].clone());
        }
    }
    if !answer["in_app"].is_null() {
        merged.insert("in_app".into(), answer["in_app"].clone());
    }
    Value::Object(merged)
}

fn apply_js(event: &mut Value, plan: &Plan, answer: &Value) -> anyhow::Result<()> {
    let symbolicated = answer_stacks(answer, "stacktraces", plan)?;
    let raw_answers = answer_stacks(answer, "raw_stacktraces", plan)?;
    let platform_is_node = event["platform"] == "node";
    for ((stack, answered), raw_answered) in plan.stacks.iter().zip(symbolicated).zip(raw_answers) {
        let mut frames = Vec::with_capacity(stack.input.len());
        let mut raw_frames = Vec::with_capacity(stack.input.len());
        let mut next = 0;
        for (i, frame) in stack.input.iter().enumerate() {
            if stack.sent.get(next) == Some(&i) {
                let (complete, raw) = (&answered.get(next), &raw_answered.get(next));
                next += 1;
                if let (Some(complete), Some(raw)) = (complete, raw) {
                    let mut with_context = frame.as_object().cloned().unwrap_or_default();
                    copy_truthy(
                        &mut with_context,
                        raw,
                        &["pre_context", "context_line", "post_context"],
                    );
                    raw_frames.push(Value::Object(with_context));
                    frames.push(merge_js_frame(frame, complete));
                    continue;
                }
            }
            raw_frames.push(frame.clone());
            // Sentry marks native code and Node's own modules as not the app's.
            let mut shown = frame.clone();
            let not_app = frame["abs_path"].as_str().is_some_and(|path| {
                is_native_code(path) || (platform_is_node && is_node_builtin(path, event))
            });
            if not_app && let Some(shown) = shown.as_object_mut() {
                shown.insert("in_app".into(), false.into());
            }
            frames.push(shown);
        }
        write_frames(
            event,
            stack.container,
            frames,
            json!({ "frames": raw_frames }),
        );
    }
    if let Some(attempts) = answer["scraping_attempts"]
        .as_array()
        .filter(|a| !a.is_empty())
        && let Some(event) = event.as_object_mut()
    {
        event.insert("scraping_attempts".into(), Value::Array(attempts.clone()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------- jvm

fn jvm_handles(frame: &Value, event: &Value) -> bool {
    Pipeline::Jvm.owns(platform_of(frame, event))
        && frame["function"].is_string()
        && frame["module"].is_string()
}

/// The `module` and `type` of an exception, when it has both (what remapping needs).
fn jvm_exception(value: &Value) -> Option<JvmException> {
    Some(JvmException {
        ty: value["type"].as_str().filter(|t| !t.is_empty())?.to_owned(),
        module: value["module"]
            .as_str()
            .filter(|m| !m.is_empty())?
            .to_owned(),
    })
}

fn jvm_plan(event: &Value) -> anyhow::Result<Option<Plan>> {
    let stacks = stacks(event, |frame| jvm_handles(frame, event), false);
    let (exception_indices, exceptions): (Vec<usize>, Vec<JvmException>) =
        if event["platform"] == "java" {
            event["exception"]["values"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .enumerate()
                .filter_map(|(i, value)| Some((i, jvm_exception(value)?)))
                .unzip()
        } else {
            Default::default()
        };
    if stacks.is_empty() && exceptions.is_empty() {
        return Ok(None);
    }
    let mut request_stacks = Vec::new();
    for stack in &stacks {
        let mut frames = Vec::with_capacity(stack.sent.len());
        for &i in &stack.sent {
            let mut normalized = pick(
                &stack.input[i],
                &[
                    "platform", "abs_path", "lineno", "function", "module", "filename", "in_app",
                ],
            );
            // Every frame expanded from this one comes back with its index.
            normalized.insert("index".into(), i.into());
            let frame: JvmFrame = parse(Value::Object(normalized), || {
                format!("{}.stacktrace.frames[{i}]", stack.container.path())
            })?;
            frames.push(frame);
        }
        let mut request_stack = json!({ "frames": frames });
        // R8's rewrite rules apply to the frame that threw what the exception names.
        if let Container::Exception(_) = stack.container
            && let Some(exception) = jvm_exception(stack.container.get(event))
        {
            request_stack["exception"] = serde_json::to_value(exception)?;
        }
        request_stacks.push(request_stack);
    }
    let mut modules = Vec::new();
    for (i, image) in images(event) {
        let ty = match image["type"].as_str() {
            Some("proguard") => "proguard",
            // A JVM source bundle, for source context.
            Some("jvm") => "source",
            _ => continue,
        };
        let Some(id) = [&image["uuid"], &image["debug_id"]]
            .into_iter()
            .find(|id| id.is_string())
        else {
            continue;
        };
        let module: JvmModule = parse(json!({"uuid": id, "type": ty}), || {
            format!("debug_meta.images[{i}]")
        })?;
        modules.push(module);
    }
    let body = json!({
        "platform": event["platform"],
        "exceptions": exceptions,
        "stacktraces": request_stacks,
        "modules": modules,
        "release_package": release_package(event),
        "options": {"apply_source_context": true},
    });
    Ok(Some(Plan {
        pipeline: Pipeline::Jvm,
        body,
        stacks,
        images: Vec::new(),
        exceptions: exception_indices,
    }))
}

/// The package of a `package@version+build` release, as Sentry parses release names;
/// frames under it are the app's own.
fn release_package(event: &Value) -> Option<&str> {
    let (package, _version) = event["release"].as_str()?.split_once('@')?;
    (!package.is_empty()).then_some(package)
}

fn merge_jvm_frame(frame: &Value, answer: &Value) -> Value {
    let mut merged = frame.as_object().cloned().unwrap_or_default();
    copy_truthy(&mut merged, answer, &["function"]);
    // A remapped frame without a file must not keep the obfuscated one.
    for key in ["abs_path", "filename"] {
        if truthy(&answer[key]) {
            merged.insert(key.into(), answer[key].clone());
        } else {
            merged.remove(key);
        }
    }
    if !answer["lineno"].is_null() {
        merged.insert("lineno".into(), answer["lineno"].clone());
    }
    copy_truthy(&mut merged, answer, &["module"]);
    if !answer["in_app"].is_null() {
        merged.insert("in_app".into(), answer["in_app"].clone());
    }
    copy_truthy(
        &mut merged,
        answer,
        &["pre_context", "context_line", "post_context"],
    );
    Value::Object(merged)
}

fn apply_jvm(event: &mut Value, plan: &Plan, answer: &Value) -> anyhow::Result<()> {
    let stacktraces = answer_stacks(answer, "stacktraces", plan)?;
    for (stack, answered) in plan.stacks.iter().zip(stacktraces) {
        let mut frames = Vec::with_capacity(stack.input.len());
        for (i, raw) in stack.input.iter().enumerate() {
            let mut matching = answered
                .iter()
                .filter(|f| f["index"].as_u64() == Some(i as u64))
                .peekable();
            if matching.peek().is_none() {
                frames.push(raw.clone());
            }
            frames.extend(matching.map(|returned| merge_jvm_frame(raw, returned)));
        }
        write_frames(
            event,
            stack.container,
            frames,
            json!({ "frames": stack.input }),
        );
    }
    let exceptions = answer["exceptions"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for (&i, remapped) in plan.exceptions.iter().zip(exceptions) {
        if let Some(exception) = event
            .pointer_mut(&format!("/exception/values/{i}"))
            .and_then(Value::as_object_mut)
        {
            for key in ["type", "module"] {
                exception.insert(key.into(), remapped[key].clone());
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------- answers, counts

/// Writes a completed answer to `plan` back into `event`; any other answer is an error
/// that says what the endpoint said.
pub fn apply(event: &mut Value, plan: &Plan, answer: &Value) -> anyhow::Result<()> {
    match answer["status"].as_str() {
        Some("completed") => {}
        Some("failed") => bail!(
            "symbolication failed: {}",
            answer["message"].as_str().unwrap_or("no message")
        ),
        Some(status) => bail!("symbolication ended with status `{status}`"),
        None => bail!("the answer has no status: {answer}"),
    }
    match plan.pipeline {
        Pipeline::Native => apply_native(event, plan, answer),
        Pipeline::Js => apply_js(event, plan, answer),
        Pipeline::Jvm => apply_jvm(event, plan, answer),
    }
}

/// How many of a pipeline's frames an event shows, and how many of those symbolicated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCount {
    pub frames: usize,
    pub symbolicated: usize,
}

/// Counts the frames of `pipeline` a reader of `event` sees. What counts as symbolicated
/// is what Sentry leaves on a frame: a native frame with a function name (raw ones have
/// only addresses), a JS frame marked `data.symbolicated`, a JVM frame whose class and
/// method appear nowhere among the raw (obfuscated) frames it was remapped from.
pub fn count(event: &Value, pipeline: Pipeline) -> FrameCount {
    let mut count = FrameCount::default();
    for container in Container::all(event) {
        let raw_names: HashSet<(&str, &str)> = container.get(event)["raw_stacktrace"]["frames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| Some((f["module"].as_str()?, f["function"].as_str()?)))
            .collect();
        let has_raw = container.get(event)["raw_stacktrace"].is_object();
        for frame in container.shown_frames(event) {
            if !pipeline.owns(platform_of(frame, event)) {
                continue;
            }
            count.frames += 1;
            let symbolicated = match pipeline {
                Pipeline::Native => truthy(&frame["function"]),
                Pipeline::Js => frame["data"]["symbolicated"] == true,
                Pipeline::Jvm => {
                    has_raw
                        && match (frame["module"].as_str(), frame["function"].as_str()) {
                            (Some(module), Some(function)) => {
                                !raw_names.contains(&(module, function))
                            }
                            _ => false,
                        }
                }
            };
            count.symbolicated += usize::from(symbolicated);
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native_event() -> Value {
        json!({
            "platform": "native",
            "debug_meta": {"images": [
                {"type": "elf", "debug_id": "d96fdc6c-1668-6d8a-e479-531b3d99327b",
                 "code_file": "/usr/bin/crash", "image_addr": "0x1000", "image_size": 4096,
                 "arch": "x86_64"},
                {"type": "sourcemap", "code_file": "app.js",
                 "debug_id": "5943c33d-70f5-499d-b4e1-9b5d5cac3781"},
            ]},
            "exception": {"values": [{
                "type": "SIGSEGV",
                "mechanism": {"meta": {"signal": {"number": 11}}},
                "stacktrace": {"frames": [
                    {"instruction_addr": "0x1100"},
                    {"function": "already", "instruction_addr": "0x1200", "in_app": true},
                    {"instruction_addr": "0x1300",
                     "addr_mode": "rel:D96FDC6C-1668-6D8A-E479-531B3D99327B"},
                ]},
            }]},
            "threads": {"values": [{"id": 1, "crashed": true}]},
        })
    }

    #[test]
    fn native_frames_go_innermost_first_with_their_modules() {
        let event = native_event();
        let plans = plans(&event).unwrap();
        assert_eq!(plans.len(), 1);
        let body = &plans[0].body;
        assert_eq!(body["signal"], 11);
        assert_eq!(body["modules"].as_array().unwrap().len(), 1);
        let frames = body["stacktraces"][0]["frames"].as_array().unwrap();
        let addrs: Vec<&str> = frames
            .iter()
            .map(|f| f["instruction_addr"].as_str().unwrap())
            .collect();
        assert_eq!(addrs, ["0x1300", "0x1200", "0x1100"]);
        assert_eq!(frames[0]["addr_mode"], "rel:0");
        // Parses as the endpoint parses it.
        serde_json::from_value::<crate::native::SymbolicateRequest>(body.clone()).unwrap();
    }

    #[test]
    fn native_answers_expand_inlines_and_keep_the_raw_frames() {
        let mut event = native_event();
        let plan = plans(&event).unwrap().remove(0);
        let before = count(&event, Pipeline::Native);
        assert_eq!(
            before,
            FrameCount {
                frames: 3,
                symbolicated: 1
            }
        );
        let answer = json!({
            "status": "completed",
            "modules": [{"type": "elf", "debug_status": "found", "arch": "unknown",
                         "code_file": "/usr/bin/crash"}],
            "stacktraces": [{"frames": [
                {"status": "symbolicated", "original_index": 0, "instruction_addr": "0x1300",
                 "function": "inlined", "abs_path": "/src/a.c", "lineno": 3},
                {"status": "symbolicated", "original_index": 0, "instruction_addr": "0x1300",
                 "function": "outer", "abs_path": "/src/a.c", "lineno": 9},
                {"status": "missing", "original_index": 1, "instruction_addr": "0x1200"},
                {"status": "symbolicated", "original_index": 2, "instruction_addr": "0x1100",
                 "function": "main", "filename": "main.c", "lineno": 1},
            ]}],
        });
        apply(&mut event, &plan, &answer).unwrap();
        let exception = &event["exception"]["values"][0];
        let frames = exception["stacktrace"]["frames"].as_array().unwrap();
        let names: Vec<&str> = frames
            .iter()
            .map(|f| f["function"].as_str().unwrap())
            .collect();
        // Outermost first again; the inlined callee last, after its caller.
        assert_eq!(names, ["main", "already", "outer", "inlined"]);
        assert_eq!(frames[3]["filename"], "a.c");
        assert_eq!(frames[3]["data"]["symbolicator_status"], "symbolicated");
        assert_eq!(frames[1]["data"]["symbolicator_status"], "missing");
        assert_eq!(frames[1]["in_app"], true);
        assert_eq!(
            exception["raw_stacktrace"]["frames"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
        let image = &event["debug_meta"]["images"][0];
        assert_eq!(image["debug_status"], "found");
        assert_eq!(
            image["arch"], "x86_64",
            "an unknown arch does not overwrite"
        );
        assert_eq!(
            count(&event, Pipeline::Native),
            FrameCount {
                frames: 4,
                symbolicated: 4
            }
        );
        // A processed event is symbolicated again from its raw frames.
        let again = plans(&event).unwrap().remove(0);
        assert_eq!(again.body["stacktraces"], plan.body["stacktraces"]);
    }

    #[test]
    fn failed_answers_are_errors_that_say_why() {
        let mut event = native_event();
        let plan = plans(&event).unwrap().remove(0);
        let err = apply(
            &mut event,
            &plan,
            &json!({"status": "failed", "message": "boom"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        let err = apply(&mut event, &plan, &json!({"status": "completed"})).unwrap_err();
        assert!(err.to_string().contains("stack traces sent"), "{err}");
    }

    #[test]
    fn bad_frames_name_their_place_in_the_event() {
        let mut event = native_event();
        event["exception"]["values"][0]["stacktrace"]["frames"][1]["instruction_addr"] =
            "0xnope".into();
        let err = plans(&event).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("exception.values[0].stacktrace.frames[1]: invalid address"),
            "{message}"
        );
    }

    #[test]
    fn js_frames_keep_their_order_and_skip_native_code() {
        let mut event = json!({
            "platform": "node",
            "release": "web@1.0",
            "exception": {"values": [{"stacktrace": {"frames": [
                {"abs_path": "node:internal/main", "lineno": 1, "function": "run"},
                {"abs_path": "/app/a.min.js", "lineno": 1, "colno": 10, "function": "a"},
                {"abs_path": "[native code]", "lineno": 1},
                {"abs_path": "app:///b.min.js", "lineno": 2, "colno": 5},
            ]}}]},
        });
        let plan = plans(&event).unwrap().remove(0);
        assert_eq!(plan.pipeline, Pipeline::Js);
        let frames = plan.body["stacktraces"][0]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1]["abs_path"], "app:///b.min.js");
        let answer = json!({
            "status": "completed",
            "stacktraces": [{"frames": [
                {"abs_path": "/app/src/a.js", "lineno": 3, "colno": 1, "function": "load",
                 "data": {"symbolicated": true, "sourcemap": "/app/a.min.js.map"}},
                {"abs_path": "app:///b.min.js", "lineno": 2, "colno": 5,
                 "data": {"symbolicated": false}},
            ]}],
            "raw_stacktraces": [{"frames": [
                {"abs_path": "/app/a.min.js", "lineno": 1, "context_line": "min"},
                {"abs_path": "app:///b.min.js", "lineno": 2},
            ]}],
            "scraping_attempts": [{"url": "app:///b.min.js", "status": "not_attempted"}],
        });
        apply(&mut event, &plan, &answer).unwrap();
        let exception = &event["exception"]["values"][0];
        let frames = exception["stacktrace"]["frames"].as_array().unwrap();
        assert_eq!(frames[0]["in_app"], false, "a Node built-in");
        assert_eq!(frames[1]["function"], "load");
        assert_eq!(frames[1]["data"]["sourcemap"], "/app/a.min.js.map");
        assert_eq!(frames[2]["in_app"], false, "native code");
        assert_eq!(
            exception["raw_stacktrace"]["frames"][1]["context_line"],
            "min"
        );
        assert_eq!(event["scraping_attempts"][0]["status"], "not_attempted");
        assert_eq!(
            count(&event, Pipeline::Js),
            FrameCount {
                frames: 4,
                symbolicated: 1
            }
        );
    }

    #[test]
    fn jvm_frames_expand_by_index_and_exceptions_are_remapped() {
        let mut event = json!({
            "platform": "java",
            "release": "org.birdwatch.app@2.1+7",
            "debug_meta": {"images": [
                {"type": "proguard", "uuid": "6f1c2a9e-4b7d-4c1e-8a3f-2d5e7b9c0a41"},
            ]},
            "exception": {"values": [{"type": "c", "module": "b", "stacktrace": {"frames": [
                {"module": "java.lang.Thread", "function": "run", "lineno": 1},
                {"module": "a.a", "function": "onCreate", "lineno": 4, "filename": "SourceFile"},
            ]}}]},
        });
        let plan = plans(&event).unwrap().remove(0);
        assert_eq!(plan.pipeline, Pipeline::Jvm);
        assert_eq!(plan.body["release_package"], "org.birdwatch.app");
        assert_eq!(plan.body["modules"][0]["type"], "proguard");
        assert_eq!(plan.body["stacktraces"][0]["frames"][1]["index"], 1);
        serde_json::from_value::<crate::jvm::SymbolicateJvmRequest>(plan.body.clone()).unwrap();
        let answer = json!({
            "status": "completed",
            "exceptions": [{"type": "SessionExpiredException", "module": "org.birdwatch"}],
            "stacktraces": [{"frames": [
                {"module": "java.lang.Thread", "function": "run", "lineno": 1, "index": 0},
                {"module": "org.birdwatch.A", "function": "onCreate", "lineno": 33,
                 "filename": "A.kt", "abs_path": "A.kt", "index": 1},
                {"module": "org.birdwatch.S", "function": "label", "lineno": 48, "index": 1},
            ]}],
        });
        apply(&mut event, &plan, &answer).unwrap();
        let exception = &event["exception"]["values"][0];
        assert_eq!(exception["type"], "SessionExpiredException");
        let frames = exception["stacktrace"]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[1]["filename"], "A.kt");
        assert!(frames[2].get("filename").is_none(), "{:?}", frames[2]);
        assert_eq!(
            count(&event, Pipeline::Jvm),
            FrameCount {
                frames: 3,
                symbolicated: 2
            }
        );
    }
}
