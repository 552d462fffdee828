//! The `/requests/{id}` endpoint: polling for the answer of a request that was
//! answered `pending`.

use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{ApiError, AppState, RequestParams, json_bytes};
use crate::service::RequestId;

/// `GET /requests/{id}`: the answer of a request that was answered `pending`.
pub async fn poll(
    State(state): State<AppState>,
    Path(id): Path<String>,
    params: Result<Query<RequestParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // Polls hold no request slot: each waits a bounded time and answers `pending` again,
    // rather than holding its connection for as long as the request runs.
    let timeout = params
        .timeout()?
        .map_or(state.max_poll_timeout, |t| t.min(state.max_poll_timeout));
    let id = id
        .parse()
        .map(RequestId)
        .map_err(|_| ApiError::not_found("unknown request id"))?;
    match state.service.get_response(id, Some(timeout)).await {
        Some(body) => Ok(json_bytes(body)),
        None => Err(ApiError::not_found("unknown request id")),
    }
}
