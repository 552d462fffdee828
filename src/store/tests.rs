use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

const ELF_ID: &str = "crash"; // fixtures/native/elf, made by fixtures/native/build.sh

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(path),
    )
    .unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Store,
}

fn directory_store(edit: impl FnOnce(&mut StoreConfig)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let mut config = StoreConfig {
        backend: Some(StoreBackend::Filesystem { path: root.clone() }),
        ..StoreConfig::default()
    };
    edit(&mut config);
    let store = Store::open(&config, &dir.path().join("cache"), Duration::from_secs(1))
        .unwrap()
        .unwrap();
    Fixture {
        _dir: dir,
        root,
        store,
    }
}

async fn upload(
    store: &Store,
    ns: &Namespace,
    data: &[u8],
    name: &str,
) -> Result<Vec<Published>, Refused> {
    let mut file = store.staging_file().unwrap();
    file.write_all(data).unwrap();
    store.publish(ns, file, Some(name)).await
}

/// Files below `dir`, relative, sorted; the staging area left out.
fn tree(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|p| !p.starts_with("state/tmp/"))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_debug_file_lands_where_sort_puts_it_and_a_second_upload_is_already_stored() {
    let f = directory_store(|_| {});
    let debug = fixture("native/elf/crash.debug");
    let published = upload(&f.store, &Namespace::Team, &debug, "crash.debug")
        .await
        .unwrap();
    assert_eq!(published.len(), 1);
    let p = &published[0];
    assert_eq!(p.outcome, Outcome::Stored);
    assert_eq!(p.file_type, Some(FileType::ElfDebug));
    assert!(p.path.ends_with("/debuginfo"), "{}", p.path);
    assert_eq!(std::fs::read(f.root.join(&p.path)).unwrap(), debug);

    // The same tree `omnisym sort` writes for the same file.
    let archive = symbolic::debuginfo::Archive::parse(&debug).unwrap();
    let object = archive.objects().next().unwrap().unwrap();
    let described = layout::describe(&object, "crash.debug", None)
        .unwrap()
        .unwrap();
    assert_eq!(
        described.path(DirectoryLayoutType::Unified).as_deref(),
        Some(p.path.as_str())
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(f.root.join(format!("{}.meta", p.path))).unwrap())
            .unwrap();
    assert_eq!(meta["name"], "crash.debug");
    assert_eq!(meta["file_format"], "elf");

    let again = upload(&f.store, &Namespace::Team, &debug, "crash.debug")
        .await
        .unwrap();
    assert_eq!(again[0].outcome, Outcome::AlreadyStored);
    let records = std::fs::read_dir(f.root.join("state/records"))
        .unwrap()
        .count();
    assert_eq!(records, 1);
    // Nothing is left in staging: the upload was renamed into place.
    assert_eq!(
        std::fs::read_dir(f.root.join("state/tmp")).unwrap().count(),
        0
    );
}

#[tokio::test]
async fn a_better_file_replaces_a_worse_one_which_is_kept_aside() {
    let f = directory_store(|_| {});
    let stripped = fixture("native/elf/crash.stripped");
    let full = fixture("native/elf/crash");
    let first = upload(&f.store, &Namespace::Team, &stripped, ELF_ID)
        .await
        .unwrap();
    assert_eq!(first[0].outcome, Outcome::Stored);
    assert!(first[0].path.ends_with("/executable"));
    let second = upload(&f.store, &Namespace::Team, &full, ELF_ID)
        .await
        .unwrap();
    assert_eq!(second[0].outcome, Outcome::Replaced);
    assert_eq!(std::fs::read(f.root.join(&second[0].path)).unwrap(), full);
    // Without retention the stripped file is kept in the state area.
    let superseded: Vec<String> = tree(&f.root.join("state/superseded"));
    assert_eq!(superseded.len(), 1, "{superseded:?}");
    let kept = f.root.join("state/superseded").join(&superseded[0]);
    assert_eq!(std::fs::read(kept).unwrap(), stripped);

    // The stripped file again adds nothing: the full one stays.
    let third = upload(&f.store, &Namespace::Team, &stripped, ELF_ID)
        .await
        .unwrap();
    assert_eq!(third[0].outcome, Outcome::KeptExisting);
    assert_eq!(std::fs::read(f.root.join(&third[0].path)).unwrap(), full);
}

