//! The upload protocols of other symbol servers, into the store (`crate::store`): each
//! front authorizes with the store's tokens, streams the body to the store's staging
//! area within `store.max_file_size`, checks what it received, and publishes it through
//! `Store::publish`. Nothing of an upload is published until all of it is checked.
//!
//! - `tecken`: Mozilla Tecken's `POST /upload/` (a zip of `<debug_file>/<debug_id>/
//!   <file>` entries, or a `url` to fetch one from a configured host), answered in
//!   Tecken's shapes and statuses.
//! - `symupload`: Breakpad's `symupload` (`POST /symupload`, its multipart form with
//!   `symbol_file`).
//! - `spool`: what both share (the token, streaming a form's file to the staging area,
//!   the refusal type).
//! - `archive`: the zip's entries checked and unpacked, bounded in count, size and ratio.

mod archive;
mod spool;
pub mod symupload;
pub mod tecken;
