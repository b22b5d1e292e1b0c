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

use crate::tree::{Inode, Kind, Tree};
use crate::xattrs::{Xattr, XattrSets};
use packfs_format::squashfs::inode::encode_dev;
use packfs_format::squashfs::INVALID_XATTR;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

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
    /// Files: their size.
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
    /// Names it has in the namespace.
    names: u32,
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
            names: 0,
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
}

struct Node {
    name: Box<[u8]>,
    inode: u32,
    /// Directories: children by name.
    children: Option<BTreeMap<Box<[u8]>, u32>>,
}

/// What an insertion did.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    /// The entry is in the namespace as this inode.
    Inode(u32),
    /// Another source's entry stays ([`OnConflict::First`]).
    Skipped,
}

/// The namespace being built. Node 0 is the root.
pub struct Stage {
    nodes: Vec<Node>,
    entries: Vec<Entry>,
    on_conflict: OnConflict,
}

fn show(comps: &[&[u8]]) -> String {
    String::from_utf8_lossy(&comps.join(&b'/')).into_owned()
}

impl Stage {
    pub fn new(on_conflict: OnConflict) -> Stage {
        let mut root = Entry::new(Kind::Dir, 0);
        root.explicit = false;
        root.names = 1;
        Stage {
            nodes: vec![Node {
                name: Box::default(),
                inode: 0,
                children: Some(BTreeMap::new()),
            }],
            entries: vec![root],
            on_conflict,
        }
    }

