//! What an upload holds, before anything of it is published: every object of a debug
//! file (each slice of a fat Mach-O), or a ProGuard mapping, each with its place in the
//! unified layout, its content checksum (SHA-1, as Sentry and sentry-cli name files)
//! and its features, which decide whether it replaces a file already there.

use std::collections::BTreeSet;
use std::ops::Range;

use http::StatusCode;
use sha1::{Digest, Sha1};
use symbolic::common::ByteView;
use symbolic::debuginfo::{Archive, FileFormat, Object};

use super::Refused;
use super::layout::{Described, Meta, describe, describe_proguard};
use crate::sources::DirectoryLayoutType;

/// What a debug file offers, as Sentry names it (`features` of a debug file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Feature {
    Symtab,
    Debug,
    Unwind,
    Sources,
    Mapping,
}

pub type Features = BTreeSet<Feature>;

/// One object to publish.
pub struct Item {
    pub described: Described,
    /// Its path in the namespace (the unified layout).
    pub path: String,
    /// Its bytes in the upload.
    pub range: Range<usize>,
    pub checksum: String,
    pub features: Features,
    pub meta: Meta,
}

pub fn object_features(object: &Object<'_>) -> Features {
    let mut features = Features::new();
    if object.has_symbols() {
        features.insert(Feature::Symtab);
    }
    if object.has_debug_info() {
        features.insert(Feature::Debug);
    }
    if object.has_unwind_info() {
        features.insert(Feature::Unwind);
    }
    if object.has_sources() {
        features.insert(Feature::Sources);
    }
    features
}

/// The features of a stored file's bytes: those of the object that `path` names (the
/// stored file is one object, or a fat file sort wrote whole), or none if it does not
/// parse (anything replaces it).
pub fn stored_features(data: &[u8]) -> Features {
    if Archive::peek(data) == FileFormat::Unknown {
        return if proguard_uuid(data).is_some() {
            Features::from([Feature::Mapping])
        } else {
            Features::new()
        };
    }
    let Ok(archive) = Archive::parse(data) else {
        return Features::new();
    };
    archive
        .objects()
        .filter_map(Result::ok)
        .map(|o| object_features(&o))
        .fold(Features::new(), |mut all, f| {
            all.extend(f);
            all
        })
}

pub fn checksum(data: &[u8]) -> String {
    hex::encode(Sha1::digest(data))
}

/// The UUID sentry-cli and Sentry give a ProGuard mapping, if `data` is one.
pub fn proguard_uuid(data: &[u8]) -> Option<symbolic::common::Uuid> {
    let mapping = proguard::ProguardMapping::new(data);
    mapping.is_valid().then(|| mapping.uuid())
}

fn refused(status: StatusCode, reason: impl Into<String>) -> Refused {
    Refused {
        status,
        reason: reason.into(),
    }
}

/// Every object of the upload in `data`, or why it is refused (nothing of it is then
/// published). `name` is the client's file name.
pub fn analyse(data: &ByteView<'static>, name: &str) -> Result<Vec<Item>, Refused> {
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    if data.is_empty() {
        return Err(refused(StatusCode::BAD_REQUEST, "the upload is empty"));
    }
    if Archive::peek(data) == FileFormat::Unknown {
        let Some(uuid) = proguard_uuid(data) else {
            return Err(refused(
                unprocessable,
                format!("{name}: not a debug file (no known object format) nor a ProGuard mapping"),
            ));
        };
        let described = describe_proguard(uuid);
        let path = place(&described)?;
        return Ok(vec![Item {
            described,
            path,
            range: 0..data.len(),
            checksum: checksum(data),
            features: Features::from([Feature::Mapping]),
            meta: Meta {
                name: Some(name.to_owned()),
                arch: None,
                file_format: None,
            },
        }]);
    }
    let archive = Archive::parse(data)
        .map_err(|e| refused(unprocessable, format!("{name}: malformed debug file: {e}")))?;
    let mut items = Vec::new();
    for object in archive.objects() {
        let object =
            object.map_err(|e| refused(unprocessable, format!("{name}: malformed object: {e}")))?;
        let described = describe(&object, name, None)
            .map_err(|e| refused(unprocessable, format!("{name}: {e}")))?;
        let Some(described) = described else {
            continue;
        };
        let bytes = object.data();
        let start = bytes.as_ptr() as usize - data.as_ptr() as usize;
        items.push(Item {
            path: place(&described)?,
            range: start..start + bytes.len(),
            checksum: checksum(bytes),
            features: object_features(&object),
            meta: Meta {
                name: Some(name.to_owned()),
                arch: Some(object.arch().name().to_owned()),
                file_format: Some(object.file_format().name().to_owned()),
            },
            described,
        });
    }
    if items.is_empty() {
        return Err(refused(
            unprocessable,
            format!("{name}: holds no debug file (only relocatable objects or core dumps)"),
        ));
    }
    Ok(items)
}

fn place(described: &Described) -> Result<String, Refused> {
    described.path(DirectoryLayoutType::Unified).ok_or_else(|| {
        refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the file has no id to be stored under",
        )
    })
}

/// Whether `new` replaces a stored file with `old`: only when it brings a feature the
/// stored one lacks. Sentry keeps the newest upload and drops older ones whose features
/// it covers; with one place per id, a newer file that adds nothing is the redundant one.
pub fn is_better(new: &Features, old: &Features) -> bool {
    !new.is_subset(old)
}
