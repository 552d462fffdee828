use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::{CacheError, CacheKey, CacheResult};
use crate::config::CacheConfig;

/// A family of cache files and the version of their format. Bumping `version` makes
/// every older file invisible (it lands in another directory).
#[derive(Clone, Copy, Debug)]
pub struct CacheKind {
    pub name: &'static str,
    pub version: u32,
}

/// How to produce and read one kind of cache item.
pub trait CacheItemRequest: Send + Sync + 'static {
    type Item: Clone + Send + Sync + 'static;

    /// How many times its file size an item takes in memory, for the memory budget.
    /// Memory-mapped formats are 1; formats parsed into heap structures are more.
    const MEMORY_FACTOR: u32 = 1;

    /// Writes the item's file contents into `temp_file`, which lives in the directory of
    /// the final file so that publishing it is an atomic rename.
    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>>;

    /// Turns a cache file (memory-mapped) into the item.
    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item>;
}

/// Counters per cache kind, for logs and the metrics endpoint.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub memory_hits: AtomicU64,
    pub disk_hits: AtomicU64,
    pub placeholder_hits: AtomicU64,
    pub computed: AtomicU64,
    pub errors: AtomicU64,
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

/// Memory → disk → compute for one cache kind.
pub struct Cacher<R: CacheItemRequest> {
    kind: CacheKind,
    /// `cache_dir/<name>/<version>`.
    dir: PathBuf,
    config: CacheConfig,
    memory: moka::future::Cache<CacheKey, Entry<R::Item>>,
    stats: Arc<CacheStats>,
    boot_id: Arc<str>,
}

