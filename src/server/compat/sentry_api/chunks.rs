//! Chunks: received (`POST .../chunk-upload/`), checked against the SHA-1 that names
//! them, kept once in the store's state area (`sentry-cli/chunks/<sha1>`), and removed
//! when their file is assembled or their upload is abandoned. Which chunks are held, how
//! many bytes they take and which files still want them is this process's record
//! (`Held`); after a restart it is rebuilt from the state area.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path as FsPath;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::multipart::{Field, MultipartError};
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha1::{Digest, Sha1};
use tokio::io::AsyncWriteExt;

use super::{Detail, Upload, authorize, sha1_hex, slug};
use crate::server::AppState;
use crate::store::{ChunkUploadConfig, Store};
use crate::telemetry::SENTRY_CLI_CHUNKS;

/// Where a chunk lives in the state area.
pub(super) fn chunk_path(sha1: &str) -> String {
    format!("sentry-cli/chunks/{sha1}")
}

/// Chunks taken up after a restart, at most (a million chunks of 8 MiB: 8 TiB).
const MAX_RECOVERED_CHUNKS: usize = 1_000_000;

/// A file being uploaded: its namespace's key and its checksum.
pub(super) type FileKey = (String, String);

struct HeldChunk {
    size: u64,
    /// Last received or named by an assemble request.
    touched: Instant,
    /// Files not yet assembled that named this chunk.
    wanted_by: HashSet<FileKey>,
}

#[derive(Default)]
struct Held {
    bytes: u64,
    chunks: HashMap<String, HeldChunk>,
    last_sweep: Option<Instant>,
}

/// An assembly this process started and has not answered yet.
pub(super) enum Assembly {
    Running,
    /// Its reason, answered to the next request for the file (then forgotten, so an
    /// upload after it starts afresh).
    Failed(String),
}

/// The chunk uploads of one server: its bounds and the record of held chunks.
pub struct ChunkUploads {
    config: ChunkUploadConfig,
    held: Mutex<Held>,
    /// Files being joined and published now, and files whose assembly failed (the
    /// reason, kept until sentry-cli has asked once more).
    pub(super) assemblies: Mutex<HashMap<FileKey, Assembly>>,
}

impl ChunkUploads {
    pub fn new(config: ChunkUploadConfig) -> Self {
        ChunkUploads {
            config,
            held: Mutex::default(),
            assemblies: Mutex::default(),
        }
    }

    pub fn config(&self) -> &ChunkUploadConfig {
        &self.config
    }

    /// Records the chunks the state area holds from before this process started, as if
    /// received now: an upload interrupted by a restart can still resume within
    /// `chunk_max_age`, and is removed after it.
    pub async fn recover(&self, store: &Store) -> anyhow::Result<()> {
        let listed = store
            .state_list("sentry-cli/chunks", MAX_RECOVERED_CHUNKS)
            .await?;
        let now = Instant::now();
        let mut held = self.held.lock().unwrap();
        for (path, size) in listed {
            let Some(sha1) = path.rsplit('/').next() else {
                continue;
            };
            if sha1_hex("chunk", sha1).is_err() || held.chunks.contains_key(sha1) {
                continue;
            }
            held.bytes += size;
            held.chunks.insert(
                sha1.to_owned(),
                HeldChunk {
                    size,
                    touched: now,
                    wanted_by: HashSet::new(),
                },
            );
        }
        Ok(())
    }

    /// Whether this process holds the chunk (touching it); when it does not know, the
    /// state area is asked, so chunks another replica stored count too.
    pub(super) async fn holds(&self, store: &Store, sha1: &str, file: &FileKey) -> bool {
        if self.touch(sha1, Some(file)) {
            return true;
        }
        match store.state_size(&chunk_path(sha1)).await {
            Ok(Some(size)) => {
                let mut held = self.held.lock().unwrap();
                if !held.chunks.contains_key(sha1) {
                    held.bytes += size;
                }
                let chunk = held
                    .chunks
                    .entry(sha1.to_owned())
                    .or_insert_with(|| HeldChunk {
                        size,
                        touched: Instant::now(),
                        wanted_by: HashSet::new(),
                    });
                chunk.wanted_by.insert(file.clone());
                true
            }
            Ok(None) => false,
            Err(err) => {
                tracing::warn!(error = %err, sha1, "sentry-cli upload: looking up a chunk");
                false
            }
        }
    }

    fn touch(&self, sha1: &str, file: Option<&FileKey>) -> bool {
        let mut held = self.held.lock().unwrap();
        match held.chunks.get_mut(sha1) {
            Some(chunk) => {
                chunk.touched = Instant::now();
                if let Some(file) = file {
                    chunk.wanted_by.insert(file.clone());
                }
                true
            }
            None => false,
        }
    }

