//! Caches computed from one or more parent files: a SymCache from a debug file, a
//! SourcemapCache from a minified script and its source map, a ProGuard cache from a
//! mapping. A format says what it is built from and how; `DerivedCache` gives it the
//! lifecycle of every cache kind (memory, disk, versions, shared cache, one computation
//! per key, negative caching), keyed by its parents' keys.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;

use super::budget::ConversionBudget;
use super::{CacheItemRequest, CacheKey, CacheKind, Cacher, Caches};
use crate::error::{CacheError, CacheResult, isolate_blocking};

/// One kind of derived cache.
pub trait DerivedFormat: Send + Sync + 'static {
    /// The loaded parent files a cache is built from.
    type Input: Send + 'static;
    type Item: Clone + Send + Sync + 'static;
    const KIND: CacheKind;
    /// See [`CacheItemRequest::MEMORY_FACTOR`].
    const MEMORY_FACTOR: u32 = 1;

    /// Bytes of the parent files in `input`.
    fn input_size(input: &Self::Input) -> u64;

    /// Bytes of memory the conversion of `input` holds at its peak: what it takes from
    /// the conversion budget. A converter whose memory grows with its input charges
    /// its size (the default); one that spills to disk charges its bound, so a file
    /// larger than the whole budget does not wait for every other conversion to end.
    fn memory_charge(input: &Self::Input) -> u64 {
        Self::input_size(input)
    }

    /// Writes the cache for `input`. Runs on a blocking thread: conversions are CPU-bound.
    /// `scratch` is a directory on the cache's disk for what a conversion spills instead
    /// of holding it in memory; what it leaves there is its own to remove.
    fn convert(input: Self::Input, out: &mut BufWriter<File>, scratch: &Path) -> CacheResult<()>;

    /// Turns a cache file (memory-mapped) into the item.
    fn load(data: ByteView<'static>) -> CacheResult<Self::Item>;
}

/// A conversion as an observer sees it.
#[derive(Clone, Debug)]
pub struct ConversionState {
    /// Unique within the process, so an observer can tell concurrent conversions apart.
    pub id: u64,
    /// The cache kind built (`symcaches`, `cficaches`, ...).
    pub kind: &'static str,
    /// Bytes of the parent files it is built from.
    pub input_bytes: u64,
    /// When it got its share of the conversion budget and began.
    pub started: Instant,
}

/// Hears when each conversion of the caches it was given to starts and ends, so a front
/// end can show that work is going on (the offline CLI does: a large PDB converts for
/// many seconds with nothing to download). Called on the converting task; must be quick.
pub trait ConversionObserver: Send + Sync {
    fn started(&self, conversion: &ConversionState);
    fn finished(&self, conversion: &ConversionState, result: Result<(), &CacheError>);
}

/// How to get a format's input; only awaited when the cache has to be built.
pub type InputFuture<F> = BoxFuture<'static, CacheResult<<F as DerivedFormat>::Input>>;

pub struct DerivedRequest<F: DerivedFormat> {
    /// Taken by the one computation that runs for this request.
    input: Mutex<Option<InputFuture<F>>>,
    budget: Arc<ConversionBudget>,
    observer: Option<Arc<dyn ConversionObserver>>,
}

impl<F: DerivedFormat> CacheItemRequest for DerivedRequest<F> {
    type Item = F::Item;
    const MEMORY_FACTOR: u32 = F::MEMORY_FACTOR;

