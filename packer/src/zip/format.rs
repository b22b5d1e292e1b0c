//! ZIP records as written: local headers, central directory records, the
//! extra fields we emit (Zip64 0x0001, extended timestamp 0x5455, Info-ZIP
//! Unix uid/gid 0x7875), DOS times and the (Zip64) end of central directory.
//!
//! Zip64 is used only where a value does not fit: an entry's extra field
//! carries exactly the overflowing sizes/offset (the local header's carries
//! both sizes, as APPNOTE 4.5.3 requires), and the Zip64 end record and
//! locator are written only when the entry count, the central directory's
//! size or its offset do not fit the classic end record.

/// Signatures.
pub const SIG_LOCAL: u32 = 0x0403_4b50;
pub const SIG_CENTRAL: u32 = 0x0201_4b50;
pub const SIG_EOCD: u32 = 0x0605_4b50;
pub const SIG_EOCD64: u32 = 0x0606_4b50;
pub const SIG_EOCD64_LOCATOR: u32 = 0x0706_4b50;

#[cfg(test)]
pub const LOCAL_LEN: usize = 30;
/// General-purpose flag bit 11: name (and comment) are UTF-8.
pub const FLAG_UTF8: u16 = 1 << 11;
/// Version made by: Unix (3) in the high byte, APPNOTE 6.3 in the low byte.
pub const VERSION_MADE_BY: u16 = (3 << 8) | 63;
/// 32-bit fields at or above this value are stored as 0xFFFFFFFF with the
/// real value in the Zip64 extra (0xFFFFFFFF itself is the sentinel).
pub const MAX32: u64 = 0xFFFF_FFFF;
/// Entry counts at or above this go to the Zip64 end record (0xFFFF is the
/// sentinel that sends readers there).
pub const MAX16: u64 = 0xFFFF;

pub const S_IFREG: u32 = 0o100000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFLNK: u32 = 0o120000;
/// MS-DOS directory attribute (low byte of the external attributes).
const DOS_DIR: u32 = 0x10;

pub const METHOD_STORED: u16 = 0;
pub const METHOD_DEFLATE: u16 = 8;
pub const METHOD_ZSTD: u16 = 93;

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

fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
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

/// DOS date and time (UTC, so output does not depend on the machine's
/// time zone; the extended timestamp carries the exact time anyway),
/// clamped to DOS's 1980..=2107 range.
pub fn dos_datetime(t: u32) -> (u16, u16) {
    let secs = t as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if y < 1980 {
        return ((1 << 5) | 1, 0);
    }
    if y > 2107 {
        return ((127 << 9) | (12 << 5) | 31, (23 << 11) | (59 << 5) | 29);
    }
    let date = (((y - 1980) << 9) | (m << 5) | d) as u16;
    let time = (((rem / 3600) << 11) | (((rem / 60) % 60) << 5) | ((rem % 60) / 2)) as u16;
    (date, time)
}

/// Extended timestamp (modification time only, as 32 bits: times after
/// 2038 are read back as unsigned by unzip because the DOS date agrees)
/// and Info-ZIP's Unix uid/gid field, identical in local and central
/// headers.
fn unix_extras(b: &mut Vec<u8>, m: &Meta) {
    put16(b, 0x5455);
    put16(b, 5);
    b.push(1);
    put32(b, m.mtime);
    put16(b, 0x7875);
    put16(b, 11);
    b.push(1);
    b.push(4);
    put32(b, m.uid);
    b.push(4);
    put32(b, m.gid);
}

const UNIX_EXTRAS_LEN: u16 = 9 + 15;

/// A local file header. With `zip64` (see [`local_zip64`]) both sizes go
/// into a Zip64 extra and the 32-bit fields hold 0xFFFFFFFF. Its length
/// depends only on `m` and `zip64`, so a header written with placeholder
/// sizes can be overwritten in place.
pub fn local_header(b: &mut Vec<u8>, m: &Meta, s: &Sizes, offset: u64, zip64: bool) {
    let (date, time) = dos_datetime(m.mtime);
    put32(b, SIG_LOCAL);
    put16(b, version_needed(s.method, zip64 || entry_zip64(s, offset)));
    put16(b, flags(m.name));
    put16(b, s.method);
    put16(b, time);
    put16(b, date);
    put32(b, s.crc);
    if zip64 {
        put32(b, MAX32 as u32);
        put32(b, MAX32 as u32);
    } else {
        put32(b, s.compressed as u32);
        put32(b, s.size as u32);
    }
    put16(b, m.name.len() as u16);
    put16(b, UNIX_EXTRAS_LEN + if zip64 { 20 } else { 0 });
    b.extend_from_slice(m.name);
    if zip64 {
        put16(b, 0x0001);
        put16(b, 16);
        put64(b, s.size);
        put64(b, s.compressed);
    }
    unix_extras(b, m);
}

/// A central directory record.
pub fn central_record(b: &mut Vec<u8>, m: &Meta, s: &Sizes, offset: u64) {
    let (date, time) = dos_datetime(m.mtime);
    let mut z64 = Vec::new();
    if s.size >= MAX32 {
        put64(&mut z64, s.size);
    }
    if s.compressed >= MAX32 {
        put64(&mut z64, s.compressed);
    }
    if offset >= MAX32 {
        put64(&mut z64, offset);
    }
    put32(b, SIG_CENTRAL);
    put16(b, VERSION_MADE_BY);
    put16(b, version_needed(s.method, entry_zip64(s, offset)));
    put16(b, flags(m.name));
    put16(b, s.method);
    put16(b, time);
    put16(b, date);
    put32(b, s.crc);
    put32(b, clamp32(s.compressed));
    put32(b, clamp32(s.size));
    put16(b, m.name.len() as u16);
    let z64_len = if z64.is_empty() {
        0
    } else {
        4 + z64.len() as u16
    };
    put16(b, UNIX_EXTRAS_LEN + z64_len);
    put16(b, 0); // comment length
    put16(b, 0); // disk number start
    put16(b, 0); // internal attributes
    let dos = if m.mode & 0o170000 == S_IFDIR {
        DOS_DIR
    } else {
        0
    };
    put32(b, (m.mode << 16) | dos);
    put32(b, clamp32(offset));
    b.extend_from_slice(m.name);
    if !z64.is_empty() {
        put16(b, 0x0001);
        put16(b, z64.len() as u16);
        b.extend_from_slice(&z64);
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
        let rec = cd_offset + cd_size;
        put32(b, SIG_EOCD64);
        put64(b, 44); // size of the rest of the record
        put16(b, VERSION_MADE_BY);
        put16(b, 45);
        put32(b, 0); // this disk
        put32(b, 0); // disk with the central directory
        put64(b, entries);
        put64(b, entries);
        put64(b, cd_size);
        put64(b, cd_offset);
        put32(b, SIG_EOCD64_LOCATOR);
        put32(b, 0);
        put64(b, rec);
        put32(b, 1); // total disks
    }
    let n = entries.min(MAX16) as u16;
    put32(b, SIG_EOCD);
    put16(b, 0);
    put16(b, 0);
    put16(b, n);
    put16(b, n);
    put32(b, clamp32(cd_size));
    put32(b, clamp32(cd_offset));
    put16(b, 0); // comment length
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
