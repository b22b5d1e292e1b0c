//! ZIP writer: a standard archive that Info-ZIP unzip, Python's zipfile,
//! bsdtar and `packfs mount` read, byte-identical for any thread count.
//!
//! Entries come in tree order (depth-first, names sorted by bytes, each
//! directory right before its contents); the root itself has no entry.
//! Files become deflate (default), zstd (method 93) or stored entries;
//! symlinks are stored `S_IFLNK` entries holding their target; hard links
//! become separate entries; fifos, sockets and devices are skipped with a
//! warning. Every entry carries its Unix mode (version made by = Unix),
//! mtime (extended timestamp 0x5455 plus the DOS time in UTC) and owner
//! (0x7875); see [`records`].
//!
//! Pipeline, with no barrier between entries: the main thread walks the
//! entries in order and submits each file of at most [`STREAM_ABOVE`]
//! bytes to a small I/O pool, which reads it whole and hands it to the
//! compression pool (`threads` workers, a compressor cached per thread);
//! results come back tagged with their sequence number and the main thread
//! writes them strictly in order. At most [`WINDOW_BYTES`] of source data
//! (and [`WINDOW_ENTRIES`] entries) are in flight, so reads run ahead of
//! compression on a cold cache while memory stays bounded. Larger files
//! are streamed once everything before them is written: their local
//! header goes out with placeholder sizes, their data is read in
//! [`SEGMENT`]-byte segments compressed in parallel, and the header is
//! patched in place afterwards (no data descriptors). Deflate segments are
//! sync-flushed and concatenated (as pigz does), zstd segments are frames;
//! segment boundaries are fixed, so, as every entry is compressed on its
//! own, the bytes do not depend on the thread count. An entry whose
//! compressed form would not be smaller is stored; data whose byte entropy
//! is near 8 bits is stored without trying.
//!
//! Deflate implementation: entries are compressed with libdeflate (the
//! `libdeflater` crate), which at equal ratio runs at well over twice
//! zlib's speed, and ZIP level N runs libdeflate level N - 2
//! ([`compress::deflate_effort`]): the default 6 then writes an archive no
//! larger than Info-ZIP's `zip -6` in a fraction of its time
//! (docs/benchmarks/defaults.md). Streamed files need a stream with sync flushes,
//! which libdeflate does not offer, so they use flate2 (miniz_oxide) at
//! zlib level N - 2.

mod compress;
mod records;

use crate::detach;
use crate::output;
use crate::source_check::{changed_size, check_empty, open_source};
use crate::tree::{Kind, Tree};
use crate::walk;
use crate::{cancelled, PackError, PackOptions, PackSummary};
use compress::{compress_segment, compress_whole, looks_incompressible, Codec};
use packfs_format::zip::METHOD_STORED;
use records::{Meta, Sizes, S_IFDIR, S_IFLNK, S_IFREG};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// A compressed segment of a streamed file, with the CRC of its input.
type SegmentResult = io::Result<(crc32fast::Hasher, Vec<u8>)>;

/// Files larger than this are streamed instead of compressed whole.
pub const STREAM_ABOVE: u64 = 8 << 20;
/// Raw bytes of entries submitted but not yet written, at most (plus one file).
const WINDOW_BYTES: u64 = 32 << 20;
/// Entries submitted but not yet written, at most.
const WINDOW_ENTRIES: usize = 4096;
/// Segment of a streamed file: the unit of parallel compression.
pub const SEGMENT: usize = 1 << 20;
/// Segments of a streamed file in flight at once.
const GROUP_SEGMENTS: usize = 16;
/// Readers: enough outstanding requests to keep a disk busy on a cold cache.
const IO_THREADS: usize = 8;
/// Output buffer.
const OUT_BUF: usize = 1 << 20;

/// Packs `src` into the ZIP archive `out` (see [`crate::pack_zip`]).
pub fn pack(src: &Path, out: &Path, opts: &PackOptions) -> Result<PackSummary, PackError> {
    let started = Instant::now();
    Codec::from_options(opts.compressor, opts.level)?;
    let target = output::prepare(src, out, opts.force)?;
    // On any error `tmp` is dropped, which deletes the temporary file.
    let tmp = target.create_temp()?;
    let tree = walk::walk_skipping(src, opts, crate::output::identity(&tmp))?;
    write_tree(&tree, target, tmp, opts, started)
}

