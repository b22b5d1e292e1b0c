//! The image's namespace while sources stream in: what `tar -x` as root
//! would leave on disk, kept in memory as names and inodes (the data is
//! already in the image, found by a number), then laid out as a [`Tree`].
//!
//! The rules are extraction's: a later member of a path replaces the
//! earlier one (a directory over a directory updates its metadata); a hard
//! link names its target's inode; directories a member's path implies are
//! created. What extraction would refuse, or what would write outside the
//! destination, is an error: a path through a symlink of the archive, a
//! hard link to a path the archive does not hold, a file over a directory
//! holding entries. Between sources, a path given by two is a conflict
//! unless both are directories (they merge) or [`OnConflict`] says which
//! wins.

use crate::tree::{Inode, Kind, NameSpan, Tree};
use crate::xattrs::{Xattr, XattrSets};
use crate::PackError;
use packfs_format::squashfs::inode::encode_dev;
use packfs_format::squashfs::INVALID_XATTR;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Which source's entry a path given by several keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnConflict {
    /// Refuse, naming both sources.
    #[default]
    Error,
    First,
    Last,
}

/// No data: not a regular file.
pub const NO_DATA: u32 = u32::MAX;

/// An inode as extraction would create it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub kind: Kind,
    /// Permission bits with suid, sgid and sticky.
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    /// Files: their size. Directories: the link count the image gives
    /// them at least (a shard's directory keeps its source's, see
    /// `Tree::subset`); 0, as for every archive member: two plus the
    /// subdirectories found.
    pub size: u64,
    /// Devices: (major, minor).
    pub dev: (u32, u32),
    /// Symlinks: the target.
    pub target: Vec<u8>,
    pub xattrs: Vec<Xattr>,
    /// Files: the number their data was written under.
    pub data: u32,
    /// Given by a member or a directory, not implied by a path.
    pub explicit: bool,
    /// Index of the source that gave it.
    pub source: u16,
}

impl Entry {
    pub fn new(kind: Kind, source: u16) -> Entry {
        Entry {
            kind,
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime: 0,
            size: 0,
            dev: (0, 0),
            target: Vec::new(),
            xattrs: Vec::new(),
            data: NO_DATA,
            explicit: true,
            source,
        }
    }
}

/// Why a member cannot join the namespace.
#[derive(Debug, PartialEq, Eq)]
pub enum StageError {
    /// The path goes through `link`, a symlink of the archive.
    UnderSymlink { link: String },
    /// A component on the path is a file, not a directory.
    ParentNotDir { parent: String },
    /// A file would replace a directory that holds entries.
    ReplacesDir,
    /// A hard link's target is not in the archive (yet).
    LinkTargetMissing { target: String },
    /// A hard link's target is a directory.
    LinkToDir { target: String },
    /// A member over the root that is not a directory.
    RootNotDir,
    /// Two sources give the path.
    Conflict { first: u16 },
    /// Reading or writing the spilled namespace failed (the message).
    Spill(String),
}

/// No node: the end of a sibling list, an empty slot of [`Lookup`].
const NONE: u32 = u32::MAX;
/// [`Node::first_child`] of a node that is not a directory.
const NOT_DIR: u32 = u32::MAX - 1;

/// A name in the namespace: 24 bytes, its name in [`Stage::arena`]. A
/// directory's children form a list through [`Node::next_sibling`] in no
/// order (they are sorted once, when laid out as a tree); finding a child by
/// name goes through [`Lookup`].
struct Node {
    parent: u32,
    inode: u32,
    /// Directories: the most recently added child, or [`NONE`];
    /// [`NOT_DIR`] for other nodes.
    first_child: u32,
    next_sibling: u32,
    name: NameSpan,
}

impl Node {
    fn is_dir(&self) -> bool {
        self.first_child != NOT_DIR
    }

    fn has_children(&self) -> bool {
        self.is_dir() && self.first_child != NONE
    }
}

