//! Crash-file endpoints: `POST /minidump` and `POST /applecrashreport` (multipart
//! uploads), and `POST /symbolicate-any` (the same files fetched from a `storage_url`).
//! Files are read under the size limit (a small upload into memory, a larger one
//! streamed to disk), unpacked if compressed, and handed to the native pipeline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::multipart::{Field, MultipartError};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Multipart, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use super::error::{JsonBody, parse_json};
use super::limits::{Counted, RequestRefused};
use super::{ApiError, AppState, Params, RequestParams, RequestSlot};
use crate::cache::Scope;
use crate::config::RequestLimits;
use crate::error::CacheError;
use crate::fetch::{HttpOptions, decompress_file, is_compressed, record_download};
use crate::native::interface::{RequestOptions, RewriteRules};
use crate::native::{CrashData, CrashKind, CrashReportRequest};
use crate::sources::SourceConfig;

/// JSON form fields (sources, options, ...) are small; upstream caps them at 1 MiB.
const MAX_FORM_FIELD: usize = 1024 * 1024;

/// Uploads up to this size stay in memory: for a small dump, writing it to a file and
/// mapping it back cost more than the rest of its HTTP handling.
const MAX_IN_MEMORY_UPLOAD: usize = 1024 * 1024;

/// What all uploads held in memory at once may take; past it, uploads are spooled to
/// disk as large ones are, so memory does not grow with `max_concurrent_requests`.
const IN_MEMORY_UPLOADS: usize = 64 * 1024 * 1024;

/// The multipart field that carries the file of `kind`.
fn upload_field(kind: CrashKind) -> &'static str {
    match kind {
        CrashKind::Minidump => "upload_file_minidump",
        CrashKind::AppleCrashReport => "apple_crash_report",
    }
}

/// Where uploads and attachments are spooled, and how big they may get.
#[derive(Clone, Debug)]
pub struct CrashFiles {
    pub dir: PathBuf,
    pub max_size: u64,
    /// The bytes of [`IN_MEMORY_UPLOADS`] not taken by an upload held in memory.
    in_memory: Arc<Semaphore>,
}

impl CrashFiles {
    pub fn new(dir: PathBuf, max_size: u64) -> Self {
        CrashFiles {
            dir,
            max_size,
            in_memory: Arc::new(Semaphore::new(IN_MEMORY_UPLOADS)),
        }
    }

    fn too_large(&self) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "crash file exceeds the limit of {} bytes (max_crash_file_size)",
                self.max_size
            ),
        }
    }

    fn temp_file(&self) -> Result<NamedTempFile, ApiError> {
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| tempfile::Builder::new().prefix(".upload").tempfile_in(&self.dir))
            .map_err(|err| {
                tracing::error!(error = %err, dir = %self.dir.display(), "cannot create upload file");
                ApiError::internal()
            })
    }

    /// Unpacks an upload if it is compressed. One held in memory is written out first
    /// and unpacked on disk, under the same bounds as a large one.
    async fn unpack_upload(&self, upload: Upload) -> Result<Upload, ApiError> {
        let file = match upload {
            Upload::File(file) => file,
            Upload::Memory { data, .. } if is_compressed(&data) => {
                let mut file = self.temp_file()?;
                let written = tokio::task::spawn_blocking(move || {
                    std::io::Write::write_all(&mut file, &data).map(|()| file)
                })
                .await;
                match written {
                    Ok(Ok(file)) => file,
                    Ok(Err(err)) => return Err(write_failed(err)),
                    Err(err) => return Err(write_failed(err)),
                }
            }
            in_memory => return Ok(in_memory),
        };
        self.unpack(file)
            .await
            .map(Upload::File)
            .map_err(|err| unpack_error(err, self))
    }

    /// Unpacks `file` in place if it is compressed (gzip, zstd, xz, bzip2, ...).
    async fn unpack(&self, file: NamedTempFile) -> Result<NamedTempFile, CacheError> {
        let (dir, max) = (self.dir.clone(), self.max_size);
        tokio::task::spawn_blocking(move || {
            Ok(decompress_file(file.path(), &dir, max)?.unwrap_or(file))
        })
        .await
        .map_err(CacheError::internal)?
    }
}

