//! Google Cloud Storage through its JSON API: OAuth tokens from a service-account key
//! (an RS256 JWT signed with `jsonwebtoken`, exchanged at the token endpoint), a ready
//! token, or the server's application-default credentials; tokens are cached and
//! refreshed before they expire. Emulators (a source's `endpoint` or the
//! `STORAGE_EMULATOR_HOST` environment variable) are reached without credentials unless
//! the source names some. Downloads themselves are plain HTTP with all its limits.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use url::Url;

use super::reserved_ip::{RESERVED_ADDRESS_MSG, url_has_reserved_ip_host};
use super::transfer::{read_capped, retrying, within_download_timeout};
use super::{Downloader, redact_url};
use crate::error::{CacheError, CacheResult};
use crate::sources::{GcsAuth, GcsSourceConfig, Secret, google_token_uri};

/// What a token may do: sources only read; the shared cache also writes.
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
const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
const JWT_LIFETIME: Duration = Duration::from_secs(3600);
/// Refresh this long before expiry at the latest, so no download starts with a token that
/// dies on the way.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
const MAX_TOKEN_ANSWER: usize = 64 * 1024;

/// An OAuth access token and when to stop using it.
#[derive(Debug)]
pub(super) struct GcsToken {
    bearer: Secret,
    refresh_at: Instant,
}

impl GcsToken {
    fn new(bearer: Secret, expires_in: Duration) -> Self {
        // Short-lived tokens are refreshed halfway, long-lived ones REFRESH_MARGIN early.
        let margin = REFRESH_MARGIN.min(expires_in / 2);
        GcsToken {
            bearer,
            refresh_at: Instant::now() + (expires_in - margin),
        }
    }

    fn needs_refresh(&self) -> bool {
        Instant::now() >= self.refresh_at
    }
}

pub(super) type GcsTokens = moka::future::Cache<(GcsAuth, GcsAccess), CacheResult<Arc<GcsToken>>>;

/// Server-side GCS settings read from the environment once, at start.
#[derive(Debug, Default, Clone)]
pub(super) struct GcsEnv {
    pub emulator: Option<Url>,
    pub credentials_file: Option<PathBuf>,
    pub metadata_host: String,
}

impl GcsEnv {
    pub fn from_env() -> Self {
        let emulator = std::env::var("STORAGE_EMULATOR_HOST")
            .ok()
            .filter(|host| !host.is_empty())
            .and_then(|host| {
                let with_scheme = if host.contains("://") {
                    host
                } else {
                    format!("http://{host}")
                };
                Url::parse(&with_scheme)
                    .inspect_err(
                        |err| tracing::warn!(%err, "ignoring invalid STORAGE_EMULATOR_HOST"),
                    )
                    .ok()
            });
        let credentials_file = std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS")
            .map(PathBuf::from)
            .or_else(|| {
                let home = std::env::var_os("HOME")?;
                let path =
                    PathBuf::from(home).join(".config/gcloud/application_default_credentials.json");
                path.is_file().then_some(path)
            });
        let metadata_host = std::env::var("GCE_METADATA_HOST")
            .unwrap_or_else(|_| "metadata.google.internal".to_owned());
        GcsEnv {
            emulator,
            credentials_file,
            metadata_host,
        }
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

/// The signed assertion of Google's service-account flow (RFC 7523).
pub(super) fn service_account_jwt(
    client_email: &str,
    private_key: &Secret,
    token_uri: &Url,
    access: GcsAccess,
    now: SystemTime,
) -> CacheResult<String> {
    let iat = now
        .duration_since(UNIX_EPOCH)
        .map_err(CacheError::internal)?
        .as_secs();
    let claims = Claims {
        iss: client_email,
        scope: access.scope(),
        aud: token_uri.as_str(),
        iat,
        exp: iat + JWT_LIFETIME.as_secs(),
    };
    // The parser's message describes the PEM structure only, never its content.
    let key = EncodingKey::from_rsa_pem(private_key.expose().as_bytes())
        .map_err(|err| CacheError::PermissionDenied(format!("invalid GCS private key: {err}")))?;
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).map_err(|err| {
        CacheError::PermissionDenied(format!("cannot sign GCS token request: {err}"))
    })
}

/// The object's download URL in the JSON API; the object name is one percent-encoded segment.
pub(crate) fn download_url(endpoint: Option<&Url>, bucket: &str, key: &str) -> CacheResult<Url> {
    let mut url = match endpoint {
        Some(endpoint) => endpoint.clone(),
        None => Url::parse(DEFAULT_ENDPOINT).map_err(CacheError::internal)?,
    };
    url.path_segments_mut()
        .map_err(|_| CacheError::DownloadError("the GCS endpoint cannot be a base URL".into()))?
        .pop_if_empty()
        .extend(["storage", "v1", "b", bucket, "o", key]);
    url.set_query(Some("alt=media"));
    Ok(url)
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default = "default_expires_in")]
    expires_in: u64,
}

