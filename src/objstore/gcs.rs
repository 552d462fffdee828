//! GCS clients through the `google-cloud-storage` crate, with credentials from
//! `google-cloud-auth` (a service-account key, inline in a source or a store's key file;
//! a ready token; the server's application-default credentials; or none, for an
//! emulator), and the objects of a bucket the operator configured. Emulators are an
//! `endpoint` or the `STORAGE_EMULATOR_HOST` environment variable, which the crate
//! itself does not read. The crate builds its own HTTP client and takes no resolver:
//! `fetch/` applies the reserved-IP rule to a source's endpoint before each request; the
//! operator's own store is not filtered.

use std::path::Path;

use google_cloud_auth::credentials::service_account::AccessSpecifier;
use google_cloud_auth::credentials::{
    self, CacheableResource, Credentials, CredentialsProvider, EntityTag, anonymous,
    service_account,
};
use google_cloud_auth::errors::CredentialsError;
use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_storage::client::Storage;
use google_cloud_storage::read_resume_policy::NeverResume;
use http::{HeaderMap, HeaderValue, header::AUTHORIZATION};
use symbolic::common::ByteView;
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;
use url::Url;

use super::GcsStoreConfig;
use super::object_key;
use crate::error::{CacheError, CacheResult};
use crate::sources::{GcsAuth, Secret};

/// What credentials may do: sources only read; the operator's own stores also write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GcsAccess {
    Read,
    Write,
}

impl GcsAccess {
    fn scope(self) -> &'static str {
        match self {
            GcsAccess::Read => "https://www.googleapis.com/auth/devstorage.read_only",
            GcsAccess::Write => "https://www.googleapis.com/auth/devstorage.read_write",
        }
    }
}

/// Where the crate sends requests unless an endpoint says otherwise.
pub(crate) const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
/// The only universe omnisym serves. Naming it keeps the crate from asking the metadata
/// server for it when a client is built on application-default credentials.
const UNIVERSE_DOMAIN: &str = "googleapis.com";

/// The emulator named by `STORAGE_EMULATOR_HOST`, read once at start.
pub(crate) fn emulator_from_env() -> Option<Url> {
    let host = std::env::var("STORAGE_EMULATOR_HOST")
        .ok()
        .filter(|host| !host.is_empty())?;
    let with_scheme = if host.contains("://") {
        host
    } else {
        format!("http://{host}")
    };
    Url::parse(&with_scheme)
        .inspect_err(|err| tracing::warn!(%err, "ignoring invalid STORAGE_EMULATOR_HOST"))
        .ok()
}

/// A ready OAuth token (upstream's `bearer_token`), sent as it is.
struct BearerToken {
    header: HeaderMap,
    tag: EntityTag,
}

impl BearerToken {
    fn new(token: &Secret) -> CacheResult<Self> {
        let mut value = HeaderValue::try_from(format!("Bearer {}", token.expose()))
            .map_err(|_| CacheError::PermissionDenied("invalid GCS bearer token".into()))?;
        value.set_sensitive(true);
        let mut header = HeaderMap::new();
        header.insert(AUTHORIZATION, value);
        Ok(BearerToken {
            header,
            tag: EntityTag::new(),
        })
    }
}

// Hand-written so the token can never be printed.
impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken([redacted])")
    }
}

impl CredentialsProvider for BearerToken {
    async fn headers(
        &self,
        _: http::Extensions,
    ) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
        Ok(CacheableResource::New {
            entity_tag: self.tag.clone(),
            data: self.header.clone(),
        })
    }

    async fn universe_domain(&self) -> Option<String> {
        Some(UNIVERSE_DOMAIN.to_owned())
    }
}

/// Credentials for `auth`. Without credentials of its own, a source with an endpoint is
/// read anonymously rather than with the server's: an endpoint can come from a request,
/// and the server's token must only ever go to Google.
pub(crate) fn credentials(
    auth: &GcsAuth,
    endpoint: Option<&Url>,
    access: GcsAccess,
) -> CacheResult<Credentials> {
    let unusable = |err: &dyn std::fmt::Display| {
        CacheError::PermissionDenied(format!("GCS credentials unusable: {err}"))
    };
    match auth {
        GcsAuth::ServiceAccount {
            client_email,
            private_key,
            private_key_id,
        } => {
            // The fields of a key file the crate needs; upstream's configs have only the
            // first two, so the others are empty unless given.
            let key = serde_json::json!({
                "type": "service_account",
                "client_email": client_email,
                "private_key": private_key.expose(),
                "private_key_id": private_key_id.as_deref().unwrap_or_default(),
                "project_id": "",
            });
            service_account::Builder::new(key)
                .with_access_specifier(AccessSpecifier::from_scopes([access.scope()]))
                .build()
                .map_err(|err| unusable(&err))
        }
        GcsAuth::Token(token) => Ok(BearerToken::new(token)?.into()),
        GcsAuth::Anonymous => Ok(anonymous::Builder::new().build()),
        GcsAuth::Default if endpoint.is_some() => Ok(anonymous::Builder::new().build()),
        GcsAuth::Default => credentials::Builder::default()
            .with_scopes([access.scope()])
            .with_universe_domain(UNIVERSE_DOMAIN)
            .build()
            .map_err(|err| unusable(&err)),
    }
}

