//! Paths inside an image, resolved the way the kernel resolves them under a
//! mount point, one `PackFs::lookup` per component.
//!
//! `PackFs::resolve` (what `packfs cat` uses) follows no symlinks; Python's
//! `open`, `os.stat` and `os.path.isdir` follow them, so this resolver does:
//! every symlink met before the last component, and the last one unless
//! the caller asks for `lstat`. The image is its own root: `..` stops at
//! the root and an absolute target starts again from the root (as under
//! `chroot`), so no path leaves the image. At most [`MAX_SYMLINKS`] links
//! are followed per call (then ELOOP), so a cycle of links ends.
//!
//! Paths are relative to the image root with or without a leading `/`;
//! `""` and `"/"` are the root; a trailing `/` requires a directory.

use crate::errors::{Error, Result, MAX_SYMLINKS};
use mountfs::fs::{Attr, FileKind, PackFs, ROOT};
use mountfs::open::AnyImage;
use mountfs::FsError;
use std::collections::VecDeque;

/// The entry `path` names; `follow_last` follows a final symlink.
pub fn resolve(fs: &PackFs<AnyImage>, path: &[u8], follow_last: bool) -> Result<Attr> {
    let root = fs.getattr(ROOT)?;
    // Entries from the root to where we are; `..` pops one.
    let mut stack: Vec<Attr> = vec![root];
    let mut todo: VecDeque<Vec<u8>> = components(path).collect();
    let must_be_dir = path.last() == Some(&b'/') && !todo.is_empty();
    let mut links = 0u32;
    while let Some(name) = todo.pop_front() {
        let here = stack.last().expect("the root is never popped");
        if here.kind != FileKind::Dir {
            return Err(FsError::NotDir.into());
        }
        if name == b".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let a = fs.lookup(here.node, &name)?;
        let last = todo.is_empty();
        if a.kind == FileKind::Symlink && (!last || follow_last || must_be_dir) {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(Error::SymlinkLoop);
            }
            let target = fs.readlink(a.node)?;
            if target.is_empty() {
                // As Linux: an empty target names nothing.
                return Err(FsError::NotFound.into());
            }
            if target.first() == Some(&b'/') {
                stack.truncate(1);
            }
            for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
                todo.push_front(c);
            }
            continue;
        }
        stack.push(a);
    }
    let found = stack.pop().expect("the stack holds at least the root");
    if must_be_dir && found.kind != FileKind::Dir {
        return Err(FsError::NotDir.into());
    }
    Ok(found)
}

/// The names in `path`, without empty and `.` components.
fn components(path: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}
