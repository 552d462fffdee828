//! GCS sources, through `objstore`'s clients and credentials (a service-account key
//! inline in the source, a ready token, the server's application-default credentials,
//! or none for an emulator). One client per credentials, endpoint and access is kept;
//! each holds its credentials' token cache. Emulators are a source's `endpoint` or the
//! `STORAGE_EMULATOR_HOST` environment variable.
//!
//! The crate builds its own HTTP client and takes neither a client nor a resolver, so
//! the reserved-IP rule is applied by resolving the endpoint just before each request,
//! and the shared retry, timeout and size rules by turning the crate's retries off and
//! running each read as any other download. Two limits its client cannot take: a connect
//! timeout (the head timeout covers connecting), and a cap on the body of an error answer,
//! which it reads whole (within the head timeout).

use std::sync::Arc;
use std::time::Duration;

use google_cloud_auth::errors::CredentialsError;
use google_cloud_storage::client::Storage;
use reqwest::StatusCode;
use url::Url;

use super::FetchConfig;
use super::http::status_error;
use super::reserved_ip::{RESERVED_ADDRESS_MSG, ReservedAddress, ReservedIps, ensure_public_url};
use super::transfer::{Running, Transfer, root_cause, with_retries};
use crate::error::{CacheError, CacheResult};
use crate::objstore;
use crate::objstore::gcs::{DEFAULT_ENDPOINT, GcsAccess};
use crate::sources::{GcsAuth, GcsSourceConfig};

/// What distinguishes one GCS client from another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct GcsClientKey {
    auth: GcsAuth,
    endpoint: Option<Url>,
    access: GcsAccess,
}

/// A status from GCS, as for any HTTP download; refusals keep GCS's reason (it names the
/// principal and the missing permission, never a credential).
fn status_failure(err: &google_cloud_storage::Error) -> Option<CacheError> {
    let status = StatusCode::from_u16(err.http_status_code()?).ok()?;
    Some(match (status_error(status), err.status()) {
        (CacheError::PermissionDenied(detail), Some(service)) if !service.message.is_empty() => {
            CacheError::PermissionDenied(format!("{detail}: {}", service.message))
        }
        (mapped, _) => mapped,
    })
}

/// Whether the crate failed for want of usable credentials, and if so whether trying
/// again could help (a metadata server that did not answer) or not (a bad key).
fn credentials_failure(err: &google_cloud_storage::Error) -> Option<CacheError> {
    if !err.is_authentication() {
        return None;
    }
    let detail = root_cause(err);
    let transient = std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<CredentialsError>())
        .is_some_and(CredentialsError::is_transient);
    Some(if transient {
        CacheError::DownloadError(format!("GCS credentials unavailable: {detail}"))
    } else {
        CacheError::PermissionDenied(format!("GCS credentials refused: {detail}"))
    })
}

/// GCS transfers: the clients, one per credentials, endpoint and access, each keeping
/// its token fresh, and the emulator the environment names.
pub(super) struct GcsBackend {
    clients: moka::future::Cache<GcsClientKey, Storage>,
    emulator: Option<Url>,
    config: Arc<FetchConfig>,
    reserved: ReservedIps,
}

impl GcsBackend {
    pub fn new(config: Arc<FetchConfig>) -> Self {
        GcsBackend {
            // A client keeps refreshing its token while it lives, and keeps a
            // credential's lasting failure: neither should outlive its use for long.
            clients: moka::future::Cache::builder()
                .max_capacity(config.gcs_token_capacity)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            emulator: objstore::gcs::emulator_from_env(),
            reserved: ReservedIps::from_config(&config),
            config,
        }
    }

    /// The client for `key`, built on first use.
    async fn client(&self, key: &GcsClientKey) -> CacheResult<Storage> {
        let init = async {
            let credentials =
                objstore::gcs::credentials(&key.auth, key.endpoint.as_ref(), key.access)?;
            objstore::gcs::build_client(credentials, key.endpoint.as_ref(), false)
                .await
                .map_err(|err| CacheError::DownloadError(format!("GCS client: {err}")))
        };
        self.clients
            .try_get_with_by_ref(key, init)
            .await
            .map_err(|err| (*err).clone())
    }

