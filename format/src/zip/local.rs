//! The local file header before each member's data.

use super::*;
use crate::bytes::{le16, le32, put_u16, put_u32};
use crate::FormatError;

/// The 30 fixed bytes of a local header; the name (`name_len` bytes) and
/// the extra fields (`extra_len` bytes) follow, then the member's data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalHeader {
    /// Version needed to extract (10, 20 deflate, 45 Zip64, 63 zstd).
    pub version_needed: u16,
    /// General-purpose `FLAG_*` bits.
    pub flags: u16,
    /// `METHOD_*`.
    pub method: u16,
    pub dos_time: u16,
    pub dos_date: u16,
    /// CRC-32 of the uncompressed data.
    pub crc: u32,
    /// Compressed size, or 0xFFFFFFFF with the value in the Zip64 extra.
    pub csize: u32,
    /// Uncompressed size, or 0xFFFFFFFF with the value in the Zip64 extra.
    pub size: u32,
    pub name_len: u16,
    pub extra_len: u16,
}

impl LocalHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, SIG_LOCAL);
        put_u16(out, self.version_needed);
        put_u16(out, self.flags);
        put_u16(out, self.method);
        put_u16(out, self.dos_time);
        put_u16(out, self.dos_date);
        put_u32(out, self.crc);
        put_u32(out, self.csize);
        put_u32(out, self.size);
        put_u16(out, self.name_len);
        put_u16(out, self.extra_len);
    }

    /// Decodes the fixed part from the first [`LOCAL_LEN`] bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < LOCAL_LEN {
            return Err(FormatError::Truncated("local header"));
        }
        if le32(b, 0) != SIG_LOCAL {
            return Err(FormatError::invalid("no local header signature"));
        }
        Ok(LocalHeader {
            version_needed: le16(b, 4),
            flags: le16(b, 6),
            method: le16(b, 8),
            dos_time: le16(b, 10),
            dos_date: le16(b, 12),
            crc: le32(b, 14),
            csize: le32(b, 18),
            size: le32(b, 22),
            name_len: le16(b, 26),
            extra_len: le16(b, 28),
        })
    }

    /// Bytes from the header's start to the member's data.
    pub fn data_offset(&self) -> u64 {
        LOCAL_LEN as u64 + self.name_len as u64 + self.extra_len as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_header_round_trips() {
        let h = LocalHeader {
            version_needed: 45,
            flags: FLAG_UTF8,
            method: METHOD_DEFLATE,
            dos_time: 0x6344,
            dos_date: 0x512D,
            crc: 0xDEAD_BEEF,
            csize: MAX32 as u32,
            size: 12,
            name_len: 5,
            extra_len: 24,
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), LOCAL_LEN);
        assert_eq!(&b[..4], b"PK\x03\x04");
        assert_eq!(LocalHeader::decode(&b).unwrap(), h);
        assert_eq!(h.data_offset(), 30 + 5 + 24);
        assert!(LocalHeader::decode(&b[..29]).is_err());
        b[0] = b'X';
        assert!(LocalHeader::decode(&b).is_err());
    }
}
