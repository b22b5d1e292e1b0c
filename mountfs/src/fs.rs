//! The filesystem core: what a filesystem server needs, answered with plain
//! structs and [`FsError`]s, testable without a mount.
//!
//! [`Image`] is implemented once per image format (SquashFS, ZIP). [`PackFs`]
//! wraps an image with what is format-independent: a small cache of prepared
//! files, readahead (decided in [`crate::readahead`]), and counters of what
//! it answered ([`FsCounters`]).
//!
//! Reads are addressed by node, not by an open-file handle, so a server
//! need not open files at all (the FUSE server declines OPEN, which makes
//! the kernel stop sending OPEN and RELEASE and keep page-cache contents
//! across opens: half the round trips per small file). The prepared form of
//! a file (for SquashFS, its block list with prefix offsets) is kept in an
//! LRU keyed by node, so a file read in several requests is prepared once.
//! The FUSE server (module `fuse`, feature `fuse`) only converts between
//! these types and the kernel's requests and replies.
//!
//! Node ids are chosen by each image so that they are stable and derivable
//! without a table (a SquashFS node id is its inode reference); node id 1 is
//! always the root, as FUSE requires.

use crate::access_profile::AccessRecorder;
use crate::error::{FsError, Result};
pub use crate::image::{Attr, DirEntry, FileKind, Image, NodeId, StatFs, ROOT};
use crate::readahead::{Readahead, TrackedFile};
use lru::LruCache;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Prepared files kept (see [`PackFs`]): enough for every file a few dozen
/// concurrent readers have open, small enough to never matter for memory.
const OPEN_FILES: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the core did, counted as it answers (relaxed atomics): for
/// `packfs mount --stats`, `packfs bench` and Python's `Image.stats()`.
#[derive(Debug, Default)]
pub struct FsCounters {
    pub lookups: AtomicU64,
    /// Lookups of names that do not exist.
    pub negative_lookups: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    /// Failures other than a missing name or attribute (see `PackFs::note`).
    pub errors: AtomicU64,
}

impl FsCounters {
    pub fn snapshot(&self) -> FsCounts {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FsCounts {
            lookups: n(&self.lookups),
            negative_lookups: n(&self.negative_lookups),
            reads: n(&self.reads),
            read_bytes: n(&self.read_bytes),
            errors: n(&self.errors),
        }
    }
}

/// [`FsCounters`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsCounts {
    pub lookups: u64,
    /// Lookups of names that do not exist.
    pub negative_lookups: u64,
    /// Reads of regular files that succeeded.
    pub reads: u64,
    /// File bytes those reads returned.
    pub read_bytes: u64,
    /// Failures other than ENOENT/ENODATA and the like.
    pub errors: u64,
}

pub struct PackFs<I: Image> {
    pub image: Arc<I>,
    /// Recently read files, prepared for reading. Bounded by entry count;
    /// an entry is small except for huge files (12 bytes per data block).
    open_files: Mutex<LruCache<NodeId, Arc<TrackedFile<I::Handle>>>>,
    /// Per-file and image-order readahead, with its worker pool.
    readahead: Readahead<I>,
    pub counters: FsCounters,
    /// `--record-access`: first reads, in order (see [`crate::access_profile`]).
    recorder: Option<Arc<AccessRecorder>>,
    /// Paths of files whose reads failed as damaged.
    damaged: crate::path_of::DamagedNames,
}

