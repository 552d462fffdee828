//! Object files (ELF, Mach-O, PE, PDB, Breakpad, Wasm, portable PDB, source bundles) as
//! a downloaded format: checked when they land (one object kept out of a fat archive),
//! parsed on load, and asked for what the lookup needs to rank them (`ObjectMeta`) and
//! for the sources they carry or point to (DWARF 5 embedded sources, SRCSRV links).

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde::{Deserialize, Serialize};
use symbolic::cfi::FromObjectOptions;
use symbolic::common::{Arch, ByteView, CpuFamily, DebugId, SelfCell};
use symbolic::debuginfo::{
    Archive, FileFormat as ObjectFormat, Object, ObjectError, ParseObjectOptions,
};

use super::compressed_sections::{CompressedSection, check_sections, compressed_sections};
use super::downloads::FileFormat;
use super::embedded_sources::{embedded_sources, has_embedded_sources};
use super::fat64;
use super::pdb_header::PdbHeader;
use crate::cache::CacheKind;
use crate::cache::kinds;
use crate::error::{CacheError, CacheResult, isolate};
use crate::fetch::DecompressLimits;
use crate::sources::ObjectId;
use crate::types::{ObjectFeatures, SrcSrvVcs};

/// What reading one object file may cost, beyond its own size: the keys upstream has
/// for symbolic's readers (`object_file_max_decompressed_section_size`,
/// `object_file_max_decompressed_source_size`, `max_unwind_chain_len`), and the ratio
/// downloads are held to, for compressed sections too (`max_decompression_ratio` above
/// `decompression_ratio_floor`). A few KiB of compressed DWARF section or embedded source
/// could otherwise claim gigabytes, and a PE's chained unwind info could be followed
/// without end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjectLimits {
    pub max_decompressed_section_size: u64,
    pub max_decompressed_source_size: u64,
    pub max_unwind_chain_len: usize,
    /// `u64::MAX`: no limit.
    pub max_decompression_ratio: u64,
    pub decompression_ratio_floor: u64,
    /// Largest il2cpp line mapping read beside a debug file (`max_il2cpp_mapping_size`).
    pub max_il2cpp_mapping_size: u64,
    /// Largest WebAssembly source map read beside a module (`max_wasm_source_map_size`).
    pub max_wasm_source_map_size: u64,
}

impl Default for ObjectLimits {
    /// Upstream's defaults, and the download limits' ratio.
    fn default() -> Self {
        let fetch = crate::fetch::FetchConfig::default();
        ObjectLimits {
            max_decompressed_section_size: 4 << 30,
            max_decompressed_source_size: 1 << 30,
            max_unwind_chain_len: 128,
            max_decompression_ratio: fetch.max_decompression_ratio,
            decompression_ratio_floor: fetch.decompression_ratio_floor,
            // About 90 million mapped lines, at some 12 bytes of JSON each: past the
            // largest Unity builds, and a bound on what one mapping costs to read.
            max_il2cpp_mapping_size: 1 << 30,
            // Emscripten writes a few bytes of mappings per instruction: a 50 MiB
            // module's map is some 100 MiB. Read into a token table of about its size.
            max_wasm_source_map_size: 256 << 20,
        }
    }
}

impl ObjectLimits {
    /// How far one compressed section may inflate.
    pub fn sections(&self) -> DecompressLimits {
        DecompressLimits {
            max_size: self.max_decompressed_section_size,
            max_ratio: self.max_decompression_ratio,
            ratio_floor: self.decompression_ratio_floor,
        }
    }

    /// How far one embedded source file (or artifact bundle entry) may inflate.
    pub fn sources(&self) -> DecompressLimits {
        DecompressLimits {
            max_size: self.max_decompressed_source_size,
            max_ratio: self.max_decompression_ratio,
            ratio_floor: self.decompression_ratio_floor,
        }
    }

    /// How symbolic parses the object, for the readers that parse parts of it again.
    pub fn parse_options(&self) -> ParseObjectOptions {
        let mut options = ParseObjectOptions::default();
        options.max_decompressed_section_size = as_limit(self.max_decompressed_section_size);
        options.max_decompressed_embedded_source_size = as_limit(self.max_decompressed_source_size);
        options
    }

    /// For CFI conversion of the object these limits were read with.
    pub fn cfi_options(&self) -> FromObjectOptions {
        let mut options = FromObjectOptions::default();
        options.max_unwind_chain_len =
            (self.max_unwind_chain_len != usize::MAX).then_some(self.max_unwind_chain_len);
        options
    }
}

