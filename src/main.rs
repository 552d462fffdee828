//! The `omnisym` command line: `run` serves the HTTP API, `cleanup` prunes the cache,
//! `symbolicate` and `replay` are the offline tools of `omnisym::cli`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use omnisym::cache::cleanup::Cleanup;
use omnisym::config::{Config, LogFormat};
use omnisym::server::{AppState, router};

/// glibc's allocator spent a fifth of a warm request in malloc/free and heap
/// consolidation under load; mimalloc's thread-local free lists avoid most of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "omnisym",
    version,
    about = "Symbolication server for every platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Run {
        /// YAML config file; without one, the embedded defaults apply.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Delete unused, expired and stray cache files (safe while a server runs).
    Cleanup {
        /// YAML config file; without one, the embedded defaults apply.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Report what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Symbolicate a minidump, Apple crash report or stored Sentry event offline.
    Symbolicate {
        /// YAML config file; without one, the embedded defaults apply.
        #[arg(short, long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        args: omnisym::cli::SymbolicateArgs,
    },
    /// Send stored Sentry events to a running server and report what got symbolicated.
    Replay(omnisym::cli::ReplayArgs),
}

fn init_logging(config: &Config) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.logging.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Colours only for a person at a terminal; log collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    match config.logging.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Simplified => builder.compact().without_time().with_ansi(ansi).init(),
        LogFormat::Pretty => builder.with_ansi(true).init(),
        LogFormat::Auto => builder.with_ansi(ansi).init(),
    }
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    let (config, ignored) = match path {
        Some(path) => Config::from_file(path)?,
        None => Config::from_yaml("")?,
    };
    init_logging(&config);
    for key in ignored {
        tracing::warn!(key = %key, "config key is not used by omnisym; ignoring it");
    }
    Ok(config)
}

async fn run(config: Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.cache_dir)
        .with_context(|| format!("cannot create cache_dir {}", config.cache_dir.display()))?;
    let state = AppState::new(&config)?;
    if let Some(interval) = config.caches.cleanup_interval {
        Cleanup::new(
            &config.cache_dir,
            &config.caches,
            &state.caches.kinds(),
            false,
        )
        .spawn_periodic(interval);
    }
    let app = router(state, &config);
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("cannot bind {}", config.bind))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "omnisym listening");
    // Tests and scripts read the address from here (the port may have been 0).
    eprintln!("omnisym listening on http://{addr}");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("can install a SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutting down");
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config } => {
            let config = load_config(config.as_ref())?;
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(run(config))
        }
        Command::Cleanup { config, dry_run } => {
            let config = load_config(config.as_ref())?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            // The server's own set-up registers every cache kind with its live versions.
            let state = runtime.block_on(async { AppState::new(&config) })?;
            let cleanup = Cleanup::new(
                &config.cache_dir,
                &config.caches,
                &state.caches.kinds(),
                dry_run,
            );
            let report = cleanup.run(std::time::SystemTime::now());
            let prefix = if dry_run {
                "dry run, nothing deleted: "
            } else {
                ""
            };
            println!("{prefix}{report}");
            Ok(())
        }
        Command::Symbolicate { config, args } => omnisym::cli::symbolicate(config, args),
        Command::Replay(args) => omnisym::cli::replay(args),
    }
}
