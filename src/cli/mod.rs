//! The command-line tools beside the server. `omnisym symbolicate FILE` symbolicates a
//! minidump, an Apple crash report or a stored Sentry event in-process, with the same
//! services the server builds (`symbolicate`); with `--event-id` the event comes from a
//! Sentry project, whose files are then sources too (`sentry_api`). `omnisym replay DIR
//! --server URL` sends stored events to a running server and reports how many frames
//! each got symbolicated (`replay`). Both turn events into endpoint requests and answers
//! back into events the way Sentry does (`event`); the offline run reads its input
//! (`input`), prints text (`text`) and shows slow downloads (`progress`). Where files
//! come from on the command line is `options`. `omnisym wasm-split` prepares WebAssembly
//! modules for the lookup, as upstream's tool of that name (`wasm_split`); `omnisym sort`
//! lays debug files out for a source, as upstream's symsorter (`sort`). This is the
//! top layer beside `server`: nothing imports it.
mod event;
mod input;
mod options;
mod progress;
mod replay;
mod sentry_api;
mod sort;
mod symbolicate;
mod text;
mod wasm_split;

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;
use url::Url;

pub use options::SourceArgs;

/// `omnisym symbolicate`.
#[derive(Args, Debug)]
pub struct SymbolicateArgs {
    /// A minidump, an Apple crash report or a stored Sentry event (JSON), compressed or
    /// not.
    #[arg(required_unless_present = "event_id", conflicts_with = "event_id")]
    pub file: Option<PathBuf>,
    /// Symbolicate this event of a Sentry project instead (its attached minidump or
    /// Apple crash report if it has one), with the project's debug files and artifacts
    /// as sources before the others, as upstream's symbolicli does.
    #[arg(long, value_name = "ID")]
    pub event_id: Option<String>,
    /// The Sentry server (default `https://sentry.io/`).
    #[arg(long, value_name = "URL", requires = "event_id")]
    pub url: Option<String>,
    /// The organization slug.
    #[arg(long, requires = "event_id")]
    pub org: Option<String>,
    /// The project slug.
    #[arg(long, requires = "event_id")]
    pub project: Option<String>,
    /// A Sentry auth token that may read the project (else `SENTRY_AUTH_TOKEN`, else
    /// the settings file).
    #[arg(long, value_name = "TOKEN", requires = "event_id")]
    pub auth_token: Option<String>,
    /// symbolicli's settings file (`org`, `project`, `url`, `auth = { token }`); by
    /// default `.symboliclirc` here, then in the home directory.
    #[arg(long, value_name = "FILE", requires = "event_id")]
    pub settings: Option<PathBuf>,
    #[command(flatten)]
    pub sources: SourceArgs,
    /// `json`: the symbolicated event, or for a crash file the answer its endpoint gives.
    /// `text`: a readable stack per thread.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Json,
    Text,
}

/// `omnisym replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A directory of stored Sentry events, one `*.json` file each.
    pub dir: PathBuf,
    /// The base URL of a running omnisym (or upstream Symbolicator).
    #[arg(long, value_name = "URL")]
    pub server: Url,
    /// Without any of these, requests name no sources and the server uses its own.
    #[command(flatten)]
    pub sources: SourceArgs,
    /// Seconds the server may work on a request before answering `pending`; a pending
    /// request is then polled until it is done.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub timeout: f64,
}

/// `omnisym wasm-split`, with upstream's `wasm-split` flags.
#[derive(Args, Debug)]
pub struct WasmSplitArgs {
    /// The WebAssembly module.
    pub input: PathBuf,
    /// Where to write the module; by default it is changed in place.
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Also write the whole module, with its build id and debug sections, here: the
    /// debug companion to upload.
    #[arg(short, long)]
    pub debug_out: Option<PathBuf>,
    /// Remove the DWARF sections (`.debug_*`) from the module.
    #[arg(long)]
    pub strip: bool,
    /// With `--strip`, remove the `name` section (function names) too.
    #[arg(long)]
    pub strip_names: bool,
    /// Do not print the build id.
    #[arg(short, long)]
    pub quiet: bool,
    /// The build id to give a module without one; by default a random UUID.
    #[arg(long)]
    pub build_id: Option<uuid::Uuid>,
    /// Where browsers fetch the separate DWARF; by default the debug companion's file
    /// name.
    #[arg(long)]
    pub external_dwarf_url: Option<String>,
}

