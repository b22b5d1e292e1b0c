//! How packfs fills the ZIP records (defined in `packfs_format::zip`):
//! local headers, central directory records, the extra fields we emit
//! (Zip64 0x0001, extended timestamp 0x5455, Info-ZIP Unix uid/gid 0x7875)
//! and the end records.
//!
//! Zip64 is used only where a value does not fit: an entry's extra field
//! carries exactly the overflowing sizes/offset (the local header's carries
//! both sizes, as APPNOTE 4.5.3 requires), and the Zip64 end record and
//! locator are written only when the entry count, the central directory's
//! size or its offset do not fit the classic end record.

use packfs_format::zip::central::CentralHeader;
use packfs_format::zip::end::{EndRecord, Zip64EndRecord, Zip64Locator};
use packfs_format::zip::extra::{self, UNIX_EXTRAS_LEN};
use packfs_format::zip::local::LocalHeader;
pub use packfs_format::zip::time::dos_datetime;
use packfs_format::zip::*;

pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;

/// What is known about an entry before its data is written.
#[derive(Clone, Debug)]
pub struct Meta<'a> {
    /// Path relative to the source root with '/' separators; directories end in '/'.
    pub name: &'a [u8],
    /// `st_mode`: type bits and permissions.
    pub mode: u32,
    pub mtime: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What is known once the data is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    pub method: u16,
    pub crc: u32,
    pub compressed: u64,
    pub size: u64,
}

fn clamp32(v: u64) -> u32 {
    v.min(MAX32) as u32
}

/// Bit 11 for names that are valid UTF-8 and not plain ASCII. Other names
/// are written as their raw bytes with the bit clear (readers then take
/// them as CP437, as they do for Info-ZIP's own archives).
fn flags(name: &[u8]) -> u16 {
    if !name.is_ascii() && std::str::from_utf8(name).is_ok() {
        FLAG_UTF8
    } else {
        0
    }
}

fn version_needed(method: u16, zip64: bool) -> u16 {
    let v = match method {
        METHOD_DEFLATE => 20,
        METHOD_ZSTD => 63,
        _ => 10,
    };
    if zip64 {
        v.max(45)
    } else {
        v
    }
}

/// Whether the local header needs a Zip64 extra: decided from the
/// uncompressed size alone, which the writer knows before streaming (the
/// compressed size never exceeds it: an entry that would grow is stored).
pub fn local_zip64(size: u64) -> bool {
    size >= MAX32
}

/// Whether any record of the entry uses Zip64 (sets "version needed" 4.5).
fn entry_zip64(s: &Sizes, offset: u64) -> bool {
    local_zip64(s.size) || s.compressed >= MAX32 || offset >= MAX32
}

/// Extended timestamp (modification time only, as 32 bits: times after
/// 2038 are read back as unsigned by unzip because the DOS date agrees)
/// and Info-ZIP's Unix uid/gid field, identical in local and central
/// headers.
fn unix_extras(b: &mut Vec<u8>, m: &Meta) {
    extra::extended_timestamp(b, m.mtime);
    extra::infozip_unix(b, m.uid, m.gid);
}

/// A local file header. With `zip64` (see [`local_zip64`]) both sizes go
/// into a Zip64 extra and the 32-bit fields hold 0xFFFFFFFF. Its length
/// depends only on `m` and `zip64`, so a header written with placeholder
/// sizes can be overwritten in place.
pub fn local_header(b: &mut Vec<u8>, m: &Meta, s: &Sizes, offset: u64, zip64: bool) {
    let (dos_date, dos_time) = dos_datetime(m.mtime);
    let (csize, size) = if zip64 {
        (MAX32 as u32, MAX32 as u32)
    } else {
        (s.compressed as u32, s.size as u32)
    };
    LocalHeader {
        version_needed: version_needed(s.method, zip64 || entry_zip64(s, offset)),
        flags: flags(m.name),
        method: s.method,
        dos_time,
        dos_date,
        crc: s.crc,
        csize,
        size,
        name_len: m.name.len() as u16,
        extra_len: UNIX_EXTRAS_LEN + if zip64 { 20 } else { 0 },
    }
    .encode(b);
    b.extend_from_slice(m.name);
    if zip64 {
        extra::zip64(b, &[s.size, s.compressed]);
    }
    unix_extras(b, m);
}

/// A central directory record.
pub fn central_record(b: &mut Vec<u8>, m: &Meta, s: &Sizes, offset: u64) {
    let (dos_date, dos_time) = dos_datetime(m.mtime);
    let z64: Vec<u64> = [
        (s.size >= MAX32, s.size),
        (s.compressed >= MAX32, s.compressed),
        (offset >= MAX32, offset),
    ]
    .into_iter()
    .filter_map(|(over, v)| over.then_some(v))
    .collect();
    let z64_len = if z64.is_empty() {
        0
    } else {
        4 + 8 * z64.len() as u16
    };
    let dos = if m.mode & 0o170000 == S_IFDIR {
        DOS_DIR
    } else {
        0
    };
    CentralHeader {
        made_by: VERSION_MADE_BY,
        version_needed: version_needed(s.method, entry_zip64(s, offset)),
        flags: flags(m.name),
        method: s.method,
        dos_time,
        dos_date,
        crc: s.crc,
        csize: clamp32(s.compressed),
        size: clamp32(s.size),
        name_len: m.name.len() as u16,
        extra_len: UNIX_EXTRAS_LEN + z64_len,
        comment_len: 0,
        disk_start: 0,
        internal: 0,
        external: (m.mode << 16) | dos,
        local_offset: clamp32(offset),
    }
    .encode(b);
    b.extend_from_slice(m.name);
    if !z64.is_empty() {
        extra::zip64(b, &z64);
    }
    unix_extras(b, m);
}