/// An inode as staged: [`Entry`] without its allocations (the symlink
/// target in the arena, the xattrs as an interned set).
struct Stored {
    mtime: i64,
    /// Files: their size. Symlinks: the target's length.
    size: u64,
    /// Symlinks: the target's arena offset. Devices: major << 32 | minor.
    aux: u64,
    uid: u32,
    gid: u32,
    data: u32,
    names: u32,
    /// Index into [`Stage::xattrs`], or [`NONE`].
    xattrs: u32,
    mode: u16,
    source: u16,
    kind: Kind,
    explicit: bool,
}

// `Stage::into_tree` turns the stored inodes into the tree's in their own
// allocation, which collecting a vector into another does for items of one
// size: a change to either struct that breaks this doubles the layout's
// memory at millions of entries.
const _: () = assert!(std::mem::size_of::<Stored>() == std::mem::size_of::<Inode>());

/// Child lookup by (parent, name): an open-addressing table of node
/// numbers, 4 bytes a slot, hashing the name in the arena. Nodes are never
/// removed (a replaced entry keeps its node), so there are no tombstones.
/// The hash is keyed at random per pack (SipHash, std's `RandomState`): the
/// names come from an archive anyone may have made, and with a fixed hash
/// names chosen to collide would make every insertion scan the table. The
/// image does not depend on it: children are sorted when laid out.
#[derive(Default)]
struct Lookup {
    slots: Vec<u32>,
    len: usize,
    keys: std::collections::hash_map::RandomState,
}

impl Lookup {
    fn hash(&self, parent: u32, name: &[u8]) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = self.keys.build_hasher();
        h.write_u32(parent);
        h.write(name);
        h.finish()
    }
}

/// The namespace being built. Node 0 is the root.
pub struct Stage {
    nodes: Vec<Node>,
    entries: Vec<Stored>,
    /// Names and symlink targets, back to back.
    arena: Vec<u8>,
    xattrs: XattrSets,
    lookup: Lookup,
    on_conflict: OnConflict,
    /// Inodes whose other names are in spilled runs: the identity their
    /// records share (see [`super::spill::Runs::link_target`]).
    cross: HashMap<u32, u64>,
}

fn show(comps: &[&[u8]]) -> String {
    String::from_utf8_lossy(&comps.join(&b'/')).into_owned()
}

/// What an insertion did.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    /// The entry is in the namespace as this inode.
    Inode(u32),
    /// Another source's entry stays ([`OnConflict::First`]).
    Skipped,
}

impl Stage {
    pub fn new(on_conflict: OnConflict) -> Stage {
        let mut s = Stage {
            nodes: vec![Node {
                parent: 0,
                inode: 0,
                first_child: NONE,
                next_sibling: NONE,
                name: NameSpan::default(),
            }],
            entries: Vec::new(),
            arena: Vec::new(),
            xattrs: XattrSets::default(),
            lookup: Lookup::default(),
            on_conflict,
            cross: HashMap::new(),
        };
        let mut root = s.store(Entry::new(Kind::Dir, 0));
        root.explicit = false;
        root.names = 1;
        s.entries.push(root);
        s
    }

    /// `e` as staged, its target and xattrs moved into the stage.
    fn store(&mut self, e: Entry) -> Stored {
        let (size, aux) = match e.kind {
            Kind::Symlink => {
                let off = self.arena.len() as u64;
                self.arena.extend_from_slice(&e.target);
                (e.target.len() as u64, off)
            }
            Kind::BlockDev | Kind::CharDev => (e.size, (e.dev.0 as u64) << 32 | e.dev.1 as u64),
            _ => (e.size, 0),
        };
        Stored {
            mtime: e.mtime,
            size,
            aux,
            uid: e.uid,
            gid: e.gid,
            data: e.data,
            names: 0,
            xattrs: self.xattrs.intern(e.xattrs).unwrap_or(NONE),
            mode: e.mode,
            source: e.source,
            kind: e.kind,
            explicit: e.explicit,
        }
    }

    /// The kind of `inode`.
    pub fn kind(&self, inode: u32) -> Kind {
        self.entries[inode as usize].kind
    }

    /// Records the number `inode`'s data was written under.
    pub fn set_data(&mut self, inode: u32, data: u32) {
        self.entries[inode as usize].data = data;
    }

