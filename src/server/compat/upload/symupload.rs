//! Breakpad's `symupload` (its first, simple protocol, `symupload <file.sym> <url>`):
//! `POST /symupload` with a multipart form holding `symbol_file` (the file) and the
//! fields symupload fills from the `.sym`'s MODULE line: `debug_file`, `code_file`,
//! `debug_identifier` (the id without dashes), `os`, `cpu`, and `version`. symupload
//! sends no token of its own, so the token is part of the URL the client is given
//! (`?token=`, or `api_key`/`key`); `Auth-Token` and `Authorization: Bearer` work too.
//! symupload counts any status but 200 as a failure, so success is a 200; a refusal
//! is a 4xx with a text body that says why.
//!
//! Any debug file the store takes can be sent this way (curl's `-F symbol_file=@...`),
//! which is how a file too big for a zip streams straight into the store.

use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::super::super::AppState;
use super::spool::{
    Refusal, authorized, bearer, check_content_length, header, multipart_error, spool_field,
    text_field,
};
use crate::store::{Access, Namespace};

#[derive(Debug, Default, Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
    api_key: Option<String>,
    key: Option<String>,
}

/// `POST /symupload`.
pub async fn upload(
    State(state): State<AppState>,
    Query(query): Query<TokenQuery>,
    request: Request,
) -> Response {
    match receive(&state, query, request).await {
        Ok(body) => (StatusCode::OK, axum::Json(body)).into_response(),
        Err(refusal) => {
            if refusal.status.is_server_error() {
                tracing::error!(status = %refusal.status, reason = %refusal.reason, "symupload failed");
            } else {
                tracing::info!(status = %refusal.status, reason = %refusal.reason, "symupload refused");
            }
            (refusal.status, format!("{}\n", refusal.reason)).into_response()
        }
    }
}

async fn receive(
    state: &AppState,
    query: TokenQuery,
    mut request: Request,
) -> Result<serde_json::Value, Refusal> {
    let Some(store) = state.store.clone() else {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            "no store is configured (store.backend)",
        ));
    };
    let headers = request.headers().clone();
    let token = (query.token.as_deref())
        .or(query.api_key.as_deref())
        .or(query.key.as_deref())
        .or_else(|| header(&headers, "auth-token"))
        .or_else(|| bearer(&headers));
    if !authorized(&store, token, Access::Write) {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "a token with write access is required (?token=, Auth-Token or Authorization: Bearer)",
        ));
    }
    check_content_length(&headers, store.max_file_size())?;
    axum::extract::DefaultBodyLimit::disable().apply(&mut request);
    let mut multipart = Multipart::from_request(request, &())
        .await
        .map_err(|rejection| Refusal::new(rejection.status(), rejection.body_text()))?;
    let mut file = None;
    let mut debug_file = None;
    let mut debug_identifier = None;
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "symbol_file" => {
                if file.is_some() {
                    return Err(Refusal::bad_request(
                        "form field `symbol_file` is sent twice",
                    ));
                }
                let file_name = field.file_name().map(str::to_owned);
                let (staged, size) = spool_field(&store, field).await?;
                file = Some((staged, file_name, size));
            }
            "debug_file" => debug_file = Some(text_field(field, &name).await?),
            "debug_identifier" => debug_identifier = Some(text_field(field, &name).await?),
            // os, cpu, code_file, version: the file itself says what they say.
            _ => drop(text_field(field, &name).await?),
        }
    }
    let Some((file, file_name, size)) = file else {
        return Err(Refusal::bad_request("missing form field `symbol_file`"));
    };
    if let Some(id) = &debug_identifier
        && (id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(Refusal::bad_request(format!(
            "form field `debug_identifier`: expected Breakpad's id in hex, got {id:?}"
        )));
    }
    let name = debug_file.clone().or(file_name);
    // The id the form names is checked against the file before it is published.
    let wanted = debug_identifier.clone();
    let path = file.path().to_owned();
    let ids = tokio::task::spawn_blocking(move || object_ids(&path))
        .await
        .map_err(Refusal::internal)??;
    if let Some(wanted) = &wanted
        && !ids.iter().any(|id| id.eq_ignore_ascii_case(wanted))
    {
        return Err(Refusal::bad_request(format!(
            "form field `debug_identifier` names {wanted}, but symbol_file is {}",
            ids.first().map_or("no debug file", String::as_str)
        )));
    }
    let published = store
        .publish(&Namespace::Team, file, name.as_deref())
        .await
        .map_err(Refusal::from)?;
    tracing::info!(size, objects = published.len(), "symupload stored");
    Ok(json!({
        "status": "ok",
        "size": size,
        "published": published.iter().map(|p| json!({
            "path": p.path,
            "debug_id": p.debug_id.map(|id| id.to_string()),
            "outcome": p.outcome,
        })).collect::<Vec<_>>(),
    }))
}

/// Breakpad's form of each object's debug id in the file (what `debug_identifier`
/// carries); refused when the file is no debug file.
fn object_ids(path: &std::path::Path) -> Result<Vec<String>, Refusal> {
    let view = symbolic::common::ByteView::open(path).map_err(Refusal::internal)?;
    super::spool::object_ids(&view, false)
        .map_err(|err| Refusal::bad_request(format!("symbol_file is not a debug file ({err})")))
}
