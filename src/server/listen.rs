//! The HTTP/1 listener: accepts at most `max_connections` connections at once, closes
//! a connection whose request headers take longer than `header_read_timeout` (idle
//! keep-alive connections included), and fails a request body that takes longer than
//! `body_read_timeout` to arrive. Without these, a client that opens connections and
//! sends half a request holds a socket, a task and buffers forever.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::config::Config;

/// What the listener allows one client.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_connections: usize,
}

impl ConnectionLimits {
    pub fn of(config: &Config) -> Self {
        ConnectionLimits {
            header_read_timeout: config.header_read_timeout,
            body_read_timeout: config.body_read_timeout,
            max_connections: config.max_connections,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then waits for the requests
/// in progress to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    tokio::pin!(shutdown);
    loop {
        // A connection over the limit waits in the kernel's backlog until one closes.
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
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
        let app = app.clone();
        let body_timeout = limits.body_read_timeout;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let request = request.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
            app.clone().oneshot(request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
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
