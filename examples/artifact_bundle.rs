//! Writes an artifact bundle (as Sentry's tooling uploads them), by the same writer as
//! the tests' bundles (symbolic's own), and prints its debug id:
//!
//! - `artifact_bundle OUT.zip`: the JS fixture built with a debug id, for the JS load
//!   script;
//! - `artifact_bundle OUT.zip MINIFIED.js MAP`: any minified file with a
//!   `//# debugId=` comment and its source map (the cold JS benchmark's large ones).
//!
//! Both files are stored under `~/assets/` and their own file names.

use std::path::{Path, PathBuf};

use omnisym::js::bundle::{BundleEntry, write_bundle};
use symbolic::debuginfo::sourcebundle::SourceFileType;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/js/dist");
    let (out, minified_path, map_path) = match args.as_slice() {
        [out] => (
            out,
            dist.join("debugid.min.js"),
            dist.join("debugid.min.js.map"),
        ),
        [out, minified, map] => (out, PathBuf::from(minified), PathBuf::from(map)),
        _ => anyhow::bail!("usage: artifact_bundle OUT.zip [MINIFIED.js MAP]"),
    };
    let minified = std::fs::read_to_string(&minified_path)?;
    let map = std::fs::read_to_string(&map_path)?;
    let debug_id = minified
        .lines()
        .find_map(|l| l.strip_prefix("//# debugId="))
        .ok_or_else(|| anyhow::anyhow!("{} has no debugId comment", minified_path.display()))?
        .trim()
        .to_owned();
    let url = |path: &Path| {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        format!("~/assets/{name}")
    };
    let (minified_url, map_url) = (url(&minified_path), url(&map_path));
    let headers = [("debug-id", debug_id.as_str())];
    let bundle = write_bundle(&[
        BundleEntry {
            url: &minified_url,
            ty: SourceFileType::MinifiedSource,
            contents: &minified,
            headers: &headers,
        },
        BundleEntry {
            url: &map_url,
            ty: SourceFileType::SourceMap,
            contents: &map,
            headers: &headers,
        },
    ])?;
    std::fs::write(out, bundle.as_slice())?;
    println!("{debug_id}");
    Ok(())
}