impl<I: Image> PackFs<I> {
    /// `readahead` bytes ahead of sequential readers, decoded by
    /// `prefetch_threads` workers (no readahead when either is 0).
    pub fn new(image: I, readahead: u64, prefetch_threads: usize) -> Self {
        let image = Arc::new(image);
        PackFs {
            open_files: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(OPEN_FILES).expect("non-zero"),
            )),
            readahead: Readahead::new(image.clone(), readahead, prefetch_threads),
            image,
            counters: FsCounters::default(),
            recorder: None,
            damaged: Default::default(),
        }
    }

    /// Records the order of first reads with `r` from now on.
    pub fn record_access(&mut self, r: Arc<AccessRecorder>) {
        self.recorder = Some(r);
    }

    /// Counts a failure. It is not logged here: the caller reports it (the
    /// FUSE adapter logs what it answers with an errno, the CLI and Python
    /// show the error itself), so each failure is said once.
    fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if !matches!(
                e,
                FsError::NotFound | FsError::NameTooLong | FsError::SymlinkLoop | FsError::NoXattr
            ) {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        r
    }

    pub fn getattr(&self, node: NodeId) -> Result<Attr> {
        self.note(self.image.getattr(node))
    }

    pub fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Attr> {
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        let r = self.image.lookup(parent, name);
        if let (Some(rec), Ok(a)) = (&self.recorder, &r) {
            rec.named(parent, name, a.node);
        }
        if matches!(r, Err(FsError::NotFound)) {
            self.counters
                .negative_lookups
                .fetch_add(1, Ordering::Relaxed);
        }
        self.note(r)
    }

    /// Directory listing with "." and ".." first, resuming after `cookie`.
    /// Cookies 1 and 2 are "." and ".."; the image's cookies are >= 3.
    pub fn readdir(
        &self,
        dir: NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let me = self.getattr(dir)?;
        if me.kind != FileKind::Dir {
            return Err(FsError::NotDir);
        }
        if cookie < 1 {
            let e = DirEntry {
                name: b".".to_vec(),
                node: dir,
                ino: me.ino,
                kind: FileKind::Dir,
                cookie: 1,
            };
            if !sink(e) {
                return Ok(());
            }
        }
        if cookie < 2 {
            let e = DirEntry {
                name: b"..".to_vec(),
                node: dir,
                ino: self.image.parent_ino(dir)?,
                kind: FileKind::Dir,
                cookie: 2,
            };
            if !sink(e) {
                return Ok(());
            }
        }
        let r = match &self.recorder {
            // Entries a listing returns with their attributes (readdirplus)
            // are never looked up: the recorder learns their names here.
            Some(rec) => self.image.readdir(dir, cookie.max(2), &mut |e| {
                rec.named(dir, &e.name, e.node);
                sink(e)
            }),
            None => self.image.readdir(dir, cookie.max(2), sink),
        };
        self.note(r)
    }

    /// The prepared form of a regular file, from the LRU or freshly made.
    fn prepared(&self, node: NodeId) -> Result<Arc<TrackedFile<I::Handle>>> {
        if let Some(h) = lock(&self.open_files).get(&node) {
            return Ok(h.clone());
        }
        let handle = self.note(self.image.open(node))?;
        let h = Arc::new(TrackedFile::new(handle));
        lock(&self.open_files).put(node, h.clone());
        Ok(h)
    }

    /// Checks that `node` can be read (a regular file whose metadata decodes).
    pub fn open(&self, node: NodeId) -> Result<()> {
        self.prepared(node).map(|_| ())
    }

    /// Reads from a regular file. A read from the start of a file, or one
    /// that starts where the previous one ended, is sequential: the blocks
    /// after it are decoded in the background so the next request finds them
    /// in the cache (see [`crate::readahead`]).
    pub fn read(&self, node: NodeId, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.prepared(node)?;
        let data = self.note(
            self.image
                .read(&h.handle, offset, size)
                .map_err(|e| self.damaged.name(&*self.image, node, e)),
        )?;
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .read_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.readahead.after_read(&h, offset, size, data.len());
        if let Some(rec) = &self.recorder {
            rec.read(node);
        }
        Ok(data)
    }

    /// How far ahead of a sequential reader blocks are decoded, in bytes.
    pub fn readahead(&self) -> u64 {
        self.readahead.bytes()
    }

    /// Where regular file `node`'s data lies in the image's storage.
    pub fn extent(&self, node: NodeId) -> Result<crate::image::Extent> {
        self.note(self.image.extent(node))
    }

    /// The caller will read all of `span` soon ([`Image::will_read`]).
    pub fn will_read(&self, span: crate::image::Extent) {
        self.image.will_read(span)
    }

    /// A symlink's target. An empty one, or one holding a NUL byte, is
    /// damage: no system call can make either, the kernel refuses to
    /// follow them, and `extract` could only blame its output for them.
    pub fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        self.note(self.image.readlink(node).and_then(|t| {
            if t.is_empty() {
                return Err(FsError::corrupt("the symlink's target is empty"));
            }
            if t.contains(&0) {
                return Err(FsError::corrupt("the symlink's target holds a NUL byte"));
            }
            Ok(t)
        }))
    }

    /// The node's extended attributes; a name that is empty or holds a NUL
    /// byte is damage (the list the kernel is given separates names by NUL,
    /// so such a name would make the whole list unreadable).
    fn xattrs(&self, node: NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.note(self.image.xattrs(node).and_then(|list| {
            match list.iter().find(|(n, _)| n.is_empty() || n.contains(&0)) {
                Some((n, _)) => Err(FsError::corrupt(format!(
                    "extended attribute name {:?} is empty or holds a NUL byte",
                    String::from_utf8_lossy(n)
                ))),
                None => Ok(list),
            }
        }))
    }

    pub fn listxattr(&self, node: NodeId) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for (name, _) in self.xattrs(node)? {
            out.extend_from_slice(&name);
            out.push(0);
        }
        Ok(out)
    }

    pub fn getxattr(&self, node: NodeId, name: &[u8]) -> Result<Vec<u8>> {
        self.xattrs(node)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or(FsError::NoXattr)
    }

    pub fn statfs(&self) -> StatFs {
        self.image.statfs()
    }

    /// The entry a '/'-separated path from the root names, a final
    /// symlink itself ([`PackFs::resolve_path`], in `crate::resolve`).
    pub fn resolve(&self, path: &[u8]) -> Result<Attr> {
        self.resolve_path(path, false)
    }

    /// Collects a whole directory listing (without "." and "..").
    pub fn list(&self, dir: NodeId) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.image.readdir(dir, 2, &mut |e| {
            out.push(e);
            true
        })?;
        Ok(out)
    }

    /// Reads a whole regular file through the same path as a mount's reads.
    pub fn read_all(
        &self,
        node: NodeId,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        let mut off = 0u64;
        loop {
            match self.read(node, off, 1 << 20) {
                Ok(d) if d.is_empty() => break Ok(off),
                Ok(d) => {
                    off += d.len() as u64;
                    if let Err(e) = sink(&d) {
                        break Err(FsError::io("output", e));
                    }
                }
                Err(e) => break Err(e),
            }
        }
    }
}
