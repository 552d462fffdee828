//! Mozilla Tecken's upload API, `POST /upload/`: the token in `Auth-Token`, and either a
//! `multipart/form-data` body whose one file is a zip of `<debug_file>/<debug_id>/<file>`
//! entries, or a `url` field (form or urlencoded) naming such a zip on a host of
//! `store.upload_url_hosts`, fetched under the downloads' rules (reserved addresses
//! refused unless `connect_to_reserved_ips`). Answers as Tecken does: 201 with
//! `{"upload": {...}}`, errors as `{"error": "..."}` with 400, 403 or 413.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tempfile::NamedTempFile;
use url::Url;

use super::super::super::AppState;
use super::archive::{self, ArchiveLimits};
use super::spool::{
    MAX_TEXT_FIELD, Refusal, authorized, check_content_length, header, spool_field, text_field,
};
use crate::fetch::{HttpOptions, record_download};
use crate::store::{Access, Namespace, Outcome, Store};

/// `POST /upload/`.
pub async fn upload(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    match receive(&state, request).await {
        Ok(body) => {
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "tecken upload stored"
            );
            (StatusCode::CREATED, axum::Json(body)).into_response()
        }
        Err(refusal) => {
            if refusal.status.is_server_error() {
                tracing::error!(status = %refusal.status, reason = %refusal.reason, "tecken upload failed");
            } else {
                tracing::info!(status = %refusal.status, reason = %refusal.reason, "tecken upload refused");
            }
            (refusal.status, axum::Json(json!({"error": refusal.reason}))).into_response()
        }
    }
}

/// Where the zip comes from.
enum Zip {
    Posted {
        file: NamedTempFile,
        name: String,
        size: u64,
    },
    Url(String),
}

async fn receive(state: &AppState, request: Request) -> Result<serde_json::Value, Refusal> {
    let Some(store) = state.store.clone() else {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            "no store is configured (store.backend)",
        ));
    };
    let headers = request.headers().clone();
    if !authorized(&store, header(&headers, "auth-token"), Access::Write) {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "This requires an Auth-Token with write access to authenticate the request",
        ));
    }
    check_content_length(&headers, store.max_file_size())?;
    let (zip, is_try) = read_body(&store, &headers, request).await?;
    let (file, name, size, url) = match zip {
        Zip::Posted { file, name, size } => (file, name, size, None),
        Zip::Url(url) => {
            let (file, name, size) = download(state, &store, &url).await?;
            (file, name, size, Some(url))
        }
    };
    let limits = ArchiveLimits {
        max_entries: store.max_archive_entries(),
        max_size: store.max_file_size(),
        max_ratio: store.max_archive_ratio(),
    };
    let zip_file = file.reopen().map_err(Refusal::internal)?;
    let staging = store.clone();
    let unpacked = tokio::task::spawn_blocking(move || {
        archive::unpack(zip_file, limits, || staging.staging_file())
    })
    .await
    .map_err(Refusal::internal)??;
    drop(file);

    let created_at = now();
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for entry in unpacked.entries {
        let published = store
            .publish(&Namespace::Team, entry.file, Some(&entry.file_name))
            .await
            .map_err(|refused| {
                Refusal::new(
                    refused.status,
                    format!("zip entry `{}`: {}", entry.key, refused.reason),
                )
            })?;
        let kept = published
            .iter()
            .all(|p| matches!(p.outcome, Outcome::AlreadyStored | Outcome::KeptExisting));
        if kept {
            skipped.push(entry.key.clone());
        }
        files.push(json!({
            "key": entry.key,
            "published": published.iter().map(|p| json!({
                "path": p.path,
                "debug_id": p.debug_id.map(|id| id.to_string()),
                "outcome": p.outcome,
            })).collect::<Vec<_>>(),
        }));
    }
    Ok(json!({
        "upload": {
            "id": fastrand::u32(..),
            "size": size,
            "filename": name,
            "bucket": "store",
            "download_url": url,
            "try_symbols": is_try,
            "redirect_urls": [],
            "completed_at": now(),
            "created_at": created_at,
            "user": null,
            "skipped_keys": skipped,
            "ignored_keys": unpacked.ignored,
            "files": files,
        }
    }))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The zip posted, or the URL to fetch it from, and whether it is marked `try`.
