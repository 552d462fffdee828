//! The part of Sentry's web API that `sentry-cli` uploads through, answered from the
//! store (`store/`): `debug-files upload`, `upload-proguard` and `sourcemaps upload`
//! (artifact bundles with debug ids).
//!
//! - `GET /api/0/organizations/{org}/chunk-upload/`: the chunk-upload options (sizes
//!   and counts from `store.chunk_upload`, all enforced).
//! - `POST` on the same path: chunks (`file` or `file_gzip` multipart parts named by
//!   their SHA-1), checked, deduplicated and kept in the store's state area
//!   (`chunks.rs`).
//! - `POST /api/0/projects/{org}/{project}/files/difs/assemble/` and
//!   `POST /api/0/organizations/{org}/artifactbundle/assemble/`: which chunks are
//!   missing, else the file joined, checked and published (`assemble.rs`).
//!
//! Auth is `Authorization: Bearer <token>` against `store.tokens` (write access);
//! `org/project` picks the namespace (`store.scopes`). Errors have Sentry's shape,
//! `{"detail": "..."}`, which sentry-cli prints.

mod assemble;
mod chunks;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use super::super::token::authorization;
use super::super::{AppState, Routes};
use crate::store::{Access, ChunkUploadConfig, Store};

pub use chunks::ChunkUploads;

/// The routes; they answer 404 (`no store is configured`) without a store.
pub fn routes() -> Routes {
    Routes::default()
        .route(
            "/api/0/organizations/{org}/chunk-upload/",
            get(options).post(chunks::upload_chunks),
        )
        .route(
            "/api/0/projects/{org}/{project}/files/difs/assemble/",
            post(assemble::assemble_difs),
        )
        .route(
            "/api/0/organizations/{org}/artifactbundle/assemble/",
            post(assemble::assemble_artifact_bundle),
        )
}

/// An answer other than 200, in Sentry's shape.
#[derive(Debug)]
pub struct Detail {
    status: StatusCode,
    detail: String,
}

impl Detail {
    fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Detail {
            status,
            detail: detail.into(),
        }
    }

    fn bad_request(detail: impl Into<String>) -> Self {
        Detail::new(StatusCode::BAD_REQUEST, detail)
    }

    /// A failure on our side, logged here; the client learns only that it happened.
    fn internal(what: &str, err: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %err, "sentry-cli upload: {what}");
        Detail::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{what} failed"))
    }
}

impl IntoResponse for Detail {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "detail": self.detail }))).into_response()
    }
}

/// What a handler works with once the request is authorized.
struct Upload {
    store: Store,
    uploads: Arc<ChunkUploads>,
}

impl Upload {
    fn config(&self) -> &ChunkUploadConfig {
        self.uploads.config()
    }
}

/// The store and its chunk uploads, when the request carries a token with write access.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<Upload, Detail> {
    let (Some(store), Some(uploads)) = (state.store.clone(), state.sentry_uploads.clone()) else {
        return Err(Detail::new(
            StatusCode::NOT_FOUND,
            "no store is configured: uploads are off",
        ));
    };
    let token = authorization(headers)
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    if token.is_none() {
        return Err(Detail::new(
            StatusCode::UNAUTHORIZED,
            "authentication credentials were not provided (Authorization: Bearer <token>)",
        ));
    }
    if store.authorize(token, Access::Write) {
        return Ok(Upload { store, uploads });
    }
    if store.authorize(token, Access::Read) {
        return Err(Detail::new(
            StatusCode::FORBIDDEN,
            "this token may only read: uploads need a token with `access: write`",
        ));
    }
    Err(Detail::new(StatusCode::UNAUTHORIZED, "invalid token"))
}

/// A slug of the path as Sentry's would be: letters, digits, `-`, `_`, `.`; anything
/// else (`..` included) is refused before it can name a namespace.
fn slug<'a>(what: &str, value: &'a str) -> Result<&'a str, Detail> {
    let ok = !value.is_empty()
        && value.len() <= 100
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(value)
    } else {
        Err(Detail::bad_request(format!(
            "{what} `{value}` is not a slug (letters, digits, `-`, `_`, `.`)"
        )))
    }
}

/// `GET /api/0/organizations/{org}/chunk-upload/`.
async fn options(
    State(state): State<AppState>,
    Path(org): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Detail> {
    let upload = authorize(&state, &headers)?;
    let org = slug("organization", &org)?;
    let config = upload.config();
    Ok(Json(json!({
        // Relative: sentry-cli resolves it against its own --url, so the answer does
        // not depend on the Host header a client sent.
        "url": format!("/api/0/organizations/{org}/chunk-upload/"),
        "chunkSize": config.chunk_size,
        "chunksPerRequest": config.chunks_per_request,
        "maxRequestSize": config.max_request_size,
        "maxFileSize": upload.store.max_file_size(),
        "concurrency": config.concurrency,
        "hashAlgorithm": "sha1",
        "compression": ["gzip"],
        "accept": [
            "debug_files", "release_files", "pdbs", "portablepdbs", "sources",
            "bcsymbolmaps", "il2cpp", "artifact_bundles", "artifact_bundles_v2",
            "proguard",
        ],
    }))
    .into_response())
}

/// A SHA-1 as sentry-cli writes it (40 lowercase hex digits); anything else is refused,
/// so a checksum can name a path in the state area.
fn sha1_hex<'a>(what: &str, value: &'a str) -> Result<&'a str, Detail> {
    if value.len() == 40
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(value)
    } else {
        Err(Detail::bad_request(format!(
            "{what} `{}` is not a SHA-1 (40 lowercase hex digits)",
            value.chars().take(64).collect::<String>()
        )))
    }
}