    fn compute<'a>(&'a self, temp_file: &'a mut NamedTempFile) -> BoxFuture<'a, CacheResult<()>> {
        Box::pin(async move {
            let input = self
                .input
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
                .ok_or_else(|| CacheError::internal("derived cache input asked for twice"))?;
            let input = input.await?;
            let file = temp_file
                .as_file()
                .try_clone()
                .map_err(CacheError::internal)?;
            let scratch = temp_file
                .path()
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| CacheError::internal("a temporary file outside a directory"))?;
            let input_size = F::input_size(&input);
            let permit = self.budget.acquire(F::memory_charge(&input)).await;
            let started = Instant::now();
            let observed = self.observer.as_ref().map(|observer| {
                static NEXT_ID: AtomicU64 = AtomicU64::new(0);
                let state = ConversionState {
                    id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                    kind: F::KIND.name,
                    input_bytes: input_size,
                    started,
                };
                observer.started(&state);
                (observer, state)
            });
            let rss = tracing::enabled!(tracing::Level::DEBUG).then(RssSampler::start);
            // Converters walk hostile files (DWARF, PDB, source maps, mappings) in
            // dependencies that can panic: that costs this one cache, as `malformed`.
            let result = isolate_blocking(F::KIND.name, move || {
                let mut writer = BufWriter::new(file);
                let converted = F::convert(input, &mut writer, &scratch);
                super::budget::return_freed_heap();
                converted?;
                writer.into_inner().map_err(CacheError::internal)?;
                Ok(())
            })
            .await;
            if let Some(rss) = rss {
                let (before, peak) = rss.finish();
                tracing::debug!(
                    kind = F::KIND.name,
                    input_bytes = input_size,
                    budget_kib = permit.kib,
                    waited_ms = permit.waited.as_millis() as u64,
                    took_ms = started.elapsed().as_millis() as u64,
                    rss_before_kib = before,
                    rss_peak_kib = peak,
                    "conversion finished"
                );
            }
            drop(permit);
            if let Some((observer, state)) = observed {
                observer.finished(&state, result.as_ref().map(|_| ()));
            }
            result
        })
    }

    fn load(&self, data: ByteView<'static>) -> CacheResult<Self::Item> {
        F::load(data)
    }
}

/// The process's resident set while a conversion runs, sampled, since the kernel keeps
/// only one high-water mark for the whole process's lifetime.
struct RssSampler {
    before: u64,
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(20);

impl RssSampler {
    fn start() -> Self {
        let before = rss_kib().unwrap_or(0);
        let peak = Arc::new(AtomicU64::new(before));
        let task = tokio::spawn({
            let peak = peak.clone();
            async move {
                loop {
                    tokio::time::sleep(RSS_SAMPLE_EVERY).await;
                    if let Some(now) = rss_kib() {
                        peak.fetch_max(now, Ordering::Relaxed);
                    }
                }
            }
        });
        RssSampler { before, peak, task }
    }

    /// KiB resident before, and the highest sample since (the end included).
    fn finish(self) -> (u64, u64) {
        self.task.abort();
        if let Some(now) = rss_kib() {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        (self.before, self.peak.load(Ordering::Relaxed))
    }
}

/// `VmRSS` of this process in KiB; `None` off Linux.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The caches of format `F`.
pub struct DerivedCache<F: DerivedFormat> {
    cacher: Cacher<DerivedRequest<F>>,
    budget: Arc<ConversionBudget>,
    observer: Option<Arc<dyn ConversionObserver>>,
}

impl<F: DerivedFormat> Clone for DerivedCache<F> {
    fn clone(&self) -> Self {
        DerivedCache {
            cacher: self.cacher.clone(),
            budget: self.budget.clone(),
            observer: self.observer.clone(),
        }
    }
}

impl<F: DerivedFormat> DerivedCache<F> {
    pub fn new(caches: &Caches) -> Self {
        DerivedCache {
            cacher: caches.cacher(F::KIND),
            budget: caches.conversions(),
            observer: caches.conversion_observer(),
        }
    }

    pub fn kind(&self) -> CacheKind {
        F::KIND
    }

    /// The conversion budget its builds take their memory from, for what reads the same
    /// inputs beside them (lazy readers).
    pub fn budget(&self) -> &Arc<ConversionBudget> {
        &self.budget
    }

    /// The key of the cache built from the files `parents` name, in that order.
    pub fn key(parents: &[&CacheKey]) -> CacheKey {
        CacheKey::derived_from(parents, F::KIND.name)
    }

    /// The cache built from the files `parents` name; `input` loads them, and is only
    /// awaited when no cache for that key exists yet.
    pub async fn get(&self, parents: &[&CacheKey], input: InputFuture<F>) -> CacheResult<F::Item> {
        let request = DerivedRequest {
            input: Mutex::new(Some(input)),
            budget: self.budget.clone(),
            observer: self.observer.clone(),
        };
        self.cacher.get(Self::key(parents), request).await
    }

