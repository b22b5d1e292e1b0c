//! ZIP on-disk structures: end of central directory (plain and Zip64),
//! central directory records, extra fields, DOS times and CP437 names.
//!
//! Everything here parses untrusted bytes: every offset is checked, every
//! sum is checked arithmetic, and a malformed structure is a
//! [`FsError::Corrupt`], never a panic.

use crate::error::{FsError, Result};
use crate::source::ImageSource;

pub const SIG_LOCAL: u32 = 0x0403_4b50;
pub const SIG_CENTRAL: u32 = 0x0201_4b50;
pub const SIG_EOCD: u32 = 0x0605_4b50;
pub const SIG_EOCD64: u32 = 0x0606_4b50;
pub const SIG_EOCD64_LOCATOR: u32 = 0x0706_4b50;

pub const EOCD_LEN: usize = 22;
pub const EOCD64_LOCATOR_LEN: usize = 20;
pub const EOCD64_LEN: usize = 56;
pub const CENTRAL_LEN: usize = 46;
pub const LOCAL_LEN: usize = 30;
/// The EOCD is at most this far from the end: 22 bytes plus a 65535-byte comment.
pub const EOCD_SEARCH: u64 = EOCD_LEN as u64 + 0xFFFF;

pub const FLAG_ENCRYPTED: u16 = 1 << 0;
pub const FLAG_LZMA_EOS: u16 = 1 << 1;
pub const FLAG_DESCRIPTOR: u16 = 1 << 3;
pub const FLAG_STRONG_ENCRYPTION: u16 = 1 << 6;
pub const FLAG_UTF8: u16 = 1 << 11;

pub const HOST_UNIX: u8 = 3;
pub const HOST_OSX: u8 = 19;

pub const METHOD_STORED: u16 = 0;
pub const METHOD_DEFLATE: u16 = 8;
pub const METHOD_DEFLATE64: u16 = 9;
pub const METHOD_BZIP2: u16 = 12;
pub const METHOD_LZMA: u16 = 14;
pub const METHOD_ZSTD: u16 = 93;
pub const METHOD_XZ: u16 = 95;
pub const METHOD_AES: u16 = 99;

pub fn method_name(m: u16) -> &'static str {
    match m {
        METHOD_STORED => "stored",
        1 => "shrink",
        2..=5 => "reduce",
        6 => "implode",
        METHOD_DEFLATE => "deflate",
        METHOD_DEFLATE64 => "deflate64",
        METHOD_BZIP2 => "bzip2",
        METHOD_LZMA => "lzma",
        METHOD_ZSTD | 20 => "zstd",
        METHOD_XZ => "xz",
        96 => "jpeg",
        97 => "wavpack",
        98 => "ppmd",
        METHOD_AES => "aes",
        _ => "unknown",
    }
}

pub fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Where the central directory is, from the (Zip64) end record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eocd {
    /// Position of the classic EOCD record.
    pub pos: u64,
    pub entries: u64,
    pub cd_offset: u64,
    pub cd_size: u64,
    pub zip64: bool,
    /// Bytes prepended to the archive (self-extractors, `cat stub a.zip`):
    /// added to every offset the archive records.
    pub shift: u64,
    pub comment_len: u16,
}

/// Finds the last EOCD signature in the last 65557 bytes whose comment length
/// fits the file. A record whose comment ends exactly at the end of the file
/// is preferred (trailing garbage is otherwise tolerated).
pub fn find_eocd(tail: &[u8], tail_start: u64) -> Option<(u64, u16)> {
    if tail.len() < EOCD_LEN {
        return None;
    }
    let mut loose = None;
    let mut i = tail.len() - EOCD_LEN;
    loop {
        if le32(tail, i) == SIG_EOCD {
            let clen = le16(tail, i + 20);
            let end = i + EOCD_LEN + clen as usize;
            if end == tail.len() {
                return Some((tail_start + i as u64, clen));
            }
            if end < tail.len() && loose.is_none() {
                loose = Some((tail_start + i as u64, clen));
            }
        }
        if i == 0 {
            return loose;
        }
        i -= 1;
    }
}

