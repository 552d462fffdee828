//! The debuginfod front: `GET` and `HEAD /buildid/<build id>/debuginfo`, `/executable`,
//! `/source/<path>` and `/section/<name>`, the protocol of elfutils' `debuginfod`, which
//! gdb, lldb, perf, valgrind and `debuginfod-find` speak. Every answer comes from the
//! configured sources through the object lookup `/symbolicate` uses (so symbols kept
//! on S3, GCS or a Sentry project reach a debugger), and is served from the download
//! cache, memory-mapped, as `/proxy` serves files.
//!
//! A source file comes from a source bundle of the build id, else the debug file's
//! DWARF 5 embedded sources, else the address a source bundle links it to. A section
//! comes from the debug file, else the executable, as elfutils takes it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use goblin::container::Ctx;
use goblin::elf::section_header::{SHT_NOBITS, SectionHeader};
use goblin::strtab::Strtab;
use symbolic::common::{CodeId, DebugId};
use symbolic::debuginfo::Object;

use super::proxy::lookup_failure;
use crate::cache::Scope;
use crate::config::DebuginfodConfig;
use crate::error::{CacheError, CacheResult};
use crate::lookup::{ObjectHandle, ObjectLookup, ObjectPurpose, SourceFiles, fetchable_link};
use crate::server::ranges::ranged;
use crate::server::{ApiError, AppState};
use crate::sources::{FileType, ObjectId, ObjectType, SourceConfig};

/// The longest build id a client may name: elfutils' clients send at most 64 bytes.
const MAX_BUILD_ID_HEX: usize = 128;
/// The longest section name: ELF puts no limit on it, real ones are a few dozen bytes.
const MAX_SECTION_NAME: usize = 256;

/// The front's view of the server: the object lookup, the linked-source downloads and
/// the configured sources.
pub struct Debuginfod {
    objects: Arc<ObjectLookup>,
    source_files: Arc<SourceFiles>,
    sources: Arc<[SourceConfig]>,
    config: DebuginfodConfig,
}

/// What a request asks for, once its path is checked.
#[derive(Debug, PartialEq, Eq)]
enum Want {
    Debuginfo,
    Executable,
    Source(String),
    Section(String),
}

/// An answer: the bytes and the `X-Debuginfod-*` headers that describe them.
struct Answer {
    body: Bytes,
    /// The name of the file the bytes are (or are from).
    file: String,
    /// The archive the file was taken out of (a source bundle).
    archive: Option<String>,
}

impl Debuginfod {
    pub fn new(
        objects: Arc<ObjectLookup>,
        source_files: Arc<SourceFiles>,
        sources: Arc<[SourceConfig]>,
        config: DebuginfodConfig,
    ) -> Self {
        Debuginfod {
            objects,
            source_files,
            sources,
            config,
        }
    }

    /// Files asked for by a debugger may serve any scope's requests: they are looked up
    /// (and cached) as the global scope's, as `/proxy` does.
    const SCOPE: Scope = Scope::Global;

    /// The ELF file of `filetypes` for `id`, best for `purpose`; only an ELF file is a
    /// debuginfod answer (a Breakpad file sorted to an ELF debug file's place is not).
    async fn elf(
        &self,
        id: &ObjectId,
        filetypes: &[FileType],
        purpose: ObjectPurpose,
    ) -> CacheResult<(Arc<ObjectHandle>, String)> {
        let found = self
            .objects
            .find(&self.sources, filetypes, id, &Self::SCOPE, purpose)
            .await
            .found
            .ok_or(CacheError::NotFound)?;
        let meta = found.meta.as_ref().map_err(Clone::clone)?;
        if purpose == ObjectPurpose::Debug && !meta.features.has_debug_info {
            return Err(CacheError::NotFound);
        }
        let handle = self.objects.fetch(&found, id).await?;
        if !matches!(handle.object(), Some(Object::Elf(_))) {
            return Err(CacheError::NotFound);
        }
        Ok((handle, file_name(found.file.uri())))
    }

    async fn debuginfo(&self, id: &ObjectId) -> CacheResult<(Arc<ObjectHandle>, String)> {
        // An unstripped executable is its own debug file, as elfutils serves it.
        self.elf(
            id,
            &[FileType::ElfDebug, FileType::ElfCode],
            ObjectPurpose::Debug,
        )
        .await
    }

