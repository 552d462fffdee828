use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;

use super::error::parse_json;
use super::{ApiError, AppState, Params};
use crate::jvm::SymbolicateJvmRequest;

/// `POST /symbolicate-jvm`: obfuscated JVM exceptions, stack traces and class names,
/// and the ProGuard mappings and source bundles to remap them with.
pub async fn symbolicate_jvm(
    State(state): State<AppState>,
    Params(params): Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut request: SymbolicateJvmRequest = parse_json(&body)?;
    let sources = state.sources_or_default(request.sources.take());
    let scope = params.scope();
    let jvm = state.jvm.clone();
    state
        .run(&params, async move {
            Ok(jvm.symbolicate(scope, sources, request).await)
        })
        .await
}
