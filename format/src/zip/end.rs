//! The end records: the classic end of central directory record, and the
//! Zip64 end record with its locator, written before it when a count, size
//! or offset does not fit.

use super::*;
use crate::bytes::{le16, le32, le64, put_u16, put_u32, put_u64};
use crate::FormatError;

/// End of central directory: 22 bytes, then a comment of `comment_len` bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndRecord {
    /// Number of this disk (0).
    pub disk: u16,
    /// Disk where the central directory starts (0).
    pub cd_disk: u16,
    /// Entries on this disk; 0xFFFF when the Zip64 record holds the count.
    pub entries_here: u16,
    /// Entries in all; 0xFFFF when the Zip64 record holds the count.
    pub entries: u16,
    /// Central directory size; 0xFFFFFFFF when in the Zip64 record.
    pub cd_size: u32,
    /// Central directory position; 0xFFFFFFFF when in the Zip64 record.
    pub cd_offset: u32,
    pub comment_len: u16,
}

impl EndRecord {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, SIG_EOCD);
        put_u16(out, self.disk);
        put_u16(out, self.cd_disk);
        put_u16(out, self.entries_here);
        put_u16(out, self.entries);
        put_u32(out, self.cd_size);
        put_u32(out, self.cd_offset);
        put_u16(out, self.comment_len);
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < EOCD_LEN {
            return Err(FormatError::Truncated("end of central directory record"));
        }
        if le32(b, 0) != SIG_EOCD {
            return Err(FormatError::invalid(
                "no end of central directory signature",
            ));
        }
        Ok(EndRecord {
            disk: le16(b, 4),
            cd_disk: le16(b, 6),
            entries_here: le16(b, 8),
            entries: le16(b, 10),
            cd_size: le32(b, 12),
            cd_offset: le32(b, 16),
            comment_len: le16(b, 20),
        })
    }
}

/// Zip64 end of central directory record (56 bytes, no extensible data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Zip64EndRecord {
    /// Size of the rest of the record: 44.
    pub record_size: u64,
    pub made_by: u16,
    /// 45.
    pub version_needed: u16,
    pub disk: u32,
    pub cd_disk: u32,
    pub entries_here: u64,
    pub entries: u64,
    pub cd_size: u64,
    pub cd_offset: u64,
}

impl Zip64EndRecord {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, SIG_EOCD64);
        put_u64(out, self.record_size);
        put_u16(out, self.made_by);
        put_u16(out, self.version_needed);
        put_u32(out, self.disk);
        put_u32(out, self.cd_disk);
        put_u64(out, self.entries_here);
        put_u64(out, self.entries);
        put_u64(out, self.cd_size);
        put_u64(out, self.cd_offset);
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < EOCD64_LEN {
            return Err(FormatError::Truncated(
                "Zip64 end of central directory record",
            ));
        }
        if le32(b, 0) != SIG_EOCD64 {
            return Err(FormatError::invalid("no Zip64 end record signature"));
        }
        Ok(Zip64EndRecord {
            record_size: le64(b, 4),
            made_by: le16(b, 12),
            version_needed: le16(b, 14),
            disk: le32(b, 16),
            cd_disk: le32(b, 20),
            entries_here: le64(b, 24),
            entries: le64(b, 32),
            cd_size: le64(b, 40),
            cd_offset: le64(b, 48),
        })
    }
}

/// Zip64 end of central directory locator (20 bytes), right before the
/// classic end record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Zip64Locator {
    /// Disk holding the Zip64 end record (0).
    pub record_disk: u32,
    /// Position of the Zip64 end record.
    pub record_offset: u64,
    /// Number of disks (1).
    pub total_disks: u32,
}

impl Zip64Locator {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, SIG_EOCD64_LOCATOR);
        put_u32(out, self.record_disk);
        put_u64(out, self.record_offset);
        put_u32(out, self.total_disks);
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < EOCD64_LOCATOR_LEN {
            return Err(FormatError::Truncated(
                "Zip64 end of central directory locator",
            ));
        }
        if le32(b, 0) != SIG_EOCD64_LOCATOR {
            return Err(FormatError::invalid("no Zip64 locator signature"));
        }
        Ok(Zip64Locator {
            record_disk: le32(b, 4),
            record_offset: le64(b, 8),
            total_disks: le32(b, 16),
        })
    }
}

/// Finds the last EOCD signature in `tail` (the last bytes of the file,
/// starting at absolute position `tail_start`) whose comment length fits
/// the file. A record whose comment ends exactly at the end of the file is
/// preferred (trailing garbage is otherwise tolerated). Returns (position,
/// comment length).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_records_round_trip() {
        let z = Zip64EndRecord {
            record_size: 44,
            made_by: VERSION_MADE_BY,
            version_needed: 45,
            disk: 0,
            cd_disk: 0,
            entries_here: 70_000,
            entries: 70_000,
            cd_size: 5 << 30,
            cd_offset: 6 << 30,
        };
        let l = Zip64Locator {
            record_disk: 0,
            record_offset: 11 << 30,
            total_disks: 1,
        };
        let e = EndRecord {
            disk: 0,
            cd_disk: 0,
            entries_here: 0xFFFF,
            entries: 0xFFFF,
            cd_size: 0xFFFF_FFFF,
            cd_offset: 0xFFFF_FFFF,
            comment_len: 0,
        };
        let mut b = Vec::new();
        z.encode(&mut b);
        assert_eq!(b.len(), EOCD64_LEN);
        l.encode(&mut b);
        assert_eq!(b.len(), EOCD64_LEN + EOCD64_LOCATOR_LEN);
        e.encode(&mut b);
        assert_eq!(b.len(), EOCD64_LEN + EOCD64_LOCATOR_LEN + EOCD_LEN);
        assert_eq!(Zip64EndRecord::decode(&b).unwrap(), z);
        assert_eq!(Zip64Locator::decode(&b[EOCD64_LEN..]).unwrap(), l);
        let at = EOCD64_LEN + EOCD64_LOCATOR_LEN;
        assert_eq!(EndRecord::decode(&b[at..]).unwrap(), e);
        assert_eq!(find_eocd(&b, 1000), Some((1000 + at as u64, 0)));
        assert!(EndRecord::decode(&b).is_err());
        assert!(Zip64Locator::decode(&b[..10]).is_err());
    }
}
