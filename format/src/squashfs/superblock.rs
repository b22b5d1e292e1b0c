//! The superblock: 96 bytes at offset 0 that locate every table.

use super::*;
use crate::bytes::{put_u16, put_u32, put_u64, Input, SliceInput};
use crate::FormatError;

/// The 96-byte superblock at offset 0, field by field in on-disk order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Must be [`MAGIC`].
    pub magic: u32,
    /// Number of distinct inodes; inode numbers run 1..=inode_count.
    pub inode_count: u32,
    /// Image creation time, seconds since the epoch.
    pub mod_time: u32,
    /// Data block size, a power of two from 4 KiB to 1 MiB.
    pub block_size: u32,
    /// Number of entries in the fragment table.
    pub fragment_count: u32,
    /// [`crate::codec::Compressor`] id.
    pub compression_id: u16,
    /// log2(block_size); must agree with `block_size`.
    pub block_log: u16,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Number of entries in the uid/gid table.
    pub id_count: u16,
    /// 4 for every image this crate handles.
    pub version_major: u16,
    /// 0.
    pub version_minor: u16,
    /// Metadata reference of the root directory inode.
    pub root_inode: u64,
    /// Bytes of the image in use (before the 4 KiB padding).
    pub bytes_used: u64,
    /// Absolute position of the id table's block index.
    pub id_table_start: u64,
    /// Absolute position of the xattr id table header; [`INVALID_TABLE`]
    /// when the image has no xattrs.
    pub xattr_id_table_start: u64,
    /// Absolute position of the first inode table metadata block.
    pub inode_table_start: u64,
    /// Absolute position of the first directory table metadata block.
    pub directory_table_start: u64,
    /// Absolute position of the fragment table's block index when
    /// `fragment_count > 0`; otherwise the end of the directory table (what
    /// mksquashfs stores, and unsquashfs uses as that table's bound).
    pub fragment_table_start: u64,
    /// Absolute position of the export table's block index; [`INVALID_TABLE`]
    /// when the image is not exportable.
    pub export_table_start: u64,
}

impl Superblock {
    /// Parses the raw bytes without validating them (the reader checks
    /// magic, version, block size and table bounds).
    pub fn decode(b: &[u8; SUPERBLOCK_SIZE]) -> Self {
        let mut c = SliceInput::new(b, "superblock");
        Self::read(&mut c).expect("96 bytes hold a superblock")
    }

    fn read(c: &mut SliceInput<'_>) -> Result<Self, FormatError> {
        Ok(Superblock {
            magic: c.u32()?,
            inode_count: c.u32()?,
            mod_time: c.u32()?,
            block_size: c.u32()?,
            fragment_count: c.u32()?,
            compression_id: c.u16()?,
            block_log: c.u16()?,
            flags: c.u16()?,
            id_count: c.u16()?,
            version_major: c.u16()?,
            version_minor: c.u16()?,
            root_inode: c.u64()?,
            bytes_used: c.u64()?,
            id_table_start: c.u64()?,
            xattr_id_table_start: c.u64()?,
            inode_table_start: c.u64()?,
            directory_table_start: c.u64()?,
            fragment_table_start: c.u64()?,
            export_table_start: c.u64()?,
        })
    }

    pub fn encode(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut v = Vec::with_capacity(SUPERBLOCK_SIZE);
        for x in [
            self.magic,
            self.inode_count,
            self.mod_time,
            self.block_size,
            self.fragment_count,
        ] {
            put_u32(&mut v, x);
        }
        for x in [
            self.compression_id,
            self.block_log,
            self.flags,
            self.id_count,
            self.version_major,
            self.version_minor,
        ] {
            put_u16(&mut v, x);
        }
        for x in [
            self.root_inode,
            self.bytes_used,
            self.id_table_start,
            self.xattr_id_table_start,
            self.inode_table_start,
            self.directory_table_start,
            self.fragment_table_start,
            self.export_table_start,
        ] {
            put_u64(&mut v, x);
        }
        v.try_into().expect("superblock is 96 bytes")
    }

    pub fn has_flag(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trips() {
        let sb = Superblock {
            magic: MAGIC,
            inode_count: 7,
            mod_time: 123,
            block_size: 131072,
            fragment_count: 2,
            compression_id: 6,
            block_log: 17,
            flags: FLAG_EXPORTABLE,
            id_count: 1,
            version_major: 4,
            version_minor: 0,
            root_inode: 0x1234_0056,
            bytes_used: 99999,
            id_table_start: 1,
            xattr_id_table_start: INVALID_TABLE,
            inode_table_start: 2,
            directory_table_start: 3,
            fragment_table_start: 4,
            export_table_start: 5,
        };
        assert_eq!(Superblock::decode(&sb.encode()), sb);
        assert_eq!(&sb.encode()[..4], b"hsqs");
        // Field offsets as the kernel's squashfs_fs.h lays them out.
        let b = sb.encode();
        assert_eq!(u16::from_le_bytes([b[20], b[21]]), 6); // compression
        assert_eq!(u16::from_le_bytes([b[22], b[23]]), 17); // block_log
        assert_eq!(
            u64::from_le_bytes(b[32..40].try_into().unwrap()),
            0x1234_0056
        );
        assert_eq!(u64::from_le_bytes(b[88..96].try_into().unwrap()), 5);
    }
}
