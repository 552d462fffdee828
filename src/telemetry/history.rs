//! The last minutes of the process's own metrics, for the console's charts: every
//! `interval` the Prometheus text that `GET /metrics` would answer is rendered and
//! parsed, and what changed since the previous sample becomes one point. Reading the
//! rendered registry, rather than a recorder of its own, keeps the console off the
//! request path: a request records its metrics once, whether anyone watches or not.
//! Points are kept in a ring of fixed length.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use metrics_exporter_prometheus::PrometheusHandle;
use prometheus_parse::{Sample, Scrape, Value};
use serde::Serialize;

use super::{
    CACHE_COMPUTE_ERRORS, CACHE_LOOKUPS, DOWNLOADS, HTTP_REQUEST_DURATION, HTTP_REQUESTS,
    REQUESTS_IN_FLIGHT,
};

/// What happened in one interval, ending at `time` (ms since the epoch).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Point {
    pub time: u64,
    /// Requests answered, but for health checks, metrics and the console itself.
    pub requests: u64,
    /// Of those, answered with a 4xx or 5xx status.
    pub errors: u64,
    /// Symbolication requests running at the end of the interval.
    pub in_flight: u64,
    pub downloads: u64,
    /// Downloads that failed for a reason other than the file's absence.
    pub download_failures: u64,
    /// Cache lookups answered from memory, disk, the shared cache, an older version or
    /// a remembered failure.
    pub cache_hits: u64,
    /// Cache lookups that computed (or downloaded) their item.
    pub cache_misses: u64,
    /// Mean time to answer the requests counted in `requests`.
    pub latency_ms: Option<f64>,
}

/// Lookups of one cache kind since the process started.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CacheTotals {
    pub kind: String,
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
}

/// Running totals read from one scrape; a point is the difference of two.
#[derive(Clone, Debug, Default, PartialEq)]
struct Totals {
    requests: f64,
    errors: f64,
    in_flight: f64,
    downloads: f64,
    download_failures: f64,
    cache_hits: f64,
    cache_misses: f64,
    duration_sum: f64,
    duration_count: f64,
    caches: BTreeMap<String, CacheTotals>,
}

pub struct History {
    interval: Duration,
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    points: VecDeque<Point>,
    last: Option<Totals>,
}

