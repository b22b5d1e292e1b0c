//! A directory walked straight into the namespace, for a tree too large to
//! hold in memory first.
//!
//! `pack DIR` and a directory among sources first walk into a
//! [`crate::tree::Tree`], whose layout is what a small tree has always
//! been packed with. A walk whose tree outgrows its share of `--memory`
//! (`walk::tree_share`) gives it up and walks again through [`Streamed`]:
//! each directory's entries join the stage as they are read, in the same
//! breadth-first order, their files' data goes to the writer by path, and
//! the stage spills to sorted runs between entries as an archive's does
//! between members. What stays in memory besides the stage is the walk's
//! queue of directories found and not yet read, the listing being read,
//! and the first path of each file with several links until its last name
//! is met (its further names are linked to it by path).
//!
//! The reader (`super::reader`) gives the walk what it needs through
//! [`Namespace`].

use super::stage::{Added, Entry, Stage, StageError};
use crate::cut::{self, weight, Cut};
use crate::tree::Kind;
use crate::walk::{self, Scanned, Step, Subdir, Visit};
use crate::{xattrs, PackError, PackOptions};
use packfs_format::shards::{encode_path, Range, Shard};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// What a walk into the namespace needs of the reader that owns it.
pub(super) trait Namespace {
    fn stage(&mut self) -> &mut Stage;
    /// Adds `comps` as a further name of the file at `target`, wherever
    /// that went (the stage, or a run spilled to disk).
    fn link(&mut self, comps: &[&[u8]], target: &[&[u8]], source: u16)
        -> Result<Added, StageError>;
    /// Sends the data of the file at `path`, the stage's inode `si`.
    fn file(
        &mut self,
        si: u32,
        path: Arc<Path>,
        size: u64,
        maybe_sparse: bool,
        src_ino: u64,
    ) -> Result<(), PackError>;
    /// Between entries: stops if asked to, spills the stage if full.
    fn between(&mut self) -> Result<(), PackError>;
    /// `e`, met adding `path`, as the pack's error.
    fn error(&self, path: &Path, e: StageError) -> PackError;
}

/// The visitor of a streamed walk (see the module doc).
struct Streamed<'r, N: Namespace> {
    reader: &'r mut N,
    root: &'r Path,
    source: u16,
    /// The first path (components joined by `/`) of each file with
    /// several links and how many of its names are still to come, by
    /// (dev, ino); dropped once the last has come.
    links: HashMap<(u64, u64), (Vec<u8>, u64)>,
    /// Whether the files' `st_ino` is recorded (see `walk::stable_inodes`).
    stable_ino: bool,
}

/// Walks `root` (source number `source`) into the reader's namespace,
/// leaving out `skip` ((dev, ino) of the image being written).
pub(super) fn stream(
    reader: &mut impl Namespace,
    opts: &PackOptions,
    skip: Option<(u64, u64)>,
    source: u16,
    root: &Path,
) -> Result<(), PackError> {
    let mut visit = Streamed::start(reader, source, root, 0)?;
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

impl<'r, N: Namespace> Streamed<'r, N> {
    /// A visitor for the walk of `root` (source number `source`), whose
    /// own metadata is the root's; `root_links` as `links` in [`Self::add`].
    fn start(
        reader: &'r mut N,
        source: u16,
        root: &'r Path,
        root_links: u64,
    ) -> Result<Self, PackError> {
        let meta = fs::metadata(root).map_err(PackError::io(root))?;
        let xattrs = xattrs::read(root).map_err(PackError::io(root))?;
        let mut entry = entry_of(&meta, None, xattrs, source);
        entry.size = root_links;
        if let Err(e) = reader.stage().add(&[], entry) {
            return Err(reader.error(root, e));
        }
        Ok(Streamed {
            reader,
            root,
            source,
            links: HashMap::new(),
            stable_ino: walk::stable_inodes(root),
        })
    }

    /// Adds the entry `s` at `comps` (`path` in the source) to the stage,
    /// its data to the batches; returns whether it was a further name of a
    /// file already added. `links`: for a directory, the link count its
    /// inode gets at least (see `Entry::size`; 0: as counted).
    fn add(
        &mut self,
        comps: &[&[u8]],
        s: &Scanned,
        path: &Path,
        links: u64,
    ) -> Result<bool, PackError> {
        let r = &mut *self.reader;
        let k = self.source;
        let key = (s.meta.dev(), s.meta.ino());
        let linked = !s.meta.is_dir() && s.meta.nlink() > 1;
        if let Some((first, left)) = self.links.get_mut(&key).filter(|_| linked) {
            let target: Vec<&[u8]> = first.split(|&b| b == b'/').collect();
            r.link(comps, &target, k).map_err(|e| r.error(path, e))?;
            // The last name of the file: nothing will ask for its first.
            *left -= 1;
            if *left == 0 {
                self.links.remove(&key);
            }
            return Ok(true);
        }
        let target = s.target.as_ref().map(|t| t.as_bytes());
        let mut e = entry_of(&s.meta, target, s.xattrs.clone(), k);
        if e.kind == Kind::Dir {
            e.size = links;
        }
        let kind = e.kind;
        let added = r.stage().add(comps, e).map_err(|e| r.error(path, e))?;
        let Added::Inode(si) = added else {
            // Left out (another source's entry kept): a further name
            // becomes the first.
            return Ok(false);
        };
        if linked {
            let left = s.meta.nlink() - 1;
            self.links.insert(key, (comps.join(&b'/'), left));
        }
        if kind != Kind::File {
            return Ok(false);
        }
        let size = s.meta.len();
        let maybe_sparse = s.meta.blocks().saturating_mul(512) < size;
        let src_ino = if self.stable_ino { s.meta.ino() } else { 0 };
        r.file(si, Arc::from(path), size, maybe_sparse, src_ino)?;
        Ok(false)
    }
}

impl<N: Namespace> Visit for Streamed<'_, N> {
    fn entries(
        &mut self,
        _dir: u32,
        rel: &Path,
        entries: Vec<Scanned>,
    ) -> Result<Option<Vec<Subdir>>, PackError> {
        let dir = self.root.join(rel);
        let mut comps: Vec<&[u8]> = rel.iter().map(|c| c.as_bytes()).collect();
        let depth = comps.len();
        let mut subdirs = Vec::new();
        for s in &entries {
            comps.truncate(depth);
            comps.push(s.name.as_bytes());
            self.add(&comps, s, &dir.join(&s.name), 0)?;
            if s.meta.is_dir() {
                subdirs.push((0, s.name.clone(), false));
            }
            // Between entries nothing refers to the stage's inodes (a
            // further link finds its first name by path), so it may
            // spill, within a directory of millions of entries too.
            self.reader.between()?;
        }
        Ok(Some(subdirs))
    }
}

