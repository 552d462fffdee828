//! The engine: the pipelines' services (native, JS, JVM) built over one set of caches,
//! one lookup and one downloader, from the config. The server and the offline CLI both
//! build it here, so they run the same services; what only a server has (the request
//! service, the fleet, the fronts) the server adds around it.

use std::sync::Arc;

use anyhow::Context;

use crate::cache::{Caches, ConversionObserver, SharedCache};
use crate::config::Config;
use crate::fetch::Downloader;
use crate::js::JsService;
use crate::js::bundle::{BundleLimits, BundleMemory};
use crate::jvm::JvmService;
use crate::lookup::Lookup;
use crate::native::NativeService;
use crate::native::symbfile::SymbfileStore;
use crate::store::Store;

/// What the process does with the symbfile store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symbfiles {
    /// The server: uploads are received into it.
    Receive,
    /// A process beside the server: stored symbfiles are looked up, and nothing of the
    /// store that a running server relies on is changed.
    Read,
}

pub struct Engine {
    /// Every cache kind's `Cacher`, and what conversions share.
    pub caches: Arc<Caches>,
    pub lookup: Lookup,
    pub native: Arc<NativeService>,
    pub jvm: Arc<JvmService>,
    pub js: Arc<JsService>,
    /// Uploaded symbfiles (the native pipeline reads them too).
    pub symbfiles: Arc<SymbfileStore>,
    /// The team's symbol store, when the config has one: the home of every upload,
    /// symbfiles included.
    pub store: Option<Store>,
}

impl Engine {
    /// Needs a tokio runtime when a shared cache is configured (its upload worker).
    /// Conversions are reported to `conversions`, if given.
    pub fn build(
        config: &Config,
        downloader: &Downloader,
        symbfiles: Symbfiles,
        conversions: Option<Arc<dyn ConversionObserver>>,
    ) -> anyhow::Result<Self> {
        let shared = match &config.shared_cache {
            Some(shared) => Some(SharedCache::new(shared, config.connect_timeout)?),
            None => None,
        };
        let mut caches = Caches::new(&config.cache_dir, &config.caches, shared);
        if let Some(observer) = conversions {
            caches = caches.with_conversion_observer(observer);
        }
        let caches = Arc::new(caches);
        // The store's SymCaches are a cache kind of `caches`.
        let store = Store::open(&config.store, &config.cache_dir, config.connect_timeout)
            .context("store")?;
        let dir = config.symbfile_dir();
        let symbfiles = Arc::new(match symbfiles {
            Symbfiles::Receive => {
                SymbfileStore::open(dir.clone(), &config.symbfile, &caches, store.as_ref())
                    .with_context(|| format!("symbfile store {}", dir.display()))?
            }
            Symbfiles::Read => SymbfileStore::for_lookups(dir, &config.symbfile, &caches),
        });
        let lookup = Lookup::new(&caches, downloader.clone(), config.object_limits());
        let native = NativeService::new(
            &caches,
            &lookup,
            symbfiles.clone(),
            crate::native::DebuginfodSourceLimits {
                max_files: config.debuginfod.source_files_per_request,
                timeout: config.debuginfod.source_files_timeout,
            },
            crate::native::MemoLimits {
                frames: usize::try_from(config.caches.in_memory.native_frames)
                    .unwrap_or(usize::MAX),
                frame_bytes: usize::try_from(config.caches.in_memory.native_frame_bytes)
                    .unwrap_or(usize::MAX),
                demangled_bytes: config.caches.in_memory.demangled_names,
            },
            config.unwind_order,
        );
        let jvm = JvmService::new(&caches, &lookup);
        let bundle_limits = BundleLimits {
            max_entries: config.max_artifact_bundle_entries,
            entries: config.object_limits().sources(),
        };
        let bundle_memory = BundleMemory {
            opened: config.caches.in_memory.artifact_bundles,
            file_bytes: config.caches.in_memory.artifact_bundle_files,
        };
        let js = JsService::new(&caches, downloader.clone(), bundle_limits, bundle_memory);
        Ok(Engine {
            caches,
            lookup,
            native: Arc::new(native),
            jvm: Arc::new(jvm),
            js: Arc::new(js),
            symbfiles,
            store,
        })
    }
}
