//! The `omnisym` command line: `run` serves the HTTP API, `cleanup` prunes the cache
//! (once, or on a timer with `--repeat`), `healthcheck` asks a running server whether it
//! is up; `symbolicate`, `replay`, `wasm-split` and `sort` are the offline tools of `omnisym::cli`. Subcommands
//! and flags of the server follow upstream's `symbolicator`, so self-hosted Sentry's
//! compose file can run this binary unchanged.

use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing::subscriber::Interest;
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::dynamic_filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use omnisym::cache::cleanup::Cleanup;
use omnisym::config::{Config, LogFormat};
use omnisym::server::{
    AccessLog, AccessWriter, AppState, ConnectionLimits, router, serve, start_access_log,
};

/// glibc's allocator spent a fifth of a warm request in malloc/free and heap
/// consolidation under load; mimalloc's thread-local free lists avoid most of it.
#[global_allocator]
static GLOBAL: Mimalloc = Mimalloc;

/// mimalloc, entered through its plain functions for what asks no more than a word's
/// alignment, which every block it hands out has. The `mimalloc` crate always takes the
/// aligned entry points, which look for a block that happens to be aligned before the
/// plain path: half as much again per allocation, on the sixteen allocations of every
/// `GET /healthcheck` and the hundreds of a warm symbolication.
struct Mimalloc;

/// `plain` when every mimalloc block suits `layout` (all are aligned to a word), else
/// `aligned` with the layout's alignment.
#[inline(always)]
fn by_alignment(
    layout: std::alloc::Layout,
    plain: impl FnOnce() -> *mut std::ffi::c_void,
    aligned: impl FnOnce(usize) -> *mut std::ffi::c_void,
) -> *mut u8 {
    if layout.align() <= std::mem::size_of::<usize>() {
        plain().cast()
    } else {
        aligned(layout.align()).cast()
    }
}

// SAFETY: each function hands the layout's size (and, above a word, its alignment) to
// the mimalloc function of the same contract; mimalloc's blocks are word-aligned, and
// `mi_free` takes blocks from either entry point.
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        let size = layout.size();
        // SAFETY: see the impl.
        unsafe {
            by_alignment(
                layout,
                || mi_malloc(size),
                |align| mi_malloc_aligned(size, align),
            )
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        let size = layout.size();
        // SAFETY: see the impl.
        unsafe {
            by_alignment(
                layout,
                || mi_zalloc(size),
                |align| mi_zalloc_aligned(size, align),
            )
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: see the impl.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        let ptr = ptr.cast();
        // SAFETY: see the impl.
        unsafe {
            by_alignment(
                layout,
                || mi_realloc(ptr, new_size),
                |align| mi_realloc_aligned(ptr, new_size, align),
            )
        }
    }
}

#[derive(Parser)]
#[command(
    name = "omnisym",
    version,
    about = "Symbolication server for every platform"
)]
struct Cli {
    /// YAML config file; without one, the embedded defaults apply. Accepted before or
    /// after the subcommand.
    #[arg(short, long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Run,
    /// Delete unused, expired and stray cache files (safe while a server runs).
    Cleanup {
        /// Report what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Keep running, cleaning up every INTERVAL (`1h`, `15m`, seconds); without a
        /// value, every `cache_cleanup_interval` of the config. Exits 0 on SIGTERM.
        #[arg(long, value_name = "INTERVAL", num_args = 0..=1, value_parser = parse_interval)]
        repeat: Option<Option<Duration>>,
    },
    /// Exit 0 when the server answers `GET /healthcheck`, non-zero otherwise.
    Healthcheck {
        /// Address to ask; by default the config's `bind`.
        #[arg(long)]
        addr: Option<SocketAddr>,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// Symbolicate a minidump, Apple crash report or stored Sentry event offline.
    Symbolicate(omnisym::cli::SymbolicateArgs),
    /// Send stored Sentry events to a running server and report what got symbolicated.
    Replay(omnisym::cli::ReplayArgs),
    /// Give a WebAssembly module a build id, and split its debug information off
    /// (upstream's `wasm-split`).
    WasmSplit(omnisym::cli::WasmSplitArgs),
    /// Lay debug files out in a directory a source reads (upstream's symsorter).
    Sort(omnisym::cli::SortArgs),
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = match text.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(text).map_err(|e| e.to_string())?,
    };
    if interval.is_zero() {
        return Err("the interval must be longer than 0".into());
    }
    Ok(interval)
}

