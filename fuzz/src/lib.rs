//! What the fuzz targets share: the two panic policies, a runtime, the server's own
//! state over a throwaway cache directory, and small helpers to cut one input in parts.
//!
//! Panic policies:
//!
//! - strict, for our own parsers (JSON, multipart, indexes, search answers,
//!   decompression): the target leaves libfuzzer-sys' hook alone, so any panic
//!   anywhere is a crash.
//! - [`isolating`]: for inputs that go through third-party parsers, which the server
//!   runs inside `omnisym::error::isolate`. A panic that `isolate` turns into
//!   `Malformed` is what the server survives, so it is not a crash; it is recorded
//!   once per source location (a line on stderr, and the input under
//!   `caught/<target>/`). Any other panic (one that escapes to the target, or that
//!   something other than `isolate` swallowed, such as a tokio task) is a crash, as
//!   are aborts, OOMs and timeouts. With `OMNISYM_FUZZ_STRICT=1` caught panics are
//!   crashes too, so libFuzzer can minimise them (`cargo fuzz tmin`).
//!
//! `isolate` reports every panic it catches with a `tracing` error event that carries
//! a `panic` field; counting those events against the panics the hook saw tells the
//! two apart without any fuzzing-only code in the library.

use std::collections::HashSet;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use omnisym::cache::Scope;
use omnisym::config::Config;
use omnisym::native::{CrashData, CrashKind, CrashReportRequest};
use omnisym::server::AppState;
use omnisym::native::interface::{RequestOptions, RewriteRules};

static PANICS: AtomicUsize = AtomicUsize::new(0);
static CAUGHT: AtomicUsize = AtomicUsize::new(0);
/// The first panic of the current input: `location: message`.
static FIRST_PANIC: Mutex<Option<String>> = Mutex::new(None);
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Counts the error events `omnisym::error::isolate` emits when it catches a panic;
/// every other event and span is disabled at its call site, so this costs nothing on
/// the paths that do not panic.
struct IsolateEvents;

impl tracing::Subscriber for IsolateEvents {
    fn register_callsite(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if self.enabled(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        meta.is_event()
            && meta.module_path() == Some("omnisym::error")
            && meta.fields().field("panic").is_some()
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {
        CAUGHT.fetch_add(1, Ordering::SeqCst);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

fn strict_env() -> bool {
    static STRICT: OnceLock<bool> = OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("OMNISYM_FUZZ_STRICT").is_some_and(|v| v != "0"))
}

/// Replaces libfuzzer-sys' abort-on-panic hook with one that only counts and
/// remembers; [`isolating`] decides afterwards. Call it from the target's `init:`.
pub fn install_isolating_hook() {
    tracing::subscriber::set_global_default(IsolateEvents)
        .expect("no other tracing subscriber in a fuzz target");
    if strict_env() {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        let mut first = FIRST_PANIC.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_else(|| "(unknown location)".into());
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            *first = Some(format!("{location}: {message}"));
        }
    }));
}

static INPUT: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Runs `body` on `data` under the isolating policy (see the crate docs).
pub fn isolating(target: &str, data: &[u8], body: impl FnOnce(&[u8])) {
    if strict_env() {
        body(data);
        return;
    }
    PANICS.store(0, Ordering::SeqCst);
    CAUGHT.store(0, Ordering::SeqCst);
    *FIRST_PANIC.lock().unwrap_or_else(|p| p.into_inner()) = None;
    {
        let mut input = INPUT.lock().unwrap();
        input.clear();
        input.extend_from_slice(data);
    }
    let escaped = std::panic::catch_unwind(AssertUnwindSafe(|| body(data))).is_err();
    let panics = PANICS.load(Ordering::SeqCst);
    if panics == 0 {
        return;
    }
    let first = FIRST_PANIC
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default();
    let caught = CAUGHT.load(Ordering::SeqCst);
    if escaped || caught < panics {
        eprintln!(
            "\n==omnisym-fuzz== panic NOT contained by isolate ({panics} panic(s), {caught} caught by isolate{}): {first}",
            if escaped {
                ", one reached the fuzz target"
            } else {
                ""
            }
        );
        std::process::abort();
    }
    record_caught(target, &first);
}

/// Notes a panic that `isolate` contained, once per source location.
fn record_caught(target: &str, first: &str) {
    let location = first.split(": ").next().unwrap_or(first).to_owned();
    let mut seen = SEEN.lock().unwrap();
    if !seen
        .get_or_insert_with(HashSet::new)
        .insert(location.clone())
    {
        return;
    }
    eprintln!("\n==omnisym-fuzz== isolate contained a panic: {first}");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("caught")
        .join(target);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    // `goblin-0.10.7/src/pe/exception.rs:909:30` rather than the whole registry path.
    let short = match location.find("/registry/src/") {
        Some(at) => location[at..].splitn(5, '/').nth(4).unwrap_or(&location),
        None => &location,
    };
    let name: String = short
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = &name[name.len().saturating_sub(120)..];
    let _ = std::fs::write(dir.join(name), &*INPUT.lock().unwrap());
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("panics.txt"))
    {
        let _ = writeln!(log, "{name}\t{first}");
    }
}

/// A current-thread runtime with a blocking pool, as the server's parses need.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A directory for this process' files, in memory where the system has a tmpfs.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let builder = &mut tempfile::Builder::new();
        builder.prefix("omnisym-fuzz");
        if shm.is_dir() {
            builder.tempdir_in(shm)
        } else {
            builder.tempdir()
        }
        .expect("a scratch directory")
    })
    .path()
}

/// Writes `data` to a file in the scratch directory (the server reads uploads and
/// downloads from disk) and returns its path.
pub fn write_input(name: &str, data: &[u8]) -> PathBuf {
    let path = scratch_dir().join(name);
    std::fs::write(&path, data).expect("writing the input file");
    path
}

/// The server's state, as `omnisym run` builds it from a config with no sources, over
/// a cache directory of its own.
pub fn app_state() -> &'static AppState {
    static STATE: OnceLock<AppState> = OnceLock::new();
    STATE.get_or_init(|| {
        let cache_dir = scratch_dir().join("cache");
        let config = Config {
            cache_dir,
            ..Config::default()
        };
        let _guard = runtime().enter();
        AppState::new(&config).expect("the server state")
    })
}

/// Splits `data` at the first `sep` byte; without one, all of it is the second part.
pub fn split_once(data: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == sep) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[], data),
    }
}

/// A crash file as the server processes an upload once it is on disk and unpacked:
/// `NativeService::process_crash_file` with no symbol sources, then symbolication.
/// Both ways an upload reaches it: kept in memory (small ones) and spooled to disk.
pub fn process_crash_file(kind: CrashKind, data: &[u8]) {
    let path = write_input("upload", data);
    let state = app_state();
    for crash in [CrashData::Memory(data.to_vec()), CrashData::File(&path)] {
        let request = CrashReportRequest {
            sources: state.sources_or_default(None),
            options: RequestOptions::default(),
            rewrite_first_module: RewriteRules::default(),
        };
        let scope = Scope::new("global");
        let _ = runtime().block_on(state.native.process_crash_file(kind, scope, crash, request));
    }
}
