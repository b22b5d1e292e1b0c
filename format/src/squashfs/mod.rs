//! SquashFS 4.0: constants and records, each encoded and decoded side by
//! side. Everything is little-endian.
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
//!
//! | module | records |
//! |---|---|
//! | [`superblock`] | the 96-byte [`superblock::Superblock`] |
//! | [`metadata`] | metadata block header words, references, data block size words |
//! | [`inode`] | [`inode::InodeHeader`] and one body per inode kind, the directory index |
//! | [`dir`] | directory listing headers and entries |
//! | [`tables`] | fragment entries, xattr id entries and header, table indexes |
//! | [`xattr`] | xattr keys and values, name prefixes |

pub mod dir;
pub mod hashes;
pub mod inode;
pub mod metadata;
pub mod superblock;
pub mod tables;
pub mod xattr;

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
