//! The directory walk: scans a source directory (with an overlay laid over
//! it, if any) into a [`Tree`], the write side's data model (`crate::tree`).
//! Directories are read on the I/O pool, their entries added to the tree
//! in a fixed breadth-first order.

use crate::exclude::Excludes;
use crate::tree::{Inode, Kind, Tree};
use crate::xattrs::{self, Xattr};
use crate::{io_pool, statfs, PackError, PackOptions};
use packfs_format::squashfs::inode::encode_dev;
use packfs_format::squashfs::{INVALID_XATTR, MAX_NAME_LEN};
use rayon::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

struct Walker<'a> {
    opts: &'a PackOptions,
    tree: Tree,
    id_index: HashMap<u32, u16>,
    /// (dev, ino) of multiply-linked non-directories already seen.
    links: HashMap<(u64, u64), u32>,
    /// Whether [`Inode::src_ino`] is recorded (see [`stable_inodes`]).
    stable_ino: bool,
    /// Bytes the tree may take ([`Tree::memory`]) before the walk gives up
    /// (see [`walk_within`]).
    limit: u64,
}

/// Whether inode numbers under `root` stay the same while the pack runs, so
/// that a file opened for its data can be told from one renamed over it:
/// not on a FUSE filesystem, whose server may number a file afresh each
/// time the kernel looks it up again (sshfs, s3fs). An error is "no".
pub(crate) fn stable_inodes(root: &Path) -> bool {
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    statfs::fs_type(root).is_some_and(|t| t != FUSE_SUPER_MAGIC)
}

/// One directory entry as read by an I/O thread, before it joins the tree.
#[derive(Clone)]
pub(crate) struct Scanned {
    pub name: OsString,
    pub meta: fs::Metadata,
    /// Symlinks: the target.
    pub target: Option<OsString>,
    pub xattrs: Vec<Xattr>,
    /// Read from the overlay, not the source.
    pub from_overlay: bool,
}

/// The kind of an entry of type `ft`.
pub(crate) fn kind_of(ft: fs::FileType) -> Kind {
    if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_fifo() {
        Kind::Fifo
    } else {
        Kind::Socket
    }
}

/// A subdirectory a [`Visit`] wants walked: its id for the visitor, its
/// name, and whether it came from the overlay.
pub(crate) type Subdir = (u32, OsString, bool);

/// What the breadth-first walk ([`breadth_first`]) hands each directory's
/// entries to: the tree of `pack DIR`, or the namespace of a pack that may
/// spill (`archive::reader`).
pub(crate) trait Visit {
    /// Takes the entries of the directory the visitor knows as `dir`
    /// (`rel` below the root; the root is 0), sorted by name, excluded ones
    /// and the image being written left out. Returns the subdirectories to
    /// walk, or `None` to stop the walk there.
    fn entries(
        &mut self,
        dir: u32,
        rel: &Path,
        entries: Vec<Scanned>,
    ) -> Result<Option<Vec<Subdir>>, PackError>;
}

/// Directories being read (or read and waiting to be added to the tree) at
/// most during the walk: a few per I/O thread, so one slow directory does not
/// idle the others, while the scanned-but-unassembled entries stay bounded.
pub const WALK_WINDOW: usize = 4 * io_pool::IO_THREADS;

/// Directories with more entries than this have them `lstat`ed by several
/// I/O threads (a flat directory of a million files must not serialise the
/// walk).
const PAR_STAT_MIN: usize = 512;

/// Where one directory of the tree is read: the source, the overlay, or
/// both merged (a directory present in both).
#[derive(Clone, Debug)]
struct DirAt {
    rel: PathBuf,
    in_source: bool,
    in_overlay: bool,
}

impl DirAt {
    /// Where the subdirectory `name` of this directory is read. A source
    /// directory is merged with the overlay's of the same path (if any); one
    /// the overlay added is read there only.
    fn child(&self, name: &OsStr, from_overlay: bool, overlay: bool) -> DirAt {
        DirAt {
            rel: self.rel.join(name),
            in_source: !from_overlay,
            in_overlay: overlay && (from_overlay || self.in_overlay),
        }
    }
}

/// Lists `dir` for a merge; a directory the overlay does not have is empty.
fn list(dir: &Path, optional: bool) -> Result<Vec<fs::DirEntry>, PackError> {
    match fs::read_dir(dir) {
        Ok(rd) => rd
            .collect::<Result<Vec<_>, _>>()
            .map_err(PackError::io(dir)),
        Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(PackError::io(dir)(e)),
    }
}