/// `u64::MAX` (a `null` in the config) is no limit.
fn as_limit(bytes: u64) -> Option<usize> {
    (bytes != u64::MAX).then(|| usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// Which object a downloaded file must hold, and how it may be read.
#[derive(Clone, Debug)]
pub struct ObjectHint {
    pub id: ObjectId,
    pub limits: ObjectLimits,
}

/// A parsed debug file, backed by a memory-mapped cache file.
pub struct ObjectHandle {
    parsed: Parsed,
    limits: ObjectLimits,
    /// What symbolic inflates when it reads the file's compressed ELF sections.
    compressed: Vec<CompressedSection>,
    /// Read on first use: most handles are never asked for sources.
    embedded_sources: OnceLock<HashMap<String, String>>,
    /// A PDB's SRCSRV stream, read on first use.
    srcsrv: OnceLock<Option<Vec<u8>>>,
    /// Where SRCSRV says each asked-for path can be downloaded (`None`: nowhere).
    srcsrv_urls: Mutex<HashMap<String, Option<String>>>,
    /// Files of a source bundle or portable PDB, as read for earlier requests.
    bundled: Mutex<BundledFiles>,
    /// Whether the handle's bytes are a read-only mapping of a whole cache file, whose
    /// pages can be dropped and read again (see [`ObjectHandle::release_pages`]).
    file_mapping: bool,
}

/// What a handle read of its file when it was loaded.
enum Parsed {
    /// symbolic's object, held as long as the handle.
    Object(Box<SelfCell<ByteView<'static>, Object<'static>>>),
    /// A PDB's identity only. symbolic's `PdbObject` holds a copy of the public symbol
    /// records (4.5 % of the file) for as long as it lives (see `pdb_header`).
    Pdb(ByteView<'static>, PdbHeader),
}

/// symbolic's object of a handle, held by it or parsed for the caller.
pub enum SymbolicObject<'a> {
    Held(&'a Object<'a>),
    Parsed(Box<Object<'a>>),
}

impl<'a> Deref for SymbolicObject<'a> {
    type Target = Object<'a>;

    fn deref(&self) -> &Object<'a> {
        match self {
            SymbolicObject::Held(object) => object,
            SymbolicObject::Parsed(object) => object,
        }
    }
}

/// A file as a source bundle or portable PDB has it: its text, or where it links to,
/// or both.
#[derive(Debug)]
pub struct BundledSource {
    pub text: Option<String>,
    pub url: Option<String>,
}

/// How many bytes of source text all handles together remember; past it, files are
/// read anew for each request, as if never read.
const MAX_BUNDLED_BYTES: usize = 64 * 1024 * 1024;

/// Bytes of source text held by every handle's [`BundledFiles`].
static BUNDLED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The files one handle remembers (`None`: not in the archive), and their bytes of
/// [`BUNDLED_BYTES`], given back when the handle leaves the cache.
#[derive(Default)]
struct BundledFiles {
    files: HashMap<String, Option<Arc<BundledSource>>>,
    bytes: usize,
}

impl Drop for BundledFiles {
    fn drop(&mut self) {
        BUNDLED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl ObjectHandle {
    fn parse(
        data: ByteView<'static>,
        limits: ObjectLimits,
        file_mapping: bool,
    ) -> CacheResult<Self> {
        let parsed = if Object::peek(&data) == ObjectFormat::Pdb {
            let header =
                PdbHeader::read(&data).map_err(|err| CacheError::Malformed(err.to_string()))?;
            Parsed::Pdb(data, header)
        } else {
            let options = limits.parse_options();
            let object = SelfCell::try_new(data, |bytes| {
                Object::parse_with_opts(unsafe { &*bytes }, options)
            })
            .map_err(|err| CacheError::Malformed(err.to_string()))?;
            Parsed::Object(Box::new(object))
        };
        // Checked here, where every reader of the file starts (lazy readers, SymCache and
        // CFI conversions, embedded sources), before any of them inflates a section.
        let compressed = match &parsed {
            Parsed::Object(object) => match object.get() {
                Object::Elf(elf) => compressed_sections(elf.data()),
                _ => Vec::new(),
            },
            Parsed::Pdb(..) => Vec::new(),
        };
        check_sections(&compressed, &limits.sections())?;
        Ok(ObjectHandle {
            parsed,
            limits,
            compressed,
            embedded_sources: OnceLock::new(),
            srcsrv: OnceLock::new(),
            srcsrv_urls: Mutex::new(HashMap::new()),
            bundled: Mutex::default(),
            file_mapping,
        })
    }

    /// A handle on a file outside the caches (the large-file check in `examples/`, tests that
    /// start from a file).
    pub fn from_bytes(data: ByteView<'static>, limits: ObjectLimits) -> CacheResult<Self> {
        Self::parse(data, limits, false)
    }

    /// Drops this process's resident pages of the file once a conversion has read it.
    /// The handle outlives its conversions in the in-memory cache, and a SymCache or CFI
    /// conversion touches every page: a crash of large modules kept each whole file in
    /// the process's RSS (150 MiB of four Breakpad files, for nothing: warm requests
    /// read the derived caches). The kernel keeps the pages in its page cache, so a
    /// reader that comes later, or one still running, faults them back in cheaply.
    pub fn release_pages(&self) {
        if self.file_mapping {
            // SAFETY: `file_mapping` is set only for the cacher's read-only mappings of
            // cache files, which are replaced by renames, never written in place.
            unsafe { crate::cache::release_mapped_pages(self.bytes()) };
        }
    }

    /// The file's bytes when they are the cacher's mapping of a whole cache file: shared,
    /// read-only, page-aligned, and never written in place (cache files are replaced by
    /// renames), so parts of it may be mapped again elsewhere.
    pub fn file_mapping(&self) -> Option<&[u8]> {
        self.file_mapping.then(|| self.data())
    }

    /// Bytes of the file (decompressed, as downloaded).
    pub fn size(&self) -> u64 {
        self.data().len() as u64
    }

    /// Bytes the compressed sections named in `names` (as symbolic names them:
    /// `debug_info`) inflate to; all of them for `None`. What reading them adds to the
    /// file's own size in memory.
    pub fn inflated_size(&self, names: Option<&[&str]>) -> u64 {
        self.compressed
            .iter()
            .filter(|s| names.is_none_or(|names| names.contains(&s.name.as_str())))
            .fold(0, |sum, s| sum.saturating_add(s.inflated))
    }

    /// What converting the whole file holds in memory: the file and every section it
    /// inflates, for the conversion budget.
    pub fn conversion_size(&self) -> u64 {
        self.size().saturating_add(self.inflated_size(None))
    }

    fn bytes(&self) -> &ByteView<'static> {
        match &self.parsed {
            Parsed::Object(object) => object.owner(),
            Parsed::Pdb(data, _) => data,
        }
    }

    /// The file's bytes (decompressed, as downloaded).
    pub fn data(&self) -> &[u8] {
        self.bytes()
    }

    pub fn file_format(&self) -> ObjectFormat {
        match &self.parsed {
            Parsed::Object(object) => object.get().file_format(),
            Parsed::Pdb(..) => ObjectFormat::Pdb,
        }
    }

    pub fn debug_id(&self) -> DebugId {
        match &self.parsed {
            Parsed::Object(object) => object.get().debug_id(),
            Parsed::Pdb(_, header) => header.debug_id,
        }
    }

    pub fn arch(&self) -> Arch {
        match &self.parsed {
            Parsed::Object(object) => object.get().arch(),
            Parsed::Pdb(_, header) => header.arch,
        }
    }

    /// symbolic's parse of the file, held as long as the handle; `None` for a PDB (see
    /// [`Parsed::Pdb`]), which is read through `native::pdb_read`, or through
    /// [`ObjectHandle::symbolic_object`] where only symbolic's API will do.
    pub fn object(&self) -> Option<&Object<'_>> {
        match &self.parsed {
            Parsed::Object(object) => Some(object.get()),
            Parsed::Pdb(..) => None,
        }
    }

    /// symbolic's parse of the file, in any format: the held one, or for a PDB one
    /// parsed now, which copies its symbol records onto the heap until it is dropped.
    pub fn symbolic_object(&self) -> CacheResult<SymbolicObject<'_>> {
        match &self.parsed {
            Parsed::Object(object) => Ok(SymbolicObject::Held(object.get())),
            Parsed::Pdb(data, _) => Object::parse_with_opts(data, self.limits.parse_options())
                .map(|object| SymbolicObject::Parsed(Box::new(object)))
                .map_err(|err| CacheError::Malformed(err.to_string())),
        }
    }

    /// What the lookup ranks candidates by and reports of the file.
    pub fn meta(&self) -> ObjectMeta {
        match &self.parsed {
            Parsed::Object(object) => ObjectMeta::of(object.get()),
            // `PdbObject`'s answers, which need none of its streams.
            Parsed::Pdb(data, header) => ObjectMeta {
                features: ObjectFeatures {
                    has_debug_info: true,
                    has_unwind_info: header.arch.cpu_family() == CpuFamily::Intel32,
                    has_symbols: true,
                    has_sources: false,
                    srcsrv_vcs: srcsrv_vcs(data),
                },
                arch: header.arch,
                debug_id: Some(header.debug_id),
                breakpad_name: None,
                source_mapping_url: None,
            },
        }
    }

    /// The limits it was read with, for what is derived from it.
    pub fn limits(&self) -> &ObjectLimits {
        &self.limits
    }

    /// A source file embedded in the DWARF line table, by absolute path.
    pub fn embedded_source(&self, path: &str) -> Option<&str> {
        self.embedded_sources
            .get_or_init(|| {
                // A DWARF walk of a downloaded file: if it panics, the file has no
                // embedded sources (and the walk is not tried again).
                let Some(object) = self.object() else {
                    return HashMap::new();
                };
                isolate("embedded sources", || Ok(embedded_sources(object))).unwrap_or_default()
            })
            .get(path)
            .map(String::as_str)
    }

    /// The URL a PDB's SRCSRV stream gives for the source file `path`, when the stream
    /// says to download it (command-based VCS entries, such as Perforce's, are not
    /// something a server may run).
    pub fn srcsrv_url(&self, path: &str) -> Option<String> {
        let data = self
            .srcsrv
            .get_or_init(|| {
                (self.file_format() == ObjectFormat::Pdb)
                    .then(|| isolate("srcsrv stream", || Ok(read_srcsrv(self.data()))).ok())
                    .flatten()
                    .flatten()
            })
            .as_deref()?;
        let urls = || {
            self.srcsrv_urls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some(url) = urls().get(path) {
            return url.clone();
        }
        // Parsed without the lock held, so a parser that panics cannot poison it.
        let url = isolate("srcsrv stream", || {
            Ok(srcsrv::SrcSrvStream::parse(data)
                .ok()
                .and_then(|stream| stream.source_for_path(path, "").ok().flatten())
                .and_then(|method| match method {
                    srcsrv::SourceRetrievalMethod::Download { url } => Some(url),
                    _ => None,
                }))
        })
        .unwrap_or(None);
        let mut urls = urls();
        // One entry per source path a request asked for; a bound keeps a handle that
        // lives long in the cache from growing with every distinct path.
        if urls.len() < MAX_SRCSRV_PATHS {
            urls.insert(path.to_owned(), url.clone());
        }
        url
    }

    /// The file `path` of a source bundle or portable PDB. Each is read once while
    /// the handle is cached (within [`MAX_BUNDLED_BYTES`] for all handles): reading one
    /// opens a debug session of the archive and inflates the file, which is otherwise
    /// most of the work of a small warm minidump.
    pub fn bundled_source(&self, path: &str) -> Option<Arc<BundledSource>> {
        let files = || self.bundled.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = files().files.get(path) {
            return found.clone();
        }
        // Read without the lock held: a reader that panics (it reads a downloaded
        // archive) costs the frame its context, and cannot poison the lock.
        let source = isolate("source bundle", || {
            let Some(object) = self.object() else {
                return Ok(None);
            };
            Ok(object.debug_session().ok().and_then(|session| {
                let descriptor = session.source_by_path(path).ok().flatten()?;
                Some(BundledSource {
                    url: descriptor.url().map(str::to_owned),
                    text: descriptor.into_contents().map(|text| text.into_owned()),
                })
            }))
        })
        .ok()
        .flatten()
        .map(Arc::new);
        let bytes = source
            .as_ref()
            .map_or(0, |s| s.text.as_ref().map_or(0, String::len))
            + path.len();
        let mut files = files();
        let fits = BUNDLED_BYTES
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes)
                    .filter(|&sum| sum <= MAX_BUNDLED_BYTES)
            })
            .is_ok();
        if fits {
            if files.files.len() < MAX_SRCSRV_PATHS && !files.files.contains_key(path) {
                files.files.insert(path.to_owned(), source.clone());
                files.bytes += bytes;
            } else {
                BUNDLED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            }
        }
        source
    }
}

