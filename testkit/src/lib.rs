//! A bounded walk of a whole image through the filesystem core: every
//! request a FUSE client can make, on every node reachable from the root.
//!
//! This is what the fuzz targets (`fuzz/`) run on arbitrary bytes, what
//! the stable regression test (`tests/suite/fuzz_regressions.rs`) replays
//! on the inputs they found, and what the suite's corrupt-image tests walk:
//! one function, so a crash found by the fuzzer is replayed by exactly the
//! code that found it. The images are hostile, so
//! everything is bounded by [`Limits`]: nodes visited, directory entries
//! listed, bytes read, and requests made in all. A corrupt image can make a
//! directory contain itself, a listing claim four billion entries or a
//! 100-byte file claim to be 4 GiB; the walk stops at its budget instead.
//! Nothing is asserted about the answers (a corrupt image may answer
//! anything); what is checked by running this is that no answer is a
//! panic, a hang or an allocation out of proportion to the input.

pub mod tarstream;

use mountfs::cache::BlockCache;
use mountfs::fs::{FileKind, NodeId, PackFs, ROOT};
use mountfs::image::Image;
use mountfs::open::AnyImage;
use mountfs::source::MemSource;
use mountfs::squashfs::SquashFs;
use mountfs::zip::ZipFs;
use std::collections::HashSet;
use std::sync::Arc;

/// Budgets of one walk.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Nodes visited (getattr, xattrs, readlink, read).
    pub nodes: usize,
    /// Directory entries taken from listings, over all directories.
    pub entries: usize,
    /// File bytes read, over all files.
    pub read_bytes: u64,
    /// Requests of any kind, the backstop for everything else.
    pub ops: usize,
    /// Size of one read request.
    pub chunk: u32,
    /// Entries per readdir call; listings resume from the last cookie, as
    /// the kernel does with a full buffer.
    pub page: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nodes: 4096,
            entries: 16_384,
            read_bytes: 16 << 20,
            ops: 100_000,
            chunk: 64 << 10,
            page: 64,
        }
    }
}

/// What a walk did; errors are counted, not judged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkStats {
    pub nodes: usize,
    pub entries: usize,
    pub read_bytes: u64,
    pub ops: usize,
    pub errors: usize,
}

struct Walker<'a, I: Image> {
    fs: &'a PackFs<I>,
    lim: Limits,
    st: WalkStats,
}

impl<I: Image> Walker<'_, I> {
    /// Counts one request; false once the request budget is spent.
    fn op(&mut self) -> bool {
        self.st.ops += 1;
        self.st.ops <= self.lim.ops
    }

    fn count<T>(&mut self, r: mountfs::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(_) => {
                self.st.errors += 1;
                None
            }
        }
    }

    /// Lists `dir` page by page, looking up each name; returns the children.
    fn list(&mut self, dir: NodeId) -> Vec<NodeId> {
        let mut children = Vec::new();
        let mut cookie = 0u64;
        loop {
            if !self.op() || self.st.entries >= self.lim.entries {
                break;
            }
            let room = self.lim.page.min(self.lim.entries - self.st.entries);
            let mut page = Vec::with_capacity(room);
            let r = self.fs.readdir(dir, cookie, &mut |e| {
                page.push(e);
                page.len() < room
            });
            let failed = self.count(r).is_none();
            self.st.entries += page.len();
            let Some(last) = page.last() else { break };
            // A cookie that does not move forward would list the same page
            // forever.
            if last.cookie <= cookie {
                break;
            }
            cookie = last.cookie;
            for e in page {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                if !self.op() {
                    break;
                }
                let r = self.fs.lookup(dir, &e.name);
                self.count(r);
                children.push(e.node);
            }
            if failed {
                break;
            }
        }
        children
    }

    /// Reads a regular file in chunks from the start, then a few odd reads.
    fn read(&mut self, node: NodeId, size: u64) {
        let mut off = 0u64;
        while self.st.read_bytes < self.lim.read_bytes && self.op() {
            let want = (self.lim.read_bytes - self.st.read_bytes).min(self.lim.chunk as u64);
            match self.fs.read(node, off, want as u32) {
                Ok(d) if d.is_empty() => break,
                Ok(d) => {
                    self.st.read_bytes += d.len() as u64;
                    off += d.len() as u64;
                }
                Err(_) => {
                    self.st.errors += 1;
                    break;
                }
            }
        }
        // Unaligned, backward and past-the-end reads.
        for (o, n) in [
            (size / 2, 3u32),
            (size.saturating_sub(1), 4096),
            (1, 1),
            (size, 1),
            (i64::MAX as u64 - 1, 4096),
        ] {
            if !self.op() || self.st.read_bytes >= self.lim.read_bytes {
                break;
            }
            if let Ok(d) = self.fs.read(node, o, n) {
                self.st.read_bytes += d.len() as u64;
            }
        }
        // The readahead hooks, as the worker pool would call them.
        if self.op() {
            if let Ok(h) = self.fs.image.open(node) {
                self.fs.image.prefetch(&h, 0, size.min(256 << 10));
                if let Some(u) = self.fs.image.shared_unit(&h) {
                    self.fs.image.prefetch_unit(u);
                }
            }
        }
    }

    fn visit(&mut self, node: NodeId) -> Vec<NodeId> {
        self.st.nodes += 1;
        if !self.op() {
            return Vec::new();
        }
        let r = self.fs.getattr(node);
        let Some(a) = self.count(r) else {
            return Vec::new();
        };
        if self.op() {
            if let Ok(names) = self.fs.listxattr(node) {
                for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                    if !self.op() {
                        break;
                    }
                    let r = self.fs.getxattr(node, name);
                    self.count(r);
                }
            }
            let _ = self.fs.getxattr(node, b"user.packfs.absent");
        }
        if self.op() {
            // Every kind, not only symlinks: the others must refuse cleanly.
            let _ = self.fs.readlink(node);
        }
        match a.kind {
            FileKind::Dir => self.list(node),
            FileKind::File => {
                self.read(node, a.size);
                Vec::new()
            }
            _ => {
                if self.op() {
                    let _ = self.fs.read(node, 0, 4096);
                }
                Vec::new()
            }
        }
    }
}

