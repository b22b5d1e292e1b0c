//! Phases 2 and 3 of [`Index::build`](super::Index::build): the pending
//! entries ordered depth-first, then walked into the tree of nodes.

use super::node::{Node, Pending};
use crate::error::{FsError, Result};

/// A pending entry's normalised path.
fn path_of<'a>(p: &Pending, paths: &'a [u8]) -> &'a [u8] {
    &paths[p.path_off as usize..p.path_off as usize + p.path_len as usize]
}

/// Phase 2: the order in which to walk the entries.
///
/// Input: the pending entries (central order) and their path arena.
/// Output: a permutation of their indices sorted by (path, index). Because
/// the paths are components joined by NUL, which sorts before any other
/// byte, that is a depth-first pre-order: a directory's entry comes right
/// before everything under it, siblings come by name, and entries of the
/// same path stay together in central directory order.
pub(super) fn preorder(pend: &[Pending], paths: &[u8]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..pend.len() as u32).collect();
    // The index tie-break makes the unstable (faster) sort deterministic.
    use rayon::slice::ParallelSliceMut;
    order.par_sort_unstable_by(|&a, &b| {
        path_of(&pend[a as usize], paths)
            .cmp(path_of(&pend[b as usize], paths))
            .then(a.cmp(&b))
    });
    order
}

/// Phase 3's output.
pub(super) struct Tree {
    /// Node 0 is the root; every other node's parent is a directory with a
    /// smaller index, and nodes of one parent are in name order with
    /// distinct names. Directories' children ranges are not laid yet.
    pub nodes: Vec<Node>,
    /// The base names of the nodes.
    pub names: Vec<u8>,
    /// Entries hidden by a later duplicate or by a directory of their path.
    pub skipped: u64,
}

/// Phase 3: the walk that makes the tree.
///
/// Input: the pending entries, their path arena and their [`preorder`].
/// Output: a [`Tree`] with one node per distinct path, where
/// * a directory that only appears in other entries' paths is synthesised
///   (0755, `default_owner`, [`super::NODE_SYNTH`], mtime `i64::MIN` until
///   [`super::layout::date_synthesised_dirs`] sets it);
/// * of entries with the same path the last in the central directory wins,
///   in the position and under the name of the first (logged, skipped);
/// * a non-directory whose path is also a parent of other entries becomes a
///   synthesised directory (logged, skipped).
///
/// Fails only when the names need more than 4 GiB.
pub(super) fn build_tree(
    pend: &[Pending],
    order: &[u32],
    paths: &[u8],
    default_owner: (u32, u32),
) -> Result<Tree> {
    let mut nodes: Vec<Node> = Vec::with_capacity(pend.len() + pend.len() / 8 + 1);
    nodes.push(Node::dir(0, (0, 0), default_owner.0, default_owner.1));
    let mut w = Walk {
        paths,
        owner: default_owner,
        nodes,
        names: Vec::new(),
        stack: vec![Placed {
            off: 0,
            len: 0,
            node: 0,
        }],
        last: None,
        skipped: 0,
    };
    for &pi in order {
        let p = &pend[pi as usize];
        let full = path_of(p, paths);
        w.close_dirs(full);
        w.open_dirs(full, p.path_off)?;
        w.place(p, full)?;
    }
    Ok(Tree {
        nodes: w.nodes,
        names: w.names,
        skipped: w.skipped,
    })
}

/// A node of the walk and the path it was placed at (a prefix of some
/// entry's path in the arena).
#[derive(Clone, Copy)]
struct Placed {
    off: u64,
    len: u32,
    node: u32,
}

/// The state of [`build_tree`]'s walk.
struct Walk<'a> {
    paths: &'a [u8],
    owner: (u32, u32),
    nodes: Vec<Node>,
    names: Vec<u8>,
    /// Open directories, innermost last; the root (empty path) stays at the
    /// bottom.
    stack: Vec<Placed>,
    /// The previous node placed. In pre-order, an earlier entry of the same
    /// path, or a file whose path is a directory of this entry, can only be
    /// the node placed just before, so this is all the lookup needed.
    last: Option<Placed>,
    skipped: u64,
}

