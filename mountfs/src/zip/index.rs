//! The compact in-memory index of a ZIP archive's central directory.
//!
//! One fixed-size [`Node`] per entry (about 80 bytes), base names in one
//! arena, and every directory's children as a range of one `u32` array
//! sorted by name. Node index 0 is the root; node id = index + 1, so entry
//! nodes start at id 2.
//!
//! Build: central records are parsed once; their normalised paths (components
//! joined by NUL so that plain byte order is component-wise order) go to a
//! temporary arena. Sorting the entries by (path, central order) gives a
//! depth-first pre-order with siblings by name; one walk with a stack of open
//! directories then synthesises missing directories, resolves duplicates
//! (last wins) and file/directory clashes (directory wins), and a counting
//! pass lays the children ranges. O(n log n) for the sort, O(n) otherwise; no
//! per-entry hash map or string.

use super::format::*;
use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::zip::central::parse_central;
use packfs_format::zip::*;
use std::sync::atomic::AtomicU64;

pub const S_IFMT: u32 = libc::S_IFMT;

/// One node (72 bytes). Files and symlinks use the data fields; a
/// directory has no data, so its `csize` holds its children range in
/// `Index::children` (start << 32 | len) and its `crc` its number of
/// subdirectories (for nlink).
#[derive(Debug)]
pub struct Node {
    pub local_offset: u64,
    pub csize: u64,
    pub size: u64,
    /// Resolved data offset (0 = not yet; data never starts at 0). Bit 63 is
    /// set once a stored member's CRC has been verified.
    pub data_off: AtomicU64,
    pub mtime: i64,
    pub name_off: u32,
    pub parent: u32,
    pub crc: u32,
    pub uid: u32,
    pub gid: u32,
    /// `S_IFMT` bits and permissions.
    pub mode: u32,
    pub name_len: u16,
    pub method: u16,
    pub flags: u16,
}

pub const NODE_SYNTH: u16 = 1 << 15;
pub const NODE_ENCRYPTED: u16 = 1 << 14;
pub const NODE_LZMA_EOS: u16 = 1 << 1;

impl Node {
    fn dir(parent: u32, name: (u32, u16), uid: u32, gid: u32) -> Node {
        Node {
            local_offset: 0,
            csize: 0,
            size: 0,
            data_off: AtomicU64::new(0),
            mtime: i64::MIN,
            name_off: name.0,
            parent,
            crc: 0,
            uid,
            gid,
            mode: libc::S_IFDIR | 0o755,
            name_len: name.1,
            method: 0,
            flags: NODE_SYNTH,
        }
    }
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == libc::S_IFDIR
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == libc::S_IFLNK
    }
    pub fn child_start(&self) -> u32 {
        (self.csize >> 32) as u32
    }
    pub fn child_len(&self) -> u32 {
        self.csize as u32
    }
    pub fn subdirs(&self) -> u32 {
        self.crc
    }
    pub fn encrypted(&self) -> bool {
        self.flags & NODE_ENCRYPTED != 0
    }
}

/// Archive statistics for `packfs info`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZipInfo {
    /// Records in the central directory.
    pub entries: u64,
    /// Nodes visible in the mounted tree (files, directories, symlinks).
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Directories that had no entry of their own.
    pub synthesised_dirs: u64,
    /// Entries not shown (bad names, duplicates, clashes).
    pub skipped: u64,
    pub encrypted: u64,
    pub uncompressed_bytes: u64,
    pub compressed_bytes: u64,
    pub zip64: bool,
    /// (method id, name, number of entries), by id.
    pub methods: Vec<(u16, &'static str, u64)>,
    /// Bytes before the archive (self-extractor stub).
    pub prefix_bytes: u64,
    /// Bytes of index memory (nodes, children, names).
    pub index_bytes: u64,
}

pub struct Index {
    pub nodes: Vec<Node>,
    pub children: Vec<u32>,
    pub names: Vec<u8>,
    pub info: ZipInfo,
}

struct Pending {
    node: Node,
    path_off: u64,
    path_len: u32,
    is_dir: bool,
}

fn name_err(e: BadName) -> &'static str {
    match e {
        BadName::Empty => "empty name",
        BadName::DotDot => "'..' component (would escape the root)",
        BadName::TooLong => "a component longer than 255 bytes",
        BadName::Nul => "a NUL byte in the name",
    }
}

impl Index {
    pub fn name(&self, n: &Node) -> &[u8] {
        &self.names[n.name_off as usize..n.name_off as usize + n.name_len as usize]
    }

    pub fn children_of(&self, n: &Node) -> &[u32] {
        if !n.is_dir() {
            return &[];
        }
        let s = n.child_start() as usize;
        self.children
            .get(s..s + n.child_len() as usize)
            .unwrap_or(&[])
    }

