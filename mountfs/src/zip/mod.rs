//! The ZIP reader: any real-world `.zip` served through the same filesystem
//! core ([`crate::fs::PackFs`]) and block cache as SquashFS.
//!
//! # Design note
//!
//! **Index.** Opening reads the end records (EOCD, searched backwards over at
//! most 65557 bytes; Zip64 locator and record when present) and walks the
//! central directory once into a compact index (see [`index`]): one
//! fixed-size node per entry (64 bytes), base names in one arena, children
//! as ranges of one sorted `u32` array. Node id = index + 1 (entries from 2,
//! root = 1); `st_ino` = node id. Lookup is a binary search in the parent's
//! children; a readdir cookie is 3 + the position in that range.
//! Directories without an entry of their own are synthesised (0755, mtime
//! of their newest child).
//!
//! **Data offsets** are resolved lazily from the local header (its name and
//! extra lengths may differ from the central ones) and cached in the node's
//! `AtomicU64`. Sizes and CRCs always come from the central directory, so
//! data descriptors (flag bit 3) need no special handling.
//!
//! **Reading.**
//! * *Stored* members are served straight from the image map, no copy into
//!   the cache. Their CRC is verified once, at the first open, when they are
//!   smaller than 1 MiB (bit 63 of the cached data offset remembers it);
//!   a larger one over the bytes served, in whatever order and from however
//!   many handles they are read ([`coverage`]), failing the read that
//!   completes it.
//! * *Compressed members below 1 MiB* (uncompressed) are decoded whole into
//!   one cache block, keyed `(node << 32) | 0`, and their CRC is checked.
//! * *Large compressed members* are decoded in chunks of 256 KiB of output,
//!   keyed `(node << 32) | chunk`. Each open handle keeps its *live*
//!   decoder, positioned just after the furthest chunk it produced, and
//!   every chunk it produces goes into the cache. Deflate and zstd decoders
//!   can also be resumed from **checkpoints** (below); bzip2, LZMA, xz and
//!   deflate64 cannot. A read of chunk k:
//!   1. cached → O(chunk) copy;
//!   2. else, the nearest checkpoint at or before k·C if it is past the live
//!      decoder (or there is none usable) → a decoder resumed there,
//!      decoding forward: O(k·C − checkpoint) ≤ O(interval + C);
//!   3. else, k at or after the live decoder → decodes forward from there,
//!      caching the chunks it passes: O(k·C − pos);
//!   4. else (k before the decoder and evicted, no checkpoint) → a fresh
//!      decoder from the member start: O(k·C). For deflate this is only
//!      the first pass over a member (or a budget too small to keep its
//!      checkpoints); for the other methods it is the worst case of a random
//!      read, paid only when the cache budget is smaller than the member.
//!
//!   Sequential reads (and the prefetcher, which runs the same decoder ahead)
//!   therefore decode every byte once; re-reads cost nothing while cached.
//!   Chunks are inserted into the cache outside any cache loader, so a
//!   decoder lock is never held while waiting for a cache slot that another
//!   thread holds while waiting for the decoder (no deadlock).
//!
//! **Checkpoints** ([`checkpoint`], [`decoders::Checkpoint`]). Deflate is decoded
//! with miniz_oxide's core inflater into a 32 KiB *wrapping* output buffer,
//! which is then exactly the LZ77 window; the inflater's state is `Clone`.
//! A checkpoint is (inflater state, window, input offset, output offset,
//! running CRC-32 of the output so far): ~43 KiB. Any decoder passing
//! through a member (sequential reads, prefetch, or one itself resumed from
//! a checkpoint) records one at every multiple of the member's interval:
//! 1 MiB, doubled until all of the member's checkpoints fit in the budget
//! (so a 50 GB member with a 64 MiB budget gets one every 32 MiB). A zstd
//! member that is a sequence of frames (packfs writes 1 MiB frames) is
//! restartable at any frame start with a fresh decoder: the first frame
//! start seen in each interval is kept as a ~200-byte checkpoint; a decoder
//! resumed at a frame start inside a chunk decodes to the chunk's end and
//! drops that part. All checkpoints of the archive share one byte budget
//! (default [`default_checkpoint_budget`]: 1/8 of the cache budget, 4 to
//! 64 MiB) in an LRU keyed by (node, offset), with a sorted index of the
//! same keys for the nearest-at-or-before lookup; when the budget is
//! exceeded the least recently used checkpoints of any member go. Memory
//! thus stays bounded on a million-entry archive or a 50 GB member.
//!
//! **CRC-32.** Every decoder carries the running CRC-32 of the member's
//! bytes `0..pos`: a fresh one starts from the empty CRC, a resumed one
//! from the CRC stored in its checkpoint (which the recording decoder had
//! computed, itself from offset 0 or from an earlier checkpoint). So
//! whenever *any* decoder — fresh or resumed — reaches the member's end, it
//! checks the CRC of the whole member against the central directory, and a
//! mismatch fails that read with EIO (earlier chunks were already served,
//! as with any streaming check). A member never read up to its end is
//! never verified, exactly as before checkpoints.
//!
//! **Metadata** follows what unzip 6.0 extracts: Unix mode from the external
//! attributes when the host is Unix; mtime from the extended timestamp, the
//! old Info-ZIP Unix extra, or the DOS time as local time; uid/gid from the
//! 0x7875 extra, else the mounting user. Symlinks are `S_IFLNK` entries
//! whose content is the target.
//!
//! **Errors.** Encrypted members are listed with their sizes; opening one
//! fails with EACCES (and a log line): the data exists but cannot be read
//! without a key, which is a permission problem rather than damage.
//! Unsupported methods fail the open with EIO. Corrupt input is a
//! [`FsError::Corrupt`], never a panic or an endless loop.

