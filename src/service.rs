//! RequestService: every symbolication request goes through here. It caps the number of
//! requests in flight, gives each a random id, runs it as its own task (with the 15
//! minute limit), lets the client wait up to `?timeout=` seconds, and keeps results of
//! requests that were answered `pending` for a bounded time so they can be polled.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use metrics::{Counter, Gauge};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::telemetry::{REQUESTS_FINISHED, REQUESTS_IN_FLIGHT, REQUESTS_REJECTED};

/// Work that runs longer than this is abandoned and answered `timeout`.
pub const MAX_REQUEST_DURATION: Duration = Duration::from_secs(15 * 60);
/// How long a finished result stays available for polling (as upstream).
pub const RESULT_RETENTION: Duration = Duration::from_secs(90);
/// What a `pending` answer asks the client to wait before polling again.
const RETRY_AFTER_SECS: u64 = 30;

/// Every answer a symbolication request or a poll can get.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SymbolicationResponse {
    Pending {
        request_id: RequestId,
        retry_after: u64,
    },
    Completed(Box<serde_json::Value>),
    Failed {
        message: String,
    },
    Timeout,
    InternalError,
}

/// Opaque id of a request that is still running or recently finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub uuid::Uuid);

/// Which replica of a fleet minted a request id: it leads the id, so that a poll that
/// reaches another replica can be sent on to the one that holds the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerTag(pub [u8; 6]);

impl RequestId {
    /// A random id (version 4), or with an owner, that owner's tag and 74 random bits
    /// in a version 8 UUID: still a UUID to every client, and still unguessable.
    fn mint(owner: Option<OwnerTag>) -> Self {
        let random = uuid::Uuid::new_v4();
        match owner {
            None => RequestId(random),
            Some(OwnerTag(tag)) => {
                let mut bytes = *random.as_bytes();
                bytes[..6].copy_from_slice(&tag);
                RequestId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
            }
        }
    }

