//! Inode encoding. Basic inode types are used whenever every field fits and
//! nothing extra (xattrs, link counts for files, sparse bytes, a directory
//! index) needs storing; extended ones otherwise — the same choice mksquashfs
//! makes, so the kernel and unsquashfs see familiar images.

use crate::tree::Kind;
use packfs_format::squashfs::inode::{
    BasicDir, BasicFile, Device, DirIndex as IndexRecord, ExtDir, ExtFile, InodeBody, InodeHeader,
    Ipc, Symlink,
};
use packfs_format::squashfs::*;

/// The basic inode type of `kind`: what a directory entry records.
pub fn basic_type(kind: Kind) -> u16 {
    match kind {
        Kind::Dir => INODE_BASIC_DIR,
        Kind::File => INODE_BASIC_FILE,
        Kind::Symlink => INODE_BASIC_SYMLINK,
        Kind::BlockDev => INODE_BASIC_BLKDEV,
        Kind::CharDev => INODE_BASIC_CHRDEV,
        Kind::Fifo => INODE_BASIC_FIFO,
        Kind::Socket => INODE_BASIC_SOCKET,
    }
}

/// Fields every inode starts with.
pub struct Common {
    pub mode: u16,
    pub uid_idx: u16,
    pub gid_idx: u16,
    pub mtime: u32,
    pub number: u32,
}

/// Appends the header and body of an inode stored as `body`.
fn put(out: &mut Vec<u8>, c: &Common, body: &InodeBody) {
    InodeHeader {
        inode_type: body.inode_type(),
        permissions: c.mode,
        uid_idx: c.uid_idx,
        gid_idx: c.gid_idx,
        mtime: c.mtime,
        inode_number: c.number,
    }
    .encode(out);
    body.encode(out);
}

/// The xattr index as an extended-only field: `None` when there is none.
fn ext_xattr(xattr: u32) -> Option<u32> {
    (xattr != INVALID_XATTR).then_some(xattr)
}

/// One directory index entry as the writer plans it: where a header whose
/// first name is `name` sits, so lookups in big directories can skip ahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirIndex {
    /// Byte offset of the header from the listing start.
    pub index: u32,
    /// Position of the metadata block holding the header, relative to the
    /// directory table start.
    pub start_block: u32,
    pub name: Vec<u8>,
}

pub struct Dir<'a> {
    pub start_block: u32,
    pub offset: u16,
    /// Listing bytes + 3 (the kernel counts "." and "..").
    pub file_size: u32,
    pub nlink: u32,
    pub parent: u32,
    pub xattr: u32,
    pub index: &'a [DirIndex],
}

pub fn dir(out: &mut Vec<u8>, c: &Common, d: &Dir) {
    let basic = d.xattr == INVALID_XATTR && d.index.is_empty() && d.file_size <= u16::MAX as u32;
    if basic {
        let body = BasicDir {
            block: d.start_block,
            nlink: d.nlink,
            size: d.file_size as u16,
            offset: d.offset,
            parent: d.parent,
        };
        put(out, c, &InodeBody::BasicDir(body));
    } else {
        let body = ExtDir {
            nlink: d.nlink,
            size: d.file_size,
            block: d.start_block,
            parent: d.parent,
            index_count: d.index.len() as u16,
            offset: d.offset,
            xattr: d.xattr,
        };
        put(out, c, &InodeBody::ExtDir(body));
        for i in d.index {
            IndexRecord::encode(i.index, i.start_block, &i.name, out);
        }
    }
}

pub struct File<'a> {
    pub blocks_start: u64,
    pub size: u64,
    pub sparse: u64,
    pub nlink: u32,
    pub fragment: u32,
    pub frag_offset: u32,
    pub xattr: u32,
    pub block_sizes: &'a [u32],
}

pub fn file(out: &mut Vec<u8>, c: &Common, f: &File) {
    let basic = f.xattr == INVALID_XATTR
        && f.nlink == 1
        && f.sparse == 0
        && f.size <= u32::MAX as u64
        && f.blocks_start <= u32::MAX as u64;
    let body = if basic {
        InodeBody::BasicFile(BasicFile {
            blocks_start: f.blocks_start as u32,
            fragment: f.fragment,
            fragment_offset: f.frag_offset,
            size: f.size as u32,
        })
    } else {
        InodeBody::ExtFile(ExtFile {
            blocks_start: f.blocks_start,
            size: f.size,
            sparse: f.sparse,
            nlink: f.nlink,
            fragment: f.fragment,
            fragment_offset: f.frag_offset,
            xattr: f.xattr,
        })
    };
    put(out, c, &body);
    for &b in f.block_sizes {
        out.extend_from_slice(&b.to_le_bytes());
    }
}

pub fn symlink(out: &mut Vec<u8>, c: &Common, nlink: u32, target: &[u8], xattr: u32) {
    let body = Symlink {
        nlink,
        target: target.to_vec(),
        xattr: ext_xattr(xattr),
    };
    put(out, c, &InodeBody::Symlink(body));
}

/// Devices (`rdev` = Some) and fifos/sockets (`rdev` = None). `basic_type`
/// is the basic inode type.
pub fn special(
    out: &mut Vec<u8>,
    c: &Common,
    basic_type: u16,
    nlink: u32,
    rdev: Option<u32>,
    xattr: u32,
) {
    let xattr = ext_xattr(xattr);
    let body = match rdev {
        Some(rdev) => InodeBody::Device(Device {
            block: basic_type == INODE_BASIC_BLKDEV,
            nlink,
            rdev,
            xattr,
        }),
        None => InodeBody::Ipc(Ipc {
            socket: basic_type == INODE_BASIC_SOCKET,
            nlink,
            xattr,
        }),
    };
    put(out, c, &body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common() -> Common {
        Common {
            mode: 0o100644,
            uid_idx: 0,
            gid_idx: 1,
            mtime: 5,
            number: 9,
        }
    }

    #[test]
    fn file_inode_picks_basic_or_extended() {
        let mut f = File {
            blocks_start: 96,
            size: 10,
            sparse: 0,
            nlink: 1,
            fragment: 0,
            frag_offset: 4,
            xattr: INVALID_XATTR,
            block_sizes: &[],
        };
        let mut out = Vec::new();
        file(&mut out, &common(), &f);
        assert_eq!(out.len(), 32);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), INODE_BASIC_FILE);
        out.clear();
        f.size = 5 << 30;
        f.block_sizes = &[1, 2];
        file(&mut out, &common(), &f);
        assert_eq!(out.len(), 56 + 8);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), INODE_EXT_FILE);
    }

    #[test]
    fn dir_with_index_is_extended() {
        let idx = [DirIndex {
            index: 8000,
            start_block: 3000,
            name: b"abc".to_vec(),
        }];
        let d = Dir {
            start_block: 0,
            offset: 0,
            file_size: 9000,
            nlink: 2,
            parent: 1,
            xattr: INVALID_XATTR,
            index: &idx,
        };
        let mut out = Vec::new();
        dir(&mut out, &common(), &d);
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), INODE_EXT_DIR);
        assert_eq!(out.len(), 40 + 12 + 3);
        // size is stored minus one
        assert_eq!(&out[48..52], &2u32.to_le_bytes());
    }
}
