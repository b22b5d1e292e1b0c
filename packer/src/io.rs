//! Source-tree I/O concurrency, independent of the compression threads.
//!
//! With a cold page cache, packing is bound by I/O *latency*, not bandwidth:
//! the walk is ~100k `lstat`s and the data phase ~100k small-file reads, and
//! a virtual or network disk answers each in ~0.1–1 ms however few are in
//! flight. One request in flight per compression thread (what blocking reads
//! on the compression pool give, i.e. 2 on a 2-core machine) leaves the
//! device idle most of the time. So all blocking source I/O that does not
//! produce bytes for the image is done on a separate pool of [`IO_THREADS`]
//! threads, whatever `--threads` says:
//!
//! * the walk ([`crate::walk`]) reads directories and `lstat`s their entries
//!   on this pool, up to [`WALK_WINDOW`] directories ahead of the (sequential,
//!   deterministic) assembly of the tree;
//! * the data phase ([`Prefetcher`]) asks the kernel to read the files of the
//!   next [`PREFETCH_BATCHES`] batches into the page cache
//!   (`posix_fadvise(POSIX_FADV_WILLNEED)`) while the current batch
//!   compresses, so the compression threads' own `pread`s mostly hit the
//!   cache.
//!
//! Why these numbers:
//!
//! * 16 threads: enough to keep a virtio/NVMe/SSD queue busy for the part of
//!   the work that blocks synchronously (`lstat`, `getdents`, `open`, extent
//!   lookups); `WILLNEED` itself only *submits* reads, so each thread keeps
//!   many requests in flight. Measured on the Linux source tree (cold cache,
//!   virtio disk, 2 cores) the gain flattens out above ~8 threads, and idle
//!   threads blocked in the kernel cost nothing but a stack.
//! * Prefetching whole batches (each ≤ 32 MiB and ≤ 4096 pieces, see
//!   `squashfs::data`) two ahead bounds the page cache populated ahead of use
//!   to ~64 MiB, independent of the tree's size, and keeps several thousand
//!   small-file reads queued — far more than a device needs to reach its
//!   throughput. It costs no process memory: the data lands in the page
//!   cache, and a hint the kernel drops under memory pressure only means the
//!   compression thread reads the file itself, as it would without prefetch.
//!
//! Nothing here decides what is written or in which order: the walk sorts
//! entries and assembles the tree sequentially, and prefetching only warms the
//! cache, so the image stays byte-identical for any `--threads` (and any
//! timing of this pool).

use crate::PackError;
use rayon::prelude::*;
use std::os::unix::fs::OpenOptionsExt;
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
/// Data batches prefetched ahead of the one being compressed.
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
        .map_err(|e| PackError::InvalidOption(format!("I/O thread pool: {e}")))?;
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
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
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
