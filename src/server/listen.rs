//! The HTTP/1 listener: accepts at most `max_connections` connections at once, closes
//! a connection that has gone `header_read_timeout` without a request (one that trickles
//! its head, or sits idle between requests; checked four times per timeout, so cut off
//! within a quarter more), fails a request body that takes longer than
//! `body_read_timeout` to arrive, and drops a connection whose answer makes no progress
//! for `write_timeout` (a client that stopped reading). Without these, a client that
//! opens connections and sends half a request, or reads none of its answer, holds a
//! socket, a task and buffers forever.
//!
//! Past `max_connections`, up to `health_connections` more are accepted that answer
//! `GET /healthcheck` and refuse anything else with 503, each for one request: a
//! server whose every connection is held still tells its orchestrator it is alive.
//! On shutdown, requests in progress get `shutdown_timeout` to finish; then the
//! remaining connections are dropped.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::config::Config;
use crate::server::App;

/// What the listener allows one client.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub write_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub max_connections: usize,
    pub health_connections: usize,
}

impl ConnectionLimits {
    pub fn of(config: &Config) -> Self {
        ConnectionLimits {
            header_read_timeout: config.header_read_timeout,
            body_read_timeout: config.body_read_timeout,
            write_timeout: config.write_timeout,
            shutdown_timeout: config.shutdown_timeout,
            max_connections: config.max_connections,
            health_connections: config.health_connections,
        }
    }
}

/// The slot a connection was accepted into.
enum Admission {
    /// One of `max_connections`: served in full.
    Regular(OwnedSemaphorePermit),
    /// One of `health_connections`: one request, `/healthcheck` only.
    HealthOnly(OwnedSemaphorePermit),
}

impl Admission {
    /// A regular slot when one is free, else whichever frees first; a slot of either
    /// kind is preferred to none, so the backlog only fills when both are taken.
    async fn acquire(regular: &Arc<Semaphore>, health: &Arc<Semaphore>) -> Admission {
        if let Ok(permit) = regular.clone().try_acquire_owned() {
            return Admission::Regular(permit);
        }
        let closed = "the semaphores are never closed";
        tokio::select! {
            biased;
            permit = regular.clone().acquire_owned() => Admission::Regular(permit.expect(closed)),
            permit = health.clone().acquire_owned() => Admission::HealthOnly(permit.expect(closed)),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then waits up to
/// `shutdown_timeout` for the requests in progress to finish.
pub async fn serve(
    listener: TcpListener,
    app: App,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    // The header deadline is the socket's (`ClientIo`): hyper's own, with a timer, made
    // it try to read the next head once more per request, about 900 instructions
    // (6 %) of a health check.
    http.header_read_timeout(None);
    // One `write` of head and body copied together rather than a `writev` of both: on
    // loopback `GET /healthcheck` ran about 4 % faster (alternating wrk rounds), and the
    // warm `/symbolicate` rate did not change; the copy is of an answer already
    // serialised once, small beside that.
    http.writev(false);
    let mut health_http = http.clone();
    health_http.keep_alive(false);
    let graceful = GracefulShutdown::new();
    let regular = Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let health = Arc::new(Semaphore::new(
        limits.health_connections.min(Semaphore::MAX_PERMITS),
    ));
    tokio::pin!(shutdown);
    loop {
        // A connection over both limits waits in the kernel's backlog until one closes.
        let admission = tokio::select! {
            admission = Admission::acquire(&regular, &health) => admission,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    accept_failed(err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Answers are written whole; Nagle's delay would only hold back their last packet.
        let _ = stream.set_nodelay(true);
        let exchanges = Arc::new(Exchanges::default());
        let io = TokioIo::new(ClientIo::new(
            stream,
            exchanges.clone(),
            limits.header_read_timeout,
            limits.write_timeout,
        ));
        let app = app.clone();
        let body_timeout = limits.body_read_timeout;
        let (permit, health_only) = match admission {
            Admission::Regular(permit) => (permit, false),
            Admission::HealthOnly(permit) => {
                metrics::counter!(crate::telemetry::HEALTH_ONLY_CONNECTIONS).increment(1);
                (permit, true)
            }
        };
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let app = app.clone();
            let exchange = Exchange::begin(&exchanges);
            async move {
                let response = if health_only && !is_healthcheck(&request) {
                    connections_exhausted()
                } else {
                    // A request without a body (every GET) has no deadline to keep.
                    let request = request.map(|body| {
                        if http_body::Body::is_end_stream(&body) {
                            Body::new(body)
                        } else {
                            Body::new(DeadlineBody::new(body, body_timeout))
                        }
                    });
                    let Ok(response) = app.oneshot(request).await;
                    response
                };
                // The exchange lasts until hyper has taken the whole answer. hyper takes
                // the wrapper as it is (boxing it into a `Body` again cost an allocation
                // per request).
                Ok::<_, Infallible>(response.map(|body| Answer {
                    body,
                    _exchange: exchange,
                }))
            }
        });
        let builder = if health_only { &health_http } else { &http };
        let connection = graceful.watch(builder.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, health_only, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout = ?limits.shutdown_timeout,
            "connections still open after shutdown_timeout; dropping them"
        );
    }
}

fn is_healthcheck<B>(request: &hyper::Request<B>) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request.uri().path() == "/healthcheck"
}

/// What a health-only connection answers to anything but `/healthcheck`, in the shape
/// of every other error answer (`{"error": ...}`; `ApiError` is not used here, as the
/// error module imports this one).
fn connections_exhausted() -> axum::response::Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        axum::Json(serde_json::json!({
            "error": "maximum number of connections reached (max_connections)"
        })),
    )
        .into_response()
}