/// The filter for `logging.level`. A bare level reads as upstream reads it: dependencies
/// that are noisy at that level are quieted, and `debug`/`trace` apply to omnisym only
/// (else every HTTP connection and DWARF unit would log). Anything else is a tracing
/// filter as written.
fn log_filter(level: &str) -> String {
    // The StatsD exporter is not quieted here but by `first_of_each_statsd_error`:
    // muting it would hide a mistyped address for good.
    const QUIET: &str = "goblin=error,minidump=error,minidump_processor=error,\
                         minidump_unwind=error,breakpad_symbols=error";
    match level.trim().to_ascii_lowercase().as_str() {
        "off" => "off".into(),
        "error" => format!("error,{QUIET}"),
        "warn" => format!("warn,{QUIET}"),
        "info" => format!("info,{QUIET}"),
        "debug" => format!("info,{QUIET},omnisym=debug"),
        "trace" => format!("info,{QUIET},omnisym=trace"),
        _ => level.to_owned(),
    }
}

/// What keeps the server's log threads running. Dropping it hands each thread the end
/// of its queue and waits (a second or two) until what was queued before it is written,
/// so it is dropped last, after the server has shut down.
#[must_use = "dropping it stops the log's writers"]
struct LogWriters {
    /// Dropped first: the access lines it logs then go through `_guards`' queue.
    _access: Option<AccessLog>,
    _guards: Vec<WorkerGuard>,
}

/// Sets up the log. The server (`queued`) writes its lines through a queue emptied by a
/// thread of its own, so that no request waits on the terminal or the pipe of a log
/// collector, and a line that finds it full makes its caller wait: no warning or error
/// is ever lost. Access lines are formatted by a thread of their own too, and dropped
/// (and counted) when it falls behind (`server::start_access_log`). The other commands
/// write as they log.
fn init_logging(config: &Config, reporting: bool, queued: bool) -> LogWriters {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(log_filter(&config.logging.level)));
    // As upstream: JSON lines go to stdout, for log shippers that read it.
    let stdout = config.logging.format == LogFormat::Json;
    if !queued {
        if stdout {
            install_log(config, filter, reporting, std::io::stdout);
        } else {
            install_log(config, filter, reporting, std::io::stderr);
        }
        return LogWriters {
            _access: None,
            _guards: Vec::new(),
        };
    }
    let lines = config.logging.queue_lines;
    let (writer, guard) = log_queue(lines, stdout);
    install_log(config, filter, reporting, writer);
    // Access lines skip the log's formatter where the log writes the compact format
    // without colours, and nothing else (Sentry's breadcrumbs) reads them.
    let access_writer = match config.logging.format {
        LogFormat::Simplified | LogFormat::Auto if !colours() && !reporting => {
            let time = config.logging.format == LogFormat::Auto;
            AccessWriter::compact(Box::new(std::io::stderr()), time)
        }
        _ => AccessWriter::Log,
    };
    let access = match start_access_log(lines, access_writer) {
        Ok(access) => Some(access),
        Err(err) => {
            // Access lines are then logged by their requests.
            tracing::warn!(error = %err, "no thread for the access log");
            None
        }
    };
    LogWriters {
        _access: access,
        _guards: vec![guard],
    }
}

/// A queue of `lines` log lines and the thread that writes them to stdout or stderr; a
/// line that finds it full waits.
fn log_queue(lines: usize, stdout: bool) -> (NonBlocking, WorkerGuard) {
    let builder = NonBlockingBuilder::default()
        .buffered_lines_limit(lines)
        .lossy(false)
        .thread_name("log");
    // The thread writes what it found queued at once, in writes of whole lines no
    // longer than a pipe writes atomically: one system call for dozens of lines, none
    // cut into by what else writes there (a panic's message).
    if stdout {
        builder.finish(Lingering(BufWriter::with_capacity(
            libc::PIPE_BUF,
            std::io::stdout(),
        )))
    } else {
        builder.finish(Lingering(BufWriter::with_capacity(
            libc::PIPE_BUF,
            std::io::stderr(),
        )))
    }
}

/// How long a log thread lets lines gather after it has written what was queued. A
/// thread that waits for its next line is woken by whoever queues it: a system call on
/// the request's thread and a switch of threads for every few lines, when the thread
/// writes faster than requests come in. A line is written at most this much later.
const LOG_LINGER: Duration = Duration::from_millis(5);