    /// How requests for `source` are authorised: its own credentials, else the server's
    /// if it may use them, else none.
    fn auth(&self, source: &GcsSourceConfig) -> CacheResult<GcsAuth> {
        match source.auth() {
            Ok(GcsAuth::Default)
                if !self
                    .config
                    .may_use_server_credentials(source.files.from_config_file) =>
            {
                Ok(GcsAuth::Anonymous)
            }
            Ok(auth) => Ok(auth),
            Err(err) => Err(CacheError::PermissionDenied(err.to_owned())),
        }
    }

    /// Streams the object `key` of the source's bucket into the transfer's destination.
    pub async fn fetch(
        &self,
        source: &GcsSourceConfig,
        key: &str,
        transfer: Transfer<'_>,
    ) -> CacheResult<u64> {
        let auth = self.auth(source)?;
        let endpoint = source.endpoint.clone().or_else(|| self.emulator.clone());
        let client_key = GcsClientKey {
            auth,
            endpoint,
            access: GcsAccess::Read,
        };
        let what = format!("gs://{}/{key}", source.bucket);
        with_retries!(transfer, &what, &self.config, |run| {
            self.attempt(&client_key, &source.bucket, key, &mut run)
                .await
        })
    }

    async fn attempt(
        &self,
        client_key: &GcsClientKey,
        bucket: &str,
        key: &str,
        run: &mut Running<'_>,
    ) -> CacheResult<u64> {
        if self.reserved.refused() {
            let endpoint = match &client_key.endpoint {
                Some(endpoint) => endpoint.clone(),
                None => Url::parse(DEFAULT_ENDPOINT).map_err(CacheError::internal)?,
            };
            ensure_public_url(&endpoint).await.map_err(|err| {
                if err.is::<ReservedAddress>() {
                    CacheError::DownloadError(RESERVED_ADDRESS_MSG.to_owned())
                } else {
                    CacheError::DownloadError(format!("cannot resolve the GCS endpoint: {err}"))
                }
            })?;
        }
        let client = self.client(client_key).await?;
        let head = self.config.head_timeout;
        // The head timeout covers what the crate does before the body: connecting (its
        // client has no connect timeout of its own), fetching a token, the answer's head.
        let request = client
            .read_object(objstore::gcs::bucket_name(bucket), key)
            .with_user_agent(self.config.user_agent.clone())
            .send();
        let response = match tokio::time::timeout(head, request).await {
            Err(_) => return Err(CacheError::Timeout(head)),
            Ok(Err(err)) => return Err(self.error(&err)),
            Ok(Ok(response)) => response,
        };
        // The stored size; the crate turns off transcoding, so it is what arrives.
        let size = u64::try_from(response.object().size)
            .ok()
            .filter(|&s| s > 0);
        let body = futures::stream::unfold(response, |mut response| async move {
            let chunk = response.next().await?;
            Some((chunk.map_err(|err| self.error(&err)), response))
        });
        run.write_body(body, size, &self.config).await
    }

