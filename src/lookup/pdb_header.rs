//! What a handle knows of a PDB without symbolic's `PdbObject`: its identity, read from
//! the PDB information and DBI streams.
//!
//! `PdbObject::parse` opens the file through a `Cursor`, so the pdb crate copies every
//! stream it reads onto the heap, and it keeps the public symbol records for as long as
//! the object lives. Those are some 4.5 % of the file (231 MiB of a 5 GiB PDB), held
//! by every handle of a PDB in the object cache, and a PDB's debug information is
//! read through `native::pdb_read` anyway.

use std::io::Cursor;

use symbolic::common::{Arch, DebugId, Uuid};
use symbolic::debuginfo::pdb::PdbError;

/// A PDB's identity, as symbolic's `PdbObject` reports it.
#[derive(Clone, Copy, Debug)]
pub struct PdbHeader {
    pub debug_id: DebugId,
    pub arch: Arch,
}

impl PdbHeader {
    /// Reads the streams `PdbObject::parse` reads, failing where it fails, but for the
    /// public symbol records, which it only copies: a PDB whose records are broken is
    /// refused when it is converted or read lazily, as `malformed` still. The DBI stream
    /// is copied while this runs (a few MiB for a PDB of GiBs).
    pub fn read(data: &[u8]) -> Result<Self, PdbError> {
        let mut pdb = pdb::PDB::open(Cursor::new(data))?;
        let debug_info = pdb.debug_information()?;
        let pdb_info = pdb.pdb_information()?;
        pdb.sections()?;
        // `PdbObject::debug_id`: the DBI stream's age is more likely the executable's than
        // the header's, which tools bump when they rewrite the PDB.
        let age = debug_info.age().unwrap_or(pdb_info.age);
        let debug_id = match Uuid::from_slice(&pdb_info.guid.as_bytes()[..]) {
            Ok(uuid) => DebugId::from_parts(uuid, age),
            Err(_) => DebugId::default(),
        };
        // `arch_from_machine`, private to symbolic.
        let arch = match debug_info.machine_type() {
            Ok(pdb::MachineType::X86) => Arch::X86,
            Ok(pdb::MachineType::Amd64) => Arch::Amd64,
            Ok(pdb::MachineType::Arm) => Arch::Arm,
            Ok(pdb::MachineType::Arm64) => Arch::Arm64,
            Ok(pdb::MachineType::PowerPC) => Arch::Ppc,
            _ => Arch::Unknown,
        };
        Ok(PdbHeader { debug_id, arch })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use symbolic::debuginfo::Object;

    use super::*;

    /// Every PDB fixture, and damaged copies of one: the same identity as symbolic's, or
    /// refused where symbolic refuses (symbolic may refuse more: its symbol records).
    #[test]
    fn a_pdb_header_is_symbolics_identity() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut pdbs = Vec::new();
        for entry in walkdir::WalkDir::new(&fixtures).into_iter().flatten() {
            if entry.path().extension().is_some_and(|e| e == "pdb") {
                let data = std::fs::read(entry.path()).unwrap();
                if Object::peek(&data) == symbolic::debuginfo::FileFormat::Pdb {
                    pdbs.push(data);
                }
            }
        }
        assert!(pdbs.len() >= 4, "{} PDB fixtures", pdbs.len());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let original = pdbs[0].clone();
        for round in 0..60 {
            let mut data = original.clone();
            if round % 2 == 0 {
                // Cut short: streams whose pages lie past the end.
                data.truncate(data.len() * round / 60);
            } else {
                // Flipped bytes, a third of them in the superblock and stream directory.
                for _ in 0..1 + round % 6 {
                    let span = if round % 3 == 0 { 0x3000 } else { data.len() };
                    let at = (next() as usize) % span.min(data.len());
                    data[at] = next() as u8;
                }
            }
            pdbs.push(data);
        }
        let (mut read, mut refused, mut lenient) = (0, 0, 0);
        for data in &pdbs {
            let theirs = std::panic::catch_unwind(|| {
                Object::parse(data).ok().map(|o| (o.debug_id(), o.arch()))
            });
            let ours = std::panic::catch_unwind(|| PdbHeader::read(data).ok());
            let (Ok(theirs), Ok(ours)) = (theirs, ours) else {
                continue;
            };
            match (theirs, ours) {
                (Some(theirs), Some(ours)) => {
                    assert_eq!(theirs, (ours.debug_id, ours.arch));
                    read += 1;
                }
                (None, None) => refused += 1,
                // Broken symbol records, which are not read here.
                (None, Some(_)) => lenient += 1,
                (Some(_), None) => panic!("symbolic reads a PDB that is refused"),
            }
        }
        assert!(
            read >= 4 && refused > 0,
            "read {read}, refused {refused}, symbolic alone refused {lenient}"
        );
    }
}
