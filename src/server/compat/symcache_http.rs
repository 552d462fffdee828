//! SymCache over HTTP: the protocol of Microsoft's SymCache HTTP server (what Windows
//! Performance Analyzer asks a symcache server), applied to this engine's SymCaches.
//! `GET /symcache/v<major>.<minor>.<patch>/<debug_file>/<debug_id>` (or, as the
//! protocol writes it, `.../<debug_file>/<guid>/<age>`) answers the SymCache that
//! `/symbolicate` reads for that debug file, built through the same derived cache.
//!
//! The version is `symbolic`'s SymCache format (major) and this project's revision of
//! what it writes into that format (minor, the symcache cache version; patch 0). A
//! client may be told to come back (`404` with `Retry-After`) while a SymCache is
//! built, may say which version it already has (`If-Version-Exceeds`: `304` when there
//! is nothing newer), and is never sent another major version.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use symbolic::common::DebugId;
use symbolic::symcache::SYMCACHE_VERSION;

use super::proxy::lookup_failure;
use crate::cache::Scope;
use crate::cache::kinds::SYMCACHES;
use crate::config::SymCacheHttpConfig;
use crate::error::{CacheError, CacheResult};
use crate::native::NativeService;
use crate::native::symcache::OwnedSymCache;
use crate::server::ranges::ranged;
use crate::server::{ApiError, AppState};
use crate::service::{MAX_REQUEST_DURATION, RequestService};
use crate::sources::{ObjectId, ObjectType, SourceConfig};

/// The SymCache version this server builds.
pub const SERVED: Version = Version {
    major: SYMCACHE_VERSION,
    minor: SYMCACHES.version,
    // Every change to what is written bumps the cache version, so the minor.
    patch: 0,
};

/// The answer's media type; its `version` parameter names the version served.
const MEDIA_TYPE: &str = "application/x-symbolic-symcache";

/// A SymCache format version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl FromStr for Version {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let mut parts = s
            .trim()
            .splitn(3, '.')
            .map(|p| p.parse::<u32>().map_err(|_| ()));
        Ok(Version {
            major: parts.next().ok_or(())??,
            minor: parts.next().ok_or(())??,
            patch: parts.next().ok_or(())??,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Which debug file's SymCache is asked for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct DebugFile {
    name: String,
    id: DebugId,
}

impl DebugFile {
    /// The object types to look it up as, in turn, as the file name suggests: a PDB's
    /// module is a PE; any other name may be an ELF or a Mach-O file, whose debug ids
    /// look alike.
    fn object_types(&self) -> &'static [ObjectType] {
        if is_pdb(&self.name) {
            &[ObjectType::Pe]
        } else {
            &[ObjectType::Elf, ObjectType::Macho]
        }
    }
}

fn is_pdb(name: &str) -> bool {
    name.len() > 4 && name.is_char_boundary(name.len() - 4) && {
        let (_, ext) = name.split_at(name.len() - 4);
        ext.eq_ignore_ascii_case(".pdb")
    }
}

type Outcome = CacheResult<OwnedSymCache>;
type Build = Shared<BoxFuture<'static, Outcome>>;

/// The front's state: the native pipeline's SymCaches, the configured sources, and the
/// builds running for clients that were told to come back.
pub struct SymCacheHttp {
    native: Arc<NativeService>,
    sources: Arc<[SourceConfig]>,
    service: RequestService,
    config: SymCacheHttpConfig,
    /// At most one per debug file, each holding a request slot, so at most
    /// `max_concurrent_requests` of them; a build removes itself when it ends.
    builds: Mutex<HashMap<DebugFile, Build>>,
}

impl SymCacheHttp {
    pub fn new(
        native: Arc<NativeService>,
        sources: Arc<[SourceConfig]>,
        service: RequestService,
        config: SymCacheHttpConfig,
    ) -> Self {
        SymCacheHttp {
            native,
            sources,
            service,
            config,
            builds: Mutex::new(HashMap::new()),
        }
    }