/// Merges the overlay's listing `over` of a directory into the source's,
/// `listed` (each entry with whether it is the overlay's): an overlay entry
/// replaces the source entry of the same name, unless both are
/// directories; the others are added.
fn merge_overlay(listed: &mut Vec<(fs::DirEntry, bool)>, over: Vec<fs::DirEntry>) {
    if over.is_empty() {
        return;
    }
    let mut by_name: HashMap<OsString, usize> = listed
        .iter()
        .enumerate()
        .map(|(i, (e, _))| (e.file_name(), i))
        .collect();
    for e in over {
        let name = e.file_name();
        match by_name.get(&name) {
            Some(&i) => {
                let both_dirs = listed[i].0.file_type().is_ok_and(|t| t.is_dir())
                    && e.file_type().is_ok_and(|t| t.is_dir());
                if !both_dirs {
                    listed[i] = (e, true);
                }
            }
            None => {
                by_name.insert(name, listed.len());
                listed.push((e, true));
            }
        }
    }
}

/// Reads a directory and everything about its entries that needs a system
/// call: lstat, symlink target, xattrs. Runs on the I/O pool. Entries come
/// back sorted by name bytes, excluded ones dropped.
///
/// With an overlay, the directory's listing in the overlay is merged in:
/// an overlay entry replaces the source entry of the same name, except
/// that of two directories the source's is kept (its metadata; both are
/// then walked).
fn scan_dir(
    root: &Path,
    overlay: Option<&Path>,
    at: &DirAt,
    excludes: &Excludes,
) -> Result<Vec<Scanned>, PackError> {
    let rel = at.rel.as_path();
    let dir = root.join(rel);
    let mut listed: Vec<(fs::DirEntry, bool)> = Vec::new();
    if at.in_source {
        listed.extend(list(&dir, false)?.into_iter().map(|e| (e, false)));
    }
    if let (Some(o), true) = (overlay, at.in_overlay) {
        let over = list(&o.join(rel), at.in_source)?;
        merge_overlay(&mut listed, over);
    }
    let mut names = Vec::new();
    for (e, from_overlay) in listed {
        let name = e.file_name();
        let child_rel = rel.join(&name);
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if excludes.excludes(&child_rel, &name, is_dir) {
            log::debug!("excluded {}", child_rel.display());
            continue;
        }
        if name.as_bytes().len() > MAX_NAME_LEN {
            return Err(PackError::NameTooLong { path: e.path() });
        }
        names.push((name, e, from_overlay));
    }
    names.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let stat =
        |(name, e, from_overlay): (OsString, fs::DirEntry, bool)| -> Result<Scanned, PackError> {
            let path = e.path();
            // DirEntry::metadata is fstatat(AT_SYMLINK_NOFOLLOW): an lstat.
            let meta = e.metadata().map_err(PackError::io(&path))?;
            let target = if meta.file_type().is_symlink() {
                Some(
                    fs::read_link(&path)
                        .map_err(PackError::io(&path))?
                        .into_os_string(),
                )
            } else {
                None
            };
            let xattrs = xattrs::read(&path).map_err(PackError::io(&path))?;
            Ok(Scanned {
                name,
                meta,
                target,
                xattrs,
                from_overlay,
            })
        };
    if names.len() > PAR_STAT_MIN {
        // Nested on the I/O pool: idle threads steal chunks.
        names.into_par_iter().with_min_len(64).map(stat).collect()
    } else {
        names.into_iter().map(stat).collect()
    }
}

/// Scans `root` (lstat only, never following symlinks below the root).
///
/// Directories are read on the I/O pool (see [`crate::io_pool`]) in breadth-first
/// order, up to [`WALK_WINDOW`] ahead, and added to the tree strictly in that
/// order by this thread, so the tree (node order, id and xattr numbering,
/// which name of a hard link comes first, the first error reported) is the
/// same as a sequential walk's.
#[cfg(test)]
pub fn walk(root: &Path, opts: &PackOptions) -> Result<Tree, PackError> {
    walk_skipping(root, opts, None)
}

