//! File data: blocks, sparse blocks, fragments, whole-file dedup.
//!
//! Files are cut into *pieces* (a few consecutive blocks of one file) and
//! pieces are grouped into *batches* bounded by bytes and count. Each batch is
//! read, hashed and compressed in parallel on the pool, then its results are
//! written strictly in piece order; while one batch is being written the next
//! is already being compressed, and the files of the batches after it are
//! being prefetched into the page cache on the I/O pool (see `crate::prefetch`).
//! Batch boundaries depend only on constants and the tree, never on the
//! thread count, and fragment blocks are sealed and placed at fixed points
//! (batch ends), so the image is byte-identical for any number of threads.
//! A placed fragment block is written when its compression ends, the data
//! placed after it behind it (`super::write_behind`), so that the pool compresses
//! fragment blocks of many batches at once.
//! Memory in flight is bounded by two batches ([`BATCH_BYTES`] each) plus
//! their compressed copies, and by what [`WriteBehind`] holds.

use super::write_behind::{Mark, SealedFragment, WriteBehind};
use super::writer::ImageWriter;
use crate::detach;
use crate::prefetch::{Hint, Prefetcher, PREFETCH_BATCHES};
use crate::source_check::{changed_size, check_empty, open_source};
use crate::tree::Tree;
use crate::{PackError, PackOptions};
use packfs_format::codec::Compressor;
use packfs_format::codec::{CodecError, Encoder};
use packfs_format::squashfs::metadata::data_word;
use packfs_format::squashfs::INVALID_FRAG;
use rayon::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Raw bytes read per batch at most (plus one piece).
pub(crate) const BATCH_BYTES: u64 = 32 << 20;
/// Pieces per batch at most (bounds per-piece overhead for tiny files).
pub(crate) const BATCH_PIECES: usize = 4096;
/// Bytes per piece at most (at least one block): small enough that one big
/// file still spreads over all threads.
const PIECE_BYTES: u64 = 1 << 20;

/// Where a file's data ended up.
#[derive(Clone, Debug)]
pub struct FileLoc {
    pub blocks_start: u64,
    /// Index of the file's first size word in [`DataOutput::block_sizes`].
    pub sizes_start: usize,
    pub block_count: usize,
    pub fragment: u32,
    pub frag_offset: u32,
    /// Bytes stored as sparse (all-zero) blocks.
    pub sparse: u64,
    /// While the data is written: [`NO_START`], or with `blocks_start` the
    /// [`Mark`] where the file's blocks start, resolved to `blocks_start`
    /// at the end. Kept here rather than in a vector of `Option<Mark>` of
    /// its own: one file costs 48 bytes, not 64 (millions of files).
    start_frags: u32,
}

/// [`FileLoc::start_frags`] of a file whose start is not marked (no data).
const NO_START: u32 = u32::MAX;

impl FileLoc {
    fn start(&self) -> Option<Mark> {
        (self.start_frags != NO_START)
            .then(|| Mark::from_parts(self.blocks_start, self.start_frags))
    }

    fn set_start(&mut self, m: Mark) {
        (self.blocks_start, self.start_frags) = m.parts();
    }
}

impl Default for FileLoc {
    fn default() -> Self {
        FileLoc {
            blocks_start: 0,
            sizes_start: 0,
            block_count: 0,
            fragment: INVALID_FRAG,
            frag_offset: 0,
            sparse: 0,
            start_frags: NO_START,
        }
    }
}

pub struct DataOutput {
    /// Indexed by inode, or by data number with [`DataOutput::data_of`];
    /// meaningful for regular files only. Read through [`DataOutput::loc`].
    /// Once a stream's namespace spills, the locations go to
    /// [`DataOutput::loc_file`] as they are final: this then holds none
    /// at the end.
    pub locs: Vec<FileLoc>,
    /// Every file's location by data number, when they went to disk.
    pub loc_file: Option<LocFile>,
    /// A stream's files: each inode's data number (none, `u32::MAX`, for
    /// other than files), `locs`' index.
    pub data_of: Option<Vec<u32>>,
    /// Size words of all stored files' blocks, back to back.
    pub block_sizes: Vec<u32>,
    /// Fragment table entries (16 bytes each).
    pub fragment_entries: Vec<u8>,
    pub fragment_count: u32,
    pub bytes_in: u64,
    pub dedup_files: u64,
    pub dedup_bytes: u64,
}

impl DataOutput {
    /// Nothing written yet, the locations given.
    fn new(locs: Vec<FileLoc>, loc_file: Option<LocFile>) -> DataOutput {
        DataOutput {
            locs,
            loc_file,
            data_of: None,
            block_sizes: Vec::new(),
            fragment_entries: Vec::new(),
            fragment_count: 0,
            bytes_in: 0,
            dedup_files: 0,
            dedup_bytes: 0,
        }
    }

    /// Where the data of regular file `ino` is.
    pub fn loc(&self, ino: u32) -> FileLoc {
        let at = match &self.data_of {
            Some(map) => map[ino as usize],
            None => ino,
        };
        self.locs.get(at as usize).cloned().unwrap_or_default()
    }

    /// Lookups of locations by data number, from memory or from
    /// [`DataOutput::loc_file`].
    pub(crate) fn loc_lookup(&self) -> LocLookup<'_> {
        LocLookup {
            data: self,
            pages: HashMap::new(),
            tick: 0,
        }
    }
}

/// Bytes of one location in a [`LocFile`].
const LOC_BYTES: usize = 40;

impl FileLoc {
    /// The location as a [`LocFile`] stores it; its start is resolved.
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.blocks_start.to_le_bytes());
        out.extend_from_slice(&(self.sizes_start as u64).to_le_bytes());
        out.extend_from_slice(&(self.block_count as u64).to_le_bytes());
        out.extend_from_slice(&self.fragment.to_le_bytes());
        out.extend_from_slice(&self.frag_offset.to_le_bytes());
        out.extend_from_slice(&self.sparse.to_le_bytes());
    }

    fn decode(b: &[u8]) -> FileLoc {
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        FileLoc {
            blocks_start: u64_at(0),
            sizes_start: u64_at(8) as usize,
            block_count: u64_at(16) as usize,
            fragment: u32_at(24),
            frag_offset: u32_at(28),
            sparse: u64_at(32),
            start_frags: NO_START,
        }
    }
}

/// Files' locations on disk, by data number: fixed-size records, record
/// `n` at `n * LOC_BYTES`, in an unnamed file in the spill directory (gone
/// with its handle, whichever way the pack ends). A stream whose namespace
/// spilled has more files than their locations would fit in its budget.
pub struct LocFile {
    file: File,
    /// The spill directory, for messages.
    dir: std::path::PathBuf,
    /// Encoded records not yet written, from record [`LocFile::buf_from`].
    buf: Vec<u8>,
    buf_from: u64,
}

/// Bytes of records [`LocFile`] gathers before a write.
const LOC_WRITE_BYTES: usize = 1 << 20;

impl LocFile {
    fn create(dir: &Path) -> Result<LocFile, PackError> {
        let file = tempfile::tempfile_in(dir)
            .map_err(PackError::output(dir, "writing the spilled file locations"))?;
        Ok(LocFile {
            file,
            dir: dir.to_path_buf(),
            buf: Vec::with_capacity(LOC_WRITE_BYTES + LOC_BYTES),
            buf_from: 0,
        })
    }

    /// Records written or gathered.
    fn next(&self) -> u64 {
        self.buf_from + (self.buf.len() / LOC_BYTES) as u64
    }