/// Last-use times are file mtimes; touching on every hit would turn reads into writes.
const TOUCH_INTERVAL: Duration = Duration::from_secs(3600);

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
            kind,
            dir: cache_dir.join(kind.name).join(kind.version.to_string()),
            config,
            memory,
            stats: Arc::new(CacheStats::default()),
            boot_id,
        }
    }

    pub fn kind(&self) -> CacheKind {
        self.kind
    }

    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    pub fn path_for(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.relative_path())
    }

    /// Returns the item for `key`, computing it with `request` at most once however many
    /// callers ask concurrently.
    pub async fn get(&self, key: CacheKey, request: R) -> CacheResult<R::Item> {
        let mut computed_here = false;
        let entry = self
            .memory
            .get_with_by_ref(&key, async {
                computed_here = true;
                self.load_or_compute(&key, &request).await
            })
            .await;
        if !computed_here {
            self.stats.memory_hits.fetch_add(1, Ordering::Relaxed);
        }
        entry.value
    }

    async fn load_or_compute(&self, key: &CacheKey, request: &R) -> Entry<R::Item> {
        let path = self.path_for(key);
        if let Some(entry) = self.read_disk(&path, request) {
            return entry;
        }
        self.stats.computed.fetch_add(1, Ordering::Relaxed);
        let result = self.compute(&path, request).await;
        if result.value.is_err() {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// A usable file on disk, or `None` when the entry must be (re)computed.
    fn read_disk(&self, path: &Path, request: &R) -> Option<Entry<R::Item>> {
        let file = std::fs::File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        let age = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .unwrap_or_default();
        let view = ByteView::map_file(file).ok()?;
        if view.starts_with(PLACEHOLDER_MAGIC) {
            let placeholder: Placeholder =
                serde_json::from_slice(&view[PLACEHOLDER_MAGIC.len()..]).ok()?;
            let err = placeholder.to_error();
            let ttl = self.placeholder_ttl(&err)?;
            if age >= ttl {
                return None;
            }
            if matches!(err, CacheError::Malformed(_)) && *placeholder.boot_id != *self.boot_id {
                return None;
            }
            self.stats.placeholder_hits.fetch_add(1, Ordering::Relaxed);
            return Some(Entry {
                value: Err(err),
                weight: 1,
                ttl: Some(ttl - age),
            });
        }
        if age >= TOUCH_INTERVAL {
            touch(path);
        }
        self.stats.disk_hits.fetch_add(1, Ordering::Relaxed);
        let weight = weight_of(view.len()).saturating_mul(R::MEMORY_FACTOR);
        Some(match request.load(view) {
            Ok(item) => Entry {
                value: Ok(item),
                weight,
                ttl: None,
            },
            Err(err) => self.error_entry(err),
        })
    }

    async fn compute(&self, path: &Path, request: &R) -> Entry<R::Item> {
        let dir = path.parent().expect("cache paths have a parent");
        if let Err(err) = std::fs::create_dir_all(dir) {
            return self.error_entry(CacheError::internal(format_args!(
                "cannot create {}: {err}",
                dir.display()
            )));
        }
        let mut temp = match tempfile::Builder::new().prefix(".tmp").tempfile_in(dir) {
            Ok(temp) => temp,
            Err(err) => return self.error_entry(CacheError::internal(err)),
        };
        let outcome = match request.compute(&mut temp).await {
            Ok(()) => self.publish(temp, path, request),
            Err(err) => Err(err),
        };
        match outcome {
            Ok((item, len)) => Entry {
                value: Ok(item),
                weight: weight_of(len).saturating_mul(R::MEMORY_FACTOR),
                ttl: None,
            },
            Err(err) => {
                self.write_placeholder(path, &err);
                self.error_entry(err)
            }
        }
    }

    fn publish(
        &self,
        temp: NamedTempFile,
        path: &Path,
        request: &R,
    ) -> CacheResult<(R::Item, usize)> {
        let file = temp
            .persist(path)
            .map_err(|err| CacheError::internal(err.error))?;
        let view = ByteView::map_file(file).map_err(CacheError::internal)?;
        let len = view.len();
        Ok((request.load(view)?, len))
    }

    fn write_placeholder(&self, path: &Path, err: &CacheError) {
        let Some(placeholder) = Placeholder::from_error(err, &self.boot_id) else {
            // Drop whatever was there, so the next request retries.
            let _ = std::fs::remove_file(path);
            return;
        };
        let write = || -> std::io::Result<()> {
            let dir = path.parent().expect("cache paths have a parent");
            let mut temp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
            temp.write_all(PLACEHOLDER_MAGIC)?;
            serde_json::to_writer(&mut temp, &placeholder)?;
            temp.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(io_err) = write() {
            tracing::warn!(path = %path.display(), error = %io_err, "cannot write cache placeholder");
        }
    }

    fn placeholder_ttl(&self, err: &CacheError) -> Option<Duration> {
        Some(match err {
            CacheError::NotFound => self.config.retry_misses_after,
            CacheError::Malformed(_) | CacheError::Unsupported(_) | CacheError::TooLarge(_) => {
                self.config.retry_malformed_after
            }
            CacheError::PermissionDenied(_)
            | CacheError::Timeout(_)
            | CacheError::DownloadError(_) => self.config.retry_errors_after,
            CacheError::InternalError => return None,
        })
    }

    fn error_entry(&self, err: CacheError) -> Entry<R::Item> {
        let ttl = self.placeholder_ttl(&err).unwrap_or(Duration::ZERO);
        Entry {
            value: Err(err),
            weight: 1,
            ttl: Some(ttl),
        }
    }
}

fn weight_of(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX).max(1)
}

fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Scope;
    use std::sync::atomic::AtomicUsize;

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
                temp_file.write_all(data).map_err(CacheError::internal)?;
                Ok(())
            })
        }

        fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
            if data.starts_with(b"bad") {
                return Err(CacheError::Malformed("bad data".into()));
            }
            Ok(Arc::new(data.to_vec()))
        }
    }

    fn cacher(dir: &Path, config: CacheConfig) -> Cacher<Req> {
        let kind = CacheKind {
            name: "test",
            version: 1,
        };
        Cacher::new(kind, dir, config, 1 << 20, "boot-a".into())
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
        let c2 = cacher(dir.path(), CacheConfig::default());
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
        assert_eq!(c2.stats().disk_hits.load(Ordering::Relaxed), 1);
        // No temp file is left behind.
        let leftovers: Vec<_> = walk(dir.path())
            .into_iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[tokio::test]
    async fn misses_are_placeholders_until_they_expire() {
        let dir = tempfile::tempdir().unwrap();
        let config = CacheConfig {
            retry_misses_after: Duration::from_millis(300),
            ..CacheConfig::default()
        };
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["missing"]);
        let req = |result| Req {
            calls: calls.clone(),
            result,
        };
        let c = cacher(dir.path(), config.clone());
        assert_eq!(
            c.get(key.clone(), req(Err(CacheError::NotFound))).await,
            Err(CacheError::NotFound)
        );
        // New process, placeholder still valid: no recompute.
        let c = cacher(dir.path(), config.clone());
        assert_eq!(
            c.get(key.clone(), req(Ok(b"x"))).await,
            Err(CacheError::NotFound)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(350)).await;
        // Expired in memory and on disk: the sources are asked again.
        assert_eq!(
            c.get(key.clone(), req(Ok(b"x"))).await.unwrap().as_slice(),
            b"x"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn malformed_placeholders_do_not_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let key = CacheKey::new(Scope::Global, &["bad"]);
        let kind = CacheKind {
            name: "test",
            version: 1,
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
