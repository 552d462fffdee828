//! What the HTTP front records about every request (count, latency, in flight), and
//! `GET /metrics`, which renders everything recorded as Prometheus text.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::Gauge;

use super::AppState;
use crate::telemetry::{HTTP_REQUEST_DURATION, HTTP_REQUESTS, HTTP_REQUESTS_IN_FLIGHT};

/// The endpoint label of requests that matched no route: their paths are whatever
/// clients sent, so they share one label.
const UNMATCHED: &str = "unmatched";

/// Leaves the in-flight gauge when the request is answered or its client goes away.
struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1);
    }
}

/// Middleware: labels by route pattern (`/requests/{id}`), never by the path itself,
/// so the number of series stays bounded whatever clients request.
pub async fn record(request: Request, next: Next) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |path| path.as_str().to_owned());
    let gauge = metrics::gauge!(HTTP_REQUESTS_IN_FLIGHT);
    gauge.increment(1);
    let _in_flight = InFlight(gauge);
    let started = Instant::now();
    let response = next.run(request).await;
    metrics::histogram!(HTTP_REQUEST_DURATION, "endpoint" => endpoint.clone())
        .record(started.elapsed());
    let status = response.status().as_u16().to_string();
    metrics::counter!(HTTP_REQUESTS, "endpoint" => endpoint, "status" => status).increment(1);
    response
}

/// `GET /metrics`: the Prometheus text exposition format.
pub async fn render(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
