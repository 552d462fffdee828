//! Symbol sources: how sources are configured (`SourceConfig` and its per-type configs:
//! filesystem, http, sentry, s3, gcs, with credentials kept in `Secret`s that never print),
//! which file types exist and which ones an object needs (`FileType`, `ObjectType`,
//! `ObjectId`), which sources may be asked at all (`SourceFilters`), what a symstore's own
//! index lists (`index`), and where on a source a
//! file is expected (`get_directory_paths` for every directory layout and casing, plus joining
//! such a location onto an HTTP base URL, a filesystem root or a bucket prefix), and the pure
//! parts of the Sentry search protocol (query URLs, answers, pagination links).
//!
//! Everything here is pure and mirrors upstream Symbolicator's `symbolicator-sources` crate,
//! so that request JSON and probed locations are wire-compatible.
//!
//! # Locations never escape the source root
//!
//! Locations are built from request data, so they are treated as hostile. Two independent
//! layers keep them inside the configured base:
//!
//! 1. Generation: the only free-form text that goes into a location is the basename of
//!    `code_file`/`debug_file`. It is split on both `/` and `\`, so it cannot contain either,
//!    and it is rejected (no location is produced) when it is empty, `.` or `..`, 256 bytes or
//!    longer, or contains control characters. Everything else in a location is hex digits from
//!    a `CodeId`/`DebugId` or a fixed literal, and casing and the `_` compression variant only
//!    touch ASCII letters and the final character. Every segment is thus a plain file name.
//! 2. Joining: [`HttpSourceConfig::join_url`] and [`FilesystemSourceConfig::join_path`] split a
//!    location on `/`, drop empty, `.` and `..` segments (also ones that only become `..` after
//!    the URL parser strips tabs/newlines), and append the rest as single, percent-encoded URL
//!    segments or single path components. This holds for any input string, not just
//!    generated locations.

mod bucket;
mod common;
mod config;
mod filesystem;
mod filetype;
mod filters;
mod gcs;
mod http;
pub mod index;
mod paths;
mod s3;
mod secret;
mod sentry;
mod types;

pub use common::{
    CommonSourceConfig, DigestCells, DirectoryLayout, DirectoryLayoutType, FilenameCasing,
    STORE_SOURCE_ID, SourceId,
};
pub use config::SourceConfig;
pub use filesystem::FilesystemSourceConfig;
pub use filetype::FileType;
pub use filters::{Glob, SourceFilters, matches_path_patterns};
pub use gcs::{GcsAuth, GcsSourceConfig};
pub use http::{Headers, HttpSourceConfig};
pub use paths::{get_directory_paths, js_artifact_path, parse_symstore_path, source_locations};
pub use s3::{AwsCredentialsProvider, S3Region, S3SourceConfig};
pub use secret::Secret;
pub use sentry::{
    SentryFileInfo, SentrySourceConfig, next_page, parse_search_answer, sentry_file_uri,
};
pub use types::{ObjectId, ObjectType};
