//! Bundles: the name an import is recorded under (`-b`, or with `--multiple-bundles`
//! each input's file name made safe), and the index written to `bundles/<id>`: the
//! bundle's name, when it was written and the unified ids of the files it holds, as
//! symsorter writes them so that tools which prune old imports read them unchanged.

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::Serialize;

/// Characters a bundle id keeps; every run of others becomes one `_`, and `_` at
/// either end goes.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | ',' | '+' | '-')
}

/// A safe bundle id from any text (a directory name, for `--multiple-bundles`).
pub fn make_bundle_id(input: &str) -> String {
    let mut id = String::with_capacity(input.len());
    let mut in_run = false;
    for c in input.chars() {
        if allowed(c) {
            id.push(c);
            in_run = false;
        } else if !in_run {
            id.push('_');
            in_run = true;
        }
    }
    id.trim_matches('_').to_owned()
}

/// Whether `-b` names a bundle as it would be written (no character replaced), and as
/// a plain file name: `bundles/<id>` and `refs/<id>` are files, and `.` or `..` (or an
/// empty name) would make them the folder itself or its parent.
pub fn is_bundle_id(input: &str) -> bool {
    make_bundle_id(input) == input && !input.chars().all(|c| c == '.')
}

/// The bundle `--multiple-bundles` names after `input`: its file name made safe, that
/// of the folder it resolves to for `.` and `..`.
pub fn bundle_id_of(input: &Path) -> String {
    let name = match input.file_name() {
        Some(name) => Some(name.to_owned()),
        None => std::fs::canonicalize(input)
            .ok()
            .and_then(|path| path.file_name().map(ToOwned::to_owned)),
    };
    make_bundle_id(&name.unwrap_or_default().to_string_lossy())
}

#[derive(Serialize)]
struct BundleIndex<'a> {
    name: &'a str,
    timestamp: String,
    debug_ids: &'a [String],
}

/// Writes `root/bundles/<bundle_id>`.
pub fn write_index(root: &Path, bundle_id: &str, debug_ids: &[String]) -> Result<()> {
    let dir = root.join("bundles");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let index = BundleIndex {
        name: bundle_id,
        timestamp: timestamp(SystemTime::now()),
        debug_ids,
    };
    std::fs::write(dir.join(bundle_id), serde_json::to_vec(&index)?)?;
    Ok(())
}

/// RFC 3339 in UTC with as many fraction digits as the time needs in groups of three
/// (none, milli, micro or nano), the way symsorter's timestamps read (chrono's own).
fn timestamp(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bundle_ids_are_made_safe() {
        assert_eq!(make_bundle_id("10.3_ABCD"), "10.3_ABCD");
        assert_eq!(make_bundle_id("10.3.*"), "10.3.");
        assert_eq!(
            make_bundle_id("iOS 17.0 (21A329) arm64e"),
            "iOS_17.0_21A329_arm64e"
        );
        assert_eq!(make_bundle_id("__a//b__"), "a_b");
        assert_eq!(make_bundle_id("ü"), "");
        assert!(is_bundle_id("10.3_ABCD"));
        assert!(is_bundle_id("++lyra+main-CL-12345"));
        assert!(!is_bundle_id("10.3.*"));
        assert!(!is_bundle_id("../x"));
        assert!(!is_bundle_id("_x"));
        for not_a_name in ["", ".", "..", "..."] {
            assert!(!is_bundle_id(not_a_name), "{not_a_name:?}");
        }
        assert!(is_bundle_id(".hidden"));
        assert!(is_bundle_id("1.0"));
    }

    #[test]
    fn multiple_bundles_name_dot_after_the_folder_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("iOS 17.0");
        std::fs::create_dir(&inner).unwrap();
        assert_eq!(bundle_id_of(&inner), "iOS_17.0");
        assert_eq!(bundle_id_of(&inner.join(".")), "iOS_17.0");
        assert_eq!(bundle_id_of(&inner.join("x/..")), "");
        assert_eq!(bundle_id_of(&inner.join("..")), bundle_id_of(dir.path()));
    }

    #[test]
    fn timestamps_keep_the_digits_they_need() {
        let at = |secs, nanos| SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
        assert_eq!(timestamp(at(1_700_000_000, 0)), "2023-11-14T22:13:20Z");
        assert_eq!(
            timestamp(at(1_700_000_000, 120_000_000)),
            "2023-11-14T22:13:20.120Z"
        );
        assert_eq!(
            timestamp(at(1_700_000_000, 5_000)),
            "2023-11-14T22:13:20.000005Z"
        );
        assert_eq!(
            timestamp(at(1_700_000_000, 7)),
            "2023-11-14T22:13:20.000000007Z"
        );
    }

    #[test]
    fn the_index_has_symsorters_fields() {
        let dir = tempfile::tempdir().unwrap();
        write_index(dir.path(), "b1", &["abc".into(), "def".into()]).unwrap();
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("bundles/b1")).unwrap()).unwrap();
        assert_eq!(index["name"], "b1");
        assert_eq!(index["debug_ids"], serde_json::json!(["abc", "def"]));
        let timestamp = index["timestamp"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(timestamp).is_ok(), "{timestamp}");
        assert_eq!(index.as_object().unwrap().len(), 3);
    }
}