    /// Sets symlink `inode`'s target (known only once its data is read).
    pub fn set_target(&mut self, inode: u32, target: &[u8]) {
        let off = self.arena.len() as u64;
        self.arena.extend_from_slice(target);
        let e = &mut self.entries[inode as usize];
        (e.size, e.aux) = (target.len() as u64, off);
    }

    /// Whether `inode` still has a name (a later member may have replaced
    /// its only one).
    pub fn is_named(&self, inode: u32) -> bool {
        self.entries[inode as usize].names > 0
    }

    /// Directory entries, the root included.
    pub fn names(&self) -> usize {
        self.nodes.len()
    }

    fn name(&self, node: u32) -> &[u8] {
        &self.arena[self.nodes[node as usize].name.range()]
    }

    /// The child of directory node `parent` named `name`, if any.
    fn child(&self, parent: u32, name: &[u8]) -> Option<u32> {
        if !self.nodes[parent as usize].is_dir() || self.lookup.slots.is_empty() {
            return None;
        }
        let mask = self.lookup.slots.len() - 1;
        let mut i = self.lookup.hash(parent, name) as usize & mask;
        loop {
            let n = self.lookup.slots[i];
            if n == NONE {
                return None;
            }
            if self.nodes[n as usize].parent == parent && self.name(n) == name {
                return Some(n);
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts node `n` in the lookup table, growing it at 3/4 full.
    fn index(&mut self, n: u32) {
        if (self.lookup.len + 1) * 4 > self.lookup.slots.len() * 3 {
            let cap = (self.lookup.slots.len() * 2).max(1024);
            self.lookup.slots = vec![NONE; cap];
            for m in 1..n {
                self.place(m);
            }
        }
        self.place(n);
        self.lookup.len = n as usize;
    }

    fn place(&mut self, n: u32) {
        let mask = self.lookup.slots.len() - 1;
        let mut i = self
            .lookup
            .hash(self.nodes[n as usize].parent, self.name(n)) as usize
            & mask;
        while self.lookup.slots[i] != NONE {
            i = (i + 1) & mask;
        }
        self.lookup.slots[i] = n;
    }

    /// The node at `comps`, if any.
    fn find(&self, comps: &[&[u8]]) -> Option<u32> {
        let mut at = 0u32;
        for c in comps {
            at = self.child(at, c)?;
        }
        Some(at)
    }

    /// The directory holding `comps`' last component, made where missing.
    fn parent_of(&mut self, comps: &[&[u8]], source: u16) -> Result<u32, StageError> {
        let mut at = 0u32;
        for (k, c) in comps[..comps.len() - 1].iter().enumerate() {
            at = match self.child(at, c) {
                Some(n) => {
                    let e = &self.entries[self.nodes[n as usize].inode as usize];
                    match e.kind {
                        Kind::Dir => n,
                        Kind::Symlink => {
                            return Err(StageError::UnderSymlink {
                                link: show(&comps[..=k]),
                            })
                        }
                        _ => {
                            return Err(StageError::ParentNotDir {
                                parent: show(&comps[..=k]),
                            })
                        }
                    }
                }
                None => {
                    let mut d = Entry::new(Kind::Dir, source);
                    d.explicit = false;
                    let ino = self.push_entry(d);
                    self.push_node(at, c, ino, true)
                }
            };
        }
        Ok(at)
    }

    fn push_entry(&mut self, e: Entry) -> u32 {
        let mut s = self.store(e);
        s.names = 1;
        self.entries.push(s);
        self.entries.len() as u32 - 1
    }

    fn push_node(&mut self, parent: u32, name: &[u8], inode: u32, dir: bool) -> u32 {
        let n = self.nodes.len() as u32;
        let span = NameSpan::new(self.arena.len() as u64, name.len());
        self.arena.extend_from_slice(name);
        let p = &mut self.nodes[parent as usize];
        let next_sibling = std::mem::replace(&mut p.first_child, n);
        self.nodes.push(Node {
            parent,
            inode,
            first_child: if dir { NONE } else { NOT_DIR },
            next_sibling,
            name: span,
        });
        self.index(n);
        n
    }

    /// Adds `e` at `comps` (no component empty, `.` or `..`; empty for the
    /// root itself), as extraction would.
    pub fn add(&mut self, comps: &[&[u8]], e: Entry) -> Result<Added, StageError> {
        if comps.is_empty() {
            if e.kind != Kind::Dir {
                return Err(StageError::RootNotDir);
            }
            return Ok(self.update_dir(0, e));
        }
        let source = e.source;
        let parent = self.parent_of(comps, source)?;
        let name = comps[comps.len() - 1];
        let Some(node) = self.child(parent, name) else {
            let dir = e.kind == Kind::Dir;
            let ino = self.push_entry(e);
            self.push_node(parent, name, ino, dir);
            return Ok(Added::Inode(ino));
        };
        let old = &self.entries[self.nodes[node as usize].inode as usize];
        let (old_dir, old_source) = (old.kind == Kind::Dir, old.source);
        let new_dir = e.kind == Kind::Dir;
        if old_dir && new_dir {
            return Ok(self.update_dir(node, e));
        }
        if old_source != source && old.explicit {
            match self.on_conflict {
                OnConflict::Error => return Err(StageError::Conflict { first: old_source }),
                OnConflict::First => return Ok(Added::Skipped),
                OnConflict::Last => {}
            }
        }
        if self.nodes[node as usize].has_children() {
            return Err(StageError::ReplacesDir);
        }
        // Unlink the old name, create the new entry under it.
        let old_ino = self.nodes[node as usize].inode;
        self.entries[old_ino as usize].names -= 1;
        let ino = self.push_entry(e);
        let n = &mut self.nodes[node as usize];
        n.inode = ino;
        n.first_child = if new_dir { NONE } else { NOT_DIR };
        Ok(Added::Inode(ino))
    }

    /// A directory given again: its metadata is the later one's within a
    /// source; between sources the first explicit one's stays unless
    /// [`OnConflict::Last`].
    fn update_dir(&mut self, node: u32, e: Entry) -> Added {
        let ino = self.nodes[node as usize].inode;
        let old = &self.entries[ino as usize];
        let take = !old.explicit || old.source == e.source || self.on_conflict == OnConflict::Last;
        if take {
            let names = old.names;
            let mut s = self.store(e);
            s.names = names;
            self.entries[ino as usize] = s;
        }
        Added::Inode(ino)
    }

    /// Adds a hard link at `comps` to the entry at `target`, which the
    /// same source must have given before.
    pub fn link(
        &mut self,
        comps: &[&[u8]],
        target: &[&[u8]],
        source: u16,
    ) -> Result<Added, StageError> {
        let missing = || StageError::LinkTargetMissing {
            target: show(target),
        };
        let t = self.find(target).ok_or_else(missing)?;
        let t_ino = self.nodes[t as usize].inode;
        let te = &self.entries[t_ino as usize];
        if te.kind == Kind::Dir {
            return Err(StageError::LinkToDir {
                target: show(target),
            });
        }
        if te.source != source {
            return Err(missing());
        }
        if comps.is_empty() {
            return Err(StageError::RootNotDir);
        }
        if comps == target {
            return Ok(Added::Inode(t_ino));
        }
        let parent = self.parent_of(comps, source)?;
        let name = comps[comps.len() - 1];
        if let Some(node) = self.child(parent, name) {
            let old_ino = self.nodes[node as usize].inode;
            let old = &self.entries[old_ino as usize];
            if old.source != source && old.explicit {
                match self.on_conflict {
                    OnConflict::Error => return Err(StageError::Conflict { first: old.source }),
                    OnConflict::First => return Ok(Added::Skipped),
                    OnConflict::Last => {}
                }
            }
            if self.nodes[node as usize].has_children() {
                return Err(StageError::ReplacesDir);
            }
            self.entries[old_ino as usize].names -= 1;
            self.entries[t_ino as usize].names += 1;
            let n = &mut self.nodes[node as usize];
            n.inode = t_ino;
            n.first_child = NOT_DIR;
            return Ok(Added::Inode(t_ino));
        }
        self.entries[t_ino as usize].names += 1;
        self.push_node(parent, name, t_ino, false);
        Ok(Added::Inode(t_ino))
    }

    /// Makes `inode` one of the inode of identity `id`, whose other names
    /// are in spilled runs.
    pub(crate) fn set_cross_link(&mut self, inode: u32, id: u64) {
        self.cross.insert(inode, id);
    }

    /// The identities of inodes linked across runs, with the names this
    /// stage gives each.
    pub(crate) fn cross_links(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.cross
            .iter()
            .map(|(&ino, &id)| (id, self.entries[ino as usize].names))
    }

    /// Bytes the stage holds: what [`super::spill`] weighs against its
    /// budget.
    pub fn memory(&self) -> u64 {
        (self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.entries.capacity() * std::mem::size_of::<Stored>()
            + self.arena.capacity()
            + self.lookup.slots.capacity() * 4) as u64
    }

    /// Gives `f` every entry as a run record (see [`super::spill`]), in
    /// depth-first pre-order with each directory's entries sorted by name:
    /// directories only a path implies are left out (the merge makes them
    /// again), and so is the root unless a member gave it. Hard-linked
    /// inodes are told apart by `run` and their stage number; xattr sets
    /// are interned into `sets`.
    pub(crate) fn sorted_records(
        &self,
        run: u32,
        sets: &mut XattrSets,
        mut f: impl FnMut(&crate::record::Rec),
    ) {
        use crate::record::{Rec, NO_LINK, NO_XATTRS};
        let mut path = Vec::new();
        // (node, length of the path before its name)
        let mut stack = vec![(0u32, 0usize)];
        let mut children = Vec::new();
        while let Some((n, before)) = stack.pop() {
            path.truncate(before);
            if n != 0 {
                if before > 0 {
                    path.push(0);
                }
                path.extend_from_slice(self.name(n));
            }
            let node = &self.nodes[n as usize];
            let e = &self.entries[node.inode as usize];
            if e.explicit {
                let (target, dev) = match e.kind {
                    Kind::Symlink => (
                        self.arena[e.aux as usize..(e.aux + e.size) as usize].to_vec(),
                        (0, 0),
                    ),
                    Kind::BlockDev | Kind::CharDev => {
                        (Vec::new(), ((e.aux >> 32) as u32, e.aux as u32))
                    }
                    _ => (Vec::new(), (0, 0)),
                };
                let xattrs = match e.xattrs {
                    NONE => NO_XATTRS,
                    x => sets
                        .intern(self.xattrs.sets[x as usize].clone())
                        .unwrap_or(NO_XATTRS),
                };
                f(&Rec {
                    path: path.clone(),
                    kind: e.kind,
                    mode: e.mode,
                    uid: e.uid,
                    gid: e.gid,
                    mtime: e.mtime,
                    size: match e.kind {
                        Kind::File | Kind::Dir => e.size,
                        _ => 0,
                    },
                    dev,
                    target,
                    xattrs,
                    data: e.data,
                    explicit: true,
                    source: e.source,
                    link: if let Some(&id) = self.cross.get(&node.inode) {
                        id
                    } else if e.kind != Kind::Dir && e.names > 1 {
                        (run as u64) << 32 | node.inode as u64
                    } else {
                        NO_LINK
                    },
                    nlink: e.names,
                });
            }
            children.clear();
            let mut c = node.first_child;
            while c != NONE && c != NOT_DIR {
                children.push(c);
                c = self.nodes[c as usize].next_sibling;
            }
            children.sort_unstable_by(|&a, &b| self.name(b).cmp(self.name(a)));
            let len = path.len();
            stack.extend(children.iter().map(|&c| (c, len)));
        }
    }

    /// Lays the namespace out as a tree (breadth-first, children sorted by
    /// name bytes, as a directory walk makes it) and returns it with each
    /// tree inode's data number ([`NO_DATA`] for other than files).
    /// Implied directories get 0755, root's ownership and their newest
    /// child's mtime, so that the image depends on the archives alone.
    pub fn into_tree(
        mut self,
        root: PathBuf,
        all_root: bool,
        mtime: Option<u32>,
    ) -> Result<(Tree, Vec<u32>), String> {
        // Lookups are over: the table's memory goes before the tree's comes.
        self.lookup = Lookup::default();
        self.date_implied_dirs();
        let mut b = TreeBuilder {
            tree: Tree::with_root(root),
            ids: HashMap::new(),
            data_of: Vec::new(),
            xattrs: XattrSets::default(),
            clamped: 0,
            all_root,
            mtime,
        };
        // In two passes, so that the stage's nodes are gone before the
        // tree's inodes are made: first the tree's nodes, breadth-first
        // (stage node, tree node), each inode numbered where first named;
        // then the inodes, in that order.
        let mut tree_ino = vec![u32::MAX; self.entries.len()];
        // Stage inode and first tree node, by tree inode.
        let mut inode_order = vec![0u32];
        let mut first_node = vec![0u32];
        tree_ino[0] = 0;
        // (tree inode, subdirectories) of every directory.
        let mut subdirs_of = Vec::new();
        let mut queue = std::collections::VecDeque::from([(0u32, 0u32)]);
        let mut children = Vec::new();
        while let Some((sn, tn)) = queue.pop_front() {
            children.clear();
            let mut c = self.nodes[sn as usize].first_child;
            while c != NONE && c != NOT_DIR {
                children.push(c);
                c = self.nodes[c as usize].next_sibling;
            }
            children.sort_unstable_by(|&a, &b| self.name(a).cmp(self.name(b)));
            let first = b.tree.nodes.len() as u32;
            let mut subdirs = 0;
            for &c in &children {
                let si = self.nodes[c as usize].inode;
                let tnode = b.tree.push_node(tn, self.name(c), 0);
                let ti = match tree_ino[si as usize] {
                    u32::MAX => {
                        let ti = inode_order.len() as u32;
                        inode_order.push(si);
                        first_node.push(tnode);
                        tree_ino[si as usize] = ti;
                        ti
                    }
                    ti => ti,
                };
                b.tree.nodes[tnode as usize].inode = ti;
                if self.entries[si as usize].kind == Kind::Dir {
                    subdirs += 1;
                    queue.push_back((c, tnode));
                }
            }
            b.tree.set_children(tn, first, children.len() as u32);
            let at_least = self.entries[self.nodes[sn as usize].inode as usize].size;
            let links = (2 + subdirs).max(at_least.min(u32::MAX as u64) as u32);
            subdirs_of.push((b.tree.nodes[tn as usize].inode, links));
        }
        drop((children, queue, inode_order));
        self.nodes = Vec::new();
        // The stage's inodes are put in tree order where they are (those no
        // name reaches any more last, then dropped) and made into the tree's
        // in their own allocation: a `Stored` is as large as an `Inode`, so
        // collecting the one into the other reuses the vector, and the two
        // never take memory side by side.
        let count = first_node.len();
        let mut dest = tree_ino;
        let unnamed = dest.iter_mut().filter(|d| **d == u32::MAX);
        for (place, d) in (count as u32..).zip(unnamed) {
            *d = place;
        }
        for i in 0..dest.len() {
            while dest[i] as usize != i {
                let j = dest[i] as usize;
                self.entries.swap(i, j);
                dest.swap(i, j);
            }
        }
        drop(dest);
        let mut entries = std::mem::take(&mut self.entries);
        entries.truncate(count);
        let mut failed = None;
        let inodes: Vec<Inode> = entries
            .into_iter()
            .enumerate()
            .map(|(ti, e)| {
                b.inode_of(&e, &self.arena, &self.xattrs, first_node[ti])
                    .unwrap_or_else(|err| {
                        failed.get_or_insert(err);
                        Inode::placeholder()
                    })
            })
            .collect();
        if let Some(err) = failed {
            return Err(err);
        }
        b.tree.inodes = inodes;
        for (ti, links) in subdirs_of {
            b.tree.inodes[ti as usize].nlink = links;
        }
        Ok(b.finish())
    }

    /// Gives each implied directory the newest mtime below it. Children
    /// come after their parents: one backward pass carries the newest mtime
    /// up through implied directories.
    fn date_implied_dirs(&mut self) {
        for n in (1..self.nodes.len()).rev() {
            let node = &self.nodes[n];
            let t = self.entries[node.inode as usize].mtime;
            let p = self.nodes[node.parent as usize].inode as usize;
            if !self.entries[p].explicit && self.entries[p].mtime < t {
                self.entries[p].mtime = t;
            }
        }
    }
}

/// The tree [`Stage::into_tree`] lays out, with what its inodes are
/// numbered and deduplicated by.
struct TreeBuilder {
    tree: Tree,
    /// uid/gid -> index in the tree's id table.
    ids: HashMap<u32, u16>,
    /// Data number of each tree inode.
    data_of: Vec<u32>,
    xattrs: XattrSets,
    /// Inodes whose mtime was out of range.
    clamped: u64,
    all_root: bool,
    mtime: Option<u32>,
}

impl TreeBuilder {
    /// The tree's inode for the staged `e` (its names and targets in
    /// `arena`, its xattrs among `sets`), first named by tree node `node`;
    /// called in tree inode order.
    fn inode_of(
        &mut self,
        e: &Stored,
        arena: &[u8],
        sets: &XattrSets,
        node: u32,
    ) -> Result<Inode, String> {
        let tree = &mut self.tree;
        let (uid, gid) = if self.all_root {
            (0, 0)
        } else {
            (e.uid, e.gid)
        };
        let too_many = || "more than 65535 distinct uids/gids".to_string();
        let uid_idx = tree.id_index(&mut self.ids, uid).ok_or_else(too_many)?;
        let gid_idx = tree.id_index(&mut self.ids, gid).ok_or_else(too_many)?;
        let t = match self.mtime {
            Some(t) => t,
            None => {
                if e.mtime < 0 || e.mtime > u32::MAX as i64 {
                    self.clamped += 1;
                }
                e.mtime.clamp(0, u32::MAX as i64) as u32
            }
        };
        let (size, target_off) = match e.kind {
            Kind::File => (e.size, 0),
            Kind::Symlink => {
                let target = &arena[e.aux as usize..(e.aux + e.size) as usize];
                (e.size, tree.push_target(target))
            }
            _ => (0, 0),
        };
        let rdev = match e.kind {
            Kind::BlockDev | Kind::CharDev => encode_dev((e.aux >> 32) as u32, e.aux as u32),
            _ => 0,
        };
        // Sets are numbered again in tree order, as a walk numbers them.
        let xattr = match e.xattrs {
            NONE => INVALID_XATTR,
            x => self
                .xattrs
                .intern(sets.sets[x as usize].clone())
                .unwrap_or(INVALID_XATTR),
        };
        let inode = Inode {
            kind: e.kind,
            mode: e.mode & 0o7777,
            uid_idx,
            gid_idx,
            mtime: t,
            size,
            rdev,
            nlink: if e.kind == Kind::Dir { 2 } else { e.names },
            xattr,
            node,
            target_off,
            maybe_sparse: false,
            from_overlay: false,
            src_ino: 0,
        };
        self.data_of.push(if e.kind == Kind::File {
            e.data
        } else {
            NO_DATA
        });
        Ok(inode)
    }

    /// The tree, its xattr sets and image time set, and each inode's data
    /// number.
    fn finish(self) -> (Tree, Vec<u32>) {
        let mut tree = self.tree;
        tree.xattrs = self.xattrs;
        tree.image_time = Some(tree.inodes.iter().map(|i| i.mtime).max().unwrap_or(0));
        let clamped = self.clamped;
        if clamped > 0 {
            log::warn!(
                "{clamped} entries have an mtime outside the range an image stores (1970 to 2106): clamped"
            );
        }
        (tree, self.data_of)
    }
}

/// A namespace refusal as the user reads it (`names`: the sources').
pub(crate) fn stage_error(
    archive: &Path,
    member: Option<&[u8]>,
    e: StageError,
    names: &[PathBuf],
) -> PackError {
    let message = match e {
        StageError::UnderSymlink { link } => {
            format!(
                "lies under {link}, a symlink of the archive (extraction would write through it)"
            )
        }
        StageError::ParentNotDir { parent } => format!("{parent} is not a directory"),
        StageError::ReplacesDir => "would replace a directory that holds entries".into(),
        StageError::LinkTargetMissing { target } => {
            format!("a hard link to {target}, which the archive does not hold before it")
        }
        StageError::LinkToDir { target } => format!("a hard link to the directory {target}"),
        StageError::RootNotDir => "names the root, and is not a directory".into(),
        StageError::Spill(e) => e,
        StageError::Conflict { first } => {
            return PackError::SourceConflict {
                path: archive.to_path_buf(),
                member: member.map(|m| String::from_utf8_lossy(m).into_owned()),
                first: names.get(first as usize).cloned().unwrap_or_default(),
            }
        }
    };
    PackError::archive(archive, member, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(source: u16, data: u32) -> Entry {
        let mut e = Entry::new(Kind::File, source);
        e.data = data;
        e.mode = 0o644;
        e
    }

    fn p(s: &str) -> Vec<&[u8]> {
        s.split('/').map(str::as_bytes).collect()
    }

    #[test]
    fn later_members_replace_and_links_keep_the_old_inode() {
        let mut s = Stage::new(OnConflict::Error);
        let Added::Inode(a) = s.add(&p("d/a"), file(0, 0)).unwrap() else {
            panic!()
        };
        let Added::Inode(l) = s.link(&p("d/l"), &p("d/a"), 0).unwrap() else {
            panic!()
        };
        assert_eq!(a, l);
        let Added::Inode(b) = s.add(&p("d/a"), file(0, 1)).unwrap() else {
            panic!()
        };
        assert_ne!(a, b);
        let (tree, data) = s.into_tree(PathBuf::from("x"), false, None).unwrap();
        // root, d, a, l
        assert_eq!(tree.nodes.len(), 4);
        let d = tree.children(0).start;
        let names: Vec<&[u8]> = tree.children(d).map(|c| tree.name(c)).collect();
        assert_eq!(names, [b"a", b"l"]);
        let a_node = tree.children(d).start;
        let l_node = a_node + 1;
        let (ia, il) = (
            tree.nodes[a_node as usize].inode,
            tree.nodes[l_node as usize].inode,
        );
        assert_eq!(data[ia as usize], 1);
        assert_eq!(data[il as usize], 0);
        assert_eq!(tree.inodes[il as usize].nlink, 1);
    }

    #[test]
    fn unsafe_paths_and_links_are_refused() {
        let mut s = Stage::new(OnConflict::Error);
        let mut l = Entry::new(Kind::Symlink, 0);
        l.target = b"/etc".to_vec();
        s.add(&p("s"), l).unwrap();
        assert_eq!(
            s.add(&p("s/passwd"), file(0, 0)),
            Err(StageError::UnderSymlink { link: "s".into() })
        );
        assert!(matches!(
            s.link(&p("h"), &p("nowhere"), 0),
            Err(StageError::LinkTargetMissing { .. })
        ));
        s.add(&p("d/x"), file(0, 1)).unwrap();
        assert_eq!(s.add(&p("d"), file(0, 2)), Err(StageError::ReplacesDir));
    }

    #[test]
    fn sources_conflict_unless_told_which_wins() {
        for (rule, want) in [
            (OnConflict::Error, Err(StageError::Conflict { first: 0 })),
            (OnConflict::First, Ok(Added::Skipped)),
        ] {
            let mut s = Stage::new(rule);
            s.add(&p("a"), file(0, 0)).unwrap();
            s.add(&p("d/x"), file(0, 1)).unwrap();
            // Directories merge.
            assert!(s.add(&p("d"), Entry::new(Kind::Dir, 1)).is_ok());
            assert_eq!(s.add(&p("a"), file(1, 2)), want);
        }
        let mut s = Stage::new(OnConflict::Last);
        s.add(&p("a"), file(0, 0)).unwrap();
        assert!(matches!(s.add(&p("a"), file(1, 2)), Ok(Added::Inode(_))));
    }
}
