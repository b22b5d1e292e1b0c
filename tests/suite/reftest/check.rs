//! Every filesystem-core request, answered by an image, compared with what
//! the model says: lookup, getattr, readdir resumed from every cookie, whole
//! and ranged reads, readlink, xattrs, statfs, and the errors of requests
//! that must fail.

use super::tree::{Model, NodeKind};
use mountfs::error::FsError;
use mountfs::fs::{Attr, DirEntry, FileKind, PackFs, ROOT};
use mountfs::image::Image;
use proptest::sample::Index;
use std::collections::HashMap;

/// How a format shows a tree, where formats differ.
pub struct Flavor {
    pub name: &'static str,
    /// Hard links are one inode; else each name is a file of its own
    /// (ZIP stores each name as a separate entry).
    pub hard_links: bool,
    /// Extended attributes are kept (ZIP has none).
    pub xattrs: bool,
    /// The root's mode, owner and mtime are the source's (a ZIP has no
    /// entry for its root).
    pub root_meta: bool,
    /// statfs's `files`, from the model.
    pub files: fn(&Model) -> u64,
    /// The path the image shows for a path in the model.
    pub shown: fn(&[u8]) -> Vec<u8>,
}

/// A read at a random place: which file, where (an edge of a block or of
/// the file, or anywhere up to a little past the end) and how much.
#[derive(Clone, Debug)]
pub struct ReadOp {
    pub file: Index,
    pub at_edge: bool,
    pub offset: Index,
    pub len: u32,
}

