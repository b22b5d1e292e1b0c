//! Decoding inodes from the inode table.
//!
//! Every inode starts with a 16-byte header (type, permissions, uid index,
//! gid index, mtime, inode number) followed by a type-specific body:
//!
//! | type | body |
//! |---|---|
//! | 1 dir | u32 block, u32 nlink, u16 size, u16 offset, u32 parent |
//! | 8 ext dir | u32 nlink, u32 size, u32 block, u32 parent, u16 index count, u16 offset, u32 xattr, index entries |
//! | 2 file | u32 blocks start, u32 fragment, u32 fragment offset, u32 size, u32 block sizes[] |
//! | 9 ext file | u64 blocks start, u64 size, u64 sparse, u32 nlink, u32 fragment, u32 fragment offset, u32 xattr, u32 block sizes[] |
//! | 3/10 symlink | u32 nlink, u32 target size, target, (ext: u32 xattr) |
//! | 4,5/11,12 device | u32 nlink, u32 device, (ext: u32 xattr) |
//! | 6,7/13,14 fifo, socket | u32 nlink, (ext: u32 xattr) |

use super::format::*;
use super::meta::MetaCursor;
use super::reader::SquashFs;
use crate::error::{FsError, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// Metadata reference of this inode in the inode table.
    pub inode_ref: u64,
    /// SquashFS inode number (1..=inode_count; shared by hard links).
    pub number: u32,
    /// Permission bits including suid/sgid/sticky (no file type bits).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: u32,
    pub nlink: u32,
    /// Index into the xattr id table, or `INVALID_XATTR`.
    pub xattr: u32,
    pub kind: InodeKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InodeKind {
    Dir(DirInode),
    File(FileInode),
    Symlink(Vec<u8>),
    BlockDev(u32),
    CharDev(u32),
    Fifo,
    Socket,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirInode {
    /// Listing position: metadata block relative to the directory table, and offset.
    pub block: u32,
    pub offset: u16,
    /// Listing length in bytes plus 3 (the on-disk convention).
    pub size: u32,
    pub parent: u32,
    pub index_count: u16,
    /// Where the directory index entries start (absolute block pos, offset), if any.
    pub index_at: Option<(u64, usize)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInode {
    /// Absolute position of the first data block.
    pub blocks_start: u64,
    pub size: u64,
    pub fragment: u32,
    pub fragment_offset: u32,
    /// Size words of the full blocks (empty unless loaded with blocks).
    pub block_sizes: Vec<u32>,
    /// Where the block size list starts (absolute block pos, offset).
    pub sizes_at: (u64, usize),
}

impl FileInode {
    pub fn has_fragment(&self) -> bool {
        self.fragment != INVALID_FRAG
    }
}

impl Inode {
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, InodeKind::Dir(_))
    }

    /// Size as `stat` reports it.
    pub fn size(&self) -> u64 {
        match &self.kind {
            InodeKind::Dir(d) => d.size as u64,
            InodeKind::File(f) => f.size,
            InodeKind::Symlink(t) => t.len() as u64,
            _ => 0,
        }
    }

    pub fn rdev(&self) -> u32 {
        match self.kind {
            InodeKind::BlockDev(d) | InodeKind::CharDev(d) => d,
            _ => 0,
        }
    }
}

impl SquashFs {
    /// Decodes the inode at `inode_ref`. With `with_blocks`, a regular file's
    /// block size list is loaded too (needed to read it, not to stat it).
    pub fn inode(&self, inode_ref: u64, with_blocks: bool) -> Result<Inode> {
        let (block, offset) = split_ref(inode_ref);
        let pos = self.sb.inode_table_start + block;
        if pos >= self.sb.directory_table_start {
            return Err(FsError::corrupt(format!(
                "inode reference {inode_ref:#x} points outside the inode table"
            )));
        }
        let mut c = self.meta_cursor(pos, offset)?;
        self.decode_inode(&mut c, inode_ref, with_blocks)
    }

    pub(crate) fn decode_inode(
        &self,
        c: &mut MetaCursor<'_>,
        inode_ref: u64,
        with_blocks: bool,
    ) -> Result<Inode> {
        let ty = c.u16()?;
        let perm = c.u16()? & 0o7777;
        let uid = self.id(c.u16()?)?;
        let gid = self.id(c.u16()?)?;
        let mtime = c.u32()?;
        let number = c.u32()?;
        let mut nlink = 1;
        let mut xattr = INVALID_XATTR;
        let kind = match ty {
            INODE_BASIC_DIR => {
                let block = c.u32()?;
                nlink = c.u32()?;
                let size = c.u16()? as u32;
                let offset = c.u16()?;
                let parent = c.u32()?;
                InodeKind::Dir(DirInode {
                    block,
                    offset,
                    size,
                    parent,
                    index_count: 0,
                    index_at: None,
                })
            }
            INODE_EXT_DIR => {
                nlink = c.u32()?;
                let size = c.u32()?;
                let block = c.u32()?;
                let parent = c.u32()?;
                let index_count = c.u16()?;
                let offset = c.u16()?;
                xattr = c.u32()?;
                InodeKind::Dir(DirInode {
                    block,
                    offset,
                    size,
                    parent,
                    index_count,
                    index_at: (index_count > 0).then_some((c.pos, c.off)),
                })
            }
            INODE_BASIC_FILE | INODE_EXT_FILE => {
                let (blocks_start, size, fragment, fragment_offset);
                if ty == INODE_BASIC_FILE {
                    blocks_start = c.u32()? as u64;
                    fragment = c.u32()?;
                    fragment_offset = c.u32()?;
                    size = c.u32()? as u64;
                } else {
                    blocks_start = c.u64()?;
                    size = c.u64()?;
                    let _sparse = c.u64()?;
                    nlink = c.u32()?;
                    fragment = c.u32()?;
                    fragment_offset = c.u32()?;
                    xattr = c.u32()?;
                }
                let mut f = FileInode {
                    blocks_start,
                    size,
                    fragment,
                    fragment_offset,
                    block_sizes: Vec::new(),
                    sizes_at: (c.pos, c.off),
                };
                let n = self.full_block_count(&f)?;
                if with_blocks {
                    let raw = c.bytes(n * 4)?;
                    f.block_sizes = raw
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect();
                }
                InodeKind::File(f)
            }
            INODE_BASIC_SYMLINK | INODE_EXT_SYMLINK => {
                nlink = c.u32()?;
                let len = c.u32()? as usize;
                if len > 65536 {
                    return Err(FsError::corrupt(format!(
                        "symlink inode {number} claims a {len}-byte target"
                    )));
                }
                let target = c.bytes(len)?;
                if ty == INODE_EXT_SYMLINK {
                    xattr = c.u32()?;
                }
                InodeKind::Symlink(target)
            }
            INODE_BASIC_BLKDEV | INODE_BASIC_CHRDEV | INODE_EXT_BLKDEV | INODE_EXT_CHRDEV => {
                nlink = c.u32()?;
                let dev = c.u32()?;
                if ty > INODE_EXT_OFFSET {
                    xattr = c.u32()?;
                }
                if ty == INODE_BASIC_BLKDEV || ty == INODE_EXT_BLKDEV {
                    InodeKind::BlockDev(dev)
                } else {
                    InodeKind::CharDev(dev)
                }
            }
            INODE_BASIC_FIFO | INODE_BASIC_SOCKET | INODE_EXT_FIFO | INODE_EXT_SOCKET => {
                nlink = c.u32()?;
                if ty > INODE_EXT_OFFSET {
                    xattr = c.u32()?;
                }
                if ty == INODE_BASIC_FIFO || ty == INODE_EXT_FIFO {
                    InodeKind::Fifo
                } else {
                    InodeKind::Socket
                }
            }
            other => {
                return Err(FsError::corrupt(format!(
                    "inode at {inode_ref:#x} has unknown type {other}"
                )))
            }
        };
        Ok(Inode {
            inode_ref,
            number,
            perm,
            uid,
            gid,
            mtime,
            nlink,
            xattr,
            kind,
        })
    }

    /// Number of full (non-fragment) blocks of a file, validated against the
    /// image size so a corrupt size cannot make us allocate gigabytes.
    pub(crate) fn full_block_count(&self, f: &FileInode) -> Result<usize> {
        let n = block_count(f.size, self.sb.block_size, f.has_fragment());
        // Every block takes at least 4 bytes of block list in the inode table.
        if n.saturating_mul(4) > self.src.len() {
            return Err(FsError::corrupt(format!(
                "file of {} bytes needs {n} blocks, more than the image can list",
                f.size
            )));
        }
        Ok(n as usize)
    }
}
