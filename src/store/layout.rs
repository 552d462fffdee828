//! What a debug file is (its file type and ids, told from the parsed object) and where
//! it goes in a layout: the one home of the layout code, used by `omnisym sort` and by
//! the store that takes uploads, so that a store directory is a tree sort would write.
//! The path itself always comes from `sources::get_directory_paths`, the rules the
//! reader probes with: placing a file only picks the file type to ask for, so a
//! filesystem source with the same layout finds what was written.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::Serialize;
use symbolic::common::{CodeId, DebugId};
use symbolic::debuginfo::{FileFormat, Object, ObjectKind};

use crate::sources::{
    DirectoryLayout, DirectoryLayoutType, FileType, FilenameCasing, ObjectId, ObjectType,
    get_directory_paths,
};

/// The `.meta` file symsorter writes beside each file of the unified layout.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The input file's name (its base name).
    pub name: Option<String>,
    pub arch: Option<String>,
    pub file_format: Option<String>,
}

impl Meta {
    /// `debuginfo` -> `debuginfo.meta`, as symsorter names it.
    pub fn path_beside(&self, file: &Path) -> PathBuf {
        file.with_extension("meta")
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Three optional strings: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// One file to sort, described as the lookup would ask for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub file_type: FileType,
    pub id: ObjectId,
}

/// Which of two files that land on the same path in one run is kept: a layout that
/// has one place for every kind (slashsymbols, or unified's `debuginfo` for both a
/// Breakpad file and a DWARF file) should end up holding the most useful one, whatever
/// order the workers happened to finish in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    Code,
    Breakpad,
    Debug,
}

impl Described {
    pub fn rank(&self) -> Rank {
        match self.file_type {
            FileType::ElfCode | FileType::MachCode | FileType::Pe | FileType::WasmCode => {
                Rank::Code
            }
            FileType::Breakpad => Rank::Breakpad,
            _ => Rank::Debug,
        }
    }

    /// The file's path relative to the output root, or `None` where the layout has no
    /// place for it (a PDB in debuginfod, a Wasm module in symstore, ...).
    pub fn path(&self, layout: DirectoryLayoutType) -> Option<String> {
        // symsorter writes a Breakpad file as `debuginfo`, named by the code id if it
        // has one and else by the debug id; those are where the unified reader asks for
        // an ELF (or Mach-O) debug file and for a PDB, so asking for those file types
        // gives symsorter's path from the reader's own rules.
        let file_type = match (layout, self.file_type) {
            (DirectoryLayoutType::Unified, FileType::Breakpad) if self.id.code_id.is_some() => {
                FileType::ElfDebug
            }
            (DirectoryLayoutType::Unified, FileType::Breakpad) => FileType::Pdb,
            (_, file_type) => file_type,
        };
        let layout = DirectoryLayout {
            ty: layout,
            casing: FilenameCasing::Default,
        };
        // The last location is the one probed first: for PE/PDB the plain name rather
        // than its `_`-compressed variant, for source bundles the object's own place
        // rather than the Breakpad-style one.
        get_directory_paths(layout, file_type, &self.id).pop()
    }

    /// The id that names the file in the unified layout (its directory, without the
    /// slash): what bundle indexes list and warnings name.
    pub fn unified_id(&self) -> Option<String> {
        let path = self.path(DirectoryLayoutType::Unified)?;
        let mut parts = path.split('/');
        Some(format!("{}{}", parts.next()?, parts.next()?))
    }
}

