//! Inodes, as stored in the inode table's metadata blocks.
//!
//! Every inode is an [`InodeHeader`] (16 bytes: type, permissions, uid and
//! gid indexes, mtime, inode number) followed by a body that depends on the
//! type. Basic types (1..=7) are compact; extended types (8..=14, the basic
//! type plus [`INODE_EXT_OFFSET`]) add link counts, 64-bit sizes and an
//! xattr index. Two bodies end in a variable list this module leaves to the
//! caller, because reading it is optional: a regular file's u32 block size
//! words (one per full block, see [`super::metadata::block_count`]) and an
//! extended directory's [`DirIndex`] entries.
//!
//! | type | body after the header |
//! |---|---|
//! | 1 dir | u32 block, u32 nlink, u16 size, u16 offset, u32 parent |
//! | 8 ext dir | u32 nlink, u32 size, u32 block, u32 parent, u16 index count, u16 offset, u32 xattr, index entries |
//! | 2 file | u32 blocks start, u32 fragment, u32 fragment offset, u32 size, u32 block sizes[] |
//! | 9 ext file | u64 blocks start, u64 size, u64 sparse, u32 nlink, u32 fragment, u32 fragment offset, u32 xattr, u32 block sizes[] |
//! | 3/10 symlink | u32 nlink, u32 target size, target, (ext: u32 xattr) |
//! | 4,5/11,12 device | u32 nlink, u32 device, (ext: u32 xattr) |
//! | 6,7/13,14 fifo, socket | u32 nlink, (ext: u32 xattr) |

use super::*;
use crate::bytes::{put_u16, put_u32, put_u64, Input};
use crate::FormatError;

/// Longest symlink target a reader accepts (the kernel's limit is a page;
/// this bounds the allocation a corrupt length can cause).
pub const MAX_SYMLINK_LEN: usize = 65536;

/// The 16 bytes every inode starts with, field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeHeader {
    /// `INODE_*` type, 1..=14; must agree with the body.
    pub inode_type: u16,
    /// Mode bits as the writer stored them (readers keep the low 12).
    pub permissions: u16,
    /// Index into the id table of the owner.
    pub uid_idx: u16,
    /// Index into the id table of the group.
    pub gid_idx: u16,
    /// Modification time, seconds since the epoch.
    pub mtime: u32,
    /// Inode number, 1..=inode_count, shared by hard links.
    pub inode_number: u32,
}

impl InodeHeader {
    pub const SIZE: usize = 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u16(out, self.inode_type);
        put_u16(out, self.permissions);
        put_u16(out, self.uid_idx);
        put_u16(out, self.gid_idx);
        put_u32(out, self.mtime);
        put_u32(out, self.inode_number);
    }

    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        Ok(InodeHeader {
            inode_type: c.u16()?,
            permissions: c.u16()?,
            uid_idx: c.u16()?,
            gid_idx: c.u16()?,
            mtime: c.u32()?,
            inode_number: c.u32()?,
        })
    }
}

/// Type 1: a directory whose listing is under 64 KiB, without index or xattrs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BasicDir {
    /// Listing's metadata block, relative to the directory table start.
    pub block: u32,
    /// Link count: 2 + number of subdirectories.
    pub nlink: u32,
    /// Listing length in bytes plus 3 (the kernel counts "." and "..").
    pub size: u16,
    /// Listing's offset in the decompressed block.
    pub offset: u16,
    /// Inode number of the parent (inode_count + 1 for the root).
    pub parent: u32,
}

/// Type 8: a directory with a long listing, a directory index or xattrs.
/// `index_count` [`DirIndex`] entries follow the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtDir {
    pub nlink: u32,
    /// Listing length in bytes plus 3.
    pub size: u32,
    /// Listing's metadata block, relative to the directory table start.
    pub block: u32,
    pub parent: u32,
    /// Number of directory index entries after the record.
    pub index_count: u16,
    /// Listing's offset in the decompressed block.
    pub offset: u16,
    /// Index into the xattr id table, or [`INVALID_XATTR`].
    pub xattr: u32,
}

/// Type 2: a regular file under 4 GiB, one link, no xattrs, not sparse.
/// Its block size words follow the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BasicFile {
    /// Absolute position of the first data block.
    pub blocks_start: u32,
    /// Fragment table index of the tail, or [`INVALID_FRAG`].
    pub fragment: u32,
    /// Offset of the tail in the decompressed fragment block.
    pub fragment_offset: u32,
    /// File size in bytes.
    pub size: u32,
}