fn name_of(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// The name the image shows for model node `i`.
fn shown_name(m: &Model, f: &Flavor, i: usize) -> Vec<u8> {
    name_of(&(f.shown)(&m.nodes[i].path)).to_vec()
}

/// Compares `got` with model node `i`; `Err` names each difference.
fn check_attr(m: &Model, i: usize, got: &Attr, f: &Flavor) -> Result<(), String> {
    let n = &m.nodes[i];
    let (kind, size) = match &n.kind {
        NodeKind::Dir(_) => (FileKind::Dir, None),
        NodeKind::File(d) => (FileKind::File, Some(d.len() as u64)),
        NodeKind::Symlink(t) => (FileKind::Symlink, Some(t.len() as u64)),
    };
    let mut diffs = Vec::new();
    if got.kind != kind {
        diffs.push(format!("kind {:?}, model {kind:?}", got.kind));
    }
    if size.is_some_and(|s| s != got.size) {
        diffs.push(format!("size {}, model {size:?}", got.size));
    }
    if i != 0 || f.root_meta {
        if got.perm != n.perm {
            diffs.push(format!("perm {:o}, model {:o}", got.perm, n.perm));
        }
        if got.mtime != n.mtime as i64 {
            diffs.push(format!("mtime {}, model {}", got.mtime, n.mtime));
        }
        if (got.uid, got.gid) != (n.uid, n.gid) {
            diffs.push(format!(
                "owner {}:{}, model {}:{}",
                got.uid, got.gid, n.uid, n.gid
            ));
        }
    }
    if kind == FileKind::File {
        let want = if f.hard_links { m.nlink(i) } else { 1 };
        if got.nlink != want {
            diffs.push(format!("nlink {}, model {want}", got.nlink));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", m.show(i).display(), diffs.join(", ")))
    }
}

/// The whole listing of `dir`, `page` entries per call, each call resuming
/// from the cookie of the last entry taken (as the kernel does).
fn listing<I: Image>(fs: &PackFs<I>, dir: u64, page: usize) -> Result<Vec<DirEntry>, String> {
    let mut out: Vec<DirEntry> = Vec::new();
    let mut cookie = 0;
    loop {
        let mut got = Vec::new();
        fs.readdir(dir, cookie, &mut |e| {
            got.push(e);
            got.len() < page
        })
        .map_err(|e| format!("readdir from cookie {cookie}: {e}"))?;
        let Some(last) = got.last() else {
            return Ok(out);
        };
        if last.cookie <= cookie {
            return Err(format!("cookie went from {cookie} to {}", last.cookie));
        }
        cookie = last.cookie;
        out.extend(got);
    }
}

fn check_dir<I: Image>(
    fs: &PackFs<I>,
    m: &Model,
    f: &Flavor,
    i: usize,
    attrs: &[Attr],
    page: usize,
) -> Result<(), String> {
    let NodeKind::Dir(children) = &m.nodes[i].kind else {
        unreachable!("a directory")
    };
    let me = &attrs[i];
    let full = listing(fs, me.node, page)?;
    let names: Vec<&[u8]> = full.iter().map(|e| e.name.as_slice()).collect();
    if names.len() < 2 || names[0] != b"." || names[1] != b".." {
        return Err(format!("listing does not start with . and ..: {names:?}"));
    }
    if full[0].ino != me.ino {
        return Err(format!(
            ". has ino {}, the directory {}",
            full[0].ino, me.ino
        ));
    }
    if i != 0 && full[1].ino != attrs[m.nodes[i].parent].ino {
        return Err(format!(".. has ino {}, not its parent's", full[1].ino));
    }
    let mut seen: Vec<&[u8]> = names[2..].to_vec();
    seen.sort();
    let shown: HashMap<Vec<u8>, usize> = children
        .values()
        .map(|&c| (shown_name(m, f, c), c))
        .collect();
    let mut want: Vec<&[u8]> = shown.keys().map(Vec::as_slice).collect();
    want.sort();
    if seen != want {
        return Err(format!("names {seen:?}, model {want:?}"));
    }
    for e in &full[2..] {
        let a = &attrs[shown[&e.name]];
        if (e.ino, e.kind) != (a.ino, a.kind) {
            return Err(format!(
                "entry {:?}: ino/kind {}/{:?}, lookup says {}/{:?}",
                String::from_utf8_lossy(&e.name),
                e.ino,
                e.kind,
                a.ino,
                a.kind
            ));
        }
    }
    // Resuming from every cookie gives exactly the rest of the listing.
    for (k, e) in full.iter().enumerate() {
        let mut rest = Vec::new();
        fs.readdir(me.node, e.cookie, &mut |e| {
            rest.push(e.name);
            true
        })
        .map_err(|err| format!("readdir after entry {k}: {err}"))?;
        if rest
            .iter()
            .map(Vec::as_slice)
            .ne(names[k + 1..].iter().copied())
        {
            return Err(format!("readdir after entry {k}: {rest:?}"));
        }
    }
    Ok(())
}

fn check_file<I: Image>(fs: &PackFs<I>, node: u64, data: &[u8]) -> Result<(), String> {
    let mut got = Vec::with_capacity(data.len());
    fs.read_all(node, |b| {
        got.extend_from_slice(b);
        Ok(())
    })
    .map_err(|e| format!("read: {e}"))?;
    if got != data {
        return Err(format!("read {} bytes, model {}", got.len(), data.len()));
    }
    Ok(())
}

fn check_read<I: Image>(fs: &PackFs<I>, node: u64, data: &[u8], r: &ReadOp) -> Result<(), String> {
    let size = data.len() as u64;
    let off = if r.at_edge {
        let edges = [
            0,
            4095,
            4096,
            4097,
            8192,
            size.saturating_sub(1),
            size,
            size + 1,
        ];
        edges[r.offset.index(edges.len())]
    } else {
        r.offset.index(size as usize + 17) as u64
    };
    let got = fs
        .read(node, off, r.len)
        .map_err(|e| format!("read @{off}+{}: {e}", r.len))?;
    let s = (off as usize).min(data.len());
    let e = (off as usize)
        .saturating_add(r.len as usize)
        .min(data.len());
    if got != data[s..e] {
        return Err(format!(
            "read @{off}+{}: {} bytes that differ from the model's {}",
            r.len,
            got.len(),
            e - s
        ));
    }
    Ok(())
}

fn check_xattrs<I: Image>(
    fs: &PackFs<I>,
    m: &Model,
    i: usize,
    node: u64,
    f: &Flavor,
) -> Result<(), String> {
    let want = if f.xattrs {
        m.nodes[i].xattrs.clone()
    } else {
        Default::default()
    };
    let list = fs.listxattr(node).map_err(|e| format!("listxattr: {e}"))?;
    let mut names: Vec<&[u8]> = list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    names.sort();
    if names.iter().copied().ne(want.keys().map(Vec::as_slice)) {
        return Err(format!("listxattr {names:?}, model {:?}", want.keys()));
    }
    for (k, v) in &want {
        let got = fs.getxattr(node, k).map_err(|e| format!("getxattr: {e}"))?;
        if &got != v {
            return Err(format!("getxattr {}", String::from_utf8_lossy(k)));
        }
    }
    match fs.getxattr(node, b"user.not-in-the-model") {
        Err(FsError::NoXattr) => Ok(()),
        other => Err(format!("getxattr of a missing name: {other:?}")),
    }
}

/// Checks every node of `m` in `fs`, then `reads`; `Err` says where the
/// image and the model part.
pub fn check<I: Image>(
    fs: &PackFs<I>,
    m: &Model,
    f: &Flavor,
    page: usize,
    reads: &[ReadOp],
) -> Result<(), String> {
    let st = fs.statfs();
    let files = (f.files)(m);
    if st.files != files || st.name_max < 255 || !st.block_size.is_power_of_two() {
        return Err(format!("statfs {st:?}, model {files} files"));
    }
    // Lookups, parents before children (the model's order).
    let mut attrs = vec![fs
        .getattr(ROOT)
        .map_err(|e| format!("getattr of the root: {e}"))?];
    for (i, n) in m.nodes.iter().enumerate().skip(1) {
        let parent = attrs[n.parent].node;
        let a = fs
            .lookup(parent, &shown_name(m, f, i))
            .map_err(|e| format!("lookup {}: {e}", m.show(i).display()))?;
        attrs.push(a);
    }
    let mut by_ino: HashMap<u64, usize> = HashMap::new();
    let mut by_inode: HashMap<usize, u64> = HashMap::new();
    for (i, a) in attrs.iter().enumerate() {
        let at = |e: String| format!("{}: {e}", m.show(i).display());
        check_attr(m, i, a, f)?;
        let again = fs
            .getattr(a.node)
            .map_err(|e| at(format!("getattr: {e}")))?;
        if &again != a {
            return Err(at(format!("getattr {again:?}, lookup {a:?}")));
        }
        // One st_ino per inode: hard links share it, nothing else does.
        let inode = if f.hard_links { m.nodes[i].inode } else { i };
        if *by_ino.entry(a.ino).or_insert(inode) != inode
            || *by_inode.entry(inode).or_insert(a.ino) != a.ino
        {
            return Err(at(format!("ino {} shared with another inode", a.ino)));
        }
        check_xattrs(fs, m, i, a.node, f).map_err(at)?;
        match &m.nodes[i].kind {
            NodeKind::Dir(children) => {
                check_dir(fs, m, f, i, &attrs, page).map_err(at)?;
                if !matches!(fs.read(a.node, 0, 10), Err(FsError::IsDir)) {
                    return Err(at("a read of a directory did not fail with IsDir".into()));
                }
                let mut missing = b"missing".to_vec();
                while children.values().any(|&c| shown_name(m, f, c) == missing) {
                    missing.push(b'-');
                }
                if !matches!(fs.lookup(a.node, &missing), Err(FsError::NotFound)) {
                    return Err(at("a missing name was found".into()));
                }
            }
            NodeKind::File(data) => {
                check_file(fs, a.node, data).map_err(at)?;
                if fs.readlink(a.node).is_ok() {
                    return Err(at("readlink of a file succeeded".into()));
                }
            }
            NodeKind::Symlink(t) => {
                let got = fs
                    .readlink(a.node)
                    .map_err(|e| at(format!("readlink: {e}")))?;
                if &got != t {
                    return Err(at(format!("readlink {got:?}, model {t:?}")));
                }
            }
        }
    }
    let files: Vec<usize> = (0..m.nodes.len())
        .filter(|&i| matches!(m.nodes[i].kind, NodeKind::File(_)))
        .collect();
    if files.is_empty() {
        return Ok(());
    }
    for r in reads {
        let i = files[r.file.index(files.len())];
        let NodeKind::File(data) = &m.nodes[i].kind else {
            unreachable!("a file")
        };
        check_read(fs, attrs[i].node, data, r)
            .map_err(|e| format!("{}: {e}", m.show(i).display()))?;
    }
    Ok(())
}
