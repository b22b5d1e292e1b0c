//! Per-file sequential readahead: where each file's reader is, and how far
//! ahead of it work was handed out.

use std::sync::atomic::{AtomicU64, Ordering};

/// A file prepared for reading, with its reader's position. Shared by every
/// request for the file (and by the prefetch jobs it schedules).
pub struct TrackedFile<H> {
    pub handle: H,
    /// Offset just past the last read: a read starting here is sequential.
    next: AtomicU64,
    /// Everything below this offset has been handed to the prefetcher.
    prefetched: AtomicU64,
}

impl<H> TrackedFile<H> {
    pub fn new(handle: H) -> Self {
        TrackedFile {
            handle,
            next: AtomicU64::new(0),
            prefetched: AtomicU64::new(0),
        }
    }

    /// Records a read of `offset..end`; true when it is sequential: it starts
    /// where the previous read ended, or at 0 for the file's first read.
    pub(super) fn advance(&self, offset: u64, end: u64) -> bool {
        self.next.swap(end, Ordering::Relaxed) == offset
    }

    /// Claims the window `from..from + distance` for prefetching: returns the
    /// part not handed out yet, as (offset, length), or `None` when that is
    /// not more than one `block` (work is handed out in whole blocks) or
    /// another thread is claiming for this file at the same moment.
    pub(super) fn claim(&self, from: u64, distance: u64, block: u64) -> Option<(u64, u64)> {
        let target = from + distance;
        let done = self.prefetched.load(Ordering::Relaxed).max(from);
        if target <= done + block {
            return None;
        }
        self.prefetched
            .compare_exchange(
                self.prefetched.load(Ordering::Relaxed),
                target,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .ok()?;
        Some((done, target - done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_reader_is_handed_each_block_once_and_a_jump_is_not_sequential() {
        const K: u64 = 1 << 10;
        let f = TrackedFile::new(());
        // First read from 0: sequential; the window past it is handed out.
        assert!(f.advance(0, 128 * K));
        assert_eq!(f.claim(128 * K, 512 * K, 128 * K), Some((128 * K, 512 * K)));
        // The next read moves the window by one block: not enough to hand out.
        assert!(f.advance(128 * K, 256 * K));
        assert_eq!(f.claim(256 * K, 512 * K, 128 * K), None);
        // Two blocks on, the two new blocks are.
        assert!(f.advance(256 * K, 384 * K));
        assert_eq!(f.claim(384 * K, 512 * K, 128 * K), Some((640 * K, 256 * K)));
        // A jump is not sequential.
        let g = TrackedFile::new(());
        assert!(!g.advance(1 << 20, (1 << 20) + 128 * K));
        assert!(!g.advance(0, 128 * K));
    }
}