    /// Stores the location of data number `n`, whose start is resolved;
    /// numbers skipped since the last get the default location.
    fn put(&mut self, n: u32, loc: &FileLoc) -> Result<(), PackError> {
        let n = n as u64;
        if n < self.next() {
            // Not in order: written in place.
            self.flush()?;
            let mut b = Vec::with_capacity(LOC_BYTES);
            loc.encode(&mut b);
            return self
                .file
                .write_all_at(&b, n * LOC_BYTES as u64)
                .map_err(PackError::output(
                    &self.dir,
                    "writing the spilled file locations",
                ));
        }
        while self.next() < n {
            FileLoc::default().encode(&mut self.buf);
        }
        loc.encode(&mut self.buf);
        if self.buf.len() >= LOC_WRITE_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PackError> {
        self.file
            .write_all_at(&self.buf, self.buf_from * LOC_BYTES as u64)
            .map_err(PackError::output(
                &self.dir,
                "writing the spilled file locations",
            ))?;
        self.buf_from = self.next();
        self.buf.clear();
        Ok(())
    }

    /// Reads `out.len() / LOC_BYTES` records from record `n` on; records
    /// never stored read as the default location.
    fn read(&self, n: u64, out: &mut [u8]) -> Result<(), PackError> {
        let err = PackError::output(&self.dir, "reading the spilled file locations");
        out.fill(0);
        let mut at = 0;
        while at < out.len() {
            match self
                .file
                .read_at(&mut out[at..], n * LOC_BYTES as u64 + at as u64)
            {
                Ok(0) => break,
                Ok(k) => at += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        // What lies past the file's end was never stored.
        let whole = at / LOC_BYTES;
        for rec in out[whole * LOC_BYTES..].chunks_exact_mut(LOC_BYTES) {
            let mut b = Vec::with_capacity(LOC_BYTES);
            FileLoc::default().encode(&mut b);
            rec.copy_from_slice(&b);
        }
        Ok(())
    }

    /// The location of data number `n`.
    fn get(&self, n: u32) -> Result<FileLoc, PackError> {
        let n = n as u64;
        if n >= self.buf_from {
            let at = (n - self.buf_from) as usize * LOC_BYTES;
            return Ok(match self.buf.get(at..at + LOC_BYTES) {
                Some(b) => FileLoc::decode(b),
                None => FileLoc::default(),
            });
        }
        let mut b = [0u8; LOC_BYTES];
        self.read(n, &mut b)?;
        Ok(FileLoc::decode(&b))
    }
}

/// Records in a page of [`LocLookup`]'s cache.
const LOC_PAGE: u64 = 256;
/// Pages [`LocLookup`] keeps.
const LOC_PAGES: usize = 256;

/// Locations by data number for the metadata pass. From a [`LocFile`] they
/// are read a page at a time through a small cache: the pass asks in
/// directory order, and a stream's members come mostly in directory order
/// too (an archiver writes a tree directory by directory), so its asks
/// fall in a few pages at a time and each page is read once. Joining the
/// two orders by an external sort would read each record once whatever
/// the stream's order, at the price of two more passes over disk for every
/// stream; a stream in no such order costs here a read a lookup instead,
/// with memory still bounded by the cache.
pub(crate) struct LocLookup<'d> {
    data: &'d DataOutput,
    /// Page number -> (records, when last used).
    pages: HashMap<u64, (Vec<u8>, u64)>,
    tick: u64,
}

impl LocLookup<'_> {
    /// The location of data number `n`.
    pub fn get(&mut self, n: u32) -> Result<FileLoc, PackError> {
        let Some(file) = &self.data.loc_file else {
            return Ok(self.data.locs.get(n as usize).cloned().unwrap_or_default());
        };
        if n as u64 >= file.buf_from {
            return file.get(n);
        }
        self.tick += 1;
        let page = n as u64 / LOC_PAGE;
        if !self.pages.contains_key(&page) {
            let mut b = match self.pages.len() >= LOC_PAGES {
                true => {
                    let oldest = self
                        .pages
                        .iter()
                        .min_by_key(|(_, (_, used))| *used)
                        .map(|(&p, _)| p)
                        .unwrap_or(page);
                    self.pages
                        .remove(&oldest)
                        .map(|(b, _)| b)
                        .unwrap_or_default()
                }
                false => vec![0u8; LOC_PAGE as usize * LOC_BYTES],
            };
            file.read(page * LOC_PAGE, &mut b)?;
            self.pages.insert(page, (b, self.tick));
        }
        let Some((b, used)) = self.pages.get_mut(&page) else {
            return file.get(n);
        };
        *used = self.tick;
        let at = (n as u64 % LOC_PAGE) as usize * LOC_BYTES;
        Ok(FileLoc::decode(&b[at..at + LOC_BYTES]))
    }
}

/// A few consecutive blocks of one file, the unit of parallel work.
pub(crate) struct Piece {
    /// The file's inode, or for a stream the file's number in stream order.
    pub ino: u32,
    /// Where the data comes from, for reading and for messages (a stream's
    /// pieces name `ARCHIVE:MEMBER`).
    pub path: Arc<Path>,
    pub size: u64,
    pub first_block: u64,
    pub nblocks: u64,
    pub last: bool,
    pub data: PieceData,
}

/// Where a piece's bytes come from.
pub(crate) enum PieceData {
    /// The source file at [`Piece::path`], read on the pool.
    File {
        maybe_sparse: bool,
        /// The source's `st_ino` at the walk.
        src_ino: u64,
    },
    /// The piece's blocks, one buffer each, read ahead from a stream (an
    /// archive member); `None` for a block that lies wholly in a hole of a
    /// sparse member. Taken by the read.
    Blocks(Vec<Option<Vec<u8>>>),
}

enum Block {
    Sparse(u32),
    Stored {
        bytes: Vec<u8>,
        compressed: bool,
    },
    /// The partial last block, bound for a fragment.
    Tail(Vec<u8>),
}

/// What the compression tasks share; owned (behind an `Arc`), as the tasks
/// may outlive a writer that stopped early (see `crate::detach`).
struct Ctx {
    enc: Encoder,
    /// The pack's cancel flag, looked at before every block, so that a
    /// signal stops the workers within one block, whatever is queued.
    cancel: Option<Arc<AtomicBool>>,
    /// Raised when the writer returns early for any reason: the tasks still
    /// queued have no one to give their blocks to.
    abandoned: AtomicBool,
    /// Whether the codec is expensive enough to probe blocks first.
    probe: bool,
    block_size: u32,
    fragments: bool,
    /// Whether incompressible tails get a stored block of their own instead
    /// of a place in a fragment (see [`stores_tail_raw`]).
    raw_tails: bool,
    zero_hash: blake3::Hash,
    /// [`PackOptions::memory`].
    memory: u64,
}

/// A file whose pieces are being consumed.
struct Current {
    ino: u32,
    start: Mark,
    sizes_start: usize,
    /// Over the BLAKE3 hashes of the file's blocks (the tail excluded).
    hasher: blake3::Hasher,
    /// Bytes covered by the blocks (the tail excluded).
    block_bytes: u64,
    sparse: u64,
    tail: Option<(Vec<u8>, blake3::Hash)>,
}

/// First 128 bits of a BLAKE3 hash: the dedup key. BLAKE3 is a
/// cryptographic hash, so even truncated to 128 bits a collision between
/// different contents (birthday bound ~2^64 entries) is not a practical
/// concern; equal keys are taken as equal content without comparing bytes.
type Key = [u8; 16];

fn key(h: &blake3::Hash) -> Key {
    let mut k = [0u8; 16];
    k.copy_from_slice(&h.as_bytes()[..16]);
    k
}

/// How many tails the dedup index keeps within a budget of `memory`
/// bytes: an eighth of it, at the 52 bytes a key may take in a hash table
/// just grown (24 of key and value, one of control, the table at most 7/8
/// full, then doubled). Once full, new tails are stored without being
/// indexed: a later duplicate of one is stored again. The image stays
/// correct; only dedup of files with more distinct tails than this is lost.
fn tail_dedup_cap(memory: u64) -> usize {
    (memory / 8 / 52).min(usize::MAX as u64) as usize
}

struct Writer<'a, 'f, 'p> {
    img: &'a mut ImageWriter<'f>,
    ctx: Arc<Ctx>,
    /// Where sealed fragment blocks are compressed, while this thread goes on.
    pool: &'p rayon::ThreadPool,
    out: DataOutput,
    cur: Option<Current>,
    /// Dedup of a file's run of blocks: key over (block bytes, per-block
    /// hashes) -> inode whose `FileLoc` holds the run; once the locations
    /// go to disk, it stops growing at [`Writer::tail_dedup_cap`]. Kept apart from the
    /// tail so files that differ only in their last partial block (e.g.
    /// versions of a log) still share every full block, as in mksquashfs.
    block_dedup: HashMap<Key, u32>,
    /// Dedup of tails: key of the tail's bytes -> (fragment, offset).
    tail_dedup: HashMap<Key, (u32, u32)>,
    /// Tails [`Writer::tail_dedup`] may hold ([`tail_dedup_cap`]).
    tail_dedup_cap: usize,
    frag_buf: Vec<u8>,
    /// Sealed, not yet placed fragment blocks, in index order.
    frag_sealed: VecDeque<SealedFragment>,
    /// The data area: placed blocks, written in order as they are ready.
    behind: WriteBehind,
    /// The data number of `out.locs[0]`: those before it are in
    /// [`DataOutput::loc_file`].
    locs_base: u32,
    /// Files of an access profile still to be written; when the last one is
    /// done its open fragment block is sealed and written at once, so the
    /// profile's data (blocks and tails) is one region at the image's start
    /// that no other file's data interleaves (see `crate::order`).
    files_left_in_profile: usize,
}

