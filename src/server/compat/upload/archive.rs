//! A Tecken zip checked and unpacked: every entry's name is one of Tecken's patterns
//! (`<debug_file>/<debug_id>/<file>`, or an ignored `<name>-symbols.txt` listing at the
//! root), the entries are bounded in count, size and compression ratio, each symbols
//! entry is unpacked to its own staging file and is the file its path names (its debug
//! id or code id is the one in the path). Any entry that fails refuses the whole zip,
//! before anything is published. Runs on a blocking thread.

use std::fs::File;
use std::io::{self, Read, Write};

use axum::http::StatusCode;
use tempfile::NamedTempFile;

use super::spool::Refusal;

/// What bounds the unpacking of one zip.
#[derive(Clone, Copy, Debug)]
pub struct ArchiveLimits {
    /// Entries in the zip, directories and ignored files included.
    pub max_entries: usize,
    /// One entry unpacked, and all of them together.
    pub max_size: u64,
    /// An entry's unpacked size over its compressed size.
    pub max_ratio: u64,
}

/// A symbols entry, unpacked and checked.
pub struct Entry {
    /// The entry's name in the zip, `<debug_file>/<debug_id>/<file>`.
    pub key: String,
    /// Its last component, the client's file name.
    pub file_name: String,
    pub file: NamedTempFile,
}

/// The zip's entries: symbols files to publish, and the names it held that Tecken
/// ignores.
pub struct Unpacked {
    pub entries: Vec<Entry>,
    pub ignored: Vec<String>,
}

enum Name<'a> {
    Directory,
    Ignored,
    Symbols { debug_id: &'a str },
}

/// Tecken's key characters (`VALID_KEY_CHARS`): no control bytes, none of
/// `\ ^ ` > < { } [ ] # % " ' |`, and no `/` within a component.
fn valid_component(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part
            .chars()
            .all(|c| !c.is_control() && !"\\^`><{}[]#%\"'|/".contains(c))
}

/// What an entry's name says it is; a refusal names the entry and why.
fn classify(name: &str) -> Result<Name<'_>, Refusal> {
    let refuse = |why: &str| Refusal::bad_request(format!("zip entry `{name}`: {why}"));
    if name.contains('\\') {
        return Err(refuse("backslashes are not allowed in entry names"));
    }
    if name.starts_with('/') || name.as_bytes().get(1) == Some(&b':') {
        return Err(refuse("absolute paths are not allowed"));
    }
    if name.split('/').any(|part| part == ".." || part == ".") {
        return Err(refuse("`..` and `.` are not allowed in entry names"));
    }
    if name.ends_with('/') {
        return Ok(Name::Directory);
    }
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [listing] if listing.to_ascii_lowercase().ends_with("-symbols.txt") => Ok(Name::Ignored),
        [.., ".DS_Store"] => Ok(Name::Ignored),
        [debug_file, debug_id, file_name]
            if valid_component(debug_file)
                && valid_component(file_name)
                && !debug_id.is_empty()
                && debug_id.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok(Name::Symbols { debug_id })
        }
        _ => Err(refuse(
            "unrecognized file pattern: expected <debug_file>/<debug_id>/<file> \
             (the id in hex) or <name>-symbols.txt",
        )),
    }
}

/// Checks every entry of the zip in `zip`, then unpacks the symbols files into staging
/// files made by `staging`; refused (nothing kept) if any entry is bad.
pub fn unpack(
    zip: File,
    limits: ArchiveLimits,
    staging: impl Fn() -> io::Result<NamedTempFile>,
) -> Result<Unpacked, Refusal> {
    let mut archive = zip::ZipArchive::new(io::BufReader::new(zip))
        .map_err(|err| Refusal::bad_request(format!("not a zip file: {err}")))?;
    if archive.len() > limits.max_entries {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the zip has {} entries, more than {} (store.max_archive_entries)",
                archive.len(),
                limits.max_entries
            ),
        ));
    }
    // Names and sizes first, from the central directory: a bad entry late in a large
    // zip is refused before anything is unpacked.
    let mut wanted = Vec::new();
    let mut ignored = Vec::new();
    let mut claimed: u64 = 0;
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|err| Refusal::bad_request(format!("zip entry {index}: {err}")))?;
        let name = entry
            .name()
            .map_err(|err| Refusal::bad_request(format!("zip entry {index}: its name: {err}")))?
            .into_owned();
        match classify(&name)? {
            Name::Directory => continue,
            Name::Ignored => {
                ignored.push(name);
                continue;
            }
            Name::Symbols { .. } => {}
        }
        check_size(&name, entry.size(), entry.compressed_size(), limits)?;
        claimed = claimed.saturating_add(entry.size());
        if claimed > limits.max_size {
            return Err(total_too_large(limits));
        }
        wanted.push((index, name));
    }
    if wanted.is_empty() {
        return Err(Refusal::bad_request(
            "the zip holds no symbols file (<debug_file>/<debug_id>/<file>)",
        ));
    }
    let mut entries = Vec::with_capacity(wanted.len());
    let mut total: u64 = 0;
    for (index, name) in wanted {
        let entry = archive
            .by_index(index)
            .map_err(|err| Refusal::bad_request(format!("zip entry `{name}`: {err}")))?;
        let compressed = entry.compressed_size();
        let mut file = staging().map_err(Refusal::internal)?;
        let written = copy_bounded(entry, file.as_file_mut(), &name, compressed, limits, total)?;
        total += written;
        file.as_file_mut().flush().map_err(Refusal::internal)?;
        check_identity(&name, &file)?;
        let file_name = name.rsplit('/').next().unwrap_or_default().to_owned();
        entries.push(Entry {
            key: name,
            file_name,
            file,
        });
    }
    Ok(Unpacked { entries, ignored })
}

