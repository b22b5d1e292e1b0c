//! The write side's data model: the tree an image is written from, whoever
//! built it (a directory walk, `crate::walk`; archive streams, through
//! `crate::archive::stage`).
//!
//! Memory is the constraint (millions of entries): names live in one byte
//! arena, entries and inodes are small fixed-size structs, and the children of
//! a directory are contiguous in [`Tree::nodes`], sorted by name bytes, so a
//! directory only stores a range.

use crate::xattrs::XattrSets;
use packfs_format::shards::{encode_path, Range, Shard};
use packfs_format::squashfs::INVALID_XATTR;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
/// 24 bytes: there is one per entry.
#[derive(Clone, Debug)]
pub struct Node {
    pub parent: u32,
    pub inode: u32,
    name: NameSpan,
    /// Directories only: children are `first_child..first_child + child_count`.
    pub first_child: u32,
    pub child_count: u32,
}

/// Where a name lies in an arena: offset (48 bits) and length (16 bits) in
/// two `u32`s, so a struct holding one needs no 8-byte alignment.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NameSpan([u32; 2]);

impl NameSpan {
    pub(crate) fn new(off: u64, len: usize) -> NameSpan {
        let packed = off << 16 | (len as u64 & 0xffff);
        NameSpan([(packed >> 32) as u32, packed as u32])
    }

    pub(crate) fn range(self) -> std::ops::Range<usize> {
        let packed = (self.0[0] as u64) << 32 | self.0[1] as u64;
        let off = (packed >> 16) as usize;
        off..off + (packed & 0xffff) as usize
    }
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
    /// Found in [`Tree::overlay`] rather than the source: its data is read there.
    pub from_overlay: bool,
    /// The source file's `st_ino` at the walk: a file opened for its data
    /// must still be this one, not one renamed over it since. 0: unknown
    /// (a filesystem whose inode numbers may change, `stable_inodes`).
    pub src_ino: u64,
}

impl Inode {
    /// An inode standing in for one that could not be made, whose error
    /// is returned instead of the tree it would be in.
    pub(crate) fn placeholder() -> Inode {
        Inode {
            kind: Kind::File,
            mode: 0,
            uid_idx: 0,
            gid_idx: 0,
            mtime: 0,
            size: 0,
            rdev: 0,
            nlink: 0,
            xattr: INVALID_XATTR,
            node: 0,
            target_off: 0,
            maybe_sparse: false,
            from_overlay: false,
            src_ino: 0,
        }
    }
}

pub struct Tree {
    pub root: PathBuf,
    /// [`PackOptions::overlay`]: a tree laid over `root`.
    pub overlay: Option<PathBuf>,
    pub nodes: Vec<Node>,
    pub inodes: Vec<Inode>,
    arena: Vec<u8>,
    /// uid/gid values in first-seen order.
    pub ids: Vec<u32>,
    pub xattrs: XattrSets,
    /// The superblock's time when `--mtime` does not set it; `None`: the
    /// time of the pack. An archive's image takes its newest mtime, so that
    /// it depends on the archive alone.
    pub image_time: Option<u32>,
}

impl Tree {
    /// Bytes the tree has allocated for its entries: nodes, inodes and
    /// the name arena (what grows with the entry count; id and xattr
    /// tables are left out: they grow with the distinct values).
    pub fn memory(&self) -> u64 {
        (self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.inodes.capacity() * std::mem::size_of::<Inode>()
            + self.arena.capacity()) as u64
    }

