//! The symbol-server proxy, upstream Symbolicator's `symstore_proxy` mode: `GET` and
//! `HEAD /proxy/<name>/<key>/<name>` answer a debugger's (or another symbol server's)
//! symstore request from the configured sources. The path names an object (a PDB by
//! GUID and age, a PE by timestamp and size, ELF and Mach-O by SSQP keys); it is found
//! by the same object lookup `/symbolicate` uses and served from the download cache.
//!
//! The same prefix serves Tecken's download API, which minidump-stackwalk's
//! `--symbols-url` and Breakpad's tools read: `<debug_file>/<debug_id>/<file>.sym`
//! (the name without a `.pdb` extension) asks for the module's Breakpad file.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use symbolic::common::{CodeId, DebugId};
use symbolic::debuginfo::Object;

use crate::cache::Scope;
use crate::error::{CacheError, CacheResult};
use crate::lookup::{ObjectHandle, ObjectLookup, ObjectPurpose};
use crate::server::ranges::ranged;
use crate::server::{ApiError, AppState};
use crate::sources::{FileType, ObjectId, ObjectType, SourceConfig, parse_symstore_path};

/// The proxy's view of the server: the shared object lookup and the configured sources.
pub struct SymstoreProxy {
    objects: Arc<ObjectLookup>,
    sources: Arc<[SourceConfig]>,
}

impl SymstoreProxy {
    pub fn new(objects: Arc<ObjectLookup>, sources: Arc<[SourceConfig]>) -> Self {
        SymstoreProxy { objects, sources }
    }

    /// The best file for the request on the configured sources, from the download cache.
    async fn find(&self, request: &SymstoreRequest) -> CacheResult<Arc<ObjectHandle>> {
        // Files of any scope's request may be proxied, so they are looked up (and
        // cached) as the global scope's, as upstream does.
        let scope = Scope::Global;
        let found = self
            .objects
            .find(
                &self.sources,
                request.filetypes,
                &request.id,
                &scope,
                ObjectPurpose::Whole,
            )
            .await
            .found
            .ok_or(CacheError::NotFound)?;
        found.meta.as_ref().map_err(Clone::clone)?;
        self.objects.fetch(&found, &request.id).await
    }

