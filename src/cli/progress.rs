//! Progress of slow work on stderr: downloads (the fetch layer reports every transfer
//! to a [`DownloadObserver`]) and cache conversions (the caches report each to a
//! [`ConversionObserver`]; a large PDB converts for many seconds with nothing to
//! download). Quick tasks, the vast majority, print nothing; one still running after a
//! second is shown until it ends. On a terminal that is an `indicatif` bar (a spinner
//! while the size is unknown) redrawn in place, and a line that stays once it ends.
//! Anywhere else (a pipe, a file, CI logs) escape codes and redraws would be noise, so a
//! slow task gets one line when it is first shown and one when it ends. A ticker thread
//! does the showing, so a transfer waiting for its first byte is shown too.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cache::{ConversionObserver, ConversionState};
use crate::error::CacheError;
use crate::fetch::{DownloadObserver, DownloadOutcome, DownloadState};

/// How long a task runs before it is shown.
const SHOW_AFTER: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(100);

/// Shows progress while it lives; dropping it stops the ticker.
pub struct ProgressReporter {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    active: Mutex<BTreeMap<Task, Entry>>,
    out: Output,
}

/// Downloads and conversions count their ids separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Task {
    Download(u64),
    Conversion(u64),
}

struct Entry {
    /// `downloading <url>`, `converting symcaches from 12.0 MiB`.
    label: String,
    started: Instant,
    bytes: u64,
    total: Option<u64>,
    shown: Option<Shown>,
}

enum Shown {
    Bar(ProgressBar, Option<Layout>),
    Line,
}

enum Output {
    Terminal(MultiProgress),
    Lines(Mutex<Box<dyn Write + Send>>),
}

impl ProgressReporter {
    pub fn to_stderr() -> Self {
        let out = if std::io::stderr().is_terminal() {
            Output::Terminal(MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
        } else {
            Output::Lines(Mutex::new(Box::new(std::io::stderr())))
        };
        Self::new(out)
    }

    fn new(out: Output) -> Self {
        let shared = Arc::new(Shared {
            active: Mutex::new(BTreeMap::new()),
            out,
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let ticking = shared.clone();
        let ticker = std::thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                ticking.tick(Instant::now());
            }
        });
        ProgressReporter {
            shared,
            stop: Some(stop),
            ticker: Some(ticker),
        }
    }

    /// What the downloader reports to.
    pub fn downloads(&self) -> Arc<dyn DownloadObserver> {
        self.shared.clone()
    }

    /// What the caches report their conversions to.
    pub fn conversions(&self) -> Arc<dyn ConversionObserver> {
        self.shared.clone()
    }
}

impl Drop for ProgressReporter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}

impl Shared {
    /// Shows every task that has run long enough and is not shown yet.
    fn tick(&self, now: Instant) {
        let mut lines = Vec::new();
        let mut active = self.active.lock().unwrap();
        for entry in active.values_mut() {
            if entry.shown.is_some() || now.duration_since(entry.started) < SHOW_AFTER {
                continue;
            }
            entry.shown = Some(match &self.out {
                Output::Terminal(multi) => {
                    let bar = multi.add(ProgressBar::no_length());
                    bar.set_message(entry.label.clone());
                    let mut layout = None;
                    update(&bar, &mut layout, entry.bytes, entry.total);
                    bar.enable_steady_tick(TICK);
                    Shown::Bar(bar, layout)
                }
                Output::Lines(_) => {
                    lines.push(match entry.total {
                        Some(total) => format!("{} ({})", entry.label, size(total)),
                        None => entry.label.clone(),
                    });
                    Shown::Line
                }
            });
        }
        drop(active);
        self.write(&lines);
    }

    fn progressed(&self, task: Task, bytes: u64, total: Option<u64>) {
        if let Some(entry) = self.active.lock().unwrap().get_mut(&task) {
            entry.bytes = bytes;
            entry.total = total;
            if let Some(Shown::Bar(bar, layout)) = &mut entry.shown {
                update(bar, layout, bytes, total);
            }
        }
    }

    /// Ends a task; only one that was shown gets a last line, closing what was opened.
    fn finished(&self, task: Task, line: impl FnOnce(String) -> String) {
        let Some(entry) = self.active.lock().unwrap().remove(&task) else {
            return;
        };
        let Some(shown) = &entry.shown else {
            return;
        };
        if let Shown::Bar(bar, _) = shown {
            bar.finish_and_clear();
        }
        let took = format!("{:.1}s", entry.started.elapsed().as_secs_f64());
        self.write(&[line(took)]);
    }

    fn write(&self, lines: &[String]) {
        if lines.is_empty() {
            return;
        }
        // Progress is a courtesy: a closed stderr must not fail the run.
        match &self.out {
            Output::Terminal(multi) => {
                for line in lines {
                    let _ = multi.println(line);
                }
            }
            Output::Lines(out) => {
                let mut out = out.lock().unwrap();
                for line in lines {
                    let _ = writeln!(out, "{line}");
                }
                let _ = out.flush();
            }
        }
    }
}