/// Describes an object of a debug file named `name`. `Ok(None)` for kinds that are not
/// sorted (relocatable objects, core dumps). `bundled_from` is the object type of the
/// file a source bundle was made from, when known.
pub fn describe(
    object: &Object<'_>,
    name: &str,
    bundled_from: Option<ObjectType>,
) -> Result<Option<Described>> {
    let kind = object.kind();
    if !matches!(
        kind,
        ObjectKind::Executable | ObjectKind::Library | ObjectKind::Debug | ObjectKind::Sources
    ) {
        return Ok(None);
    }
    let debug = kind == ObjectKind::Debug;
    let code_id = object.code_id();
    let debug_id = Some(object.debug_id()).filter(|id| !id.is_nil());
    // As symsorter: a PE, or a file without a code id, is named by its debug id.
    if (object.file_format() == FileFormat::Pe || code_id.is_none()) && debug_id.is_none() {
        bail!("failed to generate debug identifier");
    }
    let name = Some(name.to_owned());
    let mut id = ObjectId {
        debug_id,
        code_id: code_id.clone(),
        ..ObjectId::default()
    };
    let file_type = match object {
        Object::Elf(_) => {
            id.object_type = ObjectType::Elf;
            if debug {
                // `crash.debug` is the companion of `crash`, which is the name a
                // module's code_file gives the layouts that use one.
                id.code_file = name
                    .as_deref()
                    .map(|n| n.strip_suffix(".debug").unwrap_or(n).to_owned());
                id.debug_file = name;
                FileType::ElfDebug
            } else {
                id.code_file = name.clone();
                id.debug_file = name;
                FileType::ElfCode
            }
        }
        Object::MachO(_) => {
            id.object_type = ObjectType::Macho;
            // A dSYM's DWARF file carries the binary's own name.
            id.code_file = name.clone();
            id.debug_file = name;
            if debug {
                FileType::MachDebug
            } else {
                FileType::MachCode
            }
        }
        Object::Pe(pe) => {
            id.object_type = ObjectType::Pe;
            id.code_file = name;
            id.debug_file = pe.debug_file_name().map(|n| n.into_owned());
            FileType::Pe
        }
        Object::Pdb(_) => {
            id.object_type = ObjectType::Pe;
            id.debug_file = name;
            FileType::Pdb
        }
        Object::PortablePdb(_) => {
            id.object_type = ObjectType::PeDotnet;
            id.debug_file = name;
            FileType::PortablePdb
        }
        Object::Wasm(_) => {
            id.object_type = ObjectType::Wasm;
            id.code_file = name.clone();
            id.debug_file = name;
            if debug {
                FileType::WasmDebug
            } else {
                FileType::WasmCode
            }
        }
        Object::Breakpad(breakpad) => {
            id.debug_file = Some(breakpad.name().to_owned());
            FileType::Breakpad
        }
        Object::SourceBundle(bundle) => {
            id.object_type = bundled_from
                .unwrap_or_else(|| bundle_object_type(code_id.as_ref(), debug_id, object));
            id.debug_file = bundle.name().map(str::to_owned).or(name);
            id.code_file = id.debug_file.clone();
            FileType::SourceBundle
        }
    };
    if kind == ObjectKind::Sources && file_type != FileType::SourceBundle {
        bail!("unsupported file");
    }
    Ok(Some(Described { file_type, id }))
}

/// A ProGuard mapping, named by its uuid as the JVM lookup asks for it.
pub fn describe_proguard(uuid: symbolic::common::Uuid) -> Described {
    Described {
        file_type: FileType::Proguard,
        id: ObjectId::from(DebugId::from_uuid(uuid)),
    }
}