/// A log thread's output: its thread flushes it after each batch of lines, and then
/// pauses [`LOG_LINGER`].
struct Lingering<W: Write>(BufWriter<W>);

impl<W: Write> Write for Lingering<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.0.flush();
        std::thread::sleep(LOG_LINGER);
        flushed
    }
}

/// Colours only for a person at a terminal; log collectors get plain text.
fn colours() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Installs the subscriber: `logging.format` written to `writer`, the StatsD filter and
/// the Sentry layer.
fn install_log<W>(config: &Config, filter: EnvFilter, reporting: bool, writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let ansi = colours();
    match config.logging.format {
        LogFormat::Json => builder
            .json()
            .finish()
            .with(statsd_errors_once())
            .with(sentry_layer(reporting))
            .init(),
        LogFormat::Simplified => builder
            .compact()
            .without_time()
            .with_ansi(ansi)
            .finish()
            .with(statsd_errors_once())
            .with(sentry_layer(reporting))
            .init(),
        LogFormat::Pretty => builder
            .pretty()
            .with_ansi(true)
            .finish()
            .with(statsd_errors_once())
            .with(sentry_layer(reporting))
            .init(),
        LogFormat::Auto if ansi => builder
            .pretty()
            .finish()
            .with(statsd_errors_once())
            .with(sentry_layer(reporting))
            .init(),
        LogFormat::Auto => builder
            .compact()
            .with_ansi(false)
            .finish()
            .with(statsd_errors_once())
            .with(sentry_layer(reporting))
            .init(),
    }
}

/// With `sentry_dsn` set, what is logged at `error` becomes a Sentry event (the rest
/// breadcrumbs to it), and spans feed request traces. The panic hook logs every panic
/// with the stack where it happened; `omnisym::error` logs an isolated parser's panic a
/// second time, when it is caught, and that one is only a breadcrumb.
fn sentry_layer(reporting: bool) -> Option<SentryEvents> {
    reporting.then(|| SentryEvents {
        breadcrumbs: sentry::integrations::tracing::BreadcrumbLayer::new(),
        errors: sentry::integrations::tracing::ErrorLayer::new(),
    })
}

/// Routes each log event to Sentry's breadcrumb or error layer (per-layer filters need a
/// registry-based subscriber; the formats here are built by `fmt`).
struct SentryEvents {
    breadcrumbs: sentry::integrations::tracing::BreadcrumbLayer,
    errors: sentry::integrations::tracing::ErrorLayer,
}

impl<S> tracing_subscriber::Layer<S> for SentryEvents
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        use tracing::Level;
        let meta = event.metadata();
        let caught_again =
            meta.target() == "omnisym::error" && meta.fields().field("panic").is_some();
        match *meta.level() {
            Level::ERROR if !caught_again => self.errors.on_event(event, ctx),
            Level::ERROR | Level::WARN | Level::INFO => self.breadcrumbs.on_event(event, ctx),
            _ => {}
        }
    }
}

/// Starts reporting to `sentry_dsn`, if set; the guard sends what is pending when it
/// is dropped at exit.
fn init_sentry(config: &Config) -> Option<sentry::ClientInitGuard> {
    let dsn = config.sentry_dsn.as_ref()?;
    let options = sentry::ClientOptions::new()
        // Checked when the config was read.
        .dsn(dsn.expose())
        .maybe_release(sentry::release_name!())
        .traces_sample_rate(config.traces_sample_rate)
        // The panic hook's event carries the stack of the panic.
        .attach_stacktrace(true)
        .send_default_pii(false);
    Some(sentry::init(options))
}

/// Asks [`first_of_each_statsd_error`] about the StatsD exporter's events each time
/// (its answer changes), and leaves every other callsite to the level filter.
fn statsd_errors_once<S: tracing::Subscriber>() -> impl tracing_subscriber::Layer<S> {
    dynamic_filter_fn(|meta, _| first_of_each_statsd_error(meta)).with_callsite_filter(|meta| {
        if is_statsd_event(meta) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    })
}

fn is_statsd_event(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_event() && meta.target().starts_with("metrics_exporter_dogstatsd")
}

