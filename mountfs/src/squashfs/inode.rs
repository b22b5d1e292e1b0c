//! Inodes as the reader uses them: the on-disk record (decoded by
//! `packfs_format::squashfs::inode`) with uid and gid resolved through the
//! id table and the position of the trailing lists (a file's block sizes, a
//! directory's index) remembered for later.

use super::blocks::Blocks;
use super::meta::MetaCursor;
use super::tables::Tables;
use crate::error::{FsError, Result};
use packfs_format::bytes::Input;
use packfs_format::squashfs::inode::{InodeBody, InodeHeader};
use packfs_format::squashfs::metadata::{block_count, split_ref};
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::{INVALID_FRAG, INVALID_XATTR, METADATA_SIZE};

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
    /// Bytes of the file in holes (size words of 0), as the extended inode
    /// records them; 0 for a basic inode.
    pub sparse: u64,
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

/// What decoding an inode needs besides the metadata cursor.
pub struct InodeContext<'a> {
    pub sb: &'a Superblock,
    pub tables: &'a Tables,
}

/// Decodes the inode at `inode_ref`. With `with_blocks`, a regular file's
/// block size list is loaded too (needed to read it, not to stat it).
pub fn read_inode(
    blocks: &Blocks,
    cx: &InodeContext<'_>,
    inode_ref: u64,
    with_blocks: bool,
) -> Result<Inode> {
    let (block, offset) = split_ref(inode_ref);
    let pos = cx.sb.inode_table_start + block;
    if pos >= cx.sb.directory_table_start {
        return Err(FsError::corrupt(format!(
            "inode reference {inode_ref:#x} points outside the inode table"
        )));
    }
    let mut c = MetaCursor::new(blocks, pos, offset)?;
    decode_inode(&mut c, cx, inode_ref, with_blocks)
}

/// Decodes the inode under the cursor (which ends just past it when
/// `with_blocks` is set, so the inode table can be walked in order).
pub fn decode_inode(
    c: &mut MetaCursor<'_>,
    cx: &InodeContext<'_>,
    inode_ref: u64,
    with_blocks: bool,
) -> Result<Inode> {
    let h = InodeHeader::decode(c)?;
    let uid = cx.tables.id(h.uid_idx)?;
    let gid = cx.tables.id(h.gid_idx)?;
    let body = InodeBody::decode(c, h.inode_type, h.inode_number)?;
    let (kind, nlink, xattr) = decode_kind(c, cx, body, with_blocks)?;
    Ok(Inode {
        inode_ref,
        number: h.inode_number,
        perm: h.permissions & 0o7777,
        uid,
        gid,
        mtime: h.mtime,
        nlink,
        xattr,
        kind,
    })
}

/// The kind of an inode from its decoded body, with its link count and
/// xattr index (1 and `INVALID_XATTR` for the basic types that record
/// neither). The cursor is just past the body, where a file's block size
/// list or a directory's index starts.
fn decode_kind(
    c: &mut MetaCursor<'_>,
    cx: &InodeContext<'_>,
    body: InodeBody,
    with_blocks: bool,
) -> Result<(InodeKind, u32, u32)> {
    let after = (c.pos, c.off);
    Ok(match body {
        InodeBody::BasicDir(d) => {
            let dir = DirInode {
                block: d.block,
                offset: d.offset,
                size: d.size as u32,
                parent: d.parent,
                index_count: 0,
                index_at: None,
            };
            (InodeKind::Dir(dir), d.nlink, INVALID_XATTR)
        }
        InodeBody::ExtDir(d) => {
            let dir = DirInode {
                block: d.block,
                offset: d.offset,
                size: d.size,
                parent: d.parent,
                index_count: d.index_count,
                index_at: (d.index_count > 0).then_some(after),
            };
            (InodeKind::Dir(dir), d.nlink, d.xattr)
        }
        InodeBody::BasicFile(b) => {
            let f = FileInode {
                blocks_start: b.blocks_start as u64,
                size: b.size as u64,
                fragment: b.fragment,
                fragment_offset: b.fragment_offset,
                block_sizes: Vec::new(),
                sizes_at: after,
                sparse: 0,
            };
            let f = with_block_sizes(c, cx, f, with_blocks)?;
            (InodeKind::File(f), 1, INVALID_XATTR)
        }
        InodeBody::ExtFile(e) => {
            let f = FileInode {
                blocks_start: e.blocks_start,
                size: e.size,
                fragment: e.fragment,
                fragment_offset: e.fragment_offset,
                block_sizes: Vec::new(),
                sizes_at: after,
                sparse: e.sparse,
            };
            let f = with_block_sizes(c, cx, f, with_blocks)?;
            (InodeKind::File(f), e.nlink, e.xattr)
        }
        InodeBody::Symlink(s) => (
            InodeKind::Symlink(s.target),
            s.nlink,
            s.xattr.unwrap_or(INVALID_XATTR),
        ),
        InodeBody::Device(d) => {
            let kind = match d.block {
                true => InodeKind::BlockDev(d.rdev),
                false => InodeKind::CharDev(d.rdev),
            };
            (kind, d.nlink, d.xattr.unwrap_or(INVALID_XATTR))
        }
        InodeBody::Ipc(i) => {
            let kind = match i.socket {
                true => InodeKind::Socket,
                false => InodeKind::Fifo,
            };
            (kind, i.nlink, i.xattr.unwrap_or(INVALID_XATTR))
        }
    })
}