    /// The replica that minted this id, if a replica of a fleet did.
    pub fn owner(&self) -> Option<OwnerTag> {
        (self.0.get_version_num() == 8).then(|| {
            let mut tag = [0; 6];
            tag.copy_from_slice(&self.0.as_bytes()[..6]);
            OwnerTag(tag)
        })
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("maximum number of concurrent requests reached")]
pub struct Overloaded;

#[derive(Default)]
struct SlotState {
    /// The finished response, serialised once: it is sent as is, maybe more than once.
    body: Option<Bytes>,
    /// Whether the id was given to a client (in a `pending` answer): only then can
    /// anyone poll for the result, and only then is it worth keeping.
    handed_out: bool,
}

#[derive(Default)]
struct ResultSlot {
    state: Mutex<SlotState>,
    done: Notify,
}

impl ResultSlot {
    fn body(&self) -> Option<Bytes> {
        self.state.lock().unwrap().body.clone()
    }
}

/// Finished results whose id was handed out, for polling: bounded by bytes and by age
/// ([`RESULT_RETENTION`]), least recently used first out, so memory stays flat under
/// load.
type Finished = moka::sync::Cache<RequestId, Bytes>;

fn finished_results(max_bytes: u64) -> Finished {
    moka::sync::Cache::builder()
        .max_capacity(max_bytes)
        // A result larger than the whole budget weighs the whole budget: it displaces
        // every other rather than being refused, as its client was just told to poll.
        .weigher(move |_, body: &Bytes| {
            u32::try_from((body.len() as u64).min(max_bytes)).unwrap_or(u32::MAX)
        })
        .time_to_live(RESULT_RETENTION)
        // Plain LRU: the newest result always gets in, which frequency-based admission
        // would not promise.
        .eviction_policy(moka::policy::EvictionPolicy::lru())
        .build()
}

/// Registered once, so that counting a request costs no registry lookup.
struct ServiceMetrics {
    in_flight: Gauge,
    rejected: Counter,
    completed: Counter,
    failed: Counter,
    timeout: Counter,
    internal_error: Counter,
}

impl ServiceMetrics {
    fn new() -> Self {
        let finished =
            |status: &'static str| metrics::counter!(REQUESTS_FINISHED, "status" => status);
        ServiceMetrics {
            in_flight: metrics::gauge!(REQUESTS_IN_FLIGHT),
            rejected: metrics::counter!(REQUESTS_REJECTED),
            completed: finished("completed"),
            failed: finished("failed"),
            timeout: finished("timeout"),
            internal_error: finished("internal_error"),
        }
    }
}

struct Inner {
    max_concurrent: usize,
    in_flight: AtomicUsize,
    metrics: ServiceMetrics,
    /// Requests still running; at most `max_concurrent` of them.
    running: Mutex<HashMap<RequestId, Arc<ResultSlot>>>,
    finished: Finished,
    /// What leads the ids minted here, in a fleet.
    owner: Option<OwnerTag>,
}

/// Cheap to clone; shared by all handlers.
#[derive(Clone)]
pub struct RequestService {
    inner: Arc<Inner>,
}

struct InFlightGuard {
    inner: Arc<Inner>,
    /// Whether the request got a slot (and so shows in the in-flight gauge).
    accepted: bool,
}

impl InFlightGuard {
    fn accept(&mut self) {
        self.accepted = true;
        self.inner.metrics.in_flight.increment(1);
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.inner.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.accepted {
            self.inner.metrics.in_flight.decrement(1);
        }
    }
}

impl RequestService {
    /// `max_kept_bytes` bounds the memory of results waiting to be polled.
    pub fn new(max_concurrent: usize, max_kept_bytes: u64) -> Self {
        RequestService {
            inner: Arc::new(Inner {
                max_concurrent,
                in_flight: AtomicUsize::new(0),
                metrics: ServiceMetrics::new(),
                running: Mutex::new(HashMap::new()),
                finished: finished_results(max_kept_bytes),
                owner: None,
            }),
        }
    }

    /// The same service, minting ids that name `owner` (a replica of a fleet). Only
    /// before the service is shared.
    pub fn with_owner(mut self, owner: OwnerTag) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("the owner is set before the service is shared")
            .owner = Some(owner);
        self
    }

    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Takes a slot for a request, unless too many requests are in flight. Taken before
    /// the request's body is read: a refused client costs no upload, disk or
    /// decompression, and a slow one holds a slot while it sends.
    pub fn reserve(&self) -> Result<Reservation, Overloaded> {
        let inner = &self.inner;
        let prev = inner.in_flight.fetch_add(1, Ordering::AcqRel);
        let mut guard = InFlightGuard {
            inner: inner.clone(),
            accepted: false,
        };
        if prev >= inner.max_concurrent {
            inner.metrics.rejected.increment(1);
            return Err(Overloaded);
        }
        guard.accept();
        Ok(Reservation { guard })
    }

    /// Starts `work` as its own task, unless too many requests are in flight. The
    /// returned handle is what the submitting client waits on (see [`Self::wait`]).
    pub fn spawn<F, T>(&self, work: F) -> Result<RequestHandle, Overloaded>
    where
        F: Future<Output = anyhow::Result<T>> + Send + 'static,
        T: Serialize + Send + 'static,
    {
        Ok(self.reserve()?.spawn(work))
    }

    /// Waits up to `timeout` (forever when `None`) for a polled request's answer. `None`
    /// when the id is unknown or its result has expired.
    pub async fn get_response(&self, id: RequestId, timeout: Option<Duration>) -> Option<Bytes> {
        let running = self.inner.running.lock().unwrap().get(&id).cloned();
        match running {
            Some(slot) => Some(Self::wait(RequestHandle { id, slot }, timeout).await),
            None => self.inner.finished.get(&id),
        }
    }

