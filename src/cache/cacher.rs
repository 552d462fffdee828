//! `Cacher`: the lifecycle every cache kind shares. A lookup tries memory, then the
//! disk (the current version, then a compatible older one, served while it is
//! recomputed), then the shared cache, and only then computes, once per key however
//! many ask at once. Failures are remembered as placeholder files for a while (negative
//! caching), and a file is loaded before it is published, so one that does not load is
//! never served.

use std::collections::HashSet;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use metrics::Counter;
use serde::{Deserialize, Serialize};
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::CacheConfig;
use super::CacheKey;
use super::key::Scope;
use super::kinds::CacheKind;
use super::shared::SharedCache;
use crate::error::{CacheError, CacheResult, isolate, panicked};
use crate::telemetry::{self, CACHE_COMPUTE_ERRORS, CACHE_LOOKUPS};

/// How to produce and read one kind of cache item.
pub trait CacheItemRequest: Send + Sync + 'static {
    type Item: Clone + Send + Sync + 'static;

    /// How many times its file size an item takes in memory, for the memory budget.
    /// Memory-mapped formats are 1; formats parsed into heap structures are more.
    const MEMORY_FACTOR: u32 = 1;

    /// How long an item stays true to its source; `None`: for as long as it is used.
    /// An older file is computed again (an index that the source keeps appending to).
    const MAX_AGE: Option<Duration> = None;

    /// Writes the item's file contents into `temp_file`, which lives in the directory of
    /// the final file so that publishing it is an atomic rename.
    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>>;

    /// Turns a cache file (memory-mapped) into the item.
    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item>;
}

/// One kind's counters, registered once: a lookup then only adds to an atomic. Every
/// label is registered up front, so a layer that never answered shows as 0.
struct KindMetrics {
    memory: Counter,
    disk: Counter,
    /// Files of a compatible older version served while the current one is recomputed.
    old_version: Counter,
    /// Remembered misses and failures.
    placeholder: Counter,
    shared: Counter,
    /// Computations, background recomputations of old versions included.
    computed: Counter,
    compute_errors: Counter,
}

impl KindMetrics {
    fn new(kind: &'static str) -> Self {
        let lookups = |layer: &'static str| metrics::counter!(CACHE_LOOKUPS, "kind" => kind, "layer" => layer);
        KindMetrics {
            memory: lookups("memory"),
            disk: lookups("disk"),
            old_version: lookups("old_version"),
            placeholder: lookups("placeholder"),
            shared: lookups("shared"),
            computed: lookups("computed"),
            compute_errors: metrics::counter!(CACHE_COMPUTE_ERRORS, "kind" => kind),
        }
    }
}

#[derive(Clone)]
struct Entry<T> {
    value: CacheResult<T>,
    weight: u32,
    /// How long the memory layer may keep this entry; `None` leaves it to the LRU.
    ttl: Option<Duration>,
}

struct EntryExpiry;

impl<T> moka::Expiry<CacheKey, Entry<T>> for EntryExpiry {
    fn expire_after_create(
        &self,
        _key: &CacheKey,
        value: &Entry<T>,
        _created_at: Instant,
    ) -> Option<Duration> {
        value.ttl
    }

    fn expire_after_update(
        &self,
        _key: &CacheKey,
        value: &Entry<T>,
        _updated_at: Instant,
        _current: Option<Duration>,
    ) -> Option<Duration> {
        value.ttl
    }
}

/// Placeholders start with a NUL byte, which no object file format or derived cache
/// format we write starts with, so they cannot be mistaken for content.
const PLACEHOLDER_MAGIC: &[u8] = b"\0omnisym-placeholder\0";

#[derive(Serialize, Deserialize)]
struct Placeholder {
    kind: String,
    #[serde(default)]
    detail: String,
    #[serde(default)]
    timeout_ms: u64,
    /// Malformed placeholders hold only until restart: a new binary may parse the file.
    #[serde(default)]
    boot_id: String,
}

impl Placeholder {
    fn from_error(err: &CacheError, boot_id: &str) -> Option<Self> {
        let (kind, detail, timeout_ms) = match err {
            CacheError::NotFound => ("notfound", String::new(), 0),
            CacheError::PermissionDenied(d) => ("permissiondenied", d.clone(), 0),
            CacheError::Timeout(t) => ("timeout", String::new(), t.as_millis() as u64),
            CacheError::DownloadError(d) => ("downloaderror", d.clone(), 0),
            CacheError::TooLarge(d) => ("toolarge", d.clone(), 0),
            CacheError::Malformed(d) => ("malformed", d.clone(), 0),
            CacheError::Unsupported(d) => ("unsupported", d.clone(), 0),
            // An internal error says nothing about the file; the next request retries.
            CacheError::InternalError => return None,
        };
        Some(Placeholder {
            kind: kind.into(),
            detail,
            timeout_ms,
            boot_id: boot_id.into(),
        })
    }