impl History {
    /// Samples `handle` every `interval` on a thread of its own, which ends soon after
    /// the returned history is dropped; at most `capacity` points are kept.
    pub fn start(handle: PrometheusHandle, interval: Duration, capacity: usize) -> Arc<History> {
        let history = Arc::new(History::new(interval, capacity));
        let weak: Weak<History> = Arc::downgrade(&history);
        let spawned = std::thread::Builder::new()
            .name("metrics-history".into())
            .spawn(move || {
                loop {
                    let Some(history) = weak.upgrade() else {
                        return;
                    };
                    history.sample(&handle.render(), SystemTime::now());
                    let interval = history.interval;
                    drop(history);
                    std::thread::sleep(interval);
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "cannot start the metrics history thread");
        }
        history
    }

    fn new(interval: Duration, capacity: usize) -> History {
        History {
            interval,
            capacity: capacity.max(1),
            state: Mutex::default(),
        }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The kept points, oldest first.
    pub fn points(&self) -> Vec<Point> {
        self.lock().points.iter().cloned().collect()
    }

    /// Each cache kind's lookups as of the last sample, by kind name.
    pub fn caches(&self) -> Vec<CacheTotals> {
        self.lock()
            .last
            .as_ref()
            .map(|totals| totals.caches.values().cloned().collect())
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one rendering of the registry, made at `now`. The first one only sets the
    /// baseline: what happened before the history started has no interval.
    fn sample(&self, rendered: &str, now: SystemTime) {
        let lines = rendered.lines().map(|line| Ok(line.to_owned()));
        let totals = match Scrape::parse(lines) {
            Ok(scrape) => totals(&scrape.samples),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the metrics registry");
                return;
            }
        };
        let mut state = self.lock();
        if let Some(last) = &state.last {
            let point = difference(last, &totals, now);
            if state.points.len() == self.capacity {
                state.points.pop_front();
            }
            state.points.push_back(point);
        }
        state.last = Some(totals);
    }
}

/// Whether requests to the route `pattern` are the service's work, rather than its
/// upkeep (health checks, scrapes) or the console watching it.
pub fn is_service_endpoint(pattern: &str) -> bool {
    !matches!(pattern, "/healthcheck" | "/ready" | "/metrics") && !pattern.starts_with("/console")
}

/// A metric's name as the Prometheus exporter renders it: dots become underscores, and
/// counters end in `_total`.
fn rendered_name(name: &str, counter: bool) -> String {
    let name = name.replace('.', "_");
    if counter {
        format!("{name}_total")
    } else {
        name
    }
}

fn totals(samples: &[Sample]) -> Totals {
    let requests = rendered_name(HTTP_REQUESTS, true);
    let in_flight = rendered_name(REQUESTS_IN_FLIGHT, false);
    let downloads = rendered_name(DOWNLOADS, true);
    let lookups = rendered_name(CACHE_LOOKUPS, true);
    let compute_errors = rendered_name(CACHE_COMPUTE_ERRORS, true);
    let duration = rendered_name(HTTP_REQUEST_DURATION, false);
    let duration_sum = format!("{duration}_sum");
    let duration_count = format!("{duration}_count");

    let mut totals = Totals::default();
    for sample in samples {
        let value = match sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            Value::Histogram(_) | Value::Summary(_) => continue,
        };
        let label = |name| sample.labels.get(name).unwrap_or_default();
        let metric = sample.metric.as_str();
        if metric == requests && is_service_endpoint(label("endpoint")) {
            totals.requests += value;
            if label("status").parse::<u16>().is_ok_and(|s| s >= 400) {
                totals.errors += value;
            }
        } else if metric == in_flight {
            totals.in_flight += value;
        } else if metric == downloads {
            totals.downloads += value;
            if !matches!(label("outcome"), "ok" | "not_found") {
                totals.download_failures += value;
            }
        } else if metric == lookups {
            let kind = cache_totals(&mut totals.caches, label("kind"));
            // `computed`: the item was made (or fetched) for this lookup.
            if label("layer") == "computed" {
                kind.misses += value as u64;
                totals.cache_misses += value;
            } else {
                kind.hits += value as u64;
                totals.cache_hits += value;
            }
        } else if metric == compute_errors {
            cache_totals(&mut totals.caches, label("kind")).errors += value as u64;
        } else if metric == duration_sum && is_service_endpoint(label("endpoint")) {
            totals.duration_sum += value;
        } else if metric == duration_count && is_service_endpoint(label("endpoint")) {
            totals.duration_count += value;
        }
    }
    totals
}

fn cache_totals<'a>(
    caches: &'a mut BTreeMap<String, CacheTotals>,
    kind: &str,
) -> &'a mut CacheTotals {
    caches
        .entry(kind.to_owned())
        .or_insert_with(|| CacheTotals {
            kind: kind.to_owned(),
            ..CacheTotals::default()
        })
}

