//! sentry-cli's artifact bundles: a zip with a `manifest.json` that lists each file's
//! `type` (`minified_source`, `source_map`, …) and `headers` (`debug-id`). Each minified
//! source and source map with a debug id is taken out, within the bounds on entries,
//! sizes and inflation, into its own staging file; the bundle is refused whole (nothing
//! published) on an entry that names `..`, an absolute path or a backslash, on a
//! manifest it cannot read, or past a bound.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use http::StatusCode;
use serde::Deserialize;
use symbolic::common::DebugId;
use tempfile::NamedTempFile;

use super::Refused;
use crate::sources::{CommonSourceConfig, DirectoryLayout, DirectoryLayoutType, js_artifact_path};

/// The manifest is JSON naming every file: generous, but not unbounded.
const MAX_MANIFEST_SIZE: u64 = 64 << 20;

/// The bounds of one bundle.
pub struct Bounds {
    pub max_entries: usize,
    /// Of one entry, inflated.
    pub max_entry_size: u64,
    /// Inflated over compressed size, for entries past 1 MiB.
    pub max_ratio: u64,
}

/// One artifact taken out of a bundle, waiting to be published.
pub struct Artifact {
    /// Its path in a namespace (the unified layout's JS place).
    pub path: String,
    pub debug_id: DebugId,
    pub file: NamedTempFile,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    files: BTreeMap<String, ManifestFile>,
}

#[derive(Deserialize)]
struct ManifestFile {
    #[serde(default, rename = "type")]
    ty: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

fn bad(reason: impl Into<String>) -> Refused {
    Refused {
        status: StatusCode::BAD_REQUEST,
        reason: reason.into(),
    }
}

/// Whether a zip entry's name stays inside the folder it would be unpacked in.
fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.contains('\\')
        && !name.contains(char::is_control)
        && !name.split('/').any(|s| s == "..")
        && !(name.len() > 1 && name.as_bytes()[1] == b':')
}

fn unified() -> CommonSourceConfig {
    CommonSourceConfig {
        layout: DirectoryLayout {
            ty: DirectoryLayoutType::Unified,
            ..DirectoryLayout::default()
        },
        ..CommonSourceConfig::default()
    }
}

/// Copies at most `limit` bytes of `entry` to `out`; an error past it.
fn copy_bounded(
    entry: &mut impl Read,
    out: &mut impl Write,
    limit: u64,
    name: &str,
) -> Result<u64, Refused> {
    let copied = std::io::copy(&mut entry.take(limit + 1), out)
        .map_err(|e| bad(format!("bundle entry {name} cannot be read: {e}")))?;
    if copied > limit {
        return Err(Refused {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            reason: format!("bundle entry {name} inflates past {limit} bytes"),
        });
    }
    Ok(copied)
}

/// Every minified source and source map with a debug id in the bundle at `bundle`,
/// each in a staging file made by `staging`.
pub fn unpack(
    bundle: &Path,
    bounds: &Bounds,
    staging: impl Fn() -> std::io::Result<NamedTempFile>,
) -> Result<Vec<Artifact>, Refused> {
    let file =
        std::fs::File::open(bundle).map_err(|e| bad(format!("cannot read the bundle: {e}")))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| {
        bad(format!(
            "not a zip archive (an artifact bundle is one): {e}"
        ))
    })?;
    if zip.len() > bounds.max_entries {
        return Err(bad(format!(
            "the bundle has {} entries, more than store.max_bundle_entries ({})",
            zip.len(),
            bounds.max_entries
        )));
    }
    for index in 0..zip.len() {
        let entry = zip
            .by_index_raw(index)
            .map_err(|e| bad(format!("malformed zip entry: {e}")))?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        if !is_safe_name(&name) {
            return Err(bad(format!(
                "bundle entry {name:?} names a path outside the bundle (`..`, absolute or backslash)"
            )));
        }
    }
    let manifest: Manifest = {
        let mut entry = zip
            .by_name("manifest.json")
            .map_err(|_| bad("the bundle has no manifest.json"))?;
        let mut text = Vec::new();
        copy_bounded(&mut entry, &mut text, MAX_MANIFEST_SIZE, "manifest.json")?;
        serde_json::from_slice(&text).map_err(|e| bad(format!("manifest.json: {e}")))?
    };
    let files = unified();
    let mut out = Vec::new();
    for (name, listed) in &manifest.files {
        let kind = match listed.ty.as_deref() {
            Some(kind @ ("minified_source" | "source_map")) => kind,
            _ => continue,
        };
        let Some(debug_id) = listed
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("debug-id") || k.eq_ignore_ascii_case("debug_id"))
            .map(|(_, v)| v)
        else {
            continue;
        };
        let debug_id: DebugId = debug_id.parse().map_err(|_| {
            bad(format!(
                "manifest.json: {name}: `{debug_id}` is not a debug id"
            ))
        })?;
        let mut entry = zip.by_name(name).map_err(|_| {
            bad(format!(
                "manifest.json lists {name}, which the bundle lacks"
            ))
        })?;
        let (size, compressed) = (entry.size(), entry.compressed_size());
        if size > bounds.max_entry_size {
            return Err(Refused {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                reason: format!(
                    "bundle entry {name} is {size} bytes, more than store.max_file_size ({})",
                    bounds.max_entry_size
                ),
            });
        }
        // The ratio is checked on what the entry claims and on what it inflates to.
        let ratio_limit = if compressed > 0 {
            compressed.saturating_mul(bounds.max_ratio).max(1 << 20)
        } else {
            1 << 20
        };
        let limit = bounds.max_entry_size.min(ratio_limit);
        let mut staged = staging().map_err(|e| bad(format!("cannot stage {name}: {e}")))?;
        copy_bounded(&mut entry, staged.as_file_mut(), limit, name)?;
        let path = js_artifact_path(&files, debug_id, kind)
            .expect("the unified layout has a place for every debug id");
        out.push(Artifact {
            path,
            debug_id,
            file: staged,
        });
    }
    if out.is_empty() {
        return Err(Refused {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            reason: "the bundle holds no minified source or source map with a debug id".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_stay_inside() {
        for ok in ["manifest.json", "files/_/_/app.min.js", "a/b..c"] {
            assert!(is_safe_name(ok), "{ok}");
        }
        for evil in ["../x", "a/../../x", "/etc/passwd", "a\\b", "C:x", ""] {
            assert!(!is_safe_name(evil), "{evil}");
        }
    }
}
