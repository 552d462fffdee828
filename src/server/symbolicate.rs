use axum::extract::{Query, State};
use axum::response::Response;
use bytes::Bytes;

use super::error::parse_json;
use super::{ApiError, AppState, RequestParams, json_bytes};
use crate::native::SymbolicateRequest;
use crate::service::RequestService;

/// `POST /symbolicate`: native stack traces plus the modules they run in.
pub async fn symbolicate(
    State(state): State<AppState>,
    params: Result<Query<RequestParams>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let timeout = params.timeout()?;
    let mut request: SymbolicateRequest = parse_json(&body)?;
    let sources = state.sources_or_default(request.sources.take());
    let scope = params.scope();
    let native = state.native.clone();
    let handle = state
        .service
        .spawn(async move { Ok(native.symbolicate(scope, sources, request).await) })
        .map_err(|_| ApiError::overloaded())?;
    Ok(json_bytes(RequestService::wait(handle, timeout).await))
}
