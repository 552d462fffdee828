//! What the upload fronts share: the token a client sends, a form's file streamed to
//! the store's staging area within `store.max_file_size`, and a refusal with its status
//! and reason, which each front words in its protocol's shape.

use axum::extract::multipart::{Field, MultipartError};
use axum::http::{HeaderMap, StatusCode};
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;

use crate::store::{Access, Store};

/// Form fields that are not the file (ids, names, a URL) are small.
pub const MAX_TEXT_FIELD: usize = 64 * 1024;

/// Why an upload was refused; nothing of it is published.
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub reason: String,
}

impl Refusal {
    pub fn new(status: StatusCode, reason: impl Into<String>) -> Self {
        Refusal {
            status,
            reason: reason.into(),
        }
    }

    pub fn bad_request(reason: impl Into<String>) -> Self {
        Refusal::new(StatusCode::BAD_REQUEST, reason)
    }

    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "upload failed on our side");
        Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the upload could not be stored; try again",
        )
    }

    pub fn too_large(max: u64) -> Self {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the upload exceeds {max} bytes (store.max_file_size)"),
        )
    }
}

impl From<crate::store::Refused> for Refusal {
    fn from(refused: crate::store::Refused) -> Self {
        Refusal::new(refused.status, refused.reason)
    }
}

pub fn multipart_error(err: MultipartError) -> Refusal {
    Refusal::new(
        err.status(),
        format!("invalid multipart body: {}", err.body_text()),
    )
}

/// Whether `token` may `access` the store. Tecken's tokens may carry a label after a
/// `-` that Tecken ignores (`<token>-uploadtry-20230913`): a token is tried whole, then
/// without its label.
pub fn authorized(store: &Store, token: Option<&str>, access: Access) -> bool {
    let Some(token) = token else {
        return false;
    };
    store.authorize(Some(token), access)
        || token
            .split_once('-')
            .is_some_and(|(bare, _)| !bare.is_empty() && store.authorize(Some(bare), access))
}

/// The value of header `name`, if it is text.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A bearer token from `Authorization: Bearer <token>` (the scheme in any case, as
/// the fronts read it).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    super::super::super::token::authorization(headers)
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token)
}

/// Refuses a body whose announced length is past `max` before reading any of it.
pub fn check_content_length(headers: &HeaderMap, max: u64) -> Result<(), Refusal> {
    let announced = header(headers, "content-length").and_then(|v| v.parse::<u64>().ok());
    match announced {
        // The form's boundaries and fields around the file are a few kilobytes.
        Some(len) if len > max.saturating_add(MAX_TEXT_FIELD as u64 * 16) => {
            Err(Refusal::too_large(max))
        }
        _ => Ok(()),
    }
}

/// Streams a form's file field to a staging file of the store, refused past
/// `store.max_file_size` as its bytes arrive; returns the file and its size.
pub async fn spool_field(
    store: &Store,
    mut field: Field<'_>,
) -> Result<(NamedTempFile, u64), Refusal> {
    let max = store.max_file_size();
    let staging = store.staging_file().map_err(Refusal::internal)?;
    let file = staging.reopen().map_err(Refusal::internal)?;
    let mut out = tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::from_std(file));
    let mut written: u64 = 0;
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        written = written.saturating_add(chunk.len() as u64);
        if written > max {
            return Err(Refusal::too_large(max));
        }
        out.write_all(&chunk).await.map_err(Refusal::internal)?;
    }
    out.flush().await.map_err(Refusal::internal)?;
    Ok((staging, written))
}

/// A small text field, refused past [`MAX_TEXT_FIELD`].
pub async fn text_field(mut field: Field<'_>, name: &str) -> Result<String, Refusal> {
    let mut data = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        if data.len() + chunk.len() > MAX_TEXT_FIELD {
            return Err(Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("form field `{name}` exceeds {MAX_TEXT_FIELD} bytes"),
            ));
        }
        data.extend_from_slice(&chunk);
    }
    String::from_utf8(data)
        .map_err(|_| Refusal::bad_request(format!("form field `{name}` is not UTF-8 text")))
}

/// The ids of each object of the debug file in `view`: Breakpad's form of its debug id
/// (as a symbols path or symupload's `debug_identifier` spells it), and with
/// `code_ids` its code id too. Malformed when the file is no debug file.
pub fn object_ids(
    view: &symbolic::common::ByteView<'_>,
    code_ids: bool,
) -> crate::error::CacheResult<Vec<String>> {
    use crate::error::CacheError;
    crate::error::isolate("upload", || {
        let archive = symbolic::debuginfo::Archive::parse(view)
            .map_err(|err| CacheError::Malformed(err.to_string()))?;
        let mut ids = Vec::new();
        for object in archive.objects() {
            let object = object.map_err(|err| CacheError::Malformed(err.to_string()))?;
            ids.push(object.debug_id().breakpad().to_string());
            if let Some(code_id) = object.code_id().filter(|_| code_ids) {
                ids.push(code_id.as_str().to_owned());
            }
        }
        Ok(ids)
    })
}