/// How a bar is drawn: a spinner with the time until the first byte, then with the
/// bytes so far, and a bar once the size is known (a conversion has no size: it stays a
/// spinner).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Waiting,
    Bytes,
    Sized(u64),
}

impl Layout {
    fn of(bytes: u64, total: Option<u64>) -> Self {
        match total {
            Some(total) => Layout::Sized(total),
            None if bytes > 0 => Layout::Bytes,
            None => Layout::Waiting,
        }
    }

    fn template(self) -> &'static str {
        match self {
            Layout::Sized(_) => {
                "{spinner} {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} \
                 ({binary_bytes_per_sec})"
            }
            Layout::Bytes => "{spinner} {msg} {binary_bytes} ({binary_bytes_per_sec})",
            Layout::Waiting => "{spinner} {msg} ({elapsed})",
        }
    }
}

/// Moves `bar` to `bytes`, restyled only when its layout changes (once or twice per
/// transfer, not per chunk).
fn update(bar: &ProgressBar, layout: &mut Option<Layout>, bytes: u64, total: Option<u64>) {
    let now = Layout::of(bytes, total);
    if *layout != Some(now) {
        let style = ProgressStyle::with_template(now.template())
            .expect("the templates are fixed")
            .progress_chars("=> ");
        bar.set_style(style);
        match now {
            Layout::Sized(total) => bar.set_length(total),
            Layout::Bytes | Layout::Waiting => bar.unset_length(),
        }
        *layout = Some(now);
    }
    bar.set_position(bytes);
}

impl DownloadObserver for Shared {
    fn started(&self, download: &DownloadState) {
        self.active.lock().unwrap().insert(
            Task::Download(download.id),
            Entry {
                label: format!("downloading {}", download.name),
                started: download.started,
                bytes: 0,
                total: None,
                shown: None,
            },
        );
    }

    fn progressed(&self, download: &DownloadState) {
        Shared::progressed(
            self,
            Task::Download(download.id),
            download.bytes,
            download.total,
        );
    }

    fn finished(&self, download: &DownloadState, outcome: DownloadOutcome<'_>) {
        let name = &download.name;
        Shared::finished(self, Task::Download(download.id), |took| match outcome {
            DownloadOutcome::Done => {
                format!("downloaded {name}: {} in {took}", size(download.bytes))
            }
            DownloadOutcome::Failed(err) => {
                format!("download of {name} failed after {took}: {err}")
            }
            DownloadOutcome::Abandoned => format!("download of {name} abandoned after {took}"),
        });
    }
}

impl ConversionObserver for Shared {
    fn started(&self, conversion: &ConversionState) {
        self.active.lock().unwrap().insert(
            Task::Conversion(conversion.id),
            Entry {
                label: format!(
                    "converting {} from {}",
                    conversion.kind,
                    size(conversion.input_bytes)
                ),
                started: conversion.started,
                bytes: 0,
                total: None,
                shown: None,
            },
        );
    }

    fn finished(&self, conversion: &ConversionState, result: Result<(), &CacheError>) {
        let kind = conversion.kind;
        let input = size(conversion.input_bytes);
        Shared::finished(self, Task::Conversion(conversion.id), |took| match result {
            Ok(()) => format!("converted {kind} from {input} in {took}"),
            Err(err) => format!("converting {kind} from {input} failed after {took}: {err}"),
        });
    }
}

/// A bar over a known amount of work (the bytes of `omnisym sort`'s inputs), drawn on
/// stderr only for a person at a terminal: in a pipe or CI log the lines the tool prints
/// and its summary say the same without redraws, and `quiet` wants nothing at all.
pub struct WorkBar {
    bar: Option<ProgressBar>,
}

impl WorkBar {
    pub fn to_stderr(total: u64, quiet: bool) -> Self {
        let shown = !quiet && std::io::stderr().is_terminal();
        Self::with_target(total, shown.then(ProgressDrawTarget::stderr))
    }

    fn with_target(total: u64, target: Option<ProgressDrawTarget>) -> Self {
        let bar = target.map(|target| {
            let bar = ProgressBar::with_draw_target(Some(total), target);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta}) {msg}",
                )
                .expect("the template is fixed")
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(TICK);
            bar
        });
        WorkBar { bar }
    }

    pub fn advance(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// Runs `print` with the bar out of the way, so a printed line does not tear it.
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
}

impl Drop for WorkBar {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Bytes for people: exact below a KiB, else one decimal of the largest binary unit.
fn size(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::InMemoryTerm;

    /// A writer whose text the test can read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn shared(out: Output) -> Shared {
        Shared {
            active: Mutex::new(BTreeMap::new()),
            out,
        }
    }

    fn lines(out: &Captured) -> Shared {
        shared(Output::Lines(Mutex::new(Box::new(out.clone()))))
    }

    fn state(id: u64, started: Instant, bytes: u64, total: Option<u64>) -> DownloadState {
        DownloadState {
            id,
            name: format!("http://symbols.example/{id}"),
            started,
            bytes,
            total,
        }
    }