/// The end records for `entries` central records of `cd_size` bytes at
/// `cd_offset`: the Zip64 end record and locator first when a value does
/// not fit the classic record, then the classic record (with 0xFFFF /
/// 0xFFFFFFFF in the fields that overflowed).
pub fn end_records(b: &mut Vec<u8>, entries: u64, cd_offset: u64, cd_size: u64) {
    let zip64 = entries >= MAX16 || cd_offset >= MAX32 || cd_size >= MAX32;
    if zip64 {
        Zip64EndRecord {
            record_size: (EOCD64_LEN - 12) as u64,
            made_by: VERSION_MADE_BY,
            version_needed: 45,
            disk: 0,
            cd_disk: 0,
            entries_here: entries,
            entries,
            cd_size,
            cd_offset,
        }
        .encode(b);
        Zip64Locator {
            record_disk: 0,
            record_offset: cd_offset + cd_size,
            total_disks: 1,
        }
        .encode(b);
    }
    let n = entries.min(MAX16) as u16;
    EndRecord {
        disk: 0,
        cd_disk: 0,
        entries_here: n,
        entries: n,
        cd_size: clamp32(cd_size),
        cd_offset: clamp32(cd_offset),
        comment_len: 0,
    }
    .encode(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dos_times_are_utc_and_clamped() {
        // 2020-09-13 12:26:40 UTC.
        assert_eq!(
            dos_datetime(1_600_000_000),
            (
                ((2020 - 1980) << 9) | (9 << 5) | 13,
                (12 << 11) | (26 << 5) | 20
            )
        );
        // 2000-02-29 23:59:59 (odd seconds round down).
        assert_eq!(
            dos_datetime(951_868_799),
            (
                ((2000 - 1980) << 9) | (2 << 5) | 29,
                (23 << 11) | (59 << 5) | 29
            )
        );
        assert_eq!(dos_datetime(1), ((1 << 5) | 1, 0));
        assert_eq!(dos_datetime(315_532_800), ((1 << 5) | 1, 0)); // 1980-01-01
                                                                  // 2096-10-02 07:06:40: after 2038, so unzip reads the UT time unsigned.
        let (d, _) = dos_datetime(4_000_000_000);
        assert_eq!(d, ((2096 - 1980) << 9) | (10 << 5) | 2);
    }

    fn meta(name: &[u8]) -> Meta<'_> {
        Meta {
            name,
            mode: S_IFREG | 0o644,
            mtime: 1_600_000_000,
            uid: 1000,
            gid: 100,
        }
    }

    #[test]
    fn zip64_only_where_values_overflow() {
        let m = meta(b"a");
        let small = Sizes {
            method: METHOD_DEFLATE,
            crc: 1,
            compressed: 10,
            size: 20,
        };
        let mut b = Vec::new();
        local_header(&mut b, &m, &small, 0, false);
        assert_eq!(b.len(), LOCAL_LEN + 1 + UNIX_EXTRAS_LEN as usize);
        assert_eq!(u16::from_le_bytes([b[4], b[5]]), 20);
        b.clear();
        central_record(&mut b, &m, &small, 0);
        assert_eq!(b.len(), 46 + 1 + UNIX_EXTRAS_LEN as usize);

        // Only the offset overflows: the central extra holds just the offset.
        b.clear();
        central_record(&mut b, &m, &small, 5 << 30);
        assert_eq!(b.len(), 46 + 1 + 12 + UNIX_EXTRAS_LEN as usize);
        assert_eq!(&b[42..46], &[0xFF; 4]);
        assert_eq!(&b[47..51], &[1, 0, 8, 0]);
        assert_eq!(u64::from_le_bytes(b[51..59].try_into().unwrap()), 5 << 30);
        assert_eq!(u16::from_le_bytes([b[6], b[7]]), 45);

        // A 5 GiB stored entry: local carries both sizes, central both.
        let big = Sizes {
            method: METHOD_STORED,
            crc: 1,
            compressed: 5 << 30,
            size: 5 << 30,
        };
        b.clear();
        local_header(&mut b, &m, &big, 0, local_zip64(big.size));
        assert_eq!(b.len(), LOCAL_LEN + 1 + 20 + UNIX_EXTRAS_LEN as usize);
        assert_eq!(&b[18..26], &[0xFF; 8]);
        b.clear();
        central_record(&mut b, &m, &big, 0);
        assert_eq!(b.len(), 46 + 1 + 20 + UNIX_EXTRAS_LEN as usize);

        b.clear();
        end_records(&mut b, 65_534, 1000, 1000);
        assert_eq!(b.len(), 22);
        b.clear();
        end_records(&mut b, 65_535, 1000, 1000);
        assert_eq!(b.len(), 56 + 20 + 22);
        assert_eq!(&b[b.len() - 14..b.len() - 10], &[0xFF, 0xFF, 0xFF, 0xFF]);
    }

    #[test]
    fn utf8_flag_only_for_non_ascii_utf8() {
        assert_eq!(flags(b"plain.txt"), 0);
        assert_eq!(flags("ünïcødé".as_bytes()), FLAG_UTF8);
        assert_eq!(flags(b"latin1-\xe9"), 0);
    }
}
