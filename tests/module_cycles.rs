//! The layering `docs/architecture.md` promises, checked on the source text: every
//! top-level module of `src/` sits in one layer of [`LAYERS`], the module map's rows
//! from top to bottom, and imports only modules of the layers below its own; so no two
//! modules of one layer import each other (the platform pipelines, the fronts), the
//! core never imports a pipeline or an upper-layer module, and nothing imports the
//! fronts. No two files of one module import each other (at any depth, a child
//! module's directory counting as one file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The fronts: what `main.rs` starts.
const FRONTS: &[&str] = &["cli", "server"];
/// What the fronts run the pipelines with, each row importing only the rows below it: a
/// fleet's poll forwarding; the engine that builds the pipelines' services, and the
/// request service (ids, cap, polling).
const UPPER: &[&[&str]] = &[&["fleet"], &["engine", "service"]];
const PIPELINES: &[&str] = &["native", "js", "jvm"];
/// The modules every pipeline stands on, each row importing only the rows below it.
const CORE: &[&[&str]] = &[
    &["config"],
    &["lookup"],
    &["store"],
    &["cache", "fetch"],
    &["objstore"],
    &["types"],
    &["error"],
    &["sources", "telemetry", "units"],
];

/// Every layer, top to bottom: a module imports only modules of later layers.
fn layers() -> Vec<Vec<&'static str>> {
    let mut layers = vec![FRONTS.to_vec()];
    layers.extend(UPPER.iter().map(|row| row.to_vec()));
    layers.push(PIPELINES.to_vec());
    layers.extend(CORE.iter().map(|row| row.to_vec()));
    layers
}

/// The layer `module` is in, counted from the top.
fn layer_of(module: &str) -> Option<usize> {
    layers().iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// A file's code without its test items: every item under `#[cfg(test)]` (a test
/// module, inline or in its own file, or a test-only function or `use`) is cut, and
/// nothing else, since tests may reach anywhere but the code after them may not.
fn code(path: &Path) -> String {
    strip_test_items(&std::fs::read_to_string(path).unwrap())
}

const TEST_ATTRIBUTE: &str = "#[cfg(test)]";

fn strip_test_items(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(TEST_ATTRIBUTE) {
        out.push_str(&rest[..at]);
        rest = &rest[at + TEST_ATTRIBUTE.len()..];
        rest = &rest[item_end(rest)..];
    }
    out.push_str(rest);
    out
}

/// Where the item starting in `text` ends: after its `;` or its closing brace, with
/// braces and semicolons inside strings, chars and comments not counted.
fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += text[i..].find('\n').unwrap_or(text.len() - i);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += text[i..].find("*/").map_or(text.len() - i, |end| end + 2);
                continue;
            }
            b'r' if matches!(bytes.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')) =>
            {
                let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
                if bytes.get(i + 1 + hashes) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let body = i + 2 + hashes;
                    i = body
                        + text[body..]
                            .find(&close)
                            .map_or(text.len() - body, |end| end + close.len());
                    continue;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A char literal ('x', '\n', '{'); a lifetime ('a) has no closing quote.
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                i += 2 + text[i + 2..].find('\'').unwrap_or(text.len() - i - 2);
            }
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    text.len()
}

/// The files that only tests compile: those declared `#[cfg(test)] mod name;`.
fn test_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        // `mod.rs` and `lib.rs` declare children beside them; `foo.rs` in `foo/`.
        let stem = file.file_stem().unwrap();
        let dir = if stem == "mod" || stem == "lib" || stem == "main" {
            file.parent().unwrap().to_owned()
        } else {
            file.with_extension("")
        };
        let mut rest = text.as_str();
        while let Some(at) = rest.find(TEST_ATTRIBUTE) {
            rest = &rest[at + TEST_ATTRIBUTE.len()..];
            let item = &rest[..item_end(rest)];
            let words: Vec<&str> = item.split_whitespace().collect();
            if let [.., "mod", name] = words.as_slice()
                && let Some(name) = name.strip_suffix(';')
            {
                out.insert(dir.join(format!("{name}.rs")));
                out.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    out
}

/// Every `PREFIX::name` in `text`, also inside `PREFIX::{a, b::c}` groups.
fn names_after(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let needle = format!("{prefix}::");
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + needle.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            out.extend(top_level_parts(group).into_iter().map(leading_name));
        } else {
            out.insert(leading_name(rest));
        }
        out.remove("");
    }
    out
}

