//! Recycled buffers for decoded blocks.
//!
//! The cache turns over block-sized buffers (4 KiB to 1 MiB) all the time,
//! from many threads: one is allocated per decode and freed per eviction.
//! Left to glibc's malloc, whose mmap threshold rises after the first frees,
//! those buffers land in per-thread heap arenas interleaved with short-lived
//! reply buffers; the freed space fragments and is kept, so the daemon's
//! anonymous RSS grows well past the cache budget. Forcing every buffer into
//! its own mapping (a fixed mmap threshold) bounds it but makes every decode
//! pay a mapping, its page faults and an unmapping.
//!
//! So a block's buffer goes back to this pool when the block is dropped, and
//! the next decode takes it from here: steady-state decoding allocates
//! nothing, touches no fresh pages, and the heap stops churning. The pool
//! holds at most [`POOL_BYTES`]; anything beyond goes back to malloc.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Largest total capacity kept for reuse: enough for a burst of evictions
/// of 128 KiB blocks by many threads, small next to any cache budget.
pub const POOL_BYTES: usize = 16 << 20;
/// Buffers smaller than this (metadata blocks are 8 KiB) are not worth it.
const MIN_KEPT: usize = 4096;

/// Size classes: class `k` holds buffers whose capacity is in
/// `[2^k, 2^(k+1))`, so finding one is a look at two classes, not a scan.
const CLASSES: usize = usize::BITS as usize;

struct Pool {
    classes: [Vec<Vec<u8>>; CLASSES],
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    classes: [const { Vec::new() }; CLASSES],
    bytes: 0,
});

fn class(capacity: usize) -> usize {
    capacity.max(1).ilog2() as usize
}

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // The pool is consistent after every statement; a panic elsewhere
    // while it was held does not corrupt it.
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// An empty buffer with room for at least `capacity` bytes: a recycled one
/// of less than four times that size when there is one, else a new one.
pub fn take(capacity: usize) -> Vec<u8> {
    let mut b = take_any(capacity);
    b.clear();
    b
}

/// A buffer of exactly `len` bytes whose contents are unspecified (left
/// over from its last use), for a read that overwrites all of it: reusing
/// a buffer's old contents instead of zeroing it saves a pass over every
/// block read from the image.
pub fn take_len(len: usize) -> Vec<u8> {
    fit(take_any(len), len)
}

/// `b` at length `len`: truncated when it holds more (no writes), the
/// missing part zeroed when it holds less.
fn fit(mut b: Vec<u8>, len: usize) -> Vec<u8> {
    if b.len() >= len {
        b.truncate(len);
    } else {
        b.resize(len, 0);
    }
    b
}

/// A recycled buffer of capacity >= `capacity` (its old length and
/// contents kept), or a new empty one.
fn take_any(capacity: usize) -> Vec<u8> {
    {
        let mut p = pool();
        let k = class(capacity);
        // In its own class a buffer may still be too small; one class up,
        // every buffer fits.
        let found = match p.classes[k].iter().rposition(|b| b.capacity() >= capacity) {
            Some(i) => Some(p.classes[k].swap_remove(i)),
            None if k + 1 < CLASSES => p.classes[k + 1].pop(),
            None => None,
        };
        if let Some(b) = found {
            p.bytes -= b.capacity();
            return b;
        }
    }
    Vec::with_capacity(capacity)
}

/// Counts a block decoded (or read) into the cache, whatever its buffer:
/// the trimmer waits for these to stop. Called by `cache::Block::new`.
pub fn note_block() {
    BLOCKS.fetch_add(1, Ordering::Relaxed);
}

/// Returns a buffer for reuse (or to malloc when the pool is full).
pub fn recycle(buf: Vec<u8>) {
    let cap = buf.capacity();
    if cap < MIN_KEPT {
        return;
    }
    // The contents stay (initialised bytes that `take_len` may hand out
    // for overwriting); `take` clears.
    let mut p = pool();
    if p.bytes + cap <= POOL_BYTES {
        p.bytes += cap;
        p.classes[class(cap)].push(buf);
    } else {
        FREED.fetch_add(cap, Ordering::Relaxed);
    }
}

