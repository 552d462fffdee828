//! Writes an artifact bundle (as Sentry's tooling uploads them) of the JS fixture built
//! with a debug id, for the JS load script: `artifact_bundle OUT.zip`. The bundle is
//! written with symbolic's own writer, so it is what the server reads in production.

use std::fs::File;
use std::path::Path;

use symbolic::debuginfo::sourcebundle::{SourceBundleWriter, SourceFileInfo, SourceFileType};

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
    let mut writer = SourceBundleWriter::start(File::create(&out)?)?;
    for (name, ty) in [
        ("debugid.min.js", SourceFileType::MinifiedSource),
        ("debugid.min.js.map", SourceFileType::SourceMap),
    ] {
        let mut info = SourceFileInfo::new();
        info.set_ty(ty);
        info.set_url(format!("~/assets/{name}"));
        info.add_header("debug-id".into(), debug_id.clone());
        writer.add_file(
            format!("files/_/_/{name}"),
            File::open(dist.join(name))?,
            info,
        )?;
    }
    writer.finish()?;
    println!("{debug_id}");
    Ok(())
}
