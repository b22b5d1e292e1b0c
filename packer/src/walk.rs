//! Scanning the source tree into a compact in-memory description.
//!
//! Memory is the constraint (millions of entries): names live in one byte
//! arena, entries and inodes are small fixed-size structs, and the children of
//! a directory are contiguous in [`Tree::nodes`], sorted by name bytes, so a
//! directory only stores a range.

use crate::xattrs::{self, XattrSets};
use crate::{PackError, PackOptions};
use globset::{Glob, GlobSet, GlobSetBuilder};
use mountfs::squashfs::format::{encode_dev, INVALID_XATTR, MAX_NAME_LEN};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    BlockDev,
    CharDev,
    Fifo,
    Socket,
}

/// A directory entry. Node 0 is the root (its own parent, empty name).
#[derive(Clone, Debug)]
pub struct Node {
    pub parent: u32,
    pub inode: u32,
    name_off: u64,
    name_len: u16,
    /// Directories only: children are `first_child..first_child + child_count`.
    pub first_child: u32,
    pub child_count: u32,
}

/// An inode; hard links make several nodes share one.
#[derive(Clone, Debug)]
pub struct Inode {
    pub kind: Kind,
    /// Permission bits incl. suid/sgid/sticky (`st_mode & 0o7777`). The type
    /// comes from the inode type; mksquashfs stores only these bits and
    /// recent kernels reject inodes whose mode carries type bits.
    pub mode: u16,
    /// Indexes into [`Tree::ids`].
    pub uid_idx: u16,
    pub gid_idx: u16,
    pub mtime: u32,
    /// Files: size in bytes. Symlinks: target length.
    pub size: u64,
    /// Devices: `encode_dev(major, minor)`.
    pub rdev: u32,
    /// Links inside the image (dirs: 2 + subdirectories).
    pub nlink: u32,
    /// Index into [`Tree::xattrs`] or `INVALID_XATTR`.
    pub xattr: u32,
    /// First node naming this inode, to rebuild its source path.
    pub node: u32,
    /// Symlinks: arena offset of the target.
    pub target_off: u64,
    /// Files with fewer allocated blocks than their size: worth probing for holes.
    pub maybe_sparse: bool,
}

pub struct Tree {
    pub root: PathBuf,
    pub nodes: Vec<Node>,
    pub inodes: Vec<Inode>,
    arena: Vec<u8>,
    /// uid/gid values in first-seen order.
    pub ids: Vec<u32>,
    pub xattrs: XattrSets,
}

impl Tree {
    pub fn name(&self, node: u32) -> &[u8] {
        let n = &self.nodes[node as usize];
        &self.arena[n.name_off as usize..n.name_off as usize + n.name_len as usize]
    }

    pub fn children(&self, node: u32) -> std::ops::Range<u32> {
        let n = &self.nodes[node as usize];
        n.first_child..n.first_child + n.child_count
    }

    pub fn symlink_target(&self, ino: u32) -> &[u8] {
        let i = &self.inodes[ino as usize];
        &self.arena[i.target_off as usize..(i.target_off + i.size) as usize]
    }

    /// Path relative to the source root.
    pub fn rel_path(&self, mut node: u32) -> PathBuf {
        let mut parts = Vec::new();
        while node != 0 {
            parts.push(node);
            node = self.nodes[node as usize].parent;
        }
        let mut p = PathBuf::new();
        for n in parts.into_iter().rev() {
            p.push(OsStr::from_bytes(self.name(n)));
        }
        p
    }

    pub fn source_path(&self, node: u32) -> PathBuf {
        self.root.join(self.rel_path(node))
    }

