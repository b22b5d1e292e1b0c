//! What extraction makes of a ZIP's records, as unzip 6.0 does it: where
//! the central directory is, a member's name, type, permissions and time,
//! and the decoder of its data. Both the ZIP reader (`mountfs`) and the
//! packer's ZIP input use these rules, so that a mounted ZIP and an image
//! packed from it show the same tree, and both what `unzip` would.
//!
//! Everything here parses untrusted bytes: every offset is checked, every
//! sum is checked arithmetic, and a malformed structure is an error, never
//! a panic.

use super::end::{find_eocd, EndRecord, Zip64EndRecord, Zip64Locator};
use super::entry::CentralEntry;
use super::time::dos_to_unix;
use super::*;
use std::io::{self, Read};

/// Where the central directory is, from the (Zip64) end record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eocd {
    /// Position of the classic EOCD record.
    pub pos: u64,
    pub entries: u64,
    /// Absolute: [`Eocd::shift`] is already added.
    pub cd_offset: u64,
    pub cd_size: u64,
    pub zip64: bool,
    /// Bytes prepended to the archive (self-extractors, `cat stub a.zip`):
    /// added to every offset the archive records.
    pub shift: u64,
    pub comment_len: u16,
}

/// Why [`locate`] found no central directory.
#[derive(Debug, thiserror::Error)]
pub enum LocateError<E> {
    /// Reading the archive failed.
    #[error("{0}")]
    Read(E),
    #[error("{0}")]
    Corrupt(String),
    #[error("{0}")]
    Unsupported(String),
}

