//! The files under a directory in the order `packfs.torch.ImageFolder`
//! indexes them, found without a Python object per file.
//!
//! The rules are those of the Python `Image.walk(top, followlinks=True)`
//! that the index was built from before (and torchvision's `make_dataset`
//! over `os.walk`): directories in the order of their paths, files of a
//! directory by name, both compared as Python compares `str` (code points,
//! a byte that is not UTF-8 standing for the surrogate `surrogateescape`
//! makes of it); links followed, a link whose target cannot be told
//! counted as a file; a directory whose inode is one of its own ancestors
//! (a link loop) not entered; a directory that cannot be listed skipped,
//! as `os.walk` skips it without an `onerror`. At ten million samples the
//! Python walk spent most of the index's time making a `DirEntry` and a
//! `str` per file; here a file costs its name's bytes until the paths are
//! handed over in one `bytes`.

use crate::errors::Result;
use mountfs::fs::{DirEntry, FileKind, PackFs};
use mountfs::open::AnyImage;
use mountfs::FsError;
use std::cmp::Ordering;

/// The paths of every non-directory under `top`, each `top/dir/.../name`,
/// in the index's order, kept when `keep` says so (given each path's
/// bytes): one buffer of the paths one after another and the offset of
/// each path's end.
pub(crate) fn files_under(
    fs: &PackFs<AnyImage>,
    top: &[u8],
    keep: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<(Vec<u8>, Vec<u64>)> {
    // Each directory visited: its path and its files' names, one after
    // another (a `Vec` a name would cost more than most names do).
    let mut visited: Vec<(Vec<u8>, Names)> = Vec::new();
    let first = match fs.resolve_path(top, true) {
        Ok(a) => (Some(a.node), vec![a.ino]),
        // Said by the listing of `top` below, which is skipped.
        Err(_) => (None, Vec::new()),
    };
    let mut stack = vec![(top.to_vec(), first.0, first.1)];
    while let Some((path, node, above)) = stack.pop() {
        let Ok(entries) = list(fs, &path, node) else {
            continue;
        };
        let mut files = Names::default();
        for e in entries {
            let target = match e.kind {
                FileKind::Dir => Some((Some(e.node), None)),
                FileKind::Symlink => match fs.resolve_path(&join(&path, &e.name), true) {
                    Ok(a) if a.kind == FileKind::Dir => Some((Some(a.node), Some(a.ino))),
                    _ => None,
                },
                _ => None,
            };
            let Some((dir, ino)) = target else {
                files.push(&e.name);
                continue;
            };
            // The inode's own number, not the listing's: a damaged listing
            // may name one inode and point at another.
            let ino = match (ino, dir) {
                (Some(ino), _) => ino,
                (None, Some(node)) => match fs.getattr(node) {
                    Ok(a) => a.ino,
                    Err(_) => continue,
                },
                (None, None) => continue,
            };
            if above.contains(&ino) {
                continue;
            }
            let mut deeper = above.clone();
            deeper.push(ino);
            stack.push((join(&path, &e.name), dir, deeper));
        }
        visited.push((path, files));
    }
    visited.sort_unstable_by(|a, b| py_cmp(&a.0, &b.0));
    let (mut blob, mut ends) = (Vec::new(), Vec::new());
    for (dir, names) in visited {
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| py_cmp(names.get(a), names.get(b)));
        for k in order {
            let p = join(&dir, names.get(k));
            if keep(&p) {
                blob.extend_from_slice(&p);
                ends.push(blob.len() as u64);
            }
        }
    }
    Ok((blob, ends))
}

/// Names one after another in one buffer.
#[derive(Default)]
struct Names {
    bytes: Vec<u8>,
    /// Where each name ends in `bytes`.
    ends: Vec<u64>,
}

impl Names {
    fn push(&mut self, name: &[u8]) {
        self.bytes.extend_from_slice(name);
        self.ends.push(self.bytes.len() as u64);
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, k: u32) -> &[u8] {
        let k = k as usize;
        let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
        &self.bytes[start..self.ends[k] as usize]
    }
}

/// The listing of the directory at `path`: of `node`, when an entry or
/// the resolution of `top` gave it, else by path (which then says why not).
fn list(fs: &PackFs<AnyImage>, path: &[u8], node: Option<u64>) -> Result<Vec<DirEntry>> {
    let node = match node {
        Some(node) => node,
        None => {
            let a = fs.resolve_path(path, true)?;
            if a.kind != FileKind::Dir {
                return Err(FsError::NotDir.into());
            }
            a.node
        }
    };
    Ok(fs.list(node)?)
}

/// `os.path.join(dir, name)`, or `name` under the root ("").
fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if !dir.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Python's order of the `str`s that `surrogateescape` decodes `a` and `b`
/// to: by code point, each byte that is not UTF-8 the surrogate
/// U+DC80..U+DCFF it becomes. (Plain byte order agrees for UTF-8 text,
/// not once such a byte meets a character above U+DCFF.)
pub(crate) fn py_cmp(a: &[u8], b: &[u8]) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    code_points(a).cmp(code_points(b))
}

fn code_points(s: &[u8]) -> impl Iterator<Item = u32> + '_ {
    s.utf8_chunks().flat_map(|chunk| {
        chunk
            .valid()
            .chars()
            .map(u32::from)
            .chain(chunk.invalid().iter().map(|&b| 0xDC00 + u32::from(b)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_orders_escaped_bytes_below_private_use_characters() {
        // "\udcff" < "\ue000" in Python; as bytes b"\xff" > b"\xee\x80\x80".
        assert_eq!(py_cmp(b"\xff", "\u{e000}".as_bytes()), Ordering::Less);
        assert_eq!(py_cmp("\u{d7ff}".as_bytes(), b"\x80"), Ordering::Less);
        assert_eq!(py_cmp(b"a-b", b"a/b"), Ordering::Less);
        assert_eq!(py_cmp(b"ab", b"ab\x80"), Ordering::Less);
    }
}
