use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;

use super::error::parse_json;
use super::{ApiError, AppState, Params};
use crate::native::SymbolicateRequest;

/// `POST /symbolicate`: native stack traces plus the modules they run in.
pub async fn symbolicate(
    State(state): State<AppState>,
    Params(params): Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut request: SymbolicateRequest = parse_json(&body)?;
    let sources = state.sources_or_default(request.sources.take());
    let scope = params.scope();
    let native = state.native.clone();
    state
        .run(&params, async move {
            Ok(native.symbolicate(scope, sources, request).await)
        })
        .await
}
