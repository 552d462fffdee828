//! Metrics: every module records through the `metrics` crate's macros under the names
//! below; this module installs the one process-wide recorder behind them. It always
//! keeps a Prometheus registry (rendered at `GET /metrics`) and, when `metrics.statsd`
//! is set, also sends every recording to StatsD (DogStatsD tags, as upstream).
//! Names are dotted (`http.requests`); Prometheus shows the dots as underscores and
//! counters with a `_total` suffix. `history` keeps the last minutes of that registry
//! for the console's charts.

pub mod history;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_dogstatsd::DogStatsDBuilder;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::FanoutBuilder;
use serde::{Deserialize, Deserializer};

/// HTTP requests answered, by `endpoint` (the route pattern) and `status`.
pub const HTTP_REQUESTS: &str = "http.requests";
/// HTTP requests being answered right now.
pub const HTTP_REQUESTS_IN_FLIGHT: &str = "http.requests_in_flight";
/// Time from receiving a request to its response headers, by `endpoint`.
pub const HTTP_REQUEST_DURATION: &str = "http.request.duration_seconds";
/// Symbolication requests running in the request service (bounded by
/// `max_concurrent_requests`).
pub const REQUESTS_IN_FLIGHT: &str = "requests.in_flight";
/// Symbolication requests refused because `max_concurrent_requests` were running.
pub const REQUESTS_REJECTED: &str = "requests.rejected";
/// Polls (`GET /requests/{id}`), by `outcome`: `here` (this replica's id), `forwarded`
/// (sent on to the peer that minted it), `owner_unreachable` (that peer did not
/// answer), `unknown` (no such request, or its result expired).
pub const REQUEST_POLLS: &str = "requests.polls";
/// Symbolication requests that ended, by `status` (completed, failed, timeout,
/// internal_error).
pub const REQUESTS_FINISHED: &str = "requests.finished";
/// Cache lookups by cache `kind` and the `layer` that answered: memory, disk,
/// old_version, placeholder, shared or computed.
pub const CACHE_LOOKUPS: &str = "cache.lookups";
/// Computations of a cache item that failed (and were remembered as placeholders),
/// by `kind`.
pub const CACHE_COMPUTE_ERRORS: &str = "cache.compute_errors";
/// Downloads of source files by `source_type` and `outcome`.
pub const DOWNLOADS: &str = "downloads";
/// Bytes downloaded (before decompression), by `source_type`.
pub const DOWNLOADED_BYTES: &str = "downloads.bytes";
/// How long downloads took, retries included, by `source_type`.
pub const DOWNLOAD_DURATION: &str = "downloads.duration_seconds";
/// Downloads running now.
pub const DOWNLOADS_IN_FLIGHT: &str = "downloads.in_flight";
/// Bytes the running downloads have on disk so far.
pub const DOWNLOADS_IN_FLIGHT_BYTES: &str = "downloads.in_flight.bytes";
/// Sizes the sources announced for the running downloads, summed (a download whose
/// size is not announced adds nothing).
pub const DOWNLOADS_IN_FLIGHT_TOTAL: &str = "downloads.in_flight.total_bytes";
/// Uploads to the shared cache by `outcome` (ok, error, dropped).
pub const SHARED_CACHE_UPLOADS: &str = "shared_cache.uploads";
/// Bytes uploaded to the shared cache.
pub const SHARED_CACHE_UPLOADED_BYTES: &str = "shared_cache.uploads.bytes";
/// Lookups in the shared cache by `outcome` (hit, miss, error).
pub const SHARED_CACHE_FETCHES: &str = "shared_cache.fetches";
/// Symstore indexes that could not be loaded, so every path was tried.
pub const SYMSTORE_INDEX_UNAVAILABLE: &str = "symstore_index.unavailable";
/// Candidate paths not fetched because a symstore index does not list them.
pub const SYMSTORE_INDEX_SKIPPED_PATHS: &str = "symstore_index.skipped_paths";
/// Parses of untrusted input that panicked and were answered `malformed`, by `what`.
pub const PARSER_PANICS: &str = "parser.panics";
/// Native modules answered from their debug file by a lazy reader while the SymCache
/// was still being built (cold requests).
pub const LAZY_ANSWERS: &str = "symbolication.lazy_answers";
/// Source maps decoded to answer cold `/symbolicate-js` requests directly while their
/// SourceMapCache did not exist yet.
pub const SOURCEMAP_DIRECT_ANSWERS: &str = "sourcemap.direct_answers";
/// Scope parses of minified files for direct answers, by `started`: `ahead` (as soon as
/// a bundled file was read, before its map was found) or `with_map`.
pub const SOURCEMAP_SCOPE_PARSES: &str = "sourcemap.scope_parses";
/// Minidump frames unwound from their module's own DWARF CFI while its CFI cache was
/// still being built (cold walks).
pub const LAZY_UNWINDS: &str = "stackwalk.lazy_unwinds";
/// Connections dropped because their client read nothing of the answer for
/// `write_timeout`.
pub const WRITE_TIMEOUTS: &str = "connections.write_timeouts";
/// Connections closed because no request head arrived within `header_read_timeout`
/// (idle kept-alive connections included).
pub const HEAD_TIMEOUTS: &str = "connections.head_timeouts";
/// Connections accepted past `max_connections` that may only ask for `/healthcheck`.
pub const HEALTH_ONLY_CONNECTIONS: &str = "connections.health_only";
/// Parts of symbfile uploads removed because the upload was refused or expired, by
/// `store` (`local`, `shared`) and `reason` (`refused`, `expired`).
pub const SYMBFILE_PARTS_REMOVED: &str = "symbfile.parts_removed";
/// Objects an upload brought to the store, by `outcome` (`stored`, `replaced`,
/// `kept_existing`, `already_stored`).
pub const STORE_PUBLISHED: &str = "store.published";
/// Files the store's retention sweep removed, by `reason` (`superseded`, `expired`).
pub const STORE_RETENTION_REMOVED: &str = "store.retention_removed";
/// Chunks of sentry-cli uploads, by `outcome`: `stored`, `duplicate` (already held,
/// not written again), `refused` (bad checksum or size), `removed` (assembled, or
/// abandoned past `store.chunk_upload.chunk_max_age`).
pub const SENTRY_CLI_CHUNKS: &str = "sentry_cli.chunks";
/// Files sentry-cli asked to assemble, by `outcome`: `missing_chunks`, `published`,
/// `already_assembled`, `refused`.
pub const SENTRY_CLI_ASSEMBLES: &str = "sentry_cli.assembles";

