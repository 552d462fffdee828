//! The configs of an object store: which backend, and where in it.

use std::path::PathBuf;

use serde::Deserialize;
use url::Url;

use crate::sources::{S3Region, Secret};

/// One object store, as its config block names it (`filesystem:`, `s3:` or `gcs:`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStoreConfig {
    /// A directory every replica mounts (NFS, a shared volume).
    Filesystem { path: PathBuf },
    /// An S3 bucket, or any store speaking S3 (MinIO, Ceph). `region: [name, endpoint]`
    /// as for S3 sources.
    S3(S3StoreConfig),
    /// A GCS bucket.
    Gcs(GcsStoreConfig),
}

#[derive(Clone, Debug, Deserialize)]
pub struct GcsStoreConfig {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    /// A service account key file (JSON). Without one: application-default credentials
    /// (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, or the metadata server), or none
    /// for an emulator.
    #[serde(default)]
    pub service_account_path: Option<PathBuf>,
    /// Another JSON-API endpoint, e.g. an emulator (omnisym only; also taken from
    /// `STORAGE_EMULATOR_HOST`). An emulator without credentials is used anonymously.
    #[serde(default)]
    pub endpoint: Option<Url>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct S3StoreConfig {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    pub region: S3Region,
    /// Empty: the server's own AWS credentials (default chain).
    #[serde(default)]
    pub access_key: String,
    #[serde(default)]
    pub secret_key: Secret,
}
