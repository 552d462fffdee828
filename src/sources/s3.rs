//! S3 (and S3-compatible) bucket sources, as upstream's `S3SourceConfig`.

use std::fmt;

use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use url::Url;

use super::bucket::{bucket_key, bucket_uri};
use super::common::{CommonSourceConfig, DigestCells, SourceId};
use super::secret::Secret;

/// An S3 bucket.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct S3SourceConfig {
    pub id: SourceId,
    pub bucket: String,
    /// Path inside the bucket under which the layout starts.
    #[serde(default)]
    pub prefix: String,
    pub region: S3Region,
    #[serde(default)]
    pub aws_credentials_provider: AwsCredentialsProvider,
    #[serde(default)]
    pub access_key: String,
    #[serde(default)]
    pub secret_key: Secret,
    #[serde(flatten)]
    pub files: CommonSourceConfig,
    /// This config's digests, computed on first use (see `SourceConfig::fingerprint`).
    #[serde(skip)]
    pub digests: DigestCells,
}

impl S3SourceConfig {
    pub fn key(&self, location: &str) -> String {
        bucket_key(&self.prefix, location)
    }

    pub fn uri(&self, location: &str) -> String {
        bucket_uri("s3", &self.bucket, &self.key(location))
    }

    /// Static keys, or `None` when the server's own AWS credentials are to be used.
    ///
    /// Upstream only knows static keys and ECS container credentials; omnisym takes
    /// `container`, or a config without keys, to mean the whole default chain (environment,
    /// profile, web identity, container, instance metadata), which includes the container.
    pub fn static_keys(&self) -> Option<(&str, &Secret)> {
        let no_keys = self.access_key.is_empty() && self.secret_key.is_empty();
        match self.aws_credentials_provider {
            AwsCredentialsProvider::Static if !no_keys => {
                Some((&self.access_key, &self.secret_key))
            }
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AwsCredentialsProvider {
    #[default]
    Static,
    Container,
}

/// An AWS region name, or a name and an endpoint for S3-compatible stores (MinIO, Ceph),
/// written `[name, endpoint]`. With an endpoint, buckets are addressed path-style.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct S3Region {
    pub name: String,
    pub endpoint: Option<Url>,
}

impl Serialize for S3Region {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.endpoint {
            Some(endpoint) => {
                let mut tuple = serializer.serialize_tuple(2)?;
                tuple.serialize_element(&self.name)?;
                tuple.serialize_element(endpoint.as_str())?;
                tuple.end()
            }
            None => serializer.serialize_str(&self.name),
        }
    }
}

impl<'de> Deserialize<'de> for S3Region {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = S3Region;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a region name or a [name, endpoint] pair")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<S3Region, E> {
                if name.is_empty() {
                    return Err(E::custom("the region name is empty"));
                }
                Ok(S3Region {
                    name: name.to_owned(),
                    endpoint: None,
                })
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<S3Region, A::Error> {
                use serde::de::Error;
                let (name, endpoint): (String, String) =
                    Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                let endpoint = Url::parse(&endpoint)
                    .map_err(|e| A::Error::custom(format!("invalid endpoint {endpoint:?}: {e}")))?;
                if !matches!(endpoint.scheme(), "http" | "https") {
                    return Err(A::Error::custom("the endpoint must be an http(s) URL"));
                }
                Ok(S3Region {
                    name,
                    endpoint: Some(endpoint),
                })
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{DirectoryLayoutType, SourceConfig};

    fn s3(yaml: &str) -> S3SourceConfig {
        match serde_yaml_ng::from_str::<SourceConfig>(yaml).unwrap() {
            SourceConfig::S3(c) => (*c).clone(),
            other => panic!("not s3: {other:?}"),
        }
    }

    #[test]
    fn builtin_region() {
        let c = s3(
            "id: us-east\ntype: s3\nbucket: b\nregion: us-east-1\naccess_key: ak\nsecret_key: sk\nlayout: {type: unified}\nextra: ignored\n",
        );
        assert_eq!(c.region.name, "us-east-1");
        assert_eq!(c.region.endpoint, None);
        assert_eq!(c.files.layout.ty, DirectoryLayoutType::Unified);
        assert_eq!(
            c.static_keys().map(|(a, s)| (a, s.expose())),
            Some(("ak", "sk"))
        );
        assert!(!format!("{c:?}").contains("sk\""), "{c:?}");
    }

    #[test]
    fn custom_region_is_path_style_endpoint() {
        let c = s3(
            "id: m\ntype: s3\nbucket: b\nprefix: /p/\nregion: [minio, 'http://minio.local:9000']\n",
        );
        assert_eq!(c.region.name, "minio");
        assert_eq!(
            c.region.endpoint.as_ref().map(Url::as_str),
            Some("http://minio.local:9000/")
        );
        assert_eq!(c.key("ab/cd/debuginfo"), "p/ab/cd/debuginfo");
        assert_eq!(c.uri("ab/cd"), "s3://b/p/ab/cd");
        // No keys: the default credential chain.
        assert!(c.static_keys().is_none());
        let value = serde_json::to_value(&c).unwrap();
        assert_eq!(
            value["region"],
            serde_json::json!(["minio", "http://minio.local:9000/"])
        );
    }

    #[test]
    fn container_provider_ignores_keys() {
        let c = s3(
            "id: c\ntype: s3\nbucket: b\nregion: eu-west-1\naws_credentials_provider: container\naccess_key: a\nsecret_key: s\n",
        );
        assert_eq!(
            c.aws_credentials_provider,
            AwsCredentialsProvider::Container
        );
        assert!(c.static_keys().is_none());
    }

    #[test]
    fn bad_regions_are_errors() {
        for region in [
            "",
            "[]",
            "[honk]",
            "[a, 'http://x', c]",
            "[a, 'not a url']",
            "[a, 'file:///x']",
            "~",
        ] {
            let yaml = format!("id: x\ntype: s3\nbucket: b\nregion: {region}\n");
            assert!(
                serde_yaml_ng::from_str::<SourceConfig>(&yaml).is_err(),
                "{region}"
            );
        }
    }

    #[test]
    fn secret_key_is_not_serialised() {
        let c = s3("id: x\ntype: s3\nbucket: b\nregion: r\naccess_key: a\nsecret_key: topsecret\n");
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("topsecret"), "{json}");
    }
}
