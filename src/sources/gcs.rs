//! Google Cloud Storage bucket sources, as upstream's `GcsSourceConfig`, plus an optional
//! `endpoint` (an emulator or a GCS-compatible server) and `private_key_id`.

use serde::{Deserialize, Serialize};
use url::Url;

use super::bucket::{bucket_key, bucket_uri};
use super::common::{CommonSourceConfig, DigestCells, SourceId, optional_url_as_string};
use super::secret::Secret;

/// A GCS bucket.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GcsSourceConfig {
    pub id: SourceId,
    pub bucket: String,
    /// Path inside the bucket under which the layout starts.
    #[serde(default)]
    pub prefix: String,
    /// PEM (PKCS#8) private key of a service account, used with `client_email`.
    #[serde(default)]
    pub private_key: Option<Secret>,
    #[serde(default)]
    pub client_email: Option<String>,
    /// The key file's `private_key_id`, sent as the signed JWT's `kid` so Google knows
    /// which of the account's keys signed it (omnisym only: upstream's configs lack it).
    #[serde(default)]
    pub private_key_id: Option<String>,
    /// A ready OAuth token, used as it is (upstream's alternative to a key).
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Base URL of the JSON API; default `https://storage.googleapis.com`, or the
    /// `STORAGE_EMULATOR_HOST` of the server's environment.
    #[serde(default, with = "optional_url_as_string")]
    pub endpoint: Option<Url>,
    #[serde(flatten)]
    pub files: CommonSourceConfig,
    /// This config's digests, computed on first use (see `SourceConfig::fingerprint`).
    #[serde(skip)]
    pub digests: DigestCells,
}

/// How requests to a GCS source are authorised.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GcsAuth {
    ServiceAccount {
        client_email: String,
        private_key: Secret,
        private_key_id: Option<String>,
    },
    Token(Secret),
    /// Nothing given: the server's application-default credentials, or no authorisation
    /// at all when talking to an emulator.
    Default,
    /// No authorisation: nothing given, and the server's own credentials are not for
    /// this source (one a request names).
    Anonymous,
}

impl GcsSourceConfig {
    pub fn key(&self, location: &str) -> String {
        bucket_key(&self.prefix, location)
    }

    pub fn uri(&self, location: &str) -> String {
        bucket_uri("gs", &self.bucket, &self.key(location))
    }

    /// The credentials this source names. A key without an email (or the reverse) is an
    /// error, reported as such rather than silently falling back to other credentials.
    pub fn auth(&self) -> Result<GcsAuth, &'static str> {
        let key = self.private_key.as_ref().filter(|k| !k.is_empty());
        let email = self.client_email.as_deref().filter(|e| !e.is_empty());
        match (key, email) {
            (Some(key), Some(email)) => Ok(GcsAuth::ServiceAccount {
                client_email: email.to_owned(),
                private_key: key.clone(),
                private_key_id: self.private_key_id.clone().filter(|id| !id.is_empty()),
            }),
            (Some(_), None) => Err("private_key is set but client_email is not"),
            (None, Some(_)) => Err("client_email is set but private_key is not"),
            (None, None) => Ok(match self.bearer_token.as_ref().filter(|t| !t.is_empty()) {
                Some(token) => GcsAuth::Token(token.clone()),
                None => GcsAuth::Default,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::SourceConfig;

    fn gcs(json: &str) -> GcsSourceConfig {
        match serde_json::from_str::<SourceConfig>(json).unwrap() {
            SourceConfig::Gcs(c) => (*c).clone(),
            other => panic!("not gcs: {other:?}"),
        }
    }

    #[test]
    fn service_account_from_request() {
        let c = gcs(
            r#"{"type": "gcs", "id": "g", "bucket": "b", "prefix": "/ios",
            "private_key": "-----BEGIN PRIVATE KEY-----xyz", "client_email": "a@b.iam", "name": "x",
            "private_key_id": "k1"}"#,
        );
        assert_eq!(c.key("e5/14/executable"), "ios/e5/14/executable");
        assert_eq!(c.uri("a/key/with spaces"), "gs://b/ios/a/key/with%20spaces");
        let GcsAuth::ServiceAccount {
            client_email,
            private_key_id,
            ..
        } = c.auth().unwrap()
        else {
            panic!()
        };
        assert_eq!(client_email, "a@b.iam");
        assert_eq!(private_key_id.as_deref(), Some("k1"));
        let shown = format!("{c:?} {}", serde_json::to_string(&c).unwrap());
        assert!(!shown.contains("xyz"), "{shown}");
    }

    #[test]
    fn token_default_and_half_keys() {
        let c = gcs(r#"{"type": "gcs", "id": "g", "bucket": "b", "bearer_token": "t0k"}"#);
        assert_eq!(c.auth().unwrap(), GcsAuth::Token(Secret::new("t0k")));
        let c = gcs(
            r#"{"type": "gcs", "id": "g", "bucket": "b", "endpoint": "http://127.0.0.1:4443"}"#,
        );
        assert_eq!(c.auth().unwrap(), GcsAuth::Default);
        assert_eq!(c.endpoint.unwrap().as_str(), "http://127.0.0.1:4443/");
        let c = gcs(r#"{"type": "gcs", "id": "g", "bucket": "b", "client_email": "a@b"}"#);
        assert!(c.auth().is_err());
        let c = gcs(r#"{"type": "gcs", "id": "g", "bucket": "b", "private_key": "k"}"#);
        assert!(c.auth().is_err());
        assert!(
            serde_json::from_str::<SourceConfig>(
                r#"{"type": "gcs", "id": "g", "bucket": "b", "endpoint": "::"}"#
            )
            .is_err()
        );
    }
}