    async fn executable(&self, id: &ObjectId) -> CacheResult<(Arc<ObjectHandle>, String)> {
        self.elf(id, &[FileType::ElfCode], ObjectPurpose::Whole)
            .await
    }

    async fn answer(&self, id: &ObjectId, want: &Want) -> CacheResult<Answer> {
        match want {
            Want::Debuginfo => {
                let (handle, file) = self.debuginfo(id).await?;
                Ok(whole(handle, file))
            }
            Want::Executable => {
                let (handle, file) = self.executable(id).await?;
                Ok(whole(handle, file))
            }
            Want::Source(path) => self.source(id, path).await,
            Want::Section(name) => self.section(id, name).await,
        }
    }

    /// The source file `path` (as the build recorded it) of the build `id`.
    async fn source(&self, id: &ObjectId, path: &str) -> CacheResult<Answer> {
        let max = self.config.max_source_size;
        let too_large = |size: usize| {
            tracing::info!(
                size,
                max,
                "debuginfod: source file larger than debuginfod.max_source_size"
            );
            CacheError::TooLarge(format!("larger than debuginfod.max_source_size ({max})"))
        };
        let bundle = self
            .objects
            .find(
                &self.sources,
                &[FileType::SourceBundle],
                id,
                &Self::SCOPE,
                ObjectPurpose::Source,
            )
            .await
            .found
            .filter(|found| found.meta.is_ok());
        let mut link = None;
        if let Some(found) = bundle
            && let Ok(handle) = self.objects.fetch(&found, id).await
            && let Some(source) = handle.bundled_source(path)
        {
            if let Some(text) = &source.text {
                if text.len() as u64 > max {
                    return Err(too_large(text.len()));
                }
                return Ok(Answer {
                    body: Bytes::from(text.clone().into_bytes()),
                    file: file_name(path),
                    archive: Some(file_name(found.file.uri())),
                });
            }
            link = source.url.as_deref().and_then(fetchable_link);
        }
        if let Ok((handle, file)) = self.debuginfo(id).await
            && let Some(text) = handle.embedded_source(path)
        {
            if text.len() as u64 > max {
                return Err(too_large(text.len()));
            }
            return Ok(Answer {
                body: Bytes::copy_from_slice(text.as_bytes()),
                file: file_name(path),
                archive: Some(file),
            });
        }
        let url = link.ok_or(CacheError::NotFound)?;
        // Linked files are fetched as source context fetches them: through the fetch
        // layer's reserved-IP rule, and within its size limit for source files.
        let bytes = self.source_files.fetch(&Self::SCOPE, &url).await?;
        if bytes.len() as u64 > max {
            return Err(too_large(bytes.len()));
        }
        Ok(Answer {
            body: Bytes::copy_from_slice(&bytes),
            file: file_name(path),
            archive: None,
        })
    }

    /// The bytes of section `name`: from the debug file when it holds them, else from
    /// the executable (a debug file keeps only the headers of the code's sections).
    async fn section(&self, id: &ObjectId, name: &str) -> CacheResult<Answer> {
        if let Ok((handle, file)) = self.debuginfo(id).await
            && let Some(range) = section_range(handle.data(), name)
        {
            return Ok(slice(handle, range, file));
        }
        let (handle, file) = self.executable(id).await?;
        let range = section_range(handle.data(), name).ok_or(CacheError::NotFound)?;
        Ok(slice(handle, range, file))
    }
}

/// The last segment of a location, as elfutils names a file in `X-Debuginfod-File`
/// (its own paths, and where our sources keep files, stay private).
fn file_name(location: &str) -> String {
    let location = location.split(['?', '#']).next().unwrap_or(location);
    location
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(location)
        .to_owned()
}

/// A whole file, memory-mapped, as the body.
fn whole(handle: Arc<ObjectHandle>, file: String) -> Answer {
    Answer {
        body: Bytes::from_owner(ObjectBytes(handle)),
        file,
        archive: None,
    }
}

/// Part of a file, still memory-mapped.
fn slice(handle: Arc<ObjectHandle>, range: std::ops::Range<usize>, file: String) -> Answer {
    Answer {
        body: Bytes::from_owner(ObjectBytes(handle)).slice(range),
        file,
        archive: None,
    }
}