    /// Waits up to `timeout` for the answer; on time-out hands out the id in a
    /// `pending` answer.
    pub async fn wait(handle: RequestHandle, timeout: Option<Duration>) -> Bytes {
        let RequestHandle { id, slot } = handle;
        let wait = async {
            loop {
                let notified = slot.done.notified();
                if let Some(body) = slot.body() {
                    return body;
                }
                notified.await;
            }
        };
        let result = match timeout {
            None => Some(wait.await),
            Some(t) => tokio::time::timeout(t, wait).await.ok(),
        };
        match result {
            Some(body) => body,
            None => {
                let mut state = slot.state.lock().unwrap();
                match &state.body {
                    // Finished in the very moment the wait ran out.
                    Some(body) => body.clone(),
                    None => {
                        state.handed_out = true;
                        plain_body(&SymbolicationResponse::Pending {
                            request_id: id,
                            retry_after: RETRY_AFTER_SECS,
                        })
                    }
                }
            }
        }
    }
}

/// A slot taken under `max_concurrent_requests` for a request that has not started yet;
/// dropping it gives the slot back.
pub struct Reservation {
    guard: InFlightGuard,
}

impl Reservation {
    /// Starts `work` as its own task in this slot. The returned handle is what the
    /// submitting client waits on (see [`RequestService::wait`]).
    pub fn spawn<F, T>(self, work: F) -> RequestHandle
    where
        F: Future<Output = anyhow::Result<T>> + Send + 'static,
        T: Serialize + Send + 'static,
    {
        // Boxed once here: a request's future is kilobytes, and it moves through two
        // spawns and a timeout before it first runs.
        let work = Box::pin(work);
        let guard = self.guard;
        let inner = guard.inner.clone();
        let id = RequestId::mint(inner.owner);
        let slot = Arc::new(ResultSlot::default());
        inner.running.lock().unwrap().insert(id, slot.clone());
        let handle = RequestHandle {
            id,
            slot: slot.clone(),
        };
        tokio::spawn(async move {
            let _guard = guard;
            let body = match execute(&inner, work).await {
                Outcome::Done(value) => completed_body(&value),
                Outcome::Failed(err) => plain_body(&SymbolicationResponse::Failed {
                    message: format!("{err:#}"),
                }),
                Outcome::Timeout => plain_body(&SymbolicationResponse::Timeout),
                Outcome::Panicked => plain_body(&SymbolicationResponse::InternalError),
            };
            let keep = {
                let mut state = slot.state.lock().unwrap();
                state.body = Some(body.clone());
                state.handed_out
            };
            // Into the finished store first, so a poll never finds neither.
            if keep {
                inner.finished.insert(id, body);
            }
            inner.running.lock().unwrap().remove(&id);
            slot.done.notify_waiters();
        });
        handle
    }

    /// Runs `work` in this slot and hands its value to the caller, for fronts whose
    /// protocol has no `pending` answer: nothing is kept for polling.
    pub async fn run<F, T>(self, work: F) -> Outcome<T>
    where
        F: Future<Output = anyhow::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let work = Box::pin(work);
        let guard = self.guard;
        let inner = guard.inner.clone();
        // The slot goes with the work, not with the caller: a client that hangs up does
        // not end the work, so it must not free the slot either.
        execute(&inner, async move {
            let _guard = guard;
            work.await
        })
        .await
    }
}

/// How a request's work ended.
pub enum Outcome<T> {
    Done(T),
    Failed(anyhow::Error),
    /// It ran past [`MAX_REQUEST_DURATION`].
    Timeout,
    /// It panicked (logged here).
    Panicked,
}

