//! The `/symbolicate-js` endpoint: counts and parses the request, then hands it to the
//! JavaScript pipeline through the request service.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::error::JsonBody;
use super::{ApiError, AppState, Params, RequestSlot};
use crate::js::JsSymbolicationRequest;
use crate::sources::SourceConfig;

/// `POST /symbolicate-js`: minified JavaScript stack traces, and where to find their
/// source maps (a Sentry project, the request's own sources, the web).
pub async fn symbolicate_js(
    State(state): State<AppState>,
    Params(params): Params,
    slot: RequestSlot,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut request: JsSymbolicationRequest = state.parse_request(body, &[])?;
    // Only the store and the request's own `sources`: the configured ones are symbol
    // servers for native files, and JS files are found through the request's Sentry
    // source, or by debug id in the store.
    let scope = params.scope();
    let sources: Arc<[SourceConfig]> = crate::store::first_sources(
        state.store.as_ref(),
        &scope,
        &std::mem::take(&mut request.sources),
    );
    let js = state.js.clone();
    state
        .run(&params, slot, async move {
            Ok(js.symbolicate(scope, sources, request).await)
        })
        .await
}