/// Access log lines dropped because their queue (`logging.queue_lines`) was full: the
/// log's reader fell behind. No other line is ever dropped.
pub const LOGGING_DROPPED_ACCESS_LINES: &str = "logging.dropped_access_lines";

/// `HTTP_REQUESTS_IN_FLIGHT`, kept as a plain count: it changes twice per request, and
/// handing each change to the recorder (through the fan-out, as an atomic float) cost
/// more than the rest of a health check's metrics. It reaches the recorder when someone
/// reads: a scrape, the history's sample, the upkeep that feeds StatsD.
pub static HTTP_IN_FLIGHT: AtomicI64 = AtomicI64::new(0);

/// Access lines dropped because their queue was full ([`LOGGING_DROPPED_ACCESS_LINES`]),
/// kept as a plain count like [`HTTP_IN_FLIGHT`]: asking the recorder on a line dropped
/// for overload would add to the load.
pub static ACCESS_LINES_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Hands the counts kept outside the recorder to it; call before reading the registry.
pub fn publish_counts() {
    metrics::gauge!(HTTP_REQUESTS_IN_FLIGHT).set(HTTP_IN_FLIGHT.load(Ordering::Relaxed) as f64);
    metrics::counter!(LOGGING_DROPPED_ACCESS_LINES)
        .absolute(ACCESS_LINES_DROPPED.load(Ordering::Relaxed));
}

