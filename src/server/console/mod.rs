//! The browser console (`GET /console`): a page to try a crash through the normal
//! endpoints, see why a frame did not symbolicate (its module's candidates and each
//! download), and watch the service. This module owns its routes, the page's three
//! files (compiled into the binary from `page/`: nothing is read from disk at run time,
//! so it adds no way to read files), and the two read-only JSON documents the page
//! polls: `/console/api/status` and `/console/api/downloads`. What they show is
//! gathered where it happens: request outcomes by `observe`, downloads and the deny list
//! by `fetch`, cache lookups by `telemetry::history` (from the metrics registry),
//! disk use by `cache::usage`. `login` says who may open it.

mod login;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use super::observe::{AnsweredRequest, recent_requests};
use super::{AppState, Routes};
use crate::cache::kinds::ALL as CACHE_KINDS;
use crate::cache::usage::{DiskUsage, measure};
use crate::config::{Config, ConsoleConfig, FrontsConfig};
use crate::fetch::{BlockedHost, DownloadProgress, DownloadRecord, SourceTally};
use crate::telemetry::history::{History, Point};
use crate::units::rfc3339_millis as timestamp;

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/console.js");
const STYLE: &str = include_str!("page/console.css");

/// Only our own files, no inline code, and no framing by other pages.
const CSP: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                   base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// How often the charts get a point.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// A disk measurement older than this is redone (in the background) when asked for.
const DISK_REFRESH: Duration = Duration::from_secs(30);

/// What the console keeps while the server runs.
pub struct Console {
    started: SystemTime,
    max_concurrent: usize,
    max_disk_size: Option<u64>,
    cache_dir: std::path::PathBuf,
    max_disk_walk_entries: u64,
    history: Arc<History>,
    disk: Mutex<Option<DiskUsage>>,
    measuring: AtomicBool,
}

impl Console {
    /// `None` when the console is off; else starts sampling the metrics registry.
    pub fn new(
        config: &Config,
        metrics: &metrics_exporter_prometheus::PrometheusHandle,
    ) -> Option<Arc<Console>> {
        if !config.console_enabled() {
            return None;
        }
        let ConsoleConfig {
            history,
            max_disk_walk_entries,
            ..
        } = config.console;
        let points = (history.as_secs() / SAMPLE_INTERVAL.as_secs()).max(1);
        Some(Arc::new(Console {
            started: SystemTime::now(),
            max_concurrent: config.max_concurrent_requests,
            max_disk_size: config.caches.max_disk_size,
            cache_dir: config.cache_dir.clone(),
            max_disk_walk_entries,
            history: History::start(
                metrics.clone(),
                SAMPLE_INTERVAL,
                usize::try_from(points).unwrap_or(usize::MAX),
            ),
            disk: Mutex::new(None),
            measuring: AtomicBool::new(false),
        }))
    }

    /// The last disk measurement. The first call waits for one; later ones get the last
    /// and start a new one in the background once it is old, one at a time.
    async fn disk(self: &Arc<Self>) -> Option<DiskUsage> {
        let last = self.disk.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let stale = last
            .as_ref()
            .is_none_or(|d| d.measured.elapsed().unwrap_or_default() >= DISK_REFRESH);
        if !stale || self.measuring.swap(true, Ordering::AcqRel) {
            return last;
        }
        let console = self.clone();
        let measuring = tokio::task::spawn_blocking(move || {
            let usage = measure(
                &console.cache_dir,
                CACHE_KINDS,
                console.max_disk_walk_entries,
            );
            *console.disk.lock().unwrap_or_else(|e| e.into_inner()) = Some(usage.clone());
            console.measuring.store(false, Ordering::Release);
            usage
        });
        match last {
            Some(last) => Some(last),
            None => measuring.await.ok(),
        }
    }
}

