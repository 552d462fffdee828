//! `omnisym symbolicate FILE`: the pipelines' services the server runs (the engine),
//! built in-process from a config, run on one crash file or stored event, without HTTP
//! or the server's state in between.
//!
//! Without `--config` the embedded defaults apply, with two changes for a program a
//! person runs on their own machine: downloads are cached in the per-user cache
//! directory (`$XDG_CACHE_HOME/omnisym`, else `~/.cache/omnisym`, else a temporary
//! directory removed on exit), and sources may be on reserved addresses (a symbol
//! server on localhost or the LAN is what a developer has), as upstream's symbolicli
//! allows. With `--config` the file decides both, as it does for `omnisym run`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;

use super::event::{self, Pipeline, Plan};
use super::input::Input;
use super::progress::ProgressReporter;
use super::sentry_api::SentryProject;
use super::text;
use super::{Format, SymbolicateArgs};
use crate::cache::Scope;
use crate::config::Config;
use crate::engine::{Engine, Symbfiles};
use crate::fetch::Downloader;
use crate::js::JsSymbolicationRequest;
use crate::jvm::SymbolicateJvmRequest;
use crate::native::interface::{RequestOptions, RewriteRules};
use crate::native::{CrashData, CrashReportRequest, SymbolicateRequest};
use crate::service::completed_body;
use crate::sources::SourceConfig;

pub fn run(config: Option<PathBuf>, args: SymbolicateArgs) -> anyhow::Result<()> {
    let (config, _temp_cache) = load_config(config.as_deref())?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(symbolicate(&config, &args))
}

/// The config, and the temporary cache directory to remove on exit if one is used.
fn load_config(path: Option<&Path>) -> anyhow::Result<(Config, Option<tempfile::TempDir>)> {
    let (config, ignored, temp) = match path {
        Some(path) => {
            let (config, ignored) = Config::from_file(path)?;
            (config, ignored, None)
        }
        None => {
            let (cache_dir, temp) = match user_cache_dir() {
                Some(dir) => (dir, None),
                None => {
                    let temp = tempfile::Builder::new().prefix("omnisym-cache").tempdir()?;
                    (temp.path().to_owned(), Some(temp))
                }
            };
            let config = Config {
                cache_dir,
                connect_to_reserved_ips: true,
                ..Config::default()
            };
            (config, Vec::new(), temp)
        }
    };
    super::init_logging(path.map(|_| config.logging.level.as_str()));
    for key in ignored {
        tracing::warn!(key = %key, "config key is not used by omnisym; ignoring it");
    }
    std::fs::create_dir_all(&config.cache_dir)
        .with_context(|| format!("cannot create cache_dir {}", config.cache_dir.display()))?;
    Ok((config, temp))
}

/// `$XDG_CACHE_HOME/omnisym`, else `$HOME/.cache/omnisym`, as the XDG spec has it (and
/// the platform's own cache directory elsewhere).
fn user_cache_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|dir| dir.join("omnisym"))
}

