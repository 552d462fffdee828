//! The checksum a stored symbfile is told apart by: the hex SHA-256 of its content,
//! kept beside it (`layout::checksum_path`), locally and in the fleet's store.

use std::fs;
use std::io;

use sha2::{Digest, Sha256};

/// The hex SHA-256 of a file's content, read from its start.
pub fn file_sha256(file: &fs::File) -> io::Result<String> {
    use std::io::{Read, Seek};
    let mut file = file;
    file.seek(io::SeekFrom::Start(0))?;
    let mut digest = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => digest.update(&buf[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(hex::encode(digest.finalize()))
}

/// Whether `text` is a checksum as [`file_sha256`] writes it.
pub fn is_checksum(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}
