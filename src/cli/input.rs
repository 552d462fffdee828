//! What the offline run was given: unpacked if compressed (as the server unpacks
//! uploads), then told apart by its first bytes. A minidump starts with its magic, a
//! stored event with `{`; anything else is read as an Apple crash report, whose parser
//! then says what it did not understand.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;
use tempfile::NamedTempFile;

use crate::fetch::decompress_file;
use crate::native::CrashKind;

pub enum Input {
    Crash {
        kind: CrashKind,
        path: PathBuf,
        /// The unpacked copy of a compressed file, deleted when done.
        _unpacked: Option<NamedTempFile>,
    },
    Event(Value),
}

impl Input {
    /// Reads `path`, unpacking a compressed file into `temp_dir`.
    pub fn read(path: &Path, temp_dir: &Path) -> anyhow::Result<Input> {
        let name = path.display();
        std::fs::File::open(path).with_context(|| format!("cannot read {name}"))?;
        std::fs::create_dir_all(temp_dir)
            .with_context(|| format!("cannot create {}", temp_dir.display()))?;
        // The file is the user's own: no size limit but the disk's.
        let unpacked = decompress_file(path, temp_dir, u64::MAX)
            .with_context(|| format!("cannot unpack {name}"))?;
        let plain = unpacked.as_ref().map_or(path, |file| file.path());
        let mut head = [0u8; 64];
        let len = read_head(plain, &mut head).with_context(|| format!("cannot read {name}"))?;
        let head = &head[..len];
        let kind = if head.starts_with(b"MDMP") || head.starts_with(b"PMDM") {
            CrashKind::Minidump
        } else if head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            let file = std::fs::File::open(plain).with_context(|| format!("cannot read {name}"))?;
            let event = serde_json::from_reader(std::io::BufReader::new(file))
                .with_context(|| format!("{name} is not a valid JSON event"))?;
            return Ok(Input::Event(event));
        } else {
            CrashKind::AppleCrashReport
        };
        Ok(Input::Crash {
            kind,
            path: plain.to_owned(),
            _unpacked: unpacked,
        })
    }
}

fn read_head(path: &Path, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut file = std::fs::File::open(path)?;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..])? {
            0 => break,
            n => len += n,
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn read(data: &[u8]) -> Input {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input");
        std::fs::write(&path, data).unwrap();
        Input::read(&path, &dir.path().join("tmp")).unwrap()
    }

    fn kind(input: &Input) -> Option<CrashKind> {
        match input {
            Input::Crash { kind, .. } => Some(*kind),
            Input::Event(_) => None,
        }
    }

    #[test]
    fn inputs_are_told_apart_by_their_first_bytes() {
        assert_eq!(kind(&read(b"MDMP\x93\xa7rest")), Some(CrashKind::Minidump));
        assert_eq!(
            kind(&read(b"Incident Identifier: 1\n")),
            Some(CrashKind::AppleCrashReport)
        );
        match read(b"\n  {\"platform\": \"native\"}") {
            Input::Event(event) => assert_eq!(event["platform"], "native"),
            Input::Crash { .. } => panic!("an event"),
        }
    }

    #[test]
    fn compressed_inputs_are_unpacked_first() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{\"event_id\": \"abc\"}").unwrap();
        match read(&gz.finish().unwrap()) {
            Input::Event(event) => assert_eq!(event["event_id"], "abc"),
            Input::Crash { .. } => panic!("an event"),
        }
    }
}
