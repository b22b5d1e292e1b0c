//! The lazy SquashFS reader.
//!
//! Opening an image reads only the superblock and the small lookup tables
//! (uid/gid values, the block index of the fragment table and of the xattr id
//! table): a few KiB whatever the number of files, so a million-file image
//! opens in about the time of one `mmap`. Inodes, directory listings, fragment
//! entries and data blocks are decoded on demand through the shared
//! [`BlockCache`], which bounds memory by its byte budget.

use super::blocks::Blocks;
use super::dir::{DirIter, DirPos, Listings, RawDirEntry};
use super::hashes::{Found, HashRecord};
use super::inode::{self, DirInode, FileInode, Inode, InodeContext, InodeKind};
use super::meta::MetaCursor;
use super::tables::Tables;
use crate::cache::{Block, BlockCache};
use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::codec::Compressor;
use packfs_format::squashfs::inode::DirIndex;
use packfs_format::squashfs::metadata::{data_stored_len, make_ref};
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::*;
use std::sync::Arc;

/// An open SquashFS image. Invariant: `sb` passed the checks of
/// [`SquashFs::open`] (magic, version, compressor, block size, table
/// positions within `bytes_used`, `bytes_used` within the file), and the
/// root inode decodes as a directory.
pub struct SquashFs {
    blocks: Blocks,
    pub sb: Superblock,
    tables: Tables,
}

/// A regular file ready for reading: its inode plus the absolute position of
/// each full block (prefix sums of the stored sizes, computed once at open).
#[derive(Debug)]
pub struct OpenFile {
    pub inode: Inode,
    pub starts: Vec<u64>,
}

impl OpenFile {
    pub fn file(&self) -> &FileInode {
        match &self.inode.kind {
            InodeKind::File(f) => f,
            _ => unreachable!("OpenFile holds a regular file by construction"),
        }
    }
}

/// Checks what the superblock says against itself and the file length.
fn check_superblock(sb: &Superblock, len: u64) -> Result<Compressor> {
    if sb.magic != MAGIC {
        return Err(FsError::corrupt("bad SquashFS magic"));
    }
    if (sb.version_major, sb.version_minor) != (4, 0) {
        return Err(FsError::Unsupported(format!(
            "SquashFS version {}.{} (only 4.0 is supported)",
            sb.version_major, sb.version_minor
        )));
    }
    let compressor = Compressor::from_id(sb.compression_id).ok_or_else(|| {
        FsError::Unsupported(format!("unknown compressor id {}", sb.compression_id))
    })?;
    if !(MIN_BLOCK_LOG..=MAX_BLOCK_LOG).contains(&sb.block_log)
        || sb.block_size != 1 << sb.block_log
    {
        return Err(FsError::corrupt(format!(
            "block size {} does not match block log {}",
            sb.block_size, sb.block_log
        )));
    }
    if sb.bytes_used > len {
        return Err(FsError::corrupt(format!(
            "superblock says {} bytes are used but the file has {len} (truncated image?)",
            sb.bytes_used
        )));
    }
    let end = sb.bytes_used;
    let in_range = |v: u64| v <= end;
    if !(in_range(sb.inode_table_start)
        && in_range(sb.directory_table_start)
        && sb.inode_table_start < sb.directory_table_start
        && in_range(sb.id_table_start))
    {
        return Err(FsError::corrupt(
            "table positions in the superblock are out of range",
        ));
    }
    if sb.id_count == 0 {
        return Err(FsError::corrupt("id table is empty"));
    }
    Ok(compressor)
}

impl SquashFs {
    /// Opens an image, validating the superblock and the lookup tables,
    /// and checking every piece read against the image's hash record when
    /// it has one (a damaged record is an error).
    pub fn open(src: Box<dyn ImageSource>, cache: Arc<BlockCache>) -> Result<Self> {
        Self::open_with(src, cache, true)
    }