/// How many SRCSRV answers (and bundled files) one handle remembers.
const MAX_SRCSRV_PATHS: usize = 4096;

/// The raw SRCSRV stream of a PDB; symbolic reads it but only exposes the VCS name.
fn read_srcsrv(pdb: &[u8]) -> Option<Vec<u8>> {
    let mut pdb = pdb::PDB::open(std::io::Cursor::new(pdb)).ok()?;
    let stream = pdb.named_stream(b"srcsrv").ok()?;
    Some(stream.as_slice().to_vec())
}

/// What we remember about a fetched file without keeping it open: enough to choose
/// between candidates and to report features.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub features: ObjectFeatures,
    pub arch: Arch,
    /// The id the file records for itself. The lookup uses a file served for a module
    /// whatever id it records (as upstream does); a stricter front can refuse it.
    #[serde(default)]
    pub debug_id: Option<DebugId>,
    /// A Breakpad file's module name as Mozilla's service reports it (see
    /// [`breakpad_module_name`]).
    #[serde(default)]
    pub breakpad_name: Option<String>,
    /// A WebAssembly module's `sourceMappingURL` custom section: where its source map
    /// was published, whose name the SymCache's inputs look for beside the module.
    #[serde(default)]
    pub source_mapping_url: Option<String>,
}