    pub fn entry_mut(&mut self, inode: u32) -> &mut Entry {
        &mut self.entries[inode as usize]
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

    /// The node at `comps`, if any.
    fn find(&self, comps: &[&[u8]]) -> Option<u32> {
        let mut at = 0u32;
        for c in comps {
            at = *self.nodes[at as usize].children.as_ref()?.get(*c)?;
        }
        Some(at)
    }

    /// The directory holding `comps`' last component, made where missing.
    fn parent_of(&mut self, comps: &[&[u8]], source: u16) -> Result<u32, StageError> {
        let mut at = 0u32;
        for (k, c) in comps[..comps.len() - 1].iter().enumerate() {
            let next = self.nodes[at as usize]
                .children
                .as_ref()
                .and_then(|m| m.get(*c).copied());
            at = match next {
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

    fn push_entry(&mut self, mut e: Entry) -> u32 {
        e.names = 1;
        self.entries.push(e);
        self.entries.len() as u32 - 1
    }

    fn push_node(&mut self, parent: u32, name: &[u8], inode: u32, dir: bool) -> u32 {
        let n = self.nodes.len() as u32;
        self.nodes.push(Node {
            name: name.into(),
            inode,
            children: dir.then(BTreeMap::new),
        });
        self.nodes[parent as usize]
            .children
            .as_mut()
            .expect("a parent is a directory")
            .insert(name.into(), n);
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
        let existing = self.nodes[parent as usize]
            .children
            .as_ref()
            .and_then(|m| m.get(name).copied());
        let Some(node) = existing else {
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
        if old_dir
            && self.nodes[node as usize]
                .children
                .as_ref()
                .is_some_and(|m| !m.is_empty())
        {
            return Err(StageError::ReplacesDir);
        }
        // Unlink the old name, create the new entry under it.
        let old_ino = self.nodes[node as usize].inode;
        self.entries[old_ino as usize].names -= 1;
        let ino = self.push_entry(e);
        let n = &mut self.nodes[node as usize];
        n.inode = ino;
        n.children = new_dir.then(BTreeMap::new);
        Ok(Added::Inode(ino))
    }

    /// A directory given again: its metadata is the later one's within a
    /// source; between sources the first explicit one's stays unless
    /// [`OnConflict::Last`].
    fn update_dir(&mut self, node: u32, e: Entry) -> Added {
        let ino = self.nodes[node as usize].inode;
        let old = &mut self.entries[ino as usize];
        let take = !old.explicit || old.source == e.source || self.on_conflict == OnConflict::Last;
        if take {
            let names = old.names;
            *old = Entry { names, ..e };
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
        if let Some(node) = self.nodes[parent as usize]
            .children
            .as_ref()
            .and_then(|m| m.get(name).copied())
        {
            let old_ino = self.nodes[node as usize].inode;
            let old = &self.entries[old_ino as usize];
            if old.source != source && old.explicit {
                match self.on_conflict {
                    OnConflict::Error => return Err(StageError::Conflict { first: old.source }),
                    OnConflict::First => return Ok(Added::Skipped),
                    OnConflict::Last => {}
                }
            }
            if self.nodes[node as usize]
                .children
                .as_ref()
                .is_some_and(|m| !m.is_empty())
            {
                return Err(StageError::ReplacesDir);
            }
            self.entries[old_ino as usize].names -= 1;
            self.entries[t_ino as usize].names += 1;
            let n = &mut self.nodes[node as usize];
            n.inode = t_ino;
            n.children = None;
            return Ok(Added::Inode(t_ino));
        }
        self.entries[t_ino as usize].names += 1;
        self.push_node(parent, name, t_ino, false);
        Ok(Added::Inode(t_ino))
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
        let mut tree_ino = vec![u32::MAX; self.entries.len()];
        let root_ino = b.add_inode(&self.entries[0], 0)?;
        b.tree.nodes[0].inode = root_ino;
        tree_ino[0] = root_ino;
        // Breadth-first: (stage node, tree node).
        let mut queue = std::collections::VecDeque::from([(0u32, 0u32)]);
        while let Some((sn, tn)) = queue.pop_front() {
            let children = self.nodes[sn as usize].children.take().unwrap_or_default();
            let first = b.tree.nodes.len() as u32;
            let mut subdirs = 0;
            for (_, c) in children.iter() {
                let node = &self.nodes[*c as usize];
                let si = node.inode as usize;
                let tnode = b.tree.push_node(tn, &node.name, 0);
                let ti = match tree_ino[si] {
                    u32::MAX => {
                        let ti = b.add_inode(&self.entries[si], tnode)?;
                        tree_ino[si] = ti;
                        ti
                    }
                    ti => ti,
                };
                b.tree.nodes[tnode as usize].inode = ti;
                if self.entries[si].kind == Kind::Dir {
                    subdirs += 1;
                    queue.push_back((*c, tnode));
                }
            }
            b.tree.set_children(tn, first, children.len() as u32);
            let ti = b.tree.nodes[tn as usize].inode as usize;
            b.tree.inodes[ti].nlink = 2 + subdirs;
        }
        Ok(b.finish())
    }

    /// Gives each implied directory the newest mtime below it. Children
    /// come after their parents: one backward pass carries the newest mtime
    /// up through implied directories.
    fn date_implied_dirs(&mut self) {
        let mut parent_of = vec![0u32; self.nodes.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            if let Some(c) = &node.children {
                for &k in c.values() {
                    parent_of[k as usize] = n as u32;
                }
            }
        }
        for n in (1..self.nodes.len()).rev() {
            let t = self.entries[self.nodes[n].inode as usize].mtime;
            let p = self.nodes[parent_of[n] as usize].inode as usize;
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
    /// Adds the inode of `e`, first named by tree node `node`.
    fn add_inode(&mut self, e: &Entry, node: u32) -> Result<u32, String> {
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
            Kind::Symlink => (e.target.len() as u64, tree.push_target(&e.target)),
            _ => (0, 0),
        };
        let rdev = match e.kind {
            Kind::BlockDev | Kind::CharDev => encode_dev(e.dev.0, e.dev.1),
            _ => 0,
        };
        tree.inodes.push(Inode {
            kind: e.kind,
            mode: e.mode & 0o7777,
            uid_idx,
            gid_idx,
            mtime: t,
            size,
            rdev,
            nlink: if e.kind == Kind::Dir { 2 } else { e.names },
            xattr: self
                .xattrs
                .intern(e.xattrs.clone())
                .unwrap_or(INVALID_XATTR),
            node,
            target_off,
            maybe_sparse: false,
            from_overlay: false,
            src_ino: 0,
        });
        self.data_of.push(if e.kind == Kind::File {
            e.data
        } else {
            NO_DATA
        });
        Ok(tree.inodes.len() as u32 - 1)
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