fn expensive(enc: &Encoder) -> bool {
    match enc.codec {
        Compressor::Gzip | Compressor::Xz | Compressor::Lzma => true,
        Compressor::Zstd => enc.level > 3,
        Compressor::Lz4 | Compressor::Lzo => false,
    }
}

/// Order-0 entropy in bits per byte.
fn entropy(data: &[u8]) -> f64 {
    let mut hist = [0u32; 256];
    for &b in data {
        hist[b as usize] += 1;
    }
    let n = data.len() as f64;
    hist.iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

thread_local! {
    /// Per-thread zstd level-1 context for the incompressibility probe (a
    /// context per block would cost more than the probe itself).
    static PROBE: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Bytes the zstd level-1 probe gives for `data`, with a per-thread context.
fn probe_len(data: &[u8]) -> Result<usize, CodecError> {
    let probe_err = |e: std::io::Error| CodecError::Corrupt {
        codec: "zstd",
        detail: e.to_string(),
    };
    PROBE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Compressor::new(1).map_err(probe_err)?);
        }
        let Some(c) = slot.as_mut() else {
            return Ok(data.len());
        };
        let mut scratch = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
        c.compress_to_buffer(data, &mut scratch)
            .map_err(probe_err)?;
        Ok(scratch.len())
    })
}

/// True only when a block is almost surely incompressible: its byte entropy
/// is so close to 8 bits that entropy coding can gain < 0.4%, *and* a fast
/// zstd level-1 pass (whose window spans the whole block, unlike LZ4's 64 KiB,
/// so it sees the same repeats xz or high zstd would) saves under 2%. Both
/// are cheap next to gzip/xz/high zstd. Blocks failing either test go to the
/// real codec, so the image stays as small as mksquashfs makes it.
///
/// `entropy` is [`block_entropy`]'s value for `data`.
fn looks_incompressible(data: &[u8], entropy: f64) -> Result<bool, CodecError> {
    if entropy < 7.97 {
        return Ok(false);
    }
    Ok(probe_len(data)? * 100 >= data.len() * 98)
}

/// Tails shorter than this always go to a fragment: there they share
/// compression context with their neighbours (file headers), and a block of
/// their own would cost an index entry for little gain.
const RAW_TAIL_MIN: usize = 4096;

/// Whether a file's tail is stored raw in a block of its own rather than
/// packed into a fragment block.
///
/// A fragment block is compressed as a whole, so reading one small file out
/// of it decodes the whole block (a block size of data for a file of a few
/// KiB), and the decoded block must then be cached to serve its neighbours.
/// For already-compressed data (JPEG, PNG, compressed archives) that work
/// buys almost nothing: the block compresses by the little its files'
/// headers share. A tail stored raw in its own block is read straight from
/// the image with no decoding and no cache, the way the kernel, squashfuse
/// and mksquashfs's `-no-fragments` images read it; the image is the same
/// standard SquashFS. The test is cheap for text (order-0 entropy well
/// below 7.5 bits per byte stops it before the probe) and, for high-entropy
/// data, a zstd level-1 pass over the tail alone that must save under 3%.
fn stores_tail_raw(tail: &[u8]) -> Result<bool, CodecError> {
    if tail.len() < RAW_TAIL_MIN || entropy(tail) < 7.5 {
        return Ok(false);
    }
    Ok(probe_len(tail)? * 100 >= tail.len() * 97)
}

/// Byte entropy of a block when the codec is expensive enough for it to
/// matter (see [`looks_incompressible`]), else 0.
fn block_entropy(ctx: &Ctx, data: &[u8]) -> f64 {
    if ctx.probe && data.len() >= 4096 {
        entropy(data)
    } else {
        0.0
    }
}

/// From this byte entropy up, gzip blocks are deflated at libdeflate's
/// fastest level whatever the level asked for. Such blocks are already
/// entropy-coded data (JPEG, video, compressed archives) with few repeats,
/// so the deeper match search of higher levels finds next to nothing: on
/// JPEG blocks level 1's output is within a fraction of a percent of level
/// 9's, at less CPU time (docs/benchmarks/defaults.md). Text and binaries
/// (entropy < 7) are never affected.
const FAST_DEFLATE_ENTROPY: f64 = 7.8;

/// Compresses a data or fragment block; returns the stored bytes and whether
/// they are compressed.
fn compress_block(ctx: &Ctx, data: Vec<u8>) -> Result<(Vec<u8>, bool), CodecError> {
    if data.is_empty() {
        return Ok((data, false));
    }
    let ent = block_entropy(ctx, &data);
    if looks_incompressible(&data, ent)? {
        return Ok((data, false));
    }
    if ctx.enc.codec == Compressor::Gzip {
        let level = if ent >= FAST_DEFLATE_ENTROPY {
            1
        } else {
            ctx.enc.level
        };
        let enc = Encoder { level, ..ctx.enc };
        let mut out = Vec::new();
        return Ok(if enc.compress(&data, &mut out)? {
            (out, true)
        } else {
            (data, false)
        });
    }
    let mut out = Vec::new();
    if ctx.enc.compress(&data, &mut out)? {
        Ok((out, true))
    } else {
        Ok((data, false))
    }
}