impl ObjectMeta {
    fn of(object: &Object<'_>) -> Self {
        ObjectMeta {
            features: ObjectFeatures {
                has_debug_info: object.has_debug_info(),
                has_unwind_info: object.has_unwind_info(),
                has_symbols: object.has_symbols(),
                has_sources: object.has_sources() || has_embedded_sources(object),
                // A PDB's meta is its handle's (`Parsed::Pdb`), never a held object's.
                srcsrv_vcs: None,
            },
            arch: object.arch(),
            debug_id: Some(object.debug_id()),
            breakpad_name: match object {
                Object::Breakpad(_) => breakpad_module_name(object.data()),
                _ => None,
            },
            source_mapping_url: match object {
                Object::Wasm(_) => source_mapping_url(object.data()),
                _ => None,
            },
        }
    }
}

/// The module name Mozilla's service gives frames of a Breakpad file: the last of the
/// four fields of its first `INFO` line (`INFO CODE_ID <id> <pe file>`, which Windows
/// symbol dumps write), if that line has four; otherwise (and when the records start
/// first) none, and the module keeps its debug file name.
pub fn breakpad_module_name(data: &[u8]) -> Option<String> {
    for line in data.split(|&b| b == b'\n') {
        if line.starts_with(b"INFO") {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let [_, _, _, name] = fields[..] else {
                return None;
            };
            let name = std::str::from_utf8(name).ok()?.trim();
            return Some(name.to_owned());
        }
        if line.starts_with(b"FILE") || line.starts_with(b"PUBLIC") || line.starts_with(b"FUNC") {
            return None;
        }
    }
    None
}

