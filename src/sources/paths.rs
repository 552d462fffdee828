//! Candidate locations of a file on a source, for every directory layout.
//!
//! All functions return `/`-separated paths relative to the source root. See the module docs of
//! `sources` for why these paths can never leave the root.

use std::borrow::Cow;

use symbolic::common::{CodeId, DebugId, Uuid};

use super::common::{CommonSourceConfig, DirectoryLayout, DirectoryLayoutType, FilenameCasing};
use super::filetype::FileType;
use super::types::{ObjectId, ObjectType};

/// GDB "build-id" convention: `ab/cdef…`, from the code id.
fn gdb_path(id: &ObjectId) -> Option<String> {
    let code_id = id.code_id.as_ref()?.as_str();
    // Code ids are ASCII hex, so splitting at byte 2 is safe once the length allows it.
    if code_id.len() < 2 {
        return None;
    }
    let (head, tail) = code_id.split_at(2);
    Some(format!("{head}/{tail}"))
}

/// The Mach-O UUID: taken from the code id if there is one, else from the debug id.
///
/// A code id that is present but not a UUID yields nothing; upstream does not fall back to the
/// debug id in that case.
fn mach_uuid(id: &ObjectId) -> Option<Uuid> {
    match &id.code_id {
        Some(code_id) => code_id.as_str().parse().ok(),
        None => id.debug_id.map(|d| d.uuid()),
    }
}