fn multipart_error(err: MultipartError) -> ApiError {
    let text = format!("invalid multipart body: {}", err.body_text());
    ApiError::body_failed(&err, err.status(), text)
}

async fn read_field(mut field: Field<'_>, name: &str) -> Result<Bytes, ApiError> {
    let mut data = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        if data.len() + chunk.len() > MAX_FORM_FIELD {
            return Err(ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!("form field `{name}` exceeds {MAX_FORM_FIELD} bytes"),
            });
        }
        data.extend_from_slice(&chunk);
    }
    Ok(data.into())
}

/// A form field that holds JSON; a parse error names the field and the path in it.
async fn json_field<T: serde::de::DeserializeOwned>(
    field: Field<'_>,
    name: &str,
) -> Result<T, ApiError> {
    let data = read_field(field, name).await?;
    parse_json(&data)
        .map_err(|e| ApiError::bad_request(format!("form field `{name}`: {}", e.message)))
}

fn write_failed(err: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %err, "cannot write upload file");
    ApiError::internal()
}

/// An uploaded crash file.
pub enum Upload {
    /// Up to [`MAX_IN_MEMORY_UPLOAD`] bytes, counted against [`IN_MEMORY_UPLOADS`]
    /// until the upload is dropped.
    Memory {
        data: Vec<u8>,
        budget: OwnedSemaphorePermit,
    },
    File(NamedTempFile),
}

impl Upload {
    fn starts_with(&self, prefix: &[u8]) -> bool {
        match self {
            Upload::Memory { data, .. } => data.starts_with(prefix),
            Upload::File(file) => starts_with(file.path(), prefix),
        }
    }

    fn check_minidump(&self, limits: &RequestLimits) -> Result<(), RequestRefused> {
        match self {
            Upload::Memory { data, .. } => check_minidump(data, limits),
            Upload::File(file) => check_minidump_file(file.path(), limits),
        }
    }
}

/// Reads an uploaded file, refusing it as soon as it passes the limit: into memory
/// while it is small and memory for uploads is left, else streamed to disk.
async fn save_field(mut field: Field<'_>, files: &CrashFiles) -> Result<Upload, ApiError> {
    let mut data = Vec::new();
    let mut budget = Arc::clone(&files.in_memory)
        .try_acquire_many_owned(0)
        .map_err(|_| ApiError::internal())?;
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        let total = data.len() + chunk.len();
        if total as u64 > files.max_size {
            return Err(files.too_large());
        }
        let more = u32::try_from(chunk.len())
            .ok()
            .filter(|_| total <= MAX_IN_MEMORY_UPLOAD)
            .and_then(|n| Arc::clone(&files.in_memory).try_acquire_many_owned(n).ok());
        let Some(more) = more else {
            drop(budget);
            return spool(field, files, &[&data, &chunk])
                .await
                .map(Upload::File);
        };
        budget.merge(more);
        data.extend_from_slice(&chunk);
    }
    Ok(Upload::Memory { data, budget })
}

/// Streams the rest of an uploaded file to disk after what was `read` of it, refusing
/// it as soon as it passes the limit.
async fn spool(
    mut field: Field<'_>,
    files: &CrashFiles,
    read: &[&[u8]],
) -> Result<NamedTempFile, ApiError> {
    let temp = files.temp_file()?;
    let std_file = temp.as_file().try_clone().map_err(|err| {
        tracing::error!(error = %err, "cannot reopen upload file");
        ApiError::internal()
    })?;
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::from_std(std_file));
    let mut written: u64 = 0;
    for part in read {
        written += part.len() as u64;
        out.write_all(part).await.map_err(write_failed)?;
    }
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        written += chunk.len() as u64;
        if written > files.max_size {
            return Err(files.too_large());
        }
        out.write_all(&chunk).await.map_err(write_failed)?;
    }
    out.flush().await.map_err(write_failed)?;
    Ok(temp)
}

