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

/// A way of finding a frame's caller in a minidump's stack walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnwindStrategy {
    /// The module's unwind rules (DWARF CFI, PE unwind info, Breakpad `STACK` records).
    Cfi,
    /// The chain of saved frame pointers (`rbp`, `x29`, `ebp`).
    FramePointer,
    /// Reading the stack for anything that looks like a return address into a module.
    Scan,
}

/// The strategies of a steered stack walk, in the order they are tried for each frame
/// (omnisym only: the request option and the config key `unwind_order`). Without one a
/// walk is upstream's (rust-minidump's: CFI, then frame pointer, then scan, and on past
/// the stack's real end). With one, a frame found by a strategy left out ends the
/// stack, and so do the known entry points and a frame outside every module.
///
/// Scanning can only come last: it is the walker's own fallback, after every other
/// strategy failed, and the published walker cannot be asked to scan first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindOrder {
    steps: [Option<UnwindStrategy>; 3],
}

impl UnwindOrder {
    pub fn new(strategies: &[UnwindStrategy]) -> Result<Self, String> {
        if strategies.is_empty() || strategies.len() > 3 {
            return Err("names one to three of cfi, frame_pointer, scan".into());
        }
        let mut steps = [None; 3];
        for (i, &strategy) in strategies.iter().enumerate() {
            if strategies[..i].contains(&strategy) {
                return Err(format!("names {strategy:?} twice"));
            }
            steps[i] = Some(strategy);
        }
        if strategies[..strategies.len() - 1].contains(&UnwindStrategy::Scan) {
            return Err("can have scan only last: the walker scans after all else fails".into());
        }
        if strategies == [UnwindStrategy::Scan] {
            return Err("needs cfi or frame_pointer before scan".into());
        }
        Ok(UnwindOrder { steps })
    }

    pub fn allows(&self, strategy: UnwindStrategy) -> bool {
        self.steps.contains(&Some(strategy))
    }

    /// Whether the frame pointer is tried before the unwind rules.
    pub fn frame_pointer_first(&self) -> bool {
        self.steps
            .iter()
            .flatten()
            .find(|s| **s != UnwindStrategy::Scan)
            .is_some_and(|s| *s == UnwindStrategy::FramePointer)
    }
}

impl<'de> Deserialize<'de> for UnwindOrder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let strategies = Vec::<UnwindStrategy>::deserialize(deserializer)?;
        UnwindOrder::new(&strategies).map_err(serde::de::Error::custom)
    }
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

    #[test]
    fn unwind_orders_are_checked() {
        let order =
            |json: &str| serde_json::from_str::<UnwindOrder>(json).map_err(|e| e.to_string());
        let fp_first = order(r#"["frame_pointer", "cfi"]"#).unwrap();
        assert!(fp_first.frame_pointer_first());
        assert!(!fp_first.allows(UnwindStrategy::Scan));
        let upstream = order(r#"["cfi", "frame_pointer", "scan"]"#).unwrap();
        assert!(!upstream.frame_pointer_first());
        assert!(upstream.allows(UnwindStrategy::Scan));
        assert!(
            order(r#"["scan", "cfi"]"#)
                .unwrap_err()
                .contains("only last")
        );
        assert!(order(r#"["cfi", "cfi"]"#).unwrap_err().contains("twice"));
        assert!(order(r#"["scan"]"#).is_err());
        assert!(order("[]").is_err());
        assert!(order(r#"["fp"]"#).is_err());
    }
}
