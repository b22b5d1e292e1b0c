//! The I/O boundary: everything the readers know of the image file goes
//! through [`ImageSource`], a byte-range view. Production uses a read-only
//! memory map; tests plug in in-memory, failing or counting sources.
//!
//! Invariant: `slice(off, len)` returns exactly `len` bytes or an error; it
//! never returns a short slice, so parsers can index the result freely.

use crate::error::{FsError, Result};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub trait ImageSource: Send + Sync {
    /// Image length in bytes.
    fn len(&self) -> u64;
    /// The bytes `off..off+len`, or `FsError::Corrupt` when out of range.
    fn slice(&self, off: u64, len: usize) -> Result<&[u8]>;
    /// Hint that `off..off+len` will be read soon (readahead). Default: nothing.
    fn will_need(&self, _off: u64, _len: usize) {}
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn range_check(total: u64, off: u64, len: usize) -> Result<(usize, usize)> {
    let end = off
        .checked_add(len as u64)
        .filter(|&e| e <= total)
        .ok_or_else(|| {
            FsError::corrupt(format!(
                "read of {len} bytes at offset {off} runs past the end of the image ({total} bytes)"
            ))
        })?;
    Ok((off as usize, end as usize))
}

/// The image file mapped read-only. The image must not change while mapped
/// (it is a read-only artefact; truncating it under a mount is undefined).
pub struct MmapSource {
    map: memmap2::Mmap,
    streams: std::sync::Mutex<Streams>,
}

/// Sequential streams through the image, for readahead on the map.
///
/// The readers hint each block before touching it (`will_need`), and a
/// hinted range is read exactly as hinted: the kernel's sequential
/// readahead, which a `pread` loop gets for free, never starts, so a
/// sequential pass over the image costs one storage read per block. Here a
/// hint that starts near where an earlier one ended continues that stream,
/// and the stream's hints run [`RA_WINDOW`] ahead of it, issued half a window
/// at a time. A few streams are tracked because several readers (threads,
/// or the prefetcher running ahead of a reader) walk different parts of the
/// image at once; a hint far from every stream is advised exactly, so random
/// readers read no more than before. Measured with `packfs bench
/// --emulate-latency 500,100` on the Linux tree (every image read costs a
/// round trip, as on Lustre): a cold sequential pass went from 10,870 image
/// reads and 10.9 s to 2,100 reads and 7.7 s, a 4-thread shuffled pass from
/// 10,790 reads and 5.4 s to 6,990 and 4.9 s; on the local disk no change
/// beyond the noise (docs/BENCHMARKS.md).
#[derive(Default)]
struct Streams {
    /// (end of the last hinted range, end of what was advised ahead).
    at: [(u64, u64); RA_STREAMS],
    /// Next slot to recycle for a new stream.
    victim: usize,
}

const RA_STREAMS: usize = 8;
const RA_WINDOW: u64 = 4 << 20;
/// How far from a stream's end a hint may start and still continue it:
/// readers skip blocks other readers took, and fragment blocks sit between
/// data blocks.
const RA_SLACK: u64 = 1 << 20;

impl Streams {
    /// Records a hint for `off..end`; returns the range to advise (empty
    /// when it is covered already).
    fn hint(&mut self, off: u64, end: u64) -> (u64, u64) {
        let found = self
            .at
            .iter()
            .position(|&(next, _)| next != 0 && off + RA_SLACK >= next && off <= next + RA_SLACK);
        let Some(i) = found else {
            let v = self.victim;
            self.victim = (v + 1) % RA_STREAMS;
            self.at[v] = (end, end);
            return (off, end);
        };
        let (next, advised) = self.at[i];
        if advised >= end + RA_WINDOW / 2 {
            self.at[i].0 = end.max(next);
            return (off, off);
        }
        let to = end + RA_WINDOW;
        self.at[i] = (end.max(next), to);
        (off.max(advised), to)
    }
}

impl MmapSource {
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| FsError::io(path.display(), e))?;
        let len = file
            .metadata()
            .map_err(|e| FsError::io(path.display(), e))?
            .len();
        if len == 0 {
            return Err(FsError::corrupt(format!("{}: empty file", path.display())));
        }
        // SAFETY: the mapping is read-only and private to this process; the
        // documented contract is that images are not modified while in use.
        let map =
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| FsError::io(path.display(), e))?;
        Ok(MmapSource {
            map,
            streams: Default::default(),
        })
    }
}

impl ImageSource for MmapSource {
    fn len(&self) -> u64 {
        self.map.len() as u64
    }
    fn slice(&self, off: u64, len: usize) -> Result<&[u8]> {
        let (s, e) = range_check(self.len(), off, len)?;
        Ok(&self.map[s..e])
    }
    fn will_need(&self, off: u64, len: usize) {
        let (off, to) = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hint(off, off + len as u64);
        let page = 4096usize;
        let start = (off as usize) & !(page - 1);
        let end = (to as usize).min(self.map.len());
        if start < end {
            let _ = self
                .map
                .advise_range(memmap2::Advice::WillNeed, start, end - start);
        }
    }
}

/// An image held in memory (tests, fuzzing).
pub struct MemSource(pub Vec<u8>);

impl ImageSource for MemSource {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn slice(&self, off: u64, len: usize) -> Result<&[u8]> {
        let (s, e) = range_check(self.len(), off, len)?;
        Ok(&self.0[s..e])
    }
}

/// Counts the reads and bytes that reach the inner source: what a parallel
/// filesystem would see from a mount (used by tests and `packfs bench`).
pub struct CountingSource<S> {
    pub inner: S,
    pub reads: AtomicU64,
    pub bytes: AtomicU64,
}

impl<S: ImageSource> CountingSource<S> {
    pub fn new(inner: S) -> Self {
        CountingSource {
            inner,
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
}

impl<S: ImageSource> ImageSource for CountingSource<S> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn slice(&self, off: u64, len: usize) -> Result<&[u8]> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.inner.slice(off, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_hints_run_a_window_ahead_and_random_ones_do_not() {
        let mut s = Streams::default();
        // A new stream: just the range.
        assert_eq!(s.hint(0, 100), (0, 100));
        // A sequential reader of 128 KiB blocks over 64 MiB: the advice
        // always covers at least half a window past the block, in few calls.
        let (bs, mut frontier, mut calls) = (128u64 << 10, 100u64, 0);
        let mut off = 100;
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
}
