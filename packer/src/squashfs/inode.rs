//! Inode encoding. Basic inode types are used whenever every field fits and
//! nothing extra (xattrs, link counts for files, sparse bytes, a directory
//! index) needs storing; extended ones otherwise — the same choice mksquashfs
//! makes, so the kernel and unsquashfs see familiar images.

use mountfs::squashfs::format::*;

/// Fields every inode starts with.
pub struct Common {
    pub mode: u16,
    pub uid_idx: u16,
    pub gid_idx: u16,
    pub mtime: u32,
    pub number: u32,
}

fn header(out: &mut Vec<u8>, ty: u16, c: &Common) {
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&c.mode.to_le_bytes());
    out.extend_from_slice(&c.uid_idx.to_le_bytes());
    out.extend_from_slice(&c.gid_idx.to_le_bytes());
    out.extend_from_slice(&c.mtime.to_le_bytes());
    out.extend_from_slice(&c.number.to_le_bytes());
}

fn u16le(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn u32le(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn u64le(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// One directory index entry: where a header whose first name is `name`
/// sits, so lookups in big directories can skip ahead.
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
        header(out, INODE_BASIC_DIR, c);
        u32le(out, d.start_block);
        u32le(out, d.nlink);
        u16le(out, d.file_size as u16);
        u16le(out, d.offset);
        u32le(out, d.parent);
    } else {
        header(out, INODE_EXT_DIR, c);
        u32le(out, d.nlink);
        u32le(out, d.file_size);
        u32le(out, d.start_block);
        u32le(out, d.parent);
        u16le(out, d.index.len() as u16);
        u16le(out, d.offset);
        u32le(out, d.xattr);
        for i in d.index {
            u32le(out, i.index);
            u32le(out, i.start_block);
            u32le(out, i.name.len() as u32 - 1);
            out.extend_from_slice(&i.name);
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
    if basic {
        header(out, INODE_BASIC_FILE, c);
        u32le(out, f.blocks_start as u32);
        u32le(out, f.fragment);
        u32le(out, f.frag_offset);
        u32le(out, f.size as u32);
    } else {
        header(out, INODE_EXT_FILE, c);
        u64le(out, f.blocks_start);
        u64le(out, f.size);
        u64le(out, f.sparse);
        u32le(out, f.nlink);
        u32le(out, f.fragment);
        u32le(out, f.frag_offset);
        u32le(out, f.xattr);
    }
    for &b in f.block_sizes {
        u32le(out, b);
    }
}

pub fn symlink(out: &mut Vec<u8>, c: &Common, nlink: u32, target: &[u8], xattr: u32) {
    let ext = xattr != INVALID_XATTR;
    header(
        out,
        if ext {
            INODE_EXT_SYMLINK
        } else {
            INODE_BASIC_SYMLINK
        },
        c,
    );
    u32le(out, nlink);
    u32le(out, target.len() as u32);
    out.extend_from_slice(target);
    if ext {
        u32le(out, xattr);
    }
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
    let ext = xattr != INVALID_XATTR;
    header(
        out,
        if ext {
            basic_type + INODE_EXT_OFFSET
        } else {
            basic_type
        },
        c,
    );
    u32le(out, nlink);
    if let Some(r) = rdev {
        u32le(out, r);
    }
    if ext {
        u32le(out, xattr);
    }
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
