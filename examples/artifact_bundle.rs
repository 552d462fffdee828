//! Writes an artifact bundle (as Sentry's tooling uploads them) of the JS fixture built
//! with a debug id, for the JS load script: `artifact_bundle OUT.zip`, written by the
//! same writer as the tests' bundles (symbolic's own).

use std::path::Path;

use omnisym::js::bundle::{BundleEntry, write_bundle};
use symbolic::debuginfo::sourcebundle::SourceFileType;

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: artifact_bundle OUT.zip"))?;
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/js/dist");
    let minified = std::fs::read_to_string(dist.join("debugid.min.js"))?;
    let debug_id = minified
        .lines()
        .find_map(|l| l.strip_prefix("//# debugId="))
        .ok_or_else(|| anyhow::anyhow!("the fixture has no debugId comment"))?
        .trim()
        .to_owned();
    let read = |name: &str| std::fs::read_to_string(dist.join(name));
    let (minified, map) = (read("debugid.min.js")?, read("debugid.min.js.map")?);
    let headers = [("debug-id", debug_id.as_str())];
    let bundle = write_bundle(&[
        BundleEntry {
            url: "~/assets/debugid.min.js",
            ty: SourceFileType::MinifiedSource,
            contents: &minified,
            headers: &headers,
        },
        BundleEntry {
            url: "~/assets/debugid.min.js.map",
            ty: SourceFileType::SourceMap,
            contents: &map,
            headers: &headers,
        },
    ])?;
    std::fs::write(&out, bundle.as_slice())?;
    println!("{debug_id}");
    Ok(())
}
