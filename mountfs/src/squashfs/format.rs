//! SquashFS 4.0 on-disk format: constants and the fixed-size structures.
//!
//! This module is the single description of the format shared by the reader
//! (`mountfs`) and the writer (`packer`). Everything is little-endian.
//!
//! ```text
//! offset 0      superblock (96 bytes, [`Superblock`])
//!               compressor options (metadata block, only if FLAG_COMPRESSOR_OPTIONS)
//!               data blocks and fragment blocks, in write order
//! inode_table   metadata blocks holding inodes
//! dir_table     metadata blocks holding directory listings
//! frag_table    metadata blocks of 16-byte fragment entries, then u64 index of those blocks
//! export_table  metadata blocks of u64 inode refs (by inode number - 1), then u64 index
//! id_table      metadata blocks of u32 uid/gid values, then u64 index
//! xattr_table   key/value metadata blocks, id metadata blocks, header + u64 index
//! bytes_used    end of image; the file is padded with zeros to a 4 KiB multiple
//! ```
//!
//! A *metadata block* is a u16 header (bit 15 set = stored uncompressed, low 15
//! bits = stored length) followed by at most 8192 bytes of payload once
//! decompressed. A *reference* into a metadata area is `(block << 16) | offset`
//! where `block` is the byte position of the block's header relative to the
//! area start and `offset` the byte offset into its decompressed payload.

/// `hsqs` read as a little-endian u32.
pub const MAGIC: u32 = 0x7371_7368;
pub const SUPERBLOCK_SIZE: usize = 96;
/// Decompressed size of every metadata block but the last of an area.
pub const METADATA_SIZE: usize = 8192;
/// Bit 15 of a metadata block header: payload stored uncompressed.
pub const METADATA_UNCOMPRESSED: u16 = 0x8000;
/// Bit 24 of a data block / fragment size word: stored uncompressed.
pub const DATA_UNCOMPRESSED: u32 = 1 << 24;
/// Low 24 bits of a data block / fragment size word: stored length (0 = sparse block).
pub const DATA_SIZE_MASK: u32 = DATA_UNCOMPRESSED - 1;
/// Marker for "no fragment" / "no xattrs" / "no table".
pub const INVALID_FRAG: u32 = 0xFFFF_FFFF;
pub const INVALID_XATTR: u32 = 0xFFFF_FFFF;
pub const INVALID_TABLE: u64 = 0xFFFF_FFFF_FFFF_FFFF;
pub const MIN_BLOCK_LOG: u16 = 12;
pub const MAX_BLOCK_LOG: u16 = 20;
/// Entries in one directory header at most (`count` is stored minus one).
pub const DIR_HEADER_MAX_ENTRIES: usize = 256;
/// Longest name a directory entry may carry.
pub const MAX_NAME_LEN: usize = 256;
/// Size of a directory header on disk: count, start block, inode number base.
pub const DIR_HEADER_SIZE: usize = 12;
/// Size of a directory entry on disk without its name.
pub const DIR_ENTRY_SIZE: usize = 8;
/// Size of a directory index entry without its name.
pub const DIR_INDEX_SIZE: usize = 12;
/// Size of a fragment table entry.
pub const FRAGMENT_ENTRY_SIZE: usize = 16;
/// Size of an xattr id table entry.
pub const XATTR_ID_ENTRY_SIZE: usize = 16;
/// The images are padded to a multiple of this (what mksquashfs and the kernel expect).
pub const DEVICE_BLOCK: u64 = 4096;

// Superblock flags.
pub const FLAG_UNCOMPRESSED_INODES: u16 = 0x0001;
pub const FLAG_UNCOMPRESSED_DATA: u16 = 0x0002;
pub const FLAG_CHECK: u16 = 0x0004;
pub const FLAG_UNCOMPRESSED_FRAGMENTS: u16 = 0x0008;
pub const FLAG_NO_FRAGMENTS: u16 = 0x0010;
pub const FLAG_ALWAYS_FRAGMENTS: u16 = 0x0020;
pub const FLAG_DUPLICATES: u16 = 0x0040;
pub const FLAG_EXPORTABLE: u16 = 0x0080;
pub const FLAG_UNCOMPRESSED_XATTRS: u16 = 0x0100;
pub const FLAG_NO_XATTRS: u16 = 0x0200;
pub const FLAG_COMPRESSOR_OPTIONS: u16 = 0x0400;
pub const FLAG_UNCOMPRESSED_IDS: u16 = 0x0800;

// Inode types. Directory entries always carry the basic type.
pub const INODE_BASIC_DIR: u16 = 1;
pub const INODE_BASIC_FILE: u16 = 2;
pub const INODE_BASIC_SYMLINK: u16 = 3;
pub const INODE_BASIC_BLKDEV: u16 = 4;
pub const INODE_BASIC_CHRDEV: u16 = 5;
pub const INODE_BASIC_FIFO: u16 = 6;
pub const INODE_BASIC_SOCKET: u16 = 7;
pub const INODE_EXT_DIR: u16 = 8;
pub const INODE_EXT_FILE: u16 = 9;
pub const INODE_EXT_SYMLINK: u16 = 10;
pub const INODE_EXT_BLKDEV: u16 = 11;
pub const INODE_EXT_CHRDEV: u16 = 12;
pub const INODE_EXT_FIFO: u16 = 13;
pub const INODE_EXT_SOCKET: u16 = 14;
/// Extended types are basic types plus this.
pub const INODE_EXT_OFFSET: u16 = 7;

