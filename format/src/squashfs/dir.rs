//! Directory listings in the directory table.
//!
//! A listing is a run of [`DirHeader`]s, each followed by 1..=256
//! [`DirEntry`] records (each a fixed 8 bytes and its name), sorted by
//! name. A header names one inode-table block and an inode number base;
//! its entries store their inode's offset in that block and their number
//! as a signed 16-bit delta from the base, which is why a writer starts a
//! new header when either no longer fits.

use super::*;
use crate::bytes::{put_i16, put_u16, put_u32, Input};
use crate::FormatError;

/// The 12 bytes that start a run of entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirHeader {
    /// Entries in the run, 1..=256 (stored minus one).
    pub count: u32,
    /// Inode-table block (relative to the inode table start) holding every
    /// inode of the run.
    pub start_block: u32,
    /// Inode number the entries' deltas are relative to.
    pub inode_number: u32,
}

impl DirHeader {
    pub const SIZE: usize = DIR_HEADER_SIZE;

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.count - 1);
        put_u32(out, self.start_block);
        put_u32(out, self.inode_number);
    }

    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        let count = c.u32()?.wrapping_add(1);
        let start_block = c.u32()?;
        let inode_number = c.u32()?;
        if count == 0 || count as usize > DIR_HEADER_MAX_ENTRIES {
            return Err(FormatError::invalid(format!(
                "directory header claims {count} entries (at most 256)"
            ))
            .into());
        }
        Ok(DirHeader {
            count,
            start_block,
            inode_number,
        })
    }
}

/// The 8 fixed bytes of an entry; its name (`name_len` bytes) follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Offset of the inode in the header's inode-table block.
    pub offset: u16,
    /// Inode number minus the header's base.
    pub inode_delta: i16,
    /// Basic inode type (1..=7), whatever the inode's stored type.
    pub inode_type: u16,
    /// Name length, 1..=256 (stored minus one).
    pub name_len: usize,
}

impl DirEntry {
    pub const SIZE: usize = DIR_ENTRY_SIZE;

    /// Appends the entry with its `name` (whose length is what is stored).
    pub fn encode(offset: u16, inode_delta: i16, inode_type: u16, name: &[u8], out: &mut Vec<u8>) {
        put_u16(out, offset);
        put_i16(out, inode_delta);
        put_u16(out, inode_type);
        put_u16(out, name.len() as u16 - 1);
        out.extend_from_slice(name);
    }

    /// Reads the fixed part; the caller reads `name_len` name bytes next
    /// (into its own buffer: listings are walked on every lookup, so the
    /// name is not allocated here).
    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        Ok(DirEntry {
            offset: c.u16()?,
            inode_delta: c.i16()?,
            inode_type: c.u16()?,
            name_len: c.u16()? as usize + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::SliceInput;

    #[test]
    fn header_and_entries_round_trip() {
        let mut out = Vec::new();
        let h = DirHeader {
            count: 256,
            start_block: 9000,
            inode_number: 70_000,
        };
        h.encode(&mut out);
        assert_eq!(&out[..4], &255u32.to_le_bytes());
        DirEntry::encode(120, -5, INODE_BASIC_FILE, b"name", &mut out);
        DirEntry::encode(0, i16::MAX, INODE_BASIC_DIR, &[b'x'; 256], &mut out);
        assert_eq!(out.len(), DirHeader::SIZE + 2 * DirEntry::SIZE + 4 + 256);
        let mut c = SliceInput::new(&out, "listing");
        assert_eq!(DirHeader::decode(&mut c).unwrap(), h);
        let e = DirEntry::decode(&mut c).unwrap();
        assert_eq!(
            e,
            DirEntry {
                offset: 120,
                inode_delta: -5,
                inode_type: INODE_BASIC_FILE,
                name_len: 4
            }
        );
        assert_eq!(c.bytes(e.name_len).unwrap(), b"name");
        let e = DirEntry::decode(&mut c).unwrap();
        assert_eq!((e.inode_delta, e.name_len), (i16::MAX, 256));
    }

    #[test]
    fn oversized_header_count_is_an_error() {
        let mut out = Vec::new();
        put_u32(&mut out, 256); // 257 entries
        put_u32(&mut out, 0);
        put_u32(&mut out, 1);
        let mut c = SliceInput::new(&out, "listing");
        assert!(DirHeader::decode(&mut c).is_err());
    }
}
