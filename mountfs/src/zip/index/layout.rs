//! Phases 4 and 5 of [`Index::build`](super::Index::build): the children
//! ranges of the finished tree, then the times of synthesised directories.

use super::node::{Node, NODE_SYNTH};
use crate::error::{FsError, Result};

/// Phase 4: every directory's children as one range of a shared array.
///
/// Input: the nodes of [`super::tree::build_tree`] (root first, every
/// other node's `parent` set). Output: the children array, with each
/// node's children contiguous and in node order (a stable counting sort by
/// parent), which is name order; each directory's `csize` holds its range
/// (start << 32 | len) and its `crc` its number of subdirectories, which
/// its nlink needs. Files keep their data fields.
pub(super) fn lay_out_children(nodes: &mut [Node]) -> Result<Vec<u32>> {
    let n = nodes.len();
    if n > u32::MAX as usize {
        return Err(FsError::Unsupported("more than 4G entries".into()));
    }
    let mut counts = vec![0u32; n];
    for node in &nodes[1..] {
        counts[node.parent as usize] += 1;
    }
    let mut start = 0u32;
    let mut starts = Vec::with_capacity(n);
    for (i, c) in counts.iter().enumerate() {
        starts.push(start);
        let node = &mut nodes[i];
        if node.is_dir() {
            node.csize = ((start as u64) << 32) | *c as u64;
            node.crc = 0;
        }
        start += *c;
    }
    drop(counts);
    let mut children = vec![0u32; n - 1];
    for i in 1..n {
        let par = nodes[i].parent as usize;
        children[starts[par] as usize] = i as u32;
        starts[par] += 1;
        if nodes[i].is_dir() {
            nodes[par].crc += 1;
        }
    }
    Ok(children)
}

/// Phase 5: synthesised directories take their newest child's time, as
/// the nearest thing to when they were last changed.
///
/// Input: the nodes and children of [`lay_out_children`], every parent
/// before its children. Output: every synthesised directory's `mtime` is
/// the largest of its children's (synthesised subdirectories included,
/// already dated), or 0 with no children; other nodes are unchanged.
pub(super) fn date_synthesised_dirs(nodes: &mut [Node], children: &[u32]) {
    // Children follow parents in pre-order, so walking backwards dates a
    // synthesised child before its parent looks at it.
    for i in (0..nodes.len()).rev() {
        if nodes[i].is_dir() && nodes[i].flags & NODE_SYNTH != 0 {
            let s = nodes[i].child_start() as usize;
            let newest = children[s..s + nodes[i].child_len() as usize]
                .iter()
                .map(|&c| nodes[c as usize].mtime)
                .max()
                .unwrap_or(0);
            nodes[i].mtime = if newest == i64::MIN { 0 } else { newest };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: u32 = libc::S_IFREG | 0o644;
    const DIR: u32 = libc::S_IFDIR | 0o755;

    /// A node under `parent`; files get data fields for the layout to leave
    /// alone, directories a stale `crc` for it to overwrite.
    fn node(parent: u32, mode: u32, mtime: i64, synth: bool) -> Node {
        let mut n = Node::dir(parent, (0, 0), 0, 0);
        n.mode = mode;
        n.mtime = mtime;
        n.flags = if synth { NODE_SYNTH } else { 0 };
        (n.csize, n.crc) = (123, 0xdead);
        n
    }

    fn ranges(nodes: &[Node]) -> Vec<(u32, u32, u32)> {
        nodes
            .iter()
            .filter(|n| n.is_dir())
            .map(|n| (n.child_start(), n.child_len(), n.subdirs()))
            .collect()
    }

    #[test]
    fn children_are_laid_out_by_parent_in_node_order() {
        let mut nodes = vec![
            node(0, DIR, 0, true),   // 0: root
            node(0, DIR, 0, false),  // 1: /a
            node(1, FILE, 0, false), // 2: /a/x
            node(0, FILE, 0, false), // 3: /b
            node(1, DIR, 0, false),  // 4: /a/y (empty)
            node(0, DIR, 0, true),   // 5: /c
            node(5, FILE, 0, false), // 6: /c/z
        ];
        let children = lay_out_children(&mut nodes).unwrap();
        assert_eq!(children, [1, 3, 5, 2, 4, 6]);
        // (start, len, subdirectories) of root, /a, /a/y, /c.
        assert_eq!(ranges(&nodes), [(0, 3, 2), (3, 2, 1), (5, 0, 0), (5, 1, 0)]);
        for f in [2, 3, 6] {
            assert_eq!((nodes[f].csize, nodes[f].crc), (123, 0xdead));
        }
    }

    #[test]
    fn a_lone_root_has_an_empty_range() {
        let mut nodes = vec![node(0, DIR, 0, true)];
        assert!(lay_out_children(&mut nodes).unwrap().is_empty());
        assert_eq!(ranges(&nodes), [(0, 0, 0)]);
    }

    #[test]
    fn synthesised_directories_take_their_newest_childs_time() {
        let mut nodes = vec![
            node(0, DIR, i64::MIN, true), // 0: root
            node(0, DIR, i64::MIN, true), // 1: /s (synthesised)
            node(1, FILE, 10, false),     // 2: /s/f
            node(1, DIR, i64::MIN, true), // 3: /s/t (synthesised)
            node(3, FILE, 30, false),     // 4: /s/t/g
            node(0, DIR, 5, false),       // 5: /e (has an entry)
            node(5, FILE, 50, false),     // 6: /e/h
            node(0, FILE, 20, false),     // 7: /k
        ];
        let children = lay_out_children(&mut nodes).unwrap();
        date_synthesised_dirs(&mut nodes, &children);
        let times: Vec<_> = nodes.iter().map(|n| n.mtime).collect();
        // /s/t from /s/t/g, /s from /s/t; /e keeps its own time and the
        // root sees only /e's, not /e/h's.
        assert_eq!(times, [30, 30, 10, 30, 30, 5, 50, 20]);
    }

    #[test]
    fn a_synthesised_directory_with_no_time_to_take_gets_zero() {
        let mut nodes = vec![node(0, DIR, i64::MIN, true)];
        let children = lay_out_children(&mut nodes).unwrap();
        date_synthesised_dirs(&mut nodes, &children);
        assert_eq!(nodes[0].mtime, 0);
        // Nor does "no time yet" leak from a child that has none.
        let mut nodes = vec![node(0, DIR, i64::MIN, true), node(0, DIR, i64::MIN, false)];
        let children = lay_out_children(&mut nodes).unwrap();
        date_synthesised_dirs(&mut nodes, &children);
        assert_eq!((nodes[0].mtime, nodes[1].mtime), (0, i64::MIN));
    }
}