    /// The Breakpad file of a Tecken request: where the layouts keep one (`breakpad`),
    /// else at the debug file's places, where `omnisym sort` (as symsorter) puts a
    /// Breakpad file in the unified layout. Only a Breakpad file of the asked debug id
    /// answers: a DWARF or PDB file there is not what a stackwalker can read.
    async fn find_breakpad(&self, id: &ObjectId) -> CacheResult<Arc<ObjectHandle>> {
        let scope = Scope::Global;
        let mut first_error = None;
        for filetypes in [
            &[FileType::Breakpad][..],
            &[FileType::Pdb],
            &[FileType::ElfDebug],
            &[FileType::MachDebug],
        ] {
            let Some(found) = self
                .objects
                .find(&self.sources, filetypes, id, &scope, ObjectPurpose::Whole)
                .await
                .found
            else {
                continue;
            };
            match &found.meta {
                Ok(meta) if same_module(meta.debug_id, id.debug_id) => {}
                Ok(_) => continue,
                Err(err) => {
                    first_error.get_or_insert(err.clone());
                    continue;
                }
            }
            match self.objects.fetch(&found, id).await {
                Ok(handle) if matches!(handle.object(), Some(Object::Breakpad(_))) => {
                    return Ok(handle);
                }
                Ok(_) => {}
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        Err(first_error.unwrap_or(CacheError::NotFound))
    }
}

/// Whether a file recording `found` serves a request for `wanted`: the same GUID or
/// UUID, and for a PDB's Breakpad file any age at least the asked one.
fn same_module(found: Option<DebugId>, wanted: Option<DebugId>) -> bool {
    match (found, wanted) {
        (Some(found), Some(wanted)) => {
            found.uuid() == wanted.uuid() && found.appendix() >= wanted.appendix()
        }
        _ => false,
    }
}

/// What minidump-stackwalk adds to a Tecken request: the module's code file and code
/// id, with which a file is found where it is kept by code id (ELF and Mach-O files
/// in the unified layout).
#[derive(Debug, Default)]
pub struct TeckenQuery {
    code_file: Option<String>,
    code_id: Option<String>,
}

/// The longest code id taken from a query: an ELF build id of 64 bytes, in hex.
const MAX_CODE_ID_HEX: usize = 128;

impl TeckenQuery {
    /// `code_file` and `code_id` of a query string; other keys are ignored, as Tecken
    /// ignores them.
    fn parse(query: &str) -> Self {
        let mut parsed = TeckenQuery::default();
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*key {
                "code_file" => parsed.code_file = Some(value.into_owned()),
                "code_id" => parsed.code_id = Some(value.into_owned()),
                _ => {}
            }
        }
        parsed
    }

    /// Adds the query's ids to `id`; a malformed one is refused, naming it.
    fn apply(self, id: &mut ObjectId) -> Result<(), &'static str> {
        if let Some(code_id) = self.code_id.filter(|c| !c.is_empty()) {
            if code_id.len() > MAX_CODE_ID_HEX || !code_id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err("code_id must be at most 128 hex digits");
            }
            let code_id = code_id.to_ascii_lowercase();
            if id.object_type == ObjectType::Unknown {
                // A Mach-O code id is the UUID the debug id is made of; anything else
                // that is not a PDB's module is ELF (a build id).
                let uuid = id.debug_id.map(|d| d.uuid().as_simple().to_string());
                id.object_type = if uuid.as_deref() == Some(code_id.as_str()) {
                    ObjectType::Macho
                } else {
                    ObjectType::Elf
                };
            }
            id.code_id = Some(CodeId::new(code_id));
        }
        if let Some(code_file) = self.code_file.filter(|c| !c.is_empty()) {
            if code_file.len() > 1024 || code_file.contains(['/', '\\', '\0']) {
                return Err("code_file must be a file name");
            }
            id.code_file = Some(code_file);
        }
        Ok(())
    }
}

/// `GET` and `HEAD /proxy/{*path}`.
pub async fn proxy(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    // Upstream answers a disabled proxy as if the route did not exist.
    let Some(proxy) = state.symstore_proxy.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut request = match SymstoreRequest::parse(&path) {
        Ok(request) => request,
        Err(PathError::Refused) => {
            return ApiError::bad_request("path segments must be plain file names").into_response();
        }
        Err(PathError::NotSymstore) => return StatusCode::NOT_FOUND.into_response(),
    };
    if request.answer == Answer::Breakpad {
        let query = TeckenQuery::parse(query.as_deref().unwrap_or(""));
        if let Err(message) = query.apply(&mut request.id) {
            return ApiError::bad_request(message).into_response();
        }
    }
    // A lookup downloads: it counts against `max_concurrent_requests` like any request.
    let Ok(_slot) = state.service.reserve() else {
        return ApiError::overloaded().into_response();
    };
    let found = match request.answer {
        Answer::Breakpad => proxy.find_breakpad(&request.id).await,
        _ => proxy.find(&request).await,
    };
    let handle = match found {
        Ok(handle) => handle,
        Err(err) => return lookup_failure(&err),
    };
    let (content_type, body) = match request.answer {
        Answer::Breakpad => ("text/plain", Bytes::from_owner(ObjectBytes(handle))),
        Answer::File => (
            "application/octet-stream",
            Bytes::from_owner(ObjectBytes(handle)),
        ),
        Answer::Pointer => match pointer(&uri, &headers) {
            Some(text) => ("text/plain", Bytes::from(text)),
            None => return ApiError::bad_request("file.ptr needs a Host header").into_response(),
        },
    };
    let mut response = ranged(&method, &headers, body);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if request.answer == Answer::Pointer {
        // The pointer is built from what this client sent (`Host`, the forwarded
        // scheme): a shared cache must not hand it to another client, who may have
        // sent other values (or forged them).
        let headers = response.headers_mut();
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        );
        headers.insert(
            header::VARY,
            HeaderValue::from_static("host, x-forwarded-proto"),
        );
    }
    response
}