#[tokio::test]
async fn refused_uploads_publish_nothing() {
    let f = directory_store(|c| c.max_file_size = 10_000);
    let before = tree(&f.root);
    let refused = upload(&f.store, &Namespace::Team, b"just some text\n", "notes.txt")
        .await
        .unwrap_err();
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        refused.reason.contains("not a debug file"),
        "{}",
        refused.reason
    );
    let truncated = &fixture("native/elf/crash.debug")[..2000];
    let refused = upload(&f.store, &Namespace::Team, truncated, "crash.debug")
        .await
        .unwrap_err();
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{refused}"
    );
    let too_large = fixture("native/elf/crash");
    let refused = upload(&f.store, &Namespace::Team, &too_large, "crash")
        .await
        .unwrap_err();
    assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(refused.reason.contains("store.max_file_size"));
    assert_eq!(tree(&f.root), before);
    assert_eq!(
        std::fs::read_dir(f.root.join("state/tmp")).unwrap().count(),
        0
    );
}

#[tokio::test]
async fn a_proguard_mapping_is_named_by_its_uuid() {
    let f = directory_store(|_| {});
    let mapping = fixture("jvm/inline.txt");
    let uuid = proguard::ProguardMapping::new(&mapping).uuid();
    let published = upload(&f.store, &Namespace::Team, &mapping, "mapping.txt")
        .await
        .unwrap();
    let simple = uuid.as_simple().to_string();
    assert_eq!(
        published[0].path,
        format!("{}/{}/proguard", &simple[..2], &simple[2..])
    );
    assert_eq!(published[0].file_type, Some(FileType::Proguard));
}

#[tokio::test]
async fn scopes_have_their_own_namespace_and_sources() {
    let f = directory_store(|c| {
        c.scopes.insert("acme/web".into(), "42".into());
    });
    assert_eq!(
        f.store.namespace_of("acme", "web"),
        Namespace::Scope("42".into())
    );
    assert_eq!(f.store.namespace_of("acme", "app"), Namespace::Team);
    let ns = f.store.namespace_of("acme", "web");
    let published = upload(
        &f.store,
        &ns,
        &fixture("native/elf/crash.debug"),
        "crash.debug",
    )
    .await
    .unwrap();
    assert!(f.root.join("scopes/42").join(&published[0].path).is_file());
    assert!(!f.root.join(&published[0].path).exists());

    let ids = |scope: &str| -> Vec<String> {
        f.store
            .sources(&Scope::new(scope))
            .iter()
            .map(|s| s.id().to_string())
            .collect()
    };
    assert_eq!(ids("42"), ["omnisym:store:42", "omnisym:store"]);
    assert_eq!(ids("43"), ["omnisym:store"]);
    assert_eq!(ids("global"), ["omnisym:store"]);
    let sources = f.store.sources(&Scope::new("42"));
    let SourceConfig::Filesystem(scoped) = &sources[0] else {
        panic!("a directory store is a filesystem source")
    };
    assert_eq!(scoped.path, f.root.join("scopes/42"));
    assert!(!scoped.files.is_public);
    assert_eq!(scoped.files.layout.ty, DirectoryLayoutType::Unified);
    assert!(sources[1].files().is_public);
    assert!(sources[1].is_from_config_file());
}

