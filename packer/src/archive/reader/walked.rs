//! A directory walked straight into the namespace, for a tree too large to
//! hold in memory first.
//!
//! `pack DIR` and a directory among sources first walk into a
//! [`crate::tree::Tree`], whose layout is what a small tree has always
//! been packed with. A walk that finds more than the stage's share of
//! `--memory` gives that tree up and walks again through [`Streamed`]:
//! each directory's entries join the stage as they are read, in the same
//! breadth-first order, their files' data goes to the writer by path, and
//! the stage spills to sorted runs between directories as an archive's
//! does between members. What stays in memory besides the stage is the
//! walk's queue of directories found and not yet read, and the first path
//! of each file with several links (its further names are linked to it).

use super::{cross_link, Reader};
use crate::archive::stage::{stage_error, Added, Entry, StageError};
use crate::tree::Kind;
use crate::walk::{self, Scanned, Subdir, Visit};
use crate::{xattrs, PackError};
use std::collections::HashMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// The visitor of a streamed walk (see the module doc).
struct Streamed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    root: &'r Path,
    source: u16,
    /// The first path (components joined by `/`) of each file with
    /// several links, by (dev, ino).
    links: HashMap<(u64, u64), Vec<u8>>,
    /// Whether the files' `st_ino` is recorded (see `walk::stable_inodes`).
    stable_ino: bool,
}

/// Walks `root` (source number `source`) into the reader's namespace.
pub(super) fn stream(reader: &mut Reader<'_>, source: u16, root: &Path) -> Result<(), PackError> {
    let meta = fs::metadata(root).map_err(PackError::io(root))?;
    let xattrs = xattrs::read(root).map_err(PackError::io(root))?;
    let entry = entry_of(&meta, None, xattrs, source);
    match reader.stage.add(&[], entry) {
        Ok(Added::Inode(_)) => {}
        Ok(_) => unreachable!("a directory over the root always merges"),
        Err(e) => return Err(stage_error(root, None, e, &reader.names)),
    }
    let (opts, skip) = (reader.opts, reader.skip);
    let mut visit = Streamed {
        reader,
        root,
        source,
        links: HashMap::new(),
        stable_ino: walk::stable_inodes(root),
    };
    walk::breadth_first(root, opts, skip, &mut visit)?;
    Ok(())
}

/// What the stage keeps of a walked entry.
fn entry_of(
    meta: &fs::Metadata,
    target: Option<&[u8]>,
    mut xattrs: Vec<xattrs::Xattr>,
    source: u16,
) -> Entry {
    let kind = walk::kind_of(meta.file_type());
    let mut e = Entry::new(kind, source);
    e.mode = (meta.mode() & 0o7777) as u16;
    (e.uid, e.gid, e.mtime) = (meta.uid(), meta.gid(), meta.mtime());
    if kind == Kind::File {
        e.size = meta.len();
    }
    if matches!(kind, Kind::BlockDev | Kind::CharDev) {
        e.dev = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    }
    e.target = target.unwrap_or_default().to_vec();
    xattrs.sort();
    e.xattrs = xattrs;
    e
}

impl Visit for Streamed<'_, '_> {
    fn entries(
        &mut self,
        _dir: u32,
        rel: &Path,
        entries: Vec<Scanned>,
    ) -> Result<Option<Vec<Subdir>>, PackError> {
        let r = &mut *self.reader;
        r.cancelled()?;
        let k = self.source;
        let dir = self.root.join(rel);
        let mut comps: Vec<&[u8]> = rel.iter().map(|c| c.as_bytes()).collect();
        let depth = comps.len();
        let mut subdirs = Vec::new();
        for s in &entries {
            comps.truncate(depth);
            comps.push(s.name.as_bytes());
            let path = dir.join(&s.name);
            let shown =
                |e: StageError, names: &[std::path::PathBuf]| stage_error(&path, None, e, names);
            let key = (s.meta.dev(), s.meta.ino());
            let linked = !s.meta.is_dir() && s.meta.nlink() > 1;
            if let Some(first) = self.links.get(&key).filter(|_| linked) {
                // A further name of a file with several links.
                let target: Vec<&[u8]> = first.split(|&b| b == b'/').collect();
                match r.stage.link(&comps, &target, k) {
                    Err(StageError::LinkTargetMissing { .. }) if r.runs.is_some() => {
                        cross_link(&mut r.stage, &mut r.runs, &comps, &target, k)
                    }
                    other => other,
                }
                .map_err(|e| shown(e, &r.names))?;
                continue;
            }
            let target = s.target.as_ref().map(|t| t.as_bytes());
            let e = entry_of(&s.meta, target, s.xattrs.clone(), k);
            let kind = e.kind;
            let added = r.stage.add(&comps, e).map_err(|e| shown(e, &r.names))?;
            if linked {
                self.links.insert(key, comps.join(&b'/'));
            }
            if kind == Kind::Dir {
                subdirs.push((0, s.name.clone(), false));
                continue;
            }
            let (Added::Inode(si), Kind::File) = (added, kind) else {
                continue;
            };
            let id = r.next_id()?;
            r.stage.set_data(si, id);
            let size = s.meta.len();
            let maybe_sparse = s.meta.blocks().saturating_mul(512) < size;
            let src_ino = if self.stable_ino { s.meta.ino() } else { 0 };
            r.emit_file(id, Arc::from(path.as_path()), size, maybe_sparse, src_ino)?;
        }
        // Between directories nothing refers to the stage's inodes (a
        // further link finds its first name by path), so it may spill.
        r.spill_if_full()?;
        Ok(Some(subdirs))
    }
}
