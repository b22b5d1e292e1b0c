//! Lookup tables: arrays of fixed-size entries packed into metadata blocks,
//! located through a u64 index of those blocks' absolute positions (the
//! superblock points at the index). The fragment, export, id and xattr id
//! tables all have this shape; the xattr id table puts a header before its
//! index.

use super::*;
use crate::bytes::{put_u32, put_u64, Input};

/// Metadata blocks (hence u64 index words) a table of `entries` entries of
/// `entry_size` bytes needs.
pub fn index_len(entries: u64, entry_size: u64) -> u64 {
    (entries * entry_size).div_ceil(METADATA_SIZE as u64)
}

/// Where entry `i` of a table of `entry_size`-byte entries lives: (index
/// word, byte offset in that block). Entries never straddle blocks because
/// every entry size divides 8 KiB.
pub fn entry_at(i: u64, entry_size: usize) -> (usize, usize) {
    let per_block = (METADATA_SIZE / entry_size) as u64;
    (
        (i / per_block) as usize,
        (i % per_block) as usize * entry_size,
    )
}

/// One fragment table entry: where a fragment block is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentEntry {
    /// Absolute position of the fragment block.
    pub start: u64,
    /// Its size word (see [`super::metadata::data_word`]).
    pub size: u32,
    /// Unused, 0.
    pub unused: u32,
}

impl FragmentEntry {
    pub const SIZE: usize = FRAGMENT_ENTRY_SIZE;

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.start);
        put_u32(out, self.size);
        put_u32(out, self.unused);
    }

    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        Ok(FragmentEntry {
            start: c.u64()?,
            size: c.u32()?,
            unused: c.u32()?,
        })
    }
}

/// One xattr id table entry: an inode's xattr index leads here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XattrIdEntry {
    /// Reference of the first key into the key/value area.
    pub xattr_ref: u64,
    /// Number of key/value pairs.
    pub count: u32,
    /// Bytes of names (with prefix and NUL) and values, as listxattr and
    /// getxattr need them (mksquashfs records it; the kernel counts it in
    /// `st_blocks`).
    pub size: u32,
}

impl XattrIdEntry {
    pub const SIZE: usize = XATTR_ID_ENTRY_SIZE;

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.xattr_ref);
        put_u32(out, self.count);
        put_u32(out, self.size);
    }

    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        Ok(XattrIdEntry {
            xattr_ref: c.u64()?,
            count: c.u32()?,
            size: c.u32()?,
        })
    }
}

/// The 16 bytes at `xattr_id_table_start`, before the id blocks' index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XattrTableHeader {
    /// Absolute position of the key/value area.
    pub kv_start: u64,
    /// Number of xattr id entries.
    pub count: u32,
    /// Unused, 0.
    pub unused: u32,
}

impl XattrTableHeader {
    pub const SIZE: usize = 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.kv_start);
        put_u32(out, self.count);
        put_u32(out, self.unused);
    }

    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        Ok(XattrTableHeader {
            kv_start: c.u64()?,
            count: c.u32()?,
            unused: c.u32()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::SliceInput;

    #[test]
    fn entries_round_trip() {
        let mut out = Vec::new();
        let f = FragmentEntry {
            start: 5 << 32,
            size: 4000 | DATA_UNCOMPRESSED,
            unused: 0,
        };
        let x = XattrIdEntry {
            xattr_ref: 0x2_0010,
            count: 3,
            size: 77,
        };
        let h = XattrTableHeader {
            kv_start: 123_456,
            count: 9,
            unused: 0,
        };
        f.encode(&mut out);
        x.encode(&mut out);
        h.encode(&mut out);
        assert_eq!(
            out.len(),
            FragmentEntry::SIZE + XattrIdEntry::SIZE + XattrTableHeader::SIZE
        );
        let mut c = SliceInput::new(&out, "tables");
        assert_eq!(FragmentEntry::decode(&mut c).unwrap(), f);
        assert_eq!(XattrIdEntry::decode(&mut c).unwrap(), x);
        assert_eq!(XattrTableHeader::decode(&mut c).unwrap(), h);
    }

    #[test]
    fn table_geometry() {
        assert_eq!(index_len(0, 16), 0);
        assert_eq!(index_len(512, 16), 1);
        assert_eq!(index_len(513, 16), 2);
        assert_eq!(index_len(2049, 4), 2);
        assert_eq!(entry_at(511, 16), (0, 511 * 16));
        assert_eq!(entry_at(512, 16), (1, 0));
    }
}
