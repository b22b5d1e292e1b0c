//! What the ZIP reader makes of the records (which the `packfs_format::zip`
//! crate module encodes and decodes): locating the end records and the
//! central directory, the data offset of a member, and the rules unzip 6.0
//! follows for names, times and paths, so that a mount shows what extraction
//! would.
//!
//! Everything here parses untrusted bytes: every offset is checked, every
//! sum is checked arithmetic, and a malformed structure is a
//! [`FsError::Corrupt`], never a panic.

use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::zip::end::{find_eocd, EndRecord, Zip64EndRecord, Zip64Locator};
use packfs_format::zip::entry::CentralEntry;
use packfs_format::zip::local::LocalHeader;
use packfs_format::zip::time::dos_to_unix;
use packfs_format::zip::*;

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

/// Whether the last 64 KiB of `src` hold an end of central directory
/// record: `Some(true)` when its comment ends the file, `Some(false)` when
/// bytes follow it (tolerated, but as likely a chance match inside other
/// data). A file that does not start like a ZIP (a self-extractor, data in
/// front, a split archive's last part) may be one only if they do.
pub fn end_record(src: &dyn ImageSource) -> Result<Option<bool>> {
    let len = src.len();
    if len < EOCD_LEN as u64 {
        return Ok(None);
    }
    let tail_len = len.min(EOCD_SEARCH);
    let tail = src.read_vec(len - tail_len, tail_len as usize)?;
    let found = find_eocd(&tail, len - tail_len)
        .map(|(pos, clen)| pos + EOCD_LEN as u64 + clen as u64 == len);
    crate::buffers::recycle(tail);
    Ok(found)
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
    let tail = src.read_vec(tail_start, tail_len as usize)?;
    let found = find_eocd(&tail, tail_start);
    // find_eocd only returns a record that lies whole inside `tail`.
    let r = found.map(|(pos, _)| EndRecord::decode(&tail[(pos - tail_start) as usize..]));
    crate::buffers::recycle(tail);
    let ((pos, comment_len), r) = found.zip(r).ok_or_else(|| {
        FsError::corrupt(
            "no end of central directory record in the last 64 KiB (not a ZIP archive, or truncated)",
        )
    })?;
    let r = r?;
    let (disk, cd_disk) = (r.disk, r.cd_disk);
    let mut entries = r.entries as u64;
    let mut cd_size = r.cd_size as u64;
    let mut cd_offset = r.cd_offset as u64;
    let mut zip64 = false;
    let mut end_of_cd = pos;

    // Zip64 locator right before the EOCD.
    if pos >= EOCD64_LOCATOR_LEN as u64 {
        let mut loc = [0u8; EOCD64_LOCATOR_LEN];
        src.read_at(pos - EOCD64_LOCATOR_LEN as u64, &mut loc)?;
        if let Ok(loc) = Zip64Locator::decode(&loc) {
            let rec_off = loc.record_offset;
            if loc.total_disks > 1 {
                return Err(FsError::Unsupported(
                    "multi-disk (spanned) ZIP archives".into(),
                ));
            }
            // The record sits right before the locator; its recorded offset
            // may be shifted by prepended data.
            let expected = pos - EOCD64_LOCATOR_LEN as u64;
            let z = [rec_off, expected.saturating_sub(EOCD64_LEN as u64)]
                .into_iter()
                .find_map(|o| {
                    let mut rec = [0u8; EOCD64_LEN];
                    src.read_at(o, &mut rec).ok()?;
                    Some((o, Zip64EndRecord::decode(&rec).ok()?))
                });
            let Some((rec_at, z)) = z else {
                return Err(FsError::corrupt(format!(
                    "Zip64 end of central directory locator points to {rec_off}, where no Zip64 record is"
                )));
            };
            if z.disk != 0 || z.cd_disk != 0 {
                return Err(FsError::Unsupported(
                    "multi-disk (spanned) ZIP archives".into(),
                ));
            }
            entries = z.entries;
            cd_size = z.cd_size;
            cd_offset = z.cd_offset;
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

/// Offset of the member's data from its local header: the local name and
/// extra lengths may differ from the central ones, so they are read here.
pub fn local_data_offset(src: &dyn ImageSource, local: u64) -> Result<u64> {
    let mut h = [0u8; LOCAL_LEN];
    crate::source::range_check(src.len(), local, LOCAL_LEN).map_err(|_| {
        FsError::corrupt(format!(
            "local header at {local} is past the end of the file"
        ))
    })?;
    src.read_at(local, &mut h)?;
    let h = LocalHeader::decode(&h)
        .map_err(|_| FsError::corrupt(format!("no local header signature at {local}")))?;
    Ok(local + h.data_offset())
}

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
/// name from a Unix host as is, whatever its bytes: Unix names are bytes
/// (Info-ZIP zip on Linux writes UTF-8 names without the flag, packfs
/// writes names that are not UTF-8 raw, and unzip extracts both
/// unchanged); any other host's name as CP437.
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
    if matches!(e.host(), HOST_UNIX | HOST_OSX) {
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
    use packfs_format::zip::entry::apply_extras;
    use packfs_format::zip::time::{dos_as_utc, DOS_1980_01_01};

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
        // A Unix host's bytes are kept, UTF-8 or not.
        for raw in ["é".as_bytes(), b"caf\xe9/\xff".as_slice()] {
            let e = CentralEntry {
                made_by: 3 << 8,
                raw_name: raw.to_vec(),
                ..Default::default()
            };
            assert_eq!(decode_name(&e), raw);
        }
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