/// The cached file's bytes as a response body, mapped for as long as it is sent.
struct ObjectBytes(Arc<ObjectHandle>);

impl AsRef<[u8]> for ObjectBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}

/// Where in the ELF file `data` the contents of the section `name` are (as stored: a
/// compressed section stays compressed, as elfutils hands it out). `None` when there is
/// no such section or it has no contents in this file (`SHT_NOBITS`: a debug file's
/// copy of `.text`).
fn section_range(data: &[u8], name: &str) -> Option<std::ops::Range<usize>> {
    let header = goblin::elf::Elf::parse_header(data).ok()?;
    let ctx = Ctx::new(header.container().ok()?, header.endianness().ok()?);
    let headers =
        SectionHeader::parse(data, header.e_shoff as usize, header.e_shnum as usize, ctx).ok()?;
    let strtab_index = match u32::from(header.e_shstrndx) {
        goblin::elf::section_header::SHN_XINDEX => headers.first()?.sh_link as usize,
        index => index as usize,
    };
    let names_header = headers.get(strtab_index)?;
    let names = Strtab::parse(
        data,
        names_header.sh_offset as usize,
        names_header.sh_size as usize,
        0,
    )
    .ok()?;
    let section = headers
        .iter()
        .find(|h| h.sh_type != SHT_NOBITS && names.get_at(h.sh_name) == Some(name))?;
    let start = usize::try_from(section.sh_offset).ok()?;
    let end = start.checked_add(usize::try_from(section.sh_size).ok()?)?;
    (end <= data.len()).then_some(start..end)
}

/// A build id as a debuginfod URL names it: hex digits, an even number of them (any
/// case; elfutils' clients send lower case).
fn parse_build_id(text: &str) -> Result<ObjectId, String> {
    if text.is_empty()
        || text.len() > MAX_BUILD_ID_HEX
        || !text.len().is_multiple_of(2)
        || !text.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(format!(
            "build id must be an even number of hex digits, at most {MAX_BUILD_ID_HEX}"
        ));
    }
    let build_id = text.to_ascii_lowercase();
    Ok(ObjectId {
        debug_id: elf_debug_id(&build_id),
        code_id: Some(CodeId::new(build_id)),
        object_type: ObjectType::Elf,
        ..ObjectId::default()
    })
}

/// The debug id of an ELF file with this build id: its first 16 bytes (padded with
/// zeros) as a little-endian GUID, age 0, as symbolic and Breakpad compute it. A Sentry
/// source searches by it.
fn elf_debug_id(build_id: &str) -> Option<DebugId> {
    let bytes = hex::decode(build_id).ok()?;
    let mut guid = [0u8; 16];
    let n = bytes.len().min(16);
    guid[..n].copy_from_slice(&bytes[..n]);
    DebugId::from_guid_age(&guid, 0).ok()
}

/// The rest of the path after `/buildid/<id>/`.
fn parse_want(rest: &str, config: &DebuginfodConfig) -> Result<Want, String> {
    let (kind, arg) = match rest.split_once('/') {
        Some((kind, arg)) => (kind, Some(arg)),
        None => (rest, None),
    };
    match (kind, arg) {
        ("debuginfo", None) => Ok(Want::Debuginfo),
        ("executable", None) => Ok(Want::Executable),
        ("source", Some(path)) => {
            // The path is the one the build recorded, absolute; the client sends it
            // after `source`, so its leading `/` is the separator's. It is only ever a
            // key into a bundle's or a debug file's list of sources, never a path on
            // our disk, so `..` in it (which builds do record) is no escape.
            if path.len() > config.max_path_length {
                return Err(format!(
                    "source path is longer than debuginfod.max_path_length ({})",
                    config.max_path_length
                ));
            }
            if path.is_empty() || path.contains('\0') {
                return Err("source path must be a non-empty file path".into());
            }
            let path = path.trim_start_matches('/');
            Ok(Want::Source(format!("/{path}")))
        }
        ("section", Some(name)) => {
            if name.is_empty() || name.len() > MAX_SECTION_NAME || name.contains(['/', '\0']) {
                return Err(format!(
                    "section name must be 1 to {MAX_SECTION_NAME} bytes without `/`"
                ));
            }
            Ok(Want::Section(name.to_owned()))
        }
        _ => Err(
            "not a debuginfod request: want debuginfo, executable, source/<path> or section/<name>"
                .into(),
        ),
    }
}