    /// The build of `file`'s SymCache: the running one, or a new one in its own task
    /// (so that it goes on when the client that started it stops waiting).
    fn build(self: &Arc<Self>, file: DebugFile) -> Result<Build, ApiError> {
        let mut builds = self.builds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(build) = builds.get(&file) {
            return Ok(build.clone());
        }
        let slot = self.service.reserve().map_err(|_| ApiError::overloaded())?;
        let this = self.clone();
        let key = file.clone();
        let task = tokio::spawn(async move {
            let _slot = slot;
            let outcome = tokio::time::timeout(MAX_REQUEST_DURATION, this.lookup(&key))
                .await
                .unwrap_or(Err(CacheError::Timeout(MAX_REQUEST_DURATION)));
            this.builds
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            outcome
        });
        let build = async move {
            task.await.unwrap_or_else(|err| {
                tracing::error!(error = %err, "symcache build panicked");
                Err(CacheError::InternalError)
            })
        }
        .boxed()
        .shared();
        builds.insert(file, build.clone());
        Ok(build)
    }

    /// The SymCache `/symbolicate` would use for a module with this debug file.
    async fn lookup(&self, file: &DebugFile) -> Outcome {
        for &object_type in file.object_types() {
            let id = ObjectId {
                debug_id: Some(file.id),
                debug_file: Some(file.name.clone()),
                object_type,
                ..ObjectId::default()
            };
            let derived = self
                .native
                .symcaches()
                .fetch_or_build(&self.sources, &id, &Scope::Global)
                .await;
            match derived.cache {
                Err(CacheError::NotFound) => continue,
                found => return found,
            }
        }
        Err(CacheError::NotFound)
    }
}

/// `GET /symcache/{*path}`.
pub async fn symcache(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
    let Some(front) = state.symcache_http.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match answer(&front, &headers, &path).await {
        Ok(response) | Err(response) => response,
    }
}

async fn answer(
    front: &Arc<SymCacheHttp>,
    headers: &HeaderMap,
    path: &str,
) -> Result<Response, Response> {
    let (asked, file) = parse_path(path).map_err(|e| e.into_response())?;
    if asked.major != SERVED.major {
        return Err(StatusCode::NOT_FOUND.into_response());
    }
    if let Some(has) = if_version_exceeds(headers).map_err(|e| e.into_response())?
        && has >= SERVED
    {
        return Err(StatusCode::NOT_MODIFIED.into_response());
    }
    // Clients of a newer version than ours always accept being told to come back.
    let may_retry = asked > SERVED
        || ["allow-retry-after", "accept-retry-after"]
            .iter()
            .any(|name| {
                headers
                    .get(*name)
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
            });
    let build = front.build(file).map_err(|e| e.into_response())?;
    let outcome = if may_retry {
        match tokio::time::timeout(front.config.answer_within, build).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let secs = front.config.retry_after.as_secs_f64().ceil() as u64;
                return Err((
                    StatusCode::NOT_FOUND,
                    [(header::RETRY_AFTER, secs.to_string())],
                )
                    .into_response());
            }
        }
    } else {
        build.await
    };
    let cache = outcome.map_err(|err| lookup_failure(&err))?;
    let served = Version {
        major: cache.get().version(),
        ..SERVED
    };
    if served.major != asked.major {
        return Err(StatusCode::NOT_FOUND.into_response());
    }
    let body = Bytes::from_owner(SymCacheBytes(cache));
    let mut response = ranged(&Method::GET, headers, body);
    let media_type = HeaderValue::try_from(format!("{MEDIA_TYPE}; version={served}"))
        .map_err(|_| ApiError::internal().into_response())?;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, media_type);
    Ok(response)
}

/// `v<major>.<minor>.<patch>/<debug_file>/<debug_id>` or
/// `v<major>.<minor>.<patch>/<debug_file>/<guid>/<age>` (age in decimal, as the
/// protocol's sample server reads it). A PDB's id without an age has age 1: the
/// protocol leaves out an age of 1.
fn parse_path(path: &str) -> Result<(Version, DebugFile), ApiError> {
    let segments: Vec<&str> = path.split('/').collect();
    let (version, name, id, age) = match segments[..] {
        [version, name, id] => (version, name, id, None),
        [version, name, guid, age] => (version, name, guid, Some(age)),
        _ => {
            return Err(ApiError::not_found(
                "expected /symcache/v<major>.<minor>.<patch>/<debug_file>/<debug_id>",
            ));
        }
    };
    let version = version
        .strip_prefix(['v', 'V'])
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ApiError::bad_request("version: expected v<major>.<minor>.<patch>"))?;
    if name.is_empty() || name == "." || name == ".." || name.contains(['\\', '\0']) {
        return Err(ApiError::bad_request("debug_file: expected a file name"));
    }
    let bad_id = || ApiError::bad_request("debug_id: expected a debug id or a GUID and age");
    // A bare GUID: 32 hex digits, or 36 with hyphens.
    let bare_guid = id.len() == 32 || id.len() == 36;
    let mut debug_id: DebugId = id.parse().map_err(|_| bad_id())?;
    match age {
        Some(age) => {
            let age: u32 = age.parse().map_err(|_| bad_id())?;
            if !bare_guid {
                return Err(bad_id());
            }
            debug_id = DebugId::from_parts(debug_id.uuid(), age);
        }
        None if bare_guid && is_pdb(name) => debug_id = DebugId::from_parts(debug_id.uuid(), 1),
        None => {}
    }
    Ok((
        version,
        DebugFile {
            name: name.to_owned(),
            id: debug_id,
        },
    ))
}

