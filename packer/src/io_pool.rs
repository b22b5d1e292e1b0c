//! The I/O pool: threads for source I/O, independent of the compression
//! threads.
//!
//! With a cold page cache, packing is bound by I/O *latency* unless many
//! requests are in flight: the walk is one `lstat` per entry and the data
//! phase one small-file read per file, and blocking reads on the compression
//! pool keep only one request per compression thread in flight. So source I/O
//! that does not itself produce image bytes runs on a separate pool of
//! [`IO_THREADS`] threads, whatever `--threads` says:
//!
//! * the walk ([`crate::walk`]) reads directories and `lstat`s / `readlink`s
//!   / lists the xattrs of their entries on this pool, up to
//!   [`WALK_WINDOW`](crate::walk::WALK_WINDOW) directories ahead of the
//!   sequential, deterministic assembly of the tree;
//! * the data phase ([`crate::prefetch`]) asks the kernel to read the files
//!   of the next batches into the page cache while earlier batches compress,
//!   so the compression threads' own `pread`s mostly hit the cache.
//!
//! With both, a cold pack is bound by compression CPU again
//! (docs/benchmarks/defaults.md).
//!
//! Why 16 threads: on a local disk the walk stops gaining at about 8; slower
//! storage (network filesystems, throttled cloud volumes) needs more
//! requests in flight, and threads blocked in the kernel cost only their
//! stacks. Prefetching needs far fewer: `WILLNEED` is asynchronous.
//!
//! Nothing here decides what is written or in which order: the walk sorts
//! entries and assembles the tree sequentially, and prefetching only warms
//! the cache, so the image stays byte-identical for any `--threads` (and any
//! timing of this pool).

use crate::PackError;
use std::sync::OnceLock;

/// Threads of the I/O pool.
pub const IO_THREADS: usize = 16;

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
