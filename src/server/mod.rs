//! The HTTP front: axum routes (one file per endpoint family), the shared state, and
//! the mapping of errors to statuses. Handlers parse and validate, then hand work to
//! the RequestService; they never symbolicate themselves.

#[cfg(test)]
mod cold_path_tests;
pub mod compat;
mod console;
mod crash;
mod error;
#[cfg(test)]
mod future_size_tests;
mod headers;
#[cfg(test)]
mod hostile_tests;
mod hosts;
mod js;
mod jvm;
mod limits;
mod listen;
mod observe;
mod prometheus;
mod ranges;
mod requests;
mod symbolicate;
mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use bytes::Bytes;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;

use crate::cache::{Caches, Scope};
use crate::config::RequestLimits;
use crate::config::{Config, Front};
use crate::engine::{Engine, Symbfiles};
use crate::fetch::Downloader;
use crate::fleet::Fleet;
use crate::js::JsService;
use crate::jvm::JvmService;
use crate::native::NativeService;
use crate::native::symbfile::SymbfileStore;
use crate::service::{RequestService, Reservation};
use crate::sources::SourceConfig;
use crate::store::Store;
use crate::telemetry;
use compat::access::guard;
use limits::Counted;

pub use crash::{CrashFiles, CrashForm, Upload, read_form};
pub use error::{ApiError, BodyLimit, parse_json};
pub use listen::{ConnectionLimits, serve};
pub use observe::{ACCESS_LOG_TARGET, AccessLog, AccessWriter, start_access_log};

/// What every handler can reach. Each request's handler gets its own clone, so the
/// clone is one shared count, not one per part (with two workers, each count's cache
/// line moved between cores on every request).
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

pub struct AppParts {
    pub service: RequestService,
    pub native: Arc<NativeService>,
    pub jvm: Arc<JvmService>,
    pub js: Arc<JsService>,
    /// Used when a request carries no `sources` key.
    pub default_sources: Arc<[SourceConfig]>,
    /// Fetches crash files named by `storage_url`.
    pub downloader: Downloader,
    pub crash_files: crash::CrashFiles,
    /// Every cache kind's live versions (for cleanup).
    pub caches: Arc<Caches>,
    /// Renders what the process recorded, for `GET /metrics`.
    pub metrics: PrometheusHandle,
    /// Maximums on the lists of one request.
    pub request_limits: RequestLimits,
    /// `max_request_body_size`, for the bodies read whole.
    pub body_limit: BodyLimit,
    /// The longest a poll waits for its answer.
    pub max_poll_timeout: Duration,
    /// Uploaded symbfiles (the native pipeline reads them too).
    pub symbfiles: Arc<SymbfileStore>,
    /// The team's symbol store; `None` without a `store` section (uploads answer 404).
    /// Its sources come first for every request (`store::first_sources`).
    pub store: Option<Store>,
    /// `None` when `symstore_proxy` is off.
    pub symstore_proxy: Option<Arc<compat::SymstoreProxy>>,
    /// `None` when `debuginfod.enabled` is off.
    pub debuginfod: Option<Arc<compat::Debuginfod>>,
    /// `None` when `symcache_http.enabled` is off.
    pub symcache_http: Option<Arc<compat::SymCacheHttp>>,
    /// `None` outside a fleet (no `fleet.advertise_url`).
    pub fleet: Option<Arc<Fleet>>,
    /// What `GET /ready` answers.
    pub readiness: Readiness,
    /// `None` when the console is off.
    pub console: Option<Arc<console::Console>>,
    /// sentry-cli's chunk uploads into the store; `None` without a store.
    pub sentry_uploads: Option<Arc<compat::sentry_api::ChunkUploads>>,
}

/// Whether this replica should be sent new work: not once it drains (after SIGTERM),
/// while it still serves what it is sent, so that a balancer stops first.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn drain(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn draining(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// `GET /ready`: readiness, as a balancer or Kubernetes' readiness probe asks for it;
/// `/healthcheck` stays the liveness check, `ok` until the process ends.
async fn ready(State(state): State<AppState>) -> Response {
    if state.readiness.draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response()
    } else {
        "ok".into_response()
    }
}

