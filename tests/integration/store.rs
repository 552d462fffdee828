//! The store as a source, end to end: files published through the store's API into a
//! directory store are what the real server (another process reading the same
//! directory) answers from, first, even for requests that send their own sources;
//! a scope's files answer only that scope; a better upload is what the next request
//! reads; cache cleanup leaves the store alone.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    Server, assert_elf_symbolicated, elf_debug_file, elf_request, files_under, run_cleanup,
};
use omnisym::store::{Namespace, Outcome, Store, StoreBackend, StoreConfig};

fn store_at(root: &Path, scopes: &[(&str, &str)]) -> Store {
    let config = StoreConfig {
        backend: Some(StoreBackend::Filesystem {
            path: root.to_owned(),
        }),
        scopes: scopes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..StoreConfig::default()
    };
    Store::open(&config, &root.join("unused-cache"), Duration::from_secs(1))
        .unwrap()
        .unwrap()
}

async fn publish(store: &Store, ns: &Namespace, file: &Path, name: &str) -> Outcome {
    let mut staged = store.staging_file().unwrap();
    staged.write_all(&std::fs::read(file).unwrap()).unwrap();
    let published = store.publish(ns, staged, Some(name)).await.unwrap();
    published[0].outcome
}

fn store_yaml(root: &Path, extra: &str) -> String {
    format!(
        "store:\n  backend:\n    type: filesystem\n    path: {}\n{extra}",
        root.display()
    )
}

/// A request naming a source of its own that has nothing.
fn own_sources() -> Value {
    json!([{"type": "http", "id": "elsewhere", "url": "http://127.0.0.1:9/"}])
}

#[tokio::test]
async fn the_store_answers_first_even_when_a_request_sends_its_own_sources() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = store_at(&root, &[]);
    let outcome = publish(&store, &Namespace::Team, &elf_debug_file(), "crash.debug").await;
    assert_eq!(outcome, Outcome::Stored);
    let server = Server::start(&store_yaml(&root, ""));
    let (status, response) = server
        .post("/symbolicate", &elf_request(own_sources()))
        .await;
    assert_eq!(status, 200);
    assert_elf_symbolicated(&response);
    let candidates = response["modules"][0]["candidates"].as_array().unwrap();
    assert_eq!(candidates[0]["source"], "omnisym:store", "{candidates:#?}");
}

#[tokio::test]
async fn a_scopes_files_never_answer_another_scope() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = store_at(&root, &[("acme/web", "42")]);
    let ns = store.namespace_of("acme", "web");
    assert_eq!(
        publish(&store, &ns, &elf_debug_file(), "crash.debug").await,
        Outcome::Stored
    );
    let server = Server::start(&store_yaml(&root, "  scopes:\n    acme/web: \"42\"\n"));
    let (_, other) = server
        .post("/symbolicate?scope=43", &elf_request(json!([])))
        .await;
    assert_eq!(other["modules"][0]["debug_status"], "missing", "{other:#}");
    let (_, team) = server.post("/symbolicate", &elf_request(json!([]))).await;
    assert_eq!(team["modules"][0]["debug_status"], "missing", "{team:#}");
    let (_, own) = server
        .post("/symbolicate?scope=42", &elf_request(json!([])))
        .await;
    assert_elf_symbolicated(&own);
}

/// gcc -g, then objcopy --strip-debug: the same build id, one with line info.
fn build_pair(dir: &Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let source = dir.join("better.c");
    std::fs::write(
        &source,
        "int add_them(int a, int b) {\n  int c = a * 3;\n  return c + b;\n}\nint main(int argc, char **argv) {\n  return add_them(argc, 2);\n}\n",
    )
    .unwrap();
    let full = dir.join("better");
    let stripped = dir.join("better.stripped");
    let gcc = Command::new("gcc")
        .args(["-g", "-O0", "-Wl,--build-id", "-o"])
        .arg(&full)
        .arg(&source)
        .status()
        .ok()?;
    assert!(gcc.success());
    let objcopy = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&full)
        .arg(&stripped)
        .status()
        .ok()?;
    assert!(objcopy.success());
    Some((full, stripped))
}

