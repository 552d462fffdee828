//! What every request leaves behind, in one service around the router: a request id, a
//! log line and its metrics.
//!
//! - **Id.** The client's `x-request-id` when it sent a usable one (so a proxy's id
//!   follows the request), a new UUID otherwise; echoed in the answer's `x-request-id`
//!   header so a user can quote it.
//! - **Log line.** One per request at `info` (target `omnisym::access`): method, path,
//!   status, duration and the id, formatted by a thread of its own in the server
//!   ([`start_access_log`]) from the parts the request queues.
//! - **Metrics.** Count, latency and requests in flight, labelled by route pattern
//!   (`/requests/{id}`), never by the path itself, so the number of series stays
//!   bounded whatever clients request.
//!
//! - **Host.** A request for a host this server does not answer for (`hosts`: the
//!   defence against DNS rebinding) is answered 421 here, before the router, whatever
//!   its route; its log line says so and names the host.
//!
//! - **Recent requests.** When the console is on, the last requests of the service's
//!   own endpoints (not health checks, scrapes or the console) are kept in a short ring
//!   for its status view; other requests do not touch it.
//!
//! This is one hand-written service rather than a stack of `from_fn` middlewares: those
//! box a future and clone the inner service per request, and they looked up each
//! metric by name and labels per request. On two cores that per-request work halved
//! the rate of `GET /healthcheck`, the floor of every request.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use metrics::{Counter, Histogram};
use rustc_hash::FxHashMap;
use tower::Service;

use super::ApiError;
use super::headers::named;
use super::hosts::HostPolicy;
use crate::telemetry::history::is_service_endpoint;
use crate::telemetry::{
    ACCESS_LINES_DROPPED, HTTP_IN_FLIGHT, HTTP_REQUEST_DURATION, HTTP_REQUESTS,
};

/// The target of the access log lines.
pub const ACCESS_LOG_TARGET: &str = "omnisym::access";

/// Access lines on their way to the access log's thread (see [`start_access_log`]);
/// unset outside the server, where each line is logged where it happens.
static ACCESS_LOG: OnceLock<SyncSender<AccessMessage>> = OnceLock::new();

enum AccessMessage {
    Line(AccessLine),
    /// Answered once every line queued before it is logged.
    Flush(SyncSender<()>),
}

/// How long the access log's thread lets lines gather once it has logged what was
/// queued. A thread that waits for its next line is woken by whoever queues it: a
/// system call on the request's thread for every line, when lines come in slower than
/// the thread logs them. A line is logged at most this much later.
const ACCESS_LOG_LINGER: Duration = Duration::from_millis(5);

/// How long the server's exit waits for the access log's thread to log what is queued.
const ACCESS_LOG_FLUSH: Duration = Duration::from_secs(2);

/// Hands the access lines of requests to a thread of their own, which formats and logs
/// them, through a queue of `lines`: a request only moves its line's parts into the
/// queue, or drops them when it is full (counted as `logging.dropped_access_lines`:
/// the log's reader fell behind). Formatting a line (its time, its fields) was most of
/// what the access log cost a request. A line's time is when the thread logs it, at
/// most [`ACCESS_LOG_LINGER`] after the answer unless the log is behind. Dropping the
/// guard logs what is queued (waiting up to [`ACCESS_LOG_FLUSH`]).
pub fn start_access_log(lines: usize, mut writer: AccessWriter) -> std::io::Result<AccessLog> {
    let (queue, lines) = std::sync::mpsc::sync_channel(lines.max(1));
    std::thread::Builder::new()
        .name("log-access".into())
        .spawn(move || {
            while let Ok(message) = lines.recv() {
                let mut next = Some(message);
                while let Some(message) = next {
                    match message {
                        AccessMessage::Line(line) => writer.line(&line),
                        AccessMessage::Flush(done) => {
                            writer.flush();
                            let _ = done.send(());
                        }
                    }
                    next = lines.try_recv().ok();
                }
                writer.flush();
                std::thread::sleep(ACCESS_LOG_LINGER);
            }
        })?;
    // A second server in one process (tests) keeps the first one's queue.
    let _ = ACCESS_LOG.set(queue);
    Ok(AccessLog(()))
}