/// The StatsD exporter logs every failed send at every flush (every few seconds), and
/// self-hosted's compose file names a StatsD address whether or not one listens there.
/// The first error of each kind is the report an operator needs (a port typed wrong,
/// a StatsD that is down); the repeats would only bury the rest of the log.
fn first_of_each_statsd_error(meta: &tracing::Metadata<'_>) -> bool {
    static SEEN: LazyLock<Mutex<HashSet<tracing::callsite::Identifier>>> =
        LazyLock::new(Mutex::default);
    if !is_statsd_event(meta) {
        return true;
    }
    if *meta.level() > tracing::Level::WARN {
        return false;
    }
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(meta.callsite())
}

/// Panics go to the log like every other error (a JSON line under `format: json`):
/// parsers of untrusted files are isolated, so a panic is an event to count and read,
/// not the end of the process. The standard report (with its backtrace) follows when
/// backtraces are on.
fn log_panics() {
    let standard = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "panicked");
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            standard(info);
        }
    }));
}

/// Loads the config and sets up logging. Only the server warns about ignored keys (the
/// healthcheck runs every few seconds and would repeat them into the container's log),
/// reports to Sentry and queues its log lines; it keeps the writers until it exits.
fn load_config(path: Option<&PathBuf>, server: bool) -> anyhow::Result<(Config, LogWriters)> {
    let (config, ignored) = match path {
        Some(path) => Config::from_file(path)?,
        None => (Config::default(), Vec::new()),
    };
    if config.logging.enable_backtraces && std::env::var_os("RUST_BACKTRACE").is_none() {
        // SAFETY: called from `main` before any runtime or other thread exists.
        unsafe { std::env::set_var("RUST_BACKTRACE", "1") };
        // Panics get backtraces; errors do not capture one each, which would cost every
        // failed lookup microseconds on hot paths.
        if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
            unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
        }
    }
    let writers = init_logging(&config, server && config.sentry_dsn.is_some(), server);
    log_panics();
    for key in ignored.into_iter().filter(|_| server) {
        tracing::warn!(key = %key, "config key is not used by omnisym; ignoring it");
    }
    Ok((config, writers))
}

async fn run(config: Config) -> anyhow::Result<()> {
    ensure_writable(&config.cache_dir)?;
    let state = AppState::new(&config)?;
    if let (Some(store), Some(uploads)) = (state.store.clone(), state.sentry_uploads.clone()) {
        // In the background: listing a store on S3 or GCS may take a while, and until it
        // is done a held chunk is found by asking the store.
        tokio::spawn(async move {
            if let Err(err) = uploads.recover(&store).await {
                tracing::warn!(error = %err, "cannot list the chunks of unfinished sentry-cli uploads");
            }
        });
    }
    if let Some(interval) = config.in_process_cleanup() {
        Cleanup::new(
            &config.cache_dir,
            &config.caches,
            omnisym::cache::kinds::ALL,
            false,
        )
        .with_symbfiles(config.symbfile_dir())
        .spawn_periodic(interval);
    }
    if let Some(store) = &state.store {
        store.start_retention();
    }
    let readiness = state.readiness.clone();
    let drain_delay = config.drain_delay;
    let app = router(state, &config);
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("cannot bind {}", config.bind))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "omnisym listening");
    // Tests and scripts read the address from here (the port may have been 0).
    eprintln!("omnisym listening on http://{addr}");
    serve(
        listener,
        app,
        ConnectionLimits::of(&config),
        drain(readiness, drain_delay),
    )
    .await;
    Ok(())
}

/// Ends at the first SIGTERM or Ctrl-C, once the replica has said for `delay` that it
/// is not ready while it still served everything (a second signal cuts that short);
/// then the listener closes and the requests in progress finish.
async fn drain(readiness: omnisym::server::Readiness, delay: Duration) {
    shutdown_signal().await;
    readiness.drain();
    if delay.is_zero() {
        return;
    }
    tracing::info!(
        ?delay,
        "draining: /ready answers 503, requests are still served"
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => {},
        () = shutdown_signal() => tracing::info!("a second signal: closing now"),
    }
}

/// Fails at start, with a message naming the directory and the user, when the cache
/// cannot be written: a volume left by another image's user would otherwise fail every
/// request later, one by one.
fn ensure_writable(cache_dir: &std::path::Path) -> anyhow::Result<()> {
    let tmp = cache_dir.join("tmp");
    let probe = std::fs::create_dir_all(&tmp).and_then(|()| tempfile::tempfile_in(&tmp));
    probe.map(drop).with_context(|| {
        let uid = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m).to_string())
            .unwrap_or_else(|_| "?".into());
        format!(
            "cache_dir {} is not writable by this process (uid {uid})",
            cache_dir.display()
        )
    })
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