fn check_size(
    name: &str,
    size: u64,
    compressed: u64,
    limits: ArchiveLimits,
) -> Result<(), Refusal> {
    if size > limits.max_size {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "zip entry `{name}`: {size} bytes unpacked, more than {} (store.max_file_size)",
                limits.max_size
            ),
        ));
    }
    // Small entries compress as they like; the ratio only bounds what could grow big.
    if size > 1 << 20 && size / compressed.max(1) > limits.max_ratio {
        return Err(Refusal::bad_request(format!(
            "zip entry `{name}`: compressed {compressed} bytes unpack to {size}, a ratio over {} \
             (store.max_archive_ratio)",
            limits.max_ratio
        )));
    }
    Ok(())
}

fn total_too_large(limits: ArchiveLimits) -> Refusal {
    Refusal::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the zip's entries unpack to more than {} bytes (store.max_file_size)",
            limits.max_size
        ),
    )
}

/// Copies an entry's bytes as they inflate, counting them against the limits: the
/// sizes the zip claims are checked before, the bytes that come out here.
fn copy_bounded(
    mut entry: impl Read,
    out: &mut File,
    name: &str,
    compressed: u64,
    limits: ArchiveLimits,
    before: u64,
) -> Result<u64, Refusal> {
    let mut buf = vec![0u8; 1 << 20];
    let mut written: u64 = 0;
    loop {
        let n = match entry.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                return Err(Refusal::bad_request(format!(
                    "zip entry `{name}` cannot be unpacked: {err}"
                )));
            }
        };
        written += n as u64;
        check_size(name, written, compressed, limits)?;
        if before + written > limits.max_size {
            return Err(total_too_large(limits));
        }
        out.write_all(&buf[..n]).map_err(Refusal::internal)?;
    }
    Ok(written)
}

/// Whether the unpacked file is a debug file whose debug id (Breakpad's form, as the
/// path spells it) or code id is the id in its path.
fn check_identity(name: &str, file: &NamedTempFile) -> Result<(), Refusal> {
    let Ok(Name::Symbols { debug_id, .. }) = classify(name) else {
        return Err(Refusal::bad_request(format!(
            "zip entry `{name}`: not a symbols file"
        )));
    };
    let not_debug = |why: String| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("zip entry `{name}`: not a debug file ({why})"),
        )
    };
    let view = symbolic::common::ByteView::open(file.path()).map_err(Refusal::internal)?;
    let ids = super::spool::object_ids(&view, true).map_err(|err| not_debug(err.to_string()))?;
    if ids.is_empty() {
        return Err(not_debug("it holds no object".to_owned()));
    }
    if ids.iter().any(|id| id.eq_ignore_ascii_case(debug_id)) {
        return Ok(());
    }
    Err(Refusal::bad_request(format!(
        "zip entry `{name}`: its path names id {debug_id}, but the file is {}",
        ids[0]
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_tecken_patterns_and_never_leave_their_place() {
        for bad in [
            "../x/ABC/x.sym",
            "a/../b/x.sym",
            "/abs/ABC/x.sym",
            "C:/abs/ABC/x.sym",
            "a\\ABC\\x.sym",
            "a/XYZ/x.sym",
            "a/ABC/x/y.sym",
            "x.sym",
        ] {
            let err = classify(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(err.reason.contains(bad), "{}", err.reason);
        }
        assert!(matches!(
            classify("libc.so/ABCDEF0/libc.so.sym"),
            Ok(Name::Symbols {
                debug_id: "ABCDEF0",
                ..
            })
        ));
        assert!(matches!(classify("firefox-symbols.txt"), Ok(Name::Ignored)));
        assert!(matches!(classify("dir/"), Ok(Name::Directory)));
    }
}