/// Walks the run of shard `shard` of `cut` in `root` (source number
/// `source`) into the reader's namespace, with the directories leading to
/// it; returns the run's manifest record. Every entry the walk meets is
/// checked against the mark measured at its position, and the run's
/// weight against the weight measured for it: a tree changed since it was
/// measured is an error, not a shard that overlaps its neighbours or
/// misses an entry. Directories get their source's link
/// count, as a shard packed in memory does (`Tree::subset`).
pub(super) fn stream_run(
    reader: &mut impl Namespace,
    opts: &PackOptions,
    source: u16,
    root: &Path,
    cut: &Cut,
    shard: usize,
) -> Result<Shard, PackError> {
    let (start, end) = (cut.cuts[shard], cut.cuts[shard + 1]);
    let entry_cost = cut.entry_cost;
    // The run's weight, summed as its entries come.
    let mut weight_seen = 0u64;
    let root_links = 2 + cut.root_subdirs as u64;
    let mut visit = Streamed::start(reader, source, root, root_links)?;
    let mut record = Shard {
        index: shard as u32,
        file: String::new(),
        size: 0,
        blake3: String::new(),
        entries: 0,
        files: 0,
        bytes: 0,
        range: None,
    };
    let mut last = Vec::new();
    // Directories on the current path before the run: (depth, path,
    // entry, link count).
    let mut leading: Vec<(usize, Vec<u8>, Scanned, u64)> = Vec::new();
    let mut pos = 0usize;
    let changed = || {
        PackError::Shards(format!(
            "{}: changed since it was measured for the split into shards (pack it again)",
            root.display()
        ))
    };
    let last_shard = end == cut.m;
    walk::depth_first(root, opts, None, last_shard, &mut |comps, s| {
        let kind = walk::kind_of(s.meta.file_type());
        if pos >= cut.m || cut.mark_at(pos)? != cut::mark(s.name.as_bytes(), kind, s.meta.len()) {
            return Err(changed());
        }
        if pos >= end {
            return Ok(Step::Stop);
        }
        let (after, subdirs) = match kind {
            Kind::Dir => cut.dir_at(pos)?,
            _ => (pos + 1, 0),
        };
        if after <= pos {
            return Err(changed());
        }
        let links = 2 + subdirs as u64;
        if pos < start {
            leading.retain(|(d, ..)| *d < comps.len());
            if after <= start {
                // Wholly before the run: its subtree is not read.
                pos = after;
                return Ok(Step::Skip);
            }
            leading.push((comps.len(), comps.join(&b'/'), s.clone(), links));
            pos += 1;
            return Ok(Step::Enter);
        }
        for (_, p, d, links) in leading.drain(..) {
            let comps: Vec<&[u8]> = p.split(|&b| b == b'/').collect();
            let path = root.join(Path::new(OsStr::from_bytes(&p)));
            visit.add(&comps, &d, &path, links)?;
        }
        let path = root.join(Path::new(OsStr::from_bytes(&comps.join(&b'/'))));
        let further = visit.add(comps, s, &path, links)?;
        weight_seen += weight(kind, !further, s.meta.len(), entry_cost);
        if kind == Kind::File && !further {
            record.files += 1;
            record.bytes += s.meta.len();
        }
        let rel = comps.join(&b'/');
        if record.entries == 0 {
            record.range = Some(Range {
                first: encode_path(&rel),
                last: String::new(),
            });
        }
        last = rel;
        record.entries += 1;
        pos += 1;
        visit.reader.between()?;
        Ok(Step::Enter)
    })?;
    if pos < end || cut.prefix(start)? + weight_seen != cut.prefix(end)? {
        return Err(changed());
    }
    if let Some(r) = &mut record.range {
        r.last = encode_path(&last);
    }
    Ok(record)
}