/// The module and the address of `add_them` in `binary`.
fn request_for(binary: &Path) -> Value {
    let data = std::fs::read(binary).unwrap();
    let object = symbolic::debuginfo::Object::parse(&data).unwrap();
    let symbol = object
        .symbols()
        .find(|s| s.name().is_some_and(|n| n == "add_them"))
        .unwrap();
    let base = 0x5555_0000_0000u64;
    json!({
        "sources": [],
        "modules": [{
            "type": "elf",
            "code_id": object.code_id().unwrap().as_str(),
            "debug_id": object.debug_id().to_string(),
            "code_file": "/usr/bin/better",
            "image_addr": format!("{base:#x}"),
            "image_size": 0x10000,
        }],
        "stacktraces": [{"frames": [{
            "instruction_addr": format!("{:#x}", base + symbol.address + 4),
            "adjust_instruction_addr": false,
        }]}],
    })
}

#[tokio::test]
async fn a_better_upload_is_what_the_next_request_reads() {
    let dir = tempfile::tempdir().unwrap();
    let Some((full, stripped)) = build_pair(dir.path()) else {
        panic!("gcc and objcopy are needed (Debian: gcc binutils)");
    };
    let root = dir.path().join("store");
    let store = store_at(&root, &[]);
    assert_eq!(
        publish(&store, &Namespace::Team, &stripped, "better").await,
        Outcome::Stored
    );
    let server = Server::start(&store_yaml(&root, ""));
    let request = request_for(&full);
    let (_, first) = server.post("/symbolicate", &request).await;
    let frame = &first["stacktraces"][0]["frames"][0];
    assert_eq!(frame["function"], "add_them", "{first:#}");
    assert!(frame.get("lineno").is_none_or(Value::is_null), "{frame}");

    assert_eq!(
        publish(&store, &Namespace::Team, &full, "better").await,
        Outcome::Replaced
    );
    let (_, second) = server.post("/symbolicate", &request).await;
    let frame = &second["stacktraces"][0]["frames"][0];
    assert_eq!(frame["function"], "add_them", "{second:#}");
    assert!(
        frame["lineno"]
            .as_u64()
            .is_some_and(|l| (1..=4).contains(&l)),
        "{frame}"
    );
    // The stripped one again adds nothing: the full one stays.
    assert_eq!(
        publish(&store, &Namespace::Team, &stripped, "better").await,
        Outcome::KeptExisting
    );
}

#[tokio::test]
async fn cache_cleanup_never_touches_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    // The store inside cache_dir, the worst place for it: still not cache.
    let root = cache_dir.join("store");
    let store = store_at(&root, &[]);
    publish(&store, &Namespace::Team, &elf_debug_file(), "crash.debug").await;
    let yaml = format!(
        "cache_dir: {}\ncaches:\n  max_disk_size: 1\n  downloaded:\n    max_unused_for: 0s\n  derived:\n    max_unused_for: 0s\n{}",
        cache_dir.display(),
        store_yaml(&root, "")
    );
    // A server fills the cache from the store, then cleanup runs over all of it.
    {
        let server = Server::start_in(dir.path(), &cache_dir, &store_yaml(&root, ""));
        let (_, response) = server.post("/symbolicate", &elf_request(json!([]))).await;
        assert_elf_symbolicated(&response);
    }
    let before = files_under(&root);
    assert!(
        before.iter().any(|p| p.ends_with("debuginfo")),
        "{before:?}"
    );
    let config = dir.path().join("cleanup.yml");
    std::fs::write(&config, yaml).unwrap();
    run_cleanup(&config, &[]);
    assert_eq!(files_under(&root), before);
    // Cleanup did run: the cache's own files went.
    let cached: Vec<_> = files_under(&cache_dir.join("objects"));
    assert!(cached.is_empty(), "{cached:?}");
}