/// Writes `tree` as a ZIP archive into `tmp` and commits it to `target`.
pub(crate) fn write_tree(
    tree: &Tree,
    target: output::Target,
    tmp: tempfile::NamedTempFile,
    opts: &PackOptions,
    started: Instant,
) -> Result<PackSummary, PackError> {
    let codec = Codec::from_options(opts.compressor, opts.level)?;
    // Said once, as for the special files ZIP cannot hold: the archive has
    // no place for extended attributes (SquashFS keeps them). SELinux
    // labels, on every file of such a system, are the machine's, not the
    // data's, and go unmentioned.
    let sets: Vec<bool> = tree
        .xattrs
        .sets
        .iter()
        .map(|set| set.iter().any(|x| !(x.kind == 2 && x.name == b"selinux")))
        .collect();
    let with_xattrs = tree
        .inodes
        .iter()
        .filter(|i| sets.get(i.xattr as usize).copied().unwrap_or(false))
        .count();
    if with_xattrs > 0 {
        log::warn!(
            "{with_xattrs} entries have extended attributes, which ZIP cannot store: left out (pack as SquashFS to keep them)"
        );
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .thread_name(|i| format!("packfs-zip-{i}"))
        .build()
        .map_err(|e| PackError::Threads(format!("the worker threads: {e}")))?;
    let io_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(IO_THREADS)
        .thread_name(|i| format!("packfs-read-{i}"))
        .build()
        .map_err(|e| PackError::Threads(format!("the worker threads: {e}")))?;
    if cancelled(opts) {
        return Err(PackError::Interrupted);
    }
    // Before the first byte: see crate::lustre.
    target.stripe(&tmp, opts.stripe, tree.inodes.iter().map(|i| i.size).sum());
    let w = {
        let z = ZipWriter {
            tree,
            opts,
            codec,
            pool: Arc::new(pool),
            io_pool: Arc::new(io_pool),
            out: Out::new(tmp.as_file(), target.path()),
            bytes_in: 0,
            reported: 0,
        };
        z.write_all()?
    };
    if cancelled(opts) {
        return Err(PackError::Interrupted);
    }
    target.commit(tmp)?;
    if let Some(p) = &opts.progress {
        p.finish();
    }
    Ok(PackSummary {
        entries: w.entries,
        inodes: w.entries,
        bytes_in: w.bytes_in,
        bytes_out: w.bytes_out,
        dedup_files: 0,
        dedup_bytes: 0,
        fragments: 0,
        source_bytes: 0,
        elapsed: started.elapsed(),
    })
}

struct Written {
    entries: u64,
    bytes_in: u64,
    bytes_out: u64,
}

/// An entry to write: its archive name and inode.
struct Item {
    name: Vec<u8>,
    ino: u32,
}

/// The tree's nodes in archive order, special files left out (with a warning).
struct Entries<'t> {
    tree: &'t Tree,
    /// (node, length of the parent's name prefix)
    stack: Vec<(u32, usize)>,
    path: Vec<u8>,
}

impl<'t> Entries<'t> {
    fn new(tree: &'t Tree) -> Self {
        Entries {
            tree,
            stack: tree.children(0).rev().map(|c| (c, 0)).collect(),
            path: Vec::new(),
        }
    }
}

impl Iterator for Entries<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            let (node, prefix) = self.stack.pop()?;
            self.path.truncate(prefix);
            self.path.extend_from_slice(self.tree.name(node));
            let ino = self.tree.nodes[node as usize].inode;
            match self.tree.inodes[ino as usize].kind {
                Kind::Dir => {
                    self.path.push(b'/');
                    let len = self.path.len();
                    self.stack
                        .extend(self.tree.children(node).rev().map(|c| (c, len)));
                }
                Kind::File | Kind::Symlink => {}
                k => {
                    log::warn!(
                        "{}: {} skipped (ZIP cannot store it)",
                        self.tree.root.join(OsStr::from_bytes(&self.path)).display(),
                        match k {
                            Kind::Fifo => "fifo",
                            Kind::Socket => "socket",
                            Kind::BlockDev => "block device",
                            _ => "character device",
                        }
                    );
                    continue;
                }
            }
            return Some(Item {
                name: self.path.clone(),
                ino,
            });
        }
    }
}

/// Bytes of file data an entry brings.
fn data_size(tree: &Tree, it: &Item) -> u64 {
    let i = &tree.inodes[it.ino as usize];
    if i.kind == Kind::File {
        i.size
    } else {
        0
    }
}

