//! Source-tree I/O concurrency, independent of the compression threads.
//!
//! With a cold page cache, packing is bound by I/O *latency* unless many
//! requests are in flight: the walk is one `lstat` per entry and the data
//! phase one small-file read per file, and blocking reads on the compression
//! pool keep only one request per compression thread in flight. So source I/O
//! that does not itself produce image bytes runs on a separate pool of
//! [`IO_THREADS`] threads, whatever `--threads` says:
//!
//! * the walk ([`crate::walk`]) reads directories and `lstat`s / `readlink`s
//!   / lists the xattrs of their entries on this pool, up to [`WALK_WINDOW`]
//!   directories ahead of the sequential, deterministic assembly of the tree;
//! * the data phase ([`Prefetcher`]) asks the kernel to read the files of the
//!   next [`PREFETCH_BATCHES`] batches into the page cache
//!   (`posix_fadvise(POSIX_FADV_WILLNEED)`, which only *submits* the reads)
//!   while earlier batches compress, so the compression threads' own `pread`s
//!   mostly hit the cache.
//!
//! With both, a cold pack is bound by compression CPU again
//! (docs/BENCHMARKS.md).
//!
//! Why these numbers:
//!
//! * 16 threads: on a local disk the walk stops gaining at about 8; slower
//!   storage (network filesystems, throttled cloud volumes) needs more
//!   requests in flight, and threads blocked in the kernel cost only their
//!   stacks. Prefetching needs far fewer: `WILLNEED` is asynchronous.
//! * [`PREFETCH_BATCHES`] = 2: on a local disk the hints of even the current
//!   batch keep thousands of reads queued, so 2 is margin for slower
//!   devices. Batches are at most 32 MiB / 4096 pieces (`squashfs::data`),
//!   so the page cache filled ahead of use stays under ~128 MiB whatever the
//!   tree's size. It costs no process memory: a hint the kernel drops under
//!   memory pressure only means the compression thread reads the file
//!   itself, as it would without prefetch.
//!
//! Nothing here decides what is written or in which order: the walk sorts
//! entries and assembles the tree sequentially, and prefetching only warms
//! the cache, so the image stays byte-identical for any `--threads` (and any
//! timing of this pool).

use crate::PackError;
use rayon::prelude::*;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Threads of the I/O pool.
pub const IO_THREADS: usize = 16;
/// Directories being read (or read and waiting to be added to the tree) at
/// most during the walk: a few per I/O thread, so one slow directory does not
/// idle the others, while the scanned-but-unassembled entries stay bounded.
pub const WALK_WINDOW: usize = 4 * IO_THREADS;
/// Data batches prefetched ahead of the ones being compressed.
pub const PREFETCH_BATCHES: usize = 2;

static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();

/// The process-wide I/O pool (created on first use). Its threads only block
/// in the kernel; they never run codec work.
pub fn pool() -> Result<&'static rayon::ThreadPool, PackError> {
    if let Some(p) = POOL.get() {
        return Ok(p);
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(IO_THREADS)
        .thread_name(|i| format!("packfs-io-{i}"))
        .build()
        .map_err(|e| PackError::Threads(format!("the I/O threads: {e}")))?;
    // If another pack won the race, `p` is dropped and theirs is used.
    Ok(POOL.get_or_init(|| p))
}

/// A range of a source file that will be read soon.
pub struct Hint {
    pub path: Arc<Path>,
    pub offset: u64,
    pub len: u64,
}

/// Asks the kernel to read ranges of files ahead of their use, a batch at a
/// time, on the I/O pool. Purely advisory: errors are ignored (the real read
/// reports them) and results never depend on whether a hint ran.
pub struct Prefetcher {
    pool: &'static rayon::ThreadPool,
    /// Sequence number of the batch the consumer is on; hints of earlier
    /// batches still queued are skipped. `u64::MAX` once dropped.
    consumer: Arc<AtomicU64>,
}