/// Reads the end records and locates the central directory.
pub fn read_eocd(src: &dyn ImageSource) -> Result<Eocd> {
    let len = src.len();
    if len < EOCD_LEN as u64 {
        return Err(FsError::corrupt(format!(
            "file of {len} bytes is too short for a ZIP archive"
        )));
    }
    let tail_len = len.min(EOCD_SEARCH);
    let tail_start = len - tail_len;
    let tail = src.slice(tail_start, tail_len as usize)?;
    let (pos, comment_len) = find_eocd(tail, tail_start).ok_or_else(|| {
        FsError::corrupt(
            "no end of central directory record in the last 64 KiB (not a ZIP archive, or truncated)",
        )
    })?;
    let r = src.slice(pos, EOCD_LEN)?;
    let disk = le16(r, 4);
    let cd_disk = le16(r, 6);
    let mut entries = le16(r, 10) as u64;
    let mut cd_size = le32(r, 12) as u64;
    let mut cd_offset = le32(r, 16) as u64;
    let mut zip64 = false;
    let mut end_of_cd = pos;

    // Zip64 locator right before the EOCD.
    if pos >= EOCD64_LOCATOR_LEN as u64 {
        let loc = src.slice(pos - EOCD64_LOCATOR_LEN as u64, EOCD64_LOCATOR_LEN)?;
        if le32(loc, 0) == SIG_EOCD64_LOCATOR {
            let rec_off = le64(loc, 8);
            let total_disks = le32(loc, 16);
            if total_disks > 1 {
                return Err(FsError::Unsupported(
                    "multi-disk (spanned) ZIP archives".into(),
                ));
            }
            // The record sits right before the locator; its recorded offset
            // may be shifted by prepended data.
            let expected = pos - EOCD64_LOCATOR_LEN as u64;
            let rec_at = [rec_off, expected.saturating_sub(EOCD64_LEN as u64)]
                .into_iter()
                .find(|&o| {
                    src.slice(o, EOCD64_LEN)
                        .is_ok_and(|b| le32(b, 0) == SIG_EOCD64)
                })
                .ok_or_else(|| {
                    FsError::corrupt(format!(
                        "Zip64 end of central directory locator points to {rec_off}, where no Zip64 record is"
                    ))
                })?;
            let z = src.slice(rec_at, EOCD64_LEN)?;
            if le32(z, 16) != 0 || le32(z, 20) != 0 {
                return Err(FsError::Unsupported(
                    "multi-disk (spanned) ZIP archives".into(),
                ));
            }
            entries = le64(z, 32);
            cd_size = le64(z, 40);
            cd_offset = le64(z, 48);
            zip64 = true;
            end_of_cd = rec_at;
        }
    }
    if !zip64 && (disk != 0 || cd_disk != 0) {
        return Err(FsError::Unsupported(
            "multi-disk (spanned) ZIP archives".into(),
        ));
    }
    // The central directory ends where the end records start; any difference
    // is data prepended to the archive.
    let cd_end = cd_offset
        .checked_add(cd_size)
        .ok_or_else(|| FsError::corrupt("central directory offset + size overflows"))?;
    if cd_end > end_of_cd {
        return Err(FsError::corrupt(format!(
            "central directory ({cd_size} bytes at {cd_offset}) runs past its end record at {end_of_cd} (truncated archive?)"
        )));
    }
    let shift = end_of_cd - cd_end;
    if shift > 0 {
        log::warn!("zip: {shift} extra bytes before the archive (offsets adjusted)");
    }
    if entries > 0 && cd_size < CENTRAL_LEN as u64 {
        return Err(FsError::corrupt(format!(
            "{entries} entries in a central directory of {cd_size} bytes"
        )));
    }
    Ok(Eocd {
        pos,
        entries,
        cd_offset: cd_offset + shift,
        cd_size,
        zip64,
        shift,
        comment_len,
    })
}

/// One central directory record, with Zip64 and the extra fields we use
/// already applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CentralEntry {
    pub made_by: u16,
    pub flags: u16,
    pub method: u16,
    pub dos_time: u16,
    pub dos_date: u16,
    pub crc: u32,
    pub csize: u64,
    pub size: u64,
    pub disk: u32,
    pub external: u32,
    pub local_offset: u64,
    /// The name as stored (bytes in the archive's encoding).
    pub raw_name: Vec<u8>,
    /// UTF-8 name from the Info-ZIP Unicode Path extra (0x7075), when valid.
    pub unicode_name: Option<Vec<u8>>,
    /// Extended timestamp (0x5455) modification time, raw 32 bits.
    pub ut_mtime: Option<u32>,
    /// Old Info-ZIP Unix (0x5855) or PKWARE Unix (0x000d) modification time.
    pub old_unix_mtime: Option<u32>,
    pub uid_gid: Option<(u32, u32)>,
    pub zip64: bool,
}