/// The URL a WebAssembly module's `sourceMappingURL` custom section holds (one
/// length-prefixed string, as browsers read it). Function bodies are passed over as
/// they are (their sizes only): the module was validated when it was parsed.
pub fn source_mapping_url(module: &[u8]) -> Option<String> {
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload.ok()? {
            wasmparser::Payload::CustomSection(section) if section.name() == "sourceMappingURL" => {
                let mut reader = wasmparser::BinaryReader::new(section.data(), 0);
                return reader.read_string().ok().map(str::to_owned);
            }
            _ => {}
        }
    }
    None
}

/// The last segment of a `sourceMappingURL`, without query or fragment: the file's
/// name, which is all that is looked for. Nothing that could name another directory.
pub fn source_map_file_name(url: &str) -> Option<&str> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let name = path.rsplit('/').next().unwrap_or_default();
    let usable = !name.is_empty() && name != "." && name != ".." && !name.contains('\\');
    usable.then_some(name)
}

/// Which VCS a PDB's SRCSRV stream names, if it has one. Read from that stream alone:
/// symbolic's `srcsrv_vcs_name` needs a whole debug session, which copies the type and
/// id streams onto the heap (580 MiB for a 1 GiB PDB, while its download was checked).
fn srcsrv_vcs(pdb: &[u8]) -> Option<SrcSrvVcs> {
    let data = read_srcsrv(pdb)?;
    isolate("srcsrv stream", || {
        Ok(srcsrv::SrcSrvStream::parse(&data)
            .ok()
            .and_then(|stream| stream.version_control_description())
            .map(SrcSrvVcs::from_vcs_name))
    })
    .unwrap_or(None)
}