    pub fn name(&self, node: u32) -> &[u8] {
        &self.arena[self.nodes[node as usize].name.range()]
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

    /// The directory an inode's data and metadata were read under: the
    /// source root, or the overlay for entries the overlay supplied.
    pub fn data_root(&self, ino: u32) -> &Path {
        match &self.overlay {
            Some(o) if self.inodes[ino as usize].from_overlay => o,
            _ => &self.root,
        }
    }

    /// Where an inode's data is read from.
    pub fn data_path(&self, ino: u32) -> PathBuf {
        self.data_root(ino)
            .join(self.rel_path(self.inodes[ino as usize].node))
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

impl Tree {
    /// A tree holding only its root node (whose inode is 0, to be pushed),
    /// for inputs other than a directory walk to fill in order: each
    /// directory's children added together, sorted by name bytes.
    pub(crate) fn with_root(root: PathBuf) -> Tree {
        Tree {
            root,
            overlay: None,
            nodes: vec![Node {
                parent: 0,
                inode: 0,
                name: NameSpan::default(),
                first_child: 0,
                child_count: 0,
            }],
            inodes: Vec::new(),
            arena: Vec::new(),
            ids: Vec::new(),
            xattrs: XattrSets::default(),
            image_time: None,
        }
    }

    /// Appends a node named `name` under `parent`; the caller keeps each
    /// directory's children contiguous and sorted ([`Tree::set_children`]).
    pub(crate) fn push_node(&mut self, parent: u32, name: &[u8], inode: u32) -> u32 {
        let span = NameSpan::new(self.arena.len() as u64, name.len());
        self.arena.extend_from_slice(name);
        self.nodes.push(Node {
            parent,
            inode,
            name: span,
            first_child: 0,
            child_count: 0,
        });
        self.nodes.len() as u32 - 1
    }

    /// Records that `node`'s children are `first..first + count`.
    pub(crate) fn set_children(&mut self, node: u32, first: u32, count: u32) {
        let n = &mut self.nodes[node as usize];
        n.first_child = first;
        n.child_count = count;
    }

    /// Stores a symlink target; its arena offset, for [`Inode::target_off`].
    pub(crate) fn push_target(&mut self, target: &[u8]) -> u64 {
        let off = self.arena.len() as u64;
        self.arena.extend_from_slice(target);
        off
    }

    /// The index of uid/gid `id` in [`Tree::ids`] (`index` maps ids to
    /// indexes); `None` when the table is full (id_count is a u16 in the
    /// superblock).
    pub(crate) fn id_index(&mut self, index: &mut HashMap<u32, u16>, id: u32) -> Option<u16> {
        if let Some(&i) = index.get(&id) {
            return Some(i);
        }
        if self.ids.len() >= u16::MAX as usize {
            return None;
        }
        let i = self.ids.len() as u16;
        self.ids.push(id);
        index.insert(id, i);
        Some(i)
    }
}

impl Tree {
    /// Nodes in depth-first pre-order (siblings by name bytes), the root
    /// left out: the order the ZIP writer writes entries and the order
    /// shards are cut in (`crate::shards`).
    pub fn pre_order(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.nodes.len().saturating_sub(1));
        let mut stack: Vec<u32> = self.children(0).rev().collect();
        while let Some(node) = stack.pop() {
            out.push(node);
            if self.inodes[self.nodes[node as usize].inode as usize].kind == Kind::Dir {
                stack.extend(self.children(node).rev());
            }
        }
        out
    }

    /// The tree restricted to the nodes marked in `keep`, which must hold
    /// the root, every ancestor of a kept node and every name of a kept
    /// hard-linked inode. Nodes keep their relative order (so children stay
    /// contiguous and sorted), the arena, uid/gid table and xattr sets are
    /// rebuilt with only what the kept nodes use. Inodes keep their link
    /// counts, directories included: a directory's count stays the source's
    /// (2 + all its subdirectories), which overstates it in a shard that
    /// holds only some of them. That is the safe direction (`find`'s leaf
    /// optimisation only skips work when the count is *lower*), and it makes
    /// the union of the shards show the source's counts.
    pub fn subset(&self, keep: &[bool]) -> Tree {
        debug_assert!(keep[0]);
        let new_node = renumber(keep);
        let count = keep.iter().filter(|&&k| k).count();
        let (new_ino, inode_order) = self.kept_inodes(keep);
        let (used_ids, used_sets) = self.ids_and_sets_used(&inode_order);
        let (id_map, set_map) = (renumber(&used_ids), renumber(&used_sets));
        let mut xattrs = XattrSets::default();
        for (s, set) in self.xattrs.sets.iter().enumerate() {
            if used_sets[s] {
                xattrs.intern(set.clone());
            }
        }
        let mut t = Tree {
            root: self.root.clone(),
            overlay: self.overlay.clone(),
            nodes: Vec::with_capacity(count),
            inodes: Vec::with_capacity(inode_order.len()),
            arena: Vec::new(),
            ids: (0..self.ids.len())
                .filter(|&i| used_ids[i])
                .map(|i| self.ids[i])
                .collect(),
            xattrs,
            image_time: self.image_time,
        };
        for n in (0..self.nodes.len()).filter(|&n| keep[n]) {
            let old = &self.nodes[n];
            let name = self.name(n as u32);
            let span = NameSpan::new(t.arena.len() as u64, name.len());
            t.arena.extend_from_slice(name);
            let kept: Vec<u32> = self
                .children(n as u32)
                .filter(|&c| keep[c as usize])
                .collect();
            t.nodes.push(Node {
                parent: new_node[old.parent as usize],
                inode: new_ino[old.inode as usize],
                name: span,
                first_child: kept.first().map_or(0, |&c| new_node[c as usize]),
                child_count: kept.len() as u32,
            });
        }
        for &ino in &inode_order {
            let mut i = self.inodes[ino].clone();
            if i.kind == Kind::Symlink {
                let off = t.arena.len() as u64;
                t.arena.extend_from_slice(self.symlink_target(ino as u32));
                i.target_off = off;
            }
            i.node = new_node[i.node as usize];
            i.uid_idx = id_map[i.uid_idx as usize] as u16;
            i.gid_idx = id_map[i.gid_idx as usize] as u16;
            if i.xattr != INVALID_XATTR {
                i.xattr = set_map[i.xattr as usize];
            }
            t.inodes.push(i);
        }
        t
    }

    /// The inodes of the nodes marked in `keep`: their new numbers (by old
    /// inode; `u32::MAX` for one not kept) and the kept old inodes in order.
    fn kept_inodes(&self, keep: &[bool]) -> (Vec<u32>, Vec<usize>) {
        let mut new_ino = vec![u32::MAX; self.inodes.len()];
        let mut inode_order = Vec::new();
        for (node, _) in self.nodes.iter().zip(keep).filter(|(_, k)| **k) {
            let ino = node.inode as usize;
            if new_ino[ino] == u32::MAX {
                new_ino[ino] = 0;
                inode_order.push(ino);
            }
        }
        // Inodes in their original order: deterministic, and the order
        // the writers number them in is decided by the nodes anyway.
        inode_order.sort_unstable();
        for (i, &ino) in inode_order.iter().enumerate() {
            new_ino[ino] = i as u32;
        }
        (new_ino, inode_order)
    }

    /// Which uid/gid table entries and which xattr sets `inodes` use.
    fn ids_and_sets_used(&self, inodes: &[usize]) -> (Vec<bool>, Vec<bool>) {
        let mut used_ids = vec![false; self.ids.len()];
        let mut used_sets = vec![false; self.xattrs.sets.len()];
        for &ino in inodes {
            let i = &self.inodes[ino];
            used_ids[i.uid_idx as usize] = true;
            used_ids[i.gid_idx as usize] = true;
            if i.xattr != INVALID_XATTR {
                used_sets[i.xattr as usize] = true;
            }
        }
        (used_ids, used_sets)
    }
}

/// New numbers for the entries marked `used`, in order from 0; `u32::MAX`
/// for the others.
fn renumber(used: &[bool]) -> Vec<u32> {
    let mut next = 0;
    used.iter()
        .map(|&u| {
            let v = next;
            next += u as u32;
            if u {
                v
            } else {
                u32::MAX
            }
        })
        .collect()
}

impl Tree {
    /// The manifest record of an image packed whole from this tree (a shard
    /// of sources): all its entries, its regular files (hard links once) and
    /// their bytes, and its range from its first leaf (the first entry that is
    /// not a directory leading to the next: those sort before it and are held
    /// as its ancestors) to its last entry, in tree order.
    pub fn whole_record(&self) -> Shard {
        let order = self.pre_order();
        let mut files = 0;
        let mut bytes = 0;
        let mut seen = std::collections::HashSet::new();
        for &node in &order {
            let ino = self.nodes[node as usize].inode;
            let i = &self.inodes[ino as usize];
            if i.kind == Kind::File && seen.insert(ino) {
                files += 1;
                bytes += i.size;
            }
        }
        let first_leaf = order
            .iter()
            .enumerate()
            .find(|&(i, _)| {
                order
                    .get(i + 1)
                    .is_none_or(|&next| self.nodes[next as usize].parent != order[i])
            })
            .map(|(_, &n)| n);
        Shard {
            index: 0,
            file: String::new(),
            size: 0,
            blake3: String::new(),
            entries: order.len() as u64,
            files,
            bytes,
            range: first_leaf.zip(order.last()).map(|(first, &last)| Range {
                first: encode_path(self.rel_path(first).as_os_str().as_bytes()),
                last: encode_path(self.rel_path(last).as_os_str().as_bytes()),
            }),
        }
    }
}