pub mod checkpoint;
mod coverage;
pub mod decoders;
pub mod index;
pub mod records;

pub use checkpoint::CheckpointStats;
pub use index::ZipInfo;

use crate::cache::{Block, BlockCache};
use crate::error::{FsError, Result};
use crate::image::{Attr, DirEntry, Extent, FileKind, Image, NodeId, StatFs, ROOT};
use crate::source::ImageSource;
use checkpoint::Checkpoints;
use coverage::{Coverage, Verdict};
use decoders::{Checkpoint, Member, Stream};
use index::{Index, Node};
use packfs_format::zip::*;
use records::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Output bytes per cached chunk of a large compressed member.
pub const CHUNK: u64 = 256 << 10;
/// Compressed members smaller than this are decoded whole.
pub const SMALL: u64 = 1 << 20;
/// Flags in a node's cached data offset: its CRC-32 matched (stored
/// members), or a read found it wrong, so that every later read of the
/// member fails, not only the one that reached its end (the kernel retries
/// a failed readahead READ page by page, out of order).
const VERIFIED: u64 = 1 << 63;
const CRC_BAD: u64 = 1 << 62;
/// Longest symlink target accepted.
const MAX_LINK: u64 = 4096;

pub struct ZipFs {
    src: Arc<dyn ImageSource>,
    cache: Arc<BlockCache>,
    /// Immutable once built, so processes and images may share one: a
    /// forked child that opens the same file again reuses its parent's
    /// (see [`ZipFs::with_index`]) instead of building its own copy.
    idx: Arc<Index>,
    /// Per node (same index as `idx.nodes`), what reading found out: the
    /// member's data offset, from its local header (0 = not yet; data never
    /// starts at 0), and the [`VERIFIED`] and [`CRC_BAD`] bits. Kept out of
    /// the index so that reads never write to pages a forked process
    /// shares.
    state: Vec<AtomicU64>,
    cps: Checkpoints,
    /// The runs of large stored members served so far, for their CRC-32.
    coverage: Mutex<Coverage>,
    /// Uncompressed bytes produced by member decoders (tests, benchmarks).
    decoded: AtomicU64,
}

/// The default checkpoint budget for a block cache of `cache_bytes`: an
/// eighth of it, at least 4 MiB (about 90 deflate checkpoints) and at most
/// 64 MiB (about 1500). It is memory on top of the cache budget; a
/// checkpoint saves up to [`checkpoint::INTERVAL`] of decoding for 43 KiB,
/// which is worth more than the same bytes of cached chunks once a member
/// is larger than the cache.
pub fn default_checkpoint_budget(cache_bytes: usize) -> usize {
    (cache_bytes / 8).clamp(4 << 20, 64 << 20)
}