/// Credentials from a service-account key file (a store's `service_account_path`).
pub(crate) fn key_file_credentials(path: &Path, access: GcsAccess) -> anyhow::Result<Credentials> {
    let text = std::fs::read(path)
        .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", path.display()))?;
    let key: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|err| anyhow::anyhow!("{} is no JSON key file: {err}", path.display()))?;
    service_account::Builder::new(key)
        .with_access_specifier(AccessSpecifier::from_scopes([access.scope()]))
        .build()
        .map_err(|err| anyhow::anyhow!("{} is no service account key: {err}", path.display()))
}

/// A client for `endpoint` (default Google's). With `retries` off, every failure comes
/// back at once, so that the caller's own retry and time rules are the only ones.
pub(crate) async fn build_client(
    credentials: Credentials,
    endpoint: Option<&Url>,
    retries: bool,
) -> anyhow::Result<Storage> {
    let base = endpoint.map_or(DEFAULT_ENDPOINT, |url| url.as_str().trim_end_matches('/'));
    let mut builder = Storage::builder()
        .with_credentials(credentials)
        .with_endpoint(base)
        // omnisym reads over JSON only; the gRPC side connects lazily and one channel is
        // all it would ever need.
        .with_grpc_subchannel_count(1);
    if endpoint.is_some_and(|url| url.port().is_some()) {
        // The crate's Host header leaves out the endpoint's port. An emulator that builds
        // the URL of a chunked (resumable) upload from that header (fake-gcs-server) sends
        // the rest of the upload to the wrong port, so such endpoints get whole uploads.
        builder = builder.with_resumable_upload_threshold(usize::MAX);
    }
    if !retries {
        builder = builder
            .with_retry_policy(NeverRetry)
            .with_read_resume_policy(NeverResume);
    }
    Ok(builder.build().await?)
}

/// The crate's name for a bucket.
pub(crate) fn bucket_name(bucket: &str) -> String {
    format!("projects/_/buckets/{bucket}")
}

/// A bucket of the operator's: the same credentials read and write, and its client,
/// built on first use (building needs the runtime), keeps the crate's own retries.
pub(super) struct GcsStore {
    /// The crate's name for it.
    bucket: String,
    prefix: String,
    endpoint: Option<Url>,
    credentials: Credentials,
    client: OnceCell<Storage>,
}

impl GcsStore {
    pub fn new(config: &GcsStoreConfig) -> anyhow::Result<Self> {
        let endpoint = config.endpoint.clone().or_else(emulator_from_env);
        Ok(GcsStore {
            bucket: bucket_name(&config.bucket),
            prefix: config.prefix.clone(),
            credentials: store_credentials(config, endpoint.as_ref())?,
            endpoint,
            client: OnceCell::new(),
        })
    }

    async fn client(&self) -> anyhow::Result<&Storage> {
        // The store is the operator's (often on a private network, so the reserved-IP rule
        // does not apply), and a lost lookup or upload only costs a computation: the
        // crate's own retries are welcome here.
        self.client
            .get_or_try_init(|| {
                build_client(self.credentials.clone(), self.endpoint.as_ref(), true)
            })
            .await
    }

    pub async fn fetch(&self, path: &str, dest: &mut NamedTempFile) -> anyhow::Result<bool> {
        let answer = self
            .client()
            .await?
            .read_object(&self.bucket, object_key(&self.prefix, path))
            .send()
            .await;
        let mut response = match answer {
            Ok(response) => response,
            Err(err) if err.http_status_code() == Some(404) => return Ok(false),
            Err(err) => return Err(err.into()),
        };
        let mut file = tokio::fs::File::from_std(dest.reopen()?);
        let mut len = 0;
        while let Some(chunk) = response.next().await.transpose()? {
            len += chunk.len();
            file.write_all(&chunk).await?;
        }
        file.flush().await?;
        Ok(len > 0)
    }