/// LLDB "File Mapped UUID Directories": `XXXX/XXXX/XXXX/XXXX/XXXX/XXXXXXXXXXXX`, uppercase.
fn lldb_path(id: &ObjectId) -> Option<String> {
    let hex = format!("{:X}", mach_uuid(id)?.as_simple());
    Some(format!(
        "{}/{}/{}/{}/{}/{}",
        &hex[..4],
        &hex[4..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// `{debug_name}/{Signature}{Age}/{debug_name}`.
///
/// Symstore casing: name as given, signature uppercase, age lowercase. SSQP casing: name and
/// signature lowercase, age uppercase.
fn pdb_symstore_path(id: &ObjectId, ssqp: bool) -> Option<String> {
    let name = id.validated_debug_file_basename()?;
    let debug_id = id.debug_id.as_ref()?;
    let name = ssqp_name(name, ssqp);

    // Portable PDB keys replace the age with 0xffffffff (SSQP key conventions).
    let age = if id.object_type == ObjectType::PeDotnet {
        u32::MAX
    } else {
        debug_id.appendix()
    };
    let signature = debug_id.uuid();
    let key = if ssqp {
        format!("{:x}{age:X}", signature.as_simple())
    } else {
        format!("{:X}{age:x}", signature.as_simple())
    };
    Some(format!("{name}/{key}/{name}"))
}

/// `{code_name}/{Timestamp}{SizeOfImage}/{code_name}`.
///
/// Symstore casing keeps the timestamp (first 8 digits) uppercase and the size lowercase; SSQP
/// uses the (lowercase) code id and lowercase file name.
fn pe_symstore_path(id: &ObjectId, ssqp: bool) -> Option<String> {
    let name = id.validated_code_file_basename()?;
    let code_id = id.code_id.as_ref()?.as_str();
    let name = ssqp_name(name, ssqp);
    let key: Cow<str> = if ssqp {
        Cow::Borrowed(code_id)
    } else {
        let timestamp = code_id.get(..8)?;
        let size_of_image = code_id.get(8..)?;
        Cow::Owned(format!(
            "{}{}",
            timestamp.to_uppercase(),
            size_of_image.to_lowercase()
        ))
    };
    Some(format!("{name}/{key}/{name}"))
}

fn ssqp_name(name: &str, ssqp: bool) -> Cow<'_, str> {
    if ssqp {
        Cow::Owned(name.to_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

/// Breakpad symbol store: `{debug_name}/{BREAKPADID}/{sym_name}.sym`.
fn breakpad_path(id: &ObjectId) -> Option<String> {
    if id.object_type == ObjectType::Wasm {
        return None;
    }
    let name = id.validated_debug_file_basename()?;
    let debug_id = id.debug_id.as_ref()?;
    Some(format!(
        "{name}/{}/{}.sym",
        debug_id.breakpad(),
        breakpad_sym_stem(name)
    ))
}

/// The symbol file name stem for a debug file name.
///
/// Breakpad's convention is to replace `.exe`, `.dll` or `.pdb`, but upstream's suffix chain
/// falls back to the *full* name whenever one step does not match, so in effect only a final
/// `.pdb` is removed (`crash.pdb` -> `crash`, but `crash.exe` -> `crash.exe`). We keep upstream's
/// observable behaviour, since those are the paths existing buckets were probed with.
fn breakpad_sym_stem(name: &str) -> &str {
    let without_exe = name.strip_suffix(".exe").unwrap_or(name);
    let without_dll = without_exe.strip_suffix(".dll").unwrap_or(name);
    without_dll.strip_suffix(".pdb").unwrap_or(name)
}

fn native_paths(filetype: FileType, id: &ObjectId) -> Vec<String> {
    match filetype {
        FileType::ElfCode | FileType::WasmCode => gdb_path(id).into_iter().collect(),
        FileType::ElfDebug | FileType::WasmDebug => {
            gdb_path(id).map(|p| p + ".debug").into_iter().collect()
        }
        FileType::MachCode => lldb_path(id).map(|p| p + ".app").into_iter().collect(),
        FileType::MachDebug => lldb_path(id).into_iter().collect(),
        FileType::Pdb | FileType::PortablePdb => pdb_symstore_path(id, false).into_iter().collect(),
        FileType::Pe => pe_symstore_path(id, false).into_iter().collect(),
        FileType::Breakpad => breakpad_path(id).into_iter().collect(),
        FileType::SourceBundle => native_source_bundle_paths(id),
        FileType::UuidMap | FileType::BcSymbolMap | FileType::Il2cpp | FileType::Proguard => {
            Vec::new()
        }
    }
}

/// Source bundles sit next to the object's own native location, with a `.src.zip` suffix.
///
/// A second, lower-priority candidate is the Breakpad location with `.sym` replaced; it comes
/// first in the vector (lower priority) and is left out when it equals the primary one, as it
/// does for PDBs.
fn native_source_bundle_paths(id: &ObjectId) -> Vec<String> {
    let primary = match id.object_type {
        ObjectType::Pe | ObjectType::PeDotnet => pdb_symstore_path(id, false).map(strip_extension),
        ObjectType::Macho => lldb_path(id),
        ObjectType::Elf | ObjectType::Wasm => gdb_path(id),
        ObjectType::Unknown => None,
    };
    let Some(primary) = primary.map(|p| p + ".src.zip") else {
        return Vec::new();
    };

    let mut paths = Vec::with_capacity(2);
    if let Some(breakpad) = breakpad_path(id) {
        let breakpad = format!(
            "{}.src.zip",
            breakpad.strip_suffix(".sym").unwrap_or(&breakpad)
        );
        if breakpad != primary {
            paths.push(breakpad);
        }
    }
    paths.push(primary);
    paths
}

/// Cuts everything from the last `.` of the whole path (a no-op without any dot).
fn strip_extension(mut path: String) -> String {
    if let Some(dot) = path.rfind('.') {
        path.truncate(dot);
    }
    path
}

/// Microsoft Symbol Server, with SSQP keys for ELF and Mach-O.
fn symstore_path(filetype: FileType, id: &ObjectId, ssqp: bool) -> Option<String> {
    match filetype {
        FileType::ElfCode => {
            let code_id = id.code_id.as_ref()?;
            let name = ssqp_name(id.validated_code_file_basename()?, ssqp);
            Some(format!("{name}/elf-buildid-{code_id}/{name}"))
        }
        FileType::ElfDebug => {
            let code_id = id.code_id.as_ref()?;
            Some(format!("_.debug/elf-buildid-sym-{code_id}/_.debug"))
        }
        FileType::MachCode => {
            let name = ssqp_name(id.validated_code_file_basename()?, ssqp);
            let uuid = mach_uuid(id)?;
            Some(format!("{name}/mach-uuid-{}/{name}", uuid.as_simple()))
        }
        FileType::MachDebug => {
            let uuid = mach_uuid(id)?;
            Some(format!(
                "_.dwarf/mach-uuid-sym-{}/_.dwarf",
                uuid.as_simple()
            ))
        }
        FileType::Pdb | FileType::PortablePdb => pdb_symstore_path(id, ssqp),
        FileType::Pe => pe_symstore_path(id, ssqp),
        // Source bundles are an extension that only exists for (native) PE/PDB here.
        FileType::SourceBundle => {
            if id.object_type != ObjectType::Pe {
                return None;
            }
            symstore_path(FileType::Pdb, id, ssqp).map(|p| strip_extension(p) + ".src.zip")
        }
        FileType::Breakpad
        | FileType::WasmDebug
        | FileType::WasmCode
        | FileType::UuidMap
        | FileType::BcSymbolMap
        | FileType::Il2cpp
        | FileType::Proguard => None,
    }
}

/// Two-tier symstore: the first two characters of the path become an extra directory, or only
/// the first one if the second is `/` or `.`.
fn symstore_index2_path(filetype: FileType, id: &ObjectId) -> Option<String> {
    let path = symstore_path(filetype, id, false)?;
    Some(match path.get(..2) {
        Some(prefix) if prefix.ends_with(['/', '.']) => format!("{}/{path}", &prefix[..1]),
        Some(prefix) => format!("{prefix}/{path}"),
        None => path,
    })
}

/// debuginfod: ELF only, keyed by build id.
fn debuginfod_path(filetype: FileType, id: &ObjectId) -> Option<String> {
    let code_id = || id.code_id.as_ref().map(CodeId::as_str);
    match filetype {
        FileType::ElfCode => Some(format!("{}/executable", code_id()?)),
        FileType::ElfDebug => Some(format!("{}/debuginfo", code_id()?)),
        _ => None,
    }
}

/// The id that names an object in the unified layout (lowercase hex).
///
/// The file type decides which identifier is used; for file types that do not imply an object
/// format, the object type stored on the id stands in.
fn unified_id(filetype: FileType, id: &ObjectId) -> Option<Cow<'_, str>> {
    match filetype {
        FileType::SourceBundle | FileType::Breakpad | FileType::Il2cpp => {
            let implied = match id.object_type {
                ObjectType::Elf => FileType::ElfCode,
                ObjectType::Macho => FileType::MachCode,
                ObjectType::Pe => FileType::Pe,
                ObjectType::Wasm => FileType::WasmCode,
                ObjectType::PeDotnet => FileType::PortablePdb,
                // A source bundle of no object (a JVM app's sources) lives under its
                // own debug id; upstream has no place for one outside Sentry.
                ObjectType::Unknown if filetype == FileType::SourceBundle => {
                    return Some(Cow::Owned(id.debug_id?.uuid().as_simple().to_string()));
                }
                ObjectType::Unknown => return None,
            };
            unified_id(implied, id)
        }
        // PE code ids are only unique together with the file name, which this layout does not
        // encode, so PEs are stored under the PDB's debug id.
        FileType::Pe | FileType::Pdb | FileType::PortablePdb => {
            let debug_id: DebugId = id.debug_id?;
            Some(Cow::Owned(debug_id.breakpad().to_string().to_lowercase()))
        }
        // Mach-O (and by convention WASM and the Mach-O auxiliary files) can derive the code id
        // from the debug id when it is missing.
        FileType::MachCode
        | FileType::MachDebug
        | FileType::WasmDebug
        | FileType::WasmCode
        | FileType::UuidMap
        | FileType::BcSymbolMap => match &id.code_id {
            Some(code_id) => Some(Cow::Borrowed(code_id.as_str())),
            None => Some(Cow::Owned(id.debug_id?.uuid().as_simple().to_string())),
        },
        // The ELF debug id is a lossy truncation of the build id, so the code id names a
        // file that has one. One without (omnisym only: upstream can neither place nor
        // find it) is named by its debug id, which symbolic and the SDKs hash from its
        // first page of code, in the form a PDB's is: where symsorter already writes a
        // Breakpad file without a code id.
        FileType::ElfCode | FileType::ElfDebug => match &id.code_id {
            Some(code_id) => Some(Cow::Borrowed(code_id.as_str())),
            None => Some(Cow::Owned(
                id.debug_id?.breakpad().to_string().to_lowercase(),
            )),
        },
        // Upstream has no place for mappings outside Sentry; here they live under their
        // uuid, so any source kind can serve them.
        FileType::Proguard => Some(Cow::Owned(id.debug_id?.uuid().as_simple().to_string())),
    }
}

/// Unified layout: `{id[..2]}/{id[2..]}/{kind}`.
fn unified_path(filetype: FileType, id: &ObjectId) -> Option<String> {
    let kind = match filetype {
        FileType::ElfCode | FileType::MachCode | FileType::Pe | FileType::WasmCode => "executable",
        FileType::ElfDebug
        | FileType::MachDebug
        | FileType::Pdb
        | FileType::WasmDebug
        | FileType::PortablePdb => "debuginfo",
        FileType::Breakpad => "breakpad",
        FileType::SourceBundle => "sourcebundle",
        FileType::UuidMap => "uuidmap",
        FileType::BcSymbolMap => "bcsymbolmap",
        FileType::Il2cpp => "il2cpp",
        FileType::Proguard => "proguard",
    };
    let key = unified_id(filetype, id)?;
    Some(format!("{}/{}/{kind}", key.get(..2)?, key.get(2..)?))
}

/// Where a JavaScript file with `debug_id` lives on a source other than Sentry: only the
/// unified layout has a place for one, `{id[..2]}/{id[2..]}/{kind}`, with the debug id
/// as 32 lowercase hex digits and `kind` either `minified_source` or `source_map`.
pub fn js_artifact_path(
    files: &CommonSourceConfig,
    debug_id: DebugId,
    kind: &str,
) -> Option<String> {
    if files.layout.ty != DirectoryLayoutType::Unified {
        return None;
    }
    let id = debug_id.uuid().as_simple().to_string();
    Some(format!("{}/{}/{kind}", &id[..2], &id[2..]))
}

/// `{code_name}/{code_id}/symbols`, regardless of the file type.
fn slashsymbols_path(id: &ObjectId) -> Option<String> {
    let code_id = id.code_id.as_ref()?;
    let name = id.validated_code_file_basename()?;
    Some(format!("{name}/{code_id}/symbols"))
}

/// All relative locations of `filetype` for `identifier` on a source with `layout`.
///
/// The vector is ordered from lowest to highest priority, exactly like upstream: callers that
/// probe a source should try the *last* entry first (see [`source_locations`]).
///
/// Casing (`layout.casing`) is applied to the whole path with ASCII case mapping. For PE and
/// PDB files every path is then preceded by its "compressed" variant, with the last character
/// replaced by `_` (`crash.pdb` -> `crash.pd_`), the Microsoft convention for CAB-compressed
/// files.
pub fn get_directory_paths(
    layout: DirectoryLayout,
    filetype: FileType,
    identifier: &ObjectId,
) -> Vec<String> {
    let mut paths: Vec<String> = match layout.ty {
        DirectoryLayoutType::Native => native_paths(filetype, identifier),
        DirectoryLayoutType::Symstore => symstore_path(filetype, identifier, false)
            .into_iter()
            .collect(),
        DirectoryLayoutType::SymstoreIndex2 => symstore_index2_path(filetype, identifier)
            .into_iter()
            .collect(),
        DirectoryLayoutType::Ssqp => symstore_path(filetype, identifier, true)
            .into_iter()
            .collect(),
        DirectoryLayoutType::Debuginfod => {
            debuginfod_path(filetype, identifier).into_iter().collect()
        }
        DirectoryLayoutType::Unified => unified_path(filetype, identifier).into_iter().collect(),
        DirectoryLayoutType::SlashSymbols => slashsymbols_path(identifier).into_iter().collect(),
    };

    for path in &mut paths {
        match layout.casing {
            FilenameCasing::Default => {}
            FilenameCasing::Lowercase => path.make_ascii_lowercase(),
            FilenameCasing::Uppercase => path.make_ascii_uppercase(),
        }
    }

    // Symbol servers may store PE/PDB files CAB-compressed under the name with its last
    // character replaced by `_`. Upstream offers that for portable PDBs too, but only for
    // a `.pdb` file (a Wasm module's portable-PDB path gets no `.was_`).
    let compressible = |path: &str| match filetype {
        FileType::Pe | FileType::Pdb => true,
        FileType::PortablePdb => path.to_ascii_lowercase().ends_with(".pdb"),
        _ => false,
    };
    paths = paths
        .into_iter()
        .flat_map(|path| {
            let compressed = compressible(&path).then(|| {
                let mut compressed = path.clone();
                compressed.pop();
                compressed.push('_');
                compressed
            });
            compressed.into_iter().chain(Some(path))
        })
        .collect();

    paths
}

/// The locations to probe on a source, in the order upstream tries them.
///
/// File types are visited in the given order, skipping those the source's filters reject; the
/// locations of each file type are yielded highest priority first (i.e. the reverse of
/// [`get_directory_paths`]). Duplicates are kept, as upstream does.
pub fn source_locations(
    files: &CommonSourceConfig,
    filetypes: &[FileType],
    object_id: &ObjectId,
) -> Vec<String> {
    filetypes
        .iter()
        .filter(|&&filetype| files.filters.is_allowed(object_id, filetype))
        .flat_map(|&filetype| {
            get_directory_paths(files.layout, filetype, object_id)
                .into_iter()
                .rev()
        })
        .collect()
}

/// Interprets a Symbol Server style path (`name/key/name`) as a lookup, for the symstore proxy.
///
/// Returns the file types the path can refer to and the object to look for. The two file names
/// must agree (ignoring case); the key's shape decides the file type (`elf-buildid-sym-`,
/// `elf-buildid-`, `mach-uuid-sym-`, `mach-uuid-`, a `.pdb` name, or else a PE).
pub fn parse_symstore_path(path: &str) -> Option<(&'static [FileType], ObjectId)> {
    let mut parts = path.splitn(3, '/');
    let leading = parts.next()?;
    let key = parts.next()?;
    let trailing = parts.next()?;

    let leading_lower = leading.to_lowercase();
    if !leading_lower.eq_ignore_ascii_case(trailing) {
        return None;
    }

    // Byte-based prefix checks: the prefixes are ASCII, and this keeps the slicing panic-free.
    let key_suffix = |prefix: &str| {
        key.get(..prefix.len())
            .filter(|head| head.eq_ignore_ascii_case(prefix))
            .map(|_| &key[prefix.len()..])
    };
    let object = |object_type, code_id: &str| ObjectId {
        code_id: Some(CodeId::new(code_id.to_owned())),
        code_file: Some(leading.to_owned()),
        object_type,
        ..ObjectId::default()
    };

    if leading_lower.ends_with(".debug")
        && let Some(build_id) = key_suffix("elf-buildid-sym-")
    {
        return Some((&[FileType::ElfDebug], object(ObjectType::Elf, build_id)));
    }
    if let Some(build_id) = key_suffix("elf-buildid-") {
        return Some((&[FileType::ElfCode], object(ObjectType::Elf, build_id)));
    }
    if leading_lower.ends_with(".dwarf")
        && let Some(uuid) = key_suffix("mach-uuid-sym-")
    {
        return Some((&[FileType::MachDebug], object(ObjectType::Macho, uuid)));
    }
    if let Some(uuid) = key_suffix("mach-uuid-") {
        return Some((&[FileType::MachCode], object(ObjectType::Macho, uuid)));
    }
    if leading_lower.ends_with(".pdb") {
        let id = ObjectId {
            debug_id: Some(DebugId::from_breakpad(key).ok()?),
            debug_file: Some(leading.to_owned()),
            object_type: ObjectType::Pe,
            ..ObjectId::default()
        };
        return Some((&[FileType::Pdb], id));
    }
    Some((&[FileType::Pe], object(ObjectType::Pe, key)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::sources::SourceFilters;

    fn object(
        object_type: ObjectType,
        code_id: Option<&str>,
        code_file: Option<&str>,
        debug_id: Option<&str>,
        debug_file: Option<&str>,
    ) -> ObjectId {
        ObjectId {
            code_id: code_id.map(|s| s.parse().unwrap()),
            code_file: code_file.map(Into::into),
            debug_id: debug_id.map(|s| s.parse().unwrap()),
            debug_file: debug_file.map(Into::into),
            debug_checksum: None,
            object_type,
        }
    }

    fn pe() -> ObjectId {
        object(
            ObjectType::Pe,
            Some("5ab380779000"),
            Some("C:\\projects\\breakpad-tools\\windows\\Release\\crash.exe"),
            Some("3249d99d-0c40-4931-8610-f4e4fb0b6936-1"),
            Some("C:\\projects\\breakpad-tools\\windows\\Release\\crash.pdb"),
        )
    }

    /// Mixed-case names and an age above 9, to tell the casing rules apart.
    fn pe_mixed() -> ObjectId {
        object(
            ObjectType::Pe,
            Some("5AB38077abc000"),
            Some("C:\\Build\\MixedCase.DLL"),
            Some("3249d99d-0c40-4931-8610-f4e4fb0b6936-1a"),
            Some("C:\\Build\\MixedCase.PDB"),
        )
    }

    fn dotnet() -> ObjectId {
        object(
            ObjectType::PeDotnet,
            None,
            Some("C:\\app\\Foo.Bar.dll"),
            Some("0c1033f7-8d7e-4a33-b2e3-fd8d8b5d0bf9-5e4"),
            Some("C:\\src\\Foo.Bar.pdb"),
        )
    }

    fn macho() -> ObjectId {
        object(
            ObjectType::Macho,
            None,
            Some("/Users/travis/build/getsentry/breakpad-tools/macos/build/./crash"),
            Some("67e9247c-814e-392b-a027-dbde6748fcbf"),
            Some("crash"),
        )
    }

    fn elf() -> ObjectId {
        object(
            ObjectType::Elf,
            Some("dfb85de42daffd09640c8fe377d572de3e168920"),
            Some("/lib/x86_64-linux-gnu/libm-2.23.so"),
            Some("e45db8df-af2d-09fd-640c-8fe377d572de"),
            Some("/lib/x86_64-linux-gnu/libm-2.23.so"),
        )
    }

    fn wasm() -> ObjectId {
        object(
            ObjectType::Wasm,
            Some("67e9247c814e392ba027dbde6748fcbf"),
            None,
            Some("67e9247c-814e-392b-a027-dbde6748fcbf"),
            Some("file://foo.invalid/demo.wasm"),
        )
    }

    fn layout(ty: DirectoryLayoutType) -> DirectoryLayout {
        DirectoryLayout {
            ty,
            casing: FilenameCasing::Default,
        }
    }

    fn paths(ty: DirectoryLayoutType, filetype: FileType, id: &ObjectId) -> Vec<String> {
        get_directory_paths(layout(ty), filetype, id)
    }

    #[track_caller]
    fn check(ty: DirectoryLayoutType, filetype: FileType, id: &ObjectId, expected: &[&str]) {
        assert_eq!(paths(ty, filetype, id), expected, "{ty:?} {filetype:?}");
    }

    /// Every candidate over the lookup types of the object plus the source lookup, as a set.
    fn all_candidates(files: &CommonSourceConfig, id: &ObjectId) -> BTreeSet<String> {
        let mut filetypes = FileType::from_object_type(id.object_type).to_vec();
        filetypes.extend_from_slice(FileType::sources());
        source_locations(files, &filetypes, id)
            .into_iter()
            .collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    use DirectoryLayoutType::*;
    use FileType as F;

    #[test]
    fn native_pe() {
        let id = pe();
        check(
            Native,
            F::Pdb,
            &id,
            &[
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pdb",
            ],
        );
        check(
            Native,
            F::Pe,
            &id,
            &[
                "crash.exe/5AB380779000/crash.ex_",
                "crash.exe/5AB380779000/crash.exe",
            ],
        );
        // Portable PDBs share the PDB layout, compressed variant included (upstream
        // lists `.pd_` for them too).
        check(
            Native,
            F::PortablePdb,
            &id,
            &[
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pdb",
            ],
        );
        check(
            Native,
            F::Breakpad,
            &id,
            &["crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.sym"],
        );
        check(
            Native,
            F::SourceBundle,
            &id,
            &["crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.src.zip"],
        );
        // A PE code id is neither a build id nor a UUID, but the GDB layout does not care.
        check(Native, F::ElfCode, &id, &["5a/b380779000"]);
        check(Native, F::ElfDebug, &id, &["5a/b380779000.debug"]);
        check(Native, F::MachDebug, &id, &[]);
        check(Native, F::MachCode, &id, &[]);
        for filetype in [F::UuidMap, F::BcSymbolMap, F::Il2cpp, F::Proguard] {
            check(Native, filetype, &id, &[]);
        }
    }

    #[test]
    fn native_macho() {
        let id = macho();
        check(
            Native,
            F::MachCode,
            &id,
            &["67E9/247C/814E/392B/A027/DBDE6748FCBF.app"],
        );
        check(
            Native,
            F::MachDebug,
            &id,
            &["67E9/247C/814E/392B/A027/DBDE6748FCBF"],
        );
        check(
            Native,
            F::Breakpad,
            &id,
            &["crash/67E9247C814E392BA027DBDE6748FCBF0/crash.sym"],
        );
        check(
            Native,
            F::SourceBundle,
            &id,
            &[
                "crash/67E9247C814E392BA027DBDE6748FCBF0/crash.src.zip",
                "67E9/247C/814E/392B/A027/DBDE6748FCBF.src.zip",
            ],
        );
        // Without a code id there is no build id for the GDB layout.
        check(Native, F::ElfDebug, &id, &[]);
        // The PDB layout only needs a debug file name and id, whatever the object type.
        check(
            Native,
            F::Pdb,
            &id,
            &[
                "crash/67E9247C814E392BA027DBDE6748FCBF0/cras_",
                "crash/67E9247C814E392BA027DBDE6748FCBF0/crash",
            ],
        );
    }

    #[test]
    fn native_macho_prefers_code_id() {
        let mut id = macho();
        id.code_id = Some("502fc0a51ec13e479998684fa139dca7".parse().unwrap());
        check(
            Native,
            F::MachDebug,
            &id,
            &["502F/C0A5/1EC1/3E47/9998/684FA139DCA7"],
        );
        // A code id that is not a UUID does not fall back to the debug id.
        id.code_id = Some("dfb85de42daffd09640c8fe377d572de3e168920".parse().unwrap());
        check(Native, F::MachDebug, &id, &[]);
        check(Native, F::MachCode, &id, &[]);
        check(Symstore, F::MachDebug, &id, &[]);
        // Nor does having nothing at all produce anything.
        check(Native, F::MachDebug, &ObjectId::default(), &[]);
    }

    #[test]
    fn native_elf() {
        let id = elf();
        check(
            Native,
            F::ElfCode,
            &id,
            &["df/b85de42daffd09640c8fe377d572de3e168920"],
        );
        check(
            Native,
            F::ElfDebug,
            &id,
            &["df/b85de42daffd09640c8fe377d572de3e168920.debug"],
        );
        check(
            Native,
            F::Breakpad,
            &id,
            &["libm-2.23.so/E45DB8DFAF2D09FD640C8FE377D572DE0/libm-2.23.so.sym"],
        );
        check(
            Native,
            F::SourceBundle,
            &id,
            &[
                "libm-2.23.so/E45DB8DFAF2D09FD640C8FE377D572DE0/libm-2.23.so.src.zip",
                "df/b85de42daffd09640c8fe377d572de3e168920.src.zip",
            ],
        );
        check(Native, F::MachDebug, &id, &[]);
        // The debug file name is used for the PDB layout whatever its extension.
        check(
            Native,
            F::Pdb,
            &id,
            &[
                "libm-2.23.so/E45DB8DFAF2D09FD640C8FE377D572DE0/libm-2.23.s_",
                "libm-2.23.so/E45DB8DFAF2D09FD640C8FE377D572DE0/libm-2.23.so",
            ],
        );
    }

    #[test]
    fn native_wasm() {
        let id = wasm();
        check(
            Native,
            F::WasmDebug,
            &id,
            &["67/e9247c814e392ba027dbde6748fcbf.debug"],
        );
        check(
            Native,
            F::WasmCode,
            &id,
            &["67/e9247c814e392ba027dbde6748fcbf"],
        );
        // WASM never gets a Breakpad location, so the source bundle has only the GDB one.
        check(Native, F::Breakpad, &id, &[]);
        check(
            Native,
            F::SourceBundle,
            &id,
            &["67/e9247c814e392ba027dbde6748fcbf.src.zip"],
        );
    }

    #[test]
    fn native_dotnet() {
        let id = dotnet();
        check(
            Native,
            F::PortablePdb,
            &id,
            &[
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.pd_",
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.pdb",
            ],
        );
        // The Breakpad id keeps the real age, so both source bundle locations differ.
        check(
            Native,
            F::SourceBundle,
            &id,
            &[
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF95e4/Foo.Bar.src.zip",
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.src.zip",
            ],
        );
    }

    #[test]
    fn native_unknown_object_type() {
        let mut id = pe();
        id.object_type = ObjectType::Unknown;
        check(Native, F::SourceBundle, &id, &[]);
        // Breakpad does not depend on the object type.
        check(
            Native,
            F::Breakpad,
            &id,
            &["crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.sym"],
        );
    }

    #[test]
    fn breakpad_names_follow_upstream_suffix_chain() {
        assert_eq!(breakpad_sym_stem("crash.pdb"), "crash");
        assert_eq!(breakpad_sym_stem("crash.exe"), "crash.exe");
        assert_eq!(breakpad_sym_stem("crash.dll"), "crash.dll");
        assert_eq!(breakpad_sym_stem("crash.pdb.dll"), "crash");
        assert_eq!(breakpad_sym_stem("crash.pdb.exe"), "crash.pdb.exe");
        assert_eq!(breakpad_sym_stem("crash.pdb.dll.exe"), "crash");
        assert_eq!(breakpad_sym_stem("crash.PDB"), "crash.PDB");
        assert_eq!(breakpad_sym_stem("libm.so"), "libm.so");

        let mut id = pe();
        id.debug_file = Some("C:\\x\\crash.exe".into());
        check(
            Native,
            F::Breakpad,
            &id,
            &["crash.exe/3249D99D0C4049318610F4E4FB0B69361/crash.exe.sym"],
        );
        check(
            Native,
            F::Breakpad,
            &pe_mixed(),
            &["MixedCase.PDB/3249D99D0C4049318610F4E4FB0B69361a/MixedCase.PDB.sym"],
        );
    }

    #[test]
    fn symstore() {
        check(
            Symstore,
            F::Pdb,
            &pe(),
            &[
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pdb",
            ],
        );
        check(
            Symstore,
            F::Pe,
            &pe(),
            &[
                "crash.exe/5AB380779000/crash.ex_",
                "crash.exe/5AB380779000/crash.exe",
            ],
        );
        check(
            Symstore,
            F::SourceBundle,
            &pe(),
            &["crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.src.zip"],
        );
        check(
            Symstore,
            F::MachCode,
            &macho(),
            &["crash/mach-uuid-67e9247c814e392ba027dbde6748fcbf/crash"],
        );
        check(
            Symstore,
            F::MachDebug,
            &macho(),
            &["_.dwarf/mach-uuid-sym-67e9247c814e392ba027dbde6748fcbf/_.dwarf"],
        );
        check(
            Symstore,
            F::ElfCode,
            &elf(),
            &["libm-2.23.so/elf-buildid-dfb85de42daffd09640c8fe377d572de3e168920/libm-2.23.so"],
        );
        check(
            Symstore,
            F::ElfDebug,
            &elf(),
            &["_.debug/elf-buildid-sym-dfb85de42daffd09640c8fe377d572de3e168920/_.debug"],
        );
        check(
            Symstore,
            F::PortablePdb,
            &dotnet(),
            &[
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.pd_",
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.pdb",
            ],
        );
        // Source bundles only for native PE, and nothing for the formats symstore lacks.
        check(Symstore, F::SourceBundle, &macho(), &[]);
        check(Symstore, F::SourceBundle, &dotnet(), &[]);
        check(Symstore, F::SourceBundle, &elf(), &[]);
        for filetype in [
            F::Breakpad,
            F::WasmCode,
            F::WasmDebug,
            F::UuidMap,
            F::BcSymbolMap,
            F::Il2cpp,
            F::Proguard,
        ] {
            check(Symstore, filetype, &wasm(), &[]);
            check(Symstore, filetype, &pe(), &[]);
        }
        // Mach-O code needs the file name; ELF code needs the build id.
        let mut nameless = macho();
        nameless.code_file = None;
        check(Symstore, F::MachCode, &nameless, &[]);
        check(Symstore, F::ElfCode, &macho(), &[]);
    }

    #[test]
    fn symstore_keeps_names_and_mixes_id_casing() {
        let id = pe_mixed();
        check(
            Symstore,
            F::Pdb,
            &id,
            &[
                "MixedCase.PDB/3249D99D0C4049318610F4E4FB0B69361a/MixedCase.PD_",
                "MixedCase.PDB/3249D99D0C4049318610F4E4FB0B69361a/MixedCase.PDB",
            ],
        );
        check(
            Symstore,
            F::Pe,
            &id,
            &[
                "MixedCase.DLL/5AB38077abc000/MixedCase.DL_",
                "MixedCase.DLL/5AB38077abc000/MixedCase.DLL",
            ],
        );
        // A PE code id too short for a timestamp yields nothing.
        let mut short = pe();
        short.code_id = Some("5ab3807".parse().unwrap());
        check(Symstore, F::Pe, &short, &[]);
        short.code_id = Some("5ab38077".parse().unwrap());
        check(
            Symstore,
            F::Pe,
            &short,
            &[
                "crash.exe/5AB38077/crash.ex_",
                "crash.exe/5AB38077/crash.exe",
            ],
        );
    }

    #[test]
    fn ssqp() {
        let id = pe_mixed();
        check(
            Ssqp,
            F::Pdb,
            &id,
            &[
                "mixedcase.pdb/3249d99d0c4049318610f4e4fb0b69361A/mixedcase.pd_",
                "mixedcase.pdb/3249d99d0c4049318610f4e4fb0b69361A/mixedcase.pdb",
            ],
        );
        check(
            Ssqp,
            F::Pe,
            &id,
            &[
                "mixedcase.dll/5ab38077abc000/mixedcase.dl_",
                "mixedcase.dll/5ab38077abc000/mixedcase.dll",
            ],
        );
        check(
            Ssqp,
            F::SourceBundle,
            &id,
            &["mixedcase.pdb/3249d99d0c4049318610f4e4fb0b69361A/mixedcase.src.zip"],
        );
        check(
            Ssqp,
            F::PortablePdb,
            &dotnet(),
            &[
                "foo.bar.pdb/0c1033f78d7e4a33b2e3fd8d8b5d0bf9FFFFFFFF/foo.bar.pd_",
                "foo.bar.pdb/0c1033f78d7e4a33b2e3fd8d8b5d0bf9FFFFFFFF/foo.bar.pdb",
            ],
        );
        let mut elf = elf();
        elf.code_file = Some("/lib/LibFoo.SO".into());
        check(
            Ssqp,
            F::ElfCode,
            &elf,
            &["libfoo.so/elf-buildid-dfb85de42daffd09640c8fe377d572de3e168920/libfoo.so"],
        );
        check(
            Symstore,
            F::ElfCode,
            &elf,
            &["LibFoo.SO/elf-buildid-dfb85de42daffd09640c8fe377d572de3e168920/LibFoo.SO"],
        );
        let mut macho = macho();
        macho.code_file = Some("/Apps/MyApp".into());
        check(
            Ssqp,
            F::MachCode,
            &macho,
            &["myapp/mach-uuid-67e9247c814e392ba027dbde6748fcbf/myapp"],
        );
        check(Ssqp, F::Breakpad, &pe(), &[]);
    }

    #[test]
    fn symstore_index2() {
        check(
            SymstoreIndex2,
            F::Pdb,
            &pe(),
            &[
                "cr/crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_",
                "cr/crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pdb",
            ],
        );
        check(
            SymstoreIndex2,
            F::Pe,
            &pe(),
            &[
                "cr/crash.exe/5AB380779000/crash.ex_",
                "cr/crash.exe/5AB380779000/crash.exe",
            ],
        );
        check(
            SymstoreIndex2,
            F::SourceBundle,
            &pe(),
            &["cr/crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.src.zip"],
        );
        check(
            SymstoreIndex2,
            F::MachCode,
            &macho(),
            &["cr/crash/mach-uuid-67e9247c814e392ba027dbde6748fcbf/crash"],
        );
        check(
            SymstoreIndex2,
            F::MachDebug,
            &macho(),
            &["_/_.dwarf/mach-uuid-sym-67e9247c814e392ba027dbde6748fcbf/_.dwarf"],
        );
        check(
            SymstoreIndex2,
            F::ElfCode,
            &elf(),
            &["li/libm-2.23.so/elf-buildid-dfb85de42daffd09640c8fe377d572de3e168920/libm-2.23.so"],
        );
        check(
            SymstoreIndex2,
            F::ElfDebug,
            &elf(),
            &["_/_.debug/elf-buildid-sym-dfb85de42daffd09640c8fe377d572de3e168920/_.debug"],
        );
        // A one-letter name: the second character is the separator, so only one is used.
        let mut short = pe();
        short.code_file = Some("x".into());
        check(
            SymstoreIndex2,
            F::Pe,
            &short,
            &["x/x/5AB380779000/_", "x/x/5AB380779000/x"],
        );
        check(SymstoreIndex2, F::Breakpad, &pe(), &[]);
    }

    #[test]
    fn debuginfod() {
        check(
            Debuginfod,
            F::ElfCode,
            &elf(),
            &["dfb85de42daffd09640c8fe377d572de3e168920/executable"],
        );
        check(
            Debuginfod,
            F::ElfDebug,
            &elf(),
            &["dfb85de42daffd09640c8fe377d572de3e168920/debuginfo"],
        );
        for filetype in FileType::all() {
            if !matches!(filetype, F::ElfCode | F::ElfDebug) {
                check(Debuginfod, *filetype, &elf(), &[]);
                check(Debuginfod, *filetype, &pe(), &[]);
            }
        }
        check(Debuginfod, F::ElfCode, &macho(), &[]);
    }

    #[test]
    fn unified() {
        let one = |ty, id: &ObjectId| unified_path(ty, id).unwrap();
        assert_eq!(
            one(F::Pdb, &pe()),
            "32/49d99d0c4049318610f4e4fb0b69361/debuginfo"
        );
        assert_eq!(
            one(F::Pe, &pe()),
            "32/49d99d0c4049318610f4e4fb0b69361/executable"
        );
        assert_eq!(
            one(F::Breakpad, &pe()),
            "32/49d99d0c4049318610f4e4fb0b69361/breakpad"
        );
        assert_eq!(
            one(F::SourceBundle, &pe()),
            "32/49d99d0c4049318610f4e4fb0b69361/sourcebundle"
        );
        assert_eq!(
            one(F::Il2cpp, &pe()),
            "32/49d99d0c4049318610f4e4fb0b69361/il2cpp"
        );
        assert_eq!(
            one(F::MachCode, &macho()),
            "67/e9247c814e392ba027dbde6748fcbf/executable"
        );
        assert_eq!(
            one(F::MachDebug, &macho()),
            "67/e9247c814e392ba027dbde6748fcbf/debuginfo"
        );
        assert_eq!(
            one(F::Breakpad, &macho()),
            "67/e9247c814e392ba027dbde6748fcbf/breakpad"
        );
        assert_eq!(
            one(F::SourceBundle, &macho()),
            "67/e9247c814e392ba027dbde6748fcbf/sourcebundle"
        );
        assert_eq!(
            one(F::UuidMap, &macho()),
            "67/e9247c814e392ba027dbde6748fcbf/uuidmap"
        );
        assert_eq!(
            one(F::BcSymbolMap, &macho()),
            "67/e9247c814e392ba027dbde6748fcbf/bcsymbolmap"
        );
        assert_eq!(
            one(F::WasmDebug, &wasm()),
            "67/e9247c814e392ba027dbde6748fcbf/debuginfo"
        );
        assert_eq!(
            one(F::WasmCode, &wasm()),
            "67/e9247c814e392ba027dbde6748fcbf/executable"
        );
        assert_eq!(
            one(F::SourceBundle, &wasm()),
            "67/e9247c814e392ba027dbde6748fcbf/sourcebundle"
        );
        assert_eq!(
            one(F::ElfCode, &elf()),
            "df/b85de42daffd09640c8fe377d572de3e168920/executable"
        );
        assert_eq!(
            one(F::ElfDebug, &elf()),
            "df/b85de42daffd09640c8fe377d572de3e168920/debuginfo"
        );
        assert_eq!(
            one(F::Breakpad, &elf()),
            "df/b85de42daffd09640c8fe377d572de3e168920/breakpad"
        );
        assert_eq!(
            one(F::SourceBundle, &elf()),
            "df/b85de42daffd09640c8fe377d572de3e168920/sourcebundle"
        );
        assert_eq!(
            one(F::PortablePdb, &dotnet()),
            "0c/1033f78d7e4a33b2e3fd8d8b5d0bf95e4/debuginfo"
        );
        assert_eq!(
            one(F::SourceBundle, &dotnet()),
            "0c/1033f78d7e4a33b2e3fd8d8b5d0bf95e4/sourcebundle"
        );

        // The compression variant is added for PE/PDB in every layout, unified included.
        check(
            Unified,
            F::Pe,
            &pe(),
            &[
                "32/49d99d0c4049318610f4e4fb0b69361/executabl_",
                "32/49d99d0c4049318610f4e4fb0b69361/executable",
            ],
        );
        // ELF without a build id is named by its debug id (omnisym only: upstream has no
        // place for it), as a PDB is; ids for object-agnostic types need a known object
        // type; a ProGuard mapping needs its uuid.
        let mut no_build_id = elf();
        no_build_id.code_id = None;
        check(
            Unified,
            F::ElfDebug,
            &no_build_id,
            &["e4/5db8dfaf2d09fd640c8fe377d572de0/debuginfo"],
        );
        no_build_id.debug_id = None;
        check(Unified, F::ElfDebug, &no_build_id, &[]);
        let mut unknown = macho();
        unknown.object_type = ObjectType::Unknown;
        check(
            Unified,
            F::SourceBundle,
            &unknown,
            &["67/e9247c814e392ba027dbde6748fcbf/sourcebundle"],
        );
        unknown.debug_id = None;
        check(Unified, F::SourceBundle, &unknown, &[]);
        check(Unified, F::Breakpad, &unknown, &[]);
        check(Unified, F::Proguard, &ObjectId::default(), &[]);
        let mapping = ObjectId {
            debug_id: Some("5c1a7e0b-93d4-4f1e-8a62-0d7b3e9f4a21".parse().unwrap()),
            ..ObjectId::default()
        };
        check(
            Unified,
            F::Proguard,
            &mapping,
            &["5c/1a7e0b93d44f1e8a620d7b3e9f4a21/proguard"],
        );
        // Code ids too short to split produce nothing.
        let mut tiny = wasm();
        tiny.code_id = Some("a".parse().unwrap());
        check(Unified, F::WasmCode, &tiny, &[]);
    }

    #[test]
    fn slashsymbols() {
        check(
            SlashSymbols,
            F::ElfCode,
            &elf(),
            &["libm-2.23.so/dfb85de42daffd09640c8fe377d572de3e168920/symbols"],
        );
        // The layout ignores the file type ...
        check(
            SlashSymbols,
            F::Breakpad,
            &elf(),
            &["libm-2.23.so/dfb85de42daffd09640c8fe377d572de3e168920/symbols"],
        );
        // ... except that PE/PDB still get the compressed variant.
        check(
            SlashSymbols,
            F::Pdb,
            &pe(),
            &[
                "crash.exe/5ab380779000/symbol_",
                "crash.exe/5ab380779000/symbols",
            ],
        );
        check(SlashSymbols, F::MachCode, &macho(), &[]);
    }

    #[test]
    fn casing_applies_to_whole_path_before_compression() {
        let lower = DirectoryLayout {
            ty: Symstore,
            casing: FilenameCasing::Lowercase,
        };
        let upper = DirectoryLayout {
            ty: Symstore,
            casing: FilenameCasing::Uppercase,
        };
        assert_eq!(
            get_directory_paths(lower, F::Pdb, &pe_mixed()),
            [
                "mixedcase.pdb/3249d99d0c4049318610f4e4fb0b69361a/mixedcase.pd_",
                "mixedcase.pdb/3249d99d0c4049318610f4e4fb0b69361a/mixedcase.pdb",
            ]
        );
        assert_eq!(
            get_directory_paths(upper, F::Pdb, &pe_mixed()),
            [
                "MIXEDCASE.PDB/3249D99D0C4049318610F4E4FB0B69361A/MIXEDCASE.PD_",
                "MIXEDCASE.PDB/3249D99D0C4049318610F4E4FB0B69361A/MIXEDCASE.PDB",
            ]
        );
        assert_eq!(
            get_directory_paths(upper, F::ElfDebug, &elf()),
            ["_.DEBUG/ELF-BUILDID-SYM-DFB85DE42DAFFD09640C8FE377D572DE3E168920/_.DEBUG"]
        );
        let native_lower = DirectoryLayout {
            ty: Native,
            casing: FilenameCasing::Lowercase,
        };
        assert_eq!(
            get_directory_paths(native_lower, F::SourceBundle, &macho()),
            [
                "crash/67e9247c814e392ba027dbde6748fcbf0/crash.src.zip",
                "67e9/247c/814e/392b/a027/dbde6748fcbf.src.zip",
            ]
        );
        let native_upper = DirectoryLayout {
            ty: Native,
            casing: FilenameCasing::Uppercase,
        };
        assert_eq!(
            get_directory_paths(native_upper, F::ElfDebug, &elf()),
            ["DF/B85DE42DAFFD09640C8FE377D572DE3E168920.DEBUG"]
        );
        // Casing on top of SSQP still upper-cases everything.
        let ssqp_upper = DirectoryLayout {
            ty: Ssqp,
            casing: FilenameCasing::Uppercase,
        };
        assert_eq!(
            get_directory_paths(ssqp_upper, F::Pe, &pe_mixed()),
            [
                "MIXEDCASE.DLL/5AB38077ABC000/MIXEDCASE.DL_",
                "MIXEDCASE.DLL/5AB38077ABC000/MIXEDCASE.DLL",
            ]
        );
        // Casing is ASCII-only, like upstream.
        let mut unicode = pe();
        unicode.debug_file = Some("C:\\Ünïcode.pdb".into());
        assert_eq!(
            get_directory_paths(lower, F::Pdb, &unicode)[1],
            "Ünïcode.pdb/3249d99d0c4049318610f4e4fb0b69361/Ünïcode.pdb"
        );
    }

    /// Known upstream answer: the candidate locations for a Mach-O module with only ids.
    #[test]
    fn upstream_macho_candidates() {
        let id = object(
            ObjectType::Macho,
            Some("502fc0a51ec13e479998684fa139dca7"),
            None,
            Some("502fc0a5-1ec1-3e47-9998-684fa139dca7"),
            None,
        );
        assert_eq!(
            all_candidates(&CommonSourceConfig::default(), &id),
            set(&[
                // ElfDebug: every native lookup also asks for ELF debug files, and the GDB
                // layout happily uses the Mach-O code id as a build id.
                "50/2fc0a51ec13e479998684fa139dca7.debug",
                "502F/C0A5/1EC1/3E47/9998/684FA139DCA7",
                "502F/C0A5/1EC1/3E47/9998/684FA139DCA7.app",
                "502F/C0A5/1EC1/3E47/9998/684FA139DCA7.src.zip",
            ])
        );
    }

    /// Known upstream answer: the candidate locations for a WASM module.
    #[test]
    fn upstream_wasm_candidates() {
        let id = object(
            ObjectType::Wasm,
            Some("bda18fd85d4a4eb893022d6bfad846b1"),
            None,
            Some("bda18fd8-5d4a-4eb8-9302-2d6bfad846b1"),
            Some("file://foo.invalid/demo.wasm"),
        );
        assert_eq!(
            all_candidates(&CommonSourceConfig::default(), &id),
            set(&[
                "bd/a18fd85d4a4eb893022d6bfad846b1",
                "bd/a18fd85d4a4eb893022d6bfad846b1.debug",
                "bd/a18fd85d4a4eb893022d6bfad846b1.src.zip",
                // The Portable PDB part of the source lookup uses the PDB layout.
                "demo.wasm/BDA18FD85D4A4EB893022D6BFAD846B10/demo.wasm",
            ])
        );
    }

    #[test]
    fn filetype_filter_excludes_everything() {
        let files = CommonSourceConfig {
            filters: SourceFilters {
                filetypes: vec![F::MachCode],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(all_candidates(&files, &pe()).is_empty());
        assert!(!all_candidates(&files, &macho()).is_empty());
    }

    #[test]
    fn path_pattern_filter() {
        let files = CommonSourceConfig {
            filters: SourceFilters {
                path_patterns: vec!["*libm*".parse().unwrap()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(all_candidates(&files, &pe()).is_empty());
        assert!(!all_candidates(&files, &elf()).is_empty());
    }

    #[test]
    fn requires_checksum_filter() {
        let files = CommonSourceConfig {
            filters: SourceFilters {
                requires_checksum: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut id = dotnet();
        assert!(source_locations(&files, &[F::PortablePdb], &id).is_empty());
        id.debug_checksum = Some("SHA256:abcdef".into());
        assert_eq!(
            source_locations(&files, &[F::PortablePdb], &id),
            [
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.pdb",
                "Foo.Bar.pdb/0C1033F78D7E4A33B2E3FD8D8B5D0BF9ffffffff/Foo.Bar.pd_",
            ]
        );
    }

    #[test]
    fn source_locations_try_order() {
        let files = CommonSourceConfig::default();
        assert_eq!(
            source_locations(&files, &[F::Pe, F::Pdb, F::SourceBundle], &pe()),
            [
                "crash.exe/5AB380779000/crash.exe",
                "crash.exe/5AB380779000/crash.ex_",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pdb",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.pd_",
                "crash.pdb/3249D99D0C4049318610F4E4FB0B69361/crash.src.zip",
            ]
        );
        assert_eq!(
            source_locations(&files, &[F::SourceBundle], &macho()),
            [
                "67E9/247C/814E/392B/A027/DBDE6748FCBF.src.zip",
                "crash/67E9247C814E392BA027DBDE6748FCBF0/crash.src.zip",
            ]
        );
        assert!(source_locations(&files, &[], &pe()).is_empty());
    }

    fn every_layout() -> Vec<DirectoryLayout> {
        let mut layouts = Vec::new();
        for ty in [
            Native,
            Symstore,
            SymstoreIndex2,
            Ssqp,
            Debuginfod,
            Unified,
            SlashSymbols,
        ] {
            for casing in [
                FilenameCasing::Default,
                FilenameCasing::Lowercase,
                FilenameCasing::Uppercase,
            ] {
                layouts.push(DirectoryLayout { ty, casing });
            }
        }
        layouts
    }

    const EVERY_FILETYPE: &[FileType] = &[
        F::Pe,
        F::Pdb,
        F::PortablePdb,
        F::MachDebug,
        F::MachCode,
        F::ElfDebug,
        F::ElfCode,
        F::WasmDebug,
        F::WasmCode,
        F::Breakpad,
        F::SourceBundle,
        F::UuidMap,
        F::BcSymbolMap,
        F::Il2cpp,
        F::Proguard,
    ];

    #[test]
    fn hostile_file_names_never_escape() {
        let hostile = [
            "..\\..\\etc\\passwd",
            "../../etc/passwd",
            "..",
            ".",
            "",
            "/",
            "\\",
            "foo/..",
            "foo\\..\\",
            "C:\\..",
            "a/./.",
            "evil\n..",
            "..\t",
            "%2e%2e",
            "x/%2e%2e%2f",
        ];
        let fs = crate::sources::FilesystemSourceConfig {
            id: "fs".into(),
            path: "/srv/symbols".into(),
            files: CommonSourceConfig::default(),
            digests: Default::default(),
        };
        let http: crate::sources::HttpSourceConfig =
            serde_json::from_str(r#"{"id": "h", "url": "https://symbols.example/base/"}"#).unwrap();

        for name in hostile {
            for object_type in [
                ObjectType::Pe,
                ObjectType::PeDotnet,
                ObjectType::Macho,
                ObjectType::Elf,
                ObjectType::Wasm,
                ObjectType::Unknown,
            ] {
                let mut id = pe();
                id.object_type = object_type;
                id.code_file = Some(name.into());
                id.debug_file = Some(name.into());
                for layout in every_layout() {
                    for &filetype in EVERY_FILETYPE {
                        for path in get_directory_paths(layout, filetype, &id) {
                            for segment in path.split('/') {
                                assert!(
                                    !matches!(segment, "" | "." | "..")
                                        && !segment.contains(char::is_control),
                                    "{name:?} {layout:?} {filetype:?} -> {path:?}"
                                );
                            }
                            assert!(!path.contains('\\'), "{path:?}");
                            let joined = fs.join_path(&path);
                            assert!(joined.starts_with("/srv/symbols/"), "{joined:?}");
                            let url = http.join_url(&path).unwrap();
                            assert!(
                                url.as_str().starts_with("https://symbols.example/base/"),
                                "{url}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn hostile_names_sanitised_to_basename_or_dropped() {
        let mut id = pe();
        id.debug_file = Some("..\\..\\etc\\passwd".into());
        check(
            Symstore,
            F::Pdb,
            &id,
            &[
                "passwd/3249D99D0C4049318610F4E4FB0B69361/passw_",
                "passwd/3249D99D0C4049318610F4E4FB0B69361/passwd",
            ],
        );
        id.debug_file = Some("foo/..".into());
        check(Symstore, F::Pdb, &id, &[]);
        check(Native, F::Breakpad, &id, &[]);
        id.code_file = Some("/".into());
        check(Symstore, F::Pe, &id, &[]);
        check(SlashSymbols, F::ElfCode, &id, &[]);
        id.code_file = Some(String::new());
        check(Symstore, F::Pe, &id, &[]);
        id.code_file = Some(format!("C:\\{}", "a".repeat(300)));
        check(Symstore, F::Pe, &id, &[]);
    }

    #[test]
    fn parse_symstore_paths() {
        let (types, id) = parse_symstore_path("foo.exe/542D574Ec2000/foo.exe").unwrap();
        assert_eq!(types, [F::Pe]);
        assert_eq!(id.code_id.unwrap().as_str(), "542d574ec2000");
        assert_eq!(id.code_file.as_deref(), Some("foo.exe"));
        assert_eq!(id.object_type, ObjectType::Pe);

        let (types, id) =
            parse_symstore_path("foo.pdb/497b72f6390a44fc878e5a2d63b6cc4b1/foo.pdb").unwrap();
        assert_eq!(types, [F::Pdb]);
        assert_eq!(
            id.debug_id.unwrap().to_string(),
            "497b72f6-390a-44fc-878e-5a2d63b6cc4b-1"
        );
        assert_eq!(id.debug_file.as_deref(), Some("foo.pdb"));

        let (types, id) =
            parse_symstore_path("foo.pdb/497b72f6390a44fc878e5a2d63b6cc4bFFFFFFFF/foo.pdb")
                .unwrap();
        assert_eq!(types, [F::Pdb]);
        assert_eq!(
            id.debug_id.unwrap().to_string(),
            "497b72f6-390a-44fc-878e-5a2d63b6cc4b-ffffffff"
        );

        let (types, id) = parse_symstore_path(
            "foo.so/elf-buildid-180a373d6afbabf0eb1f09be1bc45bd796a71085/foo.so",
        )
        .unwrap();
        assert_eq!(types, [F::ElfCode]);
        assert_eq!(
            id.code_id.unwrap().as_str(),
            "180a373d6afbabf0eb1f09be1bc45bd796a71085"
        );
        assert_eq!(id.object_type, ObjectType::Elf);

        let (types, id) = parse_symstore_path(
            "_.debug/ELF-BUILDID-SYM-180a373d6afbabf0eb1f09be1bc45bd700000000/_.debug",
        )
        .unwrap();
        assert_eq!(types, [F::ElfDebug]);
        assert_eq!(
            id.code_id.unwrap().as_str(),
            "180a373d6afbabf0eb1f09be1bc45bd700000000"
        );

        let (types, id) =
            parse_symstore_path("foo.dylib/mach-uuid-497b72f6390a44fc878e5a2d63b6cc4b/foo.dylib")
                .unwrap();
        assert_eq!(types, [F::MachCode]);
        assert_eq!(
            id.code_id.unwrap().as_str(),
            "497b72f6390a44fc878e5a2d63b6cc4b"
        );
        assert_eq!(id.object_type, ObjectType::Macho);

        let (types, id) =
            parse_symstore_path("_.dwarf/mach-uuid-sym-497b72f6390a44fc878e5a2d63b6cc4b/_.dwarf")
                .unwrap();
        assert_eq!(types, [F::MachDebug]);
        assert_eq!(
            id.code_id.unwrap().as_str(),
            "497b72f6390a44fc878e5a2d63b6cc4b"
        );

        // The `-sym-` keys only mean debug files under the matching placeholder name.
        let (types, _) =
            parse_symstore_path("foo/mach-uuid-sym-497b72f6390a44fc878e5a2d63b6cc4b/foo").unwrap();
        assert_eq!(types, [F::MachCode]);

        // Names must agree (ignoring case), and there must be three parts.
        assert!(parse_symstore_path("FOO.PDB/497b72f6390a44fc878e5a2d63b6cc4b1/foo.pdb").is_some());
        assert!(parse_symstore_path("foo.pdb/497b72f6390a44fc878e5a2d63b6cc4b1/bar.pdb").is_none());
        assert!(parse_symstore_path("foo.pdb/497b72f6390a44fc878e5a2d63b6cc4b1").is_none());
        assert!(parse_symstore_path("foo.pdb/not-an-id/foo.pdb").is_none());
        assert!(parse_symstore_path("").is_none());
        // Short or odd keys never panic.
        assert!(parse_symstore_path("é/é/é").is_some());
        assert!(parse_symstore_path("a.debug/elf/a.debug").is_some());
    }

    #[test]
    fn parsed_symstore_paths_regenerate() {
        for path in [
            "foo.exe/542D574Ec2000/foo.exe",
            "foo.pdb/497B72F6390A44FC878E5A2D63B6CC4B1/foo.pdb",
            "foo.so/elf-buildid-180a373d6afbabf0eb1f09be1bc45bd796a71085/foo.so",
            "_.debug/elf-buildid-sym-180a373d6afbabf0eb1f09be1bc45bd796a71085/_.debug",
            "foo.dylib/mach-uuid-497b72f6390a44fc878e5a2d63b6cc4b/foo.dylib",
            "_.dwarf/mach-uuid-sym-497b72f6390a44fc878e5a2d63b6cc4b/_.dwarf",
        ] {
            let (types, id) = parse_symstore_path(path).unwrap();
            let regenerated = get_directory_paths(layout(Symstore), types[0], &id);
            assert!(
                regenerated.iter().any(|p| p.eq_ignore_ascii_case(path)),
                "{path} -> {regenerated:?}"
            );
        }
    }
}