impl AppState {
    /// The server's state: the engine, with the symbfile store opened to receive
    /// uploads, and what only a server has around it.
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        // The recorder first, so that the counters the caches register while they are
        // built reach it; installing happens once per process.
        let metrics = telemetry::install(&config.metrics);
        let downloader = Downloader::new(config.fetch_config())?;
        let Engine {
            caches,
            lookup,
            native,
            jvm,
            js,
            symbfiles,
            store,
        } = Engine::build(config, &downloader, Symbfiles::Receive, None)?;
        // Results waiting to be polled may hold at most 64 MiB.
        let service = RequestService::new(config.max_concurrent_requests, 64 * 1024 * 1024);
        let fleet = Fleet::new(&config.fleet)?;
        let service = match &fleet {
            Some(fleet) => service.with_owner(fleet.own_tag()),
            None => service,
        };
        let default_sources: Arc<[SourceConfig]> = config.sources.clone().into();
        // The fronts that serve by path know no request scope: the team's store, then
        // the configured sources.
        let unscoped_sources =
            crate::store::first_sources(store.as_ref(), &Scope::Global, &default_sources);
        let symstore_proxy = config.symstore_proxy.then(|| {
            Arc::new(compat::SymstoreProxy::new(
                lookup.objects.clone(),
                unscoped_sources.clone(),
            ))
        });
        let debuginfod = config.debuginfod.enabled.then(|| {
            Arc::new(compat::Debuginfod::new(
                lookup.objects.clone(),
                lookup.source_files.clone(),
                unscoped_sources.clone(),
                config.debuginfod.clone(),
            ))
        });
        let symcache_http = config.symcache_http.enabled.then(|| {
            Arc::new(compat::SymCacheHttp::new(
                native.clone(),
                unscoped_sources.clone(),
                service.clone(),
                config.symcache_http.clone(),
            ))
        });
        let sentry_uploads = store.as_ref().map(|_| {
            Arc::new(compat::sentry_api::ChunkUploads::new(
                config.store.chunk_upload.clone(),
            ))
        });
        Ok(AppState(Arc::new(AppParts {
            service,
            native,
            jvm,
            js,
            default_sources,
            store,
            downloader,
            crash_files: crash::CrashFiles::new(
                config.cache_dir.join("tmp"),
                config.max_crash_file_size,
            ),
            caches,
            request_limits: config.request_limits,
            body_limit: BodyLimit(
                usize::try_from(config.max_request_body_size).unwrap_or(usize::MAX),
            ),
            max_poll_timeout: config.max_poll_timeout,
            symbfiles,
            symstore_proxy,
            debuginfod,
            symcache_http,
            fleet,
            readiness: Readiness::default(),
            console: console::Console::new(config, &metrics),
            metrics,
            sentry_uploads,
        })))
    }
}

/// The whole service: the router inside the one service every request passes through
/// (`observe`).
pub type App = observe::Observe<Router>;

/// A router and the patterns of its routes, which name each request's endpoint in the
/// metrics: axum keeps its patterns to itself, so each route is added here.
#[derive(Default)]
pub struct Routes {
    router: Router<AppState>,
    patterns: Vec<&'static str>,
}

impl Routes {
    pub fn route(mut self, pattern: &'static str, route: MethodRouter<AppState>) -> Self {
        self.router = self.router.route(pattern, route);
        self.patterns.push(pattern);
        self
    }

    pub fn merge(mut self, other: Routes) -> Self {
        self.router = self.router.merge(other.router);
        self.patterns.extend(other.patterns);
        self
    }

    /// The same routes with `wrap` applied to the router: a layer, say.
    pub fn map(mut self, wrap: impl FnOnce(Router<AppState>) -> Router<AppState>) -> Self {
        self.router = wrap(self.router);
        self
    }
}

