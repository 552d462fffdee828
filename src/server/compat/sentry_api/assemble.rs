//! Assembling: for each file sentry-cli names (by SHA-1, with its chunks' SHA-1s in
//! order), the chunks the store lacks (`not_found` + `missingChunks`), else the file
//! joined from its chunks into a staging file, checked against its SHA-1 and published
//! (`ok`, or `error` with the store's reason in `detail`). A published file is recorded
//! (`sentry-cli/assembled/<namespace>/<sha1>`), so uploading it again answers `ok` at
//! once and sentry-cli sends nothing more.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use super::chunks::{Assembly, FileKey, chunk_path};
use super::{Detail, Upload, authorize, sha1_hex, slug};
use crate::server::AppState;
use crate::server::error::JsonBody;
use crate::store::{Namespace, Refused, Store};
use crate::telemetry::SENTRY_CLI_ASSEMBLES;

/// One file of `files/difs/assemble/` (`ChunkedDifRequest` in sentry-cli).
#[derive(Deserialize)]
struct DifFile {
    name: String,
    chunks: Vec<String>,
    #[serde(default, rename = "debug_id")]
    _debug_id: Option<String>,
}

/// The body of `artifactbundle/assemble/` (`ChunkedArtifactRequest`).
#[derive(Deserialize)]
struct BundleRequest {
    checksum: String,
    chunks: Vec<String>,
    #[serde(default)]
    projects: Vec<String>,
}

#[derive(Clone, Copy)]
enum Kind {
    /// A debug file or a ProGuard mapping (`Store::publish`).
    Dif,
    /// A sentry-cli artifact bundle (`Store::publish_artifact_bundle`).
    ArtifactBundle,
}

/// The state of one file, in the shape sentry-cli reads.
fn answer(state: &str, missing: &[String], detail: Option<&str>) -> Value {
    let mut value = json!({"state": state, "missingChunks": missing});
    if let Some(detail) = detail {
        value["detail"] = json!(detail);
    }
    value
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Detail> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|err| {
        Detail::bad_request(format!(
            "invalid JSON body: {}: {}",
            err.path(),
            err.inner()
        ))
    })
}