fn default_expires_in() -> u64 {
    3600
}

#[derive(Deserialize)]
struct TokenRefusal {
    error: Option<String>,
    error_description: Option<String>,
}

/// An application-default credentials file.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum CredentialsFile {
    ServiceAccount {
        client_email: String,
        private_key: Secret,
        token_uri: Option<String>,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: Secret,
        refresh_token: Secret,
    },
}

/// How a token is requested.
enum TokenRequest {
    Form { url: Url, form: String },
    Metadata { url: Url },
}

impl Downloader {
    pub(super) async fn download_gcs(
        &self,
        source: &GcsSourceConfig,
        key: &str,
        dest: &mut tokio::fs::File,
    ) -> CacheResult<u64> {
        let auth = source
            .auth()
            .map_err(|err| CacheError::PermissionDenied(err.to_owned()))?;
        let endpoint = source
            .endpoint
            .as_ref()
            .or(self.inner.gcs_env.emulator.as_ref());
        let headers = self.gcs_headers(auth, endpoint, GcsAccess::Read).await?;
        let url = download_url(endpoint, &source.bucket, key)?;
        self.download_http(&url, &headers, dest).await
    }

    /// The authorisation header for `auth`; none for an emulator without credentials.
    pub(crate) async fn gcs_headers(
        &self,
        auth: GcsAuth,
        endpoint: Option<&Url>,
        access: GcsAccess,
    ) -> CacheResult<BTreeMap<String, String>> {
        let mut headers = BTreeMap::new();
        let anonymous = matches!(auth, GcsAuth::Default) && endpoint.is_some();
        if !anonymous {
            let token = self.gcs_token(auth, access).await?;
            headers.insert(
                "Authorization".to_owned(),
                format!("Bearer {}", token.expose()),
            );
        }
        Ok(headers)
    }

    /// The emulator named by `STORAGE_EMULATOR_HOST`, if any.
    pub(crate) fn gcs_emulator(&self) -> Option<&Url> {
        self.inner.gcs_env.emulator.as_ref()
    }

    async fn gcs_token(&self, auth: GcsAuth, access: GcsAccess) -> CacheResult<Secret> {
        if let GcsAuth::Token(token) = auth {
            return Ok(token);
        }
        let key = (auth, access);
        let init = self.request_gcs_token(&key.0, access);
        self.inner
            .gcs_tokens
            .entry_by_ref(&key)
            .or_insert_with_if(init, |cached| {
                cached.as_ref().map_or(true, |token| token.needs_refresh())
            })
            .await
            .into_value()
            .map(|token| token.bearer.clone())
    }

