//! The `/symbolicate-jvm` endpoint: counts and parses the request, then hands it to the
//! JVM pipeline through the request service.

use axum::extract::State;
use axum::response::Response;

use super::error::JsonBody;
use super::limits::Counted;
use super::{ApiError, AppState, Params, RequestSlot};
use crate::jvm::SymbolicateJvmRequest;

/// Lists of a JVM request beside stack traces: each exception is remapped like a stack
/// trace, each class name like a frame.
const JVM_LISTS: &[(&str, Counted)] = &[
    ("exceptions", Counted::Stacktraces),
    ("classes", Counted::Frames),
];

/// `POST /symbolicate-jvm`: obfuscated JVM exceptions, stack traces and class names,
/// and the ProGuard mappings and source bundles to remap them with.
pub async fn symbolicate_jvm(
    State(state): State<AppState>,
    Params(params): Params,
    slot: RequestSlot,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut request: SymbolicateJvmRequest = state.parse_request(body, JVM_LISTS)?;
    let scope = params.scope();
    let sources = state.sources_or_default(&scope, request.sources.take());
    let jvm = state.jvm.clone();
    state
        .run(&params, slot, async move {
            Ok(jvm.symbolicate(scope, sources, request).await)
        })
        .await
}
