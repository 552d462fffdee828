//! The kinds of files a source can be asked for.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::types::ObjectType;

/// A kind of file that can be fetched from a source.
///
/// This is deliberately flat (rather than object type × code/debug) because some kinds, like
/// breakpad symbols or source bundles, are not tied to one object format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    /// Windows executable or library.
    Pe,
    /// Windows (MSF) PDB.
    Pdb,
    /// .NET Portable PDB.
    #[serde(rename = "portablepdb")]
    PortablePdb,
    /// dSYM / Mach-O with debug information.
    MachDebug,
    /// Mach-O executable or library.
    MachCode,
    /// ELF debug companion file.
    ElfDebug,
    /// ELF executable or library.
    ElfCode,
    /// WebAssembly (external) debug file.
    WasmDebug,
    /// WebAssembly module.
    WasmCode,
    /// Breakpad text symbol file.
    Breakpad,
    /// Source archive for one object.
    #[serde(rename = "sourcebundle")]
    SourceBundle,
    /// PList mapping a dSYM UUID to the UUID of the BCSymbolMap it needs.
    #[serde(rename = "uuidmap")]
    UuidMap,
    /// De-obfuscation map for Mach-O symbol names built from bitcode.
    #[serde(rename = "bcsymbolmap")]
    BcSymbolMap,
    /// Unity il2cpp `LineNumberMapping.json`.
    #[serde(rename = "il2cpp")]
    Il2cpp,
    /// ProGuard mapping file.
    Proguard,
}

impl FileType {
    /// Every file type upstream considers "all".
    ///
    /// Upstream leaves `Il2cpp` out of this list (it is only ever requested explicitly), and so
    /// do we: this list is what an `Unknown` object is searched with.
    pub fn all() -> &'static [FileType] {
        use FileType::*;
        &[
            Pdb,
            MachDebug,
            ElfDebug,
            Pe,
            MachCode,
            ElfCode,
            WasmCode,
            WasmDebug,
            Breakpad,
            SourceBundle,
            UuidMap,
            BcSymbolMap,
            PortablePdb,
            Proguard,
        ]
    }

    /// File types that provide source code.
    ///
    /// Upstream runs a second lookup with these types for every module (to find source context),
    /// separate from the lookup with [`FileType::from_object_type`]; the candidates reported for a
    /// module are the union of both lookups.
    pub fn sources() -> &'static [FileType] {
        &[FileType::SourceBundle, FileType::PortablePdb]
    }

    /// The file types to look for when resolving an object of the given type, in trial order.
    ///
    /// Source bundles are not part of this list: like upstream, they are found by a separate
    /// lookup with [`FileType::sources`].
    pub fn from_object_type(ty: ObjectType) -> &'static [FileType] {
        use FileType::*;
        // Debug files of native apps do not always share the executable's format (e.g. ELF debug
        // info for a Mach-O app), so every native type also asks for all native debug formats.
        match ty {
            ObjectType::Macho => &[MachCode, Breakpad, MachDebug, Pdb, ElfDebug],
            ObjectType::Pe => &[Pe, Breakpad, MachDebug, Pdb, ElfDebug],
            ObjectType::Elf => &[ElfCode, Breakpad, MachDebug, Pdb, ElfDebug],
            ObjectType::Wasm => &[WasmCode, WasmDebug],
            ObjectType::PeDotnet => &[PortablePdb],
            ObjectType::Unknown => Self::all(),
        }
    }

    /// The wire name of this file type.
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::Pe => "pe",
            FileType::Pdb => "pdb",
            FileType::PortablePdb => "portablepdb",
            FileType::MachDebug => "mach_debug",
            FileType::MachCode => "mach_code",
            FileType::ElfDebug => "elf_debug",
            FileType::ElfCode => "elf_code",
            FileType::WasmDebug => "wasm_debug",
            FileType::WasmCode => "wasm_code",
            FileType::Breakpad => "breakpad",
            FileType::SourceBundle => "sourcebundle",
            FileType::UuidMap => "uuidmap",
            FileType::BcSymbolMap => "bcsymbolmap",
            FileType::Il2cpp => "il2cpp",
            FileType::Proguard => "proguard",
        }
    }
}

impl AsRef<str> for FileType {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: &[FileType] = &[
        FileType::Pe,
        FileType::Pdb,
        FileType::PortablePdb,
        FileType::MachDebug,
        FileType::MachCode,
        FileType::ElfDebug,
        FileType::ElfCode,
        FileType::WasmDebug,
        FileType::WasmCode,
        FileType::Breakpad,
        FileType::SourceBundle,
        FileType::UuidMap,
        FileType::BcSymbolMap,
        FileType::Il2cpp,
        FileType::Proguard,
    ];

    #[test]
    fn serde_names_match_as_str() {
        for &ty in EVERY {
            let json = serde_json::to_string(&ty).unwrap();
            assert_eq!(json, format!("\"{}\"", ty.as_str()));
            assert_eq!(serde_json::from_str::<FileType>(&json).unwrap(), ty);
            assert_eq!(ty.to_string(), ty.as_str());
        }
        assert!(serde_json::from_str::<FileType>("\"portable_pdb\"").is_err());
        assert!(serde_json::from_str::<FileType>("\"source_bundle\"").is_err());
        assert!(serde_json::from_str::<FileType>("\"nope\"").is_err());
    }

    #[test]
    fn all_leaves_out_il2cpp_only() {
        let all = FileType::all();
        assert_eq!(all.len(), EVERY.len() - 1);
        assert!(!all.contains(&FileType::Il2cpp));
        assert_eq!(all[0], FileType::Pdb);
        assert_eq!(all[all.len() - 1], FileType::Proguard);
    }

    #[test]
    fn object_type_lookup_order() {
        use FileType::*;
        assert_eq!(
            FileType::from_object_type(ObjectType::Macho),
            &[MachCode, Breakpad, MachDebug, Pdb, ElfDebug]
        );
        assert_eq!(
            FileType::from_object_type(ObjectType::Pe),
            &[Pe, Breakpad, MachDebug, Pdb, ElfDebug]
        );
        assert_eq!(
            FileType::from_object_type(ObjectType::Elf),
            &[ElfCode, Breakpad, MachDebug, Pdb, ElfDebug]
        );
        assert_eq!(
            FileType::from_object_type(ObjectType::Wasm),
            &[WasmCode, WasmDebug]
        );
        assert_eq!(
            FileType::from_object_type(ObjectType::PeDotnet),
            &[PortablePdb]
        );
        assert_eq!(
            FileType::from_object_type(ObjectType::Unknown),
            FileType::all()
        );
        assert_eq!(FileType::sources(), &[SourceBundle, PortablePdb]);
    }
}
