//! The HTTP/1 listener: accepts at most `max_connections` connections at once, closes
//! a connection whose request headers take longer than `header_read_timeout` (idle
//! keep-alive connections included), fails a request body that takes longer than
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

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
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
    http.header_read_timeout(limits.header_read_timeout);
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
        let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
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
            async move {
                if health_only && !is_healthcheck(&request) {
                    return Ok(connections_exhausted());
                }
                // A request without a body (every GET) has no deadline to keep.
                let request = request.map(|body| {
                    if http_body::Body::is_end_stream(&body) {
                        Body::new(body)
                    } else {
                        Body::new(DeadlineBody::new(body, body_timeout))
                    }
                });
                app.oneshot(request).await
            }
        });
        // A builder per connection, for the connection's own timer (a clone is a copy
        // of a few settings).
        let mut builder = if health_only {
            health_http.clone()
        } else {
            http.clone()
        };
        builder.timer(HeadTimer::default());
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

/// hyper's timer for one connection, whose only use is the header deadline: hyper asks
/// for a new sleep at every request head and drops it once the head is parsed. Each of
/// those as a tokio sleep went into the runtime's timer wheel and out again per request,
/// a measurable share of the cheapest requests. Here the connection keeps one tokio
/// sleep, the alarm, that may ring early but never late: a request's sleep only
/// records its deadline, the alarm is moved only when it would ring after that
/// deadline or has rung before it, so a busy connection touches the wheel about once
/// per `header_read_timeout` instead of once per request.
#[derive(Clone, Default)]
struct HeadTimer {
    alarm: Alarm,
}

/// A connection's one tokio sleep, set on first use.
type Alarm = Arc<Mutex<Option<Pin<Box<Sleep>>>>>;

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(std::time::Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HeadDeadline {
            deadline: tokio::time::Instant::from_std(deadline),
            alarm: self.alarm.clone(),
        })
    }
}

/// One request head's deadline, on its connection's alarm. Only the connection's task
/// polls it (the lock is never contended).
struct HeadDeadline {
    deadline: tokio::time::Instant,
    alarm: Alarm,
}

impl Future for HeadDeadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        let mut alarm = self.alarm.lock().unwrap_or_else(PoisonError::into_inner);
        let alarm = alarm.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if alarm.deadline() > deadline {
            alarm.as_mut().reset(deadline);
        }
        // No clock is read while the alarm has not rung: the timer wheel keeps time.
        if alarm.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if alarm.deadline() == deadline {
            return Poll::Ready(());
        }
        // It rang for an earlier head: aim it at this one, which is Ready at once if
        // this deadline has passed too.
        alarm.as_mut().reset(deadline);
        alarm.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HeadDeadline {}

/// A socket whose writes fail once they have made no progress for `timeout`: the
/// client's receive window stayed shut that long, so it is not reading its answer.
/// Only a write that waits counts; an answer still being computed writes nothing and
/// is never cut off by this.
struct WriteDeadline {
    inner: TcpStream,
    timeout: Duration,
    /// Set when a write first waited, cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    fn new(inner: TcpStream, timeout: Duration) -> Self {
        WriteDeadline {
            inner,
            timeout,
            stalled: None,
        }
    }

    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
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

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(cx, poll)
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

    use hyper::rt::Timer;

    use super::*;

    /// Polls `sleep` once, as hyper does when a head is not complete yet.
    async fn poll_once(sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx).is_ready())).await
    }

    /// A head that completes in time: its sleep is polled once, then dropped with the
    /// alarm set.
    async fn head_in_time(timer: &HeadTimer, within: Duration) {
        let mut sleep = timer.sleep(within);
        assert!(!poll_once(&mut sleep).await);
    }

    /// Waits for a head's deadline `after` from now, and checks it came then.
    async fn deadline_comes_after(timer: &HeadTimer, after: Duration) {
        let started = Instant::now();
        timer.sleep(after).await;
        let waited = started.elapsed();
        assert!(waited >= after - Duration::from_millis(10), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
    }

    #[tokio::test]
    async fn each_head_gets_its_own_deadline_from_the_shared_alarm() {
        let timer = HeadTimer::default();
        head_in_time(&timer, Duration::from_millis(200)).await;
        // The next head's deadline is later than the alarm: the alarm rings early and
        // is aimed again, so the head is not cut off before its own deadline.
        deadline_comes_after(&timer, Duration::from_millis(500)).await;
        // An earlier deadline than the alarm's moves the alarm forward.
        head_in_time(&timer, Duration::from_secs(30)).await;
        deadline_comes_after(&timer, Duration::from_millis(100)).await;
    }

    #[tokio::test]
    async fn a_deadline_that_passed_while_the_alarm_rang_for_another_is_ready() {
        let timer = HeadTimer::default();
        head_in_time(&timer, Duration::from_millis(50)).await;
        let mut second = timer.sleep(Duration::from_millis(60));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(poll_once(&mut second).await);
    }
}
