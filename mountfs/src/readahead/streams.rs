//! Sequential streams through the image file, detected from the hints the
//! decoders give the image source, for readahead on the image file.
//!
//! The readers hint each block before touching it
//! ([`ImageSource::will_need`]), and on a memory map a hinted range is read
//! exactly as hinted: the kernel's sequential readahead never starts, so a
//! sequential pass over the image costs one storage read per block (the
//! window is sized for that case; see the module doc for `pread`).
//! Here a hint that starts near where an earlier one ended continues that
//! stream; once a stream has been continued twice, its hints run
//! `RA_WINDOW` (4 MiB) ahead of it, issued half a window at a time. Twice,
//! not once: with 8 streams each taking hints within 1 MiB of its end, a
//! random reader's hint lands near *some* stream's end often (the smaller
//! the image, the more often), and each such false start costs a 4 MiB
//! window, which on an object store is fetched: two in a row is the square
//! of that chance. A few streams are tracked
//! because several readers (threads, or the prefetcher running ahead of a
//! reader) walk different parts of the image at once; a hint far from every
//! stream is advised exactly, so random readers read no more than before.
//! What this saves on a high-latency store is in the [module doc](super).

use crate::error::Result;
use crate::source::ImageSource;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// Streams tracked at once.
const RA_STREAMS: usize = 8;
/// How far ahead of a stream its hints run.
const RA_WINDOW: u64 = 4 << 20;
/// How far from a stream's end a hint may start and still continue it:
/// readers skip blocks other readers took, and fragment blocks sit between
/// data blocks.
const RA_SLACK: u64 = 1 << 20;

/// An [`ImageSource`] whose readahead hints are widened along sequential
/// streams (see the module doc). `len` and `slice` pass through; the inner
/// source is asked to advise exactly the widened range.
pub struct StreamReadahead<S> {
    inner: S,
    streams: Mutex<Streams>,
    /// Set by the first [`ImageSource::will_read`]: the reader plans its
    /// reads, and hints pass on unwidened.
    planned: AtomicBool,
}

impl<S> StreamReadahead<S> {
    pub fn new(inner: S) -> Self {
        StreamReadahead {
            inner,
            streams: Default::default(),
            planned: AtomicBool::new(false),
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: ImageSource> ImageSource for StreamReadahead<S> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(off, buf)
    }
    fn will_need(&self, off: u64, len: usize) {
        if self.planned.load(Relaxed) {
            return self.inner.will_need(off, len);
        }
        let (from, to) = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hint(off, off + len as u64);
        // Forwarded even when empty (a hint the stream covers already), as
        // the map did when this detector lived inside it.
        self.inner.will_need(from, (to - from) as usize);
    }
    /// Not a stream's hint: passed on as it is, and streams are no longer
    /// widened (see [`ImageSource::will_read`]).
    fn will_read(&self, off: u64, len: usize) {
        self.planned.store(true, Relaxed);
        self.inner.will_read(off, len)
    }
    fn identity(&self) -> Option<crate::source::FileIdentity> {
        self.inner.identity()
    }
}

/// Continuations a stream needs before its hints are widened.
const RA_CONFIRM: u8 = 2;

#[derive(Default)]
struct Streams {
    /// (end of the last hinted range, end of what was advised ahead,
    /// continuations seen, up to `RA_CONFIRM`).
    at: [(u64, u64, u8); RA_STREAMS],
    /// Next slot to recycle for a new stream.
    victim: usize,
}

impl Streams {
    /// Records a hint for `off..end`; returns the range to advise (empty
    /// when it is covered already).
    fn hint(&mut self, off: u64, end: u64) -> (u64, u64) {
        let found = self
            .at
            .iter()
            .position(|&(next, ..)| next != 0 && off + RA_SLACK >= next && off <= next + RA_SLACK);
        let Some(i) = found else {
            let v = self.victim;
            self.victim = (v + 1) % RA_STREAMS;
            self.at[v] = (end, end, 0);
            return (off, end);
        };
        let (next, advised, seen) = self.at[i];
        if seen + 1 < RA_CONFIRM {
            // Not a stream yet: advised exactly.
            self.at[i] = (end.max(next), advised.max(end), seen + 1);
            return (off.max(advised), end.max(advised));
        }
        if advised >= end + RA_WINDOW / 2 {
            self.at[i].0 = end.max(next);
            return (off, off);
        }
        let to = end + RA_WINDOW;
        self.at[i] = (end.max(next), to, RA_CONFIRM);
        (off.max(advised), to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemSource;

    #[test]
    fn sequential_hints_run_a_window_ahead_and_random_ones_do_not() {
        let mut s = Streams::default();
        // A new stream: just the range.
        assert_eq!(s.hint(0, 100), (0, 100));
        // A sequential reader of 128 KiB blocks over 64 MiB: the advice
        // always covers at least half a window past the block, in few calls.
        let (bs, mut frontier, mut calls) = (128u64 << 10, 100u64, 0);
        let mut off = 100;
        // The first continuation is advised exactly (not a stream yet).
        assert_eq!(s.hint(off, off + bs), (off, off + bs));
        off += bs;
        frontier = frontier.max(off);
        while off < 64 << 20 {
            let (a, b) = s.hint(off, off + bs);
            if a < b {
                calls += 1;
                assert!(a <= frontier.max(off), "gap before {a}");
                frontier = frontier.max(b);
            }
            assert!(frontier >= off + bs + RA_WINDOW / 2, "behind at {off}");
            off += bs;
        }
        assert!(
            calls <= 2 + (64 << 20) / (RA_WINDOW / 2),
            "{calls} madvise calls"
        );
        // A jump far away starts another stream, without readahead.
        let far = 1u64 << 40;
        assert_eq!(s.hint(far, far + 10), (far, far + 10));
        // Random hints, each far from the others, are advised exactly.
        for k in 1..20u64 {
            let at = k * (100 << 20) + 7;
            assert_eq!(s.hint(at, at + 5), (at, at + 5));
        }
    }

    /// Records the hints that reach it.
    struct Hints(MemSource, Mutex<Vec<(u64, usize)>>);
    impl ImageSource for Hints {
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
            self.0.read_at(off, buf)
        }
        fn will_need(&self, off: u64, len: usize) {
            self.1.lock().unwrap().push((off, len));
        }
    }

    #[test]
    fn the_adaptor_forwards_the_widened_range_and_passes_reads_through() {
        let src = StreamReadahead::new(Hints(MemSource((0..=255).collect()), Mutex::default()));
        assert_eq!(src.len(), 256);
        let mut b = [0u8; 3];
        src.read_at(10, &mut b).unwrap();
        assert_eq!(b, [10, 11, 12]);
        assert!(src.read_at(250, &mut [0u8; 10]).is_err());
        src.will_need(0, 100);
        src.will_need(100, 100);
        src.will_need(200, 50);
        src.will_need(250, 50);
        let w = RA_WINDOW as usize;
        assert_eq!(
            *src.inner().1.lock().unwrap(),
            [(0, 100), (100, 100), (200, 50 + w), (250, 0)]
        );
    }
}