/// An entry ready to write.
struct Prepared {
    sizes: Sizes,
    data: Vec<u8>,
}

fn compress_file(codec: Codec, raw: Vec<u8>, path: &Path) -> Result<Prepared, PackError> {
    let crc = crc32fast::hash(&raw);
    let size = raw.len() as u64;
    let (method, data) = compress_whole(codec, raw).map_err(PackError::io(path))?;
    Ok(Prepared {
        sizes: Sizes {
            method,
            crc,
            compressed: data.len() as u64,
            size,
        },
        data,
    })
}

/// Reads exactly `size` bytes: a file that shrank or grew since the walk
/// is an error, not a silently different entry.
fn read_whole(path: &Path, size: u64, walked: u64) -> Result<Vec<u8>, PackError> {
    if size == 0 {
        check_empty(path, walked)?;
    }
    let f = open_source(path, walked)?;
    let mut buf = Vec::with_capacity(size as usize);
    (&f).take(size + 1)
        .read_to_end(&mut buf)
        .map_err(PackError::io(path))?;
    if buf.len() as u64 != size {
        return Err(changed_size(path, &f, size));
    }
    Ok(buf)
}

/// Fills `buf` from `f` (of `size` bytes at the walk) or reports that the
/// file shrank.
fn read_exact(f: &mut File, buf: &mut [u8], path: &Path, size: u64) -> Result<(), PackError> {
    f.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            changed_size(path, f, size)
        } else {
            PackError::io(path)(e)
        }
    })
}

/// Errors if the file has grown beyond `size` bytes (the reader is there).
fn expect_eof(f: &mut File, path: &Path, size: u64) -> Result<(), PackError> {
    let mut b = [0u8; 1];
    match f.read(&mut b).map_err(PackError::io(path))? {
        0 => Ok(()),
        _ => Err(changed_size(path, f, size)),
    }
}

/// Sequential writer over the temporary file that knows its position and
/// collects the central directory.
struct Out<'f> {
    file: &'f File,
    /// The final output name, for messages (see [`PackError::Output`]).
    path: PathBuf,
    buf: Vec<u8>,
    pos: u64,
    central: Vec<u8>,
    entries: u64,
}

impl<'f> Out<'f> {
    fn new(file: &'f File, path: &Path) -> Self {
        Out {
            file,
            path: path.into(),
            buf: Vec::with_capacity(OUT_BUF),
            pos: 0,
            central: Vec::new(),
            entries: 0,
        }
    }

    fn err(&self) -> impl FnOnce(io::Error) -> PackError + 'static {
        PackError::output(self.path.clone(), "writing the image")
    }

    fn flush(&mut self) -> Result<(), PackError> {
        if !self.buf.is_empty() {
            let mut f = self.file;
            f.write_all(&self.buf).map_err(self.err())?;
            self.buf.clear();
        }
        Ok(())
    }

    fn write(&mut self, b: &[u8]) -> Result<(), PackError> {
        if self.buf.len() + b.len() > OUT_BUF {
            self.flush()?;
        }
        if b.len() >= OUT_BUF {
            let mut f = self.file;
            f.write_all(b).map_err(self.err())?;
        } else {
            self.buf.extend_from_slice(b);
        }
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Overwrites already written bytes at `at` (a local header).
    fn patch(&mut self, at: u64, b: &[u8]) -> Result<(), PackError> {
        self.flush()?;
        self.file.write_all_at(b, at).map_err(self.err())
    }

    /// Drops everything from `at` on.
    fn truncate(&mut self, at: u64) -> Result<(), PackError> {
        self.flush()?;
        self.file.set_len(at).map_err(self.err())?;
        let mut f = self.file;
        f.seek(SeekFrom::Start(at)).map_err(self.err())?;
        self.pos = at;
        Ok(())
    }

    /// Records the entry whose local header is at `offset`.
    fn central(&mut self, m: &Meta, s: &Sizes, offset: u64) {
        records::central_record(&mut self.central, m, s, offset);
        self.entries += 1;
    }

    /// Writes the central directory and end records; returns the archive size.
    fn finish(mut self) -> Result<u64, PackError> {
        let cd_offset = self.pos;
        let central = std::mem::take(&mut self.central);
        self.write(&central)?;
        let mut end = Vec::new();
        records::end_records(&mut end, self.entries, cd_offset, central.len() as u64);
        self.write(&end)?;
        self.flush()?;
        Ok(self.pos)
    }
}