impl CentralEntry {
    pub fn host(&self) -> u8 {
        (self.made_by >> 8) as u8
    }
    pub fn unix_mode(&self) -> Option<u32> {
        matches!(self.host(), HOST_UNIX | HOST_OSX)
            .then_some(self.external >> 16)
            .filter(|&m| m != 0)
    }
    pub fn encrypted(&self) -> bool {
        self.flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION) != 0 || self.method == METHOD_AES
    }
}

/// Parses the record at `b[0..]`; returns it and its total length.
pub fn parse_central(b: &[u8]) -> Result<(CentralEntry, usize)> {
    if b.len() < CENTRAL_LEN || le32(b, 0) != SIG_CENTRAL {
        return Err(FsError::corrupt("bad central directory record signature"));
    }
    let name_len = le16(b, 28) as usize;
    let extra_len = le16(b, 30) as usize;
    let comment_len = le16(b, 32) as usize;
    let total = CENTRAL_LEN + name_len + extra_len + comment_len;
    if b.len() < total {
        return Err(FsError::corrupt(
            "central directory record runs past the central directory",
        ));
    }
    let mut e = CentralEntry {
        made_by: le16(b, 4),
        flags: le16(b, 8),
        method: le16(b, 10),
        dos_time: le16(b, 12),
        dos_date: le16(b, 14),
        crc: le32(b, 16),
        csize: le32(b, 20) as u64,
        size: le32(b, 24) as u64,
        disk: le16(b, 34) as u32,
        external: le32(b, 38),
        local_offset: le32(b, 42) as u64,
        raw_name: b[CENTRAL_LEN..CENTRAL_LEN + name_len].to_vec(),
        ..Default::default()
    };
    let extra = &b[CENTRAL_LEN + name_len..CENTRAL_LEN + name_len + extra_len];
    apply_extras(&mut e, extra);
    Ok((e, total))
}

/// Walks the extra fields (id, len, data), applying those we know. A
/// malformed tail is ignored, as unzip does.
fn apply_extras(e: &mut CentralEntry, mut x: &[u8]) {
    while x.len() >= 4 {
        let id = le16(x, 0);
        let n = le16(x, 2) as usize;
        let Some(d) = x.get(4..4 + n) else { break };
        match id {
            0x0001 => {
                // Zip64: present only for the fields saturated in the record.
                let mut at = 0;
                let mut next = |v: &mut u64| {
                    if let Some(f) = d.get(at..at + 8) {
                        *v = le64(f, 0);
                        at += 8;
                        true
                    } else {
                        false
                    }
                };
                if e.size == 0xFFFF_FFFF && next(&mut e.size) {
                    e.zip64 = true;
                }
                if e.csize == 0xFFFF_FFFF && next(&mut e.csize) {
                    e.zip64 = true;
                }
                if e.local_offset == 0xFFFF_FFFF && next(&mut e.local_offset) {
                    e.zip64 = true;
                }
                if e.disk == 0xFFFF {
                    if let Some(f) = d.get(at..at + 4) {
                        e.disk = le32(f, 0);
                    }
                }
            }
            0x5455 if d.len() >= 5 && d[0] & 1 != 0 => e.ut_mtime = Some(le32(d, 1)),
            0x5855 | 0x000d if d.len() >= 8 => {
                e.old_unix_mtime = Some(le32(d, 4));
                if d.len() >= 12 && e.uid_gid.is_none() {
                    e.uid_gid = Some((le16(d, 8) as u32, le16(d, 10) as u32));
                }
            }
            0x7875 if d.len() >= 3 && d[0] == 1 => {
                let read_id = |at: usize| -> Option<(u32, usize)> {
                    let n = *d.get(at)? as usize;
                    let v = d.get(at + 1..at + 1 + n)?;
                    if n > 8 {
                        return None;
                    }
                    let mut buf = [0u8; 8];
                    buf[..n].copy_from_slice(v);
                    let v = u64::from_le_bytes(buf);
                    Some((u32::try_from(v).ok()?, at + 1 + n))
                };
                if let Some((uid, at)) = read_id(1) {
                    if let Some((gid, _)) = read_id(at) {
                        e.uid_gid = Some((uid, gid));
                    }
                }
            }
            0x7075 if d.len() >= 5 && d[0] == 1 => {
                let crc = le32(d, 1);
                if crc32fast::hash(&e.raw_name) == crc && std::str::from_utf8(&d[5..]).is_ok() {
                    e.unicode_name = Some(d[5..].to_vec());
                }
            }
            _ => {}
        }
        x = &x[4 + n..];
    }
}

