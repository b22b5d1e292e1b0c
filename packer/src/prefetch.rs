//! Prefetching source files into the page cache ahead of the data phase's
//! reads, on the I/O pool ([`crate::io_pool`]).
//!
//! The data phase ([`crate::squashfs::data`]) asks the kernel to read the
//! files of the next [`PREFETCH_BATCHES`] batches into the page cache
//! (`posix_fadvise(POSIX_FADV_WILLNEED)`, which only *submits* the reads)
//! while earlier batches compress, so the compression threads' own `pread`s
//! mostly hit the cache.
//!
//! Why [`PREFETCH_BATCHES`] = 2: on a local disk the hints of even the
//! current batch keep thousands of reads queued, so 2 is margin for slower
//! devices. Batches are at most 32 MiB / 4096 pieces (`squashfs::data`), so
//! the page cache filled ahead of use stays under ~128 MiB whatever the
//! tree's size. It costs no process memory: a hint the kernel drops under
//! memory pressure only means the compression thread reads the file itself,
//! as it would without prefetch.
//!
//! Prefetching only warms the cache: the image never depends on whether or
//! when a hint ran.

use crate::io_pool;
use crate::PackError;
use rayon::prelude::*;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Data batches prefetched ahead of the ones being compressed.
pub const PREFETCH_BATCHES: usize = 2;

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
            pool: io_pool::pool()?,
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