/// Type 9: any regular file. Its block size words follow the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtFile {
    /// Absolute position of the first data block.
    pub blocks_start: u64,
    /// File size in bytes.
    pub size: u64,
    /// Bytes saved by sparse (all-zero, size word 0) blocks.
    pub sparse: u64,
    pub nlink: u32,
    /// Fragment table index of the tail, or [`INVALID_FRAG`].
    pub fragment: u32,
    /// Offset of the tail in the decompressed fragment block.
    pub fragment_offset: u32,
    /// Index into the xattr id table, or [`INVALID_XATTR`].
    pub xattr: u32,
}

/// Types 3 and 10: a symbolic link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symlink {
    pub nlink: u32,
    /// Target bytes (u32 length, then the bytes, no NUL).
    pub target: Vec<u8>,
    /// Extended form only: index into the xattr id table.
    pub xattr: Option<u32>,
}

/// Types 4, 5, 11, 12: a block or character device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    /// Block (4/11) rather than character (5/12) device.
    pub block: bool,
    pub nlink: u32,
    /// Device number in Linux `new_encode_dev` form ([`encode_dev`]).
    pub rdev: u32,
    /// Extended form only: index into the xattr id table.
    pub xattr: Option<u32>,
}

/// Types 6, 7, 13, 14: a fifo or a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipc {
    /// Socket (7/14) rather than fifo (6/13).
    pub socket: bool,
    pub nlink: u32,
    /// Extended form only: index into the xattr id table.
    pub xattr: Option<u32>,
}

/// The body after an [`InodeHeader`]; its variant decides the header's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InodeBody {
    BasicDir(BasicDir),
    ExtDir(ExtDir),
    BasicFile(BasicFile),
    ExtFile(ExtFile),
    Symlink(Symlink),
    Device(Device),
    Ipc(Ipc),
}

impl InodeBody {
    /// The `INODE_*` type this body is stored as.
    pub fn inode_type(&self) -> u16 {
        let ext = |basic: u16, xattr: Option<u32>| {
            if xattr.is_some() {
                basic + INODE_EXT_OFFSET
            } else {
                basic
            }
        };
        match self {
            InodeBody::BasicDir(_) => INODE_BASIC_DIR,
            InodeBody::ExtDir(_) => INODE_EXT_DIR,
            InodeBody::BasicFile(_) => INODE_BASIC_FILE,
            InodeBody::ExtFile(_) => INODE_EXT_FILE,
            InodeBody::Symlink(s) => ext(INODE_BASIC_SYMLINK, s.xattr),
            InodeBody::Device(d) if d.block => ext(INODE_BASIC_BLKDEV, d.xattr),
            InodeBody::Device(d) => ext(INODE_BASIC_CHRDEV, d.xattr),
            InodeBody::Ipc(i) if i.socket => ext(INODE_BASIC_SOCKET, i.xattr),
            InodeBody::Ipc(i) => ext(INODE_BASIC_FIFO, i.xattr),
        }
    }

