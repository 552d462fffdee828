//! Credentials inside source configs (tokens, secret keys, private keys).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const REDACTED: &str = "[redacted]";

/// A credential from a source config. Its `Debug`, `Display` and `Serialize` forms are all
/// `[redacted]`: source configs end up in logs, error texts and debug dumps, and none of those
/// may carry the credential. Only [`Secret::expose`] reveals it, at the one place that sends it.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a credential a client presented is this one. Both are hashed first and the
    /// digests compared without stopping at the first difference, so the time taken
    /// tells neither how much of a guess was right nor how long the secret is.
    pub fn matches(&self, given: &str) -> bool {
        use sha2::{Digest, Sha256};
        let given = Sha256::digest(given.as_bytes());
        let expected = Sha256::digest(self.0.as_bytes());
        given
            .iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_shown() {
        let secret: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(secret.expose(), "hunter2");
        assert!(!format!("{secret:?} {secret} {secret:#?}").contains("hunter2"));
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"[redacted]\"");
        assert!(Secret::default().is_empty());
    }

    #[test]
    fn presented_credentials_compare_whole() {
        let secret = |s: &str| Secret::new(s);
        assert!(secret("s3cret").matches("s3cret"));
        assert!(!secret("s3cres").matches("s3cret"));
        assert!(!secret("s3cret").matches("s3cre"));
        assert!(!secret("s3cret").matches(""));
    }
}
