//! `--format text`: a readable stack per thread, innermost frame first, then the
//! modules. It reads the same JSON the `json` format prints (an event, or a crash file's
//! answer), so both formats always agree.

use std::fmt::Write;

use serde_json::Value;

/// One stack to print: a title and its frames, innermost first.
struct Stack<'a> {
    title: String,
    frames: Vec<&'a Value>,
}

/// A symbolicated (or not) Sentry event.
pub fn event(event: &Value) -> String {
    let mut header = Vec::new();
    if let Some(id) = event["event_id"].as_str() {
        header.push(format!("Event {id}"));
    }
    let jvm = event["platform"] == "java";
    let mut stacks = Vec::new();
    for exception in values(&event["exception"]) {
        let ty = match (exception["module"].as_str(), exception["type"].as_str()) {
            (Some(module), Some(ty)) if jvm && !module.is_empty() => format!("{module}.{ty}"),
            (_, Some(ty)) => ty.to_owned(),
            (_, None) => "Exception".to_owned(),
        };
        let title = match exception["value"].as_str() {
            Some(value) => format!("{ty}: {value}"),
            None => ty,
        };
        push_stack(&mut stacks, title, &exception["stacktrace"]);
    }
    for thread in values(&event["threads"]) {
        let state = if thread["crashed"] == true {
            Some("crashed")
        } else {
            (thread["current"] == true).then_some("current")
        };
        let title = thread_title(&thread["id"], &thread["name"], state);
        push_stack(&mut stacks, title, &thread["stacktrace"]);
    }
    push_stack(&mut stacks, "Stack trace".to_owned(), &event["stacktrace"]);
    let images: Vec<&Value> = values_of(&event["debug_meta"]["images"]).collect();
    render(&header, &stacks, &images, jvm)
}

/// The answer of `/minidump` or `/applecrashreport` for a crash file.
pub fn crash(answer: &Value) -> String {
    let mut header = Vec::new();
    let text = |key: &str| answer[key].as_str().filter(|s| !s.is_empty());
    if let Some(reason) = text("crash_reason") {
        let mut line = format!("Crash: {reason}");
        if let Some(details) = text("crash_details") {
            let _ = write!(line, " ({details})");
        }
        header.push(line);
    }
    if let Some(assertion) = text("assertion") {
        header.push(format!("Assertion: {assertion}"));
    }
    let system = &answer["system_info"];
    let parts: Vec<&str> = ["os_name", "os_version", "os_build", "cpu_arch"]
        .into_iter()
        .filter_map(|key| system[key].as_str().filter(|s| !s.is_empty()))
        .collect();
    if !parts.is_empty() {
        header.push(format!("System: {}", parts.join(" ")));
    }
    let crashed = answer["crashed"] == true;
    let stacks: Vec<Stack> = values_of(&answer["stacktraces"])
        .map(|stack| {
            let state = (stack["is_requesting"] == true).then_some(if crashed {
                "crashed"
            } else {
                "current"
            });
            Stack {
                title: thread_title(&stack["thread_id"], &stack["thread_name"], state),
                frames: values_of(&stack["frames"]).collect(),
            }
        })
        .collect();
    let modules: Vec<&Value> = values_of(&answer["modules"]).collect();
    render(&header, &stacks, &modules, false)
}

/// The `values` of an interface such as `exception` or `threads`.
fn values(interface: &Value) -> impl DoubleEndedIterator<Item = &Value> {
    values_of(&interface["values"])
}

fn values_of(array: &Value) -> impl DoubleEndedIterator<Item = &Value> {
    array.as_array().into_iter().flatten()
}

/// Stored events list frames outermost first; the text shows the innermost first.
fn push_stack<'a>(stacks: &mut Vec<Stack<'a>>, title: String, stacktrace: &'a Value) {
    let frames: Vec<&Value> = values_of(&stacktrace["frames"]).rev().collect();
    if !frames.is_empty() {
        stacks.push(Stack { title, frames });
    }
}