/// The fields of an upload form; unknown fields are skipped, as upstream does.
pub struct CrashForm {
    pub file: Option<Upload>,
    pub sources: Option<Vec<SourceConfig>>,
    pub options: RequestOptions,
    pub rewrite_first_module: RewriteRules,
}

/// Reads the multipart form of an upload of `kind`, spooling a large file under `files`.
pub async fn read_form(
    mut multipart: Multipart,
    kind: CrashKind,
    files: &CrashFiles,
    limits: &RequestLimits,
) -> Result<CrashForm, ApiError> {
    let mut form = CrashForm {
        file: None,
        sources: None,
        options: RequestOptions::default(),
        rewrite_first_module: RewriteRules::default(),
    };
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let Some(name) = field.name().map(str::to_owned) else {
            continue;
        };
        match name.as_str() {
            n if n == upload_field(kind) => form.file = Some(save_field(field, files).await?),
            "sources" => {
                // A form field is at most 1 MiB, so parsing it first costs little.
                let sources: Vec<SourceConfig> = json_field(field, &name).await?;
                limits
                    .check(Counted::Sources, "sources", sources.len())
                    .map_err(ApiError::refused)?;
                form.sources = Some(sources);
            }
            "options" => form.options = json_field(field, &name).await?,
            "rewrite_first_module" if kind == CrashKind::Minidump => {
                form.rewrite_first_module = json_field(field, &name).await?
            }
            _ => {}
        }
    }
    Ok(form)
}

/// A body that announces more than the file limit plus room for the form fields is
/// refused before a byte of it is read.
fn check_content_length(headers: &HeaderMap, files: &CrashFiles) -> Result<(), ApiError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match announced {
        Some(len) if len > files.max_size.saturating_add(4 * MAX_FORM_FIELD as u64) => {
            Err(files.too_large())
        }
        _ => Ok(()),
    }
}

fn unpack_error(err: CacheError, files: &CrashFiles) -> ApiError {
    match err {
        CacheError::TooLarge(_) => files.too_large(),
        CacheError::Malformed(msg) => ApiError::bad_request(msg),
        _ => ApiError::internal(),
    }
}

/// Runs the native pipeline on a crash file in the request service.
async fn run_crash(
    state: &AppState,
    params: &RequestParams,
    slot: RequestSlot,
    kind: CrashKind,
    file: CrashFile,
    request: CrashReportRequest,
) -> Result<Response, ApiError> {
    let native = state.native.clone();
    let files = state.crash_files.clone();
    let downloader = state.downloader.clone();
    let limits = state.request_limits;
    let scope = params.scope();
    state
        .run(params, slot, async move {
            let upload = match file {
                CrashFile::Local(upload) => upload,
                CrashFile::Remote { url, token } => {
                    let file =
                        fetch_attachment(&downloader, &files, &url, token.as_deref()).await?;
                    if kind == CrashKind::Minidump {
                        check_minidump_file(file.path(), &limits)?;
                    }
                    Upload::File(file)
                }
            };
            match upload {
                Upload::Memory { data, budget } => {
                    let processed = native
                        .process_crash_file(kind, scope, CrashData::Memory(data), request)
                        .await;
                    // Its bytes are let go of only now: the walk holds them to the end.
                    drop(budget);
                    processed
                }
                Upload::File(file) => {
                    native
                        .process_crash_file(kind, scope, CrashData::File(file.path()), request)
                        .await
                }
            }
        })
        .await
}

enum CrashFile {
    Local(Upload),
    Remote { url: Url, token: Option<String> },
}