    /// [`SquashFs::open`]; without `use_record`, any hash record is left
    /// unread (`packfs verify` reads a damaged one's image so).
    pub fn open_with(
        src: Box<dyn ImageSource>,
        cache: Arc<BlockCache>,
        use_record: bool,
    ) -> Result<Self> {
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        if src.len() < SUPERBLOCK_SIZE as u64 {
            return Err(FsError::corrupt(
                "file is shorter than a SquashFS superblock",
            ));
        }
        src.read_at(0, &mut raw)?;
        let sb = Superblock::decode(&raw);
        // The superblock is checked against the record before anything in
        // it is believed (bytes_used, which locates the record, at worst
        // misplaces it: then the record is reported damaged).
        let record = if use_record {
            match HashRecord::find(&*src, sb.bytes_used.min(src.len()))? {
                Found::Record(r) => {
                    r.check(&*src, 0, &[&raw], &|| "superblock".into())?;
                    Some(r)
                }
                Found::None => None,
                Found::Unknown(n) => {
                    log::debug!(
                        "{n} bytes follow the filesystem's padding but end in no hash record: not checked"
                    );
                    None
                }
            }
        } else {
            None
        };
        let compressor = check_superblock(&sb, src.len())?;
        let mut blocks = Blocks::new(src, cache, compressor);
        blocks.record = record;
        let tables = Tables::load(&blocks, &sb)?;
        let fs = SquashFs { blocks, sb, tables };
        let root = fs.inode(fs.sb.root_inode, false)?;
        if !root.is_dir() {
            return Err(FsError::corrupt("root inode is not a directory"));
        }
        Ok(fs)
    }

    pub fn cache(&self) -> &Arc<BlockCache> {
        &self.blocks.cache
    }

    /// The image's storage.
    pub(crate) fn source(&self) -> &dyn crate::source::ImageSource {
        &*self.blocks.src
    }

    /// The image's hash record, if it has one and it was read.
    pub fn hash_record(&self) -> Option<&HashRecord> {
        self.blocks.record.as_ref()
    }

    /// Checks that the bytes no reader reads are the zeros the writer
    /// left: the padding after the filesystem and, with a hash record, the
    /// padding before its trailer (so that `packfs verify` finds a flipped
    /// bit anywhere in the file).
    pub fn check_padding(&self) -> Result<()> {
        let len = self.blocks.src.len();
        let used = self.sb.bytes_used;
        let padded = packfs_format::squashfs::hashes::record_start(used);
        let mut gaps = vec![(used, padded.min(len))];
        match &self.blocks.record {
            Some(r) => gaps.push(r.gap),
            None if len > padded => {
                return Err(FsError::Damaged(format!(
                    "{} bytes follow the filesystem's padding but end in no hash record (its trailer damaged, or another tool's)",
                    len - padded
                )))
            }
            None => {}
        }
        for (from, to) in gaps {
            let mut at = from;
            while at < to {
                let n = (to - at).min(1 << 20) as usize;
                let b = self.blocks.src.read_vec(at, n)?;
                let nonzero = b.iter().position(|&x| x != 0);
                crate::buffers::recycle(b);
                if let Some(i) = nonzero {
                    return Err(FsError::Damaged(format!(
                        "padding byte at offset {} is not zero",
                        at + i as u64
                    )));
                }
                at += n as u64;
            }
        }
        Ok(())
    }

    /// From now on, notes which pieces of the hash record (if any) are
    /// checked: what [`SquashFs::unchecked_pieces`] leaves out.
    pub fn track_checks(&self) {
        if let Some(r) = &self.blocks.record {
            r.track_checks();
        }
    }

    /// The pieces page `p` of the hash record lists that were not checked
    /// since [`SquashFs::track_checks`]: (offset, length). Reads the page;
    /// a damaged one is the error.
    pub fn unchecked_pieces(&self, p: u64) -> Result<Vec<(u64, u32)>> {
        let Some(r) = &self.blocks.record else {
            return Ok(Vec::new());
        };
        Ok(r.page_pieces(&*self.blocks.src, p)?
            .into_iter()
            .filter(|&(i, _, _)| !r.was_checked(i))
            .map(|(_, pos, len)| (pos, len))
            .collect())
    }

    /// Reads and checks the piece of the hash record at `pos..pos + len`
    /// (for `packfs verify`: the pieces no file read led to).
    pub fn check_piece(&self, pos: u64, len: u32) -> Result<()> {
        let raw = self.blocks.read_piece(pos, len as usize, &|| {
            format!("{len} bytes at offset {pos}")
        })?;
        crate::buffers::recycle(raw);
        Ok(())
    }

    pub fn compressor(&self) -> Compressor {
        self.blocks.compressor
    }

    pub fn root_ref(&self) -> u64 {
        self.sb.root_inode
    }