    /// The object's size, as GCS states it when sending the first byte; a store that
    /// does not state it (emulators) has the object counted as it is read through.
    pub async fn size(&self, path: &str) -> anyhow::Result<Option<u64>> {
        use google_cloud_storage::model_ext::ReadRange;
        let client = self.client().await?;
        let key = object_key(&self.prefix, path);
        let answer = client
            .read_object(&self.bucket, &key)
            .set_read_range(ReadRange::head(1))
            .send()
            .await;
        match answer {
            Ok(response) if response.object().size > 0 => Ok(Some(response.object().size as u64)),
            Ok(_) => {
                let mut response = client.read_object(&self.bucket, &key).send().await?;
                let mut size = 0;
                while let Some(chunk) = response.next().await.transpose()? {
                    size += chunk.len() as u64;
                }
                Ok(Some(size))
            }
            Err(err) if err.http_status_code() == Some(404) => Ok(None),
            // The range of an empty object is not satisfiable.
            Err(err) if err.http_status_code() == Some(416) => Ok(Some(0)),
            Err(err) => Err(err.into()),
        }
    }

    pub async fn store(&self, path: &str, data: ByteView<'static>) -> anyhow::Result<()> {
        self.client()
            .await?
            .write_object(
                &self.bucket,
                object_key(&self.prefix, path),
                bytes::Bytes::from_owner(data),
            )
            // Buffered, the crate sends the checksums ahead of the data rather than in a
            // trailing multipart part, which emulators (fake-gcs-server) take for data.
            .send_buffered()
            .await?;
        Ok(())
    }
}

/// The store is the operator's own: the same credentials read and write.
fn store_credentials(
    config: &GcsStoreConfig,
    endpoint: Option<&Url>,
) -> anyhow::Result<Credentials> {
    match &config.service_account_path {
        Some(path) => key_file_credentials(path, GcsAccess::Write),
        None => Ok(credentials(&GcsAuth::Default, endpoint, GcsAccess::Write)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Credentials start their token refresher on the runtime.
    #[tokio::test]
    async fn store_credentials_come_from_the_service_account_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = |path: Option<std::path::PathBuf>| GcsStoreConfig {
            bucket: "b".into(),
            prefix: String::new(),
            service_account_path: path,
            endpoint: None,
        };
        let emulator = Url::parse("http://127.0.0.1:4443").unwrap();
        assert!(store_credentials(&config(None), Some(&emulator)).is_ok());
        let pem = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gcs/test-key.pem"),
        )
        .unwrap();
        let key = dir.path().join("key.json");
        let json = serde_json::json!({"type": "service_account", "client_email": "sa@p.iam",
            "private_key": pem, "private_key_id": "k1", "project_id": "p"});
        std::fs::write(&key, json.to_string()).unwrap();
        assert!(store_credentials(&config(Some(key)), None).is_ok());

        let missing = dir.path().join("missing.json");
        let err = store_credentials(&config(Some(missing)), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.json"), "{err}");
        let not_a_key = dir.path().join("not-a-key.json");
        std::fs::write(&not_a_key, r#"{"type": "service_account"}"#).unwrap();
        let err = store_credentials(&config(Some(not_a_key)), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no service account key"), "{err}");
    }

    #[tokio::test]
    async fn tokens_never_show_and_emulators_get_no_credentials() {
        let token = BearerToken::new(&Secret::new("ya29.secret")).unwrap();
        assert!(!format!("{token:?}").contains("ya29"));
        let creds: Credentials = token.into();
        let CacheableResource::New { data, .. } =
            creds.headers(http::Extensions::new()).await.unwrap()
        else {
            panic!("a token is always new")
        };
        assert_eq!(data[AUTHORIZATION], "Bearer ya29.secret");
        assert!(data[AUTHORIZATION].is_sensitive());

        let emulator = Url::parse("http://127.0.0.1:4443").unwrap();
        for (auth, endpoint) in [
            (GcsAuth::Default, Some(&emulator)),
            (GcsAuth::Anonymous, None),
        ] {
            let anonymous = credentials(&auth, endpoint, GcsAccess::Read).unwrap();
            let CacheableResource::New { data, .. } =
                anonymous.headers(http::Extensions::new()).await.unwrap()
            else {
                panic!("anonymous headers are always new")
            };
            assert!(data.is_empty(), "{auth:?}");
        }
    }
}
