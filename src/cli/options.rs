//! Symbol sources named on the command line: `--symbols DIR` (a filesystem source),
//! `--source URL` (an HTTP symbol server) and `--layout` for both.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use url::Url;

use super::event::Pipeline;
use crate::sources::{
    CommonSourceConfig, DirectoryLayout, DirectoryLayoutType, FilesystemSourceConfig,
    HttpSourceConfig, SourceConfig, SourceId,
};

#[derive(Args, Debug, Default, Clone)]
pub struct SourceArgs {
    /// A directory of debug files, used as a filesystem source. Repeatable.
    #[arg(long = "symbols", value_name = "DIR")]
    pub symbols: Vec<PathBuf>,
    /// An HTTP symbol server. Repeatable.
    #[arg(long = "source", value_name = "URL")]
    pub source: Vec<Url>,
    /// How --symbols and --source lay out their files. Default: native for native
    /// debug files; unified for JavaScript and JVM files, which have no other layout
    /// outside Sentry.
    #[arg(long, value_name = "TYPE", value_enum)]
    pub layout: Option<DirectoryLayoutType>,
}

impl SourceArgs {
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty() && self.source.is_empty()
    }

    /// The sources the options name, for requests of `pipeline`. Directories are made
    /// absolute, since a server may read them from another working directory.
    pub fn sources(&self, pipeline: Pipeline) -> anyhow::Result<Vec<SourceConfig>> {
        let layout = self.layout.unwrap_or(match pipeline {
            Pipeline::Native => DirectoryLayoutType::Native,
            Pipeline::Js | Pipeline::Jvm => DirectoryLayoutType::Unified,
        });
        let files = CommonSourceConfig {
            layout: DirectoryLayout {
                ty: layout,
                ..DirectoryLayout::default()
            },
            ..CommonSourceConfig::default()
        };
        let mut sources = Vec::new();
        for (n, dir) in self.symbols.iter().enumerate() {
            let path = std::fs::canonicalize(dir)
                .with_context(|| format!("--symbols {}", dir.display()))?;
            if !path.is_dir() {
                bail!("--symbols {}: not a directory", dir.display());
            }
            sources.push(SourceConfig::Filesystem(Arc::new(FilesystemSourceConfig {
                id: SourceId::new(format!("cli:symbols:{n}")),
                path,
                files: files.clone(),
                digests: Default::default(),
            })));
        }
        for (n, url) in self.source.iter().enumerate() {
            if !matches!(url.scheme(), "http" | "https") {
                bail!("--source {url}: not an http(s) URL");
            }
            sources.push(SourceConfig::Http(Arc::new(HttpSourceConfig {
                id: SourceId::new(format!("cli:source:{n}")),
                url: url.clone(),
                headers: BTreeMap::new(),
                files: files.clone(),
                accept_invalid_certs: false,
                digests: Default::default(),
            })));
        }
        Ok(sources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_default_per_pipeline_and_can_be_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let mut args = SourceArgs {
            symbols: vec![dir.path().to_owned()],
            source: vec!["http://symbols.example/store".parse().unwrap()],
            layout: None,
        };
        let layout = |s: &SourceConfig| s.files().layout.ty;
        let native = args.sources(Pipeline::Native).unwrap();
        assert_eq!(native.len(), 2);
        assert!(
            native
                .iter()
                .all(|s| layout(s) == DirectoryLayoutType::Native)
        );
        let js = args.sources(Pipeline::Js).unwrap();
        assert!(js.iter().all(|s| layout(s) == DirectoryLayoutType::Unified));
        args.layout = Some(parse_layout("symstore").unwrap());
        let jvm = args.sources(Pipeline::Jvm).unwrap();
        assert!(
            jvm.iter()
                .all(|s| layout(s) == DirectoryLayoutType::Symstore)
        );
        assert_eq!(jvm[0].id().as_str(), "cli:symbols:0");
        assert_eq!(jvm[1].id().as_str(), "cli:source:0");
    }

    /// The options alone, as a command line parses them.
    #[derive(clap::Parser)]
    struct SymbolicateArgsProbe {
        #[command(flatten)]
        _sources: SourceArgs,
    }

    /// The layout as the command line reads it, by the names configs use.
    fn parse_layout(name: &str) -> Result<DirectoryLayoutType, String> {
        <DirectoryLayoutType as clap::ValueEnum>::from_str(name, false)
    }

    #[test]
    fn layouts_have_the_names_configs_use() {
        for layout in <DirectoryLayoutType as clap::ValueEnum>::value_variants() {
            let name = clap::ValueEnum::to_possible_value(layout).unwrap();
            let from_config: DirectoryLayoutType =
                serde_json::from_value(serde_json::json!(name.get_name())).unwrap();
            assert_eq!(from_config, *layout);
        }
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        assert!(parse_layout("flat").is_err());
        let err =
            <SymbolicateArgsProbe as clap::Parser>::try_parse_from(["probe", "--layout", "flat"])
                .err()
                .unwrap()
                .to_string();
        assert!(
            err.contains("unified") && err.contains("symstore_index2"),
            "{err}"
        );
        let args = SourceArgs {
            symbols: vec!["/no/such/dir".into()],
            ..SourceArgs::default()
        };
        let err = args.sources(Pipeline::Native).unwrap_err();
        assert!(format!("{err:#}").contains("/no/such/dir"), "{err:#}");
        let args = SourceArgs {
            source: vec!["ftp://symbols.example/".parse().unwrap()],
            ..SourceArgs::default()
        };
        assert!(args.sources(Pipeline::Native).is_err());
    }
}