    /// Room for a new chunk of `size` bytes within `max_pending_bytes`; `false` when
    /// the chunk is already held (another request stored it meanwhile).
    fn reserve(&self, sha1: &str, size: u64) -> Result<bool, Detail> {
        let mut held = self.held.lock().unwrap();
        if let Some(chunk) = held.chunks.get_mut(sha1) {
            chunk.touched = Instant::now();
            return Ok(false);
        }
        if held.bytes + size > self.config.max_pending_bytes {
            return Err(Detail::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!(
                    "chunks of unfinished uploads already take {} bytes; \
                     store.chunk_upload.max_pending_bytes is {}",
                    held.bytes, self.config.max_pending_bytes
                ),
            ));
        }
        held.bytes += size;
        held.chunks.insert(
            sha1.to_owned(),
            HeldChunk {
                size,
                touched: Instant::now(),
                wanted_by: HashSet::new(),
            },
        );
        Ok(true)
    }

    fn forget(&self, sha1: &str) {
        let mut held = self.held.lock().unwrap();
        if let Some(chunk) = held.chunks.remove(sha1) {
            held.bytes -= chunk.size;
        }
    }

    /// `file` is assembled (or refused): its chunks that no other unfinished file
    /// wants are removed.
    pub(super) async fn release(&self, store: &Store, file: &FileKey, chunks: &[String]) {
        let mut unwanted = Vec::new();
        {
            let mut held = self.held.lock().unwrap();
            for sha1 in chunks {
                if let Some(chunk) = held.chunks.get_mut(sha1) {
                    chunk.wanted_by.remove(file);
                    if chunk.wanted_by.is_empty() {
                        let size = chunk.size;
                        held.chunks.remove(sha1);
                        held.bytes -= size;
                        unwanted.push(sha1.clone());
                    }
                }
            }
        }
        remove(store, &unwanted).await;
    }

    /// Removes the chunks nobody received or named for `chunk_max_age`, at most once a
    /// minute (or a quarter of the age, when that is shorter).
    pub(super) fn sweep(&self, store: &Store) {
        let max_age = self.config.chunk_max_age;
        let now = Instant::now();
        let old = {
            let mut held = self.held.lock().unwrap();
            let every = (max_age / 4).min(Duration::from_secs(60));
            if held.last_sweep.is_some_and(|last| now - last < every) {
                return;
            }
            held.last_sweep = Some(now);
            let old: Vec<String> = held
                .chunks
                .iter()
                .filter(|(_, c)| now.duration_since(c.touched) > max_age)
                .map(|(sha1, _)| sha1.clone())
                .collect();
            for sha1 in &old {
                if let Some(chunk) = held.chunks.remove(sha1) {
                    held.bytes -= chunk.size;
                }
            }
            old
        };
        if !old.is_empty() {
            tracing::info!(
                chunks = old.len(),
                "sentry-cli upload: removing abandoned chunks"
            );
            let store = store.clone();
            tokio::spawn(async move { remove(&store, &old).await });
        }
    }
}

async fn remove(store: &Store, chunks: &[String]) {
    for sha1 in chunks {
        match store.state_remove(&chunk_path(sha1)).await {
            Ok(()) => metrics::counter!(SENTRY_CLI_CHUNKS, "outcome" => "removed").increment(1),
            Err(err) => tracing::warn!(error = %err, sha1, "sentry-cli upload: removing a chunk"),
        }
    }
}

/// `POST /api/0/organizations/{org}/chunk-upload/`: each part is one chunk, named by
/// its SHA-1, as `file` or gzip-compressed as `file_gzip`.
pub async fn upload_chunks(
    State(state): State<AppState>,
    Path(org): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, Detail> {
    let upload = authorize(&state, &headers)?;
    slug("organization", &org)?;
    let config = upload.config().clone();
    // Room for each part's headers beside the chunks themselves.
    let allowed = config.max_request_size + 1024 * config.chunks_per_request as u64;
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > allowed) {
        return Err(too_large(&config));
    }
    let mut request = request;
    // The parts count their own bytes as they stream (`receive`).
    DefaultBodyLimit::disable().apply(&mut request);
    let mut multipart = Multipart::from_request(request, &state)
        .await
        .map_err(|rejection| Detail::new(rejection.status(), rejection.body_text()))?;
    upload.uploads.sweep(&upload.store);
    let mut count = 0;
    let mut received = 0u64;
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        count += 1;
        if count > config.chunks_per_request {
            return Err(Detail::bad_request(format!(
                "more than {} chunks in one request (store.chunk_upload.chunks_per_request)",
                config.chunks_per_request
            )));
        }
        receive(&upload, &config, field, &mut received).await?;
    }
    Ok(StatusCode::OK.into_response())
}

fn too_large(config: &ChunkUploadConfig) -> Detail {
    Detail::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "a chunk request may carry {} bytes (store.chunk_upload.max_request_size)",
            config.max_request_size
        ),
    )
}

fn multipart_error(err: MultipartError) -> Detail {
    Detail::new(
        err.status(),
        format!("invalid multipart body: {}", err.body_text()),
    )
}