/// Offset of the member's data from its local header: the local name and
/// extra lengths may differ from the central ones, so they are read here.
pub fn local_data_offset(src: &dyn ImageSource, local: u64) -> Result<u64> {
    let h = src.slice(local, LOCAL_LEN).map_err(|_| {
        FsError::corrupt(format!(
            "local header at {local} is past the end of the file"
        ))
    })?;
    if le32(h, 0) != SIG_LOCAL {
        return Err(FsError::corrupt(format!(
            "no local header signature at {local}"
        )));
    }
    Ok(local + LOCAL_LEN as u64 + le16(h, 26) as u64 + le16(h, 28) as u64)
}

extern "C" {
    /// glibc/musl: seconds west of UTC of local standard time, set by tzset.
    static timezone: libc::c_long;
    fn tzset();
}

/// A DOS date and time, as local time, in seconds since the epoch, computed
/// exactly as unzip 6.0 does (`dos_to_unix_time` in fileio.c), so that the
/// mount shows what extraction sets: days counted by hand (with its quirk of
/// counting 2100 as a leap year in the years after it: dates from 2101 on
/// are one day later than a calendar would say), then shifted by the
/// standard-time offset and by one hour when that instant is in DST.
/// Out-of-range months are clamped (unzip would read outside its table).
pub fn dos_to_unix(date: u16, time: u16) -> i64 {
    let mut t = dos_as_utc(date, time);
    // SAFETY: tzset initialises `timezone`; localtime_r writes into `tm`.
    unsafe {
        tzset();
        #[allow(clippy::unnecessary_cast)] // c_long is i32 on 32-bit targets
        let west = timezone as i64;
        t += west;
        let mut tm: libc::tm = std::mem::zeroed();
        let tt = t as libc::time_t;
        if !libc::localtime_r(&tt, &mut tm).is_null() && tm.tm_isdst > 0 {
            t -= 3600;
        }
    }
    t
}

/// unzip's day arithmetic, before the timezone shift.
pub fn dos_as_utc(date: u16, time: u16) -> i64 {
    const YDAYS: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yr = (date >> 9) as i64 + 10; // years since 1970
    let mo = (((date >> 5) & 0xF) as i64 - 1).clamp(0, 11);
    let dy = (date & 0x1F) as i64 - 1;
    let (hh, mm, ss) = (
        (time >> 11) as i64,
        ((time >> 5) & 0x3F) as i64,
        ((time & 0x1F) * 2) as i64,
    );
    let leap = (yr + 1970 - 1) / 4;
    let mut days = yr * 365 + (leap - 492) + YDAYS[mo as usize];
    if mo > 1 && (yr + 1970) % 4 == 0 && yr + 1970 != 2100 {
        days += 1;
    }
    days += dy;
    ((days * 24 + hh) * 60 + mm) * 60 + ss
}

/// The DOS date/time that unzip treats as "no earlier time representable".
pub const DOS_1980_01_01: (u16, u16) = ((1 << 5) | 1, 0);
/// DOS date of 2038-01-18, unzip's threshold for unsigned extended times.
const DOS_2038_01_18: u16 = ((2038 - 1980) << 9) | (1 << 5) | 18;

/// The modification time unzip (6.0, 64-bit `time_t`) restores: the
/// extended timestamp when present and consistent, else the old Unix extra,
/// else the DOS time as local time. An extended time with bit 31 set is
/// read as unsigned (2038..2106) only when the DOS date agrees that it is
/// after 2038-01-18; otherwise unzip ignores it and uses the DOS time.
pub fn entry_mtime(e: &CentralEntry) -> i64 {
    let dos_ok_for_high = |e: &CentralEntry| e.dos_date >= DOS_2038_01_18;
    for t in [e.ut_mtime, e.old_unix_mtime].into_iter().flatten() {
        if t & 0x8000_0000 == 0 || dos_ok_for_high(e) {
            return t as i64;
        }
    }
    dos_to_unix(e.dos_date, e.dos_time)
}