    /// Nodes in post-order: every directory after all of its descendants,
    /// siblings in name order. This is the order inodes are numbered and
    /// written in, so a listing always knows its children's inode refs.
    pub fn post_order(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.nodes.len());
        // (node, next child to visit)
        let mut stack: Vec<(u32, u32)> = vec![(0, self.nodes[0].first_child)];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let end = self.children(node).end;
            if self.inodes[self.nodes[node as usize].inode as usize].kind == Kind::Dir
                && *next < end
            {
                let child = *next;
                *next += 1;
                stack.push((child, self.nodes[child as usize].first_child));
            } else {
                out.push(node);
                stack.pop();
            }
        }
        out
    }

    /// Regular-file inodes in depth-first pre-order (name order), each once:
    /// the order their data is written in.
    pub fn files_in_data_order(&self) -> Vec<u32> {
        let mut seen = vec![false; self.inodes.len()];
        let mut out = Vec::new();
        let mut stack = vec![0u32];
        while let Some(node) = stack.pop() {
            let ino = self.nodes[node as usize].inode;
            match self.inodes[ino as usize].kind {
                Kind::Dir => stack.extend(self.children(node).rev()),
                Kind::File if !seen[ino as usize] => {
                    seen[ino as usize] = true;
                    out.push(ino);
                }
                _ => {}
            }
        }
        out
    }
}

struct Walker<'a> {
    opts: &'a PackOptions,
    excludes: GlobSet,
    tree: Tree,
    id_index: HashMap<u32, u16>,
    /// (dev, ino) of multiply-linked non-directories already seen.
    links: HashMap<(u64, u64), u32>,
}

fn build_excludes(patterns: &[String]) -> Result<GlobSet, PackError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = Glob::new(p)
            .map_err(|e| PackError::InvalidOption(format!("exclude pattern {p:?}: {e}")))?;
        b.add(g);
    }
    b.build()
        .map_err(|e| PackError::InvalidOption(format!("exclude patterns: {e}")))
}

/// Scans `root` (lstat only, never following symlinks below the root).
pub fn walk(root: &Path, opts: &PackOptions) -> Result<Tree, PackError> {
    let mut w = Walker {
        opts,
        excludes: build_excludes(&opts.excludes)?,
        tree: Tree {
            root: root.to_path_buf(),
            nodes: Vec::new(),
            inodes: Vec::new(),
            arena: Vec::new(),
            ids: Vec::new(),
            xattrs: XattrSets::default(),
        },
        id_index: HashMap::new(),
        links: HashMap::new(),
    };
    // The root's own metadata (following a symlink given as SRC) is the root inode.
    let meta = fs::metadata(root).map_err(PackError::io(root))?;
    w.tree.nodes.push(Node {
        parent: 0,
        inode: 0,
        name_off: 0,
        name_len: 0,
        first_child: 0,
        child_count: 0,
    });
    let ino = w.add_inode(root, &meta, 0)?;
    w.tree.nodes[0].inode = ino;

    // Breadth-first: appending a directory's sorted children in one go keeps
    // them contiguous.
    let mut next = 0usize;
    while next < w.tree.nodes.len() {
        let node = next as u32;
        next += 1;
        let ino = w.tree.nodes[node as usize].inode;
        if w.tree.inodes[ino as usize].kind != Kind::Dir {
            continue;
        }
        if node & 1023 == 0 && cancelled(opts) {
            return Err(PackError::Interrupted);
        }
        w.read_dir(node)?;
    }
    // Directory link counts: 2 + subdirectories.
    for n in 0..w.tree.nodes.len() {
        let node = &w.tree.nodes[n];
        let ino = node.inode as usize;
        if w.tree.inodes[ino].kind == Kind::Dir {
            let subdirs = w
                .tree
                .children(n as u32)
                .filter(|&c| {
                    w.tree.inodes[w.tree.nodes[c as usize].inode as usize].kind == Kind::Dir
                })
                .count() as u32;
            w.tree.inodes[ino].nlink = 2 + subdirs;
        }
    }
    Ok(w.tree)
}

pub fn cancelled(opts: &PackOptions) -> bool {
    opts.cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
}