#[tokio::test]
async fn state_paths_stay_in_the_state_area() {
    let f = directory_store(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let chunk = dir.path().join("chunk");
    std::fs::write(&chunk, b"chunk bytes").unwrap();
    f.store.state_put("chunks/ab/abcdef", &chunk).await.unwrap();
    assert_eq!(
        f.store.state_size("chunks/ab/abcdef").await.unwrap(),
        Some(11)
    );
    let mut dest = tempfile::NamedTempFile::new().unwrap();
    assert!(
        f.store
            .state_fetch("chunks/ab/abcdef", &mut dest)
            .await
            .unwrap()
    );
    assert_eq!(std::fs::read(dest.path()).unwrap(), b"chunk bytes");
    assert!(f.root.join("state/chunks/ab/abcdef").is_file());
    for evil in ["../x", "a/../../x", "/etc/passwd", "a\\b", "", "a//b", "."] {
        assert!(f.store.state_put(evil, &chunk).await.is_err(), "{evil:?}");
        assert!(f.store.state_size(evil).await.is_err(), "{evil:?}");
    }
    f.store.state_remove("chunks/ab/abcdef").await.unwrap();
    assert_eq!(f.store.state_size("chunks/ab/abcdef").await.unwrap(), None);
}

#[test]
fn tokens_grant_what_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        backend: Some(StoreBackend::Filesystem {
            path: dir.path().join("s"),
        }),
        tokens: vec![
            StoreToken {
                token: crate::sources::Secret::new("w"),
                access: Access::Write,
            },
            StoreToken {
                token: crate::sources::Secret::new("r"),
                access: Access::Read,
            },
        ],
        ..StoreConfig::default()
    };
    let store = Store::open(&config, dir.path(), Duration::from_secs(1))
        .unwrap()
        .unwrap();
    assert!(store.authorize(Some("w"), Access::Write));
    assert!(store.authorize(Some("w"), Access::Read));
    assert!(store.authorize(Some("r"), Access::Read));
    assert!(!store.authorize(Some("r"), Access::Write));
    assert!(!store.authorize(Some("x"), Access::Read));
    assert!(!store.authorize(None, Access::Read));
    assert!(
        Store::open(&StoreConfig::default(), dir.path(), Duration::from_secs(1))
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_replaced_or_arriving_file_gets_a_new_cache_identity() {
    let f = directory_store(|_| {});
    let source = f.store.sources(&Scope::Global).remove(0);
    let stripped = fixture("native/elf/crash.stripped");
    let path = {
        let archive = symbolic::debuginfo::Archive::parse(&stripped).unwrap();
        let object = archive.objects().next().unwrap().unwrap();
        layout::describe(&object, "crash", None)
            .unwrap()
            .unwrap()
            .path(DirectoryLayoutType::Unified)
            .unwrap()
    };
    let identity = || {
        crate::fetch::RemoteFile::new(source.clone(), path.clone())
            .cache_identity()
            .to_owned()
    };
    let absent = identity();
    upload(&f.store, &Namespace::Team, &stripped, "crash")
        .await
        .unwrap();
    let first = identity();
    assert_ne!(
        first, absent,
        "a miss must not stand for the file once it arrives"
    );
    assert_eq!(identity(), first, "an unchanged file keeps its cache entry");
    let replaced = upload(
        &f.store,
        &Namespace::Team,
        &fixture("native/elf/crash"),
        "crash",
    )
    .await
    .unwrap();
    assert_eq!(replaced[0].outcome, Outcome::Replaced);
    assert_ne!(
        identity(),
        first,
        "the replaced file's cache entry must not be read"
    );
}

#[test]
fn store_sources_come_first_and_requests_cannot_take_their_ids() {
    let f = directory_store(|_| {});
    let own: SourceConfig = serde_json::from_value(serde_json::json!(
        {"type": "http", "id": "omnisym:store", "url": "http://example.com/"}
    ))
    .unwrap();
    let other: SourceConfig = serde_json::from_value(serde_json::json!(
        {"type": "http", "id": "mine", "url": "http://example.com/"}
    ))
    .unwrap();
    let ids: Vec<String> = first_sources(Some(&f.store), &Scope::Global, &[own, other.clone()])
        .iter()
        .map(|s| format!("{}:{}", s.type_name(), s.id()))
        .collect();
    assert_eq!(ids, ["filesystem:omnisym:store", "http:mine"]);
    assert_eq!(first_sources(None, &Scope::Global, &[other]).len(), 1);
}

#[tokio::test]
async fn retention_removes_superseded_and_expired_files_a_bounded_number_at_a_time() {
    let f = directory_store(|_| {});
    upload(
        &f.store,
        &Namespace::Team,
        &fixture("native/elf/crash.stripped"),
        "crash",
    )
    .await
    .unwrap();
    upload(
        &f.store,
        &Namespace::Team,
        &fixture("native/elf/crash"),
        "crash",
    )
    .await
    .unwrap();
    upload(
        &f.store,
        &Namespace::Team,
        &fixture("native/elf/crash.debug"),
        "crash.debug",
    )
    .await
    .unwrap();
    let stored = |root: &Path| -> Vec<String> {
        tree(root)
            .into_iter()
            .filter(|p| !p.starts_with("state/records"))
            .collect()
    };
    let before = stored(&f.root);
    // Two stored files with their .meta, and the superseded one.
    assert_eq!(before.len(), 5, "{before:?}");
    let now = SystemTime::now();
    // Nothing is old yet: only the superseded file goes.
    let swept = retention::sweep(&f.root, Duration::from_secs(3600), 100, None, now);
    assert_eq!((swept.superseded, swept.expired), (1, 0));
    assert!(
        !stored(&f.root)
            .iter()
            .any(|p| p.starts_with("state/superseded"))
    );
    // A day later both files are past an hour's retention; one file per sweep.
    let later = now + Duration::from_secs(86400);
    let first = retention::sweep(&f.root, Duration::from_secs(3600), 1, None, later);
    assert_eq!((first.looked_at, first.expired), (1, 1));
    assert!(first.resume_after.is_some());
    let second = retention::sweep(
        &f.root,
        Duration::from_secs(3600),
        100,
        first.resume_after.as_deref(),
        later,
    );
    assert_eq!(second.expired, 1);
    let left: Vec<String> = stored(&f.root);
    assert!(left.is_empty(), "{left:?}");
}

/// A zip made by the test as sentry-cli makes an artifact bundle.
fn bundle(entries: &[(&str, &[u8])], manifest: serde_json::Value) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    zip.start_file("manifest.json", options).unwrap();
    zip.write_all(manifest.to_string().as_bytes()).unwrap();
    for (name, data) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[tokio::test]
async fn an_artifact_bundle_lands_where_the_js_lookup_asks_by_debug_id() {
    let f = directory_store(|_| {});
    let id = "5b65abfb-2338-4f0b-b3b9-64c8f734d43f";
    let manifest = serde_json::json!({"files": {
        "files/_/_/app.min.js": {"url": "~/app.min.js", "type": "minified_source",
            "headers": {"debug-id": id, "sourcemap": "app.min.js.map"}},
        "files/_/_/app.min.js.map": {"url": "~/app.min.js.map", "type": "source_map",
            "headers": {"debug-id": id}},
        "files/_/_/other.txt": {"url": "~/other.txt", "type": "source"},
    }});
    let data = bundle(
        &[
            (
                "files/_/_/app.min.js",
                b"function f(){}\n//# debugId=5b65abfb\n",
            ),
            ("files/_/_/app.min.js.map", b"{\"version\":3}"),
            ("files/_/_/other.txt", b"x"),
        ],
        manifest.clone(),
    );
    let mut staged = f.store.staging_file().unwrap();
    staged.write_all(&data).unwrap();
    let published = f
        .store
        .publish_artifact_bundle(&Namespace::Team, staged)
        .await
        .unwrap();
    assert_eq!(published.len(), 2);
    let debug_id: DebugId = id.parse().unwrap();
    let files = CommonSourceConfig {
        layout: DirectoryLayout {
            ty: DirectoryLayoutType::Unified,
            ..DirectoryLayout::default()
        },
        ..CommonSourceConfig::default()
    };
    for (kind, bytes) in [
        (
            "minified_source",
            &b"function f(){}\n//# debugId=5b65abfb\n"[..],
        ),
        ("source_map", &b"{\"version\":3}"[..]),
    ] {
        let path = crate::sources::js_artifact_path(&files, debug_id, kind).unwrap();
        assert_eq!(std::fs::read(f.root.join(&path)).unwrap(), bytes, "{path}");
    }

    // A bundle with one `..` entry is refused whole.
    let before = tree(&f.root);
    let evil = bundle(
        &[("files/_/_/app.min.js", b"x"), ("../escape.js", b"y")],
        manifest,
    );
    let mut staged = f.store.staging_file().unwrap();
    staged.write_all(&evil).unwrap();
    let refused = f
        .store
        .publish_artifact_bundle(&Namespace::Team, staged)
        .await
        .unwrap_err();
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.reason.contains("outside the bundle"),
        "{}",
        refused.reason
    );
    assert_eq!(tree(&f.root), before);
}