pub fn router(state: AppState, config: &Config) -> App {
    // A store's read and write tokens open the reading fronts too (compat/access.rs).
    let store_tokens = match &state.store {
        Some(_) => config.store.tokens.as_slice(),
        None => &[],
    };
    let routes = Routes::default()
        .route("/healthcheck", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/metrics", get(prometheus::render))
        .route("/symbolicate", post(symbolicate::symbolicate))
        .route("/symbolicate-any", post(crash::symbolicate_any))
        .route("/symbolicate-jvm", post(jvm::symbolicate_jvm))
        .route("/symbolicate-js", post(js::symbolicate_js))
        .route("/requests/{id}", get(requests::poll))
        .merge(guard(
            Routes::default().route(
                "/proxy/{*path}",
                get(compat::proxy::proxy).head(compat::proxy::proxy),
            ),
            Front::Proxy,
            &config.fronts,
            store_tokens,
        ))
        .merge(guard(
            Routes::default().route(
                "/buildid/{id}/{*rest}",
                get(compat::debuginfod::buildid).head(compat::debuginfod::buildid),
            ),
            Front::Debuginfod,
            &config.fronts,
            store_tokens,
        ))
        .merge(guard(
            Routes::default().route("/symcache/{*path}", get(compat::symcache_http::symcache)),
            Front::Symcache,
            &config.fronts,
            store_tokens,
        ))
        .merge(guard(
            compat::mozilla::routes(config.mozilla),
            Front::Mozilla,
            &config.fronts,
            store_tokens,
        ))
        .merge(match &state.console {
            Some(_) => console::routes(&config.fronts),
            None => Routes::default(),
        })
        // Uploads count their own bytes against `max_crash_file_size` as they stream.
        .route("/minidump", post(crash::minidump))
        .route("/applecrashreport", post(crash::apple_crash_report))
        // Parts count their own bytes against `symbfile.max_file_size`.
        .merge(compat::sentry_api::routes())
        .route("/api/symbols-ranges", post(compat::symbfile::upload_ranges))
        .route(
            "/api/symbols-returnpads",
            post(compat::symbfile::upload_return_pads),
        )
        // Uploads into the store count their own bytes against `store.max_file_size`,
        // and take the store's tokens, not the fronts'.
        .route("/upload/", post(compat::upload::tecken::upload))
        .route("/upload", post(compat::upload::tecken::upload))
        .route("/symupload", post(compat::upload::symupload::upload));
    // Only with `sentry_dsn`: a request's errors carry its scope, and a sampled share
    // of requests become traces named by route. Without it, nothing on the path.
    let routes = if config.sentry_dsn.is_some() {
        routes.map(|router| {
            router
                .layer(sentry::integrations::tower::SentryHttpLayer::new().enable_transaction())
                .layer(sentry::integrations::tower::NewSentryLayer::<
                    axum::extract::Request,
                >::new_from_top())
        })
    } else {
        routes
    };
    // Outermost: every request, rejected ones and 404s included, gets its id, log line
    // and metrics. (Body limits are set by the extractors that read bodies:
    // `RequestBody`, `CrashUpload`.)
    let watch = state.console.is_some();
    let hosts = hosts::HostPolicy::new(config.bind, &config.allowed_hosts);
    observe::Observe::new(
        routes.router.with_state(state),
        &routes.patterns,
        watch,
        hosts,
    )
}

/// Query parameters every symbolication endpoint takes.
#[derive(Debug, Default, Deserialize)]
pub struct RequestParams {
    /// Seconds to wait for the result before answering `pending`.
    pub timeout: Option<f64>,
    #[serde(default)]
    pub scope: Option<String>,
}

impl RequestParams {
    pub fn scope(&self) -> Scope {
        Scope::new(self.scope.as_deref().unwrap_or("global"))
    }

    pub fn timeout(&self) -> Result<Option<Duration>, ApiError> {
        match self.timeout {
            None => Ok(None),
            Some(t) if t.is_finite() && t >= 0.0 => {
                Ok(Some(Duration::from_secs_f64(t.min(86400.0))))
            }
            Some(_) => Err(ApiError::bad_request(
                "query parameter `timeout`: expected seconds >= 0",
            )),
        }
    }
}

/// The query of a symbolication endpoint; a malformed one is a 400 that says why.
pub struct Params(pub RequestParams);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        let axum::extract::Query(params) =
            axum::extract::Query::<RequestParams>::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::bad_request(e.body_text()))?;
        Ok(Params(params))
    }
}

/// A slot under `max_concurrent_requests`, taken before the body is read (the body is
/// the last extractor): an overloaded server refuses an upload without reading it.
pub struct RequestSlot(Reservation);

impl axum::extract::FromRequestParts<AppState> for RequestSlot {
    type Rejection = ApiError;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, ApiError> {
        state
            .service
            .reserve()
            .map(RequestSlot)
            .map_err(|_| ApiError::overloaded())
    }
}

impl axum::extract::FromRef<AppState> for BodyLimit {
    fn from_ref(state: &AppState) -> BodyLimit {
        state.body_limit
    }
}

impl AppState {
    /// Runs `work` in the request service, in the slot the request took, and answers
    /// with its result, or with `pending` once `params.timeout` has passed.
    /// Not an `async fn`: the work is spawned (boxed) before the first poll, so the
    /// handler's future does not carry the request's kilobytes of state around.
    pub fn run<F, T>(
        &self,
        params: &RequestParams,
        RequestSlot(slot): RequestSlot,
        work: F,
    ) -> impl Future<Output = Result<Response, ApiError>> + Send + use<F, T>
    where
        F: Future<Output = anyhow::Result<T>> + Send + 'static,
        T: serde::Serialize + Send + 'static,
    {
        let started = params.timeout().map(|timeout| (timeout, slot.spawn(work)));
        async move {
            let (timeout, handle) = started?;
            Ok(json_bytes(RequestService::wait(handle, timeout).await))
        }
    }

    /// Parses a JSON request body once its lists are known to be within the request
    /// limits; `extra` names top-level lists of this endpoint only. The body is taken,
    /// so that it is not held while the request runs.
    pub fn parse_request<T: serde::de::DeserializeOwned>(
        &self,
        body: Bytes,
        extra: &[(&'static str, Counted)],
    ) -> Result<T, ApiError> {
        self.request_limits
            .check_json(&body, extra)
            .map_err(ApiError::refused)?;
        error::parse_json(&body)
    }
}

/// A JSON body that was serialised once, sent as is.
pub fn json_bytes(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
