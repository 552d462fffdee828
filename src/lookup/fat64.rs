//! Fat (universal) Mach-O files in the 64-bit layout: `FAT_MAGIC_64` and `fat_arch_64`,
//! whose offsets and sizes are 64-bit. A universal file past 4 GiB (a large dSYM with
//! two architectures) must use it: `fat_arch` holds 32-bit offsets. goblin 0.10 reads
//! only the 32-bit layout, so symbolic calls this one an unknown format; its slices are
//! found here and each is read as the thin Mach-O file it is.

use std::ops::Range;

use goblin::mach::fat::{FatHeader, SIZEOF_FAT_HEADER};

/// `FAT_MAGIC_64` of `<mach-o/fat.h>`, big-endian like the rest of the fat header.
pub const FAT_MAGIC_64: u32 = 0xcafe_babf;
/// `fat_arch_64`: cputype, cpusubtype, offset (u64), size (u64), align, reserved.
const SIZEOF_FAT_ARCH_64: usize = 32;

/// Where each slice of `data` lies, if `data` is a fat file of the 64-bit layout; a
/// header that points outside the file is malformed, with the reason.
pub fn slices(data: &[u8]) -> Option<Result<Vec<Range<usize>>, String>> {
    let header = FatHeader::parse(data)
        .ok()
        .filter(|header| header.magic == FAT_MAGIC_64)?;
    Some(read_slices(data, header.nfat_arch))
}

fn read_slices(data: &[u8], count: u32) -> Result<Vec<Range<usize>>, String> {
    // Bounded by the file: a header cannot claim more entries than fit in it.
    let table = usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(SIZEOF_FAT_ARCH_64))
        .and_then(|len| data.get(SIZEOF_FAT_HEADER..)?.get(..len))
        .ok_or_else(|| format!("fat_arch_64 table of {count} entries past the end of the file"))?;
    let be64 = |entry: &[u8], at: usize| {
        u64::from_be_bytes(entry[at..at + 8].try_into().expect("8 bytes"))
    };
    table
        .chunks_exact(SIZEOF_FAT_ARCH_64)
        .enumerate()
        .map(|(index, entry)| {
            let (offset, size) = (be64(entry, 8), be64(entry, 16));
            offset
                .checked_add(size)
                .filter(|&end| end <= data.len() as u64)
                .map(|end| offset as usize..end as usize)
                .ok_or_else(|| {
                    format!(
                        "fat_arch_64 {index} ({size} bytes at {offset}) past the end of the \
                         file ({} bytes)",
                        data.len()
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use symbolic::common::Arch;
    use symbolic::debuginfo::Object;

    fn fixture(name: &str) -> Vec<u8> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/large_files");
        std::fs::read(dir.join(name)).unwrap()
    }

    /// The fixture (fixtures/large_files/build.sh): two executables, each slice byte for
    /// byte the thin file it was made from.
    #[test]
    fn slices_of_a_fat64_file_are_its_thin_objects() {
        let fat = fixture("fat64/prog");
        // What symbolic (goblin) makes of it on its own: no format it knows.
        assert!(symbolic::debuginfo::Archive::parse(&fat).is_err());
        let found = slices(&fat).unwrap().unwrap();
        assert_eq!(found.len(), 2);
        let thin = [fixture("fat64/prog-x86_64"), fixture("fat64/prog-arm64")];
        for (range, (thin, arch)) in found
            .iter()
            .zip(thin.iter().zip([Arch::Amd64, Arch::Arm64]))
        {
            assert_eq!(&fat[range.clone()], &thin[..]);
            assert_eq!(Object::parse(&fat[range.clone()]).unwrap().arch(), arch);
        }
        // Not this layout: a thin file, too short a file.
        assert!(slices(&thin[0]).is_none());
        assert!(slices(b"\xca\xfe\xba").is_none());
    }

    #[test]
    fn a_header_past_the_end_of_the_file_is_malformed() {
        let fat = fixture("fat64/prog");
        // One slice cut short, a table longer than the file, an offset that wraps.
        let cut = &fat[..fat.len() - 1];
        assert!(slices(cut).unwrap().unwrap_err().contains("fat_arch_64 1"));
        let mut many = fat.clone();
        many[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(slices(&many).unwrap().unwrap_err().contains("table"));
        let mut wraps = fat.clone();
        wraps[16..24].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(slices(&wraps).unwrap().is_err());
    }
}