/// `GET` and `HEAD /buildid/{id}/{*rest}`.
pub async fn buildid(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    Path((id, rest)): Path<(String, String)>,
) -> Response {
    let Some(front) = state.debuginfod.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let id = match parse_build_id(&id) {
        Ok(id) => id,
        Err(message) => return ApiError::bad_request(message).into_response(),
    };
    let want = match parse_want(&rest, &front.config) {
        Ok(want) => want,
        Err(message) => return ApiError::bad_request(message).into_response(),
    };
    // A lookup downloads: it counts against `max_concurrent_requests` like any request.
    let Ok(_slot) = state.service.reserve() else {
        return ApiError::overloaded().into_response();
    };
    let timeout: Duration = front.config.timeout;
    let answer = match tokio::time::timeout(timeout, front.answer(&id, &want)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(err)) => return lookup_failure(&err),
        Err(_) => {
            return ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: format!(
                    "the lookup took longer than debuginfod.timeout ({}s)",
                    timeout.as_secs()
                ),
            }
            .into_response();
        }
    };
    respond(&method, &headers, answer)
}

fn respond(method: &Method, request: &HeaderMap, answer: Answer) -> Response {
    let size = answer.body.len() as u64;
    let mut response = ranged(method, request, answer.body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    // The whole file's size, also when a range of it is sent.
    headers.insert(
        HeaderName::from_static("x-debuginfod-size"),
        HeaderValue::from(size),
    );
    // Names that are no valid header value (control characters) are left out rather
    // than failing the answer: the headers describe the file, the body is the file.
    if let Ok(file) = HeaderValue::from_str(&answer.file) {
        headers.insert(HeaderName::from_static("x-debuginfod-file"), file);
    }
    if let Some(archive) = answer.archive.and_then(|a| HeaderValue::from_str(&a).ok()) {
        headers.insert(HeaderName::from_static("x-debuginfod-archive"), archive);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids_are_even_hex_and_bounded() {
        let id = parse_build_id("9C340186d5b5b3f5a971b363182e64e4b7969622").unwrap();
        assert_eq!(
            id.code_id.unwrap().as_str(),
            "9c340186d5b5b3f5a971b363182e64e4b7969622"
        );
        // The fixture's debug id (fixtures/minidump/README.md).
        assert_eq!(
            id.debug_id.unwrap().to_string(),
            "8601349c-b5d5-f5b3-a971-b363182e64e4"
        );
        for bad in ["", "abc", "xy", "../..", &"ab".repeat(65)] {
            assert!(parse_build_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn paths_name_what_is_wanted() {
        let config = DebuginfodConfig::default();
        assert_eq!(parse_want("debuginfo", &config), Ok(Want::Debuginfo));
        assert_eq!(parse_want("executable", &config), Ok(Want::Executable));
        assert_eq!(
            parse_want("source/build/x/../a.c", &config),
            Ok(Want::Source("/build/x/../a.c".into()))
        );
        assert_eq!(
            parse_want("section/.debug_info", &config),
            Ok(Want::Section(".debug_info".into()))
        );
        for bad in [
            "debuginfo/x",
            "source",
            "source/",
            "section/a/b",
            "section/",
            "other",
        ] {
            assert!(parse_want(bad, &config).is_err(), "{bad}");
        }
        let long = format!("source/{}", "a".repeat(config.max_path_length + 1));
        assert!(
            parse_want(&long, &config)
                .unwrap_err()
                .contains("max_path_length")
        );
    }

    #[test]
    fn sections_are_found_by_name_with_contents_only() {
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/minidump/fp");
        let exe = std::fs::read(fixtures.join("crash")).unwrap();
        let text = section_range(&exe, ".text").unwrap();
        assert!(!text.is_empty());
        // The debug file keeps `.text`'s header but not its bytes.
        let debug = std::fs::read(fixtures.join("crash.debug")).unwrap();
        assert!(section_range(&debug, ".text").is_none());
        assert!(section_range(&debug, ".debug_info").is_some());
        assert!(section_range(&exe, ".nope").is_none());
        assert!(section_range(b"not an elf file", ".text").is_none());
    }
}
