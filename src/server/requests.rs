//! The `/requests/{id}` endpoint: polling for the answer of a request that was
//! answered `pending`. In a fleet, a poll for another replica's request is sent on to
//! it (see `crate::fleet`).

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, RequestParams, json_bytes};
use crate::fleet::{FORWARDED_HEADER, PollRoute};
use crate::service::RequestId;
use crate::telemetry::REQUEST_POLLS;

/// `GET /requests/{id}`: the answer of a request that was answered `pending`.
pub async fn poll(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    params: Result<Query<RequestParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // Polls hold no request slot: each waits a bounded time and answers `pending` again,
    // rather than holding its connection for as long as the request runs.
    let timeout = params
        .timeout()?
        .map_or(state.max_poll_timeout, |t| t.min(state.max_poll_timeout));
    let unknown = || {
        metrics::counter!(REQUEST_POLLS, "outcome" => "unknown").increment(1);
        ApiError::not_found("unknown request id")
    };
    let id = id.parse().map(RequestId).map_err(|_| unknown())?;
    if let Some(fleet) = &state.fleet
        && !headers.contains_key(FORWARDED_HEADER)
        && let PollRoute::Peer(peer) = fleet.route(id).await
    {
        let Some(answer) = fleet.forward_poll(&peer, id, timeout).await else {
            // Its owner is gone, and the request with it: as for any unknown id, the
            // client sends the request again.
            metrics::counter!(REQUEST_POLLS, "outcome" => "owner_unreachable").increment(1);
            return Err(ApiError::not_found("unknown request id"));
        };
        metrics::counter!(REQUEST_POLLS, "outcome" => "forwarded").increment(1);
        return Ok((
            answer.status,
            [(header::CONTENT_TYPE, "application/json")],
            answer.body,
        )
            .into_response());
    }
    match state.service.get_response(id, Some(timeout)).await {
        Some(body) => {
            metrics::counter!(REQUEST_POLLS, "outcome" => "here").increment(1);
            Ok(json_bytes(body))
        }
        None => Err(unknown()),
    }
}