/// `POST /api/0/projects/{org}/{project}/files/difs/assemble/`: a map from each file's
/// SHA-1 to its name and chunks; the answer maps each SHA-1 to its state.
pub async fn assemble_difs(
    State(state): State<AppState>,
    Path((org, project)): Path<(String, String)>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, Detail> {
    let upload = authorize(&state, &headers)?;
    let ns = upload
        .store
        .namespace_of(slug("organization", &org)?, slug("project", &project)?);
    let files: HashMap<String, DifFile> = parse(&body)?;
    let max = upload.config().max_files_per_assemble;
    if files.len() > max {
        return Err(Detail::bad_request(format!(
            "{} files in one assemble request; at most {max} \
             (store.chunk_upload.max_files_per_assemble)",
            files.len()
        )));
    }
    check_checksums(files.iter().map(|(sum, f)| (sum, &f.chunks)))?;
    upload.uploads.sweep(&upload.store);
    let mut answers = serde_json::Map::new();
    for (checksum, file) in files {
        let state = file_state(
            &upload,
            vec![ns.clone()],
            &checksum,
            file.chunks,
            Kind::Dif,
            Some(base_name(&file.name)),
        )
        .await;
        answers.insert(checksum, state);
    }
    Ok(Json(Value::Object(answers)).into_response())
}

/// `POST /api/0/organizations/{org}/artifactbundle/assemble/`: one bundle, for the
/// namespaces of its projects.
pub async fn assemble_artifact_bundle(
    State(state): State<AppState>,
    Path(org): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, Detail> {
    let upload = authorize(&state, &headers)?;
    let org = slug("organization", &org)?;
    let request: BundleRequest = parse(&body)?;
    check_checksums([(&request.checksum, &request.chunks)])?;
    if request.projects.is_empty() {
        return Err(Detail::bad_request(
            "projects: at least one project is needed",
        ));
    }
    let max = upload.config().max_files_per_assemble;
    if request.projects.len() > max {
        return Err(Detail::bad_request(format!(
            "projects: at most {max} (store.chunk_upload.max_files_per_assemble)"
        )));
    }
    let mut namespaces = Vec::new();
    for project in &request.projects {
        let ns = upload.store.namespace_of(org, slug("project", project)?);
        if !namespaces.contains(&ns) {
            namespaces.push(ns);
        }
    }
    upload.uploads.sweep(&upload.store);
    let state = file_state(
        &upload,
        namespaces,
        &request.checksum,
        request.chunks,
        Kind::ArtifactBundle,
        None,
    )
    .await;
    Ok(Json(state).into_response())
}

fn check_checksums<'a>(
    files: impl IntoIterator<Item = (&'a String, &'a Vec<String>)>,
) -> Result<(), Detail> {
    for (checksum, chunks) in files {
        sha1_hex("checksum", checksum)?;
        if chunks.is_empty() {
            return Err(Detail::bad_request(format!(
                "file {checksum}: chunks is empty"
            )));
        }
        for chunk in chunks {
            sha1_hex("chunk", chunk)?;
        }
    }
    Ok(())
}

/// The last component of a client's file name: a hint for the store, never a path.
fn base_name(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

/// A namespace as one component of a state path (a scope is the operator's string,
/// hex-encoded so that it can never climb out).
fn ns_key(ns: &Namespace) -> String {
    match ns {
        Namespace::Team => "team".to_owned(),
        Namespace::Scope(scope) => format!("scope-{}", hex::encode(scope)),
    }
}

fn record_path(ns: &Namespace, checksum: &str) -> String {
    format!("sentry-cli/assembled/{}/{checksum}", ns_key(ns))
}

/// The state of one file, assembling it when all its chunks are held.
async fn file_state(
    upload: &Upload,
    namespaces: Vec<Namespace>,
    checksum: &str,
    chunks: Vec<String>,
    kind: Kind,
    name: Option<&str>,
) -> Value {
    let store = &upload.store;
    let uploads = &upload.uploads;
    let key: FileKey = (
        namespaces.iter().map(ns_key).collect::<Vec<_>>().join("+"),
        checksum.to_owned(),
    );
    let chunk_size = uploads.config().chunk_size.max(1);
    if chunks.len() as u64 > store.max_file_size().div_ceil(chunk_size) {
        metrics::counter!(SENTRY_CLI_ASSEMBLES, "outcome" => "refused").increment(1);
        return answer(
            "error",
            &[],
            Some(&format!(
                "{} chunks of {chunk_size} bytes pass store.max_file_size ({} bytes)",
                chunks.len(),
                store.max_file_size()
            )),
        );
    }
    match uploads.assemblies.lock().unwrap().remove(&key) {
        Some(Assembly::Running) => {
            uploads
                .assemblies
                .lock()
                .unwrap()
                .insert(key, Assembly::Running);
            return answer("assembling", &[], None);
        }
        Some(Assembly::Failed(reason)) => return answer("error", &[], Some(&reason)),
        None => {}
    }
    let mut pending = Vec::new();
    for ns in &namespaces {
        match store.state_size(&record_path(ns, checksum)).await {
            Ok(Some(_)) => {}
            Ok(None) => pending.push(ns.clone()),
            Err(err) => {
                tracing::warn!(error = %err, "sentry-cli upload: reading an assembly record");
                pending.push(ns.clone());
            }
        }
    }
    if pending.is_empty() {
        metrics::counter!(SENTRY_CLI_ASSEMBLES, "outcome" => "already_assembled").increment(1);
        return answer("ok", &[], None);
    }
    let mut missing = Vec::new();
    let mut seen = HashSet::new();
    for chunk in &chunks {
        if seen.insert(chunk.as_str()) && !uploads.holds(store, chunk, &key).await {
            missing.push(chunk.clone());
        }
    }
    if !missing.is_empty() {
        metrics::counter!(SENTRY_CLI_ASSEMBLES, "outcome" => "missing_chunks").increment(1);
        return answer("not_found", &missing, None);
    }
    {
        let mut assemblies = uploads.assemblies.lock().unwrap();
        if assemblies.contains_key(&key) {
            return answer("assembling", &[], None);
        }
        assemblies.insert(key.clone(), Assembly::Running);
    }
    // In a task of its own: a client that hangs up does not stop it halfway, and a slow
    // one is answered `assembling` and asks again.
    let task = tokio::spawn(assemble(
        store.clone(),
        uploads.clone(),
        key.clone(),
        pending,
        checksum.to_owned(),
        chunks,
        kind,
        name.map(str::to_owned),
    ));
    match tokio::time::timeout(uploads.config().assemble_wait, task).await {
        Err(_) => answer("assembling", &[], None),
        Ok(Err(err)) => {
            uploads.assemblies.lock().unwrap().remove(&key);
            tracing::error!(error = %err, checksum, "sentry-cli assemble: the task failed");
            answer("error", &[], Some("assembling failed on the server"))
        }
        Ok(Ok(())) => match uploads.assemblies.lock().unwrap().remove(&key) {
            Some(Assembly::Failed(reason)) => answer("error", &[], Some(&reason)),
            Some(Assembly::Running) => answer("assembling", &[], None),
            None => answer("ok", &[], None),
        },
    }
}

/// Joins, checks and publishes the file, then records the outcome (`assemblies`: none
/// when published) and lets its chunks go.
#[allow(clippy::too_many_arguments)]
async fn assemble(
    store: Store,
    uploads: Arc<super::ChunkUploads>,
    key: FileKey,
    namespaces: Vec<Namespace>,
    checksum: String,
    chunks: Vec<String>,
    kind: Kind,
    name: Option<String>,
) {
    let outcome = join_and_publish(&store, &namespaces, &checksum, &chunks, kind, name).await;
    uploads.release(&store, &key, &chunks).await;
    let mut assemblies = uploads.assemblies.lock().unwrap();
    match outcome {
        Ok(()) => {
            metrics::counter!(SENTRY_CLI_ASSEMBLES, "outcome" => "published").increment(1);
            assemblies.remove(&key);
        }
        Err(reason) => {
            metrics::counter!(SENTRY_CLI_ASSEMBLES, "outcome" => "refused").increment(1);
            tracing::info!(checksum, reason, "sentry-cli upload refused");
            assemblies.insert(key, Assembly::Failed(reason));
        }
    }
}

async fn join_and_publish(
    store: &Store,
    namespaces: &[Namespace],
    checksum: &str,
    chunks: &[String],
    kind: Kind,
    name: Option<String>,
) -> Result<(), String> {
    let internal = |what: &str, err: &dyn std::fmt::Display| {
        tracing::error!(error = %err, checksum, "sentry-cli assemble: {what}");
        format!("{what} failed on the server")
    };
    let staged = store
        .staging_file()
        .map_err(|e| internal("creating the staging file", &e))?;
    let mut out = staged
        .reopen()
        .map_err(|e| internal("opening the staging file", &e))?;
    let mut sha1 = Sha1::new();
    let mut size = 0u64;
    for chunk in chunks {
        let mut part = store
            .staging_file()
            .map_err(|e| internal("creating a chunk's temp file", &e))?;
        match store.state_fetch(&chunk_path(chunk), &mut part).await {
            Ok(true) => {}
            Ok(false) => return Err(format!("chunk {chunk} is gone; upload the file again")),
            Err(err) => return Err(internal("reading a chunk", &err)),
        }
        let max = store.max_file_size();
        let appended = tokio::task::spawn_blocking(move || {
            let mut hashing = HashingAppend {
                sha1,
                size,
                out: &mut out,
            };
            let mut input = std::fs::File::open(part.path())?;
            std::io::copy(&mut input, &mut hashing)?;
            let HashingAppend { sha1, size, .. } = hashing;
            Ok::<_, std::io::Error>((sha1, size, out))
        })
        .await
        .map_err(|e| internal("joining chunks", &e))?
        .map_err(|e| internal("joining chunks", &e))?;
        (sha1, size, out) = appended;
        if size > max {
            return Err(format!(
                "the file is larger than store.max_file_size ({max} bytes)"
            ));
        }
    }
    out.flush()
        .map_err(|e| internal("writing the staging file", &e))?;
    drop(out);
    let actual = hex::encode(sha1.finalize());
    if actual != checksum {
        return Err(format!(
            "bad checksum: the chunks join into a file whose SHA-1 is {actual}, not {checksum}"
        ));
    }
    let mut published = Vec::new();
    let last = namespaces.len().saturating_sub(1);
    let mut staged = Some(staged);
    for (i, ns) in namespaces.iter().enumerate() {
        // Each namespace takes a file of its own; the last takes the staged one.
        let file = if i == last {
            staged.take().expect("the staged file is taken once")
        } else {
            copy_staged(store, staged.as_ref().expect("still staged"))
                .await
                .map_err(|e| internal("copying the staging file", &e))?
        };
        let result = match kind {
            Kind::Dif => store.publish(ns, file, name.as_deref()).await,
            Kind::ArtifactBundle => store.publish_artifact_bundle(ns, file).await,
        };
        match result {
            Ok(objects) => published.push((ns, objects)),
            Err(Refused { reason, .. }) => return Err(reason),
        }
    }
    for (ns, objects) in published {
        let record = json!({
            "objects": objects.iter().map(|p| json!({
                "path": p.path,
                "outcome": p.outcome,
            })).collect::<Vec<_>>(),
        });
        let written = async {
            let tmp = store.staging_file()?;
            std::fs::write(tmp.path(), record.to_string())?;
            store
                .state_put(&record_path(ns, checksum), tmp.path())
                .await
        };
        written
            .await
            .map_err(|e: anyhow::Error| internal("recording the upload", &e))?;
    }
    Ok(())
}

async fn copy_staged(
    store: &Store,
    staged: &tempfile::NamedTempFile,
) -> anyhow::Result<tempfile::NamedTempFile> {
    let copy = store.staging_file()?;
    tokio::fs::copy(staged.path(), copy.path()).await?;
    Ok(copy)
}

/// Appends what passes through to the staging file, hashing it.
struct HashingAppend<'a> {
    sha1: Sha1,
    size: u64,
    out: &'a mut std::fs::File,
}

impl Write for HashingAppend<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.sha1.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