    /// Upstream's mapping, as for S3 and HTTP sources: missing objects and buckets are
    /// not found, refused credentials are permission errors, the rest download errors.
    fn error(&self, err: &google_cloud_storage::Error) -> CacheError {
        if let Some(mapped) = status_failure(err).or_else(|| credentials_failure(err)) {
            return mapped;
        }
        if err.is_timeout() {
            return CacheError::Timeout(self.config.head_timeout);
        }
        CacheError::DownloadError(root_cause(err))
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::extract::{Path as AxPath, State};
    use axum::response::{IntoResponse, Response};
    use axum::routing::get;
    use google_cloud_storage::Error;
    use http::HeaderMap;

    use super::*;
    use crate::fetch::Downloader;
    use crate::sources::{Secret, SourceConfig};

    fn gcs_answer(status: StatusCode, message: &str) -> Response {
        let error = serde_json::json!({"error": {"code": status.as_u16(), "message": message}});
        (status, axum::Json(error)).into_response()
    }

    /// The JSON API's media download, as GCS answers it, for a few objects.
    async fn start_gcs(hits: Arc<AtomicUsize>) -> SocketAddr {
        let object = |AxPath((bucket, object)): AxPath<(String, String)>,
                      State(hits): State<Arc<AtomicUsize>>| async move {
            hits.fetch_add(1, Ordering::SeqCst);
            let ok = |body: Vec<u8>| {
                let len = body.len().to_string();
                let headers = [
                    ("x-goog-generation", "1".to_owned()),
                    ("x-goog-stored-content-length", len),
                ];
                (headers, body).into_response()
            };
            match (bucket.as_str(), object.as_str()) {
                ("b", "dir/hello") => ok(b"hello world\n".to_vec()),
                ("b", "big") => ok(vec![b'x'; 64 * 1024]),
                ("b", "forbidden") => gcs_answer(
                    StatusCode::FORBIDDEN,
                    "sa@p.iam does not have storage.objects.get access",
                ),
                ("b", "error") => gcs_answer(StatusCode::INTERNAL_SERVER_ERROR, "backend error"),
                ("b", "slow") => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    ok(b"late".to_vec())
                }
                _ => gcs_answer(StatusCode::NOT_FOUND, "No such object"),
            }
        };
        let app = Router::new()
            .route("/storage/v1/b/{bucket}/o/{object}", get(object))
            .with_state(hits);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    fn test_config() -> FetchConfig {
        FetchConfig {
            head_timeout: Duration::from_millis(500),
            max_download_timeout: Duration::from_secs(10),
            connect_to_reserved_ips: true,
            ..FetchConfig::default()
        }
    }

    fn source(endpoint: &str) -> GcsSourceConfig {
        let json =
            serde_json::json!({"type": "gcs", "id": "g", "bucket": "b", "endpoint": endpoint});
        match serde_json::from_value::<SourceConfig>(json).unwrap() {
            SourceConfig::Gcs(c) => (*c).clone(),
            other => panic!("not gcs: {other:?}"),
        }
    }

    async fn download(
        config: FetchConfig,
        source: &GcsSourceConfig,
        key: &str,
        max: u64,
    ) -> (CacheResult<u64>, Vec<u8>) {
        let downloader = Downloader::new(config).unwrap();
        let temp = tempfile::NamedTempFile::new().unwrap();
        let mut dest = tokio::fs::File::from_std(temp.reopen().unwrap());
        let transfer = downloader.transfer_to(&mut dest, max);
        let result = downloader.inner.gcs.fetch(source, key, transfer).await;
        (result, std::fs::read(temp.path()).unwrap())
    }

    #[tokio::test]
    async fn downloads_map_statuses_and_keep_the_limits() {
        let hits = Arc::new(AtomicUsize::new(0));
        let addr = start_gcs(hits.clone()).await;
        let source = source(&format!("http://{addr}"));
        let config = test_config();

        let (result, body) = download(config.clone(), &source, "dir/hello", u64::MAX).await;
        assert_eq!((result, body.as_slice()), (Ok(12), &b"hello world\n"[..]));
        let (result, _) = download(config.clone(), &source, "nothing", u64::MAX).await;
        assert_eq!(result, Err(CacheError::NotFound));
        let (result, _) = download(config.clone(), &source, "forbidden", u64::MAX).await;
        assert_eq!(
            result,
            Err(CacheError::PermissionDenied(
                "403 Forbidden: sa@p.iam does not have storage.objects.get access".into()
            ))
        );

        // The per-call cap and the configured one, before a byte is written.
        let (result, body) = download(config.clone(), &source, "big", 1024).await;
        assert!(matches!(result, Err(CacheError::TooLarge(_))), "{result:?}");
        assert!(body.is_empty());
        let capped = FetchConfig {
            max_download_size: 1024,
            ..config.clone()
        };
        let (result, _) = download(capped, &source, "big", u64::MAX).await;
        assert!(matches!(result, Err(CacheError::TooLarge(_))), "{result:?}");

        let before = hits.load(Ordering::SeqCst);
        let (result, _) = download(config.clone(), &source, "error", u64::MAX).await;
        assert!(
            matches!(result, Err(CacheError::DownloadError(_))),
            "{result:?}"
        );
        assert_eq!(
            hits.load(Ordering::SeqCst) - before,
            3,
            "our retries, not the crate's"
        );

        let (result, _) = download(config, &source, "slow", u64::MAX).await;
        assert_eq!(result, Err(CacheError::Timeout(Duration::from_millis(500))));
    }

    #[tokio::test]
    async fn reserved_endpoints_are_refused_before_any_request() {
        let hits = Arc::new(AtomicUsize::new(0));
        let addr = start_gcs(hits.clone()).await;
        let refusing = FetchConfig {
            connect_to_reserved_ips: false,
            ..test_config()
        };
        for endpoint in [
            format!("http://{addr}"),
            format!("http://localhost:{}", addr.port()),
        ] {
            let (result, _) =
                download(refusing.clone(), &source(&endpoint), "dir/hello", u64::MAX).await;
            assert_eq!(
                result,
                Err(CacheError::DownloadError(RESERVED_ADDRESS_MSG.into()))
            );
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_broken_key_is_refused_without_its_text() {
        // It fails when it signs, for good.
        let auth = GcsAuth::ServiceAccount {
            client_email: "sa@p.iam".into(),
            private_key: Secret::new(
                "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----",
            ),
            private_key_id: None,
        };
        let creds = objstore::gcs::credentials(&auth, None, GcsAccess::Read).unwrap();
        let err = creds.headers(http::Extensions::new()).await.unwrap_err();
        assert!(!err.is_transient());
        let mapped = credentials_failure(&Error::authentication(err)).unwrap();
        assert!(
            matches!(&mapped, CacheError::PermissionDenied(_)),
            "{mapped:?}"
        );
        assert!(!mapped.to_string().contains("c2VjcmV0"), "{mapped}");
    }

    #[tokio::test]
    async fn only_configured_sources_get_the_servers_credentials() {
        let json = serde_json::json!({"type": "gcs", "id": "g", "bucket": "b"});
        let request: SourceConfig = serde_json::from_value(json).unwrap();
        let configured = request.clone().from_config_file();
        let gcs = |source: &SourceConfig| match source {
            SourceConfig::Gcs(c) => c.clone(),
            other => panic!("not gcs: {other:?}"),
        };
        let strict = GcsBackend::new(Arc::new(test_config()));
        assert_eq!(strict.auth(&gcs(&request)), Ok(GcsAuth::Anonymous));
        assert_eq!(strict.auth(&gcs(&configured)), Ok(GcsAuth::Default));
        let trusting = GcsBackend::new(Arc::new(FetchConfig {
            server_credentials_for_request_sources: true,
            ..test_config()
        }));
        assert_eq!(trusting.auth(&gcs(&request)), Ok(GcsAuth::Default));
    }

    #[test]
    fn crate_errors_map_to_ours() {
        let gcs = GcsBackend::new(Arc::new(test_config()));
        let http = |status: u16| Error::http(status, HeaderMap::new(), bytes::Bytes::new());
        assert_eq!(gcs.error(&http(404)), CacheError::NotFound);
        assert_eq!(
            gcs.error(&http(401)),
            CacheError::PermissionDenied("401 Unauthorized".into())
        );
        assert_eq!(
            gcs.error(&http(503)),
            CacheError::DownloadError("503 Service Unavailable".into())
        );
        let unavailable =
            Error::authentication(CredentialsError::from_msg(true, "metadata server down"));
        assert!(matches!(
            gcs.error(&unavailable),
            CacheError::DownloadError(_)
        ));
    }
}
