//! JVM symbolication (`/symbolicate-jvm`): the request and response types, ProGuard
//! caches built from ProGuard/R8 mapping files, and remapping with them: exceptions,
//! stack frames (inlines, outlines, R8 rewrite rules, synthesized methods, Compose
//! group keys), class names, and source context from JVM source bundles.
//!
//! Finding and fetching mapping files and bundles is not done here: the caller fetches
//! what `SymbolicateJvmRequest::{mapping_ids, source_bundle_ids}` list, builds caches
//! with `mapping::{write_cache, load}`, and hands the outcomes to `symbolicate_jvm`.

mod classes;
pub mod interface;
pub mod mapping;
mod remap;
mod source_context;
mod symbolicate;

pub use interface::{CompletedJvmSymbolicationResponse, SymbolicateJvmRequest};
pub use mapping::{PROGUARD, ProguardMapper};
pub use source_context::{NoSources, SourceLookup, source_path};
pub use symbolicate::symbolicate_jvm;