    /// Appends the body (without the header, without a file's block list or
    /// a directory's index entries).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            InodeBody::BasicDir(d) => {
                put_u32(out, d.block);
                put_u32(out, d.nlink);
                put_u16(out, d.size);
                put_u16(out, d.offset);
                put_u32(out, d.parent);
            }
            InodeBody::ExtDir(d) => {
                put_u32(out, d.nlink);
                put_u32(out, d.size);
                put_u32(out, d.block);
                put_u32(out, d.parent);
                put_u16(out, d.index_count);
                put_u16(out, d.offset);
                put_u32(out, d.xattr);
            }
            InodeBody::BasicFile(f) => {
                put_u32(out, f.blocks_start);
                put_u32(out, f.fragment);
                put_u32(out, f.fragment_offset);
                put_u32(out, f.size);
            }
            InodeBody::ExtFile(f) => {
                put_u64(out, f.blocks_start);
                put_u64(out, f.size);
                put_u64(out, f.sparse);
                put_u32(out, f.nlink);
                put_u32(out, f.fragment);
                put_u32(out, f.fragment_offset);
                put_u32(out, f.xattr);
            }
            InodeBody::Symlink(s) => {
                put_u32(out, s.nlink);
                put_u32(out, s.target.len() as u32);
                out.extend_from_slice(&s.target);
                if let Some(x) = s.xattr {
                    put_u32(out, x);
                }
            }
            InodeBody::Device(d) => {
                put_u32(out, d.nlink);
                put_u32(out, d.rdev);
                if let Some(x) = d.xattr {
                    put_u32(out, x);
                }
            }
            InodeBody::Ipc(i) => {
                put_u32(out, i.nlink);
                if let Some(x) = i.xattr {
                    put_u32(out, x);
                }
            }
        }
    }

    /// Reads the body of an inode of type `ty` (from its header), stopping
    /// before a file's block list or a directory's index entries.
    /// `number` names the inode in errors.
    pub fn decode<I: Input>(c: &mut I, ty: u16, number: u32) -> Result<Self, I::Error> {
        let ext = ty > INODE_EXT_OFFSET;
        Ok(match ty {
            INODE_BASIC_DIR => InodeBody::BasicDir(BasicDir {
                block: c.u32()?,
                nlink: c.u32()?,
                size: c.u16()?,
                offset: c.u16()?,
                parent: c.u32()?,
            }),
            INODE_EXT_DIR => InodeBody::ExtDir(ExtDir {
                nlink: c.u32()?,
                size: c.u32()?,
                block: c.u32()?,
                parent: c.u32()?,
                index_count: c.u16()?,
                offset: c.u16()?,
                xattr: c.u32()?,
            }),
            INODE_BASIC_FILE => InodeBody::BasicFile(BasicFile {
                blocks_start: c.u32()?,
                fragment: c.u32()?,
                fragment_offset: c.u32()?,
                size: c.u32()?,
            }),
            INODE_EXT_FILE => InodeBody::ExtFile(ExtFile {
                blocks_start: c.u64()?,
                size: c.u64()?,
                sparse: c.u64()?,
                nlink: c.u32()?,
                fragment: c.u32()?,
                fragment_offset: c.u32()?,
                xattr: c.u32()?,
            }),
            INODE_BASIC_SYMLINK | INODE_EXT_SYMLINK => {
                let nlink = c.u32()?;
                let len = c.u32()? as usize;
                if len > MAX_SYMLINK_LEN {
                    return Err(FormatError::invalid(format!(
                        "symlink inode {number} claims a {len}-byte target"
                    ))
                    .into());
                }
                let target = c.bytes(len)?;
                let xattr = if ext { Some(c.u32()?) } else { None };
                InodeBody::Symlink(Symlink {
                    nlink,
                    target,
                    xattr,
                })
            }
            INODE_BASIC_BLKDEV | INODE_BASIC_CHRDEV | INODE_EXT_BLKDEV | INODE_EXT_CHRDEV => {
                InodeBody::Device(Device {
                    block: ty == INODE_BASIC_BLKDEV || ty == INODE_EXT_BLKDEV,
                    nlink: c.u32()?,
                    rdev: c.u32()?,
                    xattr: if ext { Some(c.u32()?) } else { None },
                })
            }
            INODE_BASIC_FIFO | INODE_BASIC_SOCKET | INODE_EXT_FIFO | INODE_EXT_SOCKET => {
                InodeBody::Ipc(Ipc {
                    socket: ty == INODE_BASIC_SOCKET || ty == INODE_EXT_SOCKET,
                    nlink: c.u32()?,
                    xattr: if ext { Some(c.u32()?) } else { None },
                })
            }
            other => {
                return Err(FormatError::invalid(format!(
                    "inode {number} has unknown type {other}"
                ))
                .into())
            }
        })
    }
}

/// One directory index entry of an extended directory inode: where a
/// listing header whose first name is `name` sits, so that a lookup can
/// skip to the metadata block holding a name. The name follows the 12
/// fixed bytes (stored length minus one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirIndex {
    /// Byte offset of the header from the listing start.
    pub index: u32,
    /// Position of the metadata block holding the header, relative to the
    /// directory table start.
    pub start_block: u32,
    /// Length of the name that follows (1..=256; stored minus one).
    pub name_len: usize,
}

impl DirIndex {
    pub const SIZE: usize = DIR_INDEX_SIZE;

    /// Appends the entry and its name (`name.len()` is the length stored).
    pub fn encode(index: u32, start_block: u32, name: &[u8], out: &mut Vec<u8>) {
        put_u32(out, index);
        put_u32(out, start_block);
        put_u32(out, name.len() as u32 - 1);
        out.extend_from_slice(name);
    }