/// [`walk`], leaving out the file `skip` ((dev, ino): the image's own
/// temporary file) wherever it shows up in the tree.
pub fn walk_skipping(
    root: &Path,
    opts: &PackOptions,
    skip: Option<(u64, u64)>,
) -> Result<Tree, PackError> {
    Ok(walk_within(root, opts, skip, u64::MAX)?.expect("an unbounded walk ends"))
}

/// How large a tree ([`Tree::memory`]) a walk builds before it gives it up
/// for the namespace that spills to disk: an eighth of
/// [`PackOptions::memory`]. The pack of a tree in memory peaks at a few
/// times its tree (the files' locations, the tables), which stays within
/// the budget, and the walk given up peaks below what the spilling pack
/// that follows takes.
pub(crate) fn tree_share(opts: &PackOptions) -> u64 {
    opts.memory / 8
}

/// [`walk_skipping`], giving up (`None`) once the tree takes more than
/// `limit` bytes ([`Tree::memory`]): a tree that large is packed through
/// the namespace that spills to disk instead.
pub(crate) fn walk_within(
    root: &Path,
    opts: &PackOptions,
    skip: Option<(u64, u64)>,
    limit: u64,
) -> Result<Option<Tree>, PackError> {
    let mut tree = Tree::with_root(root.to_path_buf());
    tree.overlay = opts.overlay.clone();
    let mut w = Walker {
        opts,
        tree,
        id_index: HashMap::new(),
        links: HashMap::new(),
        stable_ino: stable_inodes(root),
        limit,
    };
    // The root's own metadata (following a symlink given as SRC) is the root inode.
    let meta = fs::metadata(root).map_err(PackError::io(root))?;
    let xattrs = xattrs::read(root).map_err(PackError::io(root))?;
    let ino = w.add_inode(root, &meta, None, xattrs, 0, false)?;
    w.tree.nodes[0].inode = ino;
    if !breadth_first(root, opts, skip, &mut w)? {
        return Ok(None);
    }
    count_dir_links(&mut w.tree);
    Ok(Some(w.tree))
}

/// What [`depth_first`] does after an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Goes on; a directory's entries come next.
    Enter,
    /// Goes on past this directory's entries without reading them.
    Skip,
    /// Ends the walk.
    Stop,
}

/// What [`depth_first`] hands each entry to: its path components below
/// the root and what was read of it.
pub(crate) type Visitor<'v> = dyn FnMut(&[&[u8]], &Scanned) -> Result<Step, PackError> + 'v;

/// Walks `root` depth-first: every entry but the root, in pre-order with
/// siblings by name bytes (the order of [`Tree::pre_order`]), handed to
/// `visit` with its path components below the root. Excludes and `skip`
/// apply as in [`breadth_first`]. Directories are read one at a time (a
/// large one's entries `lstat`ed on the I/O pool); what is held is the
/// listing of each directory on the current path. `warn`: a walk that
/// goes to the end says which `--exclude` patterns matched nothing.
pub(crate) fn depth_first(
    root: &Path,
    opts: &PackOptions,
    skip: Option<(u64, u64)>,
    warn: bool,
    visit: &mut Visitor<'_>,
) -> Result<(), PackError> {
    let excludes = Excludes::new(&opts.excludes)?;
    let overlay = opts.overlay.as_deref();
    let pool = io_pool::pool()?;
    let scan = |at: &DirAt| -> Result<std::vec::IntoIter<Scanned>, PackError> {
        if crate::cancelled(opts) {
            return Err(PackError::Interrupted);
        }
        let mut entries = pool.install(|| scan_dir(root, overlay, at, &excludes))?;
        if let Some((dev, ino)) = skip {
            entries.retain(|e| e.meta.dev() != dev || e.meta.ino() != ino);
        }
        Ok(entries.into_iter())
    };
    let top = DirAt {
        rel: PathBuf::new(),
        in_source: true,
        in_overlay: overlay.is_some(),
    };
    let mut stack = vec![(scan(&top)?, top)];
    while let Some((entries, at)) = stack.last_mut() {
        let Some(e) = entries.next() else {
            stack.pop();
            continue;
        };
        let mut comps: Vec<&[u8]> = at.rel.iter().map(|c| c.as_bytes()).collect();
        comps.push(e.name.as_bytes());
        match visit(&comps, &e)? {
            Step::Stop => return Ok(()),
            Step::Enter if e.meta.is_dir() => {
                let child = at.child(&e.name, e.from_overlay, overlay.is_some());
                stack.push((scan(&child)?, child));
            }
            Step::Enter | Step::Skip => {}
        }
    }
    if warn {
        warn_unmatched(root, &excludes);
    }
    Ok(())
}