    async fn request_gcs_token(
        &self,
        auth: &GcsAuth,
        access: GcsAccess,
    ) -> CacheResult<Arc<GcsToken>> {
        // Keys from a request may name any token endpoint, so that one is reached like any
        // request-supplied URL. The server's own credentials are trusted, metadata server
        // included.
        let (request, client) = match auth {
            GcsAuth::ServiceAccount {
                client_email,
                private_key,
                token_uri,
            } => {
                if !self.config().connect_to_reserved_ips && url_has_reserved_ip_host(token_uri) {
                    return Err(CacheError::DownloadError(RESERVED_ADDRESS_MSG.to_owned()));
                }
                (
                    jwt_request(client_email, private_key, token_uri, access)?,
                    &self.inner.client,
                )
            }
            GcsAuth::Default => (
                self.default_credentials(access).await?,
                &self.inner.trusted_client,
            ),
            GcsAuth::Token(token) => {
                return Ok(Arc::new(GcsToken::new(token.clone(), JWT_LIFETIME)));
            }
        };
        let what = match &request {
            TokenRequest::Form { url, .. } | TokenRequest::Metadata { url } => redact_url(url),
        };
        let attempts = async { retrying!(&what, self.token_attempt(client, &request).await) };
        let token = within_download_timeout(self.config(), attempts).await;
        if let Err(err) = &token {
            tracing::warn!(endpoint = %what, error = %err, "GCS token request failed");
        }
        token.map(Arc::new)
    }

    async fn default_credentials(&self, access: GcsAccess) -> CacheResult<TokenRequest> {
        let Some(path) = &self.inner.gcs_env.credentials_file else {
            let url = Url::parse(&format!(
                "http://{}/computeMetadata/v1/instance/service-accounts/default/token",
                self.inner.gcs_env.metadata_host
            ))
            .map_err(|_| CacheError::DownloadError("invalid GCE_METADATA_HOST".into()))?;
            return Ok(TokenRequest::Metadata { url });
        };
        let unusable = |detail: String| {
            CacheError::PermissionDenied(format!(
                "application default credentials unusable: {detail}"
            ))
        };
        let text = tokio::fs::read(path)
            .await
            .map_err(|err| unusable(err.kind().to_string()))?;
        match serde_json::from_slice(&text).map_err(|err| unusable(err.to_string()))? {
            CredentialsFile::ServiceAccount {
                client_email,
                private_key,
                token_uri,
            } => {
                let token_uri = match token_uri {
                    Some(uri) => Url::parse(&uri).map_err(|err| unusable(err.to_string()))?,
                    None => google_token_uri(),
                };
                jwt_request(&client_email, &private_key, &token_uri, access)
            }
            CredentialsFile::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
            } => Ok(TokenRequest::Form {
                url: google_token_uri(),
                form: url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", "refresh_token")
                    .append_pair("client_id", &client_id)
                    .append_pair("client_secret", client_secret.expose())
                    .append_pair("refresh_token", refresh_token.expose())
                    .finish(),
            }),
        }
    }

    async fn token_attempt(
        &self,
        client: &reqwest::Client,
        request: &TokenRequest,
    ) -> CacheResult<GcsToken> {
        let builder = match request {
            TokenRequest::Form { url, form } => client
                .post(url.clone())
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form.clone()),
            TokenRequest::Metadata { url } => {
                let mut headers = HeaderMap::new();
                headers.insert("Metadata-Flavor", HeaderValue::from_static("Google"));
                client.get(url.clone()).headers(headers)
            }
        };
        let head = self.config().head_timeout;
        let response = match tokio::time::timeout(head, builder.send()).await {
            Err(_) => return Err(CacheError::Timeout(head)),
            Ok(Err(err)) => return Err(self.reqwest_error(err)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let body = read_capped(self, response, MAX_TOKEN_ANSWER).await?;
        if status.is_client_error() {
            // OAuth errors are codes and fixed texts ("invalid_grant", "Invalid JWT
            // Signature."), never the credentials themselves.
            let refusal: Option<TokenRefusal> = serde_json::from_slice(&body).ok();
            let detail = refusal
                .map(|r| {
                    [r.error, r.error_description]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(": ")
                })
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| status.to_string());
            return Err(CacheError::PermissionDenied(format!(
                "GCS token request refused: {detail}"
            )));
        }
        if !status.is_success() {
            return Err(CacheError::DownloadError(format!(
                "GCS token request failed: {status}"
            )));
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|err| CacheError::DownloadError(format!("invalid GCS token answer: {err}")))?;
        Ok(GcsToken::new(
            Secret::new(answer.access_token),
            Duration::from_secs(answer.expires_in),
        ))
    }
}

