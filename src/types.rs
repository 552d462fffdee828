//! Wire types every pipeline shares: the candidate reports (which files were consulted
//! for a module and what became of them) and the frame order of a request, field for
//! field as upstream Symbolicator speaks them. Each pipeline keeps its own request and
//! response types in its `interface.rs`.

use serde::{Deserialize, Serialize};

use crate::error::{CacheError, CacheResult};
use crate::sources::SourceId;

/// The version control system a PDB's SRCSRV stream fetches sources from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrcSrvVcs {
    Git,
    Perforce,
    Other,
}

impl SrcSrvVcs {
    pub fn from_vcs_name(name: &str) -> Self {
        let name = name.to_ascii_lowercase();
        if name.contains("git") {
            SrcSrvVcs::Git
        } else if name.contains("perforce") {
            SrcSrvVcs::Perforce
        } else {
            SrcSrvVcs::Other
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectFeatures {
    pub has_debug_info: bool,
    pub has_unwind_info: bool,
    pub has_symbols: bool,
    #[serde(default)]
    pub has_sources: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srcsrv_vcs: Option<SrcSrvVcs>,
}

impl ObjectFeatures {
    pub fn merge(&mut self, other: &ObjectFeatures) {
        self.has_debug_info |= other.has_debug_info;
        self.has_unwind_info |= other.has_unwind_info;
        self.has_symbols |= other.has_symbols;
        self.has_sources |= other.has_sources;
        if self.srcsrv_vcs.is_none() {
            self.srcsrv_vcs.clone_from(&other.srcsrv_vcs);
        }
    }
}

/// What happened when a candidate file was fetched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ObjectDownloadInfo {
    Ok { features: ObjectFeatures },
    Malformed,
    NoPerm { details: String },
    NotFound,
    Error { details: String },
}

/// What happened when a fetched candidate was used for one purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ObjectUseInfo {
    Ok,
    Malformed,
    Error {
        details: String,
    },
    #[default]
    None,
}

impl ObjectUseInfo {
    pub fn is_none(&self) -> bool {
        matches!(self, ObjectUseInfo::None)
    }
}

impl ObjectDownloadInfo {
    /// The report for a fetch that gave `features`, or failed with an error.
    pub fn from_result(result: Result<ObjectFeatures, &CacheError>) -> Self {
        match result {
            Ok(features) => ObjectDownloadInfo::Ok { features },
            Err(CacheError::NotFound) => ObjectDownloadInfo::NotFound,
            Err(CacheError::PermissionDenied(details)) => ObjectDownloadInfo::NoPerm {
                details: details.clone(),
            },
            Err(CacheError::Malformed(_)) => ObjectDownloadInfo::Malformed,
            Err(err) => ObjectDownloadInfo::Error {
                details: err.to_string(),
            },
        }
    }
}

impl ObjectUseInfo {
    /// The report for using a fetched candidate, e.g. building a derived cache from it.
    pub fn from_result<T>(result: &CacheResult<T>) -> Self {
        match result {
            Ok(_) => ObjectUseInfo::Ok,
            Err(CacheError::Malformed(_)) => ObjectUseInfo::Malformed,
            Err(err) => ObjectUseInfo::Error {
                details: err.to_string(),
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCandidate {
    pub source: SourceId,
    pub location: String,
    pub download: ObjectDownloadInfo,
    #[serde(default, skip_serializing_if = "ObjectUseInfo::is_none")]
    pub unwind: ObjectUseInfo,
    #[serde(default, skip_serializing_if = "ObjectUseInfo::is_none")]
    pub debug: ObjectUseInfo,
}

/// Every file consulted for a module, kept sorted and unique by `(source, location)`
/// because that is the order upstream reports them in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllObjectCandidates(Vec<ObjectCandidate>);

impl AllObjectCandidates {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, ObjectCandidate> {
        self.0.iter()
    }

    fn position(&self, source: &SourceId, location: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|c| (&c.source, c.location.as_str()).cmp(&(source, location)))
    }

    /// Inserts or updates a candidate; use infos only overwrite when they say something.
    pub fn merge_one(&mut self, candidate: ObjectCandidate) {
        match self.position(&candidate.source, &candidate.location) {
            Ok(idx) => {
                let existing = &mut self.0[idx];
                existing.download = candidate.download;
                if !candidate.unwind.is_none() {
                    existing.unwind = candidate.unwind;
                }
                if !candidate.debug.is_none() {
                    existing.debug = candidate.debug;
                }
            }
            Err(idx) => self.0.insert(idx, candidate),
        }
    }

    pub fn merge(&mut self, other: AllObjectCandidates) {
        for candidate in other.0 {
            self.merge_one(candidate);
        }
    }

    pub fn set_debug(&mut self, source: &SourceId, location: &str, info: ObjectUseInfo) {
        if let Ok(idx) = self.position(source, location) {
            self.0[idx].debug = info;
        }
    }

    pub fn set_unwind(&mut self, source: &SourceId, location: &str, info: ObjectUseInfo) {
        if let Ok(idx) = self.position(source, location) {
            self.0[idx].unwind = info;
        }
    }
}

impl From<Vec<ObjectCandidate>> for AllObjectCandidates {
    fn from(candidates: Vec<ObjectCandidate>) -> Self {
        let mut all = AllObjectCandidates::default();
        for candidate in candidates {
            all.merge_one(candidate);
        }
        all
    }
}

/// Order of frames in the request's stack traces. Each endpoint has its own default,
/// as upstream does (native stack traces come innermost first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameOrder {
    CallerFirst,
    CalleeFirst,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_stay_sorted_and_merge() {
        let c = |loc: &str, download| ObjectCandidate {
            source: SourceId::new("s"),
            location: loc.into(),
            download,
            unwind: ObjectUseInfo::None,
            debug: ObjectUseInfo::None,
        };
        let mut all: AllObjectCandidates = vec![
            c("b", ObjectDownloadInfo::NotFound),
            c("a", ObjectDownloadInfo::NotFound),
        ]
        .into();
        all.set_debug(&SourceId::new("s"), "b", ObjectUseInfo::Ok);
        all.merge_one(c("b", ObjectDownloadInfo::Malformed));
        let locs: Vec<_> = all.iter().map(|c| c.location.as_str()).collect();
        assert_eq!(locs, ["a", "b"]);
        assert_eq!(all.iter().nth(1).unwrap().debug, ObjectUseInfo::Ok);
        assert_eq!(
            all.iter().nth(1).unwrap().download,
            ObjectDownloadInfo::Malformed
        );
    }
}