/// Checks that the file parses. For a multi-object archive (fat Mach-O, of either
/// layout), returns where the object that matches the module lies, since that is all
/// we will ever use.
fn extract_object(path: &Path, hint: &ObjectHint) -> CacheResult<Option<Range<u64>>> {
    let view = ByteView::open(path).map_err(CacheError::internal)?;
    let options = hint.limits.parse_options();
    if let Some(slices) = fat64::slices(&view) {
        let slices = slices.map_err(CacheError::Malformed)?;
        let objects = slices.into_iter().map(|range| {
            let object = Object::parse_with_opts(&view[range.clone()], options);
            (object, range)
        });
        return pick_object(objects, &hint.id);
    }
    if Object::peek(&view) == ObjectFormat::Pdb {
        return PdbHeader::read(&view)
            .map(|_| None)
            .map_err(|e| CacheError::Malformed(e.to_string()));
    }
    let archive = Archive::parse_with_opts(&view, options)
        .map_err(|e| CacheError::Malformed(e.to_string()))?;
    if !archive.is_multi() {
        return match archive.object_by_index(0) {
            Ok(Some(_)) => Ok(None),
            Ok(None) => Err(CacheError::Malformed("no object in file".into())),
            Err(e) => Err(CacheError::Malformed(e.to_string())),
        };
    }
    // Each object's bytes are a part of the mapping: where it lies is where they start.
    let objects = archive.objects().map(|object| {
        let range = match &object {
            Ok(object) => {
                let start = object.data().as_ptr() as usize - view.as_ptr() as usize;
                start..start + object.data().len()
            }
            Err(_) => 0..0,
        };
        (object, range)
    });
    pick_object(objects, &hint.id)
}