/// Runs `work` as its own task, so that a panic in it becomes an answer, under the
/// request time limit, and counts how it ended.
async fn execute<F, T>(inner: &Inner, work: F) -> Outcome<T>
where
    F: Future<Output = anyhow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let handle = tokio::spawn(tokio::time::timeout(MAX_REQUEST_DURATION, work));
    let metrics = &inner.metrics;
    match handle.await {
        Ok(Ok(Ok(value))) => {
            metrics.completed.increment(1);
            Outcome::Done(value)
        }
        Ok(Ok(Err(err))) => {
            tracing::warn!(error = %format!("{err:#}"), "request failed");
            metrics.failed.increment(1);
            Outcome::Failed(err)
        }
        Ok(Err(_elapsed)) => {
            metrics.timeout.increment(1);
            Outcome::Timeout
        }
        Err(join_err) => {
            tracing::error!(error = %join_err, "request task panicked");
            metrics.internal_error.increment(1);
            Outcome::Panicked
        }
    }
}

/// A spawned request: its id and the place its answer will appear.
pub struct RequestHandle {
    id: RequestId,
    slot: Arc<ResultSlot>,
}

impl RequestHandle {
    pub fn id(&self) -> RequestId {
        self.id
    }
}

fn plain_body(response: &SymbolicationResponse) -> Bytes {
    serde_json::to_vec(response)
        .expect("responses serialise")
        .into()
}

/// The length of the last answer [`completed_body`] wrote.
static LAST_ANSWER_LEN: AtomicUsize = AtomicUsize::new(0);

/// What an answer's buffer starts with after one of `last` bytes: an eighth more, at
/// least what small answers need and at most what a large one is worth reserving for
/// all that follow it.
fn answer_capacity(last: usize) -> usize {
    (last + last / 8).clamp(32 * 1024, 8 * 1024 * 1024)
}