/// Code page 437 bytes 0x80..=0xFF as Unicode.
const CP437_HIGH: &str = "ÇüéâäàåçêëèïîìÄÅÉæÆôöòûùÿÖÜ¢£¥₧ƒáíóúñÑªº¿⌐¬½¼¡«»░▒▓│┤╡╢╖╕╣║╗╝╜╛┐└┴┬├─┼╞╟╚╔╩╦╠═╬╧╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀αßΓπΣσµτΦΘΩδ∞φε∩≡±≥≤⌠⌡÷≈°∙·√ⁿ²■\u{a0}";

/// Decodes CP437 (the ZIP default name encoding) to UTF-8.
pub fn cp437_to_utf8(b: &[u8]) -> Vec<u8> {
    let mut s = String::with_capacity(b.len() * 2);
    for &c in b {
        if c < 0x80 {
            s.push(c as char);
        } else {
            s.push(
                CP437_HIGH
                    .chars()
                    .nth((c - 0x80) as usize)
                    .expect("table has 128 chars"),
            );
        }
    }
    s.into_bytes()
}

/// The entry's name as UTF-8 bytes (as far as the archive tells).
///
/// Order: the UTF-8 flag; a valid Unicode Path extra; plain ASCII as is; a
/// name from a Unix host that is valid UTF-8 as is (Info-ZIP zip on Linux
/// writes UTF-8 names without the flag, and unzip extracts them unchanged);
/// otherwise CP437.
pub fn decode_name(e: &CentralEntry) -> Vec<u8> {
    if e.flags & FLAG_UTF8 != 0 {
        return e.raw_name.clone();
    }
    if let Some(u) = &e.unicode_name {
        return u.clone();
    }
    if e.raw_name.is_ascii() {
        return e.raw_name.clone();
    }
    if matches!(e.host(), HOST_UNIX | HOST_OSX) && std::str::from_utf8(&e.raw_name).is_ok() {
        return e.raw_name.clone();
    }
    cp437_to_utf8(&e.raw_name)
}

/// Why a name was rejected by [`normalise`].
#[derive(Debug, PartialEq, Eq)]
pub enum BadName {
    Empty,
    DotDot,
    TooLong,
    Nul,
}

