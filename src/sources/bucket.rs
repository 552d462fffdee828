//! Object keys and display URIs for bucket sources (S3, GCS).

use url::Url;

/// The object key of `location` below `prefix` in a bucket.
///
/// Like upstream, slashes around the prefix are trimmed. Empty, `.` and `..` segments of the
/// location are dropped, as for HTTP and filesystem sources: object stores do not resolve dot
/// segments themselves, but some S3-compatible servers and proxies in front of them do.
pub fn bucket_key(prefix: &str, location: &str) -> String {
    let mut key = prefix.trim_matches('/').to_owned();
    for segment in location
        .split('/')
        .filter(|s| !matches!(*s, "" | "." | ".."))
    {
        if !key.is_empty() {
            key.push('/');
        }
        key.push_str(segment);
    }
    key
}

/// `scheme://bucket/key` with the key percent-encoded, as upstream shows it in candidates
/// (`s3://bucket/a/b`, `gs://bucket/path%20with/spaces`).
pub fn bucket_uri(scheme: &str, bucket: &str, key: &str) -> String {
    Url::parse(&format!("{scheme}://{bucket}/"))
        .and_then(|base| base.join(key))
        .map(String::from)
        // Only a bucket name that is no valid host gets here; show it as it is.
        .unwrap_or_else(|_| format!("{scheme}://{bucket}/{key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_like_upstream() {
        assert_eq!(bucket_key("", "spam/ham"), "spam/ham");
        assert_eq!(bucket_key("eggs", "spam/ham"), "eggs/spam/ham");
        assert_eq!(bucket_key("/eggs/bacon/", "spam"), "eggs/bacon/spam");
        assert_eq!(bucket_key("//eggs//", "spam"), "eggs/spam");
        assert_eq!(bucket_key("p", "../a//./b"), "p/a/b");
        assert_eq!(bucket_key("", "/a"), "a");
    }

    #[test]
    fn uris_like_upstream() {
        assert_eq!(bucket_uri("s3", "bucket", "path"), "s3://bucket/path");
        assert_eq!(
            bucket_uri("gs", "bucket", "prefix/a/key/with spaces"),
            "gs://bucket/prefix/a/key/with%20spaces"
        );
        assert_eq!(
            bucket_uri("s3", "bad bucket", "k"),
            "s3://bad bucket/k",
            "falls back instead of failing"
        );
    }
}