    fn to_error(&self) -> CacheError {
        match self.kind.as_str() {
            "notfound" => CacheError::NotFound,
            "permissiondenied" => CacheError::PermissionDenied(self.detail.clone()),
            "timeout" => CacheError::Timeout(Duration::from_millis(self.timeout_ms)),
            "downloaderror" => CacheError::DownloadError(self.detail.clone()),
            "toolarge" => CacheError::TooLarge(self.detail.clone()),
            "malformed" => CacheError::Malformed(self.detail.clone()),
            "unsupported" => CacheError::Unsupported(self.detail.clone()),
            _ => CacheError::InternalError,
        }
    }
}

/// The error a placeholder file remembers and the boot id of the process that wrote
/// it; `None` when `data` is not a placeholder (or an unreadable one).
pub(super) fn read_placeholder(data: &[u8]) -> Option<(CacheError, String)> {
    let json = data.strip_prefix(PLACEHOLDER_MAGIC)?;
    let placeholder: Placeholder = serde_json::from_slice(json).ok()?;
    Some((placeholder.to_error(), placeholder.boot_id))
}

/// The file contents remembering `err`; `None` for errors that are never stored.
pub(super) fn placeholder_bytes(err: &CacheError, boot_id: &str) -> Option<Vec<u8>> {
    let placeholder = Placeholder::from_error(err, boot_id)?;
    let mut bytes = PLACEHOLDER_MAGIC.to_vec();
    serde_json::to_writer(&mut bytes, &placeholder).ok()?;
    Some(bytes)
}

pub(super) fn is_placeholder(data: &[u8]) -> bool {
    data.starts_with(PLACEHOLDER_MAGIC)
}

/// How long a placeholder for `err` holds; `None` for errors that are never stored.
/// Misses of the global scope hold for `retry_misses_after_public`: upstream treats a
/// globally scoped entry as one from a public source, which rarely gains files later.
pub(super) fn placeholder_ttl(
    config: &CacheConfig,
    err: &CacheError,
    scope: &Scope,
) -> Option<Duration> {
    Some(match err {
        CacheError::NotFound if *scope == Scope::Global => config.retry_misses_after_public,
        CacheError::NotFound => config.retry_misses_after,
        CacheError::Malformed(_) | CacheError::Unsupported(_) | CacheError::TooLarge(_) => {
            config.retry_malformed_after
        }
        CacheError::PermissionDenied(_) | CacheError::Timeout(_) | CacheError::DownloadError(_) => {
            config.retry_errors_after
        }
        CacheError::InternalError => return None,
    })
}

/// Memory → disk (current, then compatible versions) → shared cache → compute, for one
/// cache kind. Cheap to clone: clones share everything.
pub struct Cacher<R: CacheItemRequest> {
    inner: Arc<Inner<R>>,
}