/// The point between two samples. Counters only grow within a process, but a value
/// that went down (a series the exporter forgot) counts as no change, not as negative.
fn difference(before: &Totals, after: &Totals, now: SystemTime) -> Point {
    let delta = |a: f64, b: f64| (b - a).max(0.0).round() as u64;
    let count = after.duration_count - before.duration_count;
    let latency_ms =
        (count >= 1.0).then(|| (after.duration_sum - before.duration_sum).max(0.0) / count * 1e3);
    Point {
        time: now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        requests: delta(before.requests, after.requests),
        errors: delta(before.errors, after.errors),
        in_flight: after.in_flight.max(0.0).round() as u64,
        downloads: delta(before.downloads, after.downloads),
        download_failures: delta(before.download_failures, after.download_failures),
        cache_hits: delta(before.cache_hits, after.cache_hits),
        cache_misses: delta(before.cache_misses, after.cache_misses),
        latency_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// A registry of its own, rendered as the server's is, so the names and labels the
    /// history reads are the ones the exporter really writes.
    fn rendered(record: impl FnOnce()) -> (String, PrometheusHandle) {
        let recorder = PrometheusBuilder::new()
            .with_recommended_naming(true)
            .build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, record);
        (handle.render(), handle)
    }

    #[test]
    fn points_are_what_changed_between_two_renderings() {
        let recorder = PrometheusBuilder::new()
            .with_recommended_naming(true)
            .build_recorder();
        let handle = recorder.handle();
        let history = History::new(Duration::from_secs(2), 3);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/symbolicate", "status" => "200")
                .increment(5);
        });
        history.sample(&handle.render(), t0);
        assert!(
            history.points().is_empty(),
            "the first rendering is the baseline"
        );

        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/symbolicate", "status" => "200")
                .increment(2);
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/minidump", "status" => "400")
                .increment(1);
            // Upkeep and the console are not the service's work.
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/healthcheck", "status" => "200")
                .increment(50);
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/console/api/status", "status" => "200")
                .increment(9);
            metrics::histogram!(HTTP_REQUEST_DURATION, "endpoint" => "/symbolicate").record(0.010);
            metrics::histogram!(HTTP_REQUEST_DURATION, "endpoint" => "/symbolicate").record(0.030);
            metrics::histogram!(HTTP_REQUEST_DURATION, "endpoint" => "/healthcheck").record(5.0);
            metrics::gauge!(REQUESTS_IN_FLIGHT).set(4.0);
            metrics::counter!(DOWNLOADS, "source_type" => "http", "outcome" => "ok").increment(3);
            metrics::counter!(DOWNLOADS, "source_type" => "http", "outcome" => "not_found")
                .increment(2);
            metrics::counter!(DOWNLOADS, "source_type" => "s3", "outcome" => "timeout")
                .increment(1);
            metrics::counter!(CACHE_LOOKUPS, "kind" => "symcaches", "layer" => "memory")
                .increment(7);
            metrics::counter!(CACHE_LOOKUPS, "kind" => "symcaches", "layer" => "computed")
                .increment(1);
            metrics::counter!(CACHE_LOOKUPS, "kind" => "objects", "layer" => "disk").increment(2);
            metrics::counter!(CACHE_COMPUTE_ERRORS, "kind" => "symcaches").increment(1);
        });
        history.sample(&handle.render(), t0 + Duration::from_secs(2));

        let points = history.points();
        assert_eq!(points.len(), 1);
        let point = &points[0];
        assert_eq!(point.time, 1_002_000);
        assert_eq!((point.requests, point.errors), (3, 1));
        assert_eq!(point.in_flight, 4);
        assert_eq!((point.downloads, point.download_failures), (6, 1));
        assert_eq!((point.cache_hits, point.cache_misses), (9, 1));
        let latency = point.latency_ms.expect("two timed requests");
        assert!((latency - 20.0).abs() < 1e-6, "{latency}");
        assert_eq!(
            history.caches(),
            vec![
                CacheTotals {
                    kind: "objects".into(),
                    hits: 2,
                    misses: 0,
                    errors: 0
                },
                CacheTotals {
                    kind: "symcaches".into(),
                    hits: 7,
                    misses: 1,
                    errors: 1
                },
            ]
        );
    }

    #[test]
    fn the_ring_keeps_the_newest_points() {
        let (text, _handle) = rendered(|| {
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/symbolicate", "status" => "200")
                .increment(1);
        });
        let history = History::new(Duration::from_secs(1), 3);
        for second in 0..10 {
            history.sample(&text, UNIX_EPOCH + Duration::from_secs(second));
        }
        let times: Vec<u64> = history.points().iter().map(|p| p.time).collect();
        assert_eq!(times, vec![7_000, 8_000, 9_000]);
        assert!(
            history
                .points()
                .iter()
                .all(|p| p.requests == 0 && p.latency_ms.is_none())
        );
    }

    #[test]
    fn a_started_history_samples_on_its_own_and_stops_when_dropped() {
        let recorder = PrometheusBuilder::new()
            .with_recommended_naming(true)
            .build_recorder();
        let history = History::start(recorder.handle(), Duration::from_millis(10), 100);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while history.points().len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no points were sampled"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let weak = Arc::downgrade(&history);
        drop(history);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            weak.upgrade().is_none(),
            "the sampling thread let go of the history"
        );
    }

    #[test]
    fn upkeep_and_console_routes_are_not_service_work() {
        for pattern in [
            "/healthcheck",
            "/ready",
            "/metrics",
            "/console",
            "/console/api/status",
        ] {
            assert!(!is_service_endpoint(pattern), "{pattern}");
        }
        for pattern in ["/symbolicate", "/minidump", "/requests/{id}", "unmatched"] {
            assert!(is_service_endpoint(pattern), "{pattern}");
        }
    }
}