/// Whether `off..off+len` is entirely a hole, asked of the filesystem with
/// SEEK_DATA so holes are never read. Any failure means "not known to be a
/// hole": the block is then read and zero-detected instead.
fn is_hole(file: &File, off: u64, len: u64) -> bool {
    // SAFETY: lseek on a valid fd has no memory effects.
    let r = unsafe { libc::lseek(file.as_raw_fd(), off as libc::off_t, libc::SEEK_DATA) };
    if r < 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
    }
    r as u64 >= off + len
}

fn read_piece(ctx: &Ctx, p: &mut Piece) -> Result<Vec<(Block, blake3::Hash)>, PackError> {
    match &mut p.data {
        PieceData::File {
            maybe_sparse,
            src_ino,
        } => {
            let (maybe_sparse, src_ino) = (*maybe_sparse, *src_ino);
            read_file_piece(ctx, p, maybe_sparse, src_ino)
        }
        PieceData::Blocks(blocks) => {
            let blocks = std::mem::take(blocks);
            blocks_piece(ctx, p, blocks)
        }
    }
}

/// The hash of a sparse block of `len` bytes.
fn zero_hash(ctx: &Ctx, len: u64) -> blake3::Hash {
    if len == ctx.block_size as u64 {
        ctx.zero_hash
    } else {
        blake3::hash(&vec![0u8; len as usize])
    }
}

fn read_file_piece(
    ctx: &Ctx,
    p: &Piece,
    maybe_sparse: bool,
    src_ino: u64,
) -> Result<Vec<(Block, blake3::Hash)>, PackError> {
    if p.nblocks == 0 {
        check_empty(&p.path, src_ino)?;
        return Ok(Vec::new());
    }
    let file = open_source(&p.path, src_ino)?;
    let bs = ctx.block_size as u64;
    let changed = || changed_size(&p.path, &file, p.size);
    let mut out = Vec::with_capacity(p.nblocks as usize);
    for b in p.first_block..p.first_block + p.nblocks {
        if ctx.stopped() {
            return Err(PackError::Interrupted);
        }
        let off = b * bs;
        let len = bs.min(p.size - off);
        let tail = ctx.fragments && len < bs;
        if !tail && maybe_sparse && is_hole(&file, off, len) {
            out.push((Block::Sparse(len as u32), zero_hash(ctx, len)));
            continue;
        }
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, off).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                changed()
            } else {
                PackError::io(&*p.path)(e)
            }
        })?;
        out.push(block_of(ctx, p, buf, tail)?);
    }
    if p.last {
        let now = file.metadata().map_err(PackError::io(&*p.path))?.len();
        if now != p.size {
            return Err(changed());
        }
    }
    Ok(out)
}

/// The blocks of a piece whose bytes are in hand (`None`: all zeros).
fn blocks_piece(
    ctx: &Ctx,
    p: &Piece,
    blocks: Vec<Option<Vec<u8>>>,
) -> Result<Vec<(Block, blake3::Hash)>, PackError> {
    let bs = ctx.block_size as u64;
    let mut out = Vec::with_capacity(p.nblocks as usize);
    for (b, bytes) in (p.first_block..p.first_block + p.nblocks).zip(blocks) {
        if ctx.stopped() {
            return Err(PackError::Interrupted);
        }
        let len = bs.min(p.size - b * bs);
        let tail = ctx.fragments && len < bs;
        let buf = match bytes {
            Some(buf) => buf,
            None if !tail => {
                out.push((Block::Sparse(len as u32), zero_hash(ctx, len)));
                continue;
            }
            None => vec![0u8; len as usize],
        };
        out.push(block_of(ctx, p, buf, tail)?);
    }
    Ok(out)
}

/// One block of a file: a tail for a fragment, a raw tail, a sparse
/// block, or a compressed (or stored) one.
fn block_of(
    ctx: &Ctx,
    p: &Piece,
    buf: Vec<u8>,
    tail: bool,
) -> Result<(Block, blake3::Hash), PackError> {
    let hash = blake3::hash(&buf);
    let codec = |source| PackError::Codec {
        path: p.path.to_path_buf(),
        source,
    };
    let block = if tail && ctx.raw_tails && stores_tail_raw(&buf).map_err(codec)? {
        Block::Stored {
            bytes: buf,
            compressed: false,
        }
    } else if tail {
        Block::Tail(buf)
    } else if buf.iter().all(|&x| x == 0) {
        Block::Sparse(buf.len() as u32)
    } else {
        let (bytes, compressed) = compress_block(ctx, buf).map_err(codec)?;
        Block::Stored { bytes, compressed }
    };
    Ok((block, hash))
}

/// Cuts the files, in data order, into pieces.
fn pieces<'t>(
    tree: &'t Tree,
    order: &'t [u32],
    block_size: u32,
) -> impl Iterator<Item = Piece> + 't {
    let bs = block_size as u64;
    order.iter().flat_map(move |&ino| {
        let i = &tree.inodes[ino as usize];
        let path: Arc<Path> = Arc::from(tree.data_path(ino).as_path());
        file_pieces(ino, path, i.size, bs, (i.maybe_sparse, i.src_ino))
    })
}

/// The pieces of the file at `path` (`size` bytes, read there on the pool
/// under the number `ino`), blocks of `bs` bytes; `(maybe_sparse,
/// src_ino)` as in [`PieceData::File`].
pub(crate) fn file_pieces(
    ino: u32,
    path: Arc<Path>,
    size: u64,
    bs: u64,
    (maybe_sparse, src_ino): (bool, u64),
) -> impl Iterator<Item = Piece> {
    piece_spans(size, bs).map(move |(first_block, nblocks, last)| Piece {
        ino,
        path: path.clone(),
        size,
        first_block,
        nblocks,
        last,
        data: PieceData::File {
            maybe_sparse,
            src_ino,
        },
    })
}

/// How a file of `size` bytes is cut into pieces of [`PIECE_BYTES`] (at
/// least one block): (first block, blocks, whether last). An empty file is
/// one piece of no blocks.
pub(crate) fn piece_spans(size: u64, bs: u64) -> impl Iterator<Item = (u64, u64, bool)> {
    let per_piece = (PIECE_BYTES / bs).max(1);
    let blocks = size.div_ceil(bs);
    let n_pieces = blocks.div_ceil(per_piece).max(1);
    (0..n_pieces).map(move |k| {
        let first_block = k * per_piece;
        let nblocks = per_piece.min(blocks - first_block.min(blocks));
        (first_block, nblocks, k + 1 == n_pieces)
    })
}

type PieceResult = Result<Vec<(Block, blake3::Hash)>, PackError>;

/// Cuts batches ahead of use and has their files prefetched: the batch
/// [`Batches::next`] returns was handed to the prefetcher
/// [`PREFETCH_BATCHES`] batches earlier (see `crate::prefetch`).
struct Batches<I: Iterator<Item = Piece>> {
    it: std::iter::Peekable<I>,
    ahead: VecDeque<Vec<Piece>>,
    prefetch: Prefetcher,
    issued: u64,
    bs: u32,
}

impl<I: Iterator<Item = Piece>> Batches<I> {
    fn next(&mut self) -> Option<Vec<Piece>> {
        while self.ahead.len() <= PREFETCH_BATCHES && self.it.peek().is_some() {
            let batch = next_batch(&mut self.it, self.bs);
            self.prefetch.issue(self.issued, hints(&batch, self.bs));
            self.issued += 1;
            self.ahead.push_back(batch);
        }
        self.ahead.pop_front()
    }
}

