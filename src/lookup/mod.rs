//! Finding and fetching the files that serve a module or an artifact, for every
//! platform pipeline: where a file could be on each source (`locate`: the source's
//! layout or Sentry's search, filtered by symstore indexes), downloading it once into
//! the cache in any format (`downloads`: object files, source files, and whatever a
//! platform reads itself, named by a source location or by a whole URL), object files
//! and their ranking for a purpose with the candidate report (`objects`,
//! `object_file`), caches derived from the best object file (`derived`) and the files
//! beside it that they are built from too (`secondary`), and source files for source
//! context (`source_files`).
//!
//! Pipelines (`native`, `js`, `jvm`) call this module; it never calls them.

mod compressed_sections;
mod derived;
mod downloads;
mod embedded_sources;
pub mod fat64;
mod index;
mod locate;
mod object_file;
mod objects;
mod pdb_header;
mod secondary;
mod source_files;

use std::sync::Arc;

pub use derived::{
    Derived, ObjectDerived, ObjectDerivedFormat, Progress, UsedCandidate, join_build,
};
pub use downloads::{Downloads, FileFormat, Plain, PlainFormat, file_key};
pub use locate::Locator;
pub use object_file::{
    BundledSource, ObjectFile, ObjectHandle, ObjectHint, ObjectLimits, ObjectMeta, SymbolicObject,
    source_map_file_name, source_mapping_url,
};
pub use objects::{FindResult, FoundObject, ObjectLookup, ObjectPurpose};
pub use secondary::{SecondaryFile, SecondaryInputs, first_found};
pub use source_files::{
    SourceFiles, context_lines, context_lines_by, fetchable_link, sourcelink_candidate,
};

use crate::cache::Caches;
use crate::fetch::Downloader;

/// What every pipeline shares: one locator (and its symstore indexes), one object-file
/// cache, one source-file cache.
pub struct Lookup {
    pub locator: Arc<Locator>,
    pub objects: Arc<ObjectLookup>,
    pub source_files: Arc<SourceFiles>,
}

impl Lookup {
    pub fn new(caches: &Caches, downloader: Downloader, limits: ObjectLimits) -> Self {
        let locator = Arc::new(Locator::new(caches, downloader.clone()));
        Lookup {
            objects: Arc::new(ObjectLookup::new(caches, locator.clone(), limits)),
            source_files: Arc::new(SourceFiles::new(caches, downloader)),
            locator,
        }
    }
}