fn leading_name(text: &str) -> String {
    text.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The comma-separated parts of a `{...}` group whose `{` was just read, up to its
/// matching `}`: nested groups stay inside their part.
fn top_level_parts(group: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                parts.push(&group[start..at]);
                return parts;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&group[start..]);
    parts
}

fn top_level_graph(src: &Path) -> Graph {
    let tests = test_files(&rust_files(src));
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let files = rust_files(&path).into_iter().filter(|f| !tests.contains(f));
            modules.insert(name, files.collect());
        } else if name != "main" && name != "lib" && path.extension().is_some_and(|e| e == "rs") {
            modules.insert(name, vec![path]);
        }
    }
    let mut graph = Graph::new();
    for (module, files) in &modules {
        let edges = graph.entry(module.clone()).or_default();
        for file in files {
            for name in names_after(&code(file), "crate") {
                if modules.contains_key(&name) && name != *module {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

/// The module path of a file below `src`: `js/lookup/mod.rs` is `js::lookup`,
/// `js/lookup/files.rs` is `js::lookup::files`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let mut path: Vec<String> = file
        .strip_prefix(src)
        .unwrap()
        .with_extension("")
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The children of one module directory, files and subdirectories (not `mod.rs`, which
/// re-exports them), and which siblings each names: through as many `super::` as lead
/// back to this directory, or through `crate::<module>::`. A subdirectory is one node,
/// its files together, so that a child module cannot hide a cycle with its siblings.
fn sibling_graph(src: &Path, dir: &Path) -> Graph {
    let module = module_path(src, &dir.join("mod.rs"));
    let tests = test_files(&rust_files(dir));
    let mut children: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for path in std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()) {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let files: Vec<PathBuf> = rust_files(&path)
                .into_iter()
                .filter(|f| !tests.contains(f))
                .collect();
            if !files.is_empty() {
                children.insert(name, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !tests.contains(&path)
            && name != "mod"
        {
            children.insert(name, vec![path]);
        }
    }
    let crate_prefix = format!("crate::{}", module.join("::"));
    let mut graph = Graph::new();
    for (name, files) in &children {
        let edges = graph.entry(name.clone()).or_default();
        for file in files {
            let text = code(file);
            let depth = module_path(src, file).len() - module.len();
            let mut named = names_after(&text, &vec!["super"; depth].join("::"));
            named.extend(names_after(&text, &crate_prefix));
            for other in named {
                if children.contains_key(&other) && other != *name {
                    edges.insert(other);
                }
            }
        }
    }
    graph
}

/// Every directory below `dir`, at any depth.
fn module_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for path in std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()) {
        if path.is_dir() {
            out.extend(module_dirs(&path));
            out.push(path);
        }
    }
    out
}

/// One cycle of `graph`, if it has any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = top_level_graph(&src());
    assert!(graph.contains_key("lookup") && graph.contains_key("native"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "top-level modules import each other: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn files_within_a_module_form_no_cycle() {
    let src = src();
    for dir in module_dirs(&src) {
        if let Some(cycle) = find_cycle(&sibling_graph(&src, &dir)) {
            let module = module_path(&src, &dir.join("mod.rs")).join("::");
            panic!(
                "files of {module} import each other: {}",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn a_child_module_is_one_node_among_its_siblings() {
    let src = src();
    let js = sibling_graph(&src, &src.join("js"));
    // `symbolicate.rs` names `super::lookup`; `lookup/request.rs` names
    // `crate::js::bundle`, and `lookup/mod.rs` `super::discovery`.
    assert!(js["symbolicate"].contains("lookup"), "{js:?}");
    assert!(js["lookup"].contains("bundle"), "{js:?}");
    assert!(js["lookup"].contains("discovery"), "{js:?}");
    // Inside it, `super::` names its own children.
    let lookup = sibling_graph(&src, &src.join("js/lookup"));
    assert!(lookup["request"].contains("files"), "{lookup:?}");
}

/// Why `module` may not import `target`, if it may not.
fn layering_fault(module: &str, target: &str) -> Option<String> {
    let (Some(from), Some(to)) = (layer_of(module), layer_of(target)) else {
        return Some(format!(
            "{module} -> {target}: every module needs a layer in tests/module_cycles.rs"
        ));
    };
    let core = |m| CORE.iter().any(|row| row.contains(&m));
    let upper = |m| FRONTS.contains(&m) || UPPER.iter().any(|row| row.contains(&m));
    if core(module) && upper(target) {
        return Some(format!(
            "core module {module} imports the upper-layer module {target}"
        ));
    }
    if core(module) && PIPELINES.contains(&target) {
        return Some(format!(
            "core module {module} imports the pipeline {target}"
        ));
    }
    if PIPELINES.contains(&module) && PIPELINES.contains(&target) {
        return Some(format!("pipeline {module} imports pipeline {target}"));
    }
    if FRONTS.contains(&target) {
        return Some(format!("{module} imports the front {target}"));
    }
    (to <= from).then(|| format!("{module} imports {target}, which is not below it"))
}

#[test]
fn every_module_imports_only_layers_below_its_own() {
    let graph = top_level_graph(&src());
    let mut faults = Vec::new();
    for (module, edges) in &graph {
        if layer_of(module).is_none() {
            faults.push(format!("{module} is in no layer of tests/module_cycles.rs"));
        }
        faults.extend(
            edges
                .iter()
                .filter_map(|target| layering_fault(module, target)),
        );
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn the_layering_check_names_what_it_refuses() {
    let fault = |module, target| layering_fault(module, target).unwrap_or_default();
    assert!(fault("config", "fleet").contains("core module config imports the upper-layer"));
    assert!(fault("cache", "service").contains("upper-layer"));
    assert!(fault("lookup", "native").contains("imports the pipeline native"));
    assert!(fault("js", "native").contains("pipeline js imports pipeline native"));
    assert!(fault("cli", "server").contains("imports the front server"));
    assert!(fault("cache", "fetch").contains("not below it"));
    assert!(fault("fetch", "lookup").contains("not below it"));
    assert!(fault("cache", "nowhere").contains("needs a layer"));
    assert_eq!(layering_fault("native", "cache"), None);
    assert_eq!(layering_fault("js", "fetch"), None);
    assert_eq!(layering_fault("server", "fleet"), None);
    assert_eq!(layering_fault("cache", "objstore"), None);
}

#[test]
fn the_check_sees_cycles_and_group_imports() {
    let names = names_after(
        "use crate::{cache::X, fetch}; mycrate::no; crate::lookup::Y",
        "crate",
    );
    assert_eq!(names, ["cache", "fetch", "lookup"].map(String::from).into());
    let nested = names_after(
        "use crate::{cache::{A, B}, fetch, sources::{self}};",
        "crate",
    );
    assert_eq!(
        nested,
        ["cache", "fetch", "sources"].map(String::from).into()
    );
    // Only the test items go: what follows them is still code.
    let text = "use a;\n#[cfg(test)]\nmod tests;\nuse crate::b;\n#[cfg(test)]\nmod t {\n    \
        fn f() { let _ = \"}\"; let _ = '{'; let _: &'static str = r#\"}\"#; }\n}\n\
        use crate::c; // }\n#[cfg(test)]\nfn g() {}\nuse crate::d;\n";
    let kept = strip_test_items(text);
    assert_eq!(
        names_after(&kept, "crate"),
        ["b", "c", "d"].map(String::from).into(),
        "{kept}"
    );
    assert!(!kept.contains("mod t"), "{kept}");
    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".to_owned()].into());
    graph.insert("b".into(), ["c".to_owned()].into());
    graph.insert("c".into(), ["a".to_owned()].into());
    assert_eq!(find_cycle(&graph).unwrap().len(), 4);
    graph.get_mut("c").unwrap().clear();
    assert!(find_cycle(&graph).is_none());
}