/// Normalises an archive path into components joined by NUL (so that byte
/// order of the result is component-wise order): leading `/` stripped, empty
/// and `.` components dropped. A `..` component rejects the whole entry, so
/// nothing can resolve outside the root. Backslashes are kept as they are.
/// Returns the path and whether it named a directory (trailing `/`).
pub fn normalise(name: &[u8], out: &mut Vec<u8>) -> Result<bool, BadName> {
    let start = out.len();
    if name.contains(&0) {
        return Err(BadName::Nul);
    }
    let is_dir = name.last() == Some(&b'/');
    for c in name.split(|&b| b == b'/') {
        match c {
            b"" | b"." => continue,
            b".." => {
                out.truncate(start);
                return Err(BadName::DotDot);
            }
            c if c.len() > 255 => {
                out.truncate(start);
                return Err(BadName::TooLong);
            }
            c => {
                if out.len() > start {
                    out.push(0);
                }
                out.extend_from_slice(c);
            }
        }
    }
    if out.len() == start {
        return Err(BadName::Empty);
    }
    Ok(is_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemSource;

    fn eocd(entries: u16, cd_size: u32, cd_off: u32, comment: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&SIG_EOCD.to_le_bytes());
        v.extend_from_slice(&[0; 4]);
        v.extend_from_slice(&entries.to_le_bytes());
        v.extend_from_slice(&entries.to_le_bytes());
        v.extend_from_slice(&cd_size.to_le_bytes());
        v.extend_from_slice(&cd_off.to_le_bytes());
        v.extend_from_slice(&(comment.len() as u16).to_le_bytes());
        v.extend_from_slice(comment);
        v
    }

    #[test]
    fn eocd_found_behind_a_comment_containing_a_fake_signature() {
        let mut comment = b"xx".to_vec();
        comment.extend_from_slice(&SIG_EOCD.to_le_bytes());
        comment.extend_from_slice(&[0; 30]);
        let img = eocd(0, 0, 0, &comment);
        let (pos, clen) = find_eocd(&img, 0).unwrap();
        assert_eq!((pos, clen as usize), (0, comment.len()));
        let e = read_eocd(&MemSource(img)).unwrap();
        assert_eq!((e.entries, e.cd_offset, e.zip64, e.shift), (0, 0, false, 0));
    }

    #[test]
    fn eocd_with_maximal_comment_is_found_and_beyond_is_not() {
        let comment = vec![b'c'; 0xFFFF];
        let mut img = vec![0u8; 100];
        img.extend(eocd(0, 0, 100, &comment));
        let e = read_eocd(&MemSource(img.clone())).unwrap();
        assert_eq!(e.pos, 100);
        assert_eq!(e.shift, 0);
        // One garbage byte more than the search window: the record is out of reach.
        let mut far = vec![0u8; 10];
        far.extend(eocd(0, 0, 10, &[]));
        far.extend(vec![b'g'; 0xFFFF + 1]);
        assert!(read_eocd(&MemSource(far)).is_err());
    }

    #[test]
    fn prepended_data_shifts_offsets() {
        let mut img = vec![b'#'; 50];
        img.extend(eocd(0, 0, 0, &[]));
        let e = read_eocd(&MemSource(img)).unwrap();
        assert_eq!((e.shift, e.cd_offset), (50, 50));
    }

    #[test]
    fn truncated_and_garbage_inputs_are_errors() {
        assert!(read_eocd(&MemSource(vec![])).is_err());
        assert!(read_eocd(&MemSource(vec![0; 21])).is_err());
        assert!(read_eocd(&MemSource(vec![0x50; 1000])).is_err());
        // Central directory beyond the record.
        assert!(read_eocd(&MemSource(eocd(1, 46, 1000, &[]))).is_err());
        // Offsets that overflow.
        assert!(read_eocd(&MemSource(eocd(1, u32::MAX, u32::MAX, &[]))).is_err());
    }

    #[test]
    fn normalise_strips_and_rejects() {
        let n = |s: &str| {
            let mut v = Vec::new();
            normalise(s.as_bytes(), &mut v).map(|d| (String::from_utf8(v).unwrap(), d))
        };
        assert_eq!(n("/abs/x"), Ok(("abs\0x".into(), false)));
        assert_eq!(n("./a//b/./c/"), Ok(("a\0b\0c".into(), true)));
        assert_eq!(n("a\\b"), Ok(("a\\b".into(), false)));
        assert_eq!(n("../evil"), Err(BadName::DotDot));
        assert_eq!(n("a/../../b"), Err(BadName::DotDot));
        assert_eq!(n("a/.."), Err(BadName::DotDot));
        assert_eq!(n("/"), Err(BadName::Empty));
        assert_eq!(n(""), Err(BadName::Empty));
        assert_eq!(n(&"x".repeat(256)), Err(BadName::TooLong));
        assert!(n(&"x".repeat(255)).is_ok());
        assert_eq!(n("a\0b"), Err(BadName::Nul));
        // The output buffer is left as it was on rejection.
        let mut v = b"keep".to_vec();
        assert!(normalise(b"a/../b", &mut v).is_err());
        assert_eq!(v, b"keep");
    }

    #[test]
    fn cp437_names() {
        assert_eq!(CP437_HIGH.chars().count(), 128);
        assert_eq!(cp437_to_utf8(b"abc"), b"abc");
        assert_eq!(
            String::from_utf8(cp437_to_utf8(&[0x80, 0x81, 0xE1, 0xFF, b'x'])).unwrap(),
            "Çüß\u{a0}x"
        );
        let mut e = CentralEntry {
            raw_name: vec![0x84, b'.', b't'],
            ..Default::default()
        };
        assert_eq!(decode_name(&e), "ä.t".as_bytes());
        e.flags = FLAG_UTF8;
        assert_eq!(decode_name(&e), vec![0x84, b'.', b't']);
        // A Unix host's valid UTF-8 is kept.
        let e = CentralEntry {
            made_by: 3 << 8,
            raw_name: "é".as_bytes().to_vec(),
            ..Default::default()
        };
        assert_eq!(decode_name(&e), "é".as_bytes());
    }

    #[test]
    fn unicode_path_extra_needs_matching_crc() {
        let raw = b"x?y".to_vec();
        let mut extra = vec![0x75, 0x70];
        let uname = "xäy".as_bytes();
        extra.extend_from_slice(&((5 + uname.len()) as u16).to_le_bytes());
        extra.push(1);
        extra.extend_from_slice(&crc32fast::hash(&raw).to_le_bytes());
        extra.extend_from_slice(uname);
        let mut e = CentralEntry {
            raw_name: raw.clone(),
            ..Default::default()
        };
        apply_extras(&mut e, &extra);
        assert_eq!(decode_name(&e), uname);
        let mut e2 = CentralEntry {
            raw_name: b"other".to_vec(),
            ..Default::default()
        };
        apply_extras(&mut e2, &extra);
        assert_eq!(e2.unicode_name, None);
    }

    #[test]
    fn extras_zip64_ut_ux_and_malformed() {
        let mut x = Vec::new();
        x.extend_from_slice(&[1, 0, 16, 0]);
        x.extend_from_slice(&5_000_000_000u64.to_le_bytes());
        x.extend_from_slice(&7u64.to_le_bytes());
        x.extend_from_slice(&[0x55, 0x54, 5, 0, 1]);
        x.extend_from_slice(&4_000_000_000u32.to_le_bytes());
        x.extend_from_slice(&[0x75, 0x78, 11, 0, 1, 4]);
        x.extend_from_slice(&1234u32.to_le_bytes());
        x.extend_from_slice(&[4]);
        x.extend_from_slice(&5678u32.to_le_bytes());
        x.extend_from_slice(&[0xAA, 0xBB, 200, 0, 1]); // truncated field: ignored
        let mut e = CentralEntry {
            size: 0xFFFF_FFFF,
            csize: 0xFFFF_FFFF,
            local_offset: 3,
            ..Default::default()
        };
        apply_extras(&mut e, &x);
        assert_eq!((e.size, e.csize, e.local_offset), (5_000_000_000, 7, 3));
        assert!(e.zip64);
        assert_eq!(e.ut_mtime, Some(4_000_000_000));
        assert_eq!(e.uid_gid, Some((1234, 5678)));
    }

    #[test]
    fn dos_time_matches_unzips_arithmetic() {
        let d = |y: u16, m: u16, day: u16| ((y - 1980) << 9) | (m << 5) | day;
        assert_eq!(dos_as_utc(d(1980, 1, 1), 0), 315_532_800);
        assert_eq!(
            dos_as_utc(d(2000, 2, 29), (12 << 11) | (30 << 5) | 5),
            951_827_410
        );
        assert_eq!(
            dos_as_utc(d(2038, 1, 19), (3 << 11) | (14 << 5) | 4),
            2_147_483_648
        );
        assert_eq!(dos_as_utc(d(2100, 3, 1), 0), 4_107_542_400);
        // unzip's 2100 leap-day quirk: from 2101 on, one day later.
        assert_eq!(dos_as_utc(d(2101, 1, 1), 0), 4_133_980_800 + 86_400);
        // Garbage months do not panic.
        let _ = dos_as_utc(0xFFFF, 0xFFFF);
        let _ = dos_as_utc(0, 0);
    }

    #[test]
    fn extended_time_rules_follow_unzip() {
        let mut e = CentralEntry {
            dos_date: DOS_1980_01_01.0,
            ut_mtime: Some(1),
            ..Default::default()
        };
        assert_eq!(entry_mtime(&e), 1);
        // Bit 31 set with a pre-2038 DOS date: unzip ignores the UT field.
        e.ut_mtime = Some(0xF000_0000);
        assert_eq!(entry_mtime(&e), dos_to_unix(DOS_1980_01_01.0, 0));
        // ... and with a post-2038 DOS date it is unsigned.
        e.dos_date = ((2100 - 1980) << 9) | (1 << 5) | 1;
        assert_eq!(entry_mtime(&e), 0xF000_0000);
        e.ut_mtime = None;
        e.old_unix_mtime = Some(77);
        assert_eq!(entry_mtime(&e), 77);
    }
}