/// An open regular file.
pub struct ZipFile {
    node: u32,
    data_off: u64,
    /// The live decoder of a large compressed member.
    stream: Mutex<Option<Stream>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(node: u32, chunk: u64) -> u64 {
    ((node as u64) << 32) | chunk
}

impl ZipFs {
    /// Reads the central directory and builds the index.
    pub fn open(src: Box<dyn ImageSource>, cache: Arc<BlockCache>) -> Result<ZipFs> {
        ZipFs::open_shared(Arc::from(src), cache)
    }

    /// [`ZipFs::open`] of a source the caller keeps a handle on.
    pub fn open_shared(src: Arc<dyn ImageSource>, cache: Arc<BlockCache>) -> Result<ZipFs> {
        // SAFETY: no preconditions.
        let owner = unsafe { (libc::getuid(), libc::getgid()) };
        let idx = Index::build(&*src, owner)?;
        Ok(ZipFs::with_index(src, cache, Arc::new(idx)))
    }

    /// A reader of `src` over an index already built from the same bytes
    /// (by [`ZipFs::index`] of another reader of the same, unchanged file):
    /// no read of the central directory, and the index's memory shared.
    /// What reads find out (data offsets, checked CRCs) stays this
    /// reader's own.
    pub fn with_index(src: Arc<dyn ImageSource>, cache: Arc<BlockCache>, idx: Arc<Index>) -> ZipFs {
        let cps = Checkpoints::new(default_checkpoint_budget(cache.budget()));
        // 8 bytes per node, this reader's own; the index stays shared.
        let state = std::iter::repeat_with(|| AtomicU64::new(0))
            .take(idx.nodes.len())
            .collect();
        ZipFs {
            src,
            cache,
            idx,
            state,
            cps,
            coverage: Mutex::new(Coverage::default()),
            decoded: AtomicU64::new(0),
        }
    }

    /// The index, for [`ZipFs::with_index`].
    pub fn index(&self) -> Arc<Index> {
        self.idx.clone()
    }

    /// Node `i`'s [`ZipFs::state`] word.
    fn state(&self, i: u32) -> &AtomicU64 {
        &self.state[i as usize]
    }

    /// Replaces the checkpoint store by an empty one of `bytes` (0 disables
    /// checkpoints: every backward read of an evicted chunk then restarts
    /// at the member's start, as decoders of other methods do).
    pub fn with_checkpoint_budget(mut self, bytes: usize) -> ZipFs {
        self.cps = Checkpoints::new(bytes);
        self
    }

    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.cps.stats()
    }

    /// Uncompressed bytes decoded from compressed members since opening.
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    pub fn info(&self) -> ZipInfo {
        self.idx.info.clone()
    }

    pub fn cache(&self) -> &Arc<BlockCache> {
        &self.cache
    }

    fn node(&self, id: NodeId) -> Result<(u32, &Node)> {
        let i = id.checked_sub(1).ok_or(FsError::NotFound)?;
        let n = self.idx.nodes.get(i as usize).ok_or(FsError::NotFound)?;
        Ok((i as u32, n))
    }

    fn kind(n: &Node) -> FileKind {
        if n.is_dir() {
            FileKind::Dir
        } else if n.is_symlink() {
            FileKind::Symlink
        } else {
            FileKind::File
        }
    }

    fn attr(&self, i: u32, n: &Node) -> Attr {
        Attr {
            node: i as u64 + 1,
            ino: i as u64 + 1,
            kind: Self::kind(n),
            perm: (n.mode & 0o7777) as u16,
            nlink: if n.is_dir() { 2 + n.subdirs() } else { 1 },
            uid: n.uid,
            gid: n.gid,
            size: n.size,
            mtime: n.mtime,
            rdev: 0,
            blocks: if n.is_dir() || n.is_symlink() {
                0
            } else {
                n.size.div_ceil(512)
            },
        }
    }