/// A failed `accept` ends no more than that connection; running out of file descriptors
/// is waited out rather than spun on.
async fn accept_failed(err: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::error!(error = %err, "cannot accept a connection");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// How many checks of a waiting head make `header_read_timeout`: a connection is
/// closed between 1 and 1 + 1/HEAD_CHECKS of the timeout after its last answer was
/// taken (or it was accepted) when no request head has come since.
const HEAD_CHECKS: u32 = 4;

/// A connection's requests: how many began (their heads were parsed) and how many
/// ended (hyper took the whole answer, or the request was dropped). While they differ
/// the connection is busy; otherwise it waits for a head. Only the connection's task
/// changes them.
#[derive(Default)]
struct Exchanges {
    begun: AtomicU64,
    ended: AtomicU64,
}

/// One request of a connection, from its head until hyper has taken its answer.
struct Exchange(Arc<Exchanges>);

impl Exchange {
    fn begin(exchanges: &Arc<Exchanges>) -> Self {
        exchanges.begun.fetch_add(1, Ordering::Relaxed);
        Exchange(exchanges.clone())
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::Relaxed);
    }
}

/// An answer's body, which ends its exchange when hyper drops it: after its last
/// frame, or with the connection.
struct Answer {
    body: Body,
    _exchange: Exchange,
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A client's socket with the connection's deadlines:
/// - **Head.** A read that waits fails once the connection has been without a request
///   for `header_read_timeout`: a client that sends no head, or trickles one, or sits
///   idle between requests. The check runs when a read waits, on a sleep that rings a
///   few times per timeout; a connection busy with a request is never cut off by it,
///   whatever it reads.
/// - **Write.** A write fails once it has made no progress for `write_timeout`: the
///   client's receive window stayed shut that long, so it is not reading its answer.
///   Only a write that waits counts; an answer still being computed writes nothing and
///   is never cut off by this.
struct ClientIo {
    inner: TcpStream,
    exchanges: Arc<Exchanges>,
    check_every: Duration,
    /// Rings every `check_every` once a read has waited.
    check: Option<Pin<Box<Sleep>>>,
    /// The waker `check` was last polled with: until it is moved, the timer wheel
    /// holds it, and a read that waits with the same one (every read of the
    /// connection's task) need not poll `check` again.
    registered: Option<Waker>,
    /// The requests begun and ended as of the last check (their sum), and how many
    /// checks in a row found the connection idle since.
    seen: u64,
    quiet: u32,
    write_timeout: Duration,
    /// Set when a write first waited, cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl ClientIo {
    fn new(
        inner: TcpStream,
        exchanges: Arc<Exchanges>,
        header_read_timeout: Duration,
        write_timeout: Duration,
    ) -> Self {
        ClientIo {
            inner,
            exchanges,
            // At least a millisecond, so that a check never rings again at once.
            check_every: (header_read_timeout / HEAD_CHECKS).max(Duration::from_millis(1)),
            check: None,
            registered: None,
            seen: 0,
            quiet: 0,
            write_timeout,
            stalled: None,
        }
    }