impl<'a> Walk<'a> {
    fn path(&self, at: Placed) -> &'a [u8] {
        &self.paths[at.off as usize..at.off as usize + at.len as usize]
    }

    fn add_name(&mut self, c: &[u8]) -> Result<(u32, u16)> {
        let off = u32::try_from(self.names.len())
            .map_err(|_| FsError::Unsupported("more than 4 GiB of names".into()))?;
        self.names.extend_from_slice(c);
        Ok((off, c.len() as u16))
    }

    /// Closes the open directories that are not an ancestor of `full`.
    fn close_dirs(&mut self, full: &[u8]) {
        while self.stack.len() > 1 {
            let top = *self.stack.last().expect("non-empty");
            let l = top.len as usize;
            if full.len() > l && full[l] == 0 && &full[..l] == self.path(top) {
                break;
            }
            self.stack.pop();
        }
    }

    /// Opens the directories between the innermost open one and `full`'s
    /// base name: the node placed just before when it has that path (a
    /// file, which the directory replaces), else a synthesised one.
    fn open_dirs(&mut self, full: &[u8], path_off: u64) -> Result<()> {
        loop {
            let top = *self.stack.last().expect("root stays");
            let comp_start = if top.len == 0 {
                0
            } else {
                top.len as usize + 1
            };
            let Some(rel) = full[comp_start..].iter().position(|&b| b == 0) else {
                return Ok(());
            };
            let comp_end = comp_start + rel;
            let comp = &full[comp_start..comp_end];
            // The previous node may be a file of this very path: the
            // directory wins.
            let clash = self
                .last
                .filter(|&l| l.len as usize == comp_end && self.path(l) == &full[..comp_end])
                .map(|l| l.node);
            let idx = match clash {
                Some(li) => {
                    let n = &mut self.nodes[li as usize];
                    log::warn!(
                        "zip: {:?} is both a file and a directory: the directory wins, the file is hidden",
                        String::from_utf8_lossy(&full[..comp_end]).replace('\0', "/")
                    );
                    self.skipped += 1;
                    let keep = (n.name_off, n.name_len);
                    *n = Node::dir(n.parent, keep, self.owner.0, self.owner.1);
                    li
                }
                None => {
                    let idx = self.nodes.len() as u32;
                    let name = self.add_name(comp)?;
                    self.nodes
                        .push(Node::dir(top.node, name, self.owner.0, self.owner.1));
                    idx
                }
            };
            let placed = Placed {
                off: path_off,
                len: comp_end as u32,
                node: idx,
            };
            self.stack.push(placed);
            self.last = Some(placed);
        }
    }

    /// Places the entry itself under the innermost open directory, over the
    /// node placed just before when that has the same path (a duplicate:
    /// the later entry wins).
    fn place(&mut self, p: &Pending, full: &[u8]) -> Result<()> {
        let top = *self.stack.last().expect("root stays");
        let comp = &full[if top.len == 0 {
            0
        } else {
            top.len as usize + 1
        }..];
        let dup = self.last.filter(|&l| self.path(l) == full).map(|l| l.node);
        let mut node = p.node;
        node.parent = top.node;
        let idx = match dup {
            Some(li) => {
                log::warn!(
                    "zip: duplicate entry {:?}: the last one in the central directory wins",
                    String::from_utf8_lossy(full).replace('\0', "/")
                );
                self.skipped += 1;
                if self.stack.len() > 1 && self.stack.last().is_some_and(|s| s.node == li) {
                    self.stack.pop();
                }
                let old = &self.nodes[li as usize];
                node.name_off = old.name_off;
                node.name_len = old.name_len;
                node.parent = old.parent;
                self.nodes[li as usize] = node;
                li
            }
            None => {
                let (o, l) = self.add_name(comp)?;
                node.name_off = o;
                node.name_len = l;
                let idx = self.nodes.len() as u32;
                self.nodes.push(node);
                idx
            }
        };
        let placed = Placed {
            off: p.path_off,
            len: p.path_len,
            node: idx,
        };
        if p.is_dir {
            self.stack.push(placed);
        }
        self.last = Some(placed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zip::index::{NODE_SYNTH, S_IFMT};

    const OWNER: (u32, u32) = (1000, 100);
    const FILE: u32 = libc::S_IFREG | 0o644;
    const DIR: u32 = libc::S_IFDIR | 0o750;
    const LINK: u32 = libc::S_IFLNK | 0o777;

    /// Pending entries as phase 1 makes them, in central order, from
    /// (archive name, mode, mtime); a name ending in `/` is a directory.
    fn pending(specs: &[(&str, u32, i64)]) -> (Vec<Pending>, Vec<u8>) {
        let mut paths = Vec::new();
        let pend = specs
            .iter()
            .map(|&(name, mode, mtime)| {
                let path_off = paths.len() as u64;
                paths.extend_from_slice(name.trim_end_matches('/').replace('/', "\0").as_bytes());
                let mut node = Node::dir(0, (0, 0), 0, 0);
                (node.mode, node.mtime, node.flags, node.size) = (mode, mtime, 0, 1);
                Pending {
                    node,
                    path_off,
                    path_len: (paths.len() as u64 - path_off) as u32,
                    is_dir: mode & S_IFMT == libc::S_IFDIR,
                }
            })
            .collect();
        (pend, paths)
    }

    fn walk(specs: &[(&str, u32, i64)]) -> Tree {
        let (pend, paths) = pending(specs);
        build_tree(&pend, &preorder(&pend, &paths), &paths, OWNER).unwrap()
    }

    fn full_path(t: &Tree, i: usize) -> String {
        let n = &t.nodes[i];
        let name = String::from_utf8_lossy(&t.names[n.name_off as usize..][..n.name_len as usize]);
        match n.parent {
            0 => name.into_owned(),
            p => format!("{}/{name}", full_path(t, p as usize)),
        }
    }

    /// The nodes below the root in node order, one line each: path, mode,
    /// mtime ("?" until phase 5) and "synth" for synthesised directories.
    fn show(t: &Tree) -> Vec<String> {
        (1..t.nodes.len())
            .map(|i| {
                let n = &t.nodes[i];
                let time = if n.mtime == i64::MIN {
                    "?".to_string()
                } else {
                    n.mtime.to_string()
                };
                let synth = if n.flags & NODE_SYNTH != 0 {
                    " synth"
                } else {
                    ""
                };
                format!("{} {:o} {time}{synth}", full_path(t, i), n.mode)
            })
            .collect()
    }

    /// The invariants [`Tree`] promises, checked on any walk.
    fn check(t: &Tree) {
        let root = &t.nodes[0];
        assert!(root.is_dir() && root.flags & NODE_SYNTH != 0);
        let mut last_child: Vec<Option<&[u8]>> = vec![None; t.nodes.len()];
        for (i, n) in t.nodes.iter().enumerate().skip(1) {
            let p = n.parent as usize;
            assert!(p < i, "node {i}: parent {p} after it");
            assert!(t.nodes[p].is_dir(), "node {i}: parent {p} not a directory");
            let name = &t.names[n.name_off as usize..][..n.name_len as usize];
            if let Some(prev) = last_child[p] {
                assert!(prev < name, "siblings {prev:?} and {name:?} out of order");
            }
            last_child[p] = Some(name);
        }
    }

    #[test]
    fn preorder_is_depth_first_with_siblings_by_name_and_ties_in_central_order() {
        let (pend, paths) = pending(&[
            ("b", FILE, 0),
            ("a/c", FILE, 0),
            ("a/", DIR, 0),
            ("a b", FILE, 0),
            ("a", FILE, 0),
            ("a/c/d", FILE, 0),
        ]);
        // "a/c" sorts before "a b": components compare first, and the
        // separator sorts before every byte of a name.
        assert_eq!(preorder(&pend, &paths), [2, 4, 1, 5, 3, 0]);
        assert!(preorder(&[], &[]).is_empty());
    }

    #[test]
    fn no_entries_make_a_lone_root() {
        let t = walk(&[]);
        assert_eq!(t.nodes.len(), 1);
        let root = &t.nodes[0];
        assert_eq!(
            (root.mode, root.uid, root.gid),
            (libc::S_IFDIR | 0o755, 1000, 100)
        );
        assert_eq!((root.parent, root.name_len), (0, 0));
        assert!(t.names.is_empty());
    }

    #[test]
    fn missing_directories_are_synthesised_with_0755_and_the_default_owner() {
        let t = walk(&[("a/b/f", FILE, 5), ("a/g", FILE, 6)]);
        check(&t);
        assert_eq!(
            show(&t),
            [
                "a 40755 ? synth",
                "a/b 40755 ? synth",
                "a/b/f 100644 5",
                "a/g 100644 6"
            ]
        );
        for n in &t.nodes[1..3] {
            assert_eq!((n.uid, n.gid, n.size, n.local_offset), (1000, 100, 0, 0));
        }
        assert_eq!(t.names, b"abfg");
        assert_eq!(t.skipped, 0);
    }

    #[test]
    fn a_directory_with_an_entry_is_not_synthesised_even_when_listed_last() {
        let t = walk(&[("a/f", FILE, 5), ("a/", DIR, 3)]);
        check(&t);
        assert_eq!(show(&t), ["a 40750 3", "a/f 100644 5"]);
    }

    #[test]
    fn of_duplicates_the_last_wins_in_the_place_of_the_first() {
        let t = walk(&[
            ("d", FILE, 1),
            ("e", FILE, 2),
            ("d", libc::S_IFREG | 0o600, 3),
        ]);
        check(&t);
        assert_eq!(show(&t), ["d 100600 3", "e 100644 2"]);
        assert_eq!(t.skipped, 1);
        // The winner reuses the first one's name rather than adding another.
        assert_eq!(t.names, b"de");

        let t = walk(&[("x", FILE, 1), ("x", FILE, 2), ("x", LINK, 3)]);
        assert_eq!(show(&t), ["x 120777 3"]);
        assert_eq!(t.skipped, 2);
    }

    #[test]
    fn a_duplicate_directory_keeps_the_children() {
        let t = walk(&[
            ("d/", DIR, 1),
            ("d/f", FILE, 2),
            ("d/", libc::S_IFDIR | 0o700, 3),
        ]);
        check(&t);
        assert_eq!(show(&t), ["d 40700 3", "d/f 100644 2"]);
        assert_eq!(t.skipped, 1);
    }

    #[test]
    fn a_file_and_a_directory_entry_of_one_path_the_later_wins() {
        let t = walk(&[("x/", DIR, 1), ("x", FILE, 2)]);
        assert_eq!(show(&t), ["x 100644 2"]);
        assert_eq!(t.skipped, 1);
        let t = walk(&[("x", FILE, 1), ("x/", DIR, 2), ("x/y", FILE, 3)]);
        check(&t);
        assert_eq!(show(&t), ["x 40750 2", "x/y 100644 3"]);
        assert_eq!(t.skipped, 1);
    }

    #[test]
    fn a_file_that_is_also_a_parent_becomes_a_synthesised_directory() {
        for specs in [
            [("clash", FILE, 1), ("clash/inner", FILE, 2)],
            [("clash/inner", FILE, 2), ("clash", FILE, 1)],
            [("clash", LINK, 1), ("clash/inner", FILE, 2)],
        ] {
            let t = walk(&specs);
            check(&t);
            assert_eq!(show(&t), ["clash 40755 ? synth", "clash/inner 100644 2"]);
            let clash = &t.nodes[1];
            assert_eq!((clash.uid, clash.gid, clash.size), (1000, 100, 0));
            assert_eq!(t.skipped, 1);
            assert_eq!(t.names, b"clashinner");
        }
        // A directory entry replaced by a later file, then needed as a
        // parent: synthesised too, the entry's metadata lost.
        let t = walk(&[("x/", DIR, 1), ("x", FILE, 2), ("x/y", FILE, 3)]);
        check(&t);
        assert_eq!(show(&t), ["x 40755 ? synth", "x/y 100644 3"]);
        assert_eq!(t.skipped, 2);
    }

    #[test]
    fn nodes_come_parents_first_and_siblings_by_name() {
        let t = walk(&[
            ("b/z", FILE, 1),
            ("a b", FILE, 2),
            ("b/", DIR, 3),
            ("a/c/d", FILE, 4),
            ("A", FILE, 5),
            ("a/c/", DIR, 6),
            ("b/y/", DIR, 7),
            ("a/b", FILE, 8),
        ]);
        check(&t);
        assert_eq!(
            show(&t),
            [
                "A 100644 5",
                "a 40755 ? synth",
                "a/b 100644 8",
                "a/c 40750 6",
                "a/c/d 100644 4",
                "a b 100644 2",
                "b 40750 3",
                "b/y 40750 7",
                "b/z 100644 1",
            ]
        );
    }
}