/// `If-Version-Exceeds: X.Y.Z`: the version the client already has.
fn if_version_exceeds(headers: &HeaderMap) -> Result<Option<Version>, ApiError> {
    let mut values = headers.get_all("if-version-exceeds").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "only one If-Version-Exceeds header is allowed",
        ));
    }
    value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad_request("If-Version-Exceeds: expected X.Y.Z"))
}

/// The SymCache file's bytes, memory-mapped, as a response body: nothing is copied.
struct SymCacheBytes(OwnedSymCache);

impl AsRef<[u8]> for SymCacheBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.owner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_version_is_symbolics_format_and_our_cache_revision() {
        assert_eq!(SERVED.to_string(), format!("{SYMCACHE_VERSION}.1.0"));
        // Older cache versions would be served while the current one is rebuilt, and
        // the answer would name the wrong revision: the version must then come from
        // the cache file that is served.
        assert!(SYMCACHES.compatible.is_empty());
    }

    #[test]
    fn versions_order_by_number() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert!(v("9.1.0") < v("9.2.0"));
        assert!(v("9.10.0") > v("9.9.9"));
        assert!(v("10.0.0") > v("9.99.99"));
        for bad in ["9.1", "9.1.x", "", "9..1", "-1.0.0"] {
            assert!(bad.parse::<Version>().is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_name_a_debug_file_by_id_or_by_guid_and_age() {
        let id: DebugId = "8e0a63ce-e693-fdc7-4c4c-44205044422e-1".parse().unwrap();
        for path in [
            "v9.1.0/crash.pdb/8e0a63ce-e693-fdc7-4c4c-44205044422e-1",
            "v9.1.0/crash.pdb/8E0A63CEE693FDC74C4C44205044422E1",
            // The protocol leaves out an age of 1.
            "v9.1.0/crash.pdb/8e0a63cee693fdc74c4c44205044422e",
            "v9.1.0/Crash.PDB/8e0a63ce-e693-fdc7-4c4c-44205044422e",
            "v9.1.0/crash.pdb/8e0a63ce-e693-fdc7-4c4c-44205044422e/1",
        ] {
            let (version, file) = parse_path(path).unwrap();
            assert_eq!(version, SERVED, "{path}");
            assert_eq!(file.id, id, "{path}");
            assert_eq!(file.object_types(), [ObjectType::Pe], "{path}");
        }
        let (_, aged) =
            parse_path("v9.1.0/crash.pdb/8e0a63ce-e693-fdc7-4c4c-44205044422e/10").unwrap();
        assert_eq!(aged.id.appendix(), 10);
        // Other debug files have no age.
        let (_, elf) = parse_path("v9.0.0/crash/d96fdc6c-1668-6d8a-e479-531b3d99327b").unwrap();
        assert_eq!(elf.id.appendix(), 0);
        assert_eq!(elf.object_types(), [ObjectType::Elf, ObjectType::Macho]);

        for bad in [
            "9.1.0/crash.pdb/8e0a63cee693fdc74c4c44205044422e",
            "v9.1/crash.pdb/8e0a63cee693fdc74c4c44205044422e",
            "v9.1.0/crash.pdb/nothex",
            "v9.1.0/../8e0a63cee693fdc74c4c44205044422e",
            "v9.1.0/crash.pdb/8E0A63CEE693FDC74C4C44205044422E1/1",
            "v9.1.0/crash.pdb/8e0a63cee693fdc74c4c44205044422e/x",
        ] {
            assert_eq!(
                parse_path(bad).unwrap_err().status,
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
        assert_eq!(
            parse_path("v9.1.0/crash.pdb").unwrap_err().status,
            StatusCode::NOT_FOUND
        );
    }
}