async fn cleanup(
    config: Config,
    dry_run: bool,
    repeat: Option<Option<Duration>>,
) -> anyhow::Result<()> {
    let interval =
        match repeat {
            None => None,
            Some(Some(interval)) => Some(interval),
            Some(None) => Some(config.caches.cleanup_interval.context(
                "--repeat without an interval needs cache_cleanup_interval in the config",
            )?),
        };
    // The kinds and their live versions come from the one table: nothing of the
    // server is set up, so nothing takes temp files or uploads from under a running one.
    let cleanup = Cleanup::new(
        &config.cache_dir,
        &config.caches,
        omnisym::cache::kinds::ALL,
        dry_run,
    )
    .with_symbfiles(config.symbfile_dir());
    let prefix = if dry_run {
        "dry run, nothing deleted: "
    } else {
        ""
    };
    let Some(interval) = interval else {
        let report =
            tokio::task::spawn_blocking(move || cleanup.run(std::time::SystemTime::now())).await?;
        println!("{prefix}{report}");
        return Ok(());
    };
    // A stop request ends the loop at once, even in the middle of a pass: every deletion
    // is of one whole file, so an interrupted pass leaves nothing half done.
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let pass = cleanup.clone();
        let run = tokio::task::spawn_blocking(move || pass.run(std::time::SystemTime::now()));
        tokio::select! {
            report = run => {
                let report = report?;
                println!("{prefix}{report}");
                tracing::info!(%report, "cache cleanup");
            }
            _ = &mut stop => return Ok(()),
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stop => return Ok(()),
        }
    }
}

/// The address to ask: a server bound to every interface answers on loopback.
fn healthcheck_addr(bind: SocketAddr) -> SocketAddr {
    match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bind.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), bind.port())
        }
        _ => bind,
    }
}

async fn healthcheck(config: &Config, addr: Option<SocketAddr>, timeout: u64) -> bool {
    let addr = addr.unwrap_or_else(|| healthcheck_addr(config.bind));
    let url = format!("http://{addr}/healthcheck");
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(timeout))
        .no_proxy()
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            eprintln!("cannot build an HTTP client: {err}");
            return false;
        }
    };
    match client.get(&url).send().await {
        Ok(response) if response.status().is_success() => {
            println!("OK");
            true
        }
        Ok(response) => {
            println!("ERROR");
            eprintln!("omnisym at {addr} is unhealthy: {}", response.status());
            false
        }
        Err(err) => {
            println!("ERROR");
            eprintln!("cannot check omnisym at {addr}: {err}");
            false
        }
    }
}