/// How the access log's thread writes its lines.
pub enum AccessWriter {
    /// Through the log, in whatever format it has.
    Log,
    /// Straight to `out`, as the log's compact format without colours writes them (with
    /// the time, or `simplified`: without), in writes of whole lines no longer than a
    /// pipe writes atomically. The log's formatter (its time, its fields through
    /// `fmt::Debug`, its colour wrappers even when colours are off) was a tenth of the
    /// server's CPU under `GET /healthcheck` load; this writes the same bytes for a
    /// fraction of it.
    Compact {
        out: Box<dyn std::io::Write + Send>,
        time: Option<Stamp>,
        batch: Vec<u8>,
    },
}

impl AccessWriter {
    pub fn compact(out: Box<dyn std::io::Write + Send>, time: bool) -> Self {
        AccessWriter::Compact {
            out,
            time: time.then(Stamp::default),
            batch: Vec::with_capacity(libc::PIPE_BUF),
        }
    }

    fn line(&mut self, line: &AccessLine) {
        let AccessWriter::Compact { out, time, batch } = self else {
            return line.log();
        };
        let start = batch.len();
        if let Some(stamp) = time {
            stamp.write(batch, SystemTime::now());
        }
        line.write_compact(batch);
        if batch.len() > libc::PIPE_BUF && start > 0 {
            let _ = out.write_all(&batch[..start]);
            batch.drain(..start);
        }
    }

    fn flush(&mut self) {
        if let AccessWriter::Compact { out, batch, .. } = self
            && !batch.is_empty()
        {
            let _ = out.write_all(batch);
            batch.clear();
        }
    }
}

/// The time of access lines as the log's formatter writes it (RFC 3339 in UTC, with
/// microseconds, and a space), its date and time of day remembered for the second they
/// name: lines come by the thousand each second, and working out a date is most of what
/// writing one costs.
#[derive(Default)]
pub struct Stamp {
    /// The second since the epoch that `to_second` names.
    second: Option<u64>,
    /// `YYYY-MM-DDTHH:MM:SS`.
    to_second: Vec<u8>,
}

impl Stamp {
    fn write(&mut self, out: &mut Vec<u8>, time: SystemTime) {
        let since = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let second = since.as_secs();
        if self.second != Some(second) {
            let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(second);
            let text = humantime::format_rfc3339_seconds(whole).to_string();
            self.to_second.clear();
            self.to_second
                .extend_from_slice(text.trim_end_matches('Z').as_bytes());
            self.second = Some(second);
        }
        out.extend_from_slice(&self.to_second);
        let mut micros = since.subsec_micros();
        let mut digits = [b'0'; 6];
        for digit in digits.iter_mut().rev() {
            *digit = b'0' + (micros % 10) as u8;
            micros /= 10;
        }
        out.push(b'.');
        out.extend_from_slice(&digits);
        out.extend_from_slice(b"Z ");
    }
}

/// See [`start_access_log`].
#[must_use = "dropping it ends the access log"]
pub struct AccessLog(());