impl Prefetcher {
    pub fn new() -> Result<Self, PackError> {
        Ok(Prefetcher {
            pool: pool()?,
            consumer: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Queues the hints of batch `seq` (returns at once).
    pub fn issue(&self, seq: u64, hints: Vec<Hint>) {
        if hints.is_empty() {
            return;
        }
        let consumer = self.consumer.clone();
        self.pool.spawn(move || {
            hints.par_iter().with_min_len(4).for_each(|h| {
                if consumer.load(Ordering::Relaxed) <= seq {
                    will_need(h);
                }
            })
        });
    }

    /// The consumer starts on batch `seq`.
    pub fn advance(&self, seq: u64) {
        self.consumer.store(seq, Ordering::Relaxed);
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.consumer.store(u64::MAX, Ordering::Relaxed);
    }
}

fn will_need(h: &Hint) {
    // O_NONBLOCK: a file replaced by a FIFO since the walk must not block an
    // I/O thread in open(); on regular files it changes nothing here.
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&h.path)
    else {
        return;
    };
    // SAFETY: posix_fadvise on a valid fd has no memory effects.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            h.offset as libc::off_t,
            h.len as libc::off_t,
            libc::POSIX_FADV_WILLNEED,
        );
    }
}

/// Opens a regular file the walk found, to read its data; what changed
/// since the walk is reported as such ([`PackError::FileVanished`],
/// [`PackError::FileReplaced`]) rather than as a bare errno.
///
/// The first open is `O_NONBLOCK` because a file replaced by a FIFO since
/// the walk would otherwise block `open()` until some writer comes, i.e.
/// hang the pack. But `O_NONBLOCK` also makes `open()` fail with
/// `EWOULDBLOCK` instead of waiting while another process holds a lease on
/// the file (Samba and the NFS server take leases for their clients; a
/// `fcntl(F_SETLEASE)` holder gets up to `/proc/sys/fs/lease-break-time`
/// seconds to let go): only a regular file has leases, so that case opens
/// again, waiting for the lease like any reader.
///
/// `walked` is the file's `st_ino` at the walk (0: not known): another file
/// now under the name (replaced by a rename, as editors and `cp` to a
/// temporary name do) is [`PackError::FileReplaced`], even at the same size.
pub fn open_source(path: &Path, walked: u64) -> Result<std::fs::File, PackError> {
    let open = |flags: libc::c_int| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | flags)
            .open(path)
    };
    let file = match open(libc::O_NONBLOCK) {
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => open(0),
        r => r,
    }
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => PackError::FileVanished { path: path.into() },
        // O_NOFOLLOW on what is now a symlink.
        Some(libc::ELOOP) => PackError::FileReplaced { path: path.into() },
        _ => PackError::io(path)(e),
    })?;
    let meta = file.metadata().map_err(PackError::io(path))?;
    if !meta.is_file() || (walked != 0 && meta.ino() != walked) {
        return Err(PackError::FileReplaced { path: path.into() });
    }
    Ok(file)
}

/// An empty file has no data to read, so it is checked by name: still
/// there, still empty, still the file the walk found (`walked` inode).
pub fn check_empty(path: &Path, walked: u64) -> Result<(), PackError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => PackError::FileVanished { path: path.into() },
        _ => PackError::io(path)(e),
    })?;
    if !meta.is_file() || (walked != 0 && meta.ino() != walked) {
        return Err(PackError::FileReplaced { path: path.into() });
    }
    if meta.len() != 0 {
        return Err(PackError::FileChanged {
            path: path.into(),
            was: 0,
            now: meta.len(),
        });
    }
    Ok(())
}

/// The error for a file found to differ from the `was` bytes the walk
/// recorded, with its size now (of the open file, so also right when the
/// name has been unlinked or reused since).
pub fn changed_size(path: &Path, file: &std::fs::File, was: u64) -> PackError {
    match file.metadata() {
        Ok(m) => PackError::FileChanged {
            path: path.into(),
            was,
            now: m.len(),
        },
        Err(e) => PackError::io(path)(e),
    }
}

/// `statfs(path).f_type`, the filesystem's magic number; `None` when it
/// cannot be asked.
pub fn fs_type(path: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: zeroed is a valid statfs; `c` is a valid C string and `st` a
    // buffer of the right type.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (r == 0).then_some(st.f_type as i64)
}