/// Turns transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP` says
/// otherwise (mimalloc reads it before `main`). mimalloc asks for huge pages on its whole
/// heap; the first touch of one costs a 2 MiB zeroing, and a compaction when the
/// machine's memory is fragmented. A cold request builds hundreds of MiB of new heap (a
/// minified file's syntax tree, a converter's tables), so that cost landed on its
/// answer: on the 2-core test VM the cold source map took 0.70-1.10 s with huge pages and
/// 0.54-0.59 s without, and peaked up to 60 MiB higher, while warm requests, whose heap is
/// small and reused, ran at the same rate either way (docs/operations.md).
fn keep_heap_in_small_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: PR_SET_THP_DISABLE takes no pointers; it only sets a flag of this process.
    // Kernels older than 3.15 refuse it, and the heap stays as the kernel has it.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn main() -> anyhow::Result<()> {
    keep_heap_in_small_pages();
    let cli = Cli::parse();
    let config = cli.config.as_ref();
    match cli.command {
        Command::Run => {
            // Dropped last, when everything else has logged what it had to.
            let (config, _log) = load_config(config, true)?;
            let _reporting = init_sentry(&config);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let result = runtime.block_on(run(config));
            // Dropping the runtime would wait for every blocking task, such as a
            // conversion minutes from done, past `shutdown_timeout`. An abandoned one
            // leaves only a temp file, which is never read as a cache file.
            runtime.shutdown_timeout(Duration::from_secs(1));
            result
        }
        Command::Cleanup { dry_run, repeat } => {
            let (config, _log) = load_config(config, false)?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(cleanup(config, dry_run, repeat))
        }
        Command::Healthcheck { addr, timeout } => {
            let (config, _log) = load_config(config, false)?;
            let healthy = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(healthcheck(&config, addr, timeout));
            std::process::exit(if healthy { 0 } else { 1 })
        }
        // The offline tools set up their own logging: stdout is their result.
        Command::Symbolicate(args) => omnisym::cli::symbolicate(cli.config, args),
        Command::Replay(args) => omnisym::cli::replay(args),
        Command::WasmSplit(args) => omnisym::cli::wasm_split(args),
        Command::Sort(args) => omnisym::cli::sort(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocation_has_the_alignment_it_asks_for_and_keeps_its_bytes() {
        use std::alloc::{GlobalAlloc, Layout};
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 7, 8, 16, 24, 40, 100, 5000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: every layout has a non-zero size; each block is freed with
                // the layout it was made with (after realloc, its new size).
                unsafe {
                    let zeroed = GLOBAL.alloc_zeroed(layout);
                    assert_eq!(zeroed as usize % align, 0, "{layout:?}");
                    assert!((0..size).all(|i| *zeroed.add(i) == 0), "{layout:?}");
                    GLOBAL.dealloc(zeroed, layout);
                    let block = GLOBAL.alloc(layout);
                    assert_eq!(block as usize % align, 0, "{layout:?}");
                    for i in 0..size {
                        *block.add(i) = i as u8;
                    }
                    let grown = GLOBAL.realloc(block, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "{layout:?} grown");
                    assert!((0..size).all(|i| *grown.add(i) == i as u8), "{layout:?}");
                    GLOBAL.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
                }
            }
        }
    }

    #[test]
    fn bare_levels_read_as_upstream_reads_them() {
        assert!(log_filter("info").starts_with("info,goblin=error"));
        assert!(log_filter("DEBUG").ends_with(",omnisym=debug"));
        for level in ["error", "warn", "info", "debug"] {
            assert!(log_filter(level).contains("breakpad_symbols=error"));
        }
        assert_eq!(log_filter("warn,omnisym=debug"), "warn,omnisym=debug");
        for level in ["off", "error", "warn", "info", "debug", "trace"] {
            EnvFilter::try_new(log_filter(level)).unwrap();
        }
    }

    fn sort_args(args: &[&str]) -> Result<omnisym::cli::SortArgs, clap::Error> {
        let cli = Cli::try_parse_from([&["omnisym", "sort"], args].concat())?;
        match cli.command {
            Command::Sort(args) => Ok(args),
            _ => unreachable!("parsed as sort"),
        }
    }

    #[test]
    fn sort_takes_symsorters_flags() {
        use omnisym::sources::DirectoryLayoutType;
        let args = sort_args(&[
            "-zz",
            "-o",
            "out",
            "-p",
            "ios",
            "-b",
            "10.3_ABCD",
            "--with-sources",
            "-I",
            "-q",
            "in1",
            "in2",
        ])
        .unwrap();
        assert_eq!(args.compress, 2);
        assert_eq!(args.output, PathBuf::from("out"));
        assert_eq!(args.prefix.as_deref(), Some("ios"));
        assert_eq!(args.bundle_id.as_deref(), Some("10.3_ABCD"));
        assert!(args.with_sources && args.ignore_errors && args.quiet);
        assert!(!args.multiple_bundles);
        assert_eq!(args.input, [PathBuf::from("in1"), PathBuf::from("in2")]);
        assert_eq!(
            args.layout,
            DirectoryLayoutType::Unified,
            "symsorter's layout"
        );

        let long = sort_args(&[
            "--output",
            "o",
            "--prefix",
            "p",
            "--compress",
            "--compress",
            "--compress",
            "--compress",
            "--ignore-errors",
            "--quiet",
            "--multiple-bundles",
            "--layout",
            "symstore_index2",
            "x",
        ])
        .unwrap();
        assert_eq!(long.compress, 4);
        assert!(long.multiple_bundles && long.ignore_errors && long.quiet);
        assert_eq!(long.layout, DirectoryLayoutType::SymstoreIndex2);

        let bare = sort_args(&["-o", "o"]).unwrap();
        assert_eq!(bare.compress, 0);
        assert!(bare.input.is_empty() && bare.bundle_id.is_none());

        assert!(sort_args(&["x"]).is_err(), "--output is required");
        assert!(sort_args(&["-o", "o", "-b", "b", "--multiple-bundles"]).is_err());
        assert!(sort_args(&["-o", "o", "--layout", "flat"]).is_err());
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_interval("90"), Ok(Duration::from_secs(90)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("soon").is_err());
    }
}