impl Walker<'_> {
    fn read_dir(&mut self, node: u32) -> Result<(), PackError> {
        let rel = self.tree.rel_path(node);
        let dir = self.tree.root.join(&rel);
        let rd = fs::read_dir(&dir).map_err(PackError::io(&dir))?;
        let mut entries = Vec::new();
        for e in rd {
            let e = e.map_err(PackError::io(&dir))?;
            let name = e.file_name();
            let child_rel = rel.join(&name);
            if self.excludes.is_match(&child_rel) || self.excludes.is_match(&name) {
                log::debug!("excluded {}", child_rel.display());
                continue;
            }
            if name.as_bytes().len() > MAX_NAME_LEN {
                return Err(PackError::NameTooLong {
                    path: dir.join(&name),
                });
            }
            // DirEntry::metadata is fstatat(AT_SYMLINK_NOFOLLOW): an lstat.
            let meta = e.metadata().map_err(PackError::io(dir.join(&name)))?;
            entries.push((name, meta));
        }
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let first = self.tree.nodes.len() as u32;
        self.tree.nodes[node as usize].first_child = first;
        self.tree.nodes[node as usize].child_count = entries.len() as u32;
        for (name, meta) in entries {
            let idx = self.tree.nodes.len() as u32;
            let name_off = self.tree.arena.len() as u64;
            self.tree.arena.extend_from_slice(name.as_bytes());
            self.tree.nodes.push(Node {
                parent: node,
                inode: 0,
                name_off,
                name_len: name.as_bytes().len() as u16,
                first_child: 0,
                child_count: 0,
            });
            let path = dir.join(&name);
            let key = (meta.dev(), meta.ino());
            let shared = (!meta.is_dir() && meta.nlink() > 1)
                .then(|| self.links.get(&key).copied())
                .flatten();
            let ino = match shared {
                Some(ino) => {
                    self.tree.inodes[ino as usize].nlink += 1;
                    ino
                }
                None => {
                    let ino = self.add_inode(&path, &meta, idx)?;
                    if !meta.is_dir() && meta.nlink() > 1 {
                        self.links.insert(key, ino);
                    }
                    ino
                }
            };
            self.tree.nodes[idx as usize].inode = ino;
        }
        Ok(())
    }

    fn id(&mut self, id: u32, path: &Path) -> Result<u16, PackError> {
        if let Some(&i) = self.id_index.get(&id) {
            return Ok(i);
        }
        // id_count is a u16 in the superblock.
        if self.tree.ids.len() >= u16::MAX as usize {
            return Err(PackError::TooManyIds { path: path.into() });
        }
        let i = self.tree.ids.len() as u16;
        self.tree.ids.push(id);
        self.id_index.insert(id, i);
        Ok(i)
    }

    fn add_inode(&mut self, path: &Path, meta: &fs::Metadata, node: u32) -> Result<u32, PackError> {
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_block_device() {
            Kind::BlockDev
        } else if ft.is_char_device() {
            Kind::CharDev
        } else if ft.is_fifo() {
            Kind::Fifo
        } else {
            Kind::Socket
        };
        let (uid, gid) = if self.opts.all_root {
            (0, 0)
        } else {
            (meta.uid(), meta.gid())
        };
        let uid_idx = self.id(uid, path)?;
        let gid_idx = self.id(gid, path)?;
        let mtime = match self.opts.mtime {
            Some(t) => t,
            None => {
                let t = meta.mtime();
                if t < 0 || t > u32::MAX as i64 {
                    log::warn!(
                        "{}: mtime {t} outside SquashFS's range, clamped",
                        path.display()
                    );
                }
                t.clamp(0, u32::MAX as i64) as u32
            }
        };
        let mut size = 0;
        let mut target_off = 0;
        match kind {
            Kind::File => size = meta.len(),
            Kind::Symlink => {
                let t = fs::read_link(path).map_err(PackError::io(path))?;
                target_off = self.tree.arena.len() as u64;
                self.tree.arena.extend_from_slice(t.as_os_str().as_bytes());
                size = t.as_os_str().len() as u64;
            }
            _ => {}
        }
        let rdev = if matches!(kind, Kind::BlockDev | Kind::CharDev) {
            let r = meta.rdev();
            encode_dev(libc::major(r), libc::minor(r))
        } else {
            0
        };
        let set = xattrs::read(path).map_err(PackError::io(path))?;
        let xattr = self.tree.xattrs.intern(set).unwrap_or(INVALID_XATTR);
        let ino = self.tree.inodes.len() as u32;
        self.tree.inodes.push(Inode {
            kind,
            mode: (meta.mode() & 0o7777) as u16,
            uid_idx,
            gid_idx,
            mtime,
            size,
            rdev,
            nlink: 1,
            xattr,
            node,
            target_off,
            maybe_sparse: kind == Kind::File && meta.blocks().saturating_mul(512) < meta.len(),
        });
        Ok(ino)
    }
}