/// `omnisym sort`, with upstream symsorter's flags and defaults.
#[derive(Args, Debug)]
pub struct SortArgs {
    /// The folder to write the sorted files to.
    #[arg(long, short = 'o', value_name = "PATH")]
    pub output: PathBuf,
    /// A folder below the output to sort into (a virtual bucket such as `ios`).
    #[arg(long, short = 'p', value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// Record the files under this bundle id (`bundles/<id>` and `refs/<id>`).
    #[arg(long, short = 'b', value_name = "BUNDLE_ID")]
    pub bundle_id: Option<String>,
    /// One bundle per input, named after it.
    #[arg(long, conflicts_with = "bundle_id")]
    pub multiple_bundles: bool,
    /// Also make source bundles, from the source files the debug files name, for
    /// debug files that came without one. Any file a debug file names is read, unless
    /// `--source-root` limits them.
    #[arg(long)]
    pub with_sources: bool,
    /// With `--with-sources`, read only sources below this folder (repeat for more);
    /// symlinks are resolved first, so neither `..` nor a link leads out of it.
    #[arg(long, value_name = "DIR", requires = "with_sources")]
    pub source_root: Vec<PathBuf>,
    /// Largest size a zip entry may inflate to; a larger one is skipped and reported.
    /// The server's `max_download_size` default.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size,
          default_value_t = crate::fetch::FetchConfig::default().max_download_size)]
    pub max_entry_size: u64,
    /// Largest inflated/compressed size ratio of a zip entry past 64 MiB; a larger one
    /// (a decompression bomb) is skipped and reported. The server's
    /// `max_decompression_ratio` default.
    #[arg(long, value_name = "RATIO",
          default_value_t = crate::fetch::FetchConfig::default().max_decompression_ratio)]
    pub max_entry_ratio: u64,
    /// Compress the files with zstd; repeat for smaller, slower (`-zz` is good).
    #[arg(long, short = 'z', action = clap::ArgAction::Count)]
    pub compress: u8,
    /// Report broken files and go on instead of stopping.
    #[arg(long, short = 'I')]
    pub ignore_errors: bool,
    /// Print nothing but warnings and errors.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// The directory layout to write, as a source's `layout.type` names it.
    #[arg(long, value_enum, default_value_t = crate::sources::DirectoryLayoutType::Unified)]
    pub layout: crate::sources::DirectoryLayoutType,
    /// Debug files, folders of them (`.dSYM` bundles among them) and zip archives.
    pub input: Vec<PathBuf>,
}

/// Runs `omnisym sort`.
pub fn sort(args: SortArgs) -> anyhow::Result<()> {
    sort::run(args)
}

/// Runs `omnisym wasm-split`: prints the module's build id (hex) unless `--quiet`.
pub fn wasm_split(args: WasmSplitArgs) -> anyhow::Result<()> {
    wasm_split::run(args)
}

/// Runs `omnisym symbolicate`; `config` is the YAML config file, if any.
pub fn symbolicate(config: Option<PathBuf>, args: SymbolicateArgs) -> anyhow::Result<()> {
    symbolicate::run(config, args)
}

/// Runs `omnisym replay`. Fails when any request failed, after reporting every event.
pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    replay::run(args)
}

/// Standard output carries the result, so stderr gets only warnings (and download
/// progress) unless `RUST_LOG` or a config file's `logging.level` asks for more.
fn init_logging(level: Option<&str>) {
    let filter = EnvFilter::try_from_default_env()
        // rust-minidump warns about quirks of perfectly usable dumps.
        .unwrap_or_else(|_| EnvFilter::new(level.unwrap_or("warn,minidump=error")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .compact()
        .without_time()
        .with_ansi(ansi)
        .init();
}