    #[test]
    fn off_a_terminal_a_slow_transfer_gets_one_line_when_shown_and_one_when_done() {
        let out = Captured::default();
        let shared = lines(&out);
        let t0 = Instant::now();
        let (slow, quick) = (state(1, t0, 0, None), state(2, t0, 0, None));
        DownloadObserver::started(&shared, &slow);
        DownloadObserver::started(&shared, &quick);
        shared.tick(t0 + Duration::from_millis(500));
        DownloadObserver::finished(&shared, &quick, DownloadOutcome::Done);
        assert_eq!(out.text(), "", "nothing within the first second");

        DownloadObserver::progressed(&shared, &state(1, t0, 1536, Some(3 << 20)));
        shared.tick(t0 + Duration::from_millis(1100));
        assert_eq!(
            out.text(),
            "downloading http://symbols.example/1 (3.0 MiB)\n"
        );
        shared.tick(t0 + Duration::from_millis(2200));
        shared.tick(t0 + Duration::from_millis(5000));
        assert_eq!(
            out.text().lines().count(),
            1,
            "shown once, not every second"
        );
        DownloadObserver::finished(
            &shared,
            &state(1, t0, 1536, Some(3 << 20)),
            DownloadOutcome::Failed(&CacheError::NotFound),
        );
        let last = out.text().lines().last().unwrap().to_owned();
        assert!(
            last.starts_with("download of http://symbols.example/1 failed after"),
            "{last}"
        );
        assert!(shared.active.lock().unwrap().is_empty());
    }

    #[test]
    fn a_slow_conversion_is_shown_too() {
        let out = Captured::default();
        let shared = lines(&out);
        let t0 = Instant::now();
        let conversion = |id| ConversionState {
            id,
            kind: "symcaches",
            input_bytes: 12 << 20,
            started: t0,
        };
        // A conversion and a download may share an id: they are told apart.
        ConversionObserver::started(&shared, &conversion(1));
        DownloadObserver::started(&shared, &state(1, t0, 0, None));
        ConversionObserver::started(&shared, &conversion(2));
        ConversionObserver::finished(&shared, &conversion(2), Ok(()));
        shared.tick(t0 + Duration::from_millis(1100));
        let text = out.text();
        assert!(
            text.contains("converting symcaches from 12.0 MiB\n"),
            "{text}"
        );
        assert!(
            text.contains("downloading http://symbols.example/1\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2, "{text}");
        ConversionObserver::finished(&shared, &conversion(1), Ok(()));
        let last = out.text().lines().last().unwrap().to_owned();
        assert!(
            last.starts_with("converted symcaches from 12.0 MiB in "),
            "{last}"
        );
    }

    #[test]
    fn on_a_terminal_a_slow_transfer_is_a_bar_that_leaves_a_line() {
        let term = InMemoryTerm::new(10, 120);
        let multi =
            MultiProgress::with_draw_target(ProgressDrawTarget::term_like(Box::new(term.clone())));
        let shared = shared(Output::Terminal(multi));
        let t0 = Instant::now();
        let slow = state(1, t0, 0, None);
        DownloadObserver::started(&shared, &slow);
        shared.tick(t0 + Duration::from_millis(500));
        assert_eq!(
            term.contents().trim(),
            "",
            "nothing within the first second"
        );

        DownloadObserver::progressed(&shared, &state(1, t0, 1 << 20, Some(4 << 20)));
        shared.tick(t0 + Duration::from_millis(1100));
        // The steady tick draws within its interval.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !term.contents().contains("1.00 MiB/4.00 MiB") {
            assert!(Instant::now() < deadline, "{:?}", term.contents());
            std::thread::sleep(TICK);
        }
        assert!(
            term.contents()
                .contains("downloading http://symbols.example/1 ["),
            "{}",
            term.contents()
        );

        DownloadObserver::finished(
            &shared,
            &state(1, t0, 4 << 20, Some(4 << 20)),
            DownloadOutcome::Done,
        );
        let contents = term.contents();
        assert!(
            contents.starts_with("downloaded http://symbols.example/1: 4.0 MiB in "),
            "{contents}"
        );
        assert!(!contents.contains('['), "the bar is cleared: {contents}");
    }

    #[test]
    fn a_work_bar_counts_bytes_and_is_cleared_when_done() {
        let term = InMemoryTerm::new(4, 120);
        let bar = WorkBar::with_target(
            4 << 20,
            Some(ProgressDrawTarget::term_like(Box::new(term.clone()))),
        );
        bar.advance(1 << 20);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !term.contents().contains("1.00 MiB/4.00 MiB") {
            assert!(Instant::now() < deadline, "{:?}", term.contents());
            std::thread::sleep(TICK);
        }
        bar.suspend(|| ());
        drop(bar);
        assert_eq!(term.contents().trim(), "", "cleared at the end");

        // Not drawn at all: advancing and printing still work.
        let hidden = WorkBar::with_target(10, None);
        hidden.advance(5);
        assert_eq!(hidden.suspend(|| 3), 3);
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.0 KiB");
        assert_eq!(size(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(size(u64::MAX), "16.0 EiB");
    }
}