    /// Reads the fixed part; the caller reads `name_len` name bytes next.
    pub fn decode<I: Input>(c: &mut I) -> Result<Self, I::Error> {
        let index = c.u32()?;
        let start_block = c.u32()?;
        let name_len = c.u32()? as usize + 1;
        if name_len > MAX_NAME_LEN {
            return Err(FormatError::invalid("directory index name too long").into());
        }
        Ok(DirIndex {
            index,
            start_block,
            name_len,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::SliceInput;

    fn round_trip(body: InodeBody) {
        let h = InodeHeader {
            inode_type: body.inode_type(),
            permissions: 0o755,
            uid_idx: 1,
            gid_idx: 2,
            mtime: 1_600_000_000,
            inode_number: 42,
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out.len(), InodeHeader::SIZE);
        body.encode(&mut out);
        out.extend_from_slice(&[0xAB; 3]); // what follows is not consumed
        let mut c = SliceInput::new(&out, "inode");
        let h2 = InodeHeader::decode(&mut c).unwrap();
        assert_eq!(h2, h);
        let b2 = InodeBody::decode(&mut c, h2.inode_type, 42).unwrap();
        assert_eq!(b2, body);
        assert_eq!(c.rest(), &[0xAB; 3]);
    }

    #[test]
    fn every_inode_kind_round_trips() {
        round_trip(InodeBody::BasicDir(BasicDir {
            block: 8,
            nlink: 3,
            size: 1000,
            offset: 17,
            parent: 9,
        }));
        round_trip(InodeBody::ExtDir(ExtDir {
            nlink: 3,
            size: 100_000,
            block: 8,
            parent: 9,
            index_count: 4,
            offset: 17,
            xattr: INVALID_XATTR,
        }));
        round_trip(InodeBody::BasicFile(BasicFile {
            blocks_start: 96,
            fragment: INVALID_FRAG,
            fragment_offset: 0,
            size: 5,
        }));
        round_trip(InodeBody::ExtFile(ExtFile {
            blocks_start: 5 << 32,
            size: 6 << 32,
            sparse: 131072,
            nlink: 2,
            fragment: 3,
            fragment_offset: 100,
            xattr: 0,
        }));
        for xattr in [None, Some(7)] {
            round_trip(InodeBody::Symlink(Symlink {
                nlink: 1,
                target: b"../target".to_vec(),
                xattr,
            }));
            for block in [false, true] {
                round_trip(InodeBody::Device(Device {
                    block,
                    nlink: 1,
                    rdev: encode_dev(8, 1),
                    xattr,
                }));
                round_trip(InodeBody::Ipc(Ipc {
                    socket: block,
                    nlink: 1,
                    xattr,
                }));
            }
        }
    }

    #[test]
    fn types_follow_the_body() {
        let s = |xattr| {
            InodeBody::Symlink(Symlink {
                nlink: 1,
                target: vec![b'x'],
                xattr,
            })
        };
        assert_eq!(s(None).inode_type(), INODE_BASIC_SYMLINK);
        assert_eq!(s(Some(0)).inode_type(), INODE_EXT_SYMLINK);
        let d = |block, xattr| {
            InodeBody::Device(Device {
                block,
                nlink: 1,
                rdev: 0,
                xattr,
            })
        };
        assert_eq!(d(true, None).inode_type(), INODE_BASIC_BLKDEV);
        assert_eq!(d(false, Some(0)).inode_type(), INODE_EXT_CHRDEV);
        let i = |socket, xattr| {
            InodeBody::Ipc(Ipc {
                socket,
                nlink: 1,
                xattr,
            })
        };
        assert_eq!(i(false, None).inode_type(), INODE_BASIC_FIFO);
        assert_eq!(i(true, Some(1)).inode_type(), INODE_EXT_SOCKET);
    }

    #[test]
    fn bad_types_and_lengths_are_errors() {
        let mut c = SliceInput::new(&[0; 64], "inode");
        assert_eq!(
            InodeBody::decode(&mut c, 15, 3),
            Err(FormatError::invalid("inode 3 has unknown type 15"))
        );
        let mut v = Vec::new();
        put_u32(&mut v, 1);
        put_u32(&mut v, MAX_SYMLINK_LEN as u32 + 1);
        let mut c = SliceInput::new(&v, "inode");
        assert!(InodeBody::decode(&mut c, INODE_BASIC_SYMLINK, 3).is_err());
        // A record cut short is a truncation, not a panic.
        let mut c = SliceInput::new(&[0; 10], "inode");
        assert_eq!(
            InodeBody::decode(&mut c, INODE_EXT_FILE, 3),
            Err(FormatError::Truncated("inode"))
        );
    }

    #[test]
    fn dir_index_round_trips() {
        let mut out = Vec::new();
        DirIndex::encode(8000, 3000, b"abc", &mut out);
        assert_eq!(out.len(), DirIndex::SIZE + 3);
        assert_eq!(&out[8..12], &2u32.to_le_bytes()); // stored minus one
        let mut c = SliceInput::new(&out, "index");
        let d = DirIndex::decode(&mut c).unwrap();
        assert_eq!((d.index, d.start_block, d.name_len), (8000, 3000, 3));
        assert_eq!(c.rest(), b"abc");
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