/// How a front answers a lookup that found nothing usable: a file that is not there, or
/// is not a readable debug file, is absent (404); a source that failed may answer
/// later (503); anything else is ours (500). Details stay in the log: they name
/// sources and paths.
pub(super) fn lookup_failure(err: &CacheError) -> Response {
    match err {
        CacheError::NotFound
        | CacheError::Malformed(_)
        | CacheError::Unsupported(_)
        | CacheError::TooLarge(_) => StatusCode::NOT_FOUND.into_response(),
        CacheError::PermissionDenied(_) | CacheError::Timeout(_) | CacheError::DownloadError(_) => {
            tracing::info!(error = %err, "symbol source failed");
            ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: format!("a symbol source failed ({}); try again later", err.name()),
            }
            .into_response()
        }
        CacheError::InternalError => ApiError::internal().into_response(),
    }
}

/// The cached file's bytes, memory-mapped, as a response body: nothing is copied, and
/// the mapping lives as long as the body is being sent.
struct ObjectBytes(Arc<ObjectHandle>);

impl AsRef<[u8]> for ObjectBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}

/// A symstore `file.ptr`: `PATH:` and where the file itself is, which is this proxy at
/// the file's own name. The address is the one the client reached us at (`Host`, and
/// `X-Forwarded-Proto` from a TLS-terminating proxy in front).
fn pointer(uri: &Uri, headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let scheme = match headers.get("x-forwarded-proto").map(|v| v.as_bytes()) {
        Some(b"https") => "https",
        _ => "http",
    };
    // The path as the client wrote it (still percent-encoded), with the directory's
    // name in place of `file.ptr`.
    let mut parts = uri.path().rsplitn(4, '/');
    let (_file, key, name, prefix) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some(format!(
        "PATH:{scheme}://{host}{prefix}/{name}/{key}/{name}"
    ))
}

/// What a symstore path asks for.
#[derive(Debug)]
struct SymstoreRequest {
    filetypes: &'static [FileType],
    id: ObjectId,
    answer: Answer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// The file itself (under its own or its compressed name).
    File,
    /// A `file.ptr` that points to it.
    Pointer,
    /// The module's Breakpad file (Tecken's `<name>/<id>/<stem>.sym`).
    Breakpad,
}

#[derive(Debug, PartialEq, Eq)]
enum PathError {
    /// A segment that is no file name (`..`, `.`, empty, a backslash or NUL): never
    /// handed on, even though source layouts could not escape their root either.
    Refused,
    /// Not `name/key/name`, or a key that fits no object.
    NotSymstore,
}

impl SymstoreRequest {
    /// `name/key/name`, `name/key/compressed-name` (the last character `_`, Microsoft's
    /// name for a CAB-compressed PE or PDB) or `name/key/file.ptr`; names compare
    /// without case, and the key's hex digits may be of either case.
    fn parse(path: &str) -> Result<Self, PathError> {
        let segments: Vec<&str> = path.split('/').collect();
        if segments
            .iter()
            .any(|s| s.is_empty() || *s == "." || *s == ".." || s.contains(['\\', '\0']))
        {
            return Err(PathError::Refused);
        }
        let [name, key, file] = segments[..] else {
            return Err(PathError::NotSymstore);
        };
        if is_breakpad_name(name, file) {
            return breakpad_request(name, key);
        }
        let (answer, compressed) = if file.eq_ignore_ascii_case("file.ptr") {
            (Answer::Pointer, false)
        } else {
            (Answer::File, is_compressed_name(name, file))
        };
        // Whatever name the file was asked under, the lookup is for the object itself.
        let (filetypes, id) =
            parse_symstore_path(&format!("{name}/{key}/{name}")).ok_or(PathError::NotSymstore)?;
        if answer == Answer::File && !compressed && name.to_lowercase() != file.to_lowercase() {
            return Err(PathError::NotSymstore);
        }
        // Only PE and PDB files are stored compressed.
        if compressed && !matches!(filetypes, [FileType::Pe] | [FileType::Pdb]) {
            return Err(PathError::NotSymstore);
        }
        Ok(SymstoreRequest {
            filetypes,
            id,
            answer,
        })
    }
}