    /// Reads and indexes the central directory.
    pub fn build(src: &dyn ImageSource, default_owner: (u32, u32)) -> Result<Index> {
        let eocd = read_eocd(src)?;
        let cd = src
            .slice(eocd.cd_offset, eocd.cd_size as usize)
            .map_err(|_| {
                FsError::corrupt(format!(
                    "central directory ({} bytes at {}) is past the end of the file",
                    eocd.cd_size, eocd.cd_offset
                ))
            })?;
        let cap = eocd.entries.min(eocd.cd_size / CENTRAL_LEN as u64) as usize;
        let mut info = ZipInfo {
            zip64: eocd.zip64,
            prefix_bytes: eocd.shift,
            ..Default::default()
        };
        let mut paths: Vec<u8> = Vec::new();
        let mut pend: Vec<Pending> = Vec::with_capacity(cap);
        let mut methods: Vec<(u16, u64)> = Vec::new();
        let mut at = 0usize;
        while at < cd.len() {
            let (e, n) = parse_central(&cd[at..]).map_err(|err| {
                FsError::corrupt(format!(
                    "central directory entry {} (at {}): {err}",
                    info.entries,
                    eocd.cd_offset + at as u64
                ))
            })?;
            at += n;
            info.entries += 1;
            info.zip64 |= e.zip64;
            match methods.iter_mut().find(|(m, _)| *m == e.method) {
                Some((_, c)) => *c += 1,
                None => methods.push((e.method, 1)),
            }
            if e.disk != 0 {
                return Err(FsError::Unsupported(
                    "multi-disk (spanned) ZIP archives".into(),
                ));
            }
            let name = decode_name(&e);
            let off = paths.len() as u64;
            let is_dir_name = match normalise(&name, &mut paths) {
                Ok(d) => d,
                Err(why) => {
                    log::warn!(
                        "zip: skipping entry {:?}: {}",
                        String::from_utf8_lossy(&name),
                        name_err(why)
                    );
                    info.skipped += 1;
                    continue;
                }
            };
            let path_len = u32::try_from(paths.len() as u64 - off)
                .map_err(|_| FsError::corrupt("entry name too long"))?;
            let unix = e.unix_mode();
            let ftype = unix.map(|m| m & S_IFMT).unwrap_or(0);
            let is_dir = is_dir_name
                || ftype == libc::S_IFDIR
                || (unix.is_none() && e.external & 0x10 != 0 && e.size == 0);
            let kind = if is_dir {
                libc::S_IFDIR
            } else if ftype == libc::S_IFLNK {
                libc::S_IFLNK
            } else {
                libc::S_IFREG
            };
            let perm = match unix.map(|m| m & 0o7777) {
                Some(p) if p != 0 || ftype != 0 => p,
                _ if kind == libc::S_IFDIR => 0o755,
                _ if kind == libc::S_IFLNK => 0o777,
                _ => 0o644,
            };
            let (uid, gid) = e.uid_gid.unwrap_or(default_owner);
            let local_offset = e
                .local_offset
                .checked_add(eocd.shift)
                .ok_or_else(|| FsError::corrupt("local header offset overflows"))?;
            let mut flags = e.flags & NODE_LZMA_EOS;
            if e.encrypted() {
                flags |= NODE_ENCRYPTED;
                info.encrypted += 1;
            }
            pend.push(Pending {
                node: Node {
                    local_offset,
                    csize: if is_dir { 0 } else { e.csize },
                    size: if is_dir { 0 } else { e.size },
                    data_off: AtomicU64::new(0),
                    mtime: entry_mtime(&e),
                    name_off: 0,
                    parent: 0,
                    crc: e.crc,
                    uid,
                    gid,
                    mode: kind | perm,
                    name_len: 0,
                    method: e.method,
                    flags,
                },
                path_off: off,
                path_len,
                is_dir,
            });
        }
        methods.sort_unstable();
        info.methods = methods
            .into_iter()
            .map(|(m, c)| (m, method_name(m), c))
            .collect();

        // Depth-first pre-order, later central entries after earlier ones.
        let path = |p: &Pending| -> &[u8] {
            &paths[p.path_off as usize..p.path_off as usize + p.path_len as usize]
        };
        let mut order: Vec<u32> = (0..pend.len() as u32).collect();
        {
            use rayon::slice::ParallelSliceMut;
            order.par_sort_unstable_by(|&a, &b| {
                path(&pend[a as usize])
                    .cmp(path(&pend[b as usize]))
                    .then(a.cmp(&b))
            });
        }

        let mut names: Vec<u8> = Vec::new();
        let mut add_name = |c: &[u8]| -> Result<(u32, u16)> {
            let off = u32::try_from(names.len())
                .map_err(|_| FsError::Unsupported("more than 4 GiB of names".into()))?;
            names.extend_from_slice(c);
            Ok((off, c.len() as u16))
        };
        let mut nodes: Vec<Node> = Vec::with_capacity(pend.len() + pend.len() / 8 + 1);
        nodes.push(Node::dir(0, (0, 0), default_owner.0, default_owner.1));
        // Open directories: (their path in `paths`, node index). The root's path is empty.
        let mut stack: Vec<(u64, u32, u32)> = vec![(0, 0, 0)];
        // The previous node emitted: (its path in `paths`, node index).
        let mut last: Option<(u64, u32, u32)> = None;
        let slice = |o: u64, l: u32| &paths[o as usize..o as usize + l as usize];
        for &pi in &order {
            let p = &pend[pi as usize];
            let full = path(p);
            // Close directories that are not a prefix of this path.
            while stack.len() > 1 {
                let (o, l, _) = *stack.last().expect("non-empty");
                let l = l as usize;
                if full.len() > l && full[l] == 0 && &full[..l] == slice(o, l as u32) {
                    break;
                }
                stack.pop();
            }
            // Open the missing directories between the stack top and the entry.
            loop {
                let (_, l, parent) = *stack.last().expect("root stays");
                let comp_start = if l == 0 { 0 } else { l as usize + 1 };
                let Some(rel) = full[comp_start..].iter().position(|&b| b == 0) else {
                    break;
                };
                let comp_end = comp_start + rel;
                let comp = &full[comp_start..comp_end];
                // The previous node may be a file of this very path: the
                // directory wins.
                let clash = last
                    .filter(|&(o, l, _)| l as usize == comp_end && slice(o, l) == &full[..comp_end])
                    .map(|(_, _, li)| li);
                let idx = match clash {
                    Some(li) => {
                        let n = &mut nodes[li as usize];
                        log::warn!(
                            "zip: {:?} is both a file and a directory: the directory wins, the file is hidden",
                            String::from_utf8_lossy(&full[..comp_end]).replace('\0', "/")
                        );
                        info.skipped += 1;
                        let keep = (n.name_off, n.name_len);
                        *n = Node::dir(n.parent, keep, default_owner.0, default_owner.1);
                        li
                    }
                    None => {
                        let idx = nodes.len() as u32;
                        nodes.push(Node::dir(
                            parent,
                            add_name(comp)?,
                            default_owner.0,
                            default_owner.1,
                        ));
                        idx
                    }
                };
                stack.push((p.path_off, comp_end as u32, idx));
                last = Some((p.path_off, comp_end as u32, idx));
            }
            let (_, l, parent) = *stack.last().expect("root stays");
            let comp = &full[if l == 0 { 0 } else { l as usize + 1 }..];
            let dup = last
                .filter(|&(o, l, _)| slice(o, l) == full)
                .map(|(_, _, li)| li);
            let mut node = Node {
                data_off: AtomicU64::new(0),
                ..p.node
            };
            node.parent = parent;
            let idx = match dup {
                Some(li) => {
                    log::warn!(
                        "zip: duplicate entry {:?}: the last one in the central directory wins",
                        String::from_utf8_lossy(full).replace('\0', "/")
                    );
                    info.skipped += 1;
                    if stack.len() > 1 && stack.last().is_some_and(|s| s.2 == li) {
                        stack.pop();
                    }
                    let old = &nodes[li as usize];
                    node.name_off = old.name_off;
                    node.name_len = old.name_len;
                    node.parent = old.parent;
                    nodes[li as usize] = node;
                    li
                }
                None => {
                    let (o, l) = add_name(comp)?;
                    node.name_off = o;
                    node.name_len = l;
                    let idx = nodes.len() as u32;
                    nodes.push(node);
                    idx
                }
            };
            if p.is_dir {
                stack.push((p.path_off, p.path_len, idx));
            }
            last = Some((p.path_off, p.path_len, idx));
        }
        drop(pend);
        drop(paths);

        // Children ranges: counting sort by parent, stable, so by name.
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
        drop(starts);
        // Synthesised directories take their newest child's time (children
        // follow parents in pre-order, so walk backwards).
        for i in (0..n).rev() {
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
        for node in &nodes[1..] {
            if node.is_dir() {
                info.dirs += 1;
                if node.flags & NODE_SYNTH != 0 {
                    info.synthesised_dirs += 1;
                }
            } else {
                if node.is_symlink() {
                    info.symlinks += 1;
                } else {
                    info.files += 1;
                }
                info.uncompressed_bytes += node.size;
                info.compressed_bytes += node.csize;
            }
        }
        nodes.shrink_to_fit();
        names.shrink_to_fit();
        info.index_bytes =
            (nodes.len() * std::mem::size_of::<Node>() + children.len() * 4 + names.len()) as u64;
        Ok(Index {
            nodes,
            children,
            names,
            info,
        })
    }
}
