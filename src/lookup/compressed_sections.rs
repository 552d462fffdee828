//! The compressed sections of an ELF file and the sizes their headers declare, read
//! before anything inflates them. symbolic inflates a compressed DWARF or CFI section
//! into a buffer of the declared size whenever a reader asks for it (the lazy readers,
//! SymCache and CFI conversions, embedded sources), so the declared size is what reading
//! the file costs in memory: it is checked against the limits when the file is parsed,
//! and charged to the conversion budget by whoever inflates.

use goblin::container::Ctx;
use goblin::elf::compression_header::{CompressionHeader, ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD};
use goblin::elf::section_header::{SHF_COMPRESSED, SHN_XINDEX, SHT_NOBITS, SectionHeader};
use goblin::strtab::Strtab;

use crate::error::CacheError;
use crate::fetch::DecompressLimits;

/// One compressed section, named without its leading `.` or `.z` (as symbolic asks for
/// sections: `debug_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressedSection {
    pub name: String,
    /// Bytes in the file, the compression header included.
    pub compressed: u64,
    /// Bytes the header says it inflates to; symbolic allocates this much and never
    /// writes past it.
    pub inflated: u64,
}

/// The compressed sections of the ELF file `data`, found by the rules symbolic's
/// `ElfObject::find_section` follows (`SHF_COMPRESSED`, or the GNU `.z` prefix with a
/// `ZLIB` header). A section whose compression header cannot be read is skipped: symbolic
/// does not inflate it either. Empty for anything that is not ELF.
pub fn compressed_sections(data: &[u8]) -> Vec<CompressedSection> {
    let Ok(header) = goblin::elf::Elf::parse_header(data) else {
        return Vec::new();
    };
    let (Ok(container), Ok(endian)) = (header.container(), header.endianness()) else {
        return Vec::new();
    };
    let ctx = Ctx::new(container, endian);
    let Ok(headers) =
        SectionHeader::parse(data, header.e_shoff as usize, header.e_shnum as usize, ctx)
    else {
        return Vec::new();
    };
    // An index past the short field lives in the first header's `sh_link`.
    let strtab_index = match u32::from(header.e_shstrndx) {
        SHN_XINDEX => headers.first().map_or(0, |h| h.sh_link as usize),
        index => index as usize,
    };
    let names = headers
        .get(strtab_index)
        .and_then(|h| Strtab::parse(data, h.sh_offset as usize, h.sh_size as usize, 0).ok())
        .unwrap_or_default();

    let mut sections = Vec::new();
    for section in &headers {
        if section.sh_type == SHT_NOBITS || section.sh_offset == 0 {
            continue;
        }
        let Some(name) = names.get_at(section.sh_name) else {
            continue;
        };
        let name = match name.strip_prefix(".z") {
            Some(name) => name,
            None => match name.strip_prefix('.') {
                Some(name) if section.sh_flags & u64::from(SHF_COMPRESSED) != 0 => name,
                _ => continue,
            },
        };
        let Some(bytes) = data
            .get(section.sh_offset as usize..)
            .and_then(|rest| rest.get(..section.sh_size as usize))
        else {
            continue;
        };
        // As symbolic decides: the GNU header ("ZLIB" and the inflated size, big-endian,
        // in 8 bytes) by its magic, whichever way the section is marked; else an ELF
        // compression header of a type it inflates.
        let inflated = if let Some(rest) = bytes.strip_prefix(b"ZLIB") {
            match rest.get(..8) {
                Some(size) => u64::from_be_bytes(size.try_into().expect("8 bytes")),
                None => continue,
            }
        } else {
            match CompressionHeader::parse(bytes, 0, ctx) {
                Ok(chdr) if matches!(chdr.ch_type, ELFCOMPRESS_ZLIB | ELFCOMPRESS_ZSTD) => {
                    chdr.ch_size
                }
                _ => continue,
            }
        };
        sections.push(CompressedSection {
            name: name.to_owned(),
            compressed: bytes.len() as u64,
            inflated,
        });
    }
    sections
}

/// `Malformed` for the first section that would inflate past `limits`: past the largest
/// section size, or past the ratio to its compressed size (above the ratio's floor). No
/// real debug file compresses that well, and symbolic would allocate what the header
/// claims before finding out.
pub fn check_sections(
    sections: &[CompressedSection],
    limits: &DecompressLimits,
) -> Result<(), CacheError> {
    for section in sections {
        let why = limits.refuse(
            section.compressed,
            section.inflated,
            "object_file_max_decompressed_section_size",
        );
        if let Some(why) = why {
            return Err(CacheError::Malformed(format!(
                "compressed section {} {why}",
                section.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_size: u64, max_ratio: u64, ratio_floor: u64) -> DecompressLimits {
        DecompressLimits {
            max_size,
            max_ratio,
            ratio_floor,
        }
    }

    fn section(compressed: u64, inflated: u64) -> CompressedSection {
        CompressedSection {
            name: "debug_str".into(),
            compressed,
            inflated,
        }
    }

    #[test]
    fn sections_past_the_size_or_the_ratio_are_malformed() {
        let roomy = limits(u64::MAX, u64::MAX, 0);
        assert_eq!(check_sections(&[section(1 << 20, 1 << 30)], &roomy), Ok(()));
        let err = check_sections(&[section(1 << 20, 1 << 30)], &limits(1 << 29, u64::MAX, 0))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("object_file_max_decompressed_section_size")
        );
        let err =
            check_sections(&[section(1 << 20, 1 << 30)], &limits(u64::MAX, 200, 0)).unwrap_err();
        assert!(err.to_string().contains("max_decompression_ratio"));
        // Below the floor, any ratio passes; at the ratio exactly, too.
        assert_eq!(
            check_sections(&[section(1, 1 << 20)], &limits(u64::MAX, 200, 1 << 20)),
            Ok(())
        );
        assert_eq!(
            check_sections(&[section(1 << 20, 200 << 20)], &limits(u64::MAX, 200, 0)),
            Ok(())
        );
    }

    #[test]
    fn junk_has_no_compressed_sections() {
        for data in [
            &b""[..],
            b"\x7fELF",
            b"\x7fELF\x02\x01\x01\x00garbage",
            b"MZ",
        ] {
            assert_eq!(compressed_sections(data), []);
        }
    }
}