    /// The cache built from `parents`, if it exists already; never builds it.
    pub async fn cached(&self, parents: &[&CacheKey]) -> Option<CacheResult<F::Item>> {
        let request = DerivedRequest {
            input: Mutex::new(None),
            budget: self.budget.clone(),
            observer: None,
        };
        self.cacher.get_cached(&Self::key(parents), &request).await
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::cache::Family;
    use crate::cache::{CachesConfig, Scope};

    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    static MOST_AT_ONCE: AtomicUsize = AtomicUsize::new(0);

    /// A format whose conversion takes a while and counts how many run at once.
    struct Slow;

    impl DerivedFormat for Slow {
        type Input = u64;
        type Item = ();
        const KIND: CacheKind = CacheKind {
            name: "slow_test",
            version: 1,
            compatible: &[],
            family: Family::Derived,
            memory_share: 1,
        };

        fn input_size(input: &u64) -> u64 {
            *input
        }

        fn convert(_input: u64, out: &mut BufWriter<File>, _scratch: &Path) -> CacheResult<()> {
            let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
            MOST_AT_ONCE.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(150));
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            out.write_all(b"done").map_err(CacheError::internal)
        }

        fn load(_data: ByteView<'static>) -> CacheResult<()> {
            Ok(())
        }
    }

    async fn convert_two_at_once(each: u64) -> usize {
        MOST_AT_ONCE.store(0, Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        let config = CachesConfig {
            conversion_budget: 1 << 20,
            ..CachesConfig::default()
        };
        let caches = Caches::new(dir.path(), &config, None);
        let cache = DerivedCache::<Slow>::new(&caches);
        let size = each.to_string();
        let parents = [
            CacheKey::new(Scope::Global, &["a", &size]),
            CacheKey::new(Scope::Global, &["b", &size]),
        ];
        let cache = &cache;
        let builds = parents.iter().map(|parent| async move {
            let input: InputFuture<Slow> = Box::pin(async move { Ok(each) });
            cache.get(&[parent], input).await
        });
        for built in futures::future::join_all(builds).await {
            built.unwrap();
        }
        MOST_AT_ONCE.load(Ordering::SeqCst)
    }

    /// Both cases in one test: they share the counters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_conversions_queue_on_the_budget_small_ones_do_not() {
        assert_eq!(convert_two_at_once(700 << 10).await, 1, "two large at once");
        assert_eq!(convert_two_at_once(100 << 10).await, 2, "small ones queued");
    }

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    /// A format of its own: `Slow`'s counters belong to the test beside it.
    struct Quick;

    impl DerivedFormat for Quick {
        type Input = u64;
        type Item = ();
        const KIND: CacheKind = CacheKind {
            name: "quick_test",
            ..Slow::KIND
        };

        fn input_size(input: &u64) -> u64 {
            *input
        }

        fn convert(_input: u64, out: &mut BufWriter<File>, _scratch: &Path) -> CacheResult<()> {
            out.write_all(b"done").map_err(CacheError::internal)
        }

        fn load(_data: ByteView<'static>) -> CacheResult<()> {
            Ok(())
        }
    }

    impl ConversionObserver for Heard {
        fn started(&self, conversion: &ConversionState) {
            let line = format!("started {} {}", conversion.kind, conversion.input_bytes);
            self.0.lock().unwrap().push(line);
        }
        fn finished(&self, conversion: &ConversionState, result: Result<(), &CacheError>) {
            let line = format!("finished {} {}", conversion.kind, result.is_ok());
            self.0.lock().unwrap().push(line);
        }
    }

    /// The observer hears each conversion once; a cache that exists converts nothing.
    #[tokio::test]
    async fn conversions_are_reported_to_the_observer() {
        let dir = tempfile::tempdir().unwrap();
        let heard = Arc::new(Heard::default());
        let caches = Caches::new(dir.path(), &CachesConfig::default(), None)
            .with_conversion_observer(heard.clone());
        let cache = DerivedCache::<Quick>::new(&caches);
        let parent = CacheKey::new(Scope::Global, &["observed"]);
        for _ in 0..2 {
            let input: InputFuture<Quick> = Box::pin(async { Ok(42) });
            cache.get(&[&parent], input).await.unwrap();
        }
        assert_eq!(
            *heard.0.lock().unwrap(),
            ["started quick_test 42", "finished quick_test true"]
        );
    }
}