/// Buckets of the latency histograms, in seconds: from a warm request (milliseconds) to
/// the 15 minute request limit.
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    900.0,
];

/// How often histogram samples are folded into the Prometheus buckets when nobody
/// scrapes, so that they do not pile up.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The `metrics` section of the config, with upstream's keys and defaults.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct MetricsConfig {
    /// `host:port` of a StatsD server; unset or empty: no StatsD.
    #[serde(deserialize_with = "deserialize_statsd")]
    pub statsd: Option<String>,
    /// Put before every StatsD metric name, joined with a dot.
    pub prefix: String,
    /// Name of a tag that carries this machine's host name.
    pub hostname_tag: Option<String>,
    /// Name of a tag that carries the environment (`SENTRY_ENVIRONMENT`).
    pub environment_tag: Option<String>,
    /// Name of a tag that carries the platform (`SYMBOLICATOR_PLATFORM`).
    pub platform_tag: Option<String>,
    /// Tags sent with every StatsD metric.
    pub custom_tags: BTreeMap<String, String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            statsd: non_empty(std::env::var("STATSD_SERVER").ok()),
            prefix: "symbolicator".into(),
            hostname_tag: None,
            environment_tag: None,
            platform_tag: None,
            custom_tags: BTreeMap::new(),
        }
    }
}

/// Self-hosted's config says `statsd: "${SYMBOLICATOR_STATSD_ADDR}"`, which is empty
/// where no StatsD runs: that means none, not a bad address.
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

fn deserialize_statsd<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(non_empty(Option::<String>::deserialize(d)?))
}

/// What the tag options and the environment they read come to.
struct TagSources {
    hostname: Option<String>,
    environment: Option<String>,
    platform: Option<String>,
}

impl TagSources {
    fn from_env() -> Self {
        TagSources {
            hostname: hostname::get().ok().and_then(|h| h.into_string().ok()),
            // What the Sentry SDK, whose environment upstream reports, would say.
            environment: Some(std::env::var("SENTRY_ENVIRONMENT").unwrap_or_else(|_| {
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "production"
                }
                .to_owned()
            })),
            platform: std::env::var("SYMBOLICATOR_PLATFORM").ok(),
        }
    }
}

/// The tags of every StatsD metric: `custom_tags`, plus the host name, environment and
/// platform under the names configured for them (those win over a custom tag of the
/// same name, as upstream).
fn global_tags(config: &MetricsConfig, sources: TagSources) -> BTreeMap<String, String> {
    let mut tags = config.custom_tags.clone();
    for (tag, value, what) in [
        (&config.hostname_tag, sources.hostname, "host name"),
        (&config.environment_tag, sources.environment, "environment"),
        (&config.platform_tag, sources.platform, "platform"),
    ] {
        let Some(tag) = tag else { continue };
        if tags.contains_key(tag) {
            tracing::warn!(%tag, "metrics tag is set both as the {what} tag and as a custom tag");
        }
        match value {
            Some(value) => {
                tags.insert(tag.clone(), value);
            }
            None => tracing::warn!(%tag, "the {what} is not available for its metrics tag"),
        }
    }
    tags
}

/// Installs the process-wide recorder on the first call and returns the handle that
/// renders the Prometheus text; later calls (more servers in one test process) get the
/// same handle and their config is not looked at. Counters registered before this
/// call record nothing, so it runs before anything registers one.
pub fn install(config: &MetricsConfig) -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let (recorder, handle) = build(config, TagSources::from_env());
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics stays empty");
            }
            describe();
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_INTERVAL);
                        publish_counts();
                        upkeep.run_upkeep();
                    }
                });
            if let Err(err) = spawned {
                tracing::warn!(error = %err, "cannot start the metrics upkeep thread");
            }
            handle
        })
        .clone()
}