impl Drop for AccessLog {
    fn drop(&mut self) {
        let Some(queue) = ACCESS_LOG.get() else {
            return;
        };
        let deadline = Instant::now() + ACCESS_LOG_FLUSH;
        let (done, flushed) = std::sync::mpsc::sync_channel(1);
        let mut flush = AccessMessage::Flush(done);
        loop {
            match queue.try_send(flush) {
                Ok(()) => break,
                Err(TrySendError::Full(again)) if Instant::now() < deadline => {
                    flush = again;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return,
            }
        }
        let _ = flushed.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-sent id kept; a longer one is replaced, not truncated.
const MAX_CLIENT_ID_LEN: usize = 128;

/// The endpoint label of requests that matched no route: their paths are whatever
/// clients sent, so they share one label.
const UNMATCHED: &str = "unmatched";

/// Requests of the service's endpoints kept for the console.
const RECENT_REQUESTS: usize = 100;

/// The most of a refused host the log line shows (a DNS name has at most 253 bytes).
const MAX_LOGGED_HOST: usize = 255;

/// Wraps the finished router from outside: every request passes through once, where
/// `Router::layer` would box every route once more (a boxed route is cloned and its
/// future allocated on every request). The router's route patterns, which it does not
/// expose, come in beside it to label the metrics.
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    labels: &'static Labels,
}

impl<S> Observe<S> {
    /// `watch`: whether the last requests are kept (the console is on); `hosts`: the
    /// hosts answered. The labels are made once per router and kept for the life of
    /// the process (a server makes one).
    pub fn new(inner: S, patterns: &[&'static str], watch: bool, hosts: HostPolicy) -> Self {
        let labels = Box::leak(Box::new(Labels {
            hosts,
            ..Labels::new(patterns, watch)
        }));
        Observe { inner, labels }
    }
}

/// Which endpoint a path is, as the router matches it: the pattern's own path for
/// routes without parameters (one hash), else the router's matcher on the patterns
/// with parameters (`/requests/{id}`); a path that matches neither is [`UNMATCHED`].
struct Labels {
    exact: FxHashMap<&'static str, &'static Endpoint>,
    params: matchit::Router<&'static Endpoint>,
    unmatched: &'static Endpoint,
    /// Whether the last requests are kept (the console is on).
    watch: bool,
    hosts: HostPolicy,
}

impl Labels {
    fn new(patterns: &[&'static str], watch: bool) -> Self {
        let mut exact = FxHashMap::default();
        let mut params = matchit::Router::new();
        for &pattern in patterns {
            let endpoint = Endpoint::intern(pattern);
            if pattern.contains('{') {
                // Every pattern was routed by axum, whose matcher this is: it cannot
                // be refused here.
                params
                    .insert(pattern, endpoint)
                    .expect("axum accepted the pattern");
            } else {
                exact.insert(pattern, endpoint);
            }
        }
        Labels {
            exact,
            params,
            unmatched: Endpoint::intern(UNMATCHED),
            watch,
            hosts: HostPolicy::Any,
        }
    }

    fn of(&self, path: &str) -> &'static Endpoint {
        if let Some(endpoint) = self.exact.get(path) {
            return endpoint;
        }
        self.params
            .at(path)
            .map_or(self.unmatched, |matched| *matched.value)
    }
}

/// The last requests answered, newest last. One per process, as the metrics are: the
/// service is cloned for every request, and a borrowed reference costs nothing to clone
/// where a shared pointer would move a count between cores each time.
static RECENT: Mutex<VecDeque<Answered>> = Mutex::new(VecDeque::new());

#[derive(Debug)]
struct Answered {
    time: SystemTime,
    method: Method,
    endpoint: &'static str,
    status: u16,
    elapsed: Duration,
    id: HeaderValue,
}

/// One answered request, as the console shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AnsweredRequest {
    pub time: String,
    pub method: String,
    /// The route pattern, never the path a client sent.
    pub endpoint: &'static str,
    pub status: u16,
    pub duration_ms: f64,
    pub request_id: String,
}

fn keep(answered: Answered) {
    let mut ring = RECENT.lock().unwrap_or_else(PoisonError::into_inner);
    if ring.len() >= RECENT_REQUESTS {
        ring.pop_front();
    }
    ring.push_back(answered);
}

/// The last requests the console watched, newest first.
pub fn recent_requests() -> Vec<AnsweredRequest> {
    let ring = RECENT.lock().unwrap_or_else(PoisonError::into_inner);
    ring.iter()
        .rev()
        .map(|a| AnsweredRequest {
            time: crate::units::rfc3339_millis(a.time),
            method: a.method.to_string(),
            endpoint: a.endpoint,
            status: a.status,
            duration_ms: a.elapsed.as_secs_f64() * 1e3,
            request_id: a.id.to_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let started = Instant::now();
        let id = request_id(&mut request);
        let endpoint = self.labels.of(request.uri().path());
        HTTP_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        let refused = self.labels.hosts.refused(&request);
        // The line's parts are copied out of the request before it is handed on; when
        // no one reads the line, that copying is all it would cost.
        let line =
            tracing::enabled!(target: ACCESS_LOG_TARGET, tracing::Level::INFO).then(|| Line {
                method: request.method().clone(),
                path: Text::new(request.uri().path()),
                refused_host: refused.map(|host| {
                    String::from_utf8_lossy(&host[..host.len().min(MAX_LOGGED_HOST)]).into_owned()
                }),
            });
        let refused = refused.is_some();
        let watch = (self.labels.watch && endpoint.watched).then(|| request.method().clone());
        Observed {
            inner: (!refused).then(|| self.inner.call(request)),
            record: Some(Record {
                started,
                id,
                endpoint,
                line,
                watch,
            }),
        }
    }
}

/// The client's id when [usable](is_usable_id), else a new one.
fn request_id(request: &mut Request) -> HeaderValue {
    let sent = named(request.headers(), &REQUEST_ID).next();
    if let Some(id) = sent
        && id.to_str().is_ok_and(is_usable_id)
    {
        return id.clone();
    }
    let mut buffer = uuid::Uuid::encode_buffer();
    // Random bits from the thread's fast generator rather than a cryptographic one: an
    // id names a request in logs, it guards nothing.
    let id = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes())
        .into_uuid()
        .hyphenated()
        .encode_lower(&mut buffer);
    let id = HeaderValue::from_str(id).expect("a UUID is a valid header value");
    // Handlers never see an id unfit for a log line. A new id is not added to the
    // request: no handler reads it, and the insert (and the copy it needs) is a
    // measurable share of the cheapest requests.
    if sent.is_some() {
        request.headers_mut().insert(&REQUEST_ID, id.clone());
    }
    id
}

/// Ids end up in logs: only short, printable, unambiguous ones are taken as they are.
fn is_usable_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CLIENT_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// The longest path an access line holds in place (see [`Text`]).
const LINE_PATH_LEN: usize = 48;

/// A request's access line, as its parts.
struct AccessLine {
    line: Line,
    status: u16,
    elapsed: Duration,
    id: Text<UUID_LEN>,
}

/// A generated request id's length, a hyphenated UUID's.
const UUID_LEN: usize = 36;

/// What `{:?}` writes for `value`, which the log's formatter uses for an `f64` field:
/// the shortest digits that read back as `value`. Ryu finds the same digits with a
/// fraction of the work, and writes them alike where `{:?}` writes no exponent.
fn write_debug_f64(out: &mut Vec<u8>, value: f64) {
    if value == 0.0 || (1e-4..1e16).contains(&value.abs()) {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value).as_bytes());
    } else {
        use std::io::Write;
        let _ = write!(out, "{value:?}");
    }
}

