//! Image-order unit readahead: a reader stepping from shared unit `u` to
//! `u + 1` (SquashFS fragment blocks, numbered in the order the packer
//! walked the tree) gets the next units decoded ahead of it.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};

/// Fewest units decoded ahead on a step: even a readahead smaller than two
/// blocks overlaps the next unit's decode with the reader.
const MIN_UNITS: u64 = 2;
/// Most units decoded ahead on a step: bounds what a false start costs.
const MAX_UNITS: u64 = 16;

/// Units to decode ahead for `bytes` of readahead over units of
/// `block_size` bytes.
pub(super) fn window(bytes: u64, block_size: u32) -> u64 {
    (bytes / block_size.max(1) as u64).clamp(MIN_UNITS, MAX_UNITS)
}

/// The image-wide state: one per mounted image, shared by all readers.
pub(super) struct UnitSteps {
    /// The shared unit of the last file read (`u64::MAX`: none yet).
    last: AtomicU64,
    /// The end of the last window handed out.
    handed: AtomicU64,
}

impl UnitSteps {
    pub(super) fn new() -> Self {
        UnitSteps {
            last: AtomicU64::new(u64::MAX),
            handed: AtomicU64::new(0),
        }
    }

    /// Records that a file in `unit` is being read from its start; on a step
    /// by one from the last such unit, returns the units to decode ahead,
    /// up to `unit + window`.
    pub(super) fn step(&self, unit: u64, window: u64) -> Option<RangeInclusive<u64>> {
        let last = self.last.swap(unit, Ordering::Relaxed);
        if last == u64::MAX || unit != last + 1 {
            return None;
        }
        let upto = unit + window;
        // Skip what the previous step already handed out, but only when that
        // window overlaps this one: a reader starting again lower in the
        // image (a second stream, a new epoch) gets its own window.
        let handed = self.handed.swap(upto, Ordering::Relaxed);
        let from = if (unit..upto).contains(&handed) {
            handed + 1
        } else {
            unit + 1
        };
        Some(from..=upto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_by_one_hand_out_each_window_once_and_jumps_nothing() {
        assert_eq!(window(1 << 20, 128 << 10), 8);
        assert_eq!(window(0, 128 << 10), MIN_UNITS);
        assert_eq!(window(64 << 20, 128 << 10), MAX_UNITS);
        assert_eq!(window(1 << 20, 0), MAX_UNITS);

        let s = UnitSteps::new();
        assert_eq!(s.step(0, 8), None);
        assert_eq!(s.step(0, 8), None);
        assert_eq!(s.step(1, 8), Some(2..=9));
        // The next step only adds what the window gained.
        assert_eq!(s.step(2, 8), Some(10..=10));
        // Jumping around: nothing.
        for u in [5, 2, 9, 3] {
            assert_eq!(s.step(u, 8), None);
        }
        // A second reader lower in the image gets its own window.
        let s = UnitSteps::new();
        assert_eq!(s.step(10, 8), None);
        assert_eq!(s.step(11, 8), Some(12..=19));
        assert_eq!(s.step(2, 8), None);
        assert_eq!(s.step(3, 8), Some(4..=11));
    }
}