/// A file inode whose block count is checked against the inode table
/// ([`full_block_count`]), with its block size list read from the cursor
/// when `with_blocks`.
fn with_block_sizes(
    c: &mut MetaCursor<'_>,
    cx: &InodeContext<'_>,
    mut f: FileInode,
    with_blocks: bool,
) -> Result<FileInode> {
    let n = full_block_count(cx, &f)?;
    if with_blocks {
        f.block_sizes = read_block_sizes(c, n)?;
    }
    Ok(f)
}

/// Reads `n` block size words from the cursor.
///
/// `n` comes from the file size, which a corrupt inode sets at will: the
/// bound of [`full_block_count`] is the image length, so a 64 GiB image
/// admits a claim of 16 Gi words, and allocating that up front aborted the
/// process (tests/corrupt_corpus.rs, `block_list_of_a_huge_claimed_size_*`).
/// So the list is read in steps of at most 4 KiB, growing as words are
/// actually found in the inode table: a bogus claim fails where the
/// metadata runs out, having held no more than what it read.
fn read_block_sizes(c: &mut MetaCursor<'_>, n: usize) -> Result<Vec<u32>> {
    const STEP: usize = 1024;
    let mut out = Vec::with_capacity(n.min(STEP));
    let mut buf = [0u8; STEP * 4];
    let mut left = n;
    while left > 0 {
        let k = left.min(STEP);
        c.read_into(&mut buf[..k * 4])?;
        out.extend(
            buf[..k * 4]
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        left -= k;
    }
    Ok(out)
}

/// Number of full (non-fragment) blocks of a file, bounded by how many
/// size words the inode table could hold, so that a corrupt size is an
/// error at once. The bound is loose on purpose: the list sits in
/// compressed metadata, where a sparse file's run of zero words takes
/// almost nothing (a 1 GiB hole in 4 KiB blocks lists 1 MiB of words in a
/// few hundred bytes). A metadata block holds at most 8 KiB and takes at
/// least its 2-byte header, so the table holds at most `len / 2 * 8 KiB`
/// bytes. Memory stays bounded anyway: `read_block_sizes` grows its list
/// as words are actually read.
pub fn full_block_count(cx: &InodeContext<'_>, f: &FileInode) -> Result<usize> {
    let n = block_count(f.size, cx.sb.block_size, f.has_fragment());
    let table = cx
        .sb
        .directory_table_start
        .saturating_sub(cx.sb.inode_table_start);
    if n.saturating_mul(4) > (table / 2).saturating_mul(METADATA_SIZE as u64) {
        return Err(FsError::corrupt(format!(
            "file of {} bytes needs {n} blocks, more than the inode table can list",
            f.size
        )));
    }
    Ok(n as usize)
}