    /// What a read that waits answers: still waiting, or the head deadline's error.
    fn head_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let every = self.check_every;
        let check = self
            .check
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        loop {
            if !check.is_elapsed()
                && self
                    .registered
                    .as_ref()
                    .is_some_and(|waker| waker.will_wake(cx.waker()))
            {
                return Poll::Pending;
            }
            if check.as_mut().poll(cx).is_pending() {
                self.registered = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let begun = self.exchanges.begun.load(Ordering::Relaxed);
            let ended = self.exchanges.ended.load(Ordering::Relaxed);
            // A write that waits is `write_timeout`'s to judge.
            let busy = begun != ended || self.stalled.is_some();
            // Both only grow: their sum changes whenever a request began or ended.
            let activity = begun.wrapping_add(ended);
            if busy || activity != self.seen {
                // Idle (if at all) only since the last check: counted from here.
                self.seen = activity;
                self.quiet = 0;
            } else {
                self.quiet += 1;
                if self.quiet >= HEAD_CHECKS {
                    metrics::counter!(crate::telemetry::HEAD_TIMEOUTS).increment(1);
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no request head within {}s (header_read_timeout)",
                            (every * HEAD_CHECKS).as_secs_f64()
                        ),
                    )));
                }
            }
            // From now, not from when it rang: a connection whose task was busy must
            // not have its checks counted at once.
            check.as_mut().reset(tokio::time::Instant::now() + every);
            self.registered = None;
        }
    }

    fn write_progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.write_timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => {
                metrics::counter!(crate::telemetry::WRITE_TIMEOUTS).increment(1);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client read nothing for {}s (write_timeout)",
                        timeout.as_secs_f64()
                    ),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Pending => self.head_deadline(cx),
            ready => ready,
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.write_progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.write_progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.write_progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.write_progress(cx, poll)
    }
}

/// The error of a body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {}s (body_read_timeout)", .0.as_secs_f64())]
pub struct BodyTimeout(Duration);

/// A request body that fails once its deadline (set when the headers arrived) passes.
/// A handler that reads it gets the error and answers 408; hyper closes the connection,
/// as the rest of the body was never read.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(this.timeout).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::AsyncReadExt;

    use super::*;

    /// A server-side socket in a `ClientIo` with a `timeout` head deadline, its
    /// requests, and the client's end (kept open, sending nothing).
    async fn connection(timeout: Duration) -> (ClientIo, Arc<Exchanges>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let exchanges = Arc::new(Exchanges::default());
        let io = ClientIo::new(server, exchanges.clone(), timeout, Duration::from_secs(60));
        (io, exchanges, client)
    }

    /// Reads until the read fails or `limit` passes; how long it took, if it failed
    /// with the head deadline's error.
    async fn read_fails_within(io: &mut ClientIo, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        let mut buf = [0u8; 64];
        match tokio::time::timeout(limit, io.read(&mut buf)).await {
            Ok(Err(err)) => {
                assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
                assert!(err.to_string().contains("header_read_timeout"), "{err}");
                Some(started.elapsed())
            }
            Ok(Ok(n)) => panic!("read {n} bytes from a silent client"),
            Err(_) => None,
        }
    }

    #[tokio::test]
    async fn a_connection_without_a_request_head_fails_its_read_after_the_timeout() {
        let timeout = Duration::from_millis(400);
        let (mut io, _exchanges, _client) = connection(timeout).await;
        let failed = read_fails_within(&mut io, Duration::from_secs(5))
            .await
            .expect("the read did not fail");
        assert!(failed >= timeout, "{failed:?}");
        // The documented bound, with room for a loaded machine.
        assert!(
            failed < timeout * 5 / 4 + Duration::from_millis(300),
            "{failed:?}"
        );
    }

    #[tokio::test]
    async fn reads_during_a_request_never_time_out() {
        // A request in progress (its body read, its answer computed or written) reads as
        // long as it needs to; the body has its own deadline.
        let timeout = Duration::from_millis(200);
        let (mut io, exchanges, _client) = connection(timeout).await;
        let request = Exchange::begin(&exchanges);
        assert_eq!(read_fails_within(&mut io, timeout * 4).await, None);
        // Idle from when its answer was taken.
        drop(request);
        let ended = Instant::now();
        read_fails_within(&mut io, Duration::from_secs(5))
            .await
            .expect("the read did not fail");
        assert!(ended.elapsed() >= timeout, "{:?}", ended.elapsed());
    }

    #[tokio::test]
    async fn each_request_gives_the_next_head_the_whole_timeout() {
        // Requests that each come within the timeout keep the connection, however long
        // it lives.
        let timeout = Duration::from_millis(400);
        let (mut io, exchanges, _client) = connection(timeout).await;
        let started = Instant::now();
        for _ in 0..4 {
            assert_eq!(read_fails_within(&mut io, timeout * 3 / 4).await, None);
            drop(Exchange::begin(&exchanges));
        }
        assert!(started.elapsed() > timeout * 2);
        assert!(
            read_fails_within(&mut io, Duration::from_secs(5))
                .await
                .is_some()
        );
    }
}