/// Whether `file` is the Breakpad file name of the debug file `name`: `xul.pdb` →
/// `xul.sym`, `libxul.so` → `libxul.so.sym` (as Breakpad's and rust-minidump's clients
/// name it), ignoring case.
fn is_breakpad_name(name: &str, file: &str) -> bool {
    let (name, file) = (name.to_lowercase(), file.to_lowercase());
    let Some(stem) = file.strip_suffix(".sym") else {
        return false;
    };
    name != file && (stem == name || name.strip_suffix(".pdb") == Some(stem))
}

/// A Tecken request for the Breakpad file of the module `name` with the Breakpad id
/// `key` (GUID or UUID and age, in hex).
fn breakpad_request(name: &str, key: &str) -> Result<SymstoreRequest, PathError> {
    let debug_id = DebugId::from_breakpad(key).map_err(|_| PathError::NotSymstore)?;
    let object_type = if name.to_lowercase().ends_with(".pdb") {
        ObjectType::Pe
    } else {
        ObjectType::Unknown
    };
    Ok(SymstoreRequest {
        filetypes: &[FileType::Breakpad],
        id: ObjectId {
            debug_id: Some(debug_id),
            debug_file: Some(name.to_owned()),
            object_type,
            ..ObjectId::default()
        },
        answer: Answer::Breakpad,
    })
}