/// The next batch: pieces up to [`BATCH_BYTES`] (plus one piece) and
/// [`BATCH_PIECES`]. Depends only on the tree and the constants.
fn next_batch(it: &mut impl Iterator<Item = Piece>, bs: u32) -> Vec<Piece> {
    let mut batch = Vec::new();
    let mut bytes = 0u64;
    while bytes < BATCH_BYTES && batch.len() < BATCH_PIECES {
        let Some(p) = it.next() else { break };
        bytes += p.nblocks * bs as u64;
        batch.push(p);
    }
    batch
}

/// The byte ranges a batch will read.
fn hints(batch: &[Piece], bs: u32) -> Vec<Hint> {
    let bs = bs as u64;
    batch
        .iter()
        .filter(|p| p.nblocks > 0 && matches!(p.data, PieceData::File { .. }))
        .map(|p| {
            let offset = p.first_block * bs;
            Hint {
                path: p.path.clone(),
                offset,
                len: (p.nblocks * bs).min(p.size - offset),
            }
        })
        .collect()
}

pub fn write_data(
    tree: &Tree,
    img: &mut ImageWriter,
    enc: Encoder,
    opts: &PackOptions,
    pool: &rayon::ThreadPool,
) -> Result<DataOutput, PackError> {
    let bs = opts.block_size;
    let ordered = crate::order::order_files(tree, &opts.order, bs, !opts.no_fragments, pool);
    let order = ordered.files;
    let total_bytes: u64 = order.iter().map(|&i| tree.inodes[i as usize].size).sum();
    if let Some(p) = &opts.progress {
        p.start(total_bytes, tree.nodes.len() as u64);
    }
    let mut batches = Batches {
        it: pieces(tree, &order, bs).peekable(),
        ahead: VecDeque::new(),
        prefetch: Prefetcher::new()?,
        issued: 0,
        bs,
    };
    let next = |written: u64| -> Result<Option<Batch>, PackError> {
        batches.prefetch.advance(written);
        Ok(batches.next().map(|pieces| {
            let progress = pieces
                .iter()
                .map(|p| {
                    p.size.min((p.first_block + p.nblocks) * bs as u64) - p.first_block * bs as u64
                })
                .sum();
            Batch {
                pieces,
                progress,
                spill_dir: None,
            }
        }))
    };
    let mut out = write_batches(
        img,
        enc,
        opts,
        pool,
        tree.inodes.len(),
        ordered.profiled,
        next,
    )?;
    out.bytes_in = total_bytes;
    Ok(out)
}

/// Pieces to read, compress and write, in order, and how far the progress
/// bar moves once they are written.
pub(crate) struct Batch {
    pub pieces: Vec<Piece>,
    pub progress: u64,
    /// The directory a stream's namespace spilled to, once it has: the
    /// files' locations go there from this batch on.
    pub spill_dir: Option<Arc<Path>>,
}

/// Writes the data of the batches `next` returns, in order, until it
/// returns `None` (its argument: how many batches are written): each batch
/// is read and compressed on the pool while the one before it is written.
/// `files` is the number of files expected (the output grows if more
/// come); `profiled` as in [`Writer`]. The data is laid out by the batches
/// alone, never by the thread count.
pub(crate) fn write_batches(
    img: &mut ImageWriter,
    enc: Encoder,
    opts: &PackOptions,
    pool: &rayon::ThreadPool,
    files: usize,
    profiled: usize,
    mut next: impl FnMut(u64) -> Result<Option<Batch>, PackError>,
) -> Result<DataOutput, PackError> {
    let bs = opts.block_size;
    let probe = expensive(&enc);
    let ctx = Arc::new(Ctx {
        enc,
        cancel: opts.cancel.clone(),
        abandoned: AtomicBool::new(false),
        probe,
        block_size: bs,
        fragments: !opts.no_fragments,
        raw_tails: !opts.fragment_incompressible,
        zero_hash: blake3::hash(&vec![0u8; bs as usize]),
        memory: opts.memory,
    });
    // Whatever way this returns, tasks still queued are told to stop.
    let _abandon = Abandon(&ctx);
    // The pool never idles through this thread's sequential part: batch k+1
    // is read and compressed while batch k is consumed, and fragment blocks
    // are compressed as soon as they are sealed.
    let mut w = Writer::new(img, ctx.clone(), pool, files, profiled);
    let start = |batch: Batch| {
        let ctx = ctx.clone();
        detach::spawn(pool, move || {
            let mut batch = batch;
            let r: Vec<PieceResult> = batch
                .pieces
                .par_iter_mut()
                .map(|p| read_piece(&ctx, p))
                .collect();
            (batch, r)
        })
    };
    let mut running = VecDeque::new();
    let mut written = 0u64;
    loop {
        while running.len() < 2 {
            let Some(batch) = next(written)? else { break };
            running.push_back(start(batch));
        }
        let Some(rx) = running.pop_front() else {
            break;
        };
        let (batch, results) = detach::wait(&rx, opts)?;
        written += 1;
        if let Some(dir) = &batch.spill_dir {
            if w.out.loc_file.is_none() {
                w.out.loc_file = Some(LocFile::create(dir)?);
                log::debug!(
                    "file locations go to disk, {} files written so far",
                    w.locs_base as usize + w.out.locs.len()
                );
            }
        }
        for (p, r) in batch.pieces.iter().zip(results) {
            w.consume(p, r?)?;
        }
        if let Some(pr) = &opts.progress {
            pr.advance(batch.progress);
        }
        w.end_batch(opts)?;
    }
    w.finish(opts)
}

impl Ctx {
    /// Whether the tasks should stop: the pack was cancelled, or the writer
    /// has returned.
    fn stopped(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
            || self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
    }
}

/// Raises [`Ctx::abandoned`] when [`write_batches`] returns.
struct Abandon<'c>(&'c Ctx);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::Relaxed);
    }
}

impl<'a, 'f, 'p> Writer<'a, 'f, 'p> {
    /// A writer whose data area starts at the image's position. `files`
    /// and `profiled` as in [`write_batches`].
    fn new(
        img: &'a mut ImageWriter<'f>,
        ctx: Arc<Ctx>,
        pool: &'p rayon::ThreadPool,
        files: usize,
        profiled: usize,
    ) -> Self {
        let base = img.pos();
        let tail_dedup_cap = tail_dedup_cap(ctx.memory);
        Writer {
            img,
            ctx,
            pool,
            out: DataOutput::new(vec![FileLoc::default(); files], None),
            cur: None,
            block_dedup: HashMap::new(),
            tail_dedup: HashMap::new(),
            tail_dedup_cap,
            frag_buf: Vec::new(),
            frag_sealed: VecDeque::new(),
            // As much data may wait behind fragment blocks as one batch reads.
            behind: WriteBehind::new(base, pool.current_num_threads(), BATCH_BYTES as usize),
            locs_base: 0,
            files_left_in_profile: profiled,
        }
    }
}

