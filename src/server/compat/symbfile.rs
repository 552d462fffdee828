//! Elastic's symbol uploads: `POST /api/symbols-ranges` and `POST
//! /api/symbols-returnpads`, as the profiler's `symbtool push-symbols` sends them. The
//! body is one part of a symbfile; headers name the executable (`FileID`, base64),
//! the part (`FilePart`, from 0) and the count (`FileParts`), and carry the key
//! (`Authorization: APIKey <key>`). Answers have Elastic's shape: `{"success":true,
//! "status":200}`, or `{"success":false,"uuid":…,"error":{"Code":…,"Text":…},
//! "status":…}` with the uuid in our log line. Storing and serving are
//! `native::symbfile`'s.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;

use super::super::{ApiError, AppState};
use crate::native::symbfile::{FileId, InvalidFileId, SymbfileKind, UploadError, UploadProgress};

pub async fn upload_ranges(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    upload(&state, SymbfileKind::Ranges, &headers, body).await
}

pub async fn upload_return_pads(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    upload(&state, SymbfileKind::ReturnPads, &headers, body).await
}

async fn upload(state: &AppState, kind: SymbfileKind, headers: &HeaderMap, body: Body) -> Response {
    match receive(state, kind, headers, body).await {
        Ok((file_id, upload)) => {
            match upload {
                UploadProgress::Partial { received, parts } => {
                    tracing::debug!(%file_id, kind = kind.as_str(), received, parts, "symbfile part stored");
                }
                UploadProgress::Complete => {
                    tracing::info!(%file_id, kind = kind.as_str(), "symbfile upload complete");
                }
            }
            axum::Json(json!({"success": true, "status": 200})).into_response()
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// A refused upload: the status, Elastic's error code (a string of digits) and a text
/// that says what to fix.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    text: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, text: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            text: text.into(),
        }
    }
}

/// The codes our answers use; docs/fronts.md ("symbfile uploads") lists them.
mod code {
    pub const INTERNAL: &str = "1000";
    pub const UNAUTHORIZED: &str = "1001";
    pub const DISABLED: &str = "1002";
    pub const BAD_HEADERS: &str = "1003";
    pub const INVALID_SYMBFILE: &str = "1004";
    pub const TOO_LARGE: &str = "1005";
    pub const TOO_MANY_UPLOADS: &str = "1006";
    pub const STORAGE_FULL: &str = "1007";
    pub const OVERLOADED: &str = "1008";
    pub const BODY_FAILED: &str = "1009";
}

impl From<UploadError> for Refusal {
    fn from(err: UploadError) -> Self {
        let text = err.to_string();
        match err {
            UploadError::BadRequest(_) => {
                Refusal::new(StatusCode::BAD_REQUEST, code::BAD_HEADERS, text)
            }
            UploadError::Invalid(_) => {
                Refusal::new(StatusCode::BAD_REQUEST, code::INVALID_SYMBFILE, text)
            }
            UploadError::TooLarge(_) => {
                Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, code::TOO_LARGE, text)
            }
            UploadError::TooMany(_) => {
                Refusal::new(StatusCode::TOO_MANY_REQUESTS, code::TOO_MANY_UPLOADS, text)
            }
            UploadError::Full(_) | UploadError::NoSpace => {
                Refusal::new(StatusCode::INSUFFICIENT_STORAGE, code::STORAGE_FULL, text)
            }
            UploadError::Refused {
                too_large: true, ..
            } => Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, code::TOO_LARGE, text),
            UploadError::Refused { .. } => {
                Refusal::new(StatusCode::BAD_REQUEST, code::INVALID_SYMBFILE, text)
            }
            UploadError::SharedUnavailable => {
                Refusal::new(StatusCode::SERVICE_UNAVAILABLE, code::OVERLOADED, text)
            }
            UploadError::Internal => Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                code::INTERNAL,
                "Something went wrong on our side.",
            ),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let uuid = uuid::Uuid::new_v4();
        if self.status.is_server_error() {
            tracing::error!(%uuid, code = self.code, text = %self.text, "symbfile upload failed");
        } else {
            tracing::info!(%uuid, code = self.code, text = %self.text, "symbfile upload refused");
        }
        let body = json!({
            "success": false,
            "uuid": uuid,
            "error": {"Code": self.code, "Text": self.text},
            "status": self.status.as_u16(),
        });
        (self.status, axum::Json(body)).into_response()
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, Refusal> {
    let missing = || {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            code::BAD_HEADERS,
            format!("header {name} is missing"),
        )
    };
    headers
        .get(name)
        .ok_or_else(missing)?
        .to_str()
        .map(str::trim)
        .map_err(|_| missing())
}

fn number(headers: &HeaderMap, name: &str) -> Result<u32, Refusal> {
    let value = header(headers, name)?;
    value.parse().map_err(|_| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            code::BAD_HEADERS,
            format!("header {name}: {value:?} is not a part number"),
        )
    })
}

/// Checks the key before anything else: a client without one learns nothing more.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
    if !state.symbfiles.uploads_enabled() {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            code::DISABLED,
            "symbfile uploads are disabled on this server (no symbfile.api_keys configured)",
        ));
    }
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("APIKey"))
        .map(|(_, key)| key.trim());
    match key {
        Some(key) if state.symbfiles.accepts_key(key) => Ok(()),
        Some(_) => Err(Refusal::new(
            StatusCode::UNAUTHORIZED,
            code::UNAUTHORIZED,
            "invalid API key",
        )),
        None => Err(Refusal::new(
            StatusCode::UNAUTHORIZED,
            code::UNAUTHORIZED,
            "an `Authorization: APIKey <key>` header is required",
        )),
    }
}

async fn receive(
    state: &AppState,
    kind: SymbfileKind,
    headers: &HeaderMap,
    body: Body,
) -> Result<(FileId, UploadProgress), Refusal> {
    authorize(state, headers)?;
    // The same slots as every other request: an overloaded server reads no upload.
    let _slot = state.service.reserve().map_err(|_| {
        Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::OVERLOADED,
            "the server is overloaded; retry later",
        )
    })?;
    let file_id: FileId = header(headers, "FileID")?
        .parse()
        .map_err(|err: InvalidFileId| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                code::BAD_HEADERS,
                format!("header FileID: {err}"),
            )
        })?;
    let part = number(headers, "FilePart")?;
    let parts = number(headers, "FileParts")?;
    let mut writer = state
        .symbfiles
        .begin_part(file_id, kind, part, parts)
        .await?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| {
            let failed = ApiError::body_failed(
                &err,
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {err}"),
            );
            Refusal::new(failed.status, code::BODY_FAILED, failed.message)
        })?;
        writer.write(&chunk).await?;
    }
    Ok((file_id, writer.finish().await?))
}
