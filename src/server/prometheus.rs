//! `GET /metrics`: everything the process recorded (the requests' own metrics come from
//! `observe`), as Prometheus text.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// `GET /metrics`: the Prometheus text exposition format.
pub async fn render(State(state): State<AppState>) -> Response {
    crate::telemetry::publish_counts();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
