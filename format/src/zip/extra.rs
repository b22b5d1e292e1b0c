//! Extra fields: `u16 id, u16 length, data`, one after another in a local
//! header or central record. packfs writes Zip64, the extended timestamp
//! and Info-ZIP Unix uid/gid; readers also take the old Unix fields and
//! the Unicode Path field. Unknown ids are skipped, and a malformed tail is
//! ignored, as unzip does.

use super::central::CentralEntry;
use crate::bytes::{le16, le32, le64, put_u16, put_u32, put_u64, put_u8};

pub const ZIP64: u16 = 0x0001;
pub const PKWARE_UNIX: u16 = 0x000d;
pub const EXTENDED_TIMESTAMP: u16 = 0x5455;
pub const INFOZIP_UNIX_OLD: u16 = 0x5855;
pub const UNICODE_PATH: u16 = 0x7075;
pub const INFOZIP_UNIX: u16 = 0x7875;

/// Bytes [`extended_timestamp`] and [`infozip_unix`] take together.
pub const UNIX_EXTRAS_LEN: u16 = 9 + 15;

/// Zip64 extended information: the 64-bit values of the fields that
/// overflowed, in the order uncompressed size, compressed size, local
/// header offset (only those present).
pub fn zip64(out: &mut Vec<u8>, values: &[u64]) {
    put_u16(out, ZIP64);
    put_u16(out, (values.len() * 8) as u16);
    for &v in values {
        put_u64(out, v);
    }
}

/// Extended timestamp with the modification time only (flags bit 0).
pub fn extended_timestamp(out: &mut Vec<u8>, mtime: u32) {
    put_u16(out, EXTENDED_TIMESTAMP);
    put_u16(out, 5);
    put_u8(out, 1);
    put_u32(out, mtime);
}

/// Info-ZIP Unix (version 1) with 4-byte uid and gid.
pub fn infozip_unix(out: &mut Vec<u8>, uid: u32, gid: u32) {
    put_u16(out, INFOZIP_UNIX);
    put_u16(out, 11);
    put_u8(out, 1);
    put_u8(out, 4);
    put_u32(out, uid);
    put_u8(out, 4);
    put_u32(out, gid);
}

/// Walks the extra fields of a central record, applying those we know to `e`.
pub fn apply_extras(e: &mut CentralEntry, mut x: &[u8]) {
    while x.len() >= 4 {
        let id = le16(x, 0);
        let n = le16(x, 2) as usize;
        let Some(d) = x.get(4..4 + n) else { break };
        match id {
            ZIP64 => {
                // Present only for the fields saturated in the record.
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
            EXTENDED_TIMESTAMP if d.len() >= 5 && d[0] & 1 != 0 => e.ut_mtime = Some(le32(d, 1)),
            INFOZIP_UNIX_OLD | PKWARE_UNIX if d.len() >= 8 => {
                e.old_unix_mtime = Some(le32(d, 4));
                if d.len() >= 12 && e.uid_gid.is_none() {
                    e.uid_gid = Some((le16(d, 8) as u32, le16(d, 10) as u32));
                }
            }
            INFOZIP_UNIX if d.len() >= 3 && d[0] == 1 => {
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
            UNICODE_PATH if d.len() >= 5 && d[0] == 1 => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_extras_read_back() {
        let mut x = Vec::new();
        zip64(&mut x, &[5_000_000_000, 7]);
        extended_timestamp(&mut x, 4_000_000_000);
        infozip_unix(&mut x, 1234, 5678);
        assert_eq!(x.len(), 4 + 16 + UNIX_EXTRAS_LEN as usize);
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
        assert_eq!(e.unicode_name.as_deref(), Some(uname));
        let mut e2 = CentralEntry {
            raw_name: b"other".to_vec(),
            ..Default::default()
        };
        apply_extras(&mut e2, &extra);
        assert_eq!(e2.unicode_name, None);
    }
}
