//! Paths inside an image, resolved the way the kernel resolves them under a
//! mount point, one [`PackFs::lookup`] per component: what the command line
//! (`packfs cat`, `ls`, `extract --path`) and the Python package use; a
//! mount gets its paths resolved by the kernel.
//!
//! Every symlink met before the last component is followed, and the last
//! one unless the caller asks for the link itself (`lstat`). The image is
//! its own root: `..` stops at the root and an absolute target starts again
//! from the root (as under `chroot`), so no path leaves the image. At most
//! [`MAX_SYMLINKS`] links are followed per call (then ELOOP), so a cycle of
//! links ends.
//!
//! Paths are relative to the image root with or without a leading `/`;
//! `""` and `"/"` are the root; `.` and a trailing `/` require a directory
//! (and follow a symlink before them).

use crate::error::{FsError, Result};
use crate::fs::PackFs;
use crate::image::{Attr, FileKind, Image, ROOT};
use std::collections::VecDeque;

/// Symlinks followed in one resolution before it fails with ELOOP, as
/// Linux's limit.
pub const MAX_SYMLINKS: u32 = 40;

/// One step of a path: a name to look up, or `Here` (a `.` component, or a
/// trailing `/`), which names the entry reached so far and requires it to
/// be a directory. `Here` counts as a further component, so a symlink
/// before it is followed (`link/.`, `link/`), as the kernel does; in a
/// symlink's target too (a target `f/` names a directory or nothing).
enum Step {
    Name(Vec<u8>),
    Here,
}

impl<I: Image> PackFs<I> {
    /// The entry `path` names; `follow_last` follows a final symlink.
    pub fn resolve_path(&self, path: &[u8], follow_last: bool) -> Result<Attr> {
        let root = self.getattr(ROOT)?;
        // Entries from the root to where we are; `..` pops one.
        let mut stack: Vec<Attr> = vec![root];
        let mut todo: VecDeque<Step> = steps(path).collect();
        let mut links = 0u32;
        while let Some(step) = todo.pop_front() {
            let here = stack.last().expect("the root is never popped");
            if here.kind != FileKind::Dir {
                return Err(FsError::NotDir);
            }
            let name = match step {
                Step::Here => continue,
                Step::Name(name) => name,
            };
            if name == b".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            let a = self.lookup(here.node, &name)?;
            if a.kind == FileKind::Symlink && (!todo.is_empty() || follow_last) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(FsError::SymlinkLoop);
                }
                let target = self.readlink(a.node)?;
                if target.is_empty() {
                    // As Linux: an empty target names nothing.
                    return Err(FsError::NotFound);
                }
                if target.first() == Some(&b'/') {
                    stack.truncate(1);
                }
                for c in steps(&target).collect::<Vec<_>>().into_iter().rev() {
                    todo.push_front(c);
                }
                continue;
            }
            stack.push(a);
        }
        Ok(stack.pop().expect("the stack holds at least the root"))
    }
}

/// The steps of `path`: its names, `Here` for each `.` and for a trailing
/// `/`; empty components (`a//b`, a leading `/`) are nothing.
fn steps(path: &[u8]) -> impl Iterator<Item = Step> + '_ {
    let trailing = (path.last() == Some(&b'/')).then_some(Step::Here);
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(|c| match c {
            b"." => Step::Here,
            name => Step::Name(name.to_vec()),
        })
        .chain(trailing)
}