impl Writer<'_, '_, '_> {
    /// After a batch is consumed: places the fragment blocks sealed in it,
    /// writes what is ready (within the bounds of [`WriteBehind`]) and, when
    /// the image is followed, publishes how much of it is final.
    fn end_batch(&mut self, opts: &PackOptions) -> Result<(), PackError> {
        self.place_sealed_fragments();
        self.behind.flush(self.img, opts, false)?;
        self.behind.bound(self.img, opts)?;
        self.spill_locs()?;
        self.img.start_writeback();
        if opts.follow.is_some() {
            // A rewind goes back at most to the start of the file in
            // progress; everything written before it is final.
            let safe = match &self.cur {
                None => Some(self.img.pos()),
                Some(c) => self.behind.try_resolve(c.start),
            };
            if let Some(safe) = safe {
                self.img.publish_final(safe)?;
            }
        }
        Ok(())
    }

    /// After the last batch: seals and writes the last fragment block, waits
    /// for every block to be written, and resolves where each file's blocks
    /// start.
    fn finish(mut self, opts: &PackOptions) -> Result<DataOutput, PackError> {
        if !self.frag_buf.is_empty() {
            let buf = std::mem::take(&mut self.frag_buf);
            self.seal(buf);
        }
        self.place_sealed_fragments();
        self.behind.flush(self.img, opts, true)?;
        self.out.fragment_count = self.behind.fragments_placed();
        self.out.fragment_entries = std::mem::take(&mut self.behind.entries);
        for loc in self.out.locs.iter_mut() {
            if let Some(m) = loc.start() {
                loc.blocks_start = self.behind.resolve(m);
            }
            loc.start_frags = NO_START;
        }
        if self.out.loc_file.is_some() {
            self.spill_locs()?;
            if let Some(f) = &mut self.out.loc_file {
                f.flush()?;
            }
            self.out.locs = Vec::new();
        }
        Ok(self.out)
    }

    /// With the locations going to disk: writes those that are final (the
    /// files before the one in progress whose start is resolved), in data
    /// number order, and drops them from memory.
    fn spill_locs(&mut self) -> Result<(), PackError> {
        let Some(file) = &mut self.out.loc_file else {
            return Ok(());
        };
        let end = match &self.cur {
            Some(c) => (c.ino - self.locs_base) as usize,
            None => self.out.locs.len(),
        };
        let mut n = 0;
        while n < end {
            let loc = &mut self.out.locs[n];
            if let Some(m) = loc.start() {
                let Some(at) = self.behind.try_resolve(m) else {
                    break;
                };
                loc.blocks_start = at;
                loc.start_frags = NO_START;
            }
            file.put(self.locs_base + n as u32, loc)?;
            n += 1;
        }
        self.out.locs.drain(..n);
        self.locs_base += n as u32;
        // Give back what the locations held before they went to disk.
        if self.out.locs.capacity() > 2 * self.out.locs.len() + 4096 {
            self.out.locs.shrink_to(self.out.locs.len() + 4096);
        }
        Ok(())
    }

    /// The location of the file numbered `n`, final or not.
    fn loc_of(&self, n: u32) -> Result<FileLoc, PackError> {
        match (n.checked_sub(self.locs_base), &self.out.loc_file) {
            (Some(i), _) => Ok(self.out.locs.get(i as usize).cloned().unwrap_or_default()),
            (None, Some(f)) => f.get(n),
            (None, None) => Ok(FileLoc::default()),
        }
    }

    fn consume(&mut self, p: &Piece, blocks: Vec<(Block, blake3::Hash)>) -> Result<(), PackError> {
        let slot = (p.ino - self.locs_base) as usize;
        if slot >= self.out.locs.len() {
            // A stream's files are numbered as they come. The vector's
            // capacity grows by doubling; only the slots in use are written
            // (and so resident).
            self.out.locs.resize(slot + 1, FileLoc::default());
        }
        if p.first_block == 0 {
            self.cur = Some(Current {
                ino: p.ino,
                start: self.behind.mark(),
                sizes_start: self.out.block_sizes.len(),
                hasher: blake3::Hasher::new(),
                block_bytes: 0,
                sparse: 0,
                tail: None,
            });
        }
        let Some(cur) = self.cur.as_mut() else {
            unreachable!("pieces of a file arrive in order, first piece first")
        };
        let bs = self.ctx.block_size as u64;
        for (k, (block, hash)) in blocks.into_iter().enumerate() {
            let len = bs.min(p.size - (p.first_block + k as u64) * bs);
            if !matches!(block, Block::Tail(_)) {
                cur.hasher.update(hash.as_bytes());
                cur.block_bytes += len;
            }
            match block {
                Block::Sparse(len) => {
                    self.out.block_sizes.push(0);
                    cur.sparse += len as u64;
                }
                Block::Stored { bytes, compressed } => {
                    self.out
                        .block_sizes
                        .push(data_word(bytes.len(), compressed));
                    self.behind.data(self.img, bytes)?;
                }
                Block::Tail(raw) => cur.tail = Some((raw, hash)),
            }
        }
        if p.last {
            self.finish_file(p.size)?;
            if self.files_left_in_profile > 0 {
                self.files_left_in_profile -= 1;
                if self.files_left_in_profile == 0 {
                    self.close_region()?;
                }
            }
        }
        Ok(())
    }

    /// Seals the open fragment block and places every sealed one now, so
    /// that what was placed so far ends here.
    fn close_region(&mut self) -> Result<(), PackError> {
        if !self.frag_buf.is_empty() {
            let buf = std::mem::take(&mut self.frag_buf);
            self.seal(buf);
        }
        self.place_sealed_fragments();
        Ok(())
    }

    fn finish_file(&mut self, size: u64) -> Result<(), PackError> {
        let Some(mut cur) = self.cur.take() else {
            return Ok(());
        };
        if size == 0 {
            return Ok(()); // default FileLoc: no blocks, no fragment
        }
        let mut start = cur.start;
        let mut loc = FileLoc {
            blocks_start: 0, // resolved from `start` at the end
            sizes_start: cur.sizes_start,
            block_count: self.out.block_sizes.len() - cur.sizes_start,
            fragment: INVALID_FRAG,
            frag_offset: 0,
            sparse: cur.sparse,
            start_frags: NO_START,
        };
        let mut resolved = None;
        let mut all_shared = true;
        let mut saved = 0;
        if loc.block_count > 0 {
            cur.hasher.update(&cur.block_bytes.to_le_bytes());
            let k = key(&cur.hasher.finalize());
            if let Some(&prev) = self.block_dedup.get(&k) {
                // Same blocks stored already: undo this file's blocks (the
                // last thing placed) and point at the earlier run.
                self.behind.rewind(self.img, cur.start)?;
                self.out.block_sizes.truncate(cur.sizes_start);
                let p = self.loc_of(prev)?;
                (loc.sizes_start, loc.block_count, loc.sparse) =
                    (p.sizes_start, p.block_count, p.sparse);
                match p.start() {
                    Some(m) => start = m,
                    // Gone to disk: its start is resolved already.
                    None => resolved = Some(p.blocks_start),
                }
                saved += cur.block_bytes;
            } else {
                // Once the locations go to disk, this index would be what
                // grows with the file count: it stops at the tails' cap.
                if self.out.loc_file.is_none() || self.block_dedup.len() < self.tail_dedup_cap {
                    self.block_dedup.insert(k, cur.ino);
                }
                all_shared = false;
            }
        }
        if let Some((raw, hash)) = cur.tail.take() {
            let k = key(&hash);
            if let Some(&(f, off)) = self.tail_dedup.get(&k) {
                (loc.fragment, loc.frag_offset) = (f, off);
                saved += raw.len() as u64;
            } else {
                (loc.fragment, loc.frag_offset) = self.add_fragment(&raw);
                if self.tail_dedup.len() < self.tail_dedup_cap {
                    self.tail_dedup.insert(k, (loc.fragment, loc.frag_offset));
                }
                all_shared = false;
            }
        }
        if all_shared {
            self.out.dedup_files += 1;
        }
        self.out.dedup_bytes += saved;
        match resolved {
            Some(at) => loc.blocks_start = at,
            None => loc.set_start(start),
        }
        let slot = (cur.ino - self.locs_base) as usize;
        self.out.locs[slot] = loc;
        Ok(())
    }

    /// Appends a tail to the open fragment block, sealing it first when the
    /// tail does not fit. Returns (fragment index, offset in it).
    fn add_fragment(&mut self, tail: &[u8]) -> (u32, u32) {
        if self.frag_buf.len() + tail.len() > self.ctx.block_size as usize {
            let buf = std::mem::take(&mut self.frag_buf);
            self.seal(buf);
        }
        // Sealed blocks not yet placed still have their index reserved.
        let index = self.behind.fragments_placed() + self.frag_sealed.len() as u32;
        let offset = self.frag_buf.len() as u32;
        self.frag_buf.extend_from_slice(tail);
        (index, offset)
    }

    /// Queues a full fragment block for compression on the pool.
    fn seal(&mut self, block: Vec<u8>) {
        let ctx = self.ctx.clone();
        let rx = detach::spawn(self.pool, move || compress_block(&ctx, block));
        self.frag_sealed.push_back(rx);
    }

    /// Places the sealed fragment blocks, in order, next in the image.
    ///
    /// Never while a file is half placed: its blocks must stay contiguous
    /// (the inode records only the first block's position), and a duplicate
    /// file is undone by rewinding to its start.
    fn place_sealed_fragments(&mut self) {
        if self.cur.is_some() {
            return;
        }
        for rx in self.frag_sealed.drain(..) {
            self.behind.fragment(rx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_data::noise;
    use crate::walk;
    use std::fs;

    fn pack_data(src: &Path, opts: &PackOptions) -> (Tree, DataOutput, u64) {
        let tree = walk::walk(src, opts).unwrap();
        let tmp = tempfile::tempfile().unwrap();
        let mut img = ImageWriter::new(&tmp, Path::new("test.img"));
        let enc = Encoder::new(opts.compressor, opts.level, opts.block_size).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let out = write_data(&tree, &mut img, enc, opts, &pool).unwrap();
        let end = img.pos();
        (tree, out, end)
    }

    fn loc_of<'a>(tree: &Tree, out: &'a DataOutput, name: &str) -> &'a FileLoc {
        let node = (0..tree.nodes.len() as u32)
            .find(|&n| tree.name(n) == name.as_bytes())
            .unwrap();
        &out.locs[tree.nodes[node as usize].inode as usize]
    }

    #[test]
    fn duplicates_share_blocks_and_fragments() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        let big = noise(3 * 4096 + 100, 1);
        fs::write(src.join("big1"), &big).unwrap();
        fs::write(src.join("big2"), &big).unwrap();
        fs::write(src.join("other"), noise(3 * 4096 + 100, 2)).unwrap();
        fs::write(src.join("small1"), b"same small").unwrap();
        fs::write(src.join("small2"), b"same small").unwrap();
        fs::write(src.join("small3"), b"different").unwrap();
        let opts = PackOptions {
            block_size: 4096,
            ..Default::default()
        };
        let (tree, out, end) = pack_data(src, &opts);
        assert_eq!(out.dedup_files, 2);
        assert_eq!(out.dedup_bytes, big.len() as u64 + 10);
        let (b1, b2, o) = (
            loc_of(&tree, &out, "big1"),
            loc_of(&tree, &out, "big2"),
            loc_of(&tree, &out, "other"),
        );
        assert_eq!(
            (b1.blocks_start, b1.sizes_start, b1.fragment, b1.frag_offset),
            (b2.blocks_start, b2.sizes_start, b2.fragment, b2.frag_offset)
        );
        assert_eq!(b1.block_count, 3);
        assert_ne!(b1.blocks_start, o.blocks_start);
        // "other" was written right after big1: big2's blocks were undone.
        let big1_bytes: u64 = out.block_sizes[b1.sizes_start..b1.sizes_start + 3]
            .iter()
            .map(|w| (w & packfs_format::squashfs::DATA_SIZE_MASK) as u64)
            .sum();
        assert_eq!(o.blocks_start, b1.blocks_start + big1_bytes);
        let (s1, s2, s3) = (
            loc_of(&tree, &out, "small1"),
            loc_of(&tree, &out, "small2"),
            loc_of(&tree, &out, "small3"),
        );
        assert_eq!((s1.fragment, s1.frag_offset), (s2.fragment, s2.frag_offset));
        assert_ne!((s1.fragment, s1.frag_offset), (s3.fragment, s3.frag_offset));
        // 3 full blocks for big1 and for other, no block for big2; tails in fragments.
        assert_eq!(out.block_sizes.len(), 6);
        assert!(end > 0);
    }

    #[test]
    fn locations_on_disk_read_back_by_data_number() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = LocFile::create(dir.path()).unwrap();
        let loc = |n: u32| FileLoc {
            blocks_start: 1000 + n as u64,
            sizes_start: n as usize * 2,
            block_count: (n % 3) as usize,
            fragment: n / 7,
            frag_offset: n % 7,
            sparse: n as u64 % 5,
            start_frags: NO_START,
        };
        // Every third number is skipped: those read as no data.
        let stored = |n: u32| n % 3 != 1;
        let count = LOC_PAGE as u32 * 3 + 10 + (LOC_WRITE_BYTES / LOC_BYTES) as u32;
        for n in (0..count).filter(|&n| stored(n)) {
            f.put(n, &loc(n)).unwrap();
            // A lookup before the end, as dedup makes, sees what is stored.
            assert_eq!(f.get(n).unwrap().blocks_start, loc(n).blocks_start);
        }
        assert_eq!(f.get(3).unwrap().blocks_start, loc(3).blocks_start);
        f.flush().unwrap();
        let out = DataOutput::new(Vec::new(), Some(f));
        let mut l = out.loc_lookup();
        for n in (0..count + 5).rev().chain(0..count + 5) {
            let got = l.get(n).unwrap();
            let want = match n < count && stored(n) {
                true => loc(n),
                false => FileLoc::default(),
            };
            assert_eq!(
                (got.blocks_start, got.sizes_start, got.block_count),
                (want.blocks_start, want.sizes_start, want.block_count)
            );
            assert_eq!(
                (got.fragment, got.frag_offset, got.sparse),
                (want.fragment, want.frag_offset, want.sparse)
            );
        }
        assert!(l.pages.len() <= LOC_PAGES);
    }

    #[test]
    fn blocks_dedup_against_locations_on_disk_within_the_index_cap() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempfile().unwrap();
        let mut img = ImageWriter::new(&tmp, Path::new("test.img"));
        // Room for one key in each index.
        let opts = PackOptions {
            block_size: 4096,
            memory: 8 * 52,
            ..Default::default()
        };
        let enc = Encoder::new(opts.compressor, opts.level, opts.block_size).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (a, b) = (noise(4096, 1), noise(4096, 2));
        // Files 0 and 1 before the spill, 2 (a copy of 1, which the full
        // index left out) and 3 (a copy of 0, whose location is on disk
        // by then) after it.
        let files = [&a, &b, &b, &a];
        let spill: Arc<Path> = Arc::from(dir.path());
        let mut n = 0;
        let next = |_| -> Result<Option<Batch>, PackError> {
            let Some(body) = files.get(n) else {
                return Ok(None);
            };
            let piece = Piece {
                ino: n as u32,
                path: Arc::from(Path::new("f")),
                size: 4096,
                first_block: 0,
                nblocks: 1,
                last: true,
                data: PieceData::Blocks(vec![Some(body.to_vec())]),
            };
            n += 1;
            Ok(Some(Batch {
                pieces: vec![piece],
                progress: 0,
                spill_dir: (n > 1).then(|| spill.clone()),
            }))
        };
        let out = write_batches(&mut img, enc, &opts, &pool, 0, 0, next).unwrap();
        assert!(out.locs.is_empty() && out.loc_file.is_some());
        let mut l = out.loc_lookup();
        let start = |l: &mut LocLookup, n| l.get(n).unwrap().blocks_start;
        assert_eq!(start(&mut l, 3), start(&mut l, 0));
        assert_ne!(start(&mut l, 2), start(&mut l, 1));
        assert_eq!((out.dedup_files, out.dedup_bytes), (1, 4096));
    }

    #[test]
    fn a_full_tail_index_stores_later_duplicates_again() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        fs::write(src.join("a"), b"first tail").unwrap();
        fs::write(src.join("b"), b"other tail").unwrap();
        fs::write(src.join("c"), b"first tail").unwrap();
        fs::write(src.join("d"), b"other tail").unwrap();
        // Room for one tail in the index: "a"'s.
        let opts = PackOptions {
            memory: 8 * 52,
            ..Default::default()
        };
        let (tree, out, _) = pack_data(src, &opts);
        let at = |n| {
            let l = loc_of(&tree, &out, n);
            (l.fragment, l.frag_offset)
        };
        assert_eq!(at("a"), at("c"));
        assert_ne!(at("b"), at("d"));
        assert_eq!(out.dedup_files, 1);
    }

    #[test]
    fn files_differing_only_in_the_tail_share_their_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        let body = noise(2 * 4096, 5);
        fs::write(src.join("a"), [&body[..], b"tail one"].concat()).unwrap();
        fs::write(src.join("b"), [&body[..], b"tail two!"].concat()).unwrap();
        let opts = PackOptions {
            block_size: 4096,
            ..Default::default()
        };
        let (tree, out, _) = pack_data(src, &opts);
        let (a, b) = (loc_of(&tree, &out, "a"), loc_of(&tree, &out, "b"));
        assert_eq!(
            (a.blocks_start, a.sizes_start, a.block_count),
            (b.blocks_start, b.sizes_start, 2)
        );
        assert_ne!((a.fragment, a.frag_offset), (b.fragment, b.frag_offset));
        assert_eq!(out.block_sizes.len(), 2);
        assert_eq!(out.dedup_files, 0); // not whole-file duplicates
        assert_eq!(out.dedup_bytes, 8192);
    }

    #[test]
    fn zero_blocks_are_sparse_and_tails_go_to_fragments_unless_disabled() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        let mut d = vec![0u8; 2 * 4096];
        d.extend(noise(4096 + 10, 3));
        fs::write(src.join("f"), &d).unwrap();
        let opts = PackOptions {
            block_size: 4096,
            ..Default::default()
        };
        let (tree, out, _) = pack_data(src, &opts);
        let l = loc_of(&tree, &out, "f");
        assert_eq!(&out.block_sizes[l.sizes_start..l.sizes_start + 2], &[0, 0]);
        assert_eq!(l.block_count, 3);
        assert_eq!(l.sparse, 8192);
        assert_ne!(l.fragment, INVALID_FRAG);
        let opts = PackOptions {
            block_size: 4096,
            no_fragments: true,
            ..Default::default()
        };
        let (tree, out, _) = pack_data(src, &opts);
        let l = loc_of(&tree, &out, "f");
        assert_eq!(l.block_count, 4);
        assert_eq!(l.fragment, INVALID_FRAG);
        assert_eq!(out.fragment_count, 0);
    }

    #[test]
    fn incompressible_tails_get_a_raw_block_unless_fragments_are_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        fs::write(src.join("noise"), noise(20_000, 1)).unwrap();
        fs::write(src.join("short"), noise(RAW_TAIL_MIN - 1, 2)).unwrap();
        let text: Vec<u8> = (0..20_000u32)
            .map(|i| b"lorem ipsum\n"[(i % 12) as usize])
            .collect();
        fs::write(src.join("text"), &text).unwrap();
        let (tree, out, _) = pack_data(src, &PackOptions::default());
        let n = loc_of(&tree, &out, "noise");
        assert_eq!((n.fragment, n.block_count), (INVALID_FRAG, 1));
        assert_eq!(out.block_sizes[n.sizes_start], data_word(20_000, false));
        assert_ne!(loc_of(&tree, &out, "short").fragment, INVALID_FRAG);
        assert_ne!(loc_of(&tree, &out, "text").fragment, INVALID_FRAG);
        let opts = PackOptions {
            fragment_incompressible: true,
            ..Default::default()
        };
        let (tree, out, _) = pack_data(src, &opts);
        let n = loc_of(&tree, &out, "noise");
        assert_eq!(n.block_count, 0);
        assert_ne!(n.fragment, INVALID_FRAG);
    }

    #[test]
    fn incompressible_check_only_fires_on_noise() {
        let ctx = Ctx {
            cancel: None,
            abandoned: AtomicBool::new(false),
            enc: Encoder::new(Compressor::Xz, None, 131072).unwrap(),
            probe: true,
            block_size: 131072,
            fragments: true,
            raw_tails: true,
            zero_hash: blake3::hash(&[]),
            memory: crate::DEFAULT_MEMORY,
        };
        let check = |d: &[u8]| looks_incompressible(d, block_entropy(&ctx, d)).unwrap();
        assert!(check(&noise(131072, 9)));
        // Noise repeated: byte entropy is still ~8 bits but LZ finds the repeat.
        let half = noise(65536, 9);
        assert!(!check(&[half.clone(), half].concat()));
        let text: Vec<u8> = (0..131072u32)
            .map(|i| b"abcdefgh"[(i % 8) as usize])
            .collect();
        assert!(!check(&text));
    }

    #[test]
    fn gzip_blocks_are_zlib_streams_at_any_entropy() {
        let ctx = Ctx {
            cancel: None,
            abandoned: AtomicBool::new(false),
            enc: Encoder::new(Compressor::Gzip, Some(9), 131072).unwrap(),
            probe: true,
            block_size: 131072,
            fragments: true,
            raw_tails: true,
            zero_hash: blake3::hash(&[]),
            memory: crate::DEFAULT_MEMORY,
        };
        let text: Vec<u8> = (0..131072u32)
            .flat_map(|i| format!("line {} of {}\n", i % 997, i / 7).into_bytes())
            .take(131072)
            .collect();
        // Noise over 240 byte values: entropy ~7.91, above the fast-level
        // threshold, yet entropy coding still saves ~1%.
        let skewed: Vec<u8> = noise(4 * 131072, 4)
            .into_iter()
            .filter(|&b| b < 240)
            .take(131072)
            .collect();
        assert!(block_entropy(&ctx, &skewed) >= FAST_DEFLATE_ENTROPY);
        assert!(block_entropy(&ctx, &text) < FAST_DEFLATE_ENTROPY);
        for data in [text, skewed] {
            let (out, compressed) = compress_block(&ctx, data.clone()).unwrap();
            assert!(compressed && out.len() < data.len());
            let mut back = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&out[..]), &mut back)
                .unwrap();
            assert!(back == data);
        }
        // Pure noise is stored raw.
        let (out, compressed) = compress_block(&ctx, noise(131072, 8)).unwrap();
        assert!(!compressed && out.len() == 131072);
    }
}