fn warn_unmatched(root: &Path, excludes: &Excludes) {
    for p in excludes.unmatched() {
        log::warn!(
            "{}: --exclude {p:?} matched nothing (see `packfs pack --help` for how patterns match)",
            root.display()
        );
    }
}

/// Sets every directory's link count: 2 + its subdirectories.
fn count_dir_links(tree: &mut Tree) {
    for n in 0..tree.nodes.len() {
        let node = &tree.nodes[n];
        let ino = node.inode as usize;
        if tree.inodes[ino].kind == Kind::Dir {
            let subdirs = tree
                .children(n as u32)
                .filter(|&c| tree.inodes[tree.nodes[c as usize].inode as usize].kind == Kind::Dir)
                .count() as u32;
            tree.inodes[ino].nlink = 2 + subdirs;
        }
    }
}

/// A directory's scan, as an I/O thread sends it back: its number in
/// breadth-first order and its entries.
type ScanDone = (u64, Result<Vec<Scanned>, PackError>);

/// The scan of the `seq`th directory sent to the pool, waiting for it if
/// need be; scans that finish out of order wait in `done` for their turn.
fn scan_in_order(
    done: &mut HashMap<u64, Result<Vec<Scanned>, PackError>>,
    rx: &mpsc::Receiver<ScanDone>,
    seq: u64,
) -> Result<Vec<Scanned>, PackError> {
    loop {
        if let Some(r) = done.remove(&seq) {
            return r;
        }
        match rx.recv() {
            Ok((seq, r)) => {
                done.insert(seq, r);
            }
            Err(_) => unreachable!("a sender is held by the walking thread"),
        }
    }
}

/// Raises its flag when dropped, however the walk ends, so that the scans
/// still queued stop early.
struct StopOnExit<'a>(&'a AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Reads every directory below `root` and hands their entries to `visit`.
/// Breadth-first: a directory's sorted children go over in one go.
/// Directories are scanned on the I/O pool (see [`crate::io_pool`]) up to
/// [`WALK_WINDOW`] ahead, and handed over by this thread strictly in the
/// order they were sent, so that what the visitor makes (node order, id
/// and xattr numbering, which name of a hard link comes first, the first
/// error reported) is the same as a sequential walk's. Returns whether
/// the walk went to the end (the visitor may stop it).
///
/// `skip` ((dev, ino): the image's own temporary file) is left out
/// wherever it shows up: its directory may reach into the source by
/// another path (a bind mount), where the check on paths in
/// `output::prepare` cannot see it.
pub(crate) fn breadth_first(
    root: &Path,
    opts: &PackOptions,
    skip: Option<(u64, u64)>,
    visit: &mut impl Visit,
) -> Result<bool, PackError> {
    let excludes = Excludes::new(&opts.excludes)?;
    let pool = io_pool::pool()?;
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<ScanDone>();
    let overlay = opts.overlay.as_deref();
    let top = DirAt {
        rel: PathBuf::new(),
        in_source: true,
        in_overlay: overlay.is_some(),
    };
    // `todo` holds the directories found but not yet sent to the pool,
    // `pending` those sent, both in breadth-first order.
    let mut todo: VecDeque<(u32, DirAt)> = VecDeque::from([(0, top)]);
    let mut pending: VecDeque<(u32, DirAt)> = VecDeque::new();
    let mut done = HashMap::new();
    let (mut sent, mut added) = (0u64, 0u64);
    let whole = pool.in_place_scope(|s| -> Result<bool, PackError> {
        let _stop = StopOnExit(&stop);
        loop {
            while pending.len() < WALK_WINDOW {
                let Some((node, at)) = todo.pop_front() else {
                    break;
                };
                let (tx, stop, excludes) = (tx.clone(), &stop, &excludes);
                let (task_at, seq) = (at.clone(), sent);
                s.spawn(move |_| {
                    let r = if stop.load(Ordering::Relaxed) {
                        Err(PackError::Interrupted)
                    } else {
                        scan_dir(root, overlay, &task_at, excludes)
                    };
                    let _ = tx.send((seq, r));
                });
                pending.push_back((node, at));
                sent += 1;
            }
            let Some((node, at)) = pending.pop_front() else {
                return Ok(true);
            };
            if crate::cancelled(opts) {
                return Err(PackError::Interrupted);
            }
            let mut entries = scan_in_order(&mut done, &rx, added)?;
            added += 1;
            if let Some((dev, ino)) = skip {
                entries.retain(|e| {
                    let it = e.meta.dev() == dev && e.meta.ino() == ino;
                    if it {
                        log::warn!(
                            "{}: the image being written, left out",
                            root.join(&at.rel).join(&e.name).display()
                        );
                    }
                    !it
                });
            }
            let Some(subdirs) = visit.entries(node, &at.rel, entries)? else {
                return Ok(false);
            };
            for (c, name, from_overlay) in subdirs {
                todo.push_back((c, at.child(&name, from_overlay, overlay.is_some())));
            }
        }
    })?;
    if whole {
        warn_unmatched(root, &excludes);
    }
    Ok(whole)
}