async fn read_body(
    store: &Store,
    headers: &HeaderMap,
    request: Request,
) -> Result<(Zip, bool), Refusal> {
    let content_type = header(headers, header::CONTENT_TYPE.as_str()).unwrap_or("");
    if content_type.starts_with("application/x-www-form-urlencoded") {
        let body = axum::body::to_bytes(request.into_body(), MAX_TEXT_FIELD)
            .await
            .map_err(|_| {
                Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a urlencoded body exceeds {MAX_TEXT_FIELD} bytes"),
                )
            })?;
        let fields: BTreeMap<String, String> =
            url::form_urlencoded::parse(&body).into_owned().collect();
        let is_try = fields.contains_key("try");
        return match fields.get("url") {
            Some(url) if !url.is_empty() => Ok((Zip::Url(url.clone()), is_try)),
            _ => Err(Refusal::bad_request(
                "Must be multipart form data with at least one file, or a `url`",
            )),
        };
    }
    let mut request = request;
    axum::extract::DefaultBodyLimit::disable().apply(&mut request);
    let mut multipart = Multipart::from_request(request, &())
        .await
        .map_err(|rejection| Refusal::new(rejection.status(), rejection.body_text()))?;
    let mut zip = None;
    let mut url = None;
    let mut is_try = false;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(super::spool::multipart_error)?
    {
        let name = field.name().unwrap_or_default().to_owned();
        if field.file_name().is_some() {
            if zip.is_some() {
                return Err(Refusal::bad_request(
                    "more than one file in the form: send one zip",
                ));
            }
            let file_name = field.file_name().unwrap_or_default().to_owned();
            let (file, size) = spool_field(store, field).await?;
            zip = Some(Zip::Posted {
                file,
                name: if file_name.is_empty() {
                    name
                } else {
                    file_name
                },
                size,
            });
            continue;
        }
        let value = text_field(field, &name).await?;
        match name.as_str() {
            "url" => url = Some(value),
            "try" => is_try = true,
            _ => {}
        }
    }
    match (zip, url) {
        (Some(_), Some(_)) => Err(Refusal::bad_request("send a file or a `url`, not both")),
        (Some(zip), None) => Ok((zip, is_try)),
        (None, Some(url)) if !url.is_empty() => Ok((Zip::Url(url), is_try)),
        _ => Err(Refusal::bad_request(
            "Must be multipart form data with at least one file, or a `url`",
        )),
    }
}

/// Fetches the zip at `url`, whose host must be one of `store.upload_url_hosts`.
async fn download(
    state: &AppState,
    store: &Store,
    url: &str,
) -> Result<(NamedTempFile, String, u64), Refusal> {
    let parsed = Url::parse(url).map_err(|err| Refusal::bad_request(format!("url: {err}")))?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(Refusal::bad_request(
            "url: expected an https:// or http:// URL",
        ));
    }
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    if !store
        .upload_url_hosts()
        .iter()
        .any(|allowed| allowed.eq_ignore_ascii_case(&host))
    {
        return Err(Refusal::bad_request(format!(
            "Not an allowed domain ({host:?}) to download from (store.upload_url_hosts)"
        )));
    }
    let staging = store.staging_file().map_err(Refusal::internal)?;
    let mut out = tokio::fs::File::from_std(staging.reopen().map_err(Refusal::internal)?);
    let options = HttpOptions {
        max_size: store.max_file_size(),
        ..HttpOptions::default()
    };
    let started = Instant::now();
    let downloaded = state
        .downloader
        .download_http(&parsed, &BTreeMap::new(), options, &mut out)
        .await;
    record_download("tecken_upload_url", started, &downloaded);
    let size = downloaded.map_err(|err| {
        Refusal::bad_request(format!("the zip at url cannot be downloaded: {err}"))
    })?;
    let name = parsed
        .path_segments()
        .and_then(|mut s| s.next_back().map(str::to_owned))
        .unwrap_or_default();
    Ok((staging, name, size))
}
