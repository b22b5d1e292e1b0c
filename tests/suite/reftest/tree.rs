//! Random trees: what proptest generates, the in-memory model built from it,
//! and the same tree written to disk for the packers.
//!
//! A tree is generated as a flat list of entries, each naming its parent by
//! an index into the directories made before it. Shrinking such a list
//! (dropping entries, lowering indices and sizes) always gives another
//! valid tree, so a failure shrinks to the few entries it needs. Entries
//! that cannot be placed (a name already taken, "." or "..", a hard link
//! before any file) are left out of the model and the disk alike.

use crate::common::{bytes, is_root};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One generated entry.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Which directory made so far (the root first) holds it.
    pub parent: Index,
    pub name: Vec<u8>,
    pub kind: SpecKind,
    pub perm: u16,
    pub mtime: u32,
    /// Used when the test runs as root (else the files are the runner's).
    pub owner: (u32, u32),
    /// `user.*` attributes, on directories and files.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone, Debug)]
pub enum SpecKind {
    Dir,
    File {
        size: usize,
        seed: u64,
        text: bool,
    },
    Symlink(Vec<u8>),
    /// Another name of one of the files made so far.
    HardLink(Index),
}

/// Name bytes: plain, odd (spaces, quotes, glob and escape characters, a
/// newline, UTF-8 and bytes that are not UTF-8), and at the 255-byte limit.
fn name() -> impl Strategy<Value = Vec<u8>> {
    let plain: Vec<u8> = b"abcdefgh".to_vec();
    let mut odd: Vec<u8> = b"az09 -_.~#%'\"\\*?[]{}$\n\t".to_vec();
    odd.extend([0xc3, 0xa9, 0xe5, 0x90, 0x8d, 0xff, 0x80]);
    prop_oneof![
        6 => vec(select(plain), 1..6),
        3 => vec(select(odd), 1..10),
        1 => (250usize..=255, any::<u8>()).prop_map(|(n, c)| {
            let c = b'a' + c % 26;
            vec![c; n]
        }),
    ]
}

/// File sizes around the 4 KiB and 8 KiB block edges (the images use
/// 4 KiB blocks among others), empty files, tails that share fragment
/// blocks, and now and then a file past a 128 KiB block.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(0usize),
        4 => 1usize..200,
        3 => 4093usize..4100,
        2 => 8189usize..8196,
        3 => 0usize..20_000,
        1 => 131_070usize..131_075,
    ]
}

fn kind() -> impl Strategy<Value = SpecKind> {
    prop_oneof![
        3 => Just(SpecKind::Dir),
        6 => (size(), any::<u64>(), any::<bool>())
            .prop_map(|(size, seed, text)| SpecKind::File { size, seed, text }),
        2 => prop_oneof![
            vec(select(b"ab./-_ \xc3\xa9".to_vec()), 1..40),
            Just(b"/etc/hostname".to_vec()),
            Just(b"../../outside".to_vec()),
        ]
        .prop_map(SpecKind::Symlink),
        2 => any::<Index>().prop_map(SpecKind::HardLink),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<Index>(),
        name(),
        kind(),
        select(vec![
            0o755u16, 0o644, 0o600, 0o700, 0o4755, 0o2750, 0o1777, 0o444,
        ]),
        // Within ZIP's signed 32-bit extended timestamp.
        prop_oneof![Just(0u32), 1u32..i32::MAX as u32, Just(i32::MAX as u32)],
        select(vec![
            (0u32, 0u32),
            (1000, 1000),
            (1234, 5678),
            (65534, 65534),
        ]),
        vec(
            (
                vec(select(b"abcxyz.-".to_vec()), 1..12),
                vec(any::<u8>(), 0..64),
            ),
            0..3,
        ),
    )
        .prop_map(|(parent, name, kind, perm, mtime, owner, xattrs)| Spec {
            parent,
            name,
            kind,
            perm,
            mtime,
            owner,
            xattrs: xattrs
                .into_iter()
                .map(|(n, v)| ([b"user.".as_slice(), &n].concat(), v))
                .collect(),
        })
}

/// A tree of up to `max` entries below the root.
pub fn specs(max: usize) -> impl Strategy<Value = Vec<Spec>> {
    vec(spec(), 0..max)
}

/// What the model knows of one name.
#[derive(Debug)]
pub struct Node {
    /// Relative path; empty for the root.
    pub path: Vec<u8>,
    pub parent: usize,
    pub kind: NodeKind,
    /// The inode: the index of its first name (hard links share it).
    pub inode: usize,
    pub perm: u16,
    pub mtime: u32,
    pub uid: u32,
    pub gid: u32,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Debug)]
pub enum NodeKind {
    Dir(BTreeMap<Vec<u8>, usize>),
    File(Vec<u8>),
    Symlink(Vec<u8>),
}

/// The tree as the reader must show it; `nodes[0]` is the root.
#[derive(Debug)]
pub struct Model {
    pub nodes: Vec<Node>,
}

