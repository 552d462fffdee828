//! Progress of slow downloads on stderr. The fetch layer reports every transfer to a
//! [`DownloadObserver`]; a transfer still running after a second gets a line with its
//! name and bytes so far (of the total, once known), repeated every second, and a last
//! line when it ends. Quick ones, the vast majority, print nothing. A ticker thread
//! writes the lines, so a transfer waiting for its first byte is shown too.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fetch::{DownloadObserver, DownloadOutcome, DownloadState};

/// How long a transfer runs before it is shown, and how often it is shown again.
const SHOW_AFTER: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(100);

/// Shows progress while it lives; dropping it stops the ticker.
pub struct ProgressReporter {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    active: Mutex<BTreeMap<u64, Entry>>,
    out: Mutex<Box<dyn Write + Send>>,
}

struct Entry {
    name: String,
    started: Instant,
    bytes: u64,
    total: Option<u64>,
    last_shown: Option<Instant>,
}

impl ProgressReporter {
    pub fn to_stderr() -> Self {
        Self::new(Box::new(std::io::stderr()))
    }

    fn new(out: Box<dyn Write + Send>) -> Self {
        let shared = Arc::new(Shared {
            active: Mutex::new(BTreeMap::new()),
            out: Mutex::new(out),
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
    pub fn observer(&self) -> Arc<dyn DownloadObserver> {
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
    /// Shows every transfer that has run long enough and was not shown for a second.
    fn tick(&self, now: Instant) {
        let lines: Vec<String> = {
            let mut active = self.active.lock().unwrap();
            active
                .values_mut()
                .filter(|entry| {
                    now.duration_since(entry.started) >= SHOW_AFTER
                        && entry
                            .last_shown
                            .is_none_or(|at| now.duration_since(at) >= SHOW_AFTER)
                })
                .map(|entry| {
                    entry.last_shown = Some(now);
                    format!(
                        "downloading {}: {} / {}",
                        entry.name,
                        size(entry.bytes),
                        entry.total.map_or_else(|| "?".to_owned(), size)
                    )
                })
                .collect()
        };
        self.write(&lines);
    }

    fn write(&self, lines: &[String]) {
        if lines.is_empty() {
            return;
        }
        let mut out = self.out.lock().unwrap();
        for line in lines {
            // Progress is a courtesy: a closed stderr must not fail the run.
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}

impl DownloadObserver for Shared {
    fn started(&self, download: &DownloadState) {
        self.active.lock().unwrap().insert(
            download.id,
            Entry {
                name: download.name.clone(),
                started: download.started,
                bytes: 0,
                total: None,
                last_shown: None,
            },
        );
    }

    fn progressed(&self, download: &DownloadState) {
        if let Some(entry) = self.active.lock().unwrap().get_mut(&download.id) {
            entry.bytes = download.bytes;
            entry.total = download.total;
        }
    }

    fn finished(&self, download: &DownloadState, outcome: DownloadOutcome<'_>) {
        let Some(entry) = self.active.lock().unwrap().remove(&download.id) else {
            return;
        };
        // Only a transfer that was shown gets a last line: it closes what was opened.
        if entry.last_shown.is_none() {
            return;
        }
        let took = format!("{:.1}s", entry.started.elapsed().as_secs_f64());
        let line = match outcome {
            DownloadOutcome::Done => {
                format!(
                    "downloaded {}: {} in {took}",
                    entry.name,
                    size(download.bytes)
                )
            }
            DownloadOutcome::Failed(err) => {
                format!("download of {} failed after {took}: {err}", entry.name)
            }
            DownloadOutcome::Abandoned => {
                format!("download of {} abandoned after {took}", entry.name)
            }
        };
        self.write(&[line]);
    }
}

/// Bytes for people: exact below a KiB, else one decimal of the largest binary unit.
fn size(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CacheError;

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

    fn shared(out: &Captured) -> Shared {
        Shared {
            active: Mutex::new(BTreeMap::new()),
            out: Mutex::new(Box::new(out.clone())),
        }
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
    fn only_transfers_past_a_second_are_shown_once_a_second() {
        let out = Captured::default();
        let shared = shared(&out);
        let t0 = Instant::now();
        let (slow, quick) = (state(1, t0, 0, None), state(2, t0, 0, None));
        shared.started(&slow);
        shared.started(&quick);
        shared.tick(t0 + Duration::from_millis(500));
        shared.finished(&quick, DownloadOutcome::Done);
        assert_eq!(out.text(), "", "nothing within the first second");

        shared.tick(t0 + Duration::from_millis(1100));
        assert_eq!(
            out.text(),
            "downloading http://symbols.example/1: 0 B / ?\n"
        );
        shared.progressed(&state(1, t0, 1536, Some(3 << 20)));
        shared.tick(t0 + Duration::from_millis(1500));
        assert_eq!(out.text().lines().count(), 1, "not again within a second");
        shared.tick(t0 + Duration::from_millis(2200));
        assert!(
            out.text()
                .ends_with("downloading http://symbols.example/1: 1.5 KiB / 3.0 MiB\n"),
            "{}",
            out.text()
        );
        shared.finished(
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
    fn sizes_read_naturally() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.0 KiB");
        assert_eq!(size(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(size(u64::MAX), "16.0 EiB");
    }
}
