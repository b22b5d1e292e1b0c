//! Extra fields: `u16 id, u16 length, data`, one after another in a local
//! header or central record. packfs writes Zip64, the extended timestamp
//! and Info-ZIP Unix uid/gid; readers also take the old Unix fields and
//! the Unicode Path field. Unknown ids are skipped, and a malformed tail is
//! ignored, as unzip does.

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

/// Zip64 extended information, decoded: the values present, in order,
/// are those of the fields whose 32-bit slot was saturated (`want`: size,
/// compressed size, local offset, in that order), then an optional u32
/// disk number when `want_disk`.
pub fn decode_zip64(d: &[u8], want: [bool; 3], want_disk: bool) -> ([Option<u64>; 3], Option<u32>) {
    let mut at = 0;
    let mut vals = [None; 3];
    for (v, w) in vals.iter_mut().zip(want) {
        if w {
            if let Some(f) = d.get(at..at + 8) {
                *v = Some(le64(f, 0));
                at += 8;
            }
        }
    }
    let disk = if want_disk {
        d.get(at..at + 4).map(|f| le32(f, 0))
    } else {
        None
    };
    (vals, disk)
}

/// Extended timestamp: the modification time when flag bit 0 says one is there.
pub fn decode_extended_timestamp(d: &[u8]) -> Option<u32> {
    (d.len() >= 5 && d[0] & 1 != 0).then(|| le32(d, 1))
}

/// Old Info-ZIP Unix (0x5855) and PKWARE Unix (0x000d): (mtime, uid/gid if present).
pub fn decode_old_unix(d: &[u8]) -> Option<(u32, Option<(u32, u32)>)> {
    if d.len() < 8 {
        return None;
    }
    let ids = (d.len() >= 12).then(|| (le16(d, 8) as u32, le16(d, 10) as u32));
    Some((le32(d, 4), ids))
}

/// Info-ZIP Unix version 1: uid and gid of 1 to 8 bytes each (values that
/// do not fit 32 bits are refused).
pub fn decode_infozip_unix(d: &[u8]) -> Option<(u32, u32)> {
    if d.len() < 3 || d[0] != 1 {
        return None;
    }
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
    let (uid, at) = read_id(1)?;
    let (gid, _) = read_id(at)?;
    Some((uid, gid))
}

/// Info-ZIP Unicode Path: the UTF-8 name, valid only when its CRC-32 of
/// the stored name matches `raw_name` (else the name was changed by a tool
/// that did not update this field).
pub fn decode_unicode_path(d: &[u8], raw_name: &[u8]) -> Option<Vec<u8>> {
    if d.len() < 5 || d[0] != 1 {
        return None;
    }
    let ok = crc32fast::hash(raw_name) == le32(d, 1) && std::str::from_utf8(&d[5..]).is_ok();
    ok.then(|| d[5..].to_vec())
}

/// The extra fields of a record as (id, data), in order; a malformed tail
/// ends the walk, as unzip does.
pub fn fields(mut x: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if x.len() < 4 {
            return None;
        }
        let id = le16(x, 0);
        let n = le16(x, 2) as usize;
        let d = x.get(4..4 + n)?;
        x = &x[4 + n..];
        Some((id, d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_extras_decode() {
        let mut x = Vec::new();
        zip64(&mut x, &[5_000_000_000, 7]);
        extended_timestamp(&mut x, 4_000_000_000);
        infozip_unix(&mut x, 1234, 5678);
        assert_eq!(x.len(), 4 + 16 + UNIX_EXTRAS_LEN as usize);
        x.extend_from_slice(&[0xAA, 0xBB, 200, 0, 1]); // truncated field: ends the walk
        let f: Vec<(u16, &[u8])> = fields(&x).collect();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].0, ZIP64);
        assert_eq!(
            decode_zip64(f[0].1, [true, true, false], false),
            ([Some(5_000_000_000), Some(7), None], None)
        );
        assert_eq!(decode_extended_timestamp(f[1].1), Some(4_000_000_000));
        assert_eq!(decode_infozip_unix(f[2].1), Some((1234, 5678)));
    }
}