/// The recorder to install (Prometheus, and StatsD when configured and reachable) and
/// the handle that renders the Prometheus text. Prometheus alone is installed as it is:
/// a fanout of one would put its own handle in front of every count and timing.
fn build(
    config: &MetricsConfig,
    tags: TagSources,
) -> (Box<dyn metrics::Recorder + Sync>, PrometheusHandle) {
    let prometheus = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets_for_metric(Matcher::Suffix("duration_seconds".into()), DURATION_BUCKETS)
        .expect("the buckets are not empty")
        .build_recorder();
    let handle = prometheus.handle();
    let statsd = config.statsd.as_ref().and_then(|addr| {
        match statsd_recorder(config, addr, tags) {
            Ok(statsd) => {
                tracing::info!(%addr, prefix = %config.prefix, "sending metrics to StatsD");
                Some(statsd)
            }
            // A metrics sink that is down or misnamed must not keep the server from
            // symbolicating.
            Err(err) => {
                tracing::warn!(%addr, error = %err, "cannot send metrics to StatsD");
                None
            }
        }
    });
    let recorder: Box<dyn metrics::Recorder + Sync> = match statsd {
        Some(statsd) => Box::new(
            FanoutBuilder::default()
                .add_recorder(prometheus)
                .add_recorder(statsd)
                .build(),
        ),
        None => Box::new(prometheus),
    };
    (recorder, handle)
}

fn statsd_recorder(
    config: &MetricsConfig,
    addr: &str,
    tags: TagSources,
) -> Result<metrics_exporter_dogstatsd::DogStatsDRecorder, metrics_exporter_dogstatsd::BuildError> {
    let labels = global_tags(config, tags)
        .into_iter()
        .map(|(key, value)| metrics::Label::new(key, value))
        .collect();
    let mut builder = DogStatsDBuilder::default()
        .with_remote_address(addr)?
        // The exporter's own `datadog.dogstatsd.client.*` series would reach plain
        // StatsD servers too, unprefixed.
        .with_telemetry(false)
        .with_global_labels(labels);
    if !config.prefix.is_empty() {
        builder = builder.set_global_prefix(config.prefix.as_str());
    }
    builder.build()
}