/// One part: streamed to a temp file, undone if gzip (bounded by `chunk_size`), its
/// SHA-1 checked against its name, then stored unless already held.
async fn receive(
    upload: &Upload,
    config: &ChunkUploadConfig,
    mut field: Field<'_>,
    received: &mut u64,
) -> Result<(), Detail> {
    let gzip = match field.name() {
        Some("file") => false,
        Some("file_gzip") => true,
        other => {
            return Err(Detail::bad_request(format!(
                "unknown part `{}`: chunks are `file` or `file_gzip` parts",
                other.unwrap_or("")
            )));
        }
    };
    let claimed = sha1_hex("chunk name", field.file_name().unwrap_or(""))?.to_owned();
    let sent = upload
        .store
        .staging_file()
        .map_err(|e| Detail::internal("creating a chunk's temp file", &e))?;
    let mut out = tokio::fs::File::from_std(
        sent.reopen()
            .map_err(|e| Detail::internal("opening a chunk's temp file", &e))?,
    );
    while let Some(bytes) = field.chunk().await.map_err(multipart_error)? {
        *received += bytes.len() as u64;
        if *received > config.max_request_size {
            return Err(too_large(config));
        }
        out.write_all(&bytes)
            .await
            .map_err(|e| Detail::internal("writing a chunk", &e))?;
    }
    out.flush()
        .await
        .map_err(|e| Detail::internal("writing a chunk", &e))?;
    drop(out);
    let plain = if gzip {
        Some(
            upload
                .store
                .staging_file()
                .map_err(|e| Detail::internal("creating a chunk's temp file", &e))?,
        )
    } else {
        None
    };
    let limit = config.chunk_size;
    let (sent, plain, checked) = tokio::task::spawn_blocking(move || {
        let checked = check(sent.path(), plain.as_ref().map(|p| p.path()), limit);
        (sent, plain, checked)
    })
    .await
    .map_err(|e| Detail::internal("checking a chunk", &e))?;
    let (size, actual) = match checked {
        Ok(checked) => checked,
        Err(refusal) => {
            metrics::counter!(SENTRY_CLI_CHUNKS, "outcome" => "refused").increment(1);
            return Err(Detail::bad_request(format!("chunk {claimed}: {refusal}")));
        }
    };
    if actual != claimed {
        metrics::counter!(SENTRY_CLI_CHUNKS, "outcome" => "refused").increment(1);
        return Err(Detail::bad_request(format!(
            "chunk {claimed}: bad checksum, its content's SHA-1 is {actual}"
        )));
    }
    // In a task of its own: a client that hangs up mid-write must not leave a chunk
    // recorded as held that never reached the store.
    let store = upload.store.clone();
    let uploads = upload.uploads.clone();
    tokio::spawn(async move {
        if uploads.touch(&claimed, None)
            || matches!(store.state_size(&chunk_path(&claimed)).await, Ok(Some(_)))
        {
            metrics::counter!(SENTRY_CLI_CHUNKS, "outcome" => "duplicate").increment(1);
            // Known now, if another replica stored it.
            let _ = uploads.reserve(&claimed, size);
            return Ok(());
        }
        if !uploads.reserve(&claimed, size)? {
            metrics::counter!(SENTRY_CLI_CHUNKS, "outcome" => "duplicate").increment(1);
            return Ok(());
        }
        let file = plain.as_ref().unwrap_or(&sent);
        if let Err(err) = store.state_put(&chunk_path(&claimed), file.path()).await {
            uploads.forget(&claimed);
            return Err(Detail::internal("storing a chunk", &err));
        }
        metrics::counter!(SENTRY_CLI_CHUNKS, "outcome" => "stored").increment(1);
        Ok(())
    })
    .await
    .map_err(|e| Detail::internal("storing a chunk", &e))?
}

/// The chunk's size and SHA-1 once gzip is undone (into `plain`), within `limit` bytes.
fn check(sent: &FsPath, plain: Option<&FsPath>, limit: u64) -> Result<(u64, String), String> {
    let file = std::fs::File::open(sent).map_err(|e| format!("reading it back: {e}"))?;
    let mut hashing = Hashing {
        sha1: Sha1::new(),
        size: 0,
        out: match plain {
            Some(path) => {
                Some(std::fs::File::create(path).map_err(|e| format!("writing it: {e}"))?)
            }
            None => None,
        },
    };
    let copied = match plain {
        Some(_) => {
            let mut decoder = flate2::read::MultiGzDecoder::new(file).take(limit + 1);
            std::io::copy(&mut decoder, &mut hashing)
        }
        None => std::io::copy(&mut file.take(limit + 1), &mut hashing),
    };
    copied.map_err(|e| format!("not valid gzip: {e}"))?;
    if hashing.size > limit {
        return Err(format!(
            "larger than {limit} bytes (store.chunk_upload.chunk_size) once decompressed"
        ));
    }
    Ok((hashing.size, hex::encode(hashing.sha1.finalize())))
}

/// Hashes what passes through and writes it on when there is somewhere to write.
struct Hashing {
    sha1: Sha1,
    size: u64,
    out: Option<std::fs::File>,
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sha1.update(buf);
        self.size += buf.len() as u64;
        if let Some(out) = &mut self.out {
            out.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.out {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}
