//! S3 clients, and the objects of a bucket the operator configured. A client has the
//! SDK's retries off (callers apply their own rules), static keys, the server's default
//! credential chain or none, and path-style addressing for custom endpoints. Its
//! connections resolve names with the resolver its connection pool was built with:
//! `fetch/` hands in one that refuses reserved addresses, the operator's own store
//! needs none.

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, SharedHttpClient};
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::dns::ResolveDns;
use symbolic::common::ByteView;
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;
use url::Url;

use super::S3StoreConfig;
use super::object_key;
use crate::sources::Secret;

/// What an S3 client signs its requests with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum S3Credentials {
    /// The config's own keys.
    Static(String, Secret),
    /// The server's own: the default chain (environment, profile, web identity,
    /// container, instance metadata).
    Server,
    /// None: the requests go unsigned, and only public buckets answer them.
    Anonymous,
}

/// An S3 client for `region` (and `endpoint`, an S3-compatible store) over `http`.
pub(crate) async fn build_client(
    region: &str,
    endpoint: Option<&Url>,
    credentials: &S3Credentials,
    http: SharedHttpClient,
    connect_timeout: std::time::Duration,
) -> aws_sdk_s3::Client {
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).region(Region::new(region.to_owned()));
    match credentials {
        S3Credentials::Static(access, secret) => {
            loader = loader.credentials_provider(Credentials::new(
                access.clone(),
                secret.expose().to_owned(),
                None,
                None,
                "omnisym-source",
            ));
        }
        S3Credentials::Server => {}
        S3Credentials::Anonymous => loader = loader.no_credentials(),
    }
    // The credential providers keep their own HTTP client: instance and container
    // metadata live at reserved addresses by design, and they are the server's own.
    let shared = loader.load().await;
    let mut builder = aws_sdk_s3::config::Builder::from(&shared)
        .http_client(http)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(connect_timeout)
                .build(),
        );
    if let Some(endpoint) = endpoint {
        // S3-compatible stores often lack virtual-host addressing.
        builder = builder
            .endpoint_url(endpoint.as_str().trim_end_matches('/'))
            .force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(builder.build())
}

/// The TLS every S3 connection uses.
fn tls() -> tls::Provider {
    tls::Provider::Rustls(tls::rustls_provider::CryptoMode::AwsLc)
}

/// A connection pool for S3 clients that resolves names with the system's resolver.
pub(crate) fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls())
        .build_https()
}

/// A connection pool for S3 clients that resolves names with `resolver`.
pub(crate) fn http_client_resolving(
    resolver: impl ResolveDns + Clone + 'static,
) -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls())
        .build_with_resolver(resolver)
}

/// A bucket of the operator's: its client is built on first use, since the default
/// credential chain needs the runtime.
pub(super) struct S3Store {
    config: S3StoreConfig,
    client: OnceCell<aws_sdk_s3::Client>,
    http: SharedHttpClient,
    connect_timeout: std::time::Duration,
}

impl S3Store {
    pub fn new(config: &S3StoreConfig, connect_timeout: std::time::Duration) -> Self {
        S3Store {
            config: config.clone(),
            client: OnceCell::new(),
            // The store is the operator's own infrastructure, typically on a private
            // network: the reserved-IP rule protects against request data only.
            http: http_client(),
            connect_timeout,
        }
    }

    async fn client(&self) -> &aws_sdk_s3::Client {
        self.client
            .get_or_init(|| async {
                let config = &self.config;
                let credentials = if config.access_key.is_empty() {
                    S3Credentials::Server
                } else {
                    S3Credentials::Static(config.access_key.clone(), config.secret_key.clone())
                };
                build_client(
                    &config.region.name,
                    config.region.endpoint.as_ref(),
                    &credentials,
                    self.http.clone(),
                    self.connect_timeout,
                )
                .await
            })
            .await
    }

    fn key(&self, path: &str) -> String {
        object_key(&self.config.prefix, path)
    }

    pub async fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        let answer = self
            .client()
            .await
            .head_object()
            .bucket(&self.config.bucket)
            .key(self.key(path))
            .send()
            .await;
        match answer {
            Ok(head) => Ok(Some(head.content_length().unwrap_or(0).max(0) as u64)),
            Err(err) if is_missing(&err) => Ok(None),
            Err(err) => Err(failed(err)),
        }
    }

    pub async fn remove(&self, path: &str) -> anyhow::Result<()> {
        self.client()
            .await
            .delete_object()
            .bucket(&self.config.bucket)
            .key(self.key(path))
            .send()
            .await
            .map_err(failed)?;
        Ok(())
    }

    pub async fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        let answer = self
            .client()
            .await
            .get_object()
            .bucket(&self.config.bucket)
            .key(self.key(path))
            .send()
            .await;
        let mut output = match answer {
            Ok(output) => output,
            Err(err) => {
                return if is_missing(&err) {
                    Ok(false)
                } else {
                    Err(failed(err))
                };
            }
        };
        let mut file = tokio::fs::File::from_std(dest.reopen()?);
        let mut len = 0;
        while let Some(chunk) = output.body.next().await {
            let chunk = chunk?;
            len += chunk.len();
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        // Stores may answer a missing key with an empty object; no stored file is empty.
        Ok(len > 0)
    }

    pub async fn store(&self, path: &str, data: ByteView<'static>) -> anyhow::Result<()> {
        self.client()
            .await
            .put_object()
            .bucket(&self.config.bucket)
            .key(self.key(path))
            // The mapped file itself, not a copy: original debug files run to gigabytes.
            .body(ByteStream::from(bytes::Bytes::from_owner(data)))
            .send()
            .await
            .map_err(failed)?;
        Ok(())
    }
}

/// Whether S3 answered that there is no such object.
/// An SDK error with its whole chain of causes in the message: the SDK's own `Display`
/// says only "service error".
fn failed<E: std::error::Error + Send + Sync + 'static>(err: E) -> anyhow::Error {
    anyhow::anyhow!("{}", aws_sdk_s3::error::DisplayErrorContext(err))
}

fn is_missing<E>(
    err: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> bool {
    err.raw_response()
        .is_some_and(|r| r.status().as_u16() == 404)
}