/// Units and help texts; Prometheus shows them as `# HELP` and name suffixes.
fn describe() {
    let counters = [
        (
            HTTP_REQUESTS,
            "HTTP requests answered, by endpoint and status",
        ),
        (
            REQUESTS_REJECTED,
            "symbolication requests refused: max_concurrent_requests were running",
        ),
        (
            REQUESTS_FINISHED,
            "symbolication requests that ended, by status",
        ),
        (
            REQUEST_POLLS,
            "polls for pending requests, by outcome (here, forwarded, owner_unreachable, unknown)",
        ),
        (
            CACHE_LOOKUPS,
            "cache lookups, by cache kind and the layer that answered",
        ),
        (
            CACHE_COMPUTE_ERRORS,
            "cache item computations that failed, by cache kind",
        ),
        (
            DOWNLOADS,
            "source file downloads, by source type and outcome",
        ),
        (SHARED_CACHE_UPLOADS, "shared cache uploads, by outcome"),
        (SHARED_CACHE_FETCHES, "shared cache lookups, by outcome"),
        (
            SYMSTORE_INDEX_UNAVAILABLE,
            "symstore indexes that could not be loaded",
        ),
        (
            SYMSTORE_INDEX_SKIPPED_PATHS,
            "paths not fetched because a symstore index lacks them",
        ),
        (
            PARSER_PANICS,
            "parses of untrusted input that panicked (answered malformed), by parser",
        ),
        (
            LAZY_ANSWERS,
            "native modules answered by a lazy reader while their SymCache was built",
        ),
        (
            SOURCEMAP_DIRECT_ANSWERS,
            "source maps decoded to answer cold requests before their SourceMapCache existed",
        ),
        (
            SOURCEMAP_SCOPE_PARSES,
            "minified files parsed for their scopes to answer cold requests, by when it started",
        ),
        (
            LAZY_UNWINDS,
            "minidump frames unwound from the file's DWARF CFI while its CFI cache was built",
        ),
        (
            WRITE_TIMEOUTS,
            "connections dropped: the client read nothing of its answer for write_timeout",
        ),
        (
            SENTRY_CLI_CHUNKS,
            "chunks of sentry-cli uploads, by outcome (stored, duplicate, refused, removed)",
        ),
        (
            SENTRY_CLI_ASSEMBLES,
            "files sentry-cli asked to assemble, by outcome",
        ),
        (
            HEAD_TIMEOUTS,
            "connections closed: no request head arrived within header_read_timeout",
        ),
        (
            HEALTH_ONLY_CONNECTIONS,
            "connections accepted past max_connections that may only ask for /healthcheck",
        ),
        (
            SYMBFILE_PARTS_REMOVED,
            "parts of refused or expired symbfile uploads removed, by store and reason",
        ),
        (
            STORE_PUBLISHED,
            "objects uploads brought to the store, by outcome",
        ),
        (
            STORE_RETENTION_REMOVED,
            "files the store's retention sweep removed, by reason",
        ),
        (
            LOGGING_DROPPED_ACCESS_LINES,
            "access log lines dropped because the log's reader fell behind (logging.queue_lines)",
        ),
    ];
    for (name, help) in counters {
        describe_counter!(name, Unit::Count, help);
    }
    describe_counter!(
        DOWNLOADED_BYTES,
        Unit::Bytes,
        "bytes downloaded from sources, by source type"
    );
    describe_counter!(
        SHARED_CACHE_UPLOADED_BYTES,
        Unit::Bytes,
        "bytes uploaded to the shared cache"
    );
    describe_gauge!(
        HTTP_REQUESTS_IN_FLIGHT,
        Unit::Count,
        "HTTP requests being answered"
    );
    describe_gauge!(
        REQUESTS_IN_FLIGHT,
        Unit::Count,
        "symbolication requests running"
    );
    describe_gauge!(DOWNLOADS_IN_FLIGHT, Unit::Count, "downloads running");
    describe_gauge!(
        DOWNLOADS_IN_FLIGHT_BYTES,
        Unit::Bytes,
        "bytes the running downloads have so far"
    );
    describe_gauge!(
        DOWNLOADS_IN_FLIGHT_TOTAL,
        Unit::Bytes,
        "announced sizes of the running downloads, summed"
    );
    describe_histogram!(
        HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "time to answer an HTTP request, by endpoint"
    );
    describe_histogram!(
        DOWNLOAD_DURATION,
        Unit::Seconds,
        "time a download took, retries included, by source type"
    );
}