    /// The entry's path, for messages.
    pub fn path_of(&self, mut i: u32) -> String {
        let mut parts = Vec::new();
        while i != 0 {
            let Some(n) = self.idx.nodes.get(i as usize) else {
                break;
            };
            parts.push(String::from_utf8_lossy(self.idx.name(n)).into_owned());
            if parts.len() > 10_000 {
                break;
            }
            i = n.parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// The member's data offset, from its local header (cached).
    fn data_off(&self, i: u32, n: &Node) -> Result<u64> {
        let cached = self.state(i).load(Ordering::Acquire) & !(VERIFIED | CRC_BAD);
        if cached != 0 {
            return Ok(cached);
        }
        // Damage is said under the member's name; an I/O error keeps its
        // kind (it names the image and offset already).
        let off = local_data_offset(&*self.src, n.local_offset).map_err(|e| match e {
            FsError::Corrupt(m) => FsError::corrupt(format!("{}: {m}", self.path_of(i))),
            e => e,
        })?;
        if off.checked_add(n.csize).is_none_or(|e| e > self.src.len()) {
            return Err(FsError::corrupt(format!(
                "{}: data ({} bytes at {off}) runs past the end of the file",
                self.path_of(i),
                n.csize
            )));
        }
        if n.method == METHOD_STORED && n.csize != n.size {
            return Err(FsError::corrupt(format!(
                "{}: stored member with compressed size {} != size {}",
                self.path_of(i),
                n.csize,
                n.size
            )));
        }
        self.state(i).fetch_or(off, Ordering::AcqRel);
        Ok(off)
    }

    /// A decoder of node `i`, at its start or resumed from `from`.
    fn stream(&self, i: u32, n: &Node, data_off: u64, from: Option<&Checkpoint>) -> Result<Stream> {
        let name = self.path_of(i);
        let m = Member {
            name: &name,
            method: n.method,
            flags: n.flags,
            data_off,
            csize: n.csize,
            size: n.size,
            crc: n.crc,
        };
        match from {
            Some(cp) => Stream::resume(self.src.clone(), &m, cp),
            None => Stream::new(self.src.clone(), &m),
        }
    }

    /// Saves a checkpoint of `s` if it is at one (see
    /// [`Stream::checkpoint_due`]) and none is held in its interval yet.
    fn record(&self, node: u32, s: &Stream, interval: u64) {
        let Some(at) = s.checkpoint_due(interval) else {
            return;
        };
        let lo = at - at % interval;
        if !self.cps.covers(node, lo, lo.saturating_add(interval)) {
            if let Some(cp) = s.checkpoint() {
                self.cps.insert(node, cp);
            }
        }
    }

    /// A small compressed member (or a symlink target), decoded whole.
    fn whole(&self, i: u32, n: &Node, data_off: u64) -> Result<Arc<Block>> {
        self.cache
            .get_or_load(key(i, 0), || self.decode_whole(i, n, data_off))
    }

    fn decode_whole(&self, i: u32, n: &Node, data_off: u64) -> Result<Block> {
        let data = self.stream(i, n, data_off, None)?.next(n.size as usize)?;
        self.decoded.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(Block::new(data, 0))
    }

    /// Chunk `k` of a large compressed member (see the module doc).
    fn chunk(&self, h: &ZipFile, n: &Node, k: u64, wait: bool) -> Result<Option<Arc<Block>>> {
        let want = key(h.node, k);
        if let Some(b) = self.cache.peek(want) {
            return Ok(Some(b));
        }
        let mut st = if wait {
            lock(&h.stream)
        } else {
            match h.stream.try_lock() {
                Ok(g) => g,
                Err(_) => return Ok(None),
            }
        };
        if let Some(b) = self.cache.peek(want) {
            return Ok(Some(b));
        }
        let target = k * CHUNK;
        // Readahead does not take the reader's decoder back to a chunk it
        // has passed: that chunk was served (the kernel holds its pages),
        // and the reader's next chunk would then be decoded again.
        if !wait && st.as_ref().is_some_and(|s| s.pos > target) {
            return Ok(None);
        }
        // The live decoder serves the chunk if it is at or before it; a
        // checkpoint at or before the chunk (and past the live decoder)
        // saves decoding from the further position.
        let live = st.as_ref().map(|s| s.pos).filter(|&p| p <= target);
        let cp = self
            .cps
            .nearest(h.node, target)
            .filter(|c| live.is_none_or(|p| c.pos > p));
        if let Some(cp) = cp {
            *st = Some(self.stream(h.node, n, h.data_off, Some(&cp))?);
            self.cps.note_resumed();
        } else if live.is_none() {
            *st = Some(self.stream(h.node, n, h.data_off, None)?);
        }
        let Some(s) = st.as_mut() else {
            return Err(FsError::corrupt("no decoder"));
        };
        let interval = self.cps.interval(n.size);
        loop {
            let j = s.pos / CHUNK;
            // A zstd frame start may fall inside a chunk: decode to the
            // chunk's end and drop that part (this decoder lacks its start).
            let lead = s.pos % CHUNK;
            let data = match s.next((CHUNK - lead) as usize) {
                Ok(d) => d,
                Err(e) => {
                    *st = None;
                    return Err(e);
                }
            };
            if data.is_empty() {
                return Err(FsError::corrupt(format!(
                    "{}: chunk {k} is past the end",
                    self.path_of(h.node)
                )));
            }
            self.decoded.fetch_add(data.len() as u64, Ordering::Relaxed);
            self.record(h.node, s, interval);
            if lead != 0 {
                continue;
            }
            let b = self
                .cache
                .get_or_load(key(h.node, j), || Ok::<_, FsError>(Block::new(data, 0)))?;
            if j == k {
                return Ok(Some(b));
            }
        }
    }

    /// Checks each member's local header against its central directory
    /// record (for `packfs verify`; reads use only the header's lengths):
    /// the signature, the method and, unless the sizes follow the data in a
    /// descriptor, the CRC-32 and sizes. Returns each mismatch with the
    /// member's path.
    pub fn check_local_headers(&self) -> Vec<(String, FsError)> {
        let mut bad = Vec::new();
        for (i, n) in self.idx.nodes.iter().enumerate().skip(1) {
            if n.flags & index::NODE_SYNTH != 0 {
                continue;
            }
            let mut h = [0u8; LOCAL_LEN];
            let read = crate::source::range_check(self.src.len(), n.local_offset, LOCAL_LEN)
                .and_then(|_| self.src.read_at(n.local_offset, &mut h));
            let why = match read.map(|_| packfs_format::zip::local::LocalHeader::decode(&h)) {
                Err(e) => Some(e.to_string()),
                Ok(Err(e)) => Some(e.to_string()),
                Ok(Ok(l)) => {
                    let sized = l.flags & FLAG_DESCRIPTOR == 0;
                    let differs =
                        |local: u32, central: u64| local as u64 != MAX32 && local as u64 != central;
                    if l.method != n.method {
                        Some(format!(
                            "method {} there, {} in the central directory",
                            l.method, n.method
                        ))
                    } else if sized && !n.is_dir() && l.crc != n.crc {
                        Some(format!(
                            "CRC-32 {:08x} there, {:08x} in the central directory",
                            l.crc, n.crc
                        ))
                    } else if sized
                        && !n.is_dir()
                        && (differs(l.csize, n.csize) || differs(l.size, n.size))
                    {
                        Some("sizes there differ from the central directory's".into())
                    } else {
                        None
                    }
                }
            };
            if let Some(why) = why {
                bad.push((
                    self.path_of(i as u32),
                    FsError::corrupt(format!("local header at {}: {why}", n.local_offset)),
                ));
            }
        }
        bad
    }

    /// Decodes into the cache as much of the archive as fits in about 90% of
    /// the budget, counting what the cache held before (a union's shards
    /// share one cache); small compressed members only. Returns (blocks,
    /// bytes).
    pub fn preload(&self) -> Result<(u64, u64)> {
        let room = self.cache.preload_room();
        let (mut blocks, mut bytes) = (0u64, 0u64);
        for (i, n) in self.idx.nodes.iter().enumerate().skip(1) {
            if n.is_dir() || n.encrypted() || n.size == 0 {
                continue;
            }
            if bytes + n.size > room {
                break;
            }
            let off = self.data_off(i as u32, n)?;
            if n.method == METHOD_STORED {
                self.src.will_need(off, n.size as usize);
            } else if n.size < SMALL {
                self.whole(i as u32, n, off)?;
                blocks += 1;
                bytes += n.size;
            }
        }
        Ok((blocks, bytes))
    }

    fn check_readable(&self, i: u32, n: &Node) -> Result<()> {
        if n.encrypted() {
            return Err(FsError::io(
                format!("{}: encrypted", self.path_of(i)),
                std::io::Error::from_raw_os_error(libc::EACCES),
            ));
        }
        match n.method {
            METHOD_STORED | METHOD_DEFLATE | METHOD_DEFLATE64 | METHOD_BZIP2 | METHOD_LZMA
            | METHOD_ZSTD | 20 | METHOD_XZ => Ok(()),
            m => Err(FsError::Unsupported(format!(
                "{}: unsupported method {} ({m})",
                self.path_of(i),
                method_name(m)
            ))),
        }
    }

    /// Reads bytes `offset..offset+len` of node `i`'s content (clamped).
    fn read_content(&self, h: &ZipFile, n: &Node, offset: u64, len: u64) -> Result<Vec<u8>> {
        if offset >= n.size || len == 0 {
            return Ok(Vec::new());
        }
        let end = n.size.min(offset.saturating_add(len));
        if n.method == METHOD_STORED {
            let mut out = vec![0u8; (end - offset) as usize];
            self.src.read_at(h.data_off + offset, &mut out)?;
            if self.state(h.node).load(Ordering::Acquire) & VERIFIED == 0 {
                self.check_stored(h, n, offset, &out)?;
            }
            return Ok(out);
        }
        if n.size < SMALL {
            let b = self.whole(h.node, n, h.data_off)?;
            let out = b
                .data
                .get(offset as usize..end as usize)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| FsError::corrupt("decoded member shorter than its size"))?;
            self.cache.served(key(h.node, 0), &b, out.len());
            return Ok(out);
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut at = offset;
        while at < end {
            let k = at / CHUNK;
            let Some(b) = self.chunk(h, n, k, true)? else {
                return Err(FsError::corrupt("chunk not decoded"));
            };
            let s = (at - k * CHUNK) as usize;
            let e = ((end - k * CHUNK).min(CHUNK) as usize).min(b.data.len());
            if s >= e {
                return Err(FsError::corrupt(format!(
                    "{}: chunk {k} is short",
                    self.path_of(h.node)
                )));
            }
            out.extend_from_slice(&b.data[s..e]);
            self.cache.served(key(h.node, k), &b, e - s);
            at += (e - s) as u64;
        }
        Ok(out)
    }

    /// Adds `data`, read at `offset`, to the runs of a large stored
    /// member served so far ([`coverage`]); fails the read that completes
    /// them if the member's CRC-32 is not the archive's, and every read of
    /// the member after it.
    fn check_stored(&self, h: &ZipFile, n: &Node, offset: u64, data: &[u8]) -> Result<()> {
        let mismatch = |got| decoders::crc_mismatch(&self.path_of(h.node), n.crc, got);
        if self.state(h.node).load(Ordering::Acquire) & CRC_BAD != 0 {
            return Err(FsError::corrupt(format!(
                "{}: CRC-32 mismatch (expected {:08x})",
                self.path_of(h.node),
                n.crc
            )));
        }
        let verdict = lock(&self.coverage).add(h.node, n.size, n.crc, offset, data);
        match verdict {
            Verdict::Partial => Ok(()),
            Verdict::Good => {
                self.state(h.node).fetch_or(VERIFIED, Ordering::AcqRel);
                Ok(())
            }
            Verdict::Bad { got } => {
                self.state(h.node).fetch_or(CRC_BAD, Ordering::AcqRel);
                Err(mismatch(got))
            }
        }
    }

    fn open_node(&self, i: u32, n: &Node) -> Result<ZipFile> {
        self.check_readable(i, n)?;
        // No read of an empty member reaches a decoder or a check, so its
        // CRC-32 is checked here: that of no bytes is 0 (unzip -t, zipfile).
        if n.size == 0 && n.crc != 0 {
            return Err(decoders::crc_mismatch(&self.path_of(i), n.crc, 0));
        }
        let data_off = self.data_off(i, n)?;
        if n.size / CHUNK > u32::MAX as u64 {
            return Err(FsError::Unsupported(format!(
                "{}: member of {} bytes is too large",
                self.path_of(i),
                n.size
            )));
        }
        if n.method == METHOD_STORED
            && n.size < SMALL
            && self.state(i).load(Ordering::Acquire) & VERIFIED == 0
        {
            let data = self.src.read_vec(data_off, n.size as usize)?;
            let crc = crc32fast::hash(&data);
            crate::buffers::recycle(data);
            if crc != n.crc {
                return Err(decoders::crc_mismatch(&self.path_of(i), n.crc, crc));
            }
            self.state(i).fetch_or(VERIFIED, Ordering::AcqRel);
        }
        Ok(ZipFile {
            node: i,
            data_off,
            stream: Mutex::new(None),
        })
    }
}

impl Image for ZipFs {
    type Handle = ZipFile;

    fn getattr(&self, node: NodeId) -> Result<Attr> {
        let (i, n) = self.node(node)?;
        Ok(self.attr(i, n))
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Attr> {
        let (_, p) = self.node(parent)?;
        if !p.is_dir() {
            return Err(FsError::NotDir);
        }
        let kids = self.idx.children_of(p);
        let pos = kids
            .binary_search_by(|&c| self.idx.name(&self.idx.nodes[c as usize]).cmp(name))
            .map_err(|_| FsError::NotFound)?;
        let c = kids[pos];
        Ok(self.attr(c, &self.idx.nodes[c as usize]))
    }

    fn readdir(
        &self,
        dir: NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let (_, d) = self.node(dir)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        let kids = self.idx.children_of(d);
        let from = cookie.saturating_sub(2) as usize;
        for (pos, &c) in kids.iter().enumerate().skip(from) {
            let n = &self.idx.nodes[c as usize];
            let e = DirEntry {
                name: self.idx.name(n).to_vec(),
                node: c as u64 + 1,
                ino: c as u64 + 1,
                kind: Self::kind(n),
                cookie: pos as u64 + 3,
            };
            if !sink(e) {
                break;
            }
        }
        Ok(())
    }

    fn open(&self, node: NodeId) -> Result<ZipFile> {
        let (i, n) = self.node(node)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        if n.is_symlink() {
            return Err(FsError::Invalid(format!(
                "{}: is a symlink",
                self.path_of(i)
            )));
        }
        self.open_node(i, n)
    }

    fn read(&self, h: &ZipFile, offset: u64, size: u32) -> Result<Vec<u8>> {
        let n = &self.idx.nodes[h.node as usize];
        self.read_content(h, n, offset, size as u64)
    }

    fn prefetch(&self, h: &ZipFile, offset: u64, len: u64) {
        let n = &self.idx.nodes[h.node as usize];
        if offset >= n.size {
            return;
        }
        let end = n.size.min(offset.saturating_add(len));
        if n.method == METHOD_STORED {
            self.src
                .will_need(h.data_off + offset, (end - offset) as usize);
        } else if n.size < SMALL {
            // Not a member its reader has just had in full (cache.rs).
            let _ = self
                .cache
                .get_or_load_ahead(key(h.node, 0), || self.decode_whole(h.node, n, h.data_off));
        } else {
            for k in offset / CHUNK..end.div_ceil(CHUNK) {
                // Never wait for a reader that holds the decoder; errors are
                // left for the real read.
                match self.chunk(h, n, k, false) {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }
    }

    fn will_read(&self, span: Extent) {
        if span.part == 0 {
            self.src
                .will_read(span.offset, crate::image::clamp_len(span.len));
        }
    }

    /// The member's local record onwards: its data follows a local header
    /// of a few dozen bytes.
    fn extent(&self, node: NodeId) -> Result<Extent> {
        let (_, n) = self.node(node)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        if n.is_symlink() {
            return Err(FsError::Invalid("not a regular file".into()));
        }
        Ok(Extent {
            part: 0,
            offset: n.local_offset,
            len: n.csize,
        })
    }

    /// Every member is its own stream: no storage is shared between files.
    fn shared_unit(&self, _h: &ZipFile) -> Option<u64> {
        None
    }

    fn prefetch_unit(&self, _unit: u64) {}

    fn readlink(&self, node: NodeId) -> Result<Vec<u8>> {
        let (i, n) = self.node(node)?;
        if !n.is_symlink() {
            return Err(FsError::NotSymlink);
        }
        if n.size > MAX_LINK {
            return Err(FsError::corrupt(format!(
                "{}: symlink target of {} bytes",
                self.path_of(i),
                n.size
            )));
        }
        let h = self.open_node(i, n)?;
        self.read_content(&h, n, 0, n.size)
    }

    fn xattrs(&self, node: NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.node(node)?;
        Ok(Vec::new())
    }

    fn statfs(&self) -> StatFs {
        StatFs {
            blocks: self.src.len().div_ceil(CHUNK),
            files: self.idx.nodes.len() as u64,
            block_size: CHUNK as u32,
            name_max: 255,
        }
    }

    fn block_size(&self) -> u32 {
        CHUNK as u32
    }

    fn parent_ino(&self, dir: NodeId) -> Result<u64> {
        let (_, d) = self.node(dir)?;
        if !d.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(if dir == ROOT {
            ROOT
        } else {
            d.parent as u64 + 1
        })
    }
}

#[cfg(test)]
mod tests;