/// Where the first of `objects` that is the module `id` lies; else the first error, or
/// `NotFound`.
fn pick_object<'d>(
    objects: impl Iterator<Item = (Result<Object<'d>, ObjectError>, Range<usize>)>,
    id: &ObjectId,
) -> CacheResult<Option<Range<u64>>> {
    let mut first_error = None;
    for (object, range) in objects {
        match object {
            Ok(object) if object_matches_id(&object, id) => {
                return Ok(Some(range.start as u64..range.end as u64));
            }
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(match first_error {
        Some(e) => CacheError::Malformed(e.to_string()),
        None => CacheError::NotFound,
    })
}

fn object_matches_id(object: &Object<'_>, id: &ObjectId) -> bool {
    if let Some(debug_id) = id.debug_id {
        let found = object.debug_id();
        // Symbol servers may serve a newer age of the same PDB for an older request.
        return found.uuid() == debug_id.uuid() && found.appendix() >= debug_id.appendix();
    }
    match (&id.code_id, object.code_id()) {
        (Some(wanted), Some(found)) => *wanted == found,
        _ => true,
    }
}

/// The object-file format of downloaded debug files.
pub struct ObjectFile;

impl FileFormat for ObjectFile {
    type Item = Arc<ObjectHandle>;
    type Hint = ObjectHint;
    const KIND: CacheKind = kinds::OBJECTS;

    fn prepare(path: &Path, hint: &ObjectHint) -> CacheResult<Option<Range<u64>>> {
        extract_object(path, hint)
    }

    fn load(data: ByteView<'static>, hint: &ObjectHint) -> CacheResult<Self::Item> {
        // The cacher hands every item a mapping of its file (`ByteView::map_file`).
        ObjectHandle::parse(data, hint.limits, true).map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the name a `sourceMappingURL` ends in is looked for, and never one that
    /// names a directory.
    #[test]
    fn a_source_mapping_url_names_a_file_beside_the_module() {
        let name = source_map_file_name;
        assert_eq!(
            name("https://cdn.example/assets/app.wasm.map?v=3#x"),
            Some("app.wasm.map")
        );
        assert_eq!(name("app.wasm.map"), Some("app.wasm.map"));
        assert_eq!(name("../../etc/passwd"), Some("passwd"));
        assert_eq!(name("https://cdn.example/assets/"), None);
        assert_eq!(name("https://cdn.example/assets/.."), None);
        assert_eq!(name("a\\..\\b.map"), None);
        assert_eq!(name(""), None);
    }

    /// The URL Emscripten's `--source-map-base` wrote, read from the section as browsers
    /// read it; a module without the section has none.
    #[test]
    fn a_wasm_modules_source_mapping_url() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wasm");
        let module = std::fs::read(dir.join("trap.wasm")).unwrap();
        assert_eq!(
            source_mapping_url(&module).as_deref(),
            Some("https://cdn.example.invalid/assets/trap.wasm.map")
        );
        // An empty module, and bytes that are no module.
        assert_eq!(source_mapping_url(b"\0asm\x01\0\0\0"), None);
        assert_eq!(source_mapping_url(b"not wasm"), None);
    }

    /// The VCS of a PDB's SRCSRV stream, as symbolic's session names it, without one.
    #[test]
    fn a_pdbs_source_server_vcs_is_read_from_its_stream() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let vcs = |path: &str| {
            let data = ByteView::open(fixtures.join(path)).unwrap();
            let handle = ObjectHandle::from_bytes(data, ObjectLimits::default()).unwrap();
            handle.meta().features.srcsrv_vcs
        };
        assert_eq!(
            vcs("native-srcsrv-perforce/crash.pdb"),
            Some(SrcSrvVcs::Perforce)
        );
        assert_eq!(vcs("native-srcsrv/crash.pdb"), Some(SrcSrvVcs::Other));
        assert_eq!(vcs("native/pe/crash.pdb"), None);
    }

    #[test]
    fn a_breakpad_module_is_named_by_a_four_field_first_info_line() {
        let module = "MODULE windows x86_64 44E4EC8C2F41492B9369D6B9A059577C2 xul.pdb\n";
        let cases: [(&str, Option<&str>); 6] = [
            (
                "INFO CODE_ID 5F3A1B2C4000 xul.dll\nFILE 0 a.c\n",
                Some("xul.dll"),
            ),
            ("INFO CODE_ID 5F3A1B2C4000 xul.dll\r\n", Some("xul.dll")),
            // Linux dumps record no file: the first INFO line has three fields.
            (
                "INFO CODE_ID D9085A2CF80AB09A\nINFO CODE_ID X y.dll\n",
                None,
            ),
            ("FILE 0 a.c\nINFO CODE_ID 5F3A1B2C4000 xul.dll\n", None),
            ("PUBLIC 10 0 f\n", None),
            ("", None),
        ];
        for (rest, name) in cases {
            let text = format!("{module}{rest}");
            assert_eq!(
                breakpad_module_name(text.as_bytes()).as_deref(),
                name,
                "{text:?}"
            );
        }
    }

    /// The fixture's debug file with zlib-compressed DWARF sections (binutils' objcopy,
    /// which gcc brings).
    fn compressed_debug_file() -> ByteView<'static> {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("crash.debug");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/native/elf/crash.debug");
        let status = std::process::Command::new("objcopy")
            .arg("--compress-debug-sections=zlib")
            .arg(&fixture)
            .arg(&out)
            .status()
            .expect("objcopy (binutils) runs");
        assert!(status.success());
        ByteView::read(std::fs::File::open(&out).unwrap()).unwrap()
    }

    fn functions_with_lines(handle: &ObjectHandle) -> usize {
        let session = handle.object().unwrap().debug_session().unwrap();
        session
            .functions()
            .filter_map(Result::ok)
            .filter(|f| !f.lines.is_empty())
            .count()
    }

    #[test]
    fn compressed_sections_are_read_up_to_the_configured_size() {
        let data = compressed_debug_file();
        let roomy = ObjectHandle::parse(data.clone(), ObjectLimits::default(), false).unwrap();
        assert!(functions_with_lines(&roomy) > 0);
        assert!(roomy.inflated_size(Some(&["debug_info"])) > 0);
        assert!(
            roomy.conversion_size() > roomy.size() + roomy.inflated_size(Some(&["debug_info"]))
        );
        let tight = ObjectLimits {
            max_decompressed_section_size: 64,
            ..ObjectLimits::default()
        };
        // Over the limit the file is malformed before any section is inflated.
        match ObjectHandle::parse(data, tight, false) {
            Err(CacheError::Malformed(msg)) => {
                assert!(
                    msg.contains("object_file_max_decompressed_section_size"),
                    "{msg}"
                )
            }
            other => panic!("{:?}", other.map(|h| h.size())),
        }
    }
}