// Xattr key type prefixes; OOL means the value is a u64 reference to another value.
pub const XATTR_USER: u16 = 0;
pub const XATTR_TRUSTED: u16 = 1;
pub const XATTR_SECURITY: u16 = 2;
pub const XATTR_VALUE_OOL: u16 = 0x100;
pub const XATTR_PREFIX_MASK: u16 = 0xFF;

/// Compressor identifiers as stored in the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compressor {
    Gzip = 1,
    Lzma = 2,
    Lzo = 3,
    Xz = 4,
    Lz4 = 5,
    Zstd = 6,
}

impl Compressor {
    pub fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            1 => Self::Gzip,
            2 => Self::Lzma,
            3 => Self::Lzo,
            4 => Self::Xz,
            5 => Self::Lz4,
            6 => Self::Zstd,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Lzma => "lzma",
            Self::Lzo => "lzo",
            Self::Xz => "xz",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

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
    /// [`Compressor`] id.
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
    pub id_table_start: u64,
    /// [`INVALID_TABLE`] when the image has no xattrs.
    pub xattr_id_table_start: u64,
    pub inode_table_start: u64,
    pub directory_table_start: u64,
    /// Meaningful only when `fragment_count > 0` (mksquashfs then stores the
    /// end of the directory table here, which unsquashfs uses as its bound).
    pub fragment_table_start: u64,
    /// [`INVALID_TABLE`] when the image is not exportable.
    pub export_table_start: u64,
}

impl Superblock {
    /// Parses the raw bytes without validating them (see the reader for checks).
    pub fn parse(b: &[u8; SUPERBLOCK_SIZE]) -> Self {
        let mut c = LeCursor::new(b);
        Superblock {
            magic: c.u32(),
            inode_count: c.u32(),
            mod_time: c.u32(),
            block_size: c.u32(),
            fragment_count: c.u32(),
            compression_id: c.u16(),
            block_log: c.u16(),
            flags: c.u16(),
            id_count: c.u16(),
            version_major: c.u16(),
            version_minor: c.u16(),
            root_inode: c.u64(),
            bytes_used: c.u64(),
            id_table_start: c.u64(),
            xattr_id_table_start: c.u64(),
            inode_table_start: c.u64(),
            directory_table_start: c.u64(),
            fragment_table_start: c.u64(),
            export_table_start: c.u64(),
        }
    }

    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut v = Vec::with_capacity(SUPERBLOCK_SIZE);
        for x in [
            self.magic,
            self.inode_count,
            self.mod_time,
            self.block_size,
            self.fragment_count,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for x in [
            self.compression_id,
            self.block_log,
            self.flags,
            self.id_count,
            self.version_major,
            self.version_minor,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
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
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.try_into().expect("superblock is 96 bytes")
    }

    pub fn has_flag(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// Splits a metadata reference into (block position, offset in block).
pub fn split_ref(r: u64) -> (u64, usize) {
    (r >> 16, (r & 0xFFFF) as usize)
}

/// Builds a metadata reference from (block position, offset in block).
pub fn make_ref(block: u64, offset: usize) -> u64 {
    (block << 16) | offset as u64
}

/// Linux `new_encode_dev`, the device number encoding SquashFS stores.
pub fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Inverse of [`encode_dev`]: returns (major, minor).
pub fn decode_dev(dev: u32) -> (u32, u32) {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    (major, minor)
}

/// Number of blocks a file of `size` bytes has, given whether its tail lives
/// in a fragment.
pub fn block_count(size: u64, block_size: u32, tail_in_fragment: bool) -> u64 {
    let bs = block_size as u64;
    if tail_in_fragment {
        size / bs
    } else {
        size.div_ceil(bs)
    }
}

/// Little-endian reader over a slice. Callers check lengths first; reading past
/// the end yields zeros rather than panicking, and sets `overrun`.
pub struct LeCursor<'a> {
    buf: &'a [u8],
    pos: usize,
    pub overrun: bool,
}

impl<'a> LeCursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        LeCursor {
            buf,
            pos: 0,
            overrun: false,
        }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        match self.buf.get(self.pos..self.pos + N) {
            Some(s) => out.copy_from_slice(s),
            None => self.overrun = true,
        }
        self.pos += N;
        out
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    pub fn i16(&mut self) -> i16 {
        i16::from_le_bytes(self.take())
    }
    pub fn pos(&self) -> usize {
        self.pos
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
        assert_eq!(Superblock::parse(&sb.to_bytes()), sb);
        assert_eq!(&sb.to_bytes()[..4], b"hsqs");
    }

    #[test]
    fn device_numbers_round_trip() {
        for (ma, mi) in [(8, 1), (259, 65536 + 3), (4095, 0xFFFFF), (0, 0)] {
            assert_eq!(decode_dev(encode_dev(ma, mi)), (ma, mi));
        }
        // Known value: /dev/sda1 (8:1) is 0x801.
        assert_eq!(encode_dev(8, 1), 0x801);
    }
}
