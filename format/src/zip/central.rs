//! Central directory records: the archive's table of contents. Readers
//! use them through [`super::entry`], which applies the extra fields.

use super::*;
use crate::bytes::{le16, le32, put_u16, put_u32};
use crate::FormatError;

/// The 46 fixed bytes of a central directory record; the name, the extra
/// fields and the comment follow, with the lengths given here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CentralHeader {
    /// Host system in the high byte (`HOST_*`), APPNOTE version in the low.
    pub made_by: u16,
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
    pub comment_len: u16,
    /// Disk the member starts on (0; 0xFFFF sends readers to the Zip64 extra).
    pub disk_start: u16,
    /// Internal attributes (bit 0: text), unused by packfs.
    pub internal: u16,
    /// External attributes: Unix `st_mode` in the high 16 bits when the
    /// host is Unix, MS-DOS attributes in the low byte.
    pub external: u32,
    /// Position of the local header, or 0xFFFFFFFF with the value in the Zip64 extra.
    pub local_offset: u32,
}

impl CentralHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, SIG_CENTRAL);
        put_u16(out, self.made_by);
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
        put_u16(out, self.comment_len);
        put_u16(out, self.disk_start);
        put_u16(out, self.internal);
        put_u32(out, self.external);
        put_u32(out, self.local_offset);
    }

    /// Decodes the fixed part at the start of `b`.
    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < CENTRAL_LEN || le32(b, 0) != SIG_CENTRAL {
            return Err(FormatError::invalid(
                "bad central directory record signature",
            ));
        }
        Ok(CentralHeader {
            made_by: le16(b, 4),
            version_needed: le16(b, 6),
            flags: le16(b, 8),
            method: le16(b, 10),
            dos_time: le16(b, 12),
            dos_date: le16(b, 14),
            crc: le32(b, 16),
            csize: le32(b, 20),
            size: le32(b, 24),
            name_len: le16(b, 28),
            extra_len: le16(b, 30),
            comment_len: le16(b, 32),
            disk_start: le16(b, 34),
            internal: le16(b, 36),
            external: le32(b, 38),
            local_offset: le32(b, 42),
        })
    }

    /// Length of the record with its name, extra fields and comment.
    pub fn total_len(&self) -> usize {
        CENTRAL_LEN + self.name_len as usize + self.extra_len as usize + self.comment_len as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn central_header_round_trips_and_parses() {
        let h = CentralHeader {
            made_by: VERSION_MADE_BY,
            version_needed: 20,
            flags: 0,
            method: METHOD_DEFLATE,
            dos_time: 1,
            dos_date: 2,
            crc: 3,
            csize: 4,
            size: 5,
            name_len: 3,
            extra_len: 0,
            comment_len: 2,
            disk_start: 0,
            internal: 0,
            external: (0o100644 << 16),
            local_offset: 77,
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), CENTRAL_LEN);
        assert_eq!(CentralHeader::decode(&b).unwrap(), h);
        b.extend_from_slice(b"a/bhi");
        assert_eq!(h.total_len(), b.len());
    }
}
