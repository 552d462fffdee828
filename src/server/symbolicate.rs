//! The `/symbolicate` endpoint: native stack traces, counted against the request
//! limits before they are parsed, then symbolicated through the request service.

use axum::extract::State;
use axum::response::Response;

use super::error::JsonBody;
use super::{ApiError, AppState, Params, RequestSlot};
use crate::native::SymbolicateRequest;

/// `POST /symbolicate`: native stack traces plus the modules they run in.
pub async fn symbolicate(
    State(state): State<AppState>,
    Params(params): Params,
    slot: RequestSlot,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut request: SymbolicateRequest = state.parse_request(body, &[])?;
    let scope = params.scope();
    let sources = state.sources_or_default(&scope, request.sources.take());
    let native = state.native.clone();
    state
        .run(&params, slot, async move {
            Ok(native.symbolicate(scope, sources, request).await)
        })
        .await
}