impl Model {
    /// Places every spec that can be placed (see the module doc).
    pub fn build(specs: &[Spec]) -> Model {
        // SAFETY: no preconditions.
        let me = unsafe { (libc::geteuid(), libc::getegid()) };
        let root = is_root();
        let mut nodes = vec![Node {
            path: Vec::new(),
            parent: 0,
            kind: NodeKind::Dir(BTreeMap::new()),
            inode: 0,
            perm: 0o755,
            mtime: 1_000_000_000,
            uid: me.0,
            gid: me.1,
            xattrs: BTreeMap::new(),
        }];
        let mut dirs = vec![0usize];
        let mut files = Vec::new();
        for s in specs {
            if s.name == b"." || s.name == b".." {
                continue;
            }
            let parent = dirs[s.parent.index(dirs.len())];
            let NodeKind::Dir(children) = &nodes[parent].kind else {
                unreachable!("parents are directories")
            };
            if children.contains_key(&s.name) {
                continue;
            }
            let path = if parent == 0 {
                s.name.clone()
            } else {
                [nodes[parent].path.as_slice(), b"/", &s.name].concat()
            };
            let at = nodes.len();
            let (uid, gid) = if root { s.owner } else { me };
            let mut node = Node {
                path,
                parent,
                kind: NodeKind::Dir(BTreeMap::new()),
                inode: at,
                perm: s.perm,
                mtime: s.mtime,
                uid,
                gid,
                xattrs: s.xattrs.iter().cloned().collect(),
            };
            match &s.kind {
                SpecKind::Dir => {
                    // Searchable by its owner, so the packer can walk it
                    // when the test does not run as root.
                    node.perm |= 0o700;
                    dirs.push(at);
                }
                SpecKind::File { size, seed, text } => {
                    node.kind = NodeKind::File(bytes(*seed, *size, *text));
                    files.push(at);
                }
                SpecKind::Symlink(target) => {
                    node.kind = NodeKind::Symlink(target.clone());
                    node.perm = 0o777;
                    node.xattrs.clear();
                }
                SpecKind::HardLink(i) => {
                    if files.is_empty() {
                        continue;
                    }
                    let first = &nodes[files[i.index(files.len())]];
                    let NodeKind::File(data) = &first.kind else {
                        unreachable!("files are files")
                    };
                    node = Node {
                        path: node.path,
                        parent,
                        kind: NodeKind::File(data.clone()),
                        inode: first.inode,
                        perm: first.perm,
                        mtime: first.mtime,
                        uid: first.uid,
                        gid: first.gid,
                        xattrs: first.xattrs.clone(),
                    };
                }
            }
            let NodeKind::Dir(children) = &mut nodes[parent].kind else {
                unreachable!("parents are directories")
            };
            children.insert(s.name.clone(), at);
            nodes.push(node);
        }
        Model { nodes }
    }

    /// Names that share `n`'s inode, itself included.
    pub fn nlink(&self, n: usize) -> u32 {
        let inode = self.nodes[n].inode;
        self.nodes.iter().filter(|m| m.inode == inode).count() as u32
    }

    /// Distinct inodes, the root included.
    pub fn inodes(&self) -> usize {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| n.inode == *i)
            .count()
    }

    /// Writes the tree under `root` (an empty directory), metadata last:
    /// owners before modes (chown clears set-id bits), times deepest first
    /// (creating an entry changes its directory's mtime).
    pub fn write(&self, root: &Path, xattrs: bool) {
        let at = |n: &Node| root.join(OsStr::from_bytes(&n.path));
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            let p = at(n);
            match &n.kind {
                _ if n.inode != i => std::fs::hard_link(at(&self.nodes[n.inode]), &p).unwrap(),
                NodeKind::Dir(_) => std::fs::create_dir(&p).unwrap(),
                NodeKind::File(data) => std::fs::write(&p, data).unwrap(),
                NodeKind::Symlink(t) => {
                    std::os::unix::fs::symlink(OsStr::from_bytes(t), &p).unwrap()
                }
            }
        }
        for (i, n) in self.nodes.iter().enumerate().rev() {
            if n.inode != i {
                continue;
            }
            let p = at(n);
            if xattrs {
                for (k, v) in &n.xattrs {
                    xattr::set(&p, OsStr::from_bytes(k), v)
                        .unwrap_or_else(|e| panic!("{}: setxattr: {e}", p.display()));
                }
            }
            let c = CString::new(p.as_os_str().as_bytes()).unwrap();
            // SAFETY: a valid path; the kernel reports errors by value.
            unsafe {
                if is_root() {
                    assert_eq!(libc::lchown(c.as_ptr(), n.uid, n.gid), 0, "lchown");
                }
                if !matches!(n.kind, NodeKind::Symlink(_)) {
                    assert_eq!(libc::chmod(c.as_ptr(), n.perm as libc::mode_t), 0, "chmod");
                }
                let ts = libc::timespec {
                    tv_sec: n.mtime as libc::time_t,
                    tv_nsec: 0,
                };
                let r = libc::utimensat(
                    libc::AT_FDCWD,
                    c.as_ptr(),
                    [ts, ts].as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                );
                assert_eq!(r, 0, "utimensat {}", p.display());
            }
        }
    }

    /// The path of node `n` under `root`, for messages.
    pub fn show(&self, n: usize) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(&self.nodes[n].path))
    }
}
