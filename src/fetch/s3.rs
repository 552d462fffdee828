//! S3 and S3-compatible buckets through the AWS SDK: one client per (region, endpoint,
//! credentials), kept in a bounded cache; the clients are `objstore`'s, with the SDK's
//! own retries off so that the shared retry, timeout and size rules apply, and their
//! connections resolve names through the reserved-IP filter.

use std::error::Error as StdError;
use std::sync::Arc;

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_s3::config::SharedHttpClient;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_smithy_runtime_api::client::dns::{DnsFuture, ResolveDns, ResolveDnsError};
use url::Url;

use super::FetchConfig;
use super::reserved_ip::{ReservedIps, resolve_public};
use super::transfer::{Running, Transfer, root_cause, with_retries};
use crate::error::{CacheError, CacheResult};
use crate::objstore;
use crate::objstore::s3::S3Credentials;
use crate::sources::S3SourceConfig;

/// What distinguishes one S3 client from another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct S3ClientKey {
    region: String,
    endpoint: Option<Url>,
    credentials: S3Credentials,
}

/// Resolves through [`resolve_public`].
#[derive(Clone, Debug)]
struct PublicOnlyDns;

impl ResolveDns for PublicOnlyDns {
    fn resolve_dns<'a>(&'a self, name: &'a str) -> DnsFuture<'a> {
        DnsFuture::new(async move {
            let addrs = resolve_public(name).await.map_err(ResolveDnsError::new)?;
            Ok(addrs.into_iter().map(|addr| addr.ip()).collect())
        })
    }
}

/// The connection pool every S3 source's client shares: names resolve through the
/// reserved-IP filter unless `connect_to_reserved_ips` is set.
fn http_client(config: &FetchConfig) -> SharedHttpClient {
    match ReservedIps::from_config(config) {
        ReservedIps::Allow => objstore::s3::http_client(),
        ReservedIps::Refuse => objstore::s3::http_client_resolving(PublicOnlyDns),
    }
}

fn credentials_error<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a CredentialsError> {
    let mut current = Some(err);
    while let Some(err) = current {
        if let Some(found) = err.downcast_ref::<CredentialsError>() {
            return Some(found);
        }
        current = err.source();
    }
    None
}

/// S3 transfers: the clients, one per region, endpoint and credentials (building one
/// loads the AWS config, so they are kept), over one connection pool.
pub(super) struct S3Backend {
    http: SharedHttpClient,
    clients: moka::future::Cache<S3ClientKey, Arc<aws_sdk_s3::Client>>,
    config: Arc<FetchConfig>,
    reserved: ReservedIps,
}

impl S3Backend {
    pub fn new(config: Arc<FetchConfig>) -> Self {
        S3Backend {
            http: http_client(&config),
            clients: moka::future::Cache::new(config.s3_client_capacity),
            reserved: ReservedIps::from_config(&config),
            config,
        }
    }

    async fn client(&self, source: &S3SourceConfig) -> Arc<aws_sdk_s3::Client> {
        let credentials = match source.static_keys() {
            Some((access, secret)) => S3Credentials::Static(access.to_owned(), secret.clone()),
            None if self
                .config
                .may_use_server_credentials(source.files.from_config_file) =>
            {
                S3Credentials::Server
            }
            None => S3Credentials::Anonymous,
        };
        let key = S3ClientKey {
            region: source.region.name.clone(),
            endpoint: source.region.endpoint.clone(),
            credentials,
        };
        let init = async {
            Arc::new(
                objstore::s3::build_client(
                    &key.region,
                    key.endpoint.as_ref(),
                    &key.credentials,
                    self.http.clone(),
                    self.config.connect_timeout,
                )
                .await,
            )
        };
        self.clients.get_with_by_ref(&key, init).await
    }

    /// Streams the object `key` of the source's bucket into the transfer's destination.
    pub async fn fetch(
        &self,
        source: &S3SourceConfig,
        key: &str,
        transfer: Transfer<'_>,
    ) -> CacheResult<u64> {
        if let Some(endpoint) = &source.region.endpoint {
            self.reserved.check_literal(endpoint)?;
        }
        let client = self.client(source).await;
        let what = format!("s3://{}/{key}", source.bucket);
        with_retries!(transfer, &what, &self.config, |run| {
            self.attempt(&client, &source.bucket, key, &mut run).await
        })
    }