impl<R: CacheItemRequest> Clone for Cacher<R> {
    fn clone(&self) -> Self {
        Cacher {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<R: CacheItemRequest> {
    kind: CacheKind,
    cache_dir: PathBuf,
    config: CacheConfig,
    memory: moka::future::Cache<CacheKey, Entry<R::Item>>,
    metrics: KindMetrics,
    boot_id: Arc<str>,
    shared: Option<Arc<SharedCache>>,
    /// Keys being recomputed from an old version, so each is recomputed once.
    refreshes: Mutex<HashSet<CacheKey>>,
}

/// Last-use times are file mtimes; touching on every hit would turn reads into writes.
pub(super) const TOUCH_INTERVAL: Duration = Duration::from_secs(3600);

/// Background recomputations of old-version files running at once per kind; more wait
/// for a later request (the old file keeps being served meanwhile).
const MAX_REFRESHES: usize = 16;

impl<R: CacheItemRequest> Cacher<R> {
    pub fn new(
        kind: CacheKind,
        cache_dir: &Path,
        config: CacheConfig,
        memory_capacity: u64,
        boot_id: Arc<str>,
    ) -> Self {
        let memory = moka::future::Cache::builder()
            .max_capacity(memory_capacity)
            .weigher(|_key: &CacheKey, entry: &Entry<R::Item>| entry.weight)
            .expire_after(EntryExpiry)
            .build();
        Cacher {
            inner: Arc::new(Inner {
                kind,
                cache_dir: cache_dir.to_owned(),
                config,
                memory,
                metrics: KindMetrics::new(kind.name),
                boot_id,
                shared: None,
                refreshes: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// Consults and fills `shared` (for derived caches, which are worth sharing).
    pub fn with_shared(mut self, shared: Option<Arc<SharedCache>>) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("configured before first use")
            .shared = shared;
        self
    }

    pub fn kind(&self) -> CacheKind {
        self.inner.kind
    }

    /// Where the current version of `key` lives.
    pub fn path_for(&self, key: &CacheKey) -> PathBuf {
        self.version_path(self.inner.kind.version, key)
    }

    fn version_path(&self, version: u32, key: &CacheKey) -> PathBuf {
        self.inner
            .cache_dir
            .join(self.inner.kind.name)
            .join(version.to_string())
            .join(key.relative_path())
    }

    /// The same file's name in the shared cache: `<kind>/<version>/<scope>/<digest>`.
    fn shared_path(&self, key: &CacheKey) -> String {
        let kind = self.inner.kind;
        let rel = key.relative_path();
        format!("{}/{}/{}", kind.name, kind.version, rel.to_string_lossy())
    }

    /// Returns the item for `key`, computing it with `request` at most once however many
    /// callers ask concurrently.
    pub async fn get(&self, key: CacheKey, request: R) -> CacheResult<R::Item> {
        let started = Instant::now();
        // A warm entry without building (and boxing) the load future, which is large
        // and would be most of a memory hit's cost.
        if let Some(value) = self.in_memory(&key, started).await {
            return value;
        }
        let mut computed_here = false;
        // Boxed: callers nest `get` futures deeply (stackwalk → CFI → objects), and an
        // unboxed chain of this size overflows the compiler's layout depth limit.
        let load: BoxFuture<'_, Entry<R::Item>> = Box::pin(self.load_or_compute(&key, request));
        let entry = self
            .inner
            .memory
            .get_with_by_ref(&key, async {
                computed_here = true;
                load.await
            })
            .await;
        if !computed_here {
            self.inner.metrics.memory.increment(1);
        }
        telemetry::note_cache_lookup(self.inner.kind.name, started.elapsed());
        entry.value
    }

    /// The entry for `key` if memory holds it, counted as a memory hit.
    async fn in_memory(&self, key: &CacheKey, started: Instant) -> Option<CacheResult<R::Item>> {
        let entry = self.inner.memory.get(key).await?;
        self.inner.metrics.memory.increment(1);
        telemetry::note_cache_lookup(self.inner.kind.name, started.elapsed());
        Some(entry.value)
    }

    /// The item for `key` if it exists in memory, as a current file on disk or in the
    /// shared cache, without computing anything: lets a caller answer some other way
    /// while it is computed. (Files of compatible old versions count as absent: serving
    /// one recomputes it, which is `get`'s to start.)
    pub async fn get_cached(&self, key: &CacheKey, request: &R) -> Option<CacheResult<R::Item>> {
        let started = Instant::now();
        if let Some(value) = self.in_memory(key, started).await {
            return Some(value);
        }
        let path = self.path_for(key);
        let entry = match self.read_disk(&path, key, request, true) {
            Some(entry) => entry,
            None => Box::pin(self.read_shared(key, &path, request)).await?,
        };
        let value = entry.value.clone();
        self.inner.memory.insert(key.clone(), entry).await;
        // A miss is counted by the `get` that computes it.
        telemetry::note_cache_lookup(self.inner.kind.name, started.elapsed());
        Some(value)
    }

    async fn load_or_compute(&self, key: &CacheKey, request: R) -> Entry<R::Item> {
        let path = self.path_for(key);
        if let Some(entry) = self.read_disk(&path, key, &request, true) {
            return entry;
        }
        for &version in self.inner.kind.compatible {
            let old = self.version_path(version, key);
            if let Some(entry) = self.read_disk(&old, key, &request, false) {
                self.inner.metrics.old_version.increment(1);
                self.spawn_refresh(key.clone(), request);
                return entry;
            }
        }
        if let Some(entry) = Box::pin(self.read_shared(key, &path, &request)).await {
            return entry;
        }
        self.compute(key, &path, &request).await
    }

    /// A usable file on disk, or `None` when the entry must be looked up further. Old
    /// versions (`current == false`) count only when they hold an item: their
    /// placeholders were written under rules that may have changed.
    fn read_disk(
        &self,
        path: &Path,
        key: &CacheKey,
        request: &R,
        current: bool,
    ) -> Option<Entry<R::Item>> {
        let file = std::fs::File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        let age = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .unwrap_or_default();
        let view = ByteView::map_file(file).ok()?;
        if is_placeholder(&view) {
            if !current {
                return None;
            }
            let (err, boot_id) = read_placeholder(&view)?;
            let ttl = placeholder_ttl(&self.inner.config, &err, key.scope())?;
            if age >= ttl {
                return None;
            }
            if matches!(err, CacheError::Malformed(_)) && *boot_id != *self.inner.boot_id {
                return None;
            }
            self.inner.metrics.placeholder.increment(1);
            return Some(Entry {
                weight: error_weight(&err),
                value: Err(err),
                ttl: Some(ttl - age),
            });
        }
        if let Some(max_age) = R::MAX_AGE
            && age >= max_age
        {
            return None;
        }
        let weight = item_weight(view.len(), R::MEMORY_FACTOR);
        let item = match isolate(self.inner.kind.name, || request.load(view.clone())) {
            Ok(item) => item,
            // Files are published whole, so one that does not load was damaged outside
            // omnisym (or is an old version after all): compute it again.
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "unreadable cache file");
                return None;
            }
        };
        release_loaded_pages(&view);
        // An item with a maximum age is judged by its mtime: touching would keep it forever.
        if age >= TOUCH_INTERVAL && R::MAX_AGE.is_none() {
            touch(path);
            // The shared copy ages too (a store may expire unused objects): refresh it.
            if current && let Some(shared) = &self.inner.shared {
                shared.store(self.shared_path(key), view);
            }
        }
        if current {
            self.inner.metrics.disk.increment(1);
        }
        Some(Entry {
            value: Ok(item),
            weight,
            ttl: R::MAX_AGE.map(|max_age| max_age - age),
        })
    }

    /// Another replica's result, published locally; `None` when there is none usable.
    /// Callers box it: the S3 and GCS clients' futures make it some 16 KiB, and held
    /// inline it would make every lookup's future (and each request's, which holds them)
    /// that large, copied whenever one is moved, warm lookups that never get here
    /// included.
    async fn read_shared(
        &self,
        key: &CacheKey,
        path: &Path,
        request: &R,
    ) -> Option<Entry<R::Item>> {
        let shared = self.inner.shared.as_ref()?;
        let mut temp = self.temp_file(path).ok()?;
        if !shared.fetch(&self.shared_path(key), &mut temp).await {
            return None;
        }
        match self.publish(temp, path, request) {
            Ok((item, view)) => {
                self.inner.metrics.shared.increment(1);
                Some(Entry {
                    value: Ok(item),
                    weight: item_weight(view.len(), R::MEMORY_FACTOR),
                    ttl: R::MAX_AGE,
                })
            }
            Err(err) => {
                tracing::warn!(kind = self.inner.kind.name, %key, error = %err, "unusable shared cache file");
                None
            }
        }
    }

    /// Recomputes the current version of an entry served from an old version, without
    /// making anyone wait for it.
    fn spawn_refresh(&self, key: CacheKey, request: R) {
        {
            let mut refreshes = self.inner.refreshes.lock().unwrap();
            if refreshes.len() >= MAX_REFRESHES || !refreshes.insert(key.clone()) {
                return;
            }
        }
        let this = self.clone();
        tokio::spawn(async move {
            let path = this.path_for(&key);
            let entry = this.compute(&key, &path, &request).await;
            this.inner.memory.insert(key.clone(), entry).await;
            this.inner.refreshes.lock().unwrap().remove(&key);
        });
    }

    fn temp_file(&self, path: &Path) -> CacheResult<NamedTempFile> {
        let dir = path.parent().expect("cache paths have a parent");
        std::fs::create_dir_all(dir).map_err(|err| {
            CacheError::internal(format_args!("cannot create {}: {err}", dir.display()))
        })?;
        tempfile::Builder::new()
            .prefix(".tmp")
            .tempfile_in(dir)
            .map_err(CacheError::internal)
    }

    async fn compute(&self, key: &CacheKey, path: &Path, request: &R) -> Entry<R::Item> {
        self.inner.metrics.computed.increment(1);
        telemetry::note_cache_compute(self.inner.kind.name);
        let outcome = match self.temp_file(path) {
            // A panic while computing (a parser of downloaded bytes, on this task) costs
            // this one item, like any malformed input, and is remembered the same way.
            Ok(mut temp) => match AssertUnwindSafe(request.compute(&mut temp))
                .catch_unwind()
                .await
                .unwrap_or_else(|payload| Err(panicked(self.inner.kind.name, payload)))
            {
                Ok(()) => self.publish(temp, path, request),
                Err(err) => Err(err),
            },
            Err(err) => Err(err),
        };
        match outcome {
            Ok((item, view)) => {
                self.remove_old_versions(key);
                let weight = item_weight(view.len(), R::MEMORY_FACTOR);
                if let Some(shared) = &self.inner.shared {
                    shared.store(self.shared_path(key), view);
                }
                Entry {
                    value: Ok(item),
                    weight,
                    ttl: R::MAX_AGE,
                }
            }
            Err(err) => {
                self.inner.metrics.compute_errors.increment(1);
                self.write_placeholder(path, &err);
                self.error_entry(err, key.scope())
            }
        }
    }

    /// The current version replaces older ones; keeping them would only use disk.
    fn remove_old_versions(&self, key: &CacheKey) {
        for &version in self.inner.kind.compatible {
            let _ = std::fs::remove_file(self.version_path(version, key));
        }
    }

    fn publish(
        &self,
        temp: NamedTempFile,
        path: &Path,
        request: &R,
    ) -> CacheResult<(R::Item, ByteView<'static>)> {
        // Loaded before it takes its place: a file that does not load, or whose parser
        // panics, would otherwise be served (and fail) to every request until it expires.
        // The mapping stays valid across the rename.
        let view = ByteView::map_file_ref(temp.as_file()).map_err(CacheError::internal)?;
        let item = isolate(self.inner.kind.name, || request.load(view.clone()))?;
        release_loaded_pages(&view);
        temp.persist(path)
            .map_err(|err| CacheError::internal(err.error))?;
        Ok((item, view))
    }

    fn write_placeholder(&self, path: &Path, err: &CacheError) {
        let Some(placeholder) = placeholder_bytes(err, &self.inner.boot_id) else {
            // Drop whatever was there, so the next request retries.
            let _ = std::fs::remove_file(path);
            return;
        };
        let write = || -> std::io::Result<()> {
            let dir = path.parent().expect("cache paths have a parent");
            std::fs::create_dir_all(dir)?;
            let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
            temp.write_all(&placeholder)?;
            temp.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(io_err) = write() {
            tracing::warn!(path = %path.display(), error = %io_err, "cannot write cache placeholder");
        }
    }

    fn error_entry(&self, err: CacheError, scope: &Scope) -> Entry<R::Item> {
        let ttl = placeholder_ttl(&self.inner.config, &err, scope).unwrap_or(Duration::ZERO);
        Entry {
            weight: error_weight(&err),
            value: Err(err),
            ttl: Some(ttl),
        }
    }
}

/// Lets go of the pages loading an item read. Loading reads what requests mostly do not
/// (headers, or a CFI cache's whole text to index it), and requests fault in their own;
/// kept, a large crash's caches held their whole files in the process's RSS.
fn release_loaded_pages(view: &ByteView<'static>) {
    // SAFETY: every view the cacher loads is its own read-only mapping of a cache file
    // (`ByteView::map_file`), and cache files are replaced by renames, never written.
    unsafe { super::budget::release_mapped_pages(view) }
}

/// What an entry costs in memory besides its file: the memory layer's node, the key
/// (digest and scope), the entry and the parsed item's own allocations. An estimate,
/// but never nothing: remembered errors have no file, and weighed 1 the memory layer
/// would keep millions of them (each hundreds of bytes of heap) until their
/// placeholders expire, an hour for a miss; a stream of cold requests for unknown
/// files grew the heap without bound (scripts/soak.sh).
const ENTRY_OVERHEAD: u32 = 512;

/// An item's weight: its file's bytes times the kind's memory factor, plus the
/// entry's own cost.
fn item_weight(len: usize, memory_factor: u32) -> u32 {
    u32::try_from(len)
        .unwrap_or(u32::MAX)
        .saturating_mul(memory_factor)
        .saturating_add(ENTRY_OVERHEAD)
}

/// A remembered error's weight: the entry's cost and the error's text.
fn error_weight(err: &CacheError) -> u32 {
    let text = u32::try_from(err.to_string().len()).unwrap_or(u32::MAX);
    ENTRY_OVERHEAD.saturating_add(text)
}

fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Family;
    use crate::cache::Scope;
    use crate::telemetry::{Recorded, recorded};
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Req {
        calls: Arc<AtomicUsize>,
        result: CacheResult<&'static [u8]>,
    }

    impl CacheItemRequest for Req {
        type Item = Arc<Vec<u8>>;

        fn compute<'a>(
            &'a self,
            temp_file: &'a mut NamedTempFile,
        ) -> BoxFuture<'a, CacheResult<()>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                let data = self.result.clone()?;
                if data == b"panic in compute" {
                    panic!("a parser of downloaded bytes panicked");
                }
                temp_file.write_all(data).map_err(CacheError::internal)?;
                Ok(())
            })
        }

        fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
            if data.starts_with(b"bad") {
                return Err(CacheError::Malformed("bad data".into()));
            }
            if data.starts_with(b"panic on load") {
                let empty: &[u8] = &[];
                return Ok(Arc::new(vec![empty[data.len()]]));
            }
            Ok(Arc::new(data.to_vec()))
        }
    }

    /// Lookups of the test kind that `layer` answered.
    fn lookups(metrics: &Recorded, layer: &str) -> u64 {
        metrics.counter(CACHE_LOOKUPS, &[("kind", "test"), ("layer", layer)])
    }

    fn cacher(dir: &Path, config: CacheConfig) -> Cacher<Req> {
        cacher_with_capacity(dir, config, 1 << 20)
    }

    fn cacher_with_capacity(dir: &Path, config: CacheConfig, memory: u64) -> Cacher<Req> {
        let kind = CacheKind {
            name: "test",
            version: 1,
            compatible: &[],
            family: Family::Derived,
            memory_share: 1,
        };
        Cacher::new(kind, dir, config, memory, "boot-a".into())
    }

    #[tokio::test]
    async fn computes_once_for_concurrent_callers_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let c = cacher(dir.path(), CacheConfig::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["a"]);
        let futs = (0..10).map(|_| {
            c.get(
                key.clone(),
                Req {
                    calls: calls.clone(),
                    result: Ok(b"hello"),
                },
            )
        });
        for r in futures::future::join_all(futs).await {
            assert_eq!(r.unwrap().as_slice(), b"hello");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(std::fs::read(c.path_for(&key)).unwrap(), b"hello");

        // A fresh process (new memory layer) is served from disk.
        let (c2, metrics) = recorded(|| cacher(dir.path(), CacheConfig::default()));
        let r = c2
            .get(
                key,
                Req {
                    calls: calls.clone(),
                    result: Ok(b"other"),
                },
            )
            .await;
        assert_eq!(r.unwrap().as_slice(), b"hello");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(lookups(&metrics, "disk"), 1);
        assert_eq!(lookups(&metrics, "computed"), 0);
        // No temp file is left behind.
        let leftovers: Vec<_> = walk(dir.path())
            .into_iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[tokio::test]
    async fn get_cached_never_computes() {
        let dir = tempfile::tempdir().unwrap();
        let c = cacher(dir.path(), CacheConfig::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["peek"]);
        let req = |result| Req {
            calls: calls.clone(),
            result,
        };
        assert!(c.get_cached(&key, &req(Ok(b"x"))).await.is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        c.get(key.clone(), req(Ok(b"built"))).await.unwrap();
        let hit = c.get_cached(&key, &req(Ok(b"x"))).await.unwrap();
        assert_eq!(hit.unwrap().as_slice(), b"built");
        // A new process finds the file on disk.
        let c2 = cacher(dir.path(), CacheConfig::default());
        let hit = c2.get_cached(&key, &req(Ok(b"x"))).await.unwrap();
        assert_eq!(hit.unwrap().as_slice(), b"built");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// How long the placeholders of the tests below live: long enough that the checks
    /// made while one is fresh finish in time on a loaded two-core machine.
    const PLACEHOLDER_TTL: Duration = Duration::from_secs(2);

    /// `err` is remembered, across a restart too, while its placeholder is fresh; once it
    /// has expired (`config` gives it [`PLACEHOLDER_TTL`]) the next request computes again.
    async fn assert_remembered_until_expiry(config: CacheConfig, err: CacheError) {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["failing"]);
        let c = cacher(dir.path(), config.clone());
        let written = std::time::Instant::now();
        assert_eq!(
            c.get(key.clone(), req(&calls, Err(err.clone()))).await,
            Err(err.clone())
        );
        // New process, placeholder still valid: no recompute.
        let c = cacher(dir.path(), config.clone());
        assert_eq!(c.get(key.clone(), req(&calls, Ok(b"x"))).await, Err(err));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(
            written.elapsed() < PLACEHOLDER_TTL,
            "the machine is too slow for this test's placeholder lifetime"
        );
        // Expired in memory and on disk: the sources are asked again.
        tokio::time::sleep(PLACEHOLDER_TTL.saturating_sub(written.elapsed())).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = c.get(key.clone(), req(&calls, Ok(b"x"))).await;
            if answer.as_ref().is_ok_and(|hit| hit.as_slice() == b"x") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never expired: {answer:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn misses_are_placeholders_until_they_expire() {
        // The helper's key is global: its misses follow the public lifetime.
        let config = CacheConfig {
            retry_misses_after_public: PLACEHOLDER_TTL,
            ..CacheConfig::default()
        };
        assert_remembered_until_expiry(config, CacheError::NotFound).await;
    }

    #[test]
    fn scoped_misses_follow_retry_misses_after_and_global_ones_the_public_lifetime() {
        let config = CacheConfig {
            retry_misses_after: Duration::from_secs(60),
            retry_misses_after_public: Duration::from_secs(7200),
            ..CacheConfig::default()
        };
        let miss = CacheError::NotFound;
        let ttl = |scope| placeholder_ttl(&config, &miss, &scope);
        assert_eq!(ttl(Scope::new("project-1")), Some(Duration::from_secs(60)));
        assert_eq!(ttl(Scope::Global), Some(Duration::from_secs(7200)));
        let malformed = CacheError::Malformed("x".into());
        assert_eq!(
            placeholder_ttl(&config, &malformed, &Scope::Global),
            Some(config.retry_malformed_after)
        );
    }

    #[tokio::test]
    async fn transient_errors_are_remembered_briefly_not_for_the_miss_lifetime() {
        let config = CacheConfig {
            retry_misses_after: Duration::from_secs(3600),
            retry_errors_after: PLACEHOLDER_TTL,
            ..CacheConfig::default()
        };
        let err = CacheError::DownloadError("503".into());
        assert_remembered_until_expiry(config, err).await;
    }

    #[tokio::test]
    async fn malformed_placeholders_do_not_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["bad"]);
        let kind = CacheKind {
            name: "test",
            version: 1,
            compatible: &[],
            family: Family::Derived,
            memory_share: 1,
        };
        let c: Cacher<Req> = Cacher::new(
            kind,
            dir.path(),
            CacheConfig::default(),
            1 << 20,
            "a".into(),
        );
        let bad = Req {
            calls: calls.clone(),
            result: Ok(b"bad file"),
        };
        assert!(matches!(
            c.get(key.clone(), bad).await,
            Err(CacheError::Malformed(_))
        ));
        let same_boot: Cacher<Req> = Cacher::new(
            kind,
            dir.path(),
            CacheConfig::default(),
            1 << 20,
            "a".into(),
        );
        let good = || Req {
            calls: calls.clone(),
            result: Ok(b"good"),
        };
        assert!(same_boot.get(key.clone(), good()).await.is_err());
        let new_boot: Cacher<Req> = Cacher::new(
            kind,
            dir.path(),
            CacheConfig::default(),
            1 << 20,
            "b".into(),
        );
        assert_eq!(new_boot.get(key, good()).await.unwrap().as_slice(), b"good");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    fn req(calls: &Arc<AtomicUsize>, result: CacheResult<&'static [u8]>) -> Req {
        Req {
            calls: calls.clone(),
            result,
        }
    }

    fn versioned(dir: &Path, version: u32, compatible: &'static [u32]) -> Cacher<Req> {
        let kind = CacheKind {
            name: "test",
            version,
            compatible,
            family: Family::Derived,
            memory_share: 1,
        };
        Cacher::new(kind, dir, CacheConfig::default(), 1 << 20, "boot".into())
    }

    #[tokio::test]
    async fn compatible_old_version_is_served_then_recomputed_in_background() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["v"]);
        let v1 = versioned(dir.path(), 1, &[]);
        assert_eq!(
            v1.get(key.clone(), req(&calls, Ok(b"old")))
                .await
                .unwrap()
                .as_slice(),
            b"old"
        );
        let old_path = v1.path_for(&key);

        let (v2, metrics) = recorded(|| versioned(dir.path(), 2, &[1]));
        // Served at once from the old file, although computing would give "new".
        let got = v2.get(key.clone(), req(&calls, Ok(b"new"))).await.unwrap();
        assert_eq!(got.as_slice(), b"old");
        assert_eq!(lookups(&metrics, "old_version"), 1);
        for _ in 0..250 {
            if v2.inner.refreshes.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(std::fs::read(v2.path_for(&key)).unwrap(), b"new");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(!old_path.exists(), "the old version is replaced");
        // The memory layer now holds the recomputed item.
        let got = v2.get(key, req(&calls, Ok(b"other"))).await.unwrap();
        assert_eq!(got.as_slice(), b"new");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn incompatible_old_version_counts_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["v"]);
        let v1 = versioned(dir.path(), 1, &[]);
        v1.get(key.clone(), req(&calls, Ok(b"old"))).await.unwrap();
        let (v3, metrics) = recorded(|| versioned(dir.path(), 3, &[2]));
        let got = v3.get(key, req(&calls, Ok(b"new"))).await.unwrap();
        assert_eq!(got.as_slice(), b"new");
        assert_eq!(lookups(&metrics, "old_version"), 0);
        assert_eq!(lookups(&metrics, "computed"), 1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn reads_touch_the_mtime_at_most_hourly() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let set_age = |path: &Path, age: Duration| {
            let file = std::fs::File::options().append(true).open(path).unwrap();
            file.set_modified(SystemTime::now() - age).unwrap();
        };
        let age_of = |path: &Path| {
            SystemTime::now()
                .duration_since(std::fs::metadata(path).unwrap().modified().unwrap())
                .unwrap()
        };
        for (age, touched) in [
            (Duration::from_secs(7200), true),
            (Duration::from_secs(1800), false),
        ] {
            let key = CacheKey::new(Scope::Global, &[&age.as_secs().to_string()]);
            let c = cacher(dir.path(), CacheConfig::default());
            c.get(key.clone(), req(&calls, Ok(b"x"))).await.unwrap();
            set_age(&c.path_for(&key), age);
            // A new process reads it from disk.
            let c = cacher(dir.path(), CacheConfig::default());
            c.get(key.clone(), req(&calls, Ok(b"x"))).await.unwrap();
            let now_age = age_of(&c.path_for(&key));
            assert_eq!(
                now_age < Duration::from_secs(60),
                touched,
                "{age:?} -> {now_age:?}"
            );
        }
    }

    #[tokio::test]
    async fn memory_layer_is_bounded_by_file_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let one = u64::from(item_weight(12, 1));
        let c = cacher_with_capacity(dir.path(), CacheConfig::default(), one + 4);
        for name in ["a", "b", "c"] {
            let key = CacheKey::new(Scope::Global, &[name]);
            c.get(key, req(&calls, Ok(b"twelve bytes"))).await.unwrap();
        }
        c.inner.memory.run_pending_tasks().await;
        assert_eq!(c.inner.memory.entry_count(), 1);
        assert_eq!(c.inner.memory.weighted_size(), one);
        // What fell out of memory is still on disk.
        let key = CacheKey::new(Scope::Global, &["a"]);
        c.get(key, req(&calls, Ok(b"other"))).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn remembered_errors_count_against_the_memory_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let capacity = 10 * u64::from(ENTRY_OVERHEAD);
        let c = cacher_with_capacity(dir.path(), CacheConfig::default(), capacity);
        for n in 0..200 {
            let key = CacheKey::new(Scope::Global, &[&format!("missing-{n}")]);
            let missing = c.get(key, req(&calls, Err(CacheError::NotFound))).await;
            assert_eq!(missing, Err(CacheError::NotFound));
        }
        c.inner.memory.run_pending_tasks().await;
        assert!(
            c.inner.memory.entry_count() <= 10,
            "{} misses kept in a memory layer with room for 10",
            c.inner.memory.entry_count()
        );
        assert!(c.inner.memory.weighted_size() <= capacity);
    }

    #[tokio::test]
    async fn a_damaged_file_is_recomputed_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["damaged"]);
        let c = cacher(dir.path(), CacheConfig::default());
        std::fs::create_dir_all(c.path_for(&key).parent().unwrap()).unwrap();
        std::fs::write(c.path_for(&key), b"bad: truncated").unwrap();
        let got = c.get(key, req(&calls, Ok(b"good"))).await.unwrap();
        assert_eq!(got.as_slice(), b"good");
    }

    #[tokio::test]
    async fn scopes_do_not_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = cacher(dir.path(), CacheConfig::default());
        let a = CacheKey::new(Scope::new("a"), &["same"]);
        let b = CacheKey::new(Scope::new("b"), &["same"]);
        c.get(a.clone(), req(&calls, Ok(b"from a"))).await.unwrap();
        let got = c.get(b.clone(), req(&calls, Ok(b"from b"))).await.unwrap();
        assert_eq!(got.as_slice(), b"from b");
        assert_ne!(c.path_for(&a).parent(), c.path_for(&b).parent());
        // Also from disk, in a fresh process.
        let c = cacher(dir.path(), CacheConfig::default());
        assert_eq!(
            c.get(b, req(&calls, Ok(b"?"))).await.unwrap().as_slice(),
            b"from b"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    /// A file whose parser panics never takes its place on disk: the cache remembers
    /// `malformed` (a placeholder) instead, and nothing panics on later requests.
    #[tokio::test]
    async fn a_file_that_panics_on_load_is_never_published() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["hostile"]);
        let c = cacher(dir.path(), CacheConfig::default());
        let first = c.get(key.clone(), req(&calls, Ok(b"panic on load"))).await;
        assert!(matches!(first, Err(CacheError::Malformed(_))), "{first:?}");
        let on_disk = std::fs::read(c.path_for(&key)).unwrap();
        assert!(is_placeholder(&on_disk), "{on_disk:?}");
        // A new process reads the placeholder, not the hostile file.
        let c = cacher(dir.path(), CacheConfig::default());
        let again = c.get(key, req(&calls, Ok(b"panic on load"))).await;
        assert!(matches!(again, Err(CacheError::Malformed(_))), "{again:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_panic_while_computing_is_malformed_and_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["panics"]);
        let c = cacher(dir.path(), CacheConfig::default());
        let first = c
            .get(key.clone(), req(&calls, Ok(b"panic in compute")))
            .await;
        assert!(matches!(first, Err(CacheError::Malformed(_))), "{first:?}");
        assert!(is_placeholder(&std::fs::read(c.path_for(&key)).unwrap()));
        let c = cacher(dir.path(), CacheConfig::default());
        assert!(c.get(key, req(&calls, Ok(b"x"))).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// A file that an older omnisym published, and that panics on load, is computed
    /// again rather than served.
    #[tokio::test]
    async fn a_published_file_that_panics_on_load_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["old"]);
        let c = cacher(dir.path(), CacheConfig::default());
        let path = c.path_for(&key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"panic on load").unwrap();
        let got = c.get(key, req(&calls, Ok(b"fresh"))).await.unwrap();
        assert_eq!(got.as_slice(), b"fresh");
        assert_eq!(std::fs::read(&path).unwrap(), b"fresh");
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
