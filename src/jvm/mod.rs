//! JVM symbolication (`/symbolicate-jvm`): the request and response types, ProGuard
//! caches built from ProGuard/R8 mapping files, and remapping with them: exceptions,
//! stack frames (inlines, outlines, R8 rewrite rules, synthesized methods, Compose
//! group keys), class names, and source context from JVM source bundles.
//!
//! `service` finds and fetches the mapping files and bundles a request lists through
//! the shared lookup, keeps a ProGuard cache per mapping file (a derived cache), and
//! hands the outcomes to the pure `symbolicate_jvm`.

mod classes;
pub mod interface;
pub mod mapping;
mod remap;
mod service;
mod source_context;
mod symbolicate;

pub use interface::{CompletedJvmSymbolicationResponse, SymbolicateJvmRequest};
pub use mapping::ProguardMapper;
pub use service::JvmService;
pub use source_context::{NoSources, SourceLookup, source_path};
pub use symbolicate::symbolicate_jvm;