/// The console's routes, behind its login.
pub fn routes(fronts: &FrontsConfig) -> Routes {
    let routes = Routes::default()
        .route(
            "/console",
            get(|| async { page(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/console.js",
            get(|| async { page(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { page(STYLE, "text/css; charset=utf-8") }),
        )
        .route("/console/api/status", get(status))
        .route("/console/api/downloads", get(downloads));
    login::guard(routes, fronts)
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response();
    secure(&mut response);
    response
}

/// Headers every console answer carries: the page's policy, and no caching (the API's
/// answers change each time; the page's files change with the binary).
fn secure(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn json<T: Serialize>(value: &T) -> Response {
    let mut response = axum::Json(value).into_response();
    secure(&mut response);
    response
}

#[derive(Serialize)]
struct Status {
    version: &'static str,
    started: String,
    now: String,
    requests: Requests,
    sources: Vec<SourceTally>,
    /// Downloads running now, with their bytes so far of the announced size.
    downloading: Vec<DownloadProgress>,
    deny_list: Vec<BlockedHost>,
    caches: Caches,
    series: Series,
}

#[derive(Serialize)]
struct Requests {
    in_flight: usize,
    max_concurrent: usize,
    recent: Vec<AnsweredRequest>,
}

#[derive(Serialize)]
struct Caches {
    kinds: Vec<CacheKindStatus>,
    disk: Disk,
}

#[derive(Serialize, PartialEq, Debug)]
struct CacheKindStatus {
    kind: String,
    hits: u64,
    misses: u64,
    errors: u64,
    disk_files: u64,
    disk_bytes: u64,
}

#[derive(Serialize)]
struct Disk {
    used_bytes: Option<u64>,
    max_bytes: Option<u64>,
    measured: Option<String>,
    /// False when the walk stopped at `console.max_disk_walk_entries`.
    complete: bool,
}

#[derive(Serialize)]
struct Series {
    interval_seconds: u64,
    points: Vec<Point>,
}

async fn status(State(state): State<AppState>) -> Response {
    let Some(console) = state.console.clone() else {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    };
    let disk = console.disk().await;
    let kinds = cache_kinds(&console.history.caches(), disk.as_ref());
    json(&Status {
        version: env!("CARGO_PKG_VERSION"),
        started: timestamp(console.started),
        now: timestamp(SystemTime::now()),
        requests: Requests {
            in_flight: state.service.in_flight(),
            max_concurrent: console.max_concurrent,
            recent: recent_requests(),
        },
        sources: state.downloader.ledger().sources(),
        downloading: state.downloader.in_flight(),
        deny_list: state.downloader.blocked_hosts(),
        caches: Caches {
            kinds,
            disk: Disk {
                used_bytes: disk.as_ref().map(|d| d.used_bytes),
                max_bytes: console.max_disk_size,
                measured: disk.as_ref().map(|d| timestamp(d.measured)),
                complete: disk.as_ref().is_some_and(|d| d.complete),
            },
        },
        series: Series {
            interval_seconds: console.history.interval().as_secs(),
            points: console.history.points(),
        },
    })
}

/// Every kind that was looked up or has files, in the kinds table's order (each kind's
/// directory exists from the start, so an empty one says nothing).
fn cache_kinds(
    lookups: &[crate::telemetry::history::CacheTotals],
    disk: Option<&DiskUsage>,
) -> Vec<CacheKindStatus> {
    CACHE_KINDS
        .iter()
        .filter_map(|kind| {
            // Every kind's counters exist from the start, at zero.
            let looked_up = lookups
                .iter()
                .find(|l| l.kind == kind.name)
                .filter(|l| l.hits + l.misses + l.errors > 0);
            let on_disk = disk
                .and_then(|d| d.kinds.iter().find(|k| k.kind == kind.name))
                .filter(|k| k.files > 0);
            if looked_up.is_none() && on_disk.is_none() {
                return None;
            }
            Some(CacheKindStatus {
                kind: kind.name.to_owned(),
                hits: looked_up.map_or(0, |l| l.hits),
                misses: looked_up.map_or(0, |l| l.misses),
                errors: looked_up.map_or(0, |l| l.errors),
                disk_files: on_disk.map_or(0, |k| k.files),
                disk_bytes: on_disk.map_or(0, |k| k.bytes),
            })
        })
        .collect()
}

#[derive(Serialize)]
struct Downloads {
    downloads: Vec<DownloadRecord>,
}

async fn downloads(State(state): State<AppState>) -> Response {
    json(&Downloads {
        downloads: state.downloader.ledger().recent(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::usage::KindUsage;
    use crate::telemetry::history::CacheTotals;

    #[test]
    fn cache_kinds_join_lookups_and_disk_use_in_table_order() {
        let lookups = [CacheTotals {
            kind: "symcaches".into(),
            hits: 4,
            misses: 1,
            errors: 0,
        }];
        let disk = DiskUsage {
            kinds: vec![KindUsage {
                kind: "objects",
                files: 2,
                bytes: 10,
            }],
            used_bytes: 10,
            measured: SystemTime::now(),
            complete: true,
        };
        let kinds = cache_kinds(&lookups, Some(&disk));
        let names: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(names, ["objects", "symcaches"]);
        assert_eq!((kinds[0].disk_files, kinds[0].hits), (2, 0));
        assert_eq!(
            (kinds[1].hits, kinds[1].misses, kinds[1].disk_bytes),
            (4, 1, 0)
        );
        assert!(cache_kinds(&[], None).is_empty());
        let empty_dir = DiskUsage {
            kinds: vec![KindUsage {
                kind: "cficaches",
                files: 0,
                bytes: 0,
            }],
            ..disk
        };
        assert!(cache_kinds(&[], Some(&empty_dir)).is_empty());
        let never_looked_up = [CacheTotals {
            kind: "proguard".into(),
            ..CacheTotals::default()
        }];
        assert!(cache_kinds(&never_looked_up, None).is_empty());
    }
}