struct ZipWriter<'a, 'f> {
    tree: &'a Tree,
    opts: &'a PackOptions,
    codec: Codec,
    pool: Arc<rayon::ThreadPool>,
    io_pool: Arc<rayon::ThreadPool>,
    out: Out<'f>,
    bytes_in: u64,
    /// Source bytes reported to the progress callback.
    reported: u64,
}

impl ZipWriter<'_, '_> {
    fn meta<'i>(&self, item: &'i Item) -> Result<Meta<'i>, PackError> {
        let i = &self.tree.inodes[item.ino as usize];
        if item.name.len() > u16::MAX as usize {
            return Err(PackError::Io {
                path: self.tree.root.join(OsStr::from_bytes(&item.name)),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "path longer than 65535 bytes, the ZIP limit",
                ),
            });
        }
        let ftype = match i.kind {
            Kind::Dir => S_IFDIR,
            Kind::Symlink => S_IFLNK,
            _ => S_IFREG,
        };
        Ok(Meta {
            name: &item.name,
            mode: ftype | i.mode as u32,
            mtime: i.mtime,
            uid: self.tree.ids[i.uid_idx as usize],
            gid: self.tree.ids[i.gid_idx as usize],
        })
    }

    fn source(&self, item: &Item) -> PathBuf {
        self.tree
            .data_root(item.ino)
            .join(OsStr::from_bytes(&item.name))
    }

    fn advance(&mut self, upto: u64) {
        if upto > self.reported {
            if let Some(p) = &self.opts.progress {
                p.advance(upto - self.reported);
            }
            self.reported = upto;
        }
    }

    fn write_all(mut self) -> Result<Written, PackError> {
        let tree = self.tree;
        let (mut total_bytes, mut total_entries) = (0u64, 0u64);
        for n in 1..tree.nodes.len() {
            let i = &tree.inodes[tree.nodes[n].inode as usize];
            match i.kind {
                Kind::File => {
                    total_bytes += i.size;
                    total_entries += 1;
                }
                Kind::Dir | Kind::Symlink => total_entries += 1,
                _ => {}
            }
        }
        if let Some(p) = &self.opts.progress {
            p.start(total_bytes, total_entries);
        }
        let (tx, rx) = mpsc::channel::<(u64, Result<Prepared, PackError>)>();
        let mut entries = Entries::new(tree).peekable();
        // Submitted entries not yet written, oldest first, with their
        // results as they arrive (`window[k]` has sequence number `base + k`).
        let mut window: VecDeque<(Item, Option<Result<Prepared, PackError>>)> = VecDeque::new();
        let mut base = 0u64;
        let mut in_flight = 0u64;
        loop {
            if cancelled(self.opts) {
                return Err(PackError::Interrupted);
            }
            // Submit until the window is full or a large file comes up.
            while in_flight < WINDOW_BYTES && window.len() < WINDOW_ENTRIES {
                match entries.peek() {
                    Some(it) if data_size(tree, it) <= STREAM_ABOVE => {}
                    _ => break,
                }
                let Some(it) = entries.next() else { break };
                let seq = base + window.len() as u64;
                let ready = self.submit(&it, seq, &tx);
                in_flight += data_size(tree, &it);
                window.push_back((it, ready));
            }
            if window.is_empty() {
                // Nothing in flight: the next entry, if any, is a large file.
                match entries.next() {
                    Some(it) => {
                        self.stream(&it)?;
                        continue;
                    }
                    None => break,
                }
            }
            // Write the oldest entry, waiting for its result if needed.
            while window.front().is_some_and(|w| w.1.is_none()) {
                // Polled, so that a signal is seen while a large file
                // compresses (queued files then end at once).
                let (seq, r) = loop {
                    if cancelled(self.opts) {
                        return Err(PackError::Interrupted);
                    }
                    match rx.recv_timeout(std::time::Duration::from_millis(20)) {
                        Ok(m) => break m,
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            unreachable!("the sender lives in this function")
                        }
                    }
                };
                window[(seq - base) as usize].1 = Some(r);
            }
            while window.front().is_some_and(|w| w.1.is_some()) {
                let Some((item, Some(r))) = window.pop_front() else {
                    unreachable!("checked above")
                };
                base += 1;
                in_flight -= data_size(tree, &item);
                self.write_entry(&item, r?)?;
            }
        }
        let (entries, bytes_in) = (self.out.entries, self.bytes_in);
        let bytes_out = self.out.finish()?;
        Ok(Written {
            entries,
            bytes_in,
            bytes_out,
        })
    }

    /// Starts preparing an entry: a file is read on the I/O pool, then
    /// compressed on the compression pool, and its result sent back with
    /// its sequence number. Directories and symlinks are ready at once.
    fn submit(
        &self,
        it: &Item,
        seq: u64,
        tx: &mpsc::Sender<(u64, Result<Prepared, PackError>)>,
    ) -> Option<Result<Prepared, PackError>> {
        let i = &self.tree.inodes[it.ino as usize];
        let stored = |data: Vec<u8>| Prepared {
            sizes: Sizes {
                method: METHOD_STORED,
                crc: crc32fast::hash(&data),
                compressed: data.len() as u64,
                size: data.len() as u64,
            },
            data,
        };
        match i.kind {
            Kind::Symlink => Some(Ok(stored(self.tree.symlink_target(it.ino).to_vec()))),
            Kind::File => {
                let (path, size, codec) = (self.source(it), i.size, self.codec);
                let walked = i.src_ino;
                let (tx, cpu) = (tx.clone(), self.pool.clone());
                // Queued work is dropped once the pack is cancelled: each
                // task looks before reading and before compressing.
                let cancel = self.opts.cancel.clone();
                let stop = move || cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed));
                self.io_pool.spawn(move || {
                    let read = match stop() {
                        true => Err(PackError::Interrupted),
                        false => read_whole(&path, size, walked),
                    };
                    match read {
                        Err(e) => {
                            // The receiver is gone only after an earlier error.
                            let _ = tx.send((seq, Err(e)));
                        }
                        Ok(raw) => cpu.spawn(move || {
                            let r = match stop() {
                                true => Err(PackError::Interrupted),
                                false => compress_file(codec, raw, &path),
                            };
                            let _ = tx.send((seq, r));
                        }),
                    }
                });
                None
            }
            _ => Some(Ok(stored(Vec::new()))),
        }
    }

    fn write_entry(&mut self, item: &Item, p: Prepared) -> Result<(), PackError> {
        let m = self.meta(item)?;
        let offset = self.out.pos;
        let mut hdr = Vec::with_capacity(128 + m.name.len());
        records::local_header(&mut hdr, &m, &p.sizes, offset, false);
        self.out.write(&hdr)?;
        self.out.write(&p.data)?;
        self.out.central(&m, &p.sizes, offset);
        if self.tree.inodes[item.ino as usize].kind == Kind::File {
            self.bytes_in += p.sizes.size;
            self.advance(self.reported + p.sizes.size);
        }
        Ok(())
    }

    /// Streams a large file: header with placeholder sizes, segments
    /// compressed in parallel group by group, header patched. Falls back to
    /// storing the file when the first segment looks incompressible or the
    /// compressed data turns out no smaller than the file.
    fn stream(&mut self, item: &Item) -> Result<(), PackError> {
        let path = self.source(item);
        let size = self.tree.inodes[item.ino as usize].size;
        let zip64 = records::local_zip64(size);
        let offset = self.out.pos;
        let start_reported = self.reported;
        let walked = self.tree.inodes[item.ino as usize].src_ino;
        let mut file = open_source(&path, walked)?;
        let mut method = self.codec.method;
        let mut first = vec![0u8; SEGMENT.min(size as usize)];
        read_exact(&mut file, &mut first, &path, size)?;
        if looks_incompressible(&first) {
            method = METHOD_STORED;
        }
        let sizes = loop {
            let meta = self.meta(item)?;
            let mut hdr = Vec::new();
            let placeholder = Sizes {
                method,
                ..Sizes::default()
            };
            records::local_header(&mut hdr, &meta, &placeholder, offset, zip64);
            self.out.write(&hdr)?;
            let result = if method == METHOD_STORED {
                Some(self.copy_stored(&mut file, &path, first, size, start_reported)?)
            } else {
                self.copy_compressed(&mut file, &path, first, size, start_reported)?
            };
            match result {
                Some(s) => break s,
                None => {
                    // Compressed data is no smaller: store the file instead.
                    log::debug!("{}: does not compress, stored", path.display());
                    self.out.truncate(offset)?;
                    file.seek(SeekFrom::Start(0))
                        .map_err(PackError::io(&path))?;
                    first = vec![0u8; SEGMENT.min(size as usize)];
                    read_exact(&mut file, &mut first, &path, size)?;
                    method = METHOD_STORED;
                }
            }
        };
        expect_eof(&mut file, &path, size)?;
        let meta = self.meta(item)?;
        let mut hdr = Vec::new();
        records::local_header(&mut hdr, &meta, &sizes, offset, zip64);
        self.out.patch(offset, &hdr)?;
        self.out.central(&meta, &sizes, offset);
        self.bytes_in += size;
        self.advance(start_reported + size);
        Ok(())
    }

    fn copy_stored(
        &mut self,
        file: &mut File,
        path: &Path,
        mut chunk: Vec<u8>,
        size: u64,
        start_reported: u64,
    ) -> Result<Sizes, PackError> {
        let mut crc = crc32fast::Hasher::new();
        let mut done = 0u64;
        loop {
            crc.update(&chunk);
            self.out.write(&chunk)?;
            done += chunk.len() as u64;
            self.advance(start_reported + done);
            if done == size {
                break;
            }
            if cancelled(self.opts) {
                return Err(PackError::Interrupted);
            }
            chunk.truncate(SEGMENT.min((size - done) as usize));
            read_exact(file, &mut chunk, path, size)?;
        }
        Ok(Sizes {
            method: METHOD_STORED,
            crc: crc.finalize(),
            compressed: size,
            size,
        })
    }

    /// Returns None when the compressed data reaches the file's size.
    fn copy_compressed(
        &mut self,
        file: &mut File,
        path: &Path,
        first: Vec<u8>,
        size: u64,
        start_reported: u64,
    ) -> Result<Option<Sizes>, PackError> {
        let codec = self.codec;
        let mut crc = crc32fast::Hasher::new();
        let mut compressed = 0u64;
        let mut done = first.len() as u64;
        // The first group: the segment already read plus the rest.
        let mut group = vec![first];
        group.extend(read_group(file, path, &mut done, size, GROUP_SEGMENTS - 1)?);
        let mut consumed = 0u64;
        while !group.is_empty() {
            if cancelled(self.opts) {
                return Err(PackError::Interrupted);
            }
            let group_bytes: u64 = group.iter().map(|s| s.len() as u64).sum();
            let last_group = consumed + group_bytes == size;
            let n = group.len();
            // Each segment is its own task (see `crate::detach`): a signal
            // stops the wait at once, not after the group is compressed.
            let pending: Vec<_> = group
                .into_iter()
                .enumerate()
                .map(|(k, seg)| {
                    let last = last_group && k + 1 == n;
                    let cancel = self.opts.cancel.clone();
                    detach::spawn(&self.pool, move || {
                        if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
                        }
                        let mut h = crc32fast::Hasher::new();
                        h.update(&seg);
                        Ok((h, compress_segment(codec, &seg, last)?))
                    })
                })
                .collect();
            // Read the next group while this one compresses.
            let (next, parts) = std::thread::scope(|s| {
                let reader = (!last_group)
                    .then(|| s.spawn(|| read_group(file, path, &mut done, size, GROUP_SEGMENTS)));
                let parts: Result<Vec<SegmentResult>, PackError> = pending
                    .iter()
                    .map(|rx| detach::wait(rx, self.opts))
                    .collect();
                let next = match reader {
                    Some(r) => r.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    None => Ok(Vec::new()),
                };
                (next, parts)
            });
            let parts = parts?;
            for p in parts {
                let (h, bytes) = p.map_err(PackError::io(path))?;
                crc.combine(&h);
                compressed += bytes.len() as u64;
                if compressed >= size {
                    return Ok(None);
                }
                self.out.write(&bytes)?;
            }
            consumed += group_bytes;
            self.advance(start_reported + consumed);
            group = next?;
        }
        Ok(Some(Sizes {
            method: codec.method,
            crc: crc.finalize(),
            compressed,
            size,
        }))
    }
}

/// Reads up to `max` segments of the file's remaining `size - *done` bytes.
fn read_group(
    file: &mut File,
    path: &Path,
    done: &mut u64,
    size: u64,
    max: usize,
) -> Result<Vec<Vec<u8>>, PackError> {
    let mut group = Vec::new();
    while group.len() < max && *done < size {
        let mut seg = vec![0u8; SEGMENT.min((size - *done) as usize)];
        read_exact(file, &mut seg, path, size)?;
        *done += seg.len() as u64;
        group.push(seg);
    }
    Ok(group)
}