/// What one request caused in the caches and on the network, for fronts that report it
/// to the client (Mozilla's `Debug: true`). Metrics add up over the whole process; this
/// adds up what ran inside [`RequestStats::scope`]: the recording functions below reach
/// it through a task-local, so work on other tasks (background refreshes, uploads to the
/// shared cache) is not counted, and outside a scope they cost one failed look-up.
#[derive(Default)]
pub struct RequestStats(Mutex<RequestStatsData>);

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestStatsData {
    /// By cache kind (`symcaches`, `objects`, ...).
    pub cache: BTreeMap<&'static str, CacheLookupStats>,
    pub downloads: DownloadStats,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheLookupStats {
    pub lookups: u64,
    /// Lookups that had to compute the item (download it, build it); the others were
    /// answered by the memory, disk or shared cache.
    pub computed: u64,
    /// Time spent in lookups of this kind; a computing lookup includes the lookups of
    /// other kinds it made.
    pub time: Duration,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DownloadStats {
    pub count: u64,
    pub failed: u64,
    /// Bytes of the downloads that succeeded, as they came (before decompression).
    pub bytes: u64,
    pub time: Duration,
}

tokio::task_local! {
    static REQUEST_STATS: Arc<RequestStats>;
    /// A cache kind whose lookups the carrying request noted itself (see
    /// [`RequestStats::carried_except`]).
    static NOTED_ELSEWHERE: Option<&'static str>;
}

impl RequestStats {
    /// Runs `work`, recording what it causes into `self`.
    pub async fn scope<F: Future>(self: &Arc<Self>, work: F) -> F::Output {
        REQUEST_STATS.scope(self.clone(), work).await
    }

    pub fn snapshot(&self) -> RequestStatsData {
        self.0.lock().unwrap().clone()
    }

    /// `work` recording into the current request's stats, for work a request starts on
    /// a task of its own (a cache build it would otherwise have run itself).
    pub fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
        Self::carried_except(None, work)
    }

    /// [`carried`](Self::carried), but lookups in the cache `kind` are not noted: the
    /// request noted that lookup itself, because it answers without waiting for `work`,
    /// which may note it only after the answer has been written (or before: the count
    /// would then depend on which came first).
    pub fn carried_except<F: Future>(
        kind: Option<&'static str>,
        work: F,
    ) -> impl Future<Output = F::Output> {
        let current = REQUEST_STATS.try_with(Arc::clone).ok();
        async move {
            match current {
                Some(stats) => {
                    REQUEST_STATS
                        .scope(stats, NOTED_ELSEWHERE.scope(kind, work))
                        .await
                }
                None => work.await,
            }
        }
    }
}

fn in_request(record: impl FnOnce(&mut RequestStatsData)) {
    let _ = REQUEST_STATS.try_with(|stats| record(&mut stats.0.lock().unwrap()));
}

/// `record` for a lookup in the cache `kind`, unless the request noted it itself. Only
/// requests with stats look further than the first task-local: most have none.
fn in_request_for(kind: &'static str, record: impl FnOnce(&mut CacheLookupStats)) {
    in_request(|stats| {
        let noted_elsewhere = NOTED_ELSEWHERE
            .try_with(|noted| *noted == Some(kind))
            .unwrap_or(false);
        if !noted_elsewhere {
            record(stats.cache.entry(kind).or_default());
        }
    });
}

/// A lookup in the cache `kind` that took `elapsed`.
pub fn note_cache_lookup(kind: &'static str, elapsed: Duration) {
    in_request_for(kind, |stats| {
        stats.lookups += 1;
        stats.time += elapsed;
    });
}

/// A lookup in the cache `kind` that computes its item.
pub fn note_cache_compute(kind: &'static str) {
    in_request_for(kind, |stats| stats.computed += 1);
}

/// A download that took `elapsed`: its bytes, or `None` when it failed.
pub fn note_download(bytes: Option<u64>, elapsed: Duration) {
    in_request(|stats| {
        let downloads = &mut stats.downloads;
        downloads.count += 1;
        downloads.time += elapsed;
        match bytes {
            Some(bytes) => downloads.bytes += bytes,
            None => downloads.failed += 1,
        }
    });
}

/// Lets a unit test read what the metric handles made inside `build` record, through a
/// recorder of its own: the process-wide one is never touched.
#[cfg(test)]
pub(crate) fn recorded<T>(build: impl FnOnce() -> T) -> (T, Recorded) {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let value = metrics::with_local_recorder(&recorder, build);
    let recorded = Recorded {
        snapshotter,
        totals: Default::default(),
    };
    (value, recorded)
}

/// A counter's name and its labels, sorted.
#[cfg(test)]
type SeriesKey = (String, Vec<(String, String)>);

#[cfg(test)]
pub(crate) struct Recorded {
    snapshotter: metrics_util::debugging::Snapshotter,
    /// A snapshot drains the counters it reads, so what was read is added up here.
    totals: std::sync::Mutex<BTreeMap<SeriesKey, u64>>,
}

#[cfg(test)]
impl Recorded {
    /// The counter `name` with exactly `labels` (in any order); 0 when never counted.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut totals = self.totals.lock().unwrap();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            if let metrics_util::debugging::DebugValue::Counter(n) = value {
                let mut labels: Vec<(String, String)> = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                *totals
                    .entry((key.key().name().to_owned(), labels))
                    .or_default() += n;
            }
        }
        let mut want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        totals.get(&(name.to_owned(), want)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> MetricsConfig {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn sources() -> TagSources {
        TagSources {
            hostname: Some("box-1".into()),
            environment: Some("prod".into()),
            platform: None,
        }
    }

    #[tokio::test]
    async fn work_carried_except_a_kind_notes_everything_but_that_kind() {
        let stats = Arc::new(RequestStats::default());
        stats
            .scope(async {
                let build = tokio::spawn(RequestStats::carried_except(Some("symcaches"), async {
                    note_cache_compute("symcaches");
                    note_cache_lookup("symcaches", Duration::from_millis(4));
                    note_cache_lookup("objects", Duration::from_millis(2));
                    note_download(Some(40), Duration::from_millis(3));
                    // Work it carries on in turn notes as usual.
                    RequestStats::carried(async {
                        note_cache_lookup("cficaches", Duration::from_millis(1));
                    })
                    .await;
                }));
                build.await.unwrap();
                // Carried as a whole, the same work counts everything.
                tokio::spawn(RequestStats::carried(async {
                    note_cache_lookup("symcaches", Duration::from_millis(5));
                }))
                .await
                .unwrap();
            })
            .await;
        let data = stats.snapshot();
        assert_eq!(
            data.cache["symcaches"],
            CacheLookupStats {
                lookups: 1,
                computed: 0,
                time: Duration::from_millis(5),
            }
        );
        assert_eq!(data.cache["objects"].lookups, 1);
        assert_eq!(data.cache["cficaches"].lookups, 1);
        assert_eq!(data.downloads.count, 1);
    }

    #[tokio::test]
    async fn request_stats_count_only_inside_their_scope() {
        let stats = Arc::new(RequestStats::default());
        note_download(Some(100), Duration::from_millis(5));
        stats
            .scope(async {
                note_cache_lookup("symcaches", Duration::from_millis(2));
                note_cache_compute("symcaches");
                note_cache_lookup("symcaches", Duration::from_millis(1));
                note_download(Some(40), Duration::from_millis(3));
                note_download(None, Duration::from_millis(1));
                // Another task is another request (or background work).
                tokio::spawn(async { note_download(Some(7), Duration::ZERO) })
                    .await
                    .unwrap();
            })
            .await;
        note_cache_lookup("symcaches", Duration::from_millis(9));
        let data = stats.snapshot();
        assert_eq!(
            data.cache["symcaches"],
            CacheLookupStats {
                lookups: 2,
                computed: 1,
                time: Duration::from_millis(3),
            }
        );
        assert_eq!(
            data.downloads,
            DownloadStats {
                count: 2,
                failed: 1,
                bytes: 40,
                time: Duration::from_millis(4),
            }
        );
    }

    #[test]
    fn an_empty_statsd_address_means_none() {
        assert_eq!(config("statsd: ''").statsd, None);
        assert_eq!(config("statsd: '  '").statsd, None);
        assert_eq!(config("statsd: ~").statsd, None);
        assert_eq!(
            config("statsd: 'localhost:8125'").statsd.as_deref(),
            Some("localhost:8125")
        );
        assert_eq!(config("custom_tags: {}").prefix, "symbolicator");
    }

    #[test]
    fn tag_options_add_tags_that_win_over_custom_ones() {
        let config = config(
            "hostname_tag: host\nenvironment_tag: env\nplatform_tag: platform\n\
             custom_tags: {env: custom, region: eu}",
        );
        let tags = global_tags(&config, sources());
        let want: BTreeMap<String, String> = [("host", "box-1"), ("env", "prod"), ("region", "eu")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        // The platform is not set in the environment: no tag rather than an empty one.
        assert_eq!(tags, want);
    }

    #[test]
    fn an_unresolvable_statsd_address_leaves_prometheus_working() {
        let config = config("statsd: 'no-such-host.invalid:8125'");
        let (recorder, handle) = build(&config, sources());
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!(HTTP_REQUESTS, "endpoint" => "/x", "status" => "200").increment(2);
        });
        let text = handle.render();
        assert!(
            text.contains(r#"http_requests_total{endpoint="/x",status="200"} 2"#),
            "{text}"
        );
    }
}