fn jwt_request(
    client_email: &str,
    private_key: &Secret,
    token_uri: &Url,
    access: GcsAccess,
) -> CacheResult<TokenRequest> {
    let jwt = service_account_jwt(
        client_email,
        private_key,
        token_uri,
        access,
        SystemTime::now(),
    )?;
    Ok(TokenRequest::Form {
        url: token_uri.clone(),
        form: url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
            .append_pair("assertion", &jwt)
            .finish(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use jsonwebtoken::{DecodingKey, Validation, decode};

    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/gcs")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn jwt_verifies_with_the_public_key() {
        let key = Secret::new(String::from_utf8(fixture("test-key.pem")).unwrap());
        let token_uri = google_token_uri();
        let now = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let jwt = service_account_jwt(
            "sa@p.iam.gserviceaccount.com",
            &key,
            &token_uri,
            GcsAccess::Read,
            now,
        )
        .unwrap();

        let public = DecodingKey::from_rsa_pem(&fixture("test-key.pub.pem")).unwrap();
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_audience(&[crate::sources::GOOGLE_TOKEN_URI]);
        validation.set_issuer(&["sa@p.iam.gserviceaccount.com"]);
        validation.validate_exp = false;
        let claims = decode::<serde_json::Value>(&jwt, &public, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["scope"], GcsAccess::Read.scope());
        assert_eq!(claims["iat"], 1_900_000_000u64);
        assert_eq!(claims["exp"], 1_900_003_600u64);

        // A signature by another key does not verify.
        let other = Secret::new(String::from_utf8(fixture("wrong-key.pem")).unwrap());
        let forged = service_account_jwt(
            "sa@p.iam.gserviceaccount.com",
            &other,
            &token_uri,
            GcsAccess::Read,
            now,
        )
        .unwrap();
        assert!(decode::<serde_json::Value>(&forged, &public, &validation).is_err());
    }

    #[test]
    fn bad_key_is_permission_denied_without_its_text() {
        let err = service_account_jwt(
            "sa@p",
            &Secret::new("-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----"),
            &google_token_uri(),
            GcsAccess::Read,
            SystemTime::now(),
        )
        .unwrap_err();
        assert!(matches!(err, CacheError::PermissionDenied(_)), "{err:?}");
        assert!(!err.to_string().contains("c2VjcmV0"));
    }

    #[test]
    fn download_urls_encode_the_object_name() {
        let url = download_url(None, "bucket", "ios/ab/cd ef/debuginfo").unwrap();
        assert_eq!(
            url.as_str(),
            "https://storage.googleapis.com/storage/v1/b/bucket/o/ios%2Fab%2Fcd%20ef%2Fdebuginfo?alt=media"
        );
        let emulator = Url::parse("http://127.0.0.1:4443/").unwrap();
        assert_eq!(
            download_url(Some(&emulator), "b", "k").unwrap().as_str(),
            "http://127.0.0.1:4443/storage/v1/b/b/o/k?alt=media"
        );
    }

    #[test]
    fn tokens_refresh_before_expiry() {
        let long = GcsToken::new(Secret::new("t"), Duration::from_secs(3600));
        assert!(!long.needs_refresh());
        assert!(long.refresh_at <= Instant::now() + Duration::from_secs(3300));
        let short = GcsToken::new(Secret::new("t"), Duration::ZERO);
        assert!(short.needs_refresh());
    }
}