/// A source bundle names neither the object type it was made from nor the object's
/// file, only its ids and arch; the layouts that place it need the type. Without a code
/// id only a PDB (PE) can have made it; a Mach-O's debug id is its code id (UUID), as a
/// Wasm module's is, told apart by the arch; anything else is an ELF build id.
fn bundle_object_type(
    code_id: Option<&CodeId>,
    debug_id: Option<DebugId>,
    object: &Object<'_>,
) -> ObjectType {
    let Some(code_id) = code_id else {
        return ObjectType::Pe;
    };
    if object.arch().cpu_family() == symbolic::common::CpuFamily::Wasm32 {
        return ObjectType::Wasm;
    }
    match debug_id {
        Some(debug_id) if debug_id.uuid().as_simple().to_string() == code_id.as_str() => {
            ObjectType::Macho
        }
        _ => ObjectType::Elf,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DirectoryLayoutType::*;

    fn described(file_type: FileType, id: ObjectId) -> Described {
        Described { file_type, id }
    }

    const ELF_CODE_ID: &str = "6cdc6fd968168a6de479531b3d99327bca9dc649";
    const MACH_UUID: &str = "67e9247c814e392ba027dbde6748fcbf";
    const PDB_ID: &str = "3249d99d-0c40-4931-8610-f4e4fb0b6936-1";

    fn elf(file_type: FileType, name: &str) -> Described {
        described(
            file_type,
            ObjectId {
                code_id: Some(CodeId::new(ELF_CODE_ID.into())),
                debug_id: Some("d96fdc6c-1668-6d8a-e479-531b3d99327b".parse().unwrap()),
                code_file: Some("crash".into()),
                debug_file: Some(name.into()),
                object_type: ObjectType::Elf,
                ..ObjectId::default()
            },
        )
    }

    fn mach(file_type: FileType) -> Described {
        described(
            file_type,
            ObjectId {
                code_id: Some(CodeId::new(MACH_UUID.into())),
                debug_id: Some(MACH_UUID.parse().unwrap()),
                code_file: Some("prog".into()),
                debug_file: Some("prog".into()),
                object_type: ObjectType::Macho,
                ..ObjectId::default()
            },
        )
    }

    fn pdb(file_type: FileType) -> Described {
        described(
            file_type,
            ObjectId {
                code_id: Some(CodeId::new("5ab380779000".into())),
                debug_id: Some(PDB_ID.parse().unwrap()),
                code_file: Some("crash.exe".into()),
                debug_file: Some("C:\\build\\crash.pdb".into()),
                object_type: ObjectType::Pe,
                ..ObjectId::default()
            },
        )
    }

    #[test]
    fn unified_paths_are_symsorters() {
        let code = elf(FileType::ElfCode, "crash");
        assert_eq!(
            code.path(Unified).unwrap(),
            "6c/dc6fd968168a6de479531b3d99327bca9dc649/executable"
        );
        assert_eq!(
            elf(FileType::ElfDebug, "crash.debug")
                .path(Unified)
                .unwrap(),
            "6c/dc6fd968168a6de479531b3d99327bca9dc649/debuginfo"
        );
        assert_eq!(code.unified_id().unwrap(), ELF_CODE_ID);
        assert_eq!(
            mach(FileType::MachDebug).path(Unified).unwrap(),
            "67/e9247c814e392ba027dbde6748fcbf/debuginfo"
        );
        // PE and PDB: the debug id in Breakpad form, lower case, the age appended.
        assert_eq!(
            pdb(FileType::Pe).path(Unified).unwrap(),
            "32/49d99d0c4049318610f4e4fb0b69361/executable"
        );
        assert_eq!(
            pdb(FileType::Pdb).path(Unified).unwrap(),
            "32/49d99d0c4049318610f4e4fb0b69361/debuginfo"
        );
        // Breakpad: `debuginfo`, by code id when there is one, else by debug id.
        assert_eq!(
            elf(FileType::Breakpad, "crash").path(Unified).unwrap(),
            "6c/dc6fd968168a6de479531b3d99327bca9dc649/debuginfo"
        );
        let mut no_code_id = pdb(FileType::Breakpad);
        no_code_id.id.code_id = None;
        assert_eq!(
            no_code_id.path(Unified).unwrap(),
            "32/49d99d0c4049318610f4e4fb0b69361/debuginfo"
        );
        // An ELF library linked without a build id, as an APK ships it: by its debug id,
        // where a Breakpad file without a code id goes too.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/apk");
        let data = std::fs::read(dir.join("libnoid.so")).unwrap();
        let object = Object::parse(&data).unwrap();
        let noid = describe(&object, "libnoid.so", None).unwrap().unwrap();
        assert_eq!(
            noid.path(Unified).unwrap(),
            "32/8686ea8e60a5a40137ff898116ced20/executable"
        );
        let mapping = describe_proguard("b6d6d1a6-2a5d-5a4f-9c24-1b2a3c4d5e6f".parse().unwrap());
        assert_eq!(
            mapping.path(Unified).unwrap(),
            "b6/d6d1a62a5d5a4f9c241b2a3c4d5e6f/proguard"
        );
    }

    #[test]
    fn other_layouts_follow_the_reader() {
        let cases: &[(Described, DirectoryLayoutType, Option<&str>)] = &[
            (
                elf(FileType::ElfCode, "crash"),
                Native,
                Some("6c/dc6fd968168a6de479531b3d99327bca9dc649"),
            ),
            (
                elf(FileType::ElfDebug, "crash.debug"),
                Native,
                Some("6c/dc6fd968168a6de479531b3d99327bca9dc649.debug"),
            ),
            (
                elf(FileType::ElfDebug, "crash.debug"),
                Symstore,
                Some("_.debug/elf-buildid-sym-6cdc6fd968168a6de479531b3d99327bca9dc649/_.debug"),
            ),
            (
                elf(FileType::ElfCode, "crash"),
                SymstoreIndex2,
                Some("cr/crash/elf-buildid-6cdc6fd968168a6de479531b3d99327bca9dc649/crash"),
            ),
            (
                elf(FileType::ElfDebug, "crash.debug"),
                Debuginfod,
                Some("6cdc6fd968168a6de479531b3d99327bca9dc649/debuginfo"),
            ),
            (
                elf(FileType::ElfDebug, "crash.debug"),
                SlashSymbols,
                Some("crash/6cdc6fd968168a6de479531b3d99327bca9dc649/symbols"),
            ),
            (
                mach(FileType::MachDebug),
                Native,
                Some("67E9/247C/814E/392B/A027/DBDE6748FCBF"),
            ),
            (
                mach(FileType::MachDebug),
                Ssqp,
                Some("_.dwarf/mach-uuid-sym-67e9247c814e392ba027dbde6748fcbf/_.dwarf"),
            ),
            (
                pdb(FileType::Pdb),
                Symstore,
                Some("crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pdb"),
            ),
            (
                pdb(FileType::Pdb),
                Ssqp,
                Some("crash.pdb/3249d99d0c4049318610f4e4fb0b69361/crash.pdb"),
            ),
            (
                pdb(FileType::Pe),
                Native,
                Some("crash.exe/5AB380779000/crash.exe"),
            ),
            (
                pdb(FileType::Breakpad),
                Native,
                Some("crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.sym"),
            ),
            (
                pdb(FileType::SourceBundle),
                Native,
                Some("crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.src.zip"),
            ),
            (pdb(FileType::Pdb), Debuginfod, None),
            (mach(FileType::MachDebug), Debuginfod, None),
            (
                describe_proguard("b6d6d1a6-2a5d-5a4f-9c24-1b2a3c4d5e6f".parse().unwrap()),
                Native,
                None,
            ),
        ];
        for (described, layout, expected) in cases {
            assert_eq!(
                described.path(*layout).as_deref(),
                *expected,
                "{layout:?} {described:?}"
            );
        }
    }

    #[test]
    fn a_debug_file_outranks_breakpad_which_outranks_code() {
        assert!(elf(FileType::ElfDebug, "x").rank() > elf(FileType::Breakpad, "x").rank());
        assert!(elf(FileType::Breakpad, "x").rank() > elf(FileType::ElfCode, "x").rank());
        assert_eq!(pdb(FileType::SourceBundle).rank(), Rank::Debug);
    }
}