/// A field of an access line, in place when it is no longer than `N` bytes, as most
/// are: a line crosses to the access log's thread, and a line that owns nothing is
/// dropped there without reaching back into the allocator of the request's thread.
enum Text<const N: usize> {
    Inline(arrayvec::ArrayString<N>),
    Heap(Box<str>),
}

impl<const N: usize> Text<N> {
    fn new(text: &str) -> Self {
        arrayvec::ArrayString::from(text).map_or_else(|_| Text::Heap(text.into()), Text::Inline)
    }

    fn as_str(&self) -> &str {
        match self {
            Text::Inline(text) => text,
            Text::Heap(text) => text,
        }
    }
}

impl AccessLine {
    fn message(&self) -> &'static str {
        if self.line.refused_host.is_some() {
            "request refused: not a host this server answers for (allowed_hosts)"
        } else {
            "request"
        }
    }

    /// The line tracing-subscriber's compact format writes for [`AccessLine::log`]
    /// without colours and without its time, onto `out`.
    fn write_compact(&self, out: &mut Vec<u8>) {
        let line = &self.line;
        out.extend_from_slice(b" INFO ");
        out.extend_from_slice(ACCESS_LOG_TARGET.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(self.message().as_bytes());
        out.extend_from_slice(b" method=");
        out.extend_from_slice(line.method.as_str().as_bytes());
        out.extend_from_slice(b" path=");
        out.extend_from_slice(line.path.as_str().as_bytes());
        out.extend_from_slice(b" status=");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        out.extend_from_slice(b" duration_ms=");
        write_debug_f64(out, self.elapsed.as_secs_f64() * 1000.0);
        out.extend_from_slice(b" request_id=");
        out.extend_from_slice(self.id.as_str().as_bytes());
        if let Some(host) = &line.refused_host {
            use std::io::Write;
            let _ = write!(out, " refused_host={host:?}");
        }
        out.push(b'\n');
    }

    fn log(&self) {
        let line = &self.line;
        let message = self.message();
        tracing::info!(
            target: ACCESS_LOG_TARGET,
            method = %line.method,
            path = %line.path.as_str(),
            status = self.status,
            duration_ms = self.elapsed.as_secs_f64() * 1000.0,
            request_id = %self.id.as_str(),
            refused_host = line.refused_host.as_deref(),
            "{message}"
        );
    }
}