async fn fetch_attachment(
    downloader: &crate::fetch::Downloader,
    files: &CrashFiles,
    url: &Url,
    token: Option<&str>,
) -> anyhow::Result<NamedTempFile> {
    let temp = files.temp_file().map_err(|e| anyhow::anyhow!(e.message))?;
    let mut out = tokio::fs::File::from_std(temp.as_file().try_clone()?);
    let mut headers = BTreeMap::new();
    if let Some(token) = token {
        headers.insert(
            "Authorization".to_owned(),
            crate::sources::Secret::new(format!("Bearer {token}")),
        );
    }
    let started = std::time::Instant::now();
    let options = HttpOptions {
        max_size: files.max_size,
        ..HttpOptions::default()
    };
    let downloaded = downloader
        .download_http(url, &headers, options, &mut out)
        .await;
    record_download("storage_url", started, &downloaded);
    downloaded
        .map_err(|err| anyhow::anyhow!("cannot fetch the crash file from storage_url: {err}"))?;
    out.flush().await?;
    files
        .unpack(temp)
        .await
        .map_err(|err| anyhow::anyhow!("cannot unpack the crash file: {err}"))
}

/// An upload, before its body is read: a bad query or an announced length past the
/// limit is refused first, then the request takes its slot, and only then is the
/// multipart body read.
pub struct CrashUpload {
    state: AppState,
    params: RequestParams,
    slot: RequestSlot,
    multipart: Multipart,
}

impl FromRequest<AppState> for CrashUpload {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let Params(params) = Params::from_request_parts(&mut parts, state).await?;
        params.timeout()?;
        check_content_length(&parts.headers, &state.crash_files)?;
        let slot = RequestSlot::from_request_parts(&mut parts, state).await?;
        let mut request = Request::from_parts(parts, body);
        // The upload counts its own bytes as it streams (`save_field`, `read_field`).
        DefaultBodyLimit::disable().apply(&mut request);
        let multipart = Multipart::from_request(request, state)
            .await
            .map_err(|rejection| ApiError {
                status: rejection.status(),
                message: rejection.body_text(),
            })?;
        Ok(CrashUpload {
            state: state.clone(),
            params,
            slot,
            multipart,
        })
    }
}

async fn upload(upload: CrashUpload, kind: CrashKind) -> Result<Response, ApiError> {
    let CrashUpload {
        state,
        params,
        slot,
        multipart,
    } = upload;
    let files = &state.crash_files;
    let form = read_form(multipart, kind, files, &state.request_limits).await?;
    let file = form.file.ok_or_else(|| {
        ApiError::bad_request(format!("missing form field `{}`", upload_field(kind)))
    })?;
    let file = files.unpack_upload(file).await?;
    if kind == CrashKind::Minidump {
        if file.starts_with(b"--") {
            // A client that nested a whole form inside the file field.
            return Err(ApiError::bad_request(
                "minidump contains multipart form data",
            ));
        }
        file.check_minidump(&state.request_limits)
            .map_err(ApiError::refused)?;
    }
    let request = CrashReportRequest {
        sources: state.sources_or_default(&params.scope(), form.sources),
        options: form.options,
        rewrite_first_module: form.rewrite_first_module,
    };
    let file = CrashFile::Local(file);
    run_crash(&state, &params, slot, kind, file, request).await
}

/// [`check_minidump`] of the file at `path`.
fn check_minidump_file(path: &Path, limits: &RequestLimits) -> Result<(), RequestRefused> {
    match symbolic::common::ByteView::open(path) {
        Ok(view) => check_minidump(&view, limits),
        // Not a file the walker can read either; it says why.
        Err(_) => Ok(()),
    }
}