/// Walks everything reachable from the root of `fs` within `lim`: getattr,
/// listxattr and getxattr of each name, readlink, paged readdir with a
/// lookup of each name, and each regular file read in full (then at odd
/// offsets). Each node is visited once, however many names it has.
pub fn walk<I: Image>(fs: &PackFs<I>, lim: Limits) -> WalkStats {
    let mut w = Walker {
        fs,
        lim,
        st: WalkStats::default(),
    };
    let _ = fs.statfs();
    let mut seen = HashSet::new();
    let mut stack = vec![ROOT];
    while let Some(n) = stack.pop() {
        if w.st.nodes >= lim.nodes || w.st.ops >= lim.ops {
            break;
        }
        if !seen.insert(n) {
            continue;
        }
        let children = w.visit(n);
        // Pushed in reverse so that the walk goes in listing order.
        stack.extend(children.into_iter().rev());
    }
    // Nodes no listing names: node 0, past the end, and the largest id.
    for n in [0, 2, u64::MAX] {
        if w.op() {
            let _ = fs.getattr(n);
            let _ = fs.lookup(n, b"x");
        }
    }
    w.st
}

/// Which reader the bytes are given to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    SquashFs,
    Zip,
    /// Format detection ([`AnyImage::from_source`]), then `preload` and the walk.
    Any,
    /// The bytes packed as an archive source (`packfs pack ARCHIVE`), and
    /// the image made of them, if any, walked: what the archive reader
    /// accepts must make an image the reader reads.
    Tar,
}

impl Target {
    /// By the names of the fuzz targets (and of the regression folders).
    pub fn from_name(name: &str) -> Option<Target> {
        Some(match name {
            "squashfs" => Target::SquashFs,
            "zip" => Target::Zip,
            "any" => Target::Any,
            "tar" => Target::Tar,
            _ => return None,
        })
    }
}

/// Block cache budget of [`open_and_walk`]: small, so that eviction and
/// re-decoding run too.
pub const CACHE_BYTES: usize = 256 << 10;

/// Opens `bytes` as an image with `target`'s reader (no readahead, no
/// worker threads) and walks it; `None` when the image does not open.
pub fn open_and_walk(target: Target, bytes: &[u8], lim: Limits) -> Option<WalkStats> {
    let src = Box::new(MemSource(bytes.to_vec()));
    let cache = || Arc::new(BlockCache::new(CACHE_BYTES));
    match target {
        Target::SquashFs => {
            let img = SquashFs::open(src, cache()).ok()?;
            Some(walk(&PackFs::new(img, 0, 0), lim))
        }
        Target::Zip => {
            let img = ZipFs::open(src, cache()).ok()?;
            Some(walk(&PackFs::new(img, 0, 0), lim))
        }
        Target::Any => {
            let img = AnyImage::from_source(src, "fuzz", CACHE_BYTES).ok()?;
            let _ = img.preload();
            Some(walk(&PackFs::new(img, 0, 0), lim))
        }
        Target::Tar => {
            let image = pack_archive(bytes)?;
            let img = SquashFs::open(Box::new(MemSource(image)), cache())
                .expect("an image packed from an archive opens");
            Some(walk(&PackFs::new(img, 0, 0), lim))
        }
    }
}

/// Packs `bytes` as an archive source (one thread, small blocks) and
/// returns the image; `None` when the packer refuses the archive.
fn pack_archive(bytes: &[u8]) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let archive = dir.path().join("input");
    std::fs::write(&archive, bytes).expect("writing the input");
    let out = dir.path().join("image.sqfs");
    let opts = packer::PackOptions {
        threads: 1,
        block_size: 4096,
        ..Default::default()
    };
    let sources = [packer::archive::Source::Archive(archive)];
    packer::archive::pack_sources(&sources, &out, &opts, &Default::default())
        .ok()
        .map(|_| std::fs::read(&out).expect("reading the image back"))
}