/// Whether `file` is `name` with its last character replaced by `_` (`crash.pdb` and
/// `crash.pd_`), ignoring case.
fn is_compressed_name(name: &str, file: &str) -> bool {
    let Some(file_stem) = file.strip_suffix('_') else {
        return false;
    };
    let Some(stem) = name.len().checked_sub(1).and_then(|end| name.get(..end)) else {
        return false;
    };
    !name.ends_with('_') && stem.to_lowercase() == file_stem.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PDB_KEY: &str = "8E0A63CEE693FDC74C4C44205044422E1";

    #[test]
    fn names_and_keys_compare_without_case() {
        let lower =
            SymstoreRequest::parse(&format!("crash.pdb/{}/CRASH.PDB", PDB_KEY.to_lowercase()))
                .unwrap();
        let upper = SymstoreRequest::parse(&format!("crash.pdb/{PDB_KEY}/crash.pdb")).unwrap();
        assert_eq!(lower.id.debug_id, upper.id.debug_id);
        assert_eq!(lower.filetypes, [FileType::Pdb]);
        assert_eq!(lower.answer, Answer::File);
        let elf = SymstoreRequest::parse("crash/ELF-BUILDID-6CDC6FD9/crash").unwrap();
        assert_eq!(elf.filetypes, [FileType::ElfCode]);
        assert_eq!(elf.id.code_id.unwrap().as_str(), "6cdc6fd9");
    }

    #[test]
    fn compressed_names_and_pointers_ask_for_the_same_object() {
        let plain = SymstoreRequest::parse(&format!("crash.pdb/{PDB_KEY}/crash.pdb")).unwrap();
        for file in ["crash.pd_", "CRASH.PD_", "file.ptr", "FILE.PTR"] {
            let request = SymstoreRequest::parse(&format!("crash.pdb/{PDB_KEY}/{file}")).unwrap();
            assert_eq!(request.id.debug_id, plain.id.debug_id, "{file}");
            assert_eq!(request.filetypes, plain.filetypes, "{file}");
            let want = if file.ends_with('_') {
                Answer::File
            } else {
                Answer::Pointer
            };
            assert_eq!(request.answer, want, "{file}");
        }
        let exe = SymstoreRequest::parse("crash.exe/BCBA5D045000/crash.ex_").unwrap();
        assert_eq!(exe.filetypes, [FileType::Pe]);
        // Only PE and PDB files are stored compressed; a name that is not the compressed
        // form of the directory's is no symstore path.
        for path in [
            "crash/elf-buildid-6cdc6fd9/cras_",
            "crash.exe/BCBA5D045000/crash.pd_",
            "crash.exe/BCBA5D045000/crash.e_",
            "crash.ex_/BCBA5D045000/crash.ex_x",
        ] {
            assert_eq!(
                SymstoreRequest::parse(path).unwrap_err(),
                PathError::NotSymstore,
                "{path}"
            );
        }
    }

    #[test]
    fn tecken_paths_ask_for_the_breakpad_file() {
        for (path, name) in [
            (format!("xul.pdb/{PDB_KEY}/xul.sym"), "xul.pdb"),
            (
                "crash/8601349CB5D5F5B3A971B363182E64E40/crash.sym".into(),
                "crash",
            ),
            (
                "libxul.so/8601349CB5D5F5B3A971B363182E64E40/LIBXUL.SO.sym".into(),
                "libxul.so",
            ),
        ] {
            let request = SymstoreRequest::parse(&path).unwrap();
            assert_eq!(request.answer, Answer::Breakpad, "{path}");
            assert_eq!(request.filetypes, [FileType::Breakpad]);
            assert_eq!(request.id.debug_file.as_deref(), Some(name));
        }
        // A symstore name ending in `.sym` stays a symstore request.
        let same = SymstoreRequest::parse("a.sym/BCBA5D045000/a.sym").unwrap();
        assert_eq!(same.answer, Answer::File);
        for path in [
            format!("xul.pdb/{PDB_KEY}/other.sym"),
            "crash/nothex/crash.sym".to_owned(),
        ] {
            assert_eq!(
                SymstoreRequest::parse(&path).unwrap_err(),
                PathError::NotSymstore,
                "{path}"
            );
        }
        let mut id = SymstoreRequest::parse("crash/8601349CB5D5F5B3A971B363182E64E40/crash.sym")
            .unwrap()
            .id;
        TeckenQuery {
            code_file: Some("crash".into()),
            code_id: Some("9C340186d5b5b3f5a971b363182e64e4b7969622".into()),
        }
        .apply(&mut id)
        .unwrap();
        assert_eq!(id.object_type, ObjectType::Elf);
        assert_eq!(
            id.code_id.unwrap().as_str(),
            "9c340186d5b5b3f5a971b363182e64e4b7969622"
        );
        for bad in [
            TeckenQuery {
                code_id: Some("zz".into()),
                ..TeckenQuery::default()
            },
            TeckenQuery {
                code_file: Some("../x".into()),
                ..TeckenQuery::default()
            },
        ] {
            assert!(bad.apply(&mut ObjectId::default()).is_err());
        }
    }

    #[test]
    fn traversal_is_refused_before_any_lookup() {
        for path in [
            "../crash.pdb/KEY/crash.pdb",
            "crash.pdb/../crash.pdb",
            "crash.pdb/./x/crash.pdb",
            "crash.pdb//crash.pdb",
            "..\\..\\etc/KEY/..\\..\\etc",
            "crash.pdb/KEY/crash.pdb/",
            "a\0/KEY/a\0",
        ] {
            assert_eq!(
                SymstoreRequest::parse(path).unwrap_err(),
                PathError::Refused,
                "{path:?}"
            );
        }
        for path in [
            "crash.pdb",
            "crash.pdb/KEY",
            "a/b/c/d",
            "crash.pdb/nothex/crash.pdb",
        ] {
            assert_eq!(
                SymstoreRequest::parse(path).unwrap_err(),
                PathError::NotSymstore,
                "{path}"
            );
        }
    }
}