    fn inode_context(&self) -> InodeContext<'_> {
        InodeContext {
            sb: &self.sb,
            tables: &self.tables,
        }
    }

    /// Decodes the inode at `inode_ref`. With `with_blocks`, a regular file's
    /// block size list is loaded too (needed to read it, not to stat it).
    pub fn inode(&self, inode_ref: u64, with_blocks: bool) -> Result<Inode> {
        inode::read_inode(&self.blocks, &self.inode_context(), inode_ref, with_blocks)
    }

    fn listings(&self) -> Listings<'_> {
        Listings {
            blocks: &self.blocks,
            start: self.sb.directory_table_start,
        }
    }

    /// Iterates `dir` from `from` (use `DirPos::default()` for the start).
    pub fn read_dir(&self, d: &DirInode, from: DirPos) -> Result<DirIter<'_>> {
        self.listings().read_dir(d, from)
    }

    /// Finds `name` in `dir`, using the directory index when there is one.
    pub fn lookup_raw(&self, d: &DirInode, name: &[u8]) -> Result<Option<RawDirEntry>> {
        self.listings().lookup(d, name)
    }

    /// All xattrs of an inode as (full name, value), in stored order.
    pub fn xattrs(&self, xattr_idx: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        super::xattr::read_xattrs(
            &self.blocks,
            &self.tables,
            self.sb.xattr_id_table_start,
            xattr_idx,
        )
    }

    /// Bytes of the inode's xattrs as its xattr id entry records them, or
    /// `None` for an inode without xattrs or an image without the table.
    pub fn xattr_bytes(&self, xattr_idx: u32) -> Result<Option<u32>> {
        if xattr_idx == INVALID_XATTR || self.sb.xattr_id_table_start == INVALID_TABLE {
            return Ok(None);
        }
        Ok(Some(self.tables.xattr_entry(&self.blocks, xattr_idx)?.size))
    }

    /// Fragment table entry `idx`: (absolute block position, size word).
    pub(super) fn fragment_entry(&self, idx: u32) -> Result<(u64, u32)> {
        let e = self.tables.fragment_entry(&self.blocks, idx)?;
        Ok((e.start, e.size))
    }

    fn data_block(&self, pos: u64, word: u32, limit: usize) -> Result<Arc<Block>> {
        self.blocks.data_block(pos, word, limit)
    }

    /// Loads a regular file for reading.
    pub fn open_file(&self, inode_ref: u64) -> Result<OpenFile> {
        let inode = self.inode(inode_ref, true)?;
        let InodeKind::File(f) = &inode.kind else {
            return Err(if inode.is_dir() {
                FsError::IsDir
            } else {
                FsError::Invalid("not a regular file".into())
            });
        };
        let mut starts = Vec::with_capacity(f.block_sizes.len());
        let mut pos = f.blocks_start;
        for &w in &f.block_sizes {
            starts.push(pos);
            pos = pos.saturating_add(data_stored_len(w) as u64);
        }
        if pos > self.sb.bytes_used {
            return Err(FsError::corrupt(format!(
                "inode {}: data blocks run past the end of the image",
                inode.number
            )));
        }
        Ok(OpenFile { inode, starts })
    }

    /// Length of full block `i` of a file.
    fn block_len(&self, f: &FileInode, i: usize) -> usize {
        let bs = self.sb.block_size as u64;
        (f.size - i as u64 * bs).min(bs) as usize
    }

    /// Appends to `out` the bytes of `file` at `offset..offset+len` (clamped
    /// to the file size); returns how many. Uncompressed blocks of an image
    /// without a hash record are read from the image straight into `out`,
    /// without passing through the cache.
    pub fn read_into(
        &self,
        file: &OpenFile,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize> {
        let f = file.file();
        if offset >= f.size {
            return Ok(0);
        }
        let end = f.size.min(offset + len as u64);
        let bs = self.sb.block_size as u64;
        let mut at = offset;
        while at < end {
            let i = (at / bs) as usize;
            let in_block = (at % bs) as usize;
            let take = ((end - at) as usize).min(bs as usize - in_block);
            if i < f.block_sizes.len() {
                let word = f.block_sizes[i];
                let blen = self.block_len(f, i);
                if word & DATA_SIZE_MASK == 0 {
                    out.resize(out.len() + take, 0);
                } else if word & DATA_UNCOMPRESSED != 0 && (word & DATA_SIZE_MASK) as usize != blen
                {
                    return Err(FsError::corrupt(format!(
                        "inode {}: block {i} stored with {} bytes, expected {blen}",
                        file.inode.number,
                        word & DATA_SIZE_MASK
                    )));
                } else if self.reads_raw_in_place(word) {
                    self.copy_raw(file.starts[i] + in_block as u64, take, out)?;
                } else if word & DATA_UNCOMPRESSED != 0 && in_block == 0 && take == blen {
                    // A whole raw block asked for (a small file read at
                    // once): read and checked straight into `out`, not
                    // cached, as without a record.
                    self.copy_checked(file.starts[i], blen, out)?;
                } else {
                    let b = self.data_block(file.starts[i], word, bs as usize)?;
                    if b.data.len() != blen {
                        return Err(FsError::corrupt(format!(
                            "inode {}: block {i} decodes to {} bytes, expected {blen}",
                            file.inode.number,
                            b.data.len()
                        )));
                    }
                    out.extend_from_slice(&b.data[in_block..in_block + take]);
                    self.blocks.cache.served(file.starts[i], &b, take);
                }
            } else {
                // The tail, in a fragment block.
                if !f.has_fragment() {
                    return Err(FsError::corrupt(format!(
                        "inode {}: size {} needs a fragment but has none",
                        file.inode.number, f.size
                    )));
                }
                let tail_len = (f.size % bs) as usize;
                let (pos, word) = self.fragment_entry(f.fragment)?;
                let start = f.fragment_offset as usize;
                if self.reads_raw_in_place(word) {
                    // Stored raw: copy the tail's bytes straight from the
                    // image, as for a raw full block, instead of caching the
                    // whole fragment block to serve a slice of it.
                    let stored = (word & DATA_SIZE_MASK) as usize;
                    if stored > bs as usize || start + tail_len > stored {
                        return Err(FsError::corrupt(format!(
                            "inode {}: fragment range {start}+{tail_len} beyond raw fragment block of {stored} bytes",
                            file.inode.number
                        )));
                    }
                    self.copy_raw(pos.saturating_add((start + in_block) as u64), take, out)?;
                } else {
                    let b = self.data_block(pos, word, bs as usize)?;
                    if start + tail_len > b.data.len() {
                        return Err(FsError::corrupt(format!(
                            "inode {}: fragment range {start}+{tail_len} beyond fragment block of {} bytes",
                            file.inode.number,
                            b.data.len()
                        )));
                    }
                    out.extend_from_slice(&b.data[start + in_block..start + in_block + take]);
                    self.blocks.cache.served(pos, &b, take);
                }
            }
            at += take as u64;
        }
        Ok((end - offset) as usize)
    }

    /// Whether a block with size word `word` is served by copying its
    /// bytes from the image as they are asked for: a raw block of an image
    /// without a hash record. With one, a raw block is read whole and
    /// checked like a compressed one (then cached), since a slice of it
    /// cannot be checked on its own.
    fn reads_raw_in_place(&self, word: u32) -> bool {
        word & DATA_UNCOMPRESSED != 0 && self.blocks.record.is_none()
    }

    /// Appends `len` bytes of the image at `at` to `out` (a raw block's
    /// bytes: no decoding, no cache); on failure `out` is left as it was.
    fn copy_raw(&self, at: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.blocks.src.will_need(at, len);
        let from = out.len();
        out.resize(from + len, 0);
        self.blocks
            .src
            .read_at(at, &mut out[from..])
            .inspect_err(|_| out.truncate(from))
    }

    /// Appends the whole raw block of `len` bytes at `at` to `out`,
    /// checked against the hash record; on failure `out` is left as it was.
    fn copy_checked(&self, at: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.copy_raw(at, len, out)?;
        let from = out.len() - len;
        self.blocks
            .check(at, &[&out[from..]], &|| {
                format!("data block at offset {at}")
            })
            .inspect_err(|_| out.truncate(from))
    }

    /// Reads into a fresh buffer.
    pub fn read(&self, file: &OpenFile, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len.min(file.file().size.saturating_sub(offset) as usize));
        // A mount knows a file by its node only; the inode number in the
        // message is the one the kernel's mount of the image shows as
        // st_ino (`find KERNEL_MOUNT -inum N`), and `packfs verify` names
        // the path.
        self.read_into(file, offset, len, &mut out)
            .map_err(|e| match e {
                FsError::Damaged(m) => {
                    FsError::Damaged(format!("inode {}: {m}", file.inode.number))
                }
                e => e,
            })?;
        Ok(out)
    }

    /// Decodes full blocks `first..first+count` of `file` into the cache
    /// (readahead for sequential readers). Errors are left for the real read.
    pub fn prefetch(&self, file: &OpenFile, first: usize, count: usize) {
        let f = file.file();
        let bs = self.sb.block_size as usize;
        for i in first..(first + count).min(f.block_sizes.len()) {
            let w = f.block_sizes[i];
            if w & DATA_SIZE_MASK != 0 && !self.reads_raw_in_place(w) {
                self.blocks.data_block_ahead(file.starts[i], w, bs);
            } else if w & DATA_UNCOMPRESSED != 0 {
                self.blocks
                    .src
                    .will_need(file.starts[i], (w & DATA_SIZE_MASK) as usize);
            }
        }
    }

    /// Decodes fragment block `idx` into the cache (image-order readahead).
    /// Out-of-range indexes and bad blocks are ignored here: the read that
    /// needs the block reports them.
    pub fn prefetch_fragment(&self, idx: u32) {
        if idx >= self.sb.fragment_count {
            return;
        }
        match self.fragment_entry(idx) {
            Ok((pos, word)) if self.reads_raw_in_place(word) => {
                self.blocks
                    .src
                    .will_need(pos, (word & DATA_SIZE_MASK) as usize);
            }
            Ok((pos, word)) => {
                self.blocks
                    .data_block_ahead(pos, word, self.sb.block_size as usize);
            }
            Err(_) => {}
        }
    }

    /// Every compressed data and fragment block in the image, in disk order:
    /// (position, size word). Found by walking the inode table once.
    pub fn all_blocks(&self) -> Result<Vec<(u64, u32)>> {
        let mut out = Vec::new();
        let cx = self.inode_context();
        let mut c = MetaCursor::new(&self.blocks, self.sb.inode_table_start, 0)?;
        while !c.at_area_end(self.sb.directory_table_start) {
            let r = make_ref(c.pos - self.sb.inode_table_start, c.off);
            let inode = inode::decode_inode(&mut c, &cx, r, true)?;
            // An extended directory's index entries follow its record, so
            // the next inode starts after them.
            if let InodeKind::Dir(d) = &inode.kind {
                for _ in 0..d.index_count {
                    let e = DirIndex::decode(&mut c)?;
                    c.skip(e.name_len)?;
                }
            }
            if let InodeKind::File(f) = &inode.kind {
                let mut pos = f.blocks_start;
                for &w in &f.block_sizes {
                    if w & DATA_SIZE_MASK != 0 {
                        out.push((pos, w));
                    }
                    // Saturating: a corrupt blocks_start near u64::MAX
                    // overflowed here (preload of such an image panicked;
                    // tests/corrupt_corpus.rs). Such blocks fail to decode
                    // and preload skips them; open_file reports them.
                    pos = pos.saturating_add((w & DATA_SIZE_MASK) as u64);
                }
            }
        }
        for i in 0..self.sb.fragment_count {
            out.push(self.fragment_entry(i)?);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Decodes every block of the image into the cache, in parallel, until
    /// the cache holds about 90% of its budget (counting what it held
    /// before: a union's shards share one cache). Returns (blocks, decoded
    /// bytes).
    pub fn preload(&self) -> Result<(u64, u64)> {
        use rayon::prelude::*;
        use std::sync::atomic::{AtomicU64, Ordering};
        let blocks = self.all_blocks()?;
        let room = self.blocks.cache.preload_room();
        let loaded = AtomicU64::new(0);
        let count = AtomicU64::new(0);
        let bs = self.sb.block_size as usize;
        blocks
            .par_iter()
            .try_for_each(|&(pos, w)| {
                if loaded.load(Ordering::Relaxed) + bs as u64 > room {
                    return Err(());
                }
                if self.reads_raw_in_place(w) {
                    // Stored raw: read from the image when asked for; a hint is enough.
                    self.blocks
                        .src
                        .will_need(pos, (w & DATA_SIZE_MASK) as usize);
                    return Ok(());
                }
                if let Ok(b) = self.data_block(pos, w, bs) {
                    loaded.fetch_add(b.data.len() as u64, Ordering::Relaxed);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
            .ok();
        Ok((count.into_inner(), loaded.into_inner()))
    }
}