/// `{"status":"completed", ...value's fields}`, without an intermediate JSON tree or a
/// second copy: the value is serialised right after the status key, and its opening
/// brace becomes the comma. The offline CLI answers with the same bytes.
///
/// sonic-rs writes the same bytes as serde_json (the tests compare them) but escapes
/// strings with SIMD; serde_json's byte-by-byte escaping is the largest single cost
/// of a warm answer, which is mostly strings.
pub fn completed_body<T: Serialize>(value: &T) -> Bytes {
    const HEAD: &[u8] = br#"{"status":"completed""#;
    // Answers to one deployment's clients are of similar sizes: starting at the last
    // one's size (with room to spare) saves the copies of growing by doubling, which
    // were a tenth of a large native answer's work.
    let mut out = Vec::with_capacity(answer_capacity(LAST_ANSWER_LEN.load(Ordering::Relaxed)));
    out.extend_from_slice(HEAD);
    if let Err(err) = sonic_rs::to_writer(&mut out, value) {
        tracing::error!(error = %err, "cannot serialise response");
        return plain_body(&SymbolicationResponse::InternalError);
    }
    LAST_ANSWER_LEN.store(out.len(), Ordering::Relaxed);
    match &out[HEAD.len()..] {
        [b'{', b'}'] => {
            out.truncate(HEAD.len());
            out.push(b'}');
        }
        [b'{', ..] => out[HEAD.len()] = b',',
        _ => {
            tracing::error!("response is not a JSON object");
            return plain_body(&SymbolicationResponse::InternalError);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::recorded;

    #[test]
    fn an_owned_id_names_its_owner_and_stays_random() {
        let tag = OwnerTag(*b"\x01\x02\x03\x04\x05\x06");
        let (a, b) = (RequestId::mint(Some(tag)), RequestId::mint(Some(tag)));
        assert_eq!(a.owner(), Some(tag));
        assert_ne!(a, b);
        assert_eq!(a.0.get_version_num(), 8);
        assert_eq!(a.0.get_variant(), uuid::Variant::RFC4122);
        // It goes through a client and back as any UUID does.
        let parsed: uuid::Uuid = a.to_string().parse().unwrap();
        assert_eq!(RequestId(parsed).owner(), Some(tag));
        assert_eq!(RequestId::mint(None).owner(), None);
    }

    #[test]
    fn completed_body_splices_the_status_in() {
        let body = completed_body(&serde_json::json!({"a": 1, "b": [2]}));
        assert_eq!(&body[..], br#"{"status":"completed","a":1,"b":[2]}"#);
        let body = completed_body(&serde_json::json!({}));
        assert_eq!(&body[..], br#"{"status":"completed"}"#);
        let body = completed_body(&serde_json::json!([1]));
        assert_eq!(&body[..], br#"{"status":"internal_error"}"#);
    }

    #[test]
    fn completed_body_writes_what_serde_json_writes() {
        let value = serde_json::json!({
            "escapes": "\u{0}\u{1f}\"\\\n\t\u{7f}\u{2028}é😀",
            "numbers": [0, -1, u64::MAX, i64::MIN, 1.0, 1e21, 1.5e-7, -0.0, 0.30000000000000004],
            "nested": {"b": null, "a": [true, false, {}], "": []},
        });
        let expected = serde_json::to_vec(&value).unwrap();
        let body = completed_body(&value);
        assert_eq!(&body[..22], br#"{"status":"completed","#);
        assert_eq!(&body[22..], &expected[1..]);
    }

    #[derive(Serialize)]
    struct Answer {
        value: u32,
    }

    /// A request that answers `value` after 50 ms: late for a wait of zero.
    fn answer_after_50ms(svc: &RequestService, value: u32) -> RequestHandle {
        svc.spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(Answer { value })
        })
        .unwrap()
    }

    fn json(b: &Bytes) -> serde_json::Value {
        serde_json::from_slice(b).unwrap()
    }

    #[tokio::test]
    async fn run_hands_the_value_back_and_holds_the_slot_while_it_works() {
        let svc = RequestService::new(1, 1 << 20);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let slot = svc.reserve().unwrap();
        let running = tokio::spawn(slot.run(async move {
            rx.await.ok();
            Ok(Answer { value: 3 })
        }));
        tokio::task::yield_now().await;
        assert!(
            svc.reserve().is_err(),
            "the running work holds the only slot"
        );
        tx.send(()).unwrap();
        match running.await.unwrap() {
            Outcome::Done(answer) => assert_eq!(answer.value, 3),
            _ => panic!("the work completed"),
        }
        assert!(svc.reserve().is_ok());
        let panicked = svc
            .reserve()
            .unwrap()
            .run(async { panic!("boom") as anyhow::Result<()> })
            .await;
        assert!(matches!(panicked, Outcome::Panicked));
    }

    #[tokio::test]
    async fn completed_within_timeout_is_dropped_at_once() {
        let svc = RequestService::new(10, 1 << 20);
        let handle = answer_after_50ms(&svc, 7);
        let id = handle.id();
        let body = RequestService::wait(handle, Some(Duration::from_secs(5))).await;
        assert_eq!(
            json(&body),
            serde_json::json!({"status": "completed", "value": 7})
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(svc.get_response(id, Some(Duration::ZERO)).await.is_none());
    }

    #[tokio::test]
    async fn pending_then_poll() {
        let svc = RequestService::new(10, 1 << 20);
        let handle = svc
            .spawn(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(Answer { value: 1 })
            })
            .unwrap();
        let id = handle.id();
        let first = RequestService::wait(handle, Some(Duration::from_millis(10))).await;
        let first = json(&first);
        assert_eq!(first["status"], "pending");
        assert_eq!(first["request_id"], id.to_string());
        assert_eq!(first["retry_after"], 30);
        let done = svc.get_response(id, None).await.unwrap();
        assert_eq!(json(&done)["status"], "completed");
        // Still there for a second poll.
        let again = svc.get_response(id, Some(Duration::ZERO)).await.unwrap();
        assert_eq!(json(&again)["value"], 1);
    }

    #[tokio::test]
    async fn finished_results_are_bounded_by_bytes_oldest_first() {
        let svc = RequestService::new(10, 100);
        let mut ids = Vec::new();
        for _ in 0..3 {
            let handle = answer_after_50ms(&svc, 1);
            ids.push(handle.id());
            // Hand the id out, so the result is kept for polling.
            let pending = RequestService::wait(handle, Some(Duration::ZERO)).await;
            assert_eq!(json(&pending)["status"], "pending");
        }
        for id in &ids {
            svc.get_response(*id, None).await.unwrap();
        }
        // Each result is ~30 bytes: the budget of 100 holds the newest three at most,
        // and never more than the budget.
        let finished = &svc.inner.finished;
        finished.run_pending_tasks();
        assert!(
            finished.weighted_size() <= 100,
            "{}",
            finished.weighted_size()
        );
        assert!(finished.contains_key(&ids[2]));
    }

    #[tokio::test]
    async fn a_result_larger_than_the_budget_is_still_kept_for_its_poll() {
        let svc = RequestService::new(10, 8);
        let handle = answer_after_50ms(&svc, 7);
        let id = handle.id();
        let pending = RequestService::wait(handle, Some(Duration::ZERO)).await;
        assert_eq!(json(&pending)["status"], "pending");
        // Once the run has left the running map, only the kept result can answer.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while svc.inner.running.lock().unwrap().contains_key(&id) {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let done = svc.get_response(id, Some(Duration::ZERO)).await.unwrap();
        assert_eq!(json(&done)["value"], 7);
    }

    #[tokio::test]
    async fn failures_and_panics_are_answers() {
        let svc = RequestService::new(10, 1 << 20);
        let handle = svc
            .spawn(async { Err::<Answer, _>(anyhow::anyhow!("bad dump")) })
            .unwrap();
        let body = json(&RequestService::wait(handle, None).await);
        assert_eq!(
            body,
            serde_json::json!({"status": "failed", "message": "bad dump"})
        );

        let handle = svc
            .spawn(async {
                if true {
                    panic!("boom");
                }
                Ok(Answer { value: 0 })
            })
            .unwrap();
        let body = json(&RequestService::wait(handle, None).await);
        assert_eq!(body, serde_json::json!({"status": "internal_error"}));
    }

    #[tokio::test]
    async fn a_reservation_holds_its_slot_until_dropped_or_done() {
        let svc = RequestService::new(1, 1 << 20);
        let reservation = svc.reserve().unwrap();
        assert!(svc.reserve().is_err());
        drop(reservation);
        assert_eq!(svc.in_flight(), 0);
        let reservation = svc.reserve().unwrap();
        assert!(svc.spawn(async { Ok(Answer { value: 0 }) }).is_err());
        let handle = reservation.spawn(async { Ok(Answer { value: 3 }) });
        assert_eq!(json(&RequestService::wait(handle, None).await)["value"], 3);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(svc.in_flight(), 0);
        assert!(svc.reserve().is_ok());
    }

    #[tokio::test]
    async fn cap_is_enforced_and_released() {
        let (svc, metrics) = recorded(|| RequestService::new(2, 1 << 20));
        let gate = Arc::new(Notify::new());
        let mut ids = Vec::new();
        for _ in 0..2 {
            let gate = gate.clone();
            ids.push(
                svc.spawn(async move {
                    gate.notified().await;
                    Ok(Answer { value: 0 })
                })
                .unwrap(),
            );
        }
        assert!(svc.spawn(async { Ok(Answer { value: 0 }) }).is_err());
        assert_eq!(metrics.counter(REQUESTS_REJECTED, &[]), 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.notify_waiters();
        for handle in ids {
            RequestService::wait(handle, None).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(svc.in_flight(), 0);
        let completed = [("status", "completed")];
        assert_eq!(metrics.counter(REQUESTS_FINISHED, &completed), 2);
        assert!(svc.spawn(async { Ok(Answer { value: 0 }) }).is_ok());
    }
}
