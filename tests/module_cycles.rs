//! The layering `docs/architecture.md` promises, checked on the source text: no two
//! top-level modules of `src/` import each other (directly or around a circle), no two
//! files of one module do, the platform pipelines never import each other, the shared
//! core never imports a pipeline, and nothing below the top layer (the server and the
//! command-line tools) imports it; no module imports the command-line tools.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

const PIPELINES: &[&str] = &["native", "js", "jvm"];
/// The fronts: what `main.rs` starts. They may import everything below them.
const TOP: &[&str] = &["server", "cli"];
const CORE: &[&str] = &[
    "cache",
    "config",
    "error",
    "fetch",
    "lookup",
    "sources",
    "telemetry",
    "types",
    "units",
];

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

/// A file's code without its `#[cfg(test)]` part (tests may reach anywhere).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
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
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

fn top_level_graph(src: &Path) -> Graph {
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            modules.insert(name, rust_files(&path));
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

/// The files of one module directory (not `mod.rs`, which re-exports its children) and
/// which siblings each names through `super::` or `crate::<module>::`.
fn sibling_graph(module: &str, dir: &Path) -> Graph {
    let files: BTreeMap<String, PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .filter(|(name, _)| name != "mod")
        .collect();
    let mut graph = Graph::new();
    for (name, path) in &files {
        let text = code(path);
        let mut named = names_after(&text, "super");
        named.extend(names_after(&text, &format!("crate::{module}")));
        let edges = graph.entry(name.clone()).or_default();
        for other in named {
            if files.contains_key(&other) && other != *name {
                edges.insert(other);
            }
        }
    }
    graph
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
    for entry in std::fs::read_dir(src()).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            let module = path.file_name().unwrap().to_string_lossy().into_owned();
            if let Some(cycle) = find_cycle(&sibling_graph(&module, &path)) {
                panic!(
                    "files of {module}/ import each other: {}",
                    cycle.join(" -> ")
                );
            }
        }
    }
}

#[test]
fn pipelines_stand_side_by_side_on_the_core() {
    let graph = top_level_graph(&src());
    for (module, edges) in &graph {
        let pipeline = PIPELINES.contains(&module.as_str());
        let core = CORE.contains(&module.as_str());
        for target in edges {
            assert!(
                !(pipeline && PIPELINES.contains(&target.as_str())),
                "pipeline {module} imports pipeline {target}"
            );
            assert!(
                !(core && PIPELINES.contains(&target.as_str())),
                "core module {module} imports {target}"
            );
            let front = TOP.contains(&module.as_str());
            assert!(
                front || !TOP.contains(&target.as_str()),
                "{module} imports the front {target}"
            );
            assert!(target != "cli", "{module} imports the command-line tools");
        }
    }
}

#[test]
fn the_check_sees_cycles_and_group_imports() {
    let names = names_after(
        "use crate::{cache::X, fetch}; mycrate::no; crate::lookup::Y",
        "crate",
    );
    assert_eq!(names, ["cache", "fetch", "lookup"].map(String::from).into());
    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".to_owned()].into());
    graph.insert("b".into(), ["c".to_owned()].into());
    graph.insert("c".into(), ["a".to_owned()].into());
    assert_eq!(find_cycle(&graph).unwrap().len(), 4);
    graph.get_mut("c").unwrap().clear();
    assert!(find_cycle(&graph).is_none());
}
