//! [`Image`] for SquashFS: node ids are inode references (+2, so that no
//! reference collides with FUSE's reserved ids 0 and 1), the root is node 1.
//! No table maps one to the other, so mounting costs nothing per file and the
//! kernel may forget and re-look-up nodes freely.

use super::dir::DirPos;
use super::inode::{Inode, InodeKind};
use super::reader::{OpenFile, SquashFs};
use crate::error::{FsError, Result};
use crate::image::{clamp_len, Attr, DirEntry, Extent, FileKind, Image, NodeId, StatFs, ROOT};
use packfs_format::squashfs::*;

impl SquashFs {
    fn node_of(&self, inode_ref: u64) -> NodeId {
        if inode_ref == self.root_ref() {
            ROOT
        } else {
            inode_ref + 2
        }
    }

    fn ref_of(&self, node: NodeId) -> Result<u64> {
        match node {
            ROOT => Ok(self.root_ref()),
            0 => Err(FsError::NotFound),
            n => Ok(n - 2),
        }
    }

    fn node_inode(&self, node: NodeId) -> Result<Inode> {
        self.inode(self.ref_of(node)?, false)
    }

    /// The inode's attributes. `blocks` is what the kernel's driver shows
    /// (fs/squashfs/inode.c): a regular file's size less its holes in
    /// 512-byte units, 0 for other kinds, plus one unit per started 512
    /// bytes of xattrs (the xattr id entry's `size`).
    fn attr_of(&self, inode: &Inode) -> Result<Attr> {
        let data = match &inode.kind {
            InodeKind::File(f) => f.size.saturating_sub(f.sparse).div_ceil(512),
            _ => 0,
        };
        let xattrs = self
            .xattr_bytes(inode.xattr)?
            .map_or(0, |n| u64::from(n).div_ceil(512).max(1));
        Ok(Attr {
            node: self.node_of(inode.inode_ref),
            ino: inode.number as u64,
            kind: kind_of(&inode.kind),
            perm: inode.perm,
            nlink: inode.nlink,
            uid: inode.uid,
            gid: inode.gid,
            size: inode.size(),
            mtime: inode.mtime as i64,
            rdev: inode.rdev(),
            blocks: data + xattrs,
        })
    }
}

fn kind_of(k: &InodeKind) -> FileKind {
    match k {
        InodeKind::Dir(_) => FileKind::Dir,
        InodeKind::File(_) => FileKind::File,
        InodeKind::Symlink(_) => FileKind::Symlink,
        InodeKind::BlockDev(_) => FileKind::BlockDevice,
        InodeKind::CharDev(_) => FileKind::CharDevice,
        InodeKind::Fifo => FileKind::Fifo,
        InodeKind::Socket => FileKind::Socket,
    }
}

fn kind_of_basic(ty: u16) -> Result<FileKind> {
    Ok(match ty {
        INODE_BASIC_DIR => FileKind::Dir,
        INODE_BASIC_FILE => FileKind::File,
        INODE_BASIC_SYMLINK => FileKind::Symlink,
        INODE_BASIC_BLKDEV => FileKind::BlockDevice,
        INODE_BASIC_CHRDEV => FileKind::CharDevice,
        INODE_BASIC_FIFO => FileKind::Fifo,
        INODE_BASIC_SOCKET => FileKind::Socket,
        t => {
            return Err(FsError::corrupt(format!(
                "directory entry of unknown type {t}"
            )))
        }
    })
}

impl Image for SquashFs {
    type Handle = OpenFile;

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        self.attr_of(&self.node_inode(node)?)
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Attr> {
        let p = self.node_inode(parent)?;
        let InodeKind::Dir(d) = &p.kind else {
            return Err(FsError::NotDir);
        };
        if name.len() > packfs_format::squashfs::MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        let e = self.lookup_raw(d, name)?.ok_or(FsError::NotFound)?;
        let inode = self.inode(e.inode_ref, false)?;
        self.attr_of(&inode)
    }

    fn readdir(
        &self,
        dir: NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let inode = self.node_inode(dir)?;
        let InodeKind::Dir(d) = &inode.kind else {
            return Err(FsError::NotDir);
        };
        for e in self.read_dir(d, DirPos::from_cookie(cookie))? {
            let e = e?;
            let entry = DirEntry {
                node: self.node_of(e.inode_ref),
                ino: e.inode_number as u64,
                kind: kind_of_basic(e.kind)?,
                cookie: e.next.to_cookie(),
                name: e.name,
            };
            if !sink(entry) {
                break;
            }
        }
        Ok(())
    }

    fn open(&self, node: NodeId) -> Result<OpenFile> {
        self.open_file(self.ref_of(node)?)
    }

    fn read(&self, h: &OpenFile, offset: u64, size: u32) -> Result<Vec<u8>> {
        SquashFs::read(self, h, offset, size as usize)
    }

    fn prefetch(&self, h: &OpenFile, offset: u64, len: u64) {
        let bs = self.sb.block_size as u64;
        let first = offset / bs;
        let last = (offset + len).div_ceil(bs);
        SquashFs::prefetch(self, h, first as usize, (last - first) as usize);
    }

    fn shared_unit(&self, h: &OpenFile) -> Option<u64> {
        let f = h.file();
        f.has_fragment().then_some(f.fragment as u64)
    }

    fn prefetch_unit(&self, unit: u64) {
        if let Ok(idx) = u32::try_from(unit) {
            self.prefetch_fragment(idx);
        }
    }

    fn will_read(&self, span: Extent) {
        if span.part == 0 {
            self.source().will_read(span.offset, clamp_len(span.len));
        }
    }

    fn extent(&self, node: NodeId) -> Result<Extent> {
        let inode = self.inode(self.ref_of(node)?, true)?;
        let f = match &inode.kind {
            InodeKind::File(f) => f,
            InodeKind::Dir(_) => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        };
        let stored: u64 = f
            .block_sizes
            .iter()
            .map(|&w| packfs_format::squashfs::metadata::data_stored_len(w) as u64)
            .sum();
        let bs = self.sb.block_size as u64;
        let tail = f.size - (f.block_sizes.len() as u64 * bs).min(f.size);
        let offset = if f.block_sizes.is_empty() && f.has_fragment() {
            self.fragment_entry(f.fragment)?.0
        } else {
            f.blocks_start
        };
        Ok(Extent {
            part: 0,
            offset,
            len: stored + if f.has_fragment() { tail } else { 0 },
        })
    }

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        match self.node_inode(node)?.kind {
            InodeKind::Symlink(t) => Ok(t),
            _ => Err(FsError::NotSymlink),
        }
    }

    fn xattrs(&self, node: NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let inode = self.node_inode(node)?;
        SquashFs::xattrs(self, inode.xattr)
    }

    fn statfs(&self) -> StatFs {
        StatFs {
            blocks: self.sb.bytes_used.div_ceil(self.sb.block_size as u64),
            files: self.sb.inode_count as u64,
            block_size: self.sb.block_size,
            name_max: MAX_NAME_LEN as u32,
        }
    }

    fn block_size(&self) -> u32 {
        self.sb.block_size
    }

    fn parent_ino(&self, dir: NodeId) -> Result<u64> {
        match self.node_inode(dir)?.kind {
            InodeKind::Dir(d) => Ok(d.parent as u64),
            _ => Err(FsError::NotDir),
        }
    }
}