/// `Thread 7 "main" (crashed)`, with what is known of it.
fn thread_title(id: &Value, name: &Value, state: Option<&str>) -> String {
    let mut title = "Thread".to_owned();
    if let Some(id) = scalar(id) {
        let _ = write!(title, " {id}");
    }
    if let Some(name) = name.as_str() {
        let _ = write!(title, " \"{name}\"");
    }
    if let Some(state) = state {
        let _ = write!(title, " ({state})");
    }
    title
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An address as the wire carries it: a hex or decimal string, or a number.
fn address(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

fn basename(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

fn render(header: &[String], stacks: &[Stack], modules: &[&Value], jvm: bool) -> String {
    let mut out = String::new();
    for line in header {
        let _ = writeln!(out, "{line}");
    }
    for stack in stacks {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "{}", stack.title);
        for (i, frame) in stack.frames.iter().enumerate() {
            let outer = stack.frames.get(i + 1).copied();
            let _ = writeln!(out, "{}", frame_line(i, frame, outer, modules, jvm));
        }
    }
    if !modules.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("Modules\n");
        for module in modules {
            let _ = writeln!(out, "{}", module_line(module));
        }
    }
    out
}

fn frame_line(
    i: usize,
    frame: &Value,
    outer: Option<&Value>,
    modules: &[&Value],
    jvm: bool,
) -> String {
    let mut line = format!("  {:<4}", format!("#{i}"));
    let addr = address(&frame["instruction_addr"]);
    if let Some(addr) = addr {
        let _ = write!(line, "{addr:#018x}  ");
    }
    let function = ["function", "symbol", "raw_function"]
        .into_iter()
        .find_map(|key| frame[key].as_str().filter(|s| !s.is_empty()))
        .unwrap_or("??");
    match frame["module"].as_str().filter(|_| jvm) {
        Some(module) => {
            let _ = write!(line, "{module}.{function}");
        }
        None => {
            let _ = write!(line, "{function}");
        }
    }
    let file = ["abs_path", "filename"]
        .into_iter()
        .find_map(|key| frame[key].as_str().filter(|s| !s.is_empty()));
    if let Some(file) = file {
        let _ = write!(line, "  {file}");
        if let Some(lineno) = frame["lineno"].as_u64() {
            let _ = write!(line, ":{lineno}");
            if let Some(colno) = frame["colno"].as_u64() {
                let _ = write!(line, ":{colno}");
            }
        }
    }
    // An inlined call shares its address with the frame it was inlined into.
    let inlined = addr.is_some() && outer.is_some_and(|o| address(&o["instruction_addr"]) == addr);
    if inlined {
        line.push_str("  (inlined)");
    }
    if let Some(package) = frame["package"].as_str() {
        let _ = write!(line, "  in {}", basename(package));
        let base = modules
            .iter()
            .find(|m| m["code_file"].as_str() == Some(package))
            .and_then(|m| address(&m["image_addr"]));
        if let (Some(addr), Some(base)) = (addr, base)
            && let Some(offset) = addr.checked_sub(base)
        {
            let _ = write!(line, " +{offset:#x}");
        }
    }
    // How a stack walker found the frame says how far to trust it; inlined frames share
    // their caller's.
    let trust = frame["trust"].as_str().filter(|t| *t != "none");
    if let Some(trust) = trust.filter(|_| !inlined) {
        let how = match trust {
            "cfiscan" => "cfi scan",
            "prewalked" => "the client",
            other => other,
        };
        let _ = write!(line, "  (by {how})");
    }
    let status = frame["data"]["symbolicator_status"]
        .as_str()
        .or_else(|| frame["status"].as_str());
    if let Some(status) = status.filter(|s| *s != "symbolicated") {
        let _ = write!(line, "  [{status}]");
    }
    line
}

fn module_line(module: &Value) -> String {
    let name = ["code_file", "debug_file"]
        .into_iter()
        .find_map(|key| module[key].as_str())
        .map(basename);
    let parts: Vec<&str> = name
        .into_iter()
        .chain(
            ["type", "debug_id", "uuid"]
                .into_iter()
                .filter_map(|key| module[key].as_str()),
        )
        .collect();
    let mut line = format!("  {}", parts.join("  "));
    if let Some(status) = module["debug_status"].as_str() {
        let _ = write!(line, "  debug: {status}");
    }
    if let Some(status) = module["unwind_status"].as_str() {
        let _ = write!(line, "  unwind: {status}");
    }
    line
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn events_print_innermost_first_with_inlines_and_offsets() {
        let text = event(&json!({
            "event_id": "abc",
            "platform": "native",
            "debug_meta": {"images": [{"type": "elf", "code_file": "/usr/bin/crash",
                                       "image_addr": "0x1000", "debug_id": "d96f",
                                       "debug_status": "found"}]},
            "exception": {"values": [{"type": "SIGSEGV", "value": "Segfault", "stacktrace": {"frames": [
                {"instruction_addr": "0x1100", "function": "main", "package": "/usr/bin/crash",
                 "abs_path": "/src/main.c", "lineno": 3},
                {"instruction_addr": "0x1200", "function": "outer", "package": "/usr/bin/crash"},
                {"instruction_addr": "0x1200", "function": "inner", "package": "/usr/bin/crash",
                 "abs_path": "/src/a.h", "lineno": 9, "colno": 2},
                {"instruction_addr": "0x9999", "data": {"symbolicator_status": "unknown_image"}},
            ]}}]},
            "threads": {"values": [{"id": 1, "crashed": true}, {"id": 2, "name": "io"}]},
        }));
        let want = "\
Event abc

SIGSEGV: Segfault
  #0  0x0000000000009999  ??  [unknown_image]
  #1  0x0000000000001200  inner  /src/a.h:9:2  (inlined)  in crash +0x200
  #2  0x0000000000001200  outer  in crash +0x200
  #3  0x0000000000001100  main  /src/main.c:3  in crash +0x100

Modules
  crash  elf  d96f  debug: found
";
        assert_eq!(text, want);
    }

    #[test]
    fn jvm_frames_name_their_class_and_crash_threads_their_state() {
        let text = event(&json!({
            "platform": "java",
            "exception": {"values": [{"type": "Boom", "module": "org.app", "stacktrace": {"frames": [
                {"module": "org.app.Main", "function": "run", "filename": "Main.kt", "lineno": 4},
            ]}}]},
        }));
        assert_eq!(text, "org.app.Boom\n  #0  org.app.Main.run  Main.kt:4\n");
        let text = crash(&json!({
            "crashed": true, "crash_reason": "SIGSEGV / SEGV_MAPERR",
            "system_info": {"os_name": "Linux", "os_version": "6.1", "os_build": "", "cpu_arch": "x86_64"},
            "stacktraces": [{"thread_id": 7, "is_requesting": true, "frames": [
                {"instruction_addr": "0x10", "status": "missing", "trust": "context"}]}],
            "modules": [],
        }));
        assert_eq!(
            text,
            "Crash: SIGSEGV / SEGV_MAPERR\nSystem: Linux 6.1 x86_64\n\nThread 7 (crashed)\n  #0  0x0000000000000010  ??  (by context)  [missing]\n"
        );
    }
}
