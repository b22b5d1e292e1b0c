//! The listing of a tree that every workload is planned from.
//!
//! The raw tree is scanned once, before anything is timed; each workload
//! then addresses the same relative paths under every side's root, so the
//! sides do identical work. "Tree order" is a depth-first walk with the
//! names of each directory sorted bytewise, as `find | sort`-like tools and
//! most dataset loaders see it.

use super::error::{BenchError, Context};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the tree's root; empty for the root itself.
    pub rel: PathBuf,
    pub kind: Kind,
    /// Bytes, for regular files; 0 otherwise.
    pub size: u64,
}

pub struct Tree {
    /// The root first, then every entry in tree order.
    pub entries: Vec<Entry>,
}

impl Tree {
    pub fn scan(root: &Path) -> Result<Tree, BenchError> {
        let meta = std::fs::metadata(root).with_context(|| format!("{}", root.display()))?;
        if !meta.is_dir() {
            return Err(BenchError::Refused(format!(
                "{}: not a directory",
                root.display()
            )));
        }
        let mut entries = vec![Entry {
            rel: PathBuf::new(),
            kind: Kind::Dir,
            size: 0,
        }];
        scan_dir(root, Path::new(""), &mut entries)?;
        Ok(Tree { entries })
    }

    pub fn files(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.kind == Kind::File)
    }

    pub fn dirs(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.kind == Kind::Dir)
    }

    pub fn count(&self, kind: Kind) -> u64 {
        self.entries.iter().filter(|e| e.kind == kind).count() as u64
    }

    pub fn file_bytes(&self) -> u64 {
        self.files().map(|e| e.size).sum()
    }
}

fn scan_dir(root: &Path, rel: &Path, out: &mut Vec<Entry>) -> Result<(), BenchError> {
    let dir = root.join(rel);
    let mut children: Vec<(PathBuf, std::fs::FileType, u64)> = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e.with_context(|| format!("listing {}", dir.display()))?;
        let m = e
            .metadata()
            .with_context(|| format!("{}", e.path().display()))?;
        children.push((rel.join(e.file_name()), m.file_type(), m.len()));
    }
    children.sort_by(|a, b| {
        a.0.file_name()
            .map(|n| n.as_bytes())
            .cmp(&b.0.file_name().map(|n| n.as_bytes()))
    });
    for (p, ft, len) in children {
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else if ft.is_symlink() {
            Kind::Symlink
        } else {
            Kind::Other
        };
        out.push(Entry {
            rel: p.clone(),
            kind,
            size: if kind == Kind::File { len } else { 0 },
        });
        if kind == Kind::Dir {
            scan_dir(root, &p, out)?;
        }
    }
    Ok(())
}