    async fn attempt(
        &self,
        client: &aws_sdk_s3::Client,
        bucket: &str,
        key: &str,
        run: &mut Running<'_>,
    ) -> CacheResult<u64> {
        let head = self.config.head_timeout;
        let request = client.get_object().bucket(bucket).key(key).send();
        let output = match tokio::time::timeout(head, request).await {
            Err(_) => return Err(CacheError::Timeout(head)),
            Ok(Err(err)) => return Err(self.error(err)),
            Ok(Ok(output)) => output,
        };
        let content_length = output.content_length().and_then(|l| u64::try_from(l).ok());
        // As upstream: stores answer some missing keys with an empty object.
        if content_length == Some(0) {
            return Err(CacheError::NotFound);
        }
        let body = futures::stream::unfold(output.body, |mut body| async move {
            let chunk = body.next().await?;
            Some((
                chunk.map_err(|e| CacheError::DownloadError(root_cause(&e))),
                body,
            ))
        });
        run.write_body(body, content_length, &self.config).await
    }

    /// Upstream's mapping: missing keys and buckets are not found, refused credentials are
    /// permission errors, everything else a (retryable) download error. S3's messages name
    /// neither keys nor signatures, so they are safe to report.
    fn error(&self, err: SdkError<GetObjectError>) -> CacheError {
        match &err {
            SdkError::TimeoutError(_) => return CacheError::Timeout(self.config.head_timeout),
            SdkError::DispatchFailure(failure) if failure.is_timeout() => {
                return CacheError::Timeout(self.config.connect_timeout);
            }
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                let code = service.err().code();
                let detail = service
                    .err()
                    .message()
                    .or(code)
                    .unwrap_or("access denied")
                    .to_owned();
                if matches!(status, 401 | 403)
                    || matches!(
                        code,
                        Some(
                            "AccessDenied"
                                | "AuthorizationHeaderMalformed"
                                | "InvalidAccessKeyId"
                                | "SignatureDoesNotMatch"
                        )
                    )
                {
                    return CacheError::PermissionDenied(detail);
                }
                if status == 404 || matches!(code, Some("NoSuchKey" | "NoSuchBucket" | "NotFound"))
                {
                    return CacheError::NotFound;
                }
                return CacheError::DownloadError(format!(
                    "S3 answered {status} {}",
                    code.unwrap_or_default()
                ));
            }
            _ => {}
        }
        if let Some(creds) = credentials_error(&err) {
            return CacheError::PermissionDenied(format!(
                "no usable AWS credentials: {}",
                root_cause(creds)
            ));
        }
        CacheError::DownloadError(root_cause(&err))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::fetch::Downloader;
    use crate::sources::SourceConfig;

    /// A TCP server that counts the connections made to it and answers none.
    async fn count_connections() -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        (port, accepted)
    }

    async fn fetch(connect_to_reserved_ips: bool, port: u16) -> CacheResult<u64> {
        let json = serde_json::json!({"type": "s3", "id": "s", "bucket": "b",
            "region": ["us-east-1", format!("http://localhost:{port}")],
            "access_key": "k", "secret_key": "s"});
        let SourceConfig::S3(source) = serde_json::from_value(json).unwrap() else {
            panic!("not s3")
        };
        let downloader = Downloader::new(FetchConfig {
            connect_to_reserved_ips,
            head_timeout: Duration::from_secs(2),
            max_download_timeout: Duration::from_secs(10),
            ..FetchConfig::default()
        })
        .unwrap();
        let temp = tempfile::NamedTempFile::new().unwrap();
        let mut dest = tokio::fs::File::from_std(temp.reopen().unwrap());
        let transfer = downloader.transfer_to(&mut dest, u64::MAX);
        downloader.inner.s3.fetch(&source, "key", transfer).await
    }

    // A name is no literal to check up front: the pool's resolver must drop its
    // reserved addresses, and only for sources, as configured.
    #[tokio::test]
    async fn a_named_endpoint_on_a_reserved_address_is_refused_before_connecting() {
        let (port, accepted) = count_connections().await;
        let refused = fetch(false, port).await.unwrap_err();
        assert!(refused.to_string().contains("reserved IP"), "{refused:?}");
        assert_eq!(accepted.load(Ordering::SeqCst), 0);

        let failed = fetch(true, port).await.unwrap_err();
        assert!(!failed.to_string().contains("reserved IP"), "{failed:?}");
        assert!(accepted.load(Ordering::SeqCst) > 0);
    }
}