async fn symbolicate(config: &Config, args: &SymbolicateArgs) -> anyhow::Result<()> {
    let progress = ProgressReporter::to_stderr();
    let downloader = Downloader::with_observer(config.fetch_config(), progress.downloads())?;
    // Stored symbfiles are read, and nothing of the store a server relies on changes.
    let engine = Engine::build(
        config,
        &downloader,
        Symbfiles::Read,
        Some(progress.conversions()),
    )?;
    let downloads = tempfile::Builder::new()
        .prefix("omnisym-event")
        .tempdir_in(config.cache_dir.join("tmp"))
        .or_else(|_| tempfile::tempdir())?;
    let (project, file) = match &args.event_id {
        Some(event_id) => {
            let project = SentryProject::from_args(args)?;
            let file = project.download(event_id, downloads.path()).await?;
            (Some(project), file)
        }
        None => (None, args.file.clone().context("no file to symbolicate")?),
    };
    let input = Input::read(&file, &config.cache_dir.join("tmp"))?;
    let output = match input {
        // The unpacked copy of a compressed file has to outlive the processing.
        Input::Crash {
            kind,
            path,
            _unpacked,
        } => {
            let request = CrashReportRequest {
                sources: sources(config, args, project.as_ref(), Pipeline::Native)?.into(),
                options: RequestOptions::default(),
                rewrite_first_module: RewriteRules::default(),
            };
            let response = engine
                .native
                .process_crash_file(kind, Scope::new("global"), CrashData::File(&path), request)
                .await
                .with_context(|| format!("cannot symbolicate {}", file.display()))?;
            let body = completed_body(&response);
            match args.format {
                Format::Json => String::from_utf8(body.to_vec())?,
                Format::Text => text::crash(&serde_json::from_slice(&body)?),
            }
        }
        Input::Event(mut event) => {
            let plans = event::plans(&event)
                .with_context(|| format!("cannot read the event in {}", file.display()))?;
            if plans.is_empty() {
                tracing::warn!("the event has no frames any pipeline symbolicates");
            }
            for plan in &plans {
                let answer = run_plan(&engine, config, args, project.as_ref(), plan).await?;
                event::apply(&mut event, plan, &answer)
                    .with_context(|| format!("{} of the event", plan.pipeline.endpoint()))?;
            }
            match args.format {
                Format::Json => serde_json::to_string(&event)?,
                Format::Text => text::event(&event),
            }
        }
    };
    // Let the last progress line out before the result.
    drop(progress);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(output.as_bytes())?;
    if !output.ends_with('\n') {
        stdout.write_all(b"\n")?;
    }
    stdout.flush()?;
    Ok(())
}

/// The store's (when the config has one), then the Sentry project's (with
/// `--event-id`), then the config's, then the command line's: through the one function
/// every front picks sources with.
fn sources(
    config: &Config,
    args: &SymbolicateArgs,
    project: Option<&SentryProject>,
    pipeline: Pipeline,
) -> anyhow::Result<Vec<SourceConfig>> {
    let mut sources = Vec::new();
    if let Some(project) = project {
        sources.push(SourceConfig::Sentry(Arc::new(match pipeline {
            Pipeline::Js => project.artifacts(),
            Pipeline::Native | Pipeline::Jvm => project.debug_files(),
        })));
    }
    sources.extend(config.sources.iter().cloned());
    sources.extend(args.sources.sources(pipeline)?);
    let store =
        crate::store::Store::open(&config.store, &config.cache_dir, config.connect_timeout)?;
    Ok(crate::store::first_sources(store.as_ref(), &Scope::Global, &sources).to_vec())
}

/// Runs one endpoint's pipeline on its request, in-process; the answer is the JSON the
/// endpoint would send.
async fn run_plan(
    engine: &Engine,
    config: &Config,
    args: &SymbolicateArgs,
    project: Option<&SentryProject>,
    plan: &Plan,
) -> anyhow::Result<Value> {
    let scope = Scope::new("global");
    let mut sources = sources(config, args, project, plan.pipeline)?;
    let body = plan.body.clone();
    let answer = match plan.pipeline {
        Pipeline::Native => {
            let request: SymbolicateRequest = serde_json::from_value(body)?;
            let response = engine
                .native
                .symbolicate(scope, sources.into(), request)
                .await;
            completed_body(&response)
        }
        Pipeline::Js => {
            let mut request: JsSymbolicationRequest = serde_json::from_value(body)?;
            // JS files come through Sentry's artifact lookup (the first Sentry source)
            // or, by debug id, from the other sources.
            if let Some(at) = sources
                .iter()
                .position(|s| matches!(s, SourceConfig::Sentry(_)))
                && let SourceConfig::Sentry(sentry) = sources.remove(at)
            {
                request.source = Some(Arc::unwrap_or_clone(sentry));
            }
            sources.retain(|s| !matches!(s, SourceConfig::Sentry(_)));
            let response = engine.js.symbolicate(scope, sources.into(), request).await;
            completed_body(&response)
        }
        Pipeline::Jvm => {
            let request: SymbolicateJvmRequest = serde_json::from_value(body)?;
            let response = engine.jvm.symbolicate(scope, sources.into(), request).await;
            completed_body(&response)
        }
    };
    Ok(serde_json::from_slice(&answer)?)
}