/// Reads the end records of an archive of `len` bytes through `read_at`
/// (which fills the buffer from the given offset) and locates the central
/// directory.
pub fn locate<E>(
    len: u64,
    mut read_at: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<Eocd, LocateError<E>> {
    let corrupt = |m: String| LocateError::Corrupt(m);
    let spanned = || LocateError::Unsupported("multi-disk (spanned) ZIP archives".into());
    if len < EOCD_LEN as u64 {
        return Err(corrupt(format!(
            "file of {len} bytes is too short for a ZIP archive"
        )));
    }
    let tail_len = len.min(EOCD_SEARCH);
    let tail_start = len - tail_len;
    let mut tail = vec![0u8; tail_len as usize];
    read_at(tail_start, &mut tail).map_err(LocateError::Read)?;
    let found = find_eocd(&tail, tail_start);
    // find_eocd only returns a record that lies whole inside `tail`.
    let r = found.map(|(pos, _)| EndRecord::decode(&tail[(pos - tail_start) as usize..]));
    let ((pos, comment_len), r) = found.zip(r).ok_or_else(|| {
        corrupt(
            "no end of central directory record in the last 64 KiB (not a ZIP archive, or truncated)"
                .into(),
        )
    })?;
    let r = r.map_err(|e| corrupt(e.to_string()))?;
    let (disk, cd_disk) = (r.disk, r.cd_disk);
    let mut entries = r.entries as u64;
    let mut cd_size = r.cd_size as u64;
    let mut cd_offset = r.cd_offset as u64;
    let mut zip64 = false;
    let mut end_of_cd = pos;

    if let Some((rec_at, z)) = zip64_end(pos, len, &mut read_at)? {
        entries = z.entries;
        cd_size = z.cd_size;
        cd_offset = z.cd_offset;
        zip64 = true;
        end_of_cd = rec_at;
    }
    if !zip64 && (disk != 0 || cd_disk != 0) {
        return Err(spanned());
    }
    // The central directory ends where the end records start; any difference
    // is data prepended to the archive.
    let cd_end = cd_offset
        .checked_add(cd_size)
        .ok_or_else(|| corrupt("central directory offset + size overflows".into()))?;
    if cd_end > end_of_cd {
        return Err(corrupt(format!(
            "central directory ({cd_size} bytes at {cd_offset}) runs past its end record at {end_of_cd} (truncated archive?)"
        )));
    }
    let shift = end_of_cd - cd_end;
    if entries > 0 && cd_size < CENTRAL_LEN as u64 {
        return Err(corrupt(format!(
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

/// The Zip64 end record, and where it is, when a Zip64 locator lies right
/// before the EOCD at `pos` in an archive of `len` bytes.
fn zip64_end<E>(
    pos: u64,
    len: u64,
    read_at: &mut impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<Option<(u64, Zip64EndRecord)>, LocateError<E>> {
    let spanned = || LocateError::Unsupported("multi-disk (spanned) ZIP archives".into());
    if pos < EOCD64_LOCATOR_LEN as u64 {
        return Ok(None);
    }
    let mut loc = [0u8; EOCD64_LOCATOR_LEN];
    read_at(pos - EOCD64_LOCATOR_LEN as u64, &mut loc).map_err(LocateError::Read)?;
    let Ok(loc) = Zip64Locator::decode(&loc) else {
        return Ok(None);
    };
    let rec_off = loc.record_offset;
    if loc.total_disks > 1 {
        return Err(spanned());
    }
    // The record sits right before the locator; its recorded offset
    // may be shifted by prepended data.
    let expected = pos - EOCD64_LOCATOR_LEN as u64;
    let z = [rec_off, expected.saturating_sub(EOCD64_LEN as u64)]
        .into_iter()
        .filter(|&o| o.checked_add(EOCD64_LEN as u64).is_some_and(|e| e <= len))
        .find_map(|o| {
            let mut rec = [0u8; EOCD64_LEN];
            read_at(o, &mut rec).ok()?;
            Some((o, Zip64EndRecord::decode(&rec).ok()?))
        });
    let Some((rec_at, z)) = z else {
        return Err(LocateError::Corrupt(format!(
            "Zip64 end of central directory locator points to {rec_off}, where no Zip64 record is"
        )));
    };
    if z.disk != 0 || z.cd_disk != 0 {
        return Err(spanned());
    }
    Ok(Some((rec_at, z)))
}

/// What a central record extracts as: `(kind, permissions)`, the kind one
/// of `S_IFDIR`, `S_IFLNK`, `S_IFREG`.
///
/// A directory is a name ending in `/` (`is_dir_name`), a Unix directory
/// mode, or, without a Unix mode, the DOS directory attribute on an empty
/// entry. Anything else is a symlink when its Unix mode says so, else a
/// regular file. Permissions are the Unix mode's as they are; without one,
/// 0755 for directories and 0644 for the rest (0444 with the DOS read-only
/// attribute, as unzip applies it).
pub fn kind_and_perm(e: &CentralEntry, is_dir_name: bool) -> (u32, u32) {
    use libc::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
    let unix = e.unix_mode();
    let ftype = unix.map(|m| m & S_IFMT).unwrap_or(0);
    let is_dir = is_dir_name
        || ftype == S_IFDIR
        || (unix.is_none() && e.external & DOS_DIR != 0 && e.size == 0);
    // A link with an empty target is an empty file, as `unzip` makes it:
    // the kernel resolves "" to the link's own directory, so a mount would
    // hold an endless `link/link/...`.
    let kind = if is_dir {
        S_IFDIR
    } else if ftype == S_IFLNK && e.size > 0 {
        S_IFLNK
    } else {
        S_IFREG
    };
    let perm = match unix.map(|m| m & 0o7777) {
        _ if ftype == S_IFLNK && kind == S_IFREG => 0o644,
        Some(p) if p != 0 || ftype != 0 => p,
        _ if kind == S_IFDIR => 0o755,
        _ if kind == S_IFLNK => 0o777,
        _ if unix.is_none() && e.external & 0x01 != 0 => 0o444,
        _ => 0o644,
    };
    (kind, perm)
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

/// A streaming decoder of a member's data for `method` (every method the
/// readers decode), reading the compressed bytes from `raw`. `flags` and
/// `size` are the member's (LZMA needs them). An unknown method is
/// `ErrorKind::Unsupported`, a malformed LZMA header `InvalidData`.
pub fn member_decoder<'a>(
    method: u16,
    flags: u16,
    size: u64,
    raw: impl Read + Send + 'a,
) -> io::Result<Box<dyn Read + Send + 'a>> {
    Ok(match method {
        METHOD_STORED => Box::new(raw),
        METHOD_DEFLATE => Box::new(flate2::read::DeflateDecoder::new(raw)),
        METHOD_DEFLATE64 => Box::new(deflate64::Deflate64Decoder::new(raw)),
        METHOD_BZIP2 => Box::new(bzip2::read::MultiBzDecoder::new(raw)),
        METHOD_ZSTD | METHOD_ZSTD_OLD => Box::new(zstd::stream::read::Decoder::new(raw)?),
        METHOD_XZ => Box::new(xz2::read::XzDecoder::new_multi_decoder(raw)),
        METHOD_LZMA => Box::new(lzma_reader(raw, flags, size)?),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("unsupported method {} ({other})", method_name(other)),
            ))
        }
    })
}

/// ZIP's LZMA (method 14): 2-byte LZMA SDK version, 2-byte properties size,
/// the 5 properties bytes, then a raw LZMA1 stream. liblzma's "alone"
/// decoder wants the .lzma header instead: properties + 64-bit size, where
/// the size is unknown (-1) when the stream has an end marker (flag bit 1).
fn lzma_reader<'a>(
    mut raw: impl Read + Send + 'a,
    flags: u16,
    size: u64,
) -> io::Result<impl Read + Send + 'a> {
    let truncated = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            io::Error::new(io::ErrorKind::InvalidData, "LZMA header truncated")
        }
        _ => e,
    };
    let mut head = [0u8; 4];
    raw.read_exact(&mut head).map_err(truncated)?;
    let psize = u16::from_le_bytes([head[2], head[3]]) as usize;
    if psize != 5 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("LZMA properties of {psize} bytes (expected 5)"),
        ));
    }
    let mut alone = vec![0u8; 13];
    raw.read_exact(&mut alone[..5]).map_err(truncated)?;
    let size = if flags & FLAG_LZMA_EOS != 0 {
        u64::MAX
    } else {
        size
    };
    alone[5..].copy_from_slice(&size.to_le_bytes());
    let stream = xz2::stream::Stream::new_lzma_decoder(u64::MAX)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("LZMA decoder: {e}")))?;
    Ok(xz2::read::XzDecoder::new_stream(
        io::Cursor::new(alone).chain(raw),
        stream,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zip::entry::apply_extras;
    use crate::zip::time::{dos_as_utc, DOS_1980_01_01};

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
}