/// What the access log line says of a request beside its answer.
struct Line {
    method: Method,
    path: Text<LINE_PATH_LEN>,
    /// The host the request named, when it was refused for it.
    refused_host: Option<String>,
}

/// What is left to do when the answer is ready.
struct Record {
    started: Instant,
    id: HeaderValue,
    endpoint: &'static Endpoint,
    /// When the access log is read.
    line: Option<Line>,
    /// The request's method, when the console watches it.
    watch: Option<Method>,
}

impl Record {
    fn finish(mut self, response: &mut Response) {
        let status = response.status();
        let elapsed = self.started.elapsed();
        self.endpoint.duration.record(elapsed);
        self.endpoint.count(status);
        let status = status.as_u16();
        if let Some(line) = self.line.take() {
            let line = AccessLine {
                line,
                status,
                elapsed,
                id: Text::new(self.id.to_str().unwrap_or_default()),
            };
            match ACCESS_LOG.get() {
                Some(queue) => {
                    if queue.try_send(AccessMessage::Line(line)).is_err() {
                        ACCESS_LINES_DROPPED.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => line.log(),
            }
        }
        if let Some(method) = self.watch.take() {
            keep(Answered {
                time: SystemTime::now(),
                method,
                endpoint: self.endpoint.label,
                status,
                elapsed,
                id: self.id.clone(),
            });
        }
        // Moved, not cloned: a clone of a header value made at run time allocates.
        let id = std::mem::replace(&mut self.id, HeaderValue::from_static(""));
        // A handler that set its own id keeps it.
        response.headers_mut().entry(&REQUEST_ID).or_insert(id);
    }
}

impl Drop for Record {
    /// Leaves the in-flight gauge when the request is answered or its client goes away.
    fn drop(&mut self) {
        HTTP_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    pub struct Observed<F> {
        // `None`: refused for its host, never handed to the router.
        #[pin]
        inner: Option<F>,
        record: Option<Record>,
    }
}

impl<F, E> Future for Observed<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut result = match this.inner.as_pin_mut() {
            Some(inner) => std::task::ready!(inner.poll(cx)),
            None => Ok(misdirected()),
        };
        if let (Some(record), Ok(response)) = (this.record.take(), result.as_mut()) {
            record.finish(response);
        }
        Poll::Ready(result)
    }
}

/// The answer to a request for a host this server does not answer for.
fn misdirected() -> Response {
    use axum::response::IntoResponse;
    ApiError {
        status: StatusCode::MISDIRECTED_REQUEST,
        message: "this server does not answer for the host this request names; \
                  the operator can list it in allowed_hosts"
            .into(),
    }
    .into_response()
}

/// One endpoint's metric handles, made once per route pattern and kept for the life of
/// the process (the patterns are the router's, so they are bounded). A request borrows
/// them: looking a metric up by name and labels hashes and allocates its key, and
/// cloning a handle is an atomic count shared by every worker.
struct Endpoint {
    label: &'static str,
    /// Whether the console keeps its requests (see `is_service_endpoint`).
    watched: bool,
    duration: Histogram,
    /// Request counters by status: a row per hundred (`2xx`), made when its class is
    /// first answered, a slot per status in it, made when that status is. Indexing
    /// costs less than hashing, and only the statuses answered take memory.
    counts: [OnceLock<Box<[OnceLock<Counter>; 100]>>; 9],
}

impl Endpoint {
    /// The one endpoint of `pattern`, shared by every thread.
    fn intern(pattern: &str) -> &'static Endpoint {
        static ALL: Mutex<BTreeMap<&'static str, &'static Endpoint>> = Mutex::new(BTreeMap::new());
        let mut all = ALL.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = all.get(pattern) {
            return found;
        }
        let label: &'static str = Box::leak(pattern.into());
        let made: &'static Endpoint = Box::leak(Box::new(Endpoint {
            label,
            watched: is_service_endpoint(label),
            duration: metrics::histogram!(HTTP_REQUEST_DURATION, "endpoint" => label),
            counts: Default::default(),
        }));
        all.insert(label, made);
        made
    }

    fn count(&self, status: StatusCode) {
        // `StatusCode` is 100..=999, so both indexes are in bounds.
        let status = status.as_u16();
        let (class, slot) = (usize::from(status / 100 - 1), usize::from(status % 100));
        self.counts[class].get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())))[slot]
            .get_or_init(|| {
                metrics::counter!(
                    HTTP_REQUESTS,
                    "endpoint" => self.label,
                    "status" => status.to_string()
                )
            })
            .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::headers::SCANNED_HEADERS;

    #[test]
    fn paths_are_labelled_by_the_pattern_the_router_matches() {
        let labels = Labels::new(
            &[
                "/healthcheck",
                "/requests/{id}",
                "/proxy/{*path}",
                "/symbolicate/v5",
            ],
            false,
        );
        let label = |path| labels.of(path).label;
        assert_eq!(label("/healthcheck"), "/healthcheck");
        assert_eq!(label("/requests/3f2a"), "/requests/{id}");
        assert_eq!(label("/proxy/a/b/c.pdb"), "/proxy/{*path}");
        assert_eq!(label("/symbolicate/v5"), "/symbolicate/v5");
        // What axum answers 404 to is one label, whatever the client sent.
        for path in [
            "/healthcheck/",
            "/requests/",
            "/requests/a/b",
            "/proxy/",
            "/x",
            "/",
        ] {
            assert_eq!(label(path), UNMATCHED, "{path}");
        }
    }

    #[test]
    fn new_ids_are_distinct_v4_uuids_and_sent_ids_are_found_among_any_headers() {
        let new_id = || {
            let id = request_id(&mut Request::new(axum::body::Body::empty()));
            uuid::Uuid::parse_str(id.to_str().unwrap()).unwrap()
        };
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.get_version(), Some(uuid::Version::Random), "{id}");
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122, "{id}");
        }
        // Searched by comparing names up to SCANNED_HEADERS, looked up past it.
        for others in [0, 3, SCANNED_HEADERS - 1, SCANNED_HEADERS, 40] {
            let mut request = Request::new(axum::body::Body::empty());
            for i in 0..others {
                let name = HeaderName::try_from(format!("x-other-{i}")).unwrap();
                request
                    .headers_mut()
                    .insert(name, HeaderValue::from_static("v"));
            }
            request
                .headers_mut()
                .insert(&REQUEST_ID, HeaderValue::from_static("trace-7"));
            assert_eq!(
                request_id(&mut request),
                "trace-7",
                "{others} other headers"
            );
        }
    }

    #[test]
    fn every_status_is_counted_on_its_own_series() {
        let answered = [(100, 1), (200, 3), (201, 1), (299, 2), (404, 1), (999, 1)];
        let ((), recorded) = crate::telemetry::recorded(|| {
            let endpoint = Endpoint {
                label: "/t",
                watched: false,
                duration: metrics::histogram!(HTTP_REQUEST_DURATION),
                counts: Default::default(),
            };
            for (status, times) in answered {
                for _ in 0..times {
                    endpoint.count(StatusCode::from_u16(status).unwrap());
                }
            }
        });
        for (status, times) in answered {
            let labels = [("endpoint", "/t"), ("status", &*status.to_string())];
            assert_eq!(recorded.counter(HTTP_REQUESTS, &labels), times, "{status}");
        }
        for status in ["202", "300", "500"] {
            let labels = [("endpoint", "/t"), ("status", status)];
            assert_eq!(recorded.counter(HTTP_REQUESTS, &labels), 0, "{status}");
        }
    }

    #[test]
    fn client_ids_are_kept_only_when_safe_to_log() {
        assert!(is_usable_id("3f2a-77_b.c:1"));
        assert!(!is_usable_id(""));
        assert!(!is_usable_id("a b"));
        assert!(!is_usable_id("line\nbreak"));
        assert!(!is_usable_id(&"x".repeat(MAX_CLIENT_ID_LEN + 1)));
    }
}