impl Visit for Walker<'_> {
    fn entries(
        &mut self,
        dir: u32,
        rel: &Path,
        entries: Vec<Scanned>,
    ) -> Result<Option<Vec<Subdir>>, PackError> {
        let subdirs = self.add_children(dir, rel, entries)?;
        if self.tree.memory() > self.limit {
            return Ok(None);
        }
        Ok(Some(subdirs))
    }
}

impl Walker<'_> {
    /// Adds a directory's scanned entries as its children; returns the new
    /// nodes that are directories.
    fn add_children(
        &mut self,
        node: u32,
        rel: &Path,
        entries: Vec<Scanned>,
    ) -> Result<Vec<Subdir>, PackError> {
        let first = self.tree.nodes.len() as u32;
        self.tree.set_children(node, first, entries.len() as u32);
        let mut subdirs = Vec::new();
        for e in entries {
            let Scanned {
                name,
                meta,
                target,
                xattrs,
                from_overlay,
            } = e;
            let idx = self.tree.push_node(node, name.as_bytes(), 0);
            let key = (meta.dev(), meta.ino());
            let shared = (!meta.is_dir() && meta.nlink() > 1)
                .then(|| self.links.get(&key).copied())
                .flatten();
            let ino = match shared {
                Some(ino) => {
                    self.tree.inodes[ino as usize].nlink += 1;
                    ino
                }
                None => {
                    let base = match &self.tree.overlay {
                        Some(o) if from_overlay => o,
                        _ => &self.tree.root,
                    };
                    let path = base.join(rel).join(&name);
                    let ino = self.add_inode(&path, &meta, target, xattrs, idx, from_overlay)?;
                    if !meta.is_dir() && meta.nlink() > 1 {
                        self.links.insert(key, ino);
                    }
                    ino
                }
            };
            self.tree.nodes[idx as usize].inode = ino;
            if meta.is_dir() {
                subdirs.push((idx, name, from_overlay));
            }
        }
        Ok(subdirs)
    }

    fn id(&mut self, id: u32, path: &Path) -> Result<u16, PackError> {
        self.tree
            .id_index(&mut self.id_index, id)
            .ok_or_else(|| PackError::TooManyIds { path: path.into() })
    }

    /// `path` is only for messages: everything read from the filesystem
    /// comes in `meta`, `target` and `xattrs`.
    fn add_inode(
        &mut self,
        path: &Path,
        meta: &fs::Metadata,
        target: Option<OsString>,
        xattrs: Vec<Xattr>,
        node: u32,
        from_overlay: bool,
    ) -> Result<u32, PackError> {
        let kind = kind_of(meta.file_type());
        let (uid, gid) = if self.opts.all_root {
            (0, 0)
        } else {
            (meta.uid(), meta.gid())
        };
        let uid_idx = self.id(uid, path)?;
        let gid_idx = self.id(gid, path)?;
        let mtime = match self.opts.mtime {
            Some(t) => t,
            None => {
                let t = meta.mtime();
                if t < 0 || t > u32::MAX as i64 {
                    log::warn!(
                        "{}: mtime {t} outside the range packfs stores (1970 to 2106), clamped",
                        path.display()
                    );
                }
                t.clamp(0, u32::MAX as i64) as u32
            }
        };
        let mut size = 0;
        let mut target_off = 0;
        match kind {
            Kind::File => size = meta.len(),
            Kind::Symlink => {
                let t = target.unwrap_or_default();
                target_off = self.tree.push_target(t.as_bytes());
                size = t.len() as u64;
            }
            _ => {}
        }
        let rdev = if matches!(kind, Kind::BlockDev | Kind::CharDev) {
            let r = meta.rdev();
            encode_dev(libc::major(r), libc::minor(r))
        } else {
            0
        };
        let xattr = self.tree.xattrs.intern(xattrs).unwrap_or(INVALID_XATTR);
        let ino = self.tree.inodes.len() as u32;
        self.tree.inodes.push(Inode {
            kind,
            mode: (meta.mode() & 0o7777) as u16,
            uid_idx,
            gid_idx,
            mtime,
            size,
            rdev,
            nlink: 1,
            xattr,
            node,
            target_off,
            maybe_sparse: kind == Kind::File && meta.blocks().saturating_mul(512) < meta.len(),
            from_overlay,
            src_ino: if self.stable_ino { meta.ino() } else { 0 },
        });
        Ok(ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// (parent, name, is_dir) of every node, breadth-first with each
    /// directory's children sorted by name bytes: the order `walk` must
    /// produce, computed the obvious sequential way.
    fn reference(root: &Path) -> Vec<(u32, Vec<u8>, bool)> {
        let mut out = vec![(0, Vec::new(), true)];
        let mut queue = VecDeque::from([(0u32, root.to_path_buf())]);
        while let Some((node, dir)) = queue.pop_front() {
            let mut names: Vec<OsString> = fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            for name in names {
                let path = dir.join(&name);
                let is_dir = fs::symlink_metadata(&path).unwrap().is_dir();
                if is_dir {
                    queue.push_back((out.len() as u32, path));
                }
                out.push((node, name.as_bytes().to_vec(), is_dir));
            }
        }
        out
    }

    #[test]
    fn parallel_walk_matches_a_sequential_breadth_first_scan() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        // More directories than the window, one directory big enough to be
        // stat'ed in parallel, a deep chain, hard links and symlinks.
        for d in 0..3 * WALK_WINDOW {
            let sub = src.join(format!("d{d:03}")).join("sub");
            fs::create_dir_all(&sub).unwrap();
            fs::write(sub.join("f"), vec![b'x'; d]).unwrap();
            fs::write(src.join(format!("d{d:03}")).join("g"), b"g").unwrap();
        }
        let big = src.join("d007").join("big");
        fs::create_dir(&big).unwrap();
        for f in 0..PAR_STAT_MIN * 3 {
            fs::write(big.join(format!("{:x}", f * 7919)), f.to_le_bytes()).unwrap();
        }
        let deep = src.join("a/b/c/d/e/f/g/h");
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("leaf"), b"leaf").unwrap();
        fs::hard_link(deep.join("leaf"), src.join("zz-link")).unwrap();
        symlink("a/b/c", src.join("sym")).unwrap();

        let tree = walk(src, &PackOptions::default()).unwrap();
        let want = reference(src);
        let got: Vec<_> = (0..tree.nodes.len() as u32)
            .map(|n| {
                let ino = &tree.inodes[tree.nodes[n as usize].inode as usize];
                (
                    tree.nodes[n as usize].parent,
                    tree.name(n).to_vec(),
                    ino.kind == Kind::Dir,
                )
            })
            .collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "tree differs from the sequential scan");
        for n in 1..tree.nodes.len() as u32 {
            let p = tree.nodes[n as usize].parent;
            assert!(tree.children(p).contains(&n));
        }
        // The hard link's inode belongs to the name found first (breadth-first:
        // the top-level link), and is counted twice.
        let find = |rel: &str| {
            (0..tree.nodes.len() as u32)
                .find(|&n| tree.rel_path(n) == Path::new(rel))
                .unwrap()
        };
        let (link, leaf) = (find("zz-link"), find("a/b/c/d/e/f/g/h/leaf"));
        let ino = tree.nodes[link as usize].inode;
        assert_eq!(tree.nodes[leaf as usize].inode, ino);
        assert_eq!(tree.inodes[ino as usize].node, link);
        assert_eq!(tree.inodes[ino as usize].nlink, 2);
        let sym = tree.nodes[find("sym") as usize].inode;
        assert_eq!(tree.symlink_target(sym), b"a/b/c");
        let big = find("d007/big");
        assert_eq!(tree.children(big).len(), PAR_STAT_MIN * 3);
        assert_eq!(
            tree.inodes[tree.nodes[big as usize].inode as usize].nlink,
            2
        );
    }

    #[test]
    fn overlay_replaces_adds_and_merges_without_touching_the_source() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (src, over) = (dir.path().join("src"), dir.path().join("over"));
        fs::create_dir_all(src.join("bin")).unwrap();
        fs::create_dir_all(src.join("lib/pkg")).unwrap();
        fs::write(src.join("bin/tool"), b"#!/old/bin/python\n").unwrap();
        fs::write(src.join("lib/pkg/m.py"), b"x = 1\n").unwrap();
        fs::write(src.join("keep"), b"k").unwrap();
        fs::set_permissions(src.join("lib"), fs::Permissions::from_mode(0o750)).unwrap();
        fs::create_dir_all(over.join("bin")).unwrap();
        fs::create_dir_all(over.join("lib/pkg/__pycache__")).unwrap();
        fs::write(over.join("bin/tool"), b"#!/new/path/bin/python\n").unwrap();
        fs::write(over.join("lib/pkg/__pycache__/m.pyc"), b"pyc").unwrap();
        fs::set_permissions(over.join("lib"), fs::Permissions::from_mode(0o700)).unwrap();
        let opts = PackOptions {
            overlay: Some(over.clone()),
            ..Default::default()
        };
        let tree = walk(&src, &opts).unwrap();
        let find = |rel: &str| {
            (0..tree.nodes.len() as u32)
                .find(|&n| tree.rel_path(n) == Path::new(rel))
                .unwrap_or_else(|| panic!("{rel} missing"))
        };
        let ino = |rel: &str| tree.nodes[find(rel) as usize].inode;
        // Replaced: size and data path from the overlay.
        let tool = ino("bin/tool");
        assert!(tree.inodes[tool as usize].from_overlay);
        assert_eq!(tree.inodes[tool as usize].size, 23);
        assert_eq!(tree.data_path(tool), over.join("bin/tool"));
        // Untouched and added entries, in name order within their directory.
        assert_eq!(tree.data_path(ino("keep")), src.join("keep"));
        assert_eq!(
            tree.data_path(ino("lib/pkg/__pycache__/m.pyc")),
            over.join("lib/pkg/__pycache__/m.pyc")
        );
        let pkg = find("lib/pkg");
        let names: Vec<_> = tree.children(pkg).map(|c| tree.name(c).to_vec()).collect();
        assert_eq!(names, vec![b"__pycache__".to_vec(), b"m.py".to_vec()]);
        // Two directories merge with the source's metadata.
        let lib = &tree.inodes[ino("lib") as usize];
        assert_eq!(lib.mode, 0o750);
        assert!(!lib.from_overlay);
        assert_eq!(lib.nlink, 3);
        assert_eq!(tree.nodes.len(), 9);
        // The source is as it was.
        assert_eq!(
            fs::read(src.join("bin/tool")).unwrap(),
            b"#!/old/bin/python\n"
        );
        assert!(!src.join("lib/pkg/__pycache__").exists());
    }

    #[test]
    fn excludes_apply_in_parallel_scans() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        for d in 0..2 * WALK_WINDOW {
            fs::create_dir_all(src.join(format!("d{d:03}/skip.o/x"))).unwrap();
            fs::write(src.join(format!("d{d:03}/keep.c")), b"c").unwrap();
            fs::write(src.join(format!("d{d:03}/gone")), b"c").unwrap();
        }
        let opts = PackOptions {
            excludes: vec!["*.o".into(), "d1*/gone".into()],
            ..Default::default()
        };
        let tree = walk(src, &opts).unwrap();
        let names: Vec<_> = (1..tree.nodes.len() as u32)
            .map(|n| tree.rel_path(n))
            .collect();
        assert!(names.iter().all(|p| !p.ends_with("skip.o")));
        assert!(names.iter().any(|p| p.ends_with("gone")));
        assert!(!names
            .iter()
            .any(|p| p.starts_with("d100") && p.ends_with("gone")));
        assert_eq!(names.len(), 2 * WALK_WINDOW * 3 - (2 * WALK_WINDOW - 100));
    }
}
