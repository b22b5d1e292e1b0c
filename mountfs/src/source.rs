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
///
/// Its readahead hints advise exactly the range asked for; widening them
/// along sequential streams is [`crate::readahead::StreamReadahead`]'s job,
/// which wraps the map wherever an image is opened for mounting.
pub struct MmapSource {
    map: memmap2::Mmap,
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
        Ok(MmapSource { map })
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
    /// Advises `off..off+len`, from the start of the page holding `off`.
    fn will_need(&self, off: u64, len: usize) {
        let page = 4096usize;
        let start = (off as usize) & !(page - 1);
        let end = ((off + len as u64) as usize).min(self.map.len());
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