#[cfg(test)]
mod access_line_tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A `MakeWriter` into a shared buffer, to see what the log's formatter writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    fn lines() -> Vec<AccessLine> {
        let line = |method: Method, path: &str, host: Option<&str>, status, micros| AccessLine {
            line: Line {
                method,
                path: Text::new(path),
                refused_host: host.map(str::to_owned),
            },
            status,
            elapsed: Duration::from_micros(micros),
            id: Text::new("3f2a9c1e-0b7d-4e55-9a61-2c0d8f4b7e19"),
        };
        vec![
            line(Method::GET, "/healthcheck", None, 200, 1),
            line(Method::POST, "/symbolicate", None, 200, 1_234_567),
            line(Method::GET, "/requests/ab%20c", None, 404, 0),
            line(
                Method::GET,
                &format!("/{}", "long/".repeat(40)),
                None,
                404,
                7,
            ),
            line(Method::GET, "/", Some("evil\"host\u{e9}\\"), 421, 12),
            line(
                Method::from_bytes(b"PURGE").unwrap(),
                "/x y",
                None,
                405,
                999,
            ),
        ]
    }

    /// What the log's compact format without colours writes for each line, with and
    /// without its time: the same bytes as the access log's own writer, the time aside.
    #[test]
    fn the_compact_access_line_is_the_logs_own() {
        for time in [true, false] {
            for line in lines() {
                let captured = Captured::default();
                let builder = tracing_subscriber::fmt()
                    .with_writer(captured.clone())
                    .compact()
                    .with_ansi(false);
                if time {
                    tracing::subscriber::with_default(builder.finish(), || line.log());
                } else {
                    tracing::subscriber::with_default(builder.without_time().finish(), || {
                        line.log()
                    });
                }
                let theirs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
                let mut ours = Vec::new();
                if time {
                    Stamp::default().write(&mut ours, SystemTime::now());
                }
                line.write_compact(&mut ours);
                let ours = String::from_utf8(ours).unwrap();
                // Their time and ours are read a moment apart: both are RFC 3339 with
                // microseconds, and the rest is compared byte for byte.
                let strip = |s: &str| -> String {
                    if !time {
                        return s.to_owned();
                    }
                    let (stamp, rest) = s.split_at(27);
                    humantime::parse_rfc3339(stamp).unwrap_or_else(|e| panic!("{stamp}: {e}"));
                    rest.to_owned()
                };
                assert_eq!(strip(&ours), strip(&theirs), "time {time}");
            }
        }
    }

    #[test]
    fn a_long_request_id_is_written_whole() {
        let mut lines = lines();
        let long = "a".repeat(MAX_CLIENT_ID_LEN);
        lines[0].id = Text::new(&long);
        assert!(matches!(lines[0].id, Text::Heap(_)));
        let mut out = Vec::new();
        lines[0].write_compact(&mut out);
        assert!(
            String::from_utf8(out)
                .unwrap()
                .ends_with(&format!("request_id={long}\n"))
        );
    }

    /// Durations as `{:?}` writes them, from nanoseconds to ages, and the values where
    /// `{:?}` turns to an exponent.
    #[test]
    fn durations_are_written_as_debug_writes_them() {
        let mut values = vec![0.0, 1e-4, 9.99e-5, 1e-5, 1e16, 9.999e15, 1e300, 0.1 + 0.2];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let nanos = state % 100_000_000_000;
            values.push(Duration::from_nanos(nanos).as_secs_f64() * 1000.0);
        }
        for value in values {
            let mut out = Vec::new();
            write_debug_f64(&mut out, value);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{value:?}"));
        }
    }

    /// The remembered part of the time is the part that changes only with the second.
    #[test]
    fn stamps_are_humantimes_rfc3339_with_micros() {
        let mut stamp = Stamp::default();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_599);
        for micros in [
            0,
            1,
            999_999,
            1_000_000,
            1_000_001,
            59_999_999,
            86_400_000_000,
        ] {
            let time = start + Duration::from_micros(micros);
            let mut out = Vec::new();
            stamp.write(&mut out, time);
            let want = format!("{} ", humantime::format_rfc3339_micros(time));
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}