/// Refuses a minidump that lists more threads or modules than a request may: they
/// become its stack traces and modules. Read from the stream headers (a count, and the
/// stream's length), so a dump that claims millions costs no allocation.
fn check_minidump(data: &[u8], limits: &RequestLimits) -> Result<(), RequestRefused> {
    use minidump::format::MINIDUMP_STREAM_TYPE;
    // On-disk sizes of MINIDUMP_THREAD and MINIDUMP_MODULE (packed; Rust's layout pads).
    const THREAD_SIZE: usize = 48;
    const MODULE_SIZE: usize = 108;
    let Ok(dump) = minidump::Minidump::read(data) else {
        // Not a minidump the walker can read either; it says why.
        return Ok(());
    };
    let entries = |stream: MINIDUMP_STREAM_TYPE, entry_size: usize| {
        let data = dump.get_raw_stream(stream as u32).ok()?;
        let count: [u8; 4] = data.get(..4)?.try_into().ok()?;
        let count = if dump.endian.is_little() {
            u32::from_le_bytes(count)
        } else {
            u32::from_be_bytes(count)
        };
        // The parser reads no more entries than the stream holds.
        Some((count as usize).min(data.len().saturating_sub(4) / entry_size))
    };
    if let Some(threads) = entries(MINIDUMP_STREAM_TYPE::ThreadListStream, THREAD_SIZE) {
        limits.check(Counted::Stacktraces, "minidump threads", threads)?;
    }
    if let Some(modules) = entries(MINIDUMP_STREAM_TYPE::ModuleListStream, MODULE_SIZE) {
        limits.check(Counted::Modules, "minidump modules", modules)?;
    }
    Ok(())
}

fn starts_with(path: &Path, prefix: &[u8]) -> bool {
    use std::io::Read;
    let mut buf = vec![0u8; prefix.len()];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok_and(|()| buf == prefix)
}

/// `POST /minidump`: a minidump upload, walked and symbolicated.
pub async fn minidump(upload_form: CrashUpload) -> Result<Response, ApiError> {
    upload(upload_form, CrashKind::Minidump).await
}

/// `POST /applecrashreport`: an Apple crash report upload, symbolicated.
pub async fn apple_crash_report(upload_form: CrashUpload) -> Result<Response, ApiError> {
    upload(upload_form, CrashKind::AppleCrashReport).await
}

#[derive(Deserialize)]
struct SymbolicateAnyRequest {
    #[serde(default)]
    sources: Option<Vec<SourceConfig>>,
    #[serde(default)]
    options: RequestOptions,
    symbolicate: AttachmentRequest,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum AttachmentRequest {
    Minidump {
        storage_url: Url,
        #[serde(default)]
        storage_token: Option<String>,
        #[serde(default)]
        rewrite_first_module: RewriteRules,
    },
    AppleCrashreport {
        storage_url: Url,
        #[serde(default)]
        storage_token: Option<String>,
    },
}

/// `POST /symbolicate-any`: a crash file held in remote storage, fetched by the server
/// (under the same reserved-IP rules as symbol sources) and processed like an upload.
pub async fn symbolicate_any(
    State(state): State<AppState>,
    Params(params): Params,
    slot: RequestSlot,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request: SymbolicateAnyRequest = state.parse_request(body, &[])?;
    let (kind, url, token, rewrite_first_module) = match request.symbolicate {
        AttachmentRequest::Minidump {
            storage_url,
            storage_token,
            rewrite_first_module,
        } => (
            CrashKind::Minidump,
            storage_url,
            storage_token,
            rewrite_first_module,
        ),
        AttachmentRequest::AppleCrashreport {
            storage_url,
            storage_token,
        } => (
            CrashKind::AppleCrashReport,
            storage_url,
            storage_token,
            RewriteRules::default(),
        ),
    };
    let crash_request = CrashReportRequest {
        sources: state.sources_or_default(&params.scope(), request.sources),
        options: request.options,
        rewrite_first_module,
    };
    let file = CrashFile::Remote { url, token };
    run_crash(&state, &params, slot, kind, file, crash_request).await
}

impl AppState {
    /// The store's sources (see [`crate::store::first_sources`]), then the request's
    /// sources, or the configured ones when it names none.
    pub fn sources_or_default(
        &self,
        scope: &Scope,
        sources: Option<Vec<SourceConfig>>,
    ) -> Arc<[SourceConfig]> {
        // Without a store nothing is put first: the configured list is shared as it is,
        // not copied for every request.
        if self.store.is_none() && sources.is_none() {
            return self.default_sources.clone();
        }
        let sources = match &sources {
            Some(sources) => sources.as_slice(),
            None => &self.default_sources,
        };
        crate::store::first_sources(self.store.as_ref(), scope, sources)
    }
}