/// Bytes of block buffers given back to malloc since the last trim.
static FREED: AtomicUsize = AtomicUsize::new(0);
/// Blocks made, ever ([`note_block`]).
static BLOCKS: AtomicUsize = AtomicUsize::new(0);

/// Freed bytes that make a trim worth its cost (a walk of malloc's free
/// lists, and page faults for whatever is allocated there again).
pub const TRIM_AFTER: usize = 32 << 20;

/// Starts a thread that hands free memory back to the kernel, for a
/// long-running server (the mount daemon). glibc keeps freed space inside
/// its arenas' heaps, so after a shuffled pass, whose cache fills with
/// partly read blocks that then all leave, the daemon would hold its peak
/// for good. Every `every` the thread trims (`malloc_trim`) when at least
/// [`TRIM_AFTER`] bytes of block buffers were freed since the last trim and
/// no block was made since the last look: while blocks are still being
/// decoded into new memory, a trim would only make them fault the same
/// pages in again. Only glibc is trimmed (musl returns freed memory itself).
pub fn spawn_trimmer(every: std::time::Duration) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("packfs-trim".into())
        .spawn(move || {
            let mut seen = BLOCKS.load(Ordering::Relaxed);
            loop {
                std::thread::sleep(every);
                let now = BLOCKS.load(Ordering::Relaxed);
                if now == seen && FREED.load(Ordering::Relaxed) >= TRIM_AFTER {
                    FREED.store(0, Ordering::Relaxed);
                    #[cfg(target_env = "gnu")]
                    // SAFETY: malloc_trim only returns free pages of
                    // malloc's own heaps.
                    unsafe {
                        libc::malloc_trim(0)
                    };
                }
                seen = now;
            }
        })
        .map(|_| ())
}

/// Bytes held for reuse now.
pub fn pooled_bytes() -> usize {
    pool().bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_the_pool_stays_bounded() {
        let a = take(128 << 10);
        let ptr = a.as_ptr();
        recycle(a);
        // The same allocation, empty, for a request it fits.
        let b = take(100 << 10);
        assert_eq!(b.as_ptr(), ptr);
        assert!(b.is_empty() && b.capacity() >= 128 << 10);
        // A much smaller request does not take a big buffer.
        recycle(b);
        let small = take(8 << 10);
        assert_ne!(small.as_ptr(), ptr);
        // However much is returned, the pool keeps at most POOL_BYTES.
        for _ in 0..(2 * POOL_BYTES / (1 << 20)) {
            recycle(Vec::with_capacity(1 << 20));
        }
        assert!(pooled_bytes() <= POOL_BYTES);
    }

    // The pool is global and other tests use it concurrently, so these
    // check the sizing rule itself and the lengths handed out, not which
    // allocation comes back.
    #[test]
    fn a_buffer_for_overwriting_has_the_length_asked_whatever_it_held() {
        let mut a = Vec::with_capacity(64 << 10);
        a.resize(60 << 10, 7u8);
        let ptr = a.as_ptr();
        // Shorter than what it held: truncated in place, nothing rewritten.
        let b = fit(a, 50 << 10);
        assert_eq!((b.as_ptr(), b.len()), (ptr, 50 << 10));
        assert!(b.iter().all(|&x| x == 7));
        // Longer than what it held (within capacity): the rest is zeroed.
        let c = fit(b, 64 << 10);
        assert_eq!((c.as_ptr(), c.len()), (ptr, 64 << 10));
        assert!(c[50 << 10..].iter().all(|&x| x == 0));
        for n in [0, 1, 5000, 128 << 10] {
            let v = take_len(n);
            assert_eq!(v.len(), n);
            recycle(v);
        }
        assert!(take(4096).is_empty());
    }
}
