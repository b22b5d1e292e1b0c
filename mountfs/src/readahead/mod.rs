//! Readahead: every decision to read before being asked, in one place.
//!
//! The formats say what there is to read ahead ([`Image::prefetch`] for a
//! byte range of a file, [`Image::shared_unit`] / [`Image::prefetch_unit`]
//! for units shared between files, [`ImageSource::will_need`] for a range of
//! the image file); this module decides when, how far, and what was handed
//! out already. Three patterns are detected, at two levels.
//!
//! **Sequential reads of one file** ([`files`]). A read from offset 0, or
//! one that starts where the previous read of the same file ended, is
//! sequential (whole-file reads are what datasets and imports do; a random
//! reader rarely starts at offset 0 twice). The window is the mount's
//! readahead distance past the end of that read (`ServeOptions::readahead`,
//! 4 MiB for `packfs mount`: 32 blocks at the default 128 KiB, 16 chunks
//! of a large ZIP member), handed out only once it has grown by more than a
//! block and each byte once per file (a per-file high-water mark); a short
//! read is the end of the file and schedules nothing. The state is
//! two atomics on the prepared file ([`TrackedFile`]), so a file read in
//! several requests keeps it across requests.
//!
//! **Image-order steps between shared units** ([`units`]). Small files
//! share storage units (SquashFS fragment blocks) laid out in the order the
//! packer walked the tree, so a reader going through the tree in order moves
//! from unit `u` to `u + 1`. On such a step, seen at the first read (offset
//! 0) of a file, the next units are decoded in the background, on the other
//! cores, while the reader is busy with the files of unit `u`: without this,
//! every unit's decompression sits on the request path of the first file
//! that needs it. The window is the readahead distance in blocks, clamped to
//! 2..=16 units. Random readers rarely step by exactly one, and a false
//! start costs at most a window of decodes. One image-wide high-water mark
//! keeps consecutive steps from handing out the same units twice; it is
//! ignored when it does not overlap the new window, so a second reader lower
//! in the image gets its own window. Wrappers forward the unit hooks
//! (`AnyImage` to its format, `UnionImage` to the shard, with the shard
//! number above the shard's unit numbers).
//!
//! **Sequential streams over image offsets** ([`streams`]). Below the
//! decoders: the readers hint each block of the image before touching it
//! ([`ImageSource::will_need`]). [`StreamReadahead`] wraps the image source
//! and widens hints that continue one of 8 streams (within 1 MiB of its end)
//! to run 4 MiB ahead once the stream has been continued twice, issued half a
//! window at a time; a hint far from every stream is passed on exactly. It is applied where images are opened
//! (`open::Opener`); the sources themselves advise exactly what they
//! are asked (`posix_fadvise` for the default `pread` source, `madvise` for
//! [`MmapSource`]). The window sizes suit the map, where the kernel's own
//! sequential readahead never starts; with `pread` the kernel's per-file
//! readahead runs as well, so the two may overlap on sequential passes
//! (docs/benchmarks/reads.md): retuning them for `pread` is open work.
//!
//! **Where the work runs.** File windows and unit steps are decoded on a
//! small blocking worker pool ([`pool`]; as many threads as the mount has
//! session threads, 1 to 4), into the shared `BlockCache`, whose
//! single-flight decode makes a reader that gets there first wait for the
//! same decode instead of repeating it; errors are left for the read that
//! needs the data (raw blocks and stored members only get a `will_need`
//! hint). With a readahead of 0 or no threads (`packfs inspect`,
//! most tests) there is no pool and nothing is scheduled. Stream hints run
//! inline: one `madvise(MADV_WILLNEED)`, the I/O itself is the kernel's.
//!
//! **What is measured.** Cache misses (`BlockCache::stats`): the fs-level
//! tests (`tests/suite/reader_core.rs`) count the blocks decoded behind a reader's
//! back: a file's first read or a step by one unit decodes the window
//! ahead, a jump nothing beyond what it reads. Image reads reaching storage
//! (`CountingSource`, `packfs bench --emulate-latency`): stream readahead
//! pays off where every image read costs a round trip (a parallel or object
//! store), and costs nothing measurable on a local disk (figures in
//! docs/benchmarks/reads.md). The pool is not rayon (see [`pool`]).
//!
//! [`Image::prefetch`]: crate::image::Image::prefetch
//! [`Image::shared_unit`]: crate::image::Image::shared_unit
//! [`Image::prefetch_unit`]: crate::image::Image::prefetch_unit
//! [`ImageSource::will_need`]: crate::source::ImageSource::will_need
//! [`MmapSource`]: crate::source::MmapSource

pub mod files;
pub mod pool;
pub mod streams;
pub mod units;

pub use files::TrackedFile;
pub use pool::Pool;
pub use streams::StreamReadahead;

use crate::image::Image;
use std::sync::Arc;

/// Readahead for one mounted image: per-file windows and image-order unit
/// steps, run on the prefetch pool.
pub struct Readahead<I: Image> {
    image: Arc<I>,
    /// How far ahead of a sequential reader to decode, in bytes (0 = off).
    bytes: u64,
    pool: Option<Pool>,
    units: units::UnitSteps,
}

impl<I: Image> Readahead<I> {
    /// `bytes` ahead of sequential readers, decoded by `threads` workers
    /// (none, and no readahead, when either is 0).
    pub fn new(image: Arc<I>, bytes: u64, threads: usize) -> Self {
        let pool = (bytes > 0 && threads > 0)
            .then(|| Pool::new(threads, "packfs-prefetch").ok())
            .flatten();
        Readahead {
            image,
            bytes,
            pool,
            units: units::UnitSteps::new(),
        }
    }

    /// The readahead distance in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Called after each successful read of `file`: `got` bytes at `offset`
    /// for a request of `asked`.
    pub fn after_read(
        &self,
        file: &Arc<TrackedFile<I::Handle>>,
        offset: u64,
        asked: u32,
        got: usize,
    ) {
        let end = offset + got as u64;
        let sequential = file.advance(offset, end);
        // A short read is the end of the file: nothing after it to fetch.
        if sequential && got == asked as usize {
            self.file_window(file, end);
        }
        if offset == 0 {
            self.follow_units(file);
        }
    }

    /// Hands the window past `from` to the pool, if not handed out already.
    fn file_window(&self, file: &Arc<TrackedFile<I::Handle>>, from: u64) {
        let Some(pool) = &self.pool else {
            return;
        };
        let block = self.image.block_size() as u64;
        let Some((offset, len)) = file.claim(from, self.bytes, block) else {
            return;
        };
        let (image, file) = (self.image.clone(), file.clone());
        pool.spawn(move || image.prefetch(&file.handle, offset, len));
    }

    /// Image-order readahead on a step to the next shared unit.
    fn follow_units(&self, file: &TrackedFile<I::Handle>) {
        let (Some(pool), Some(unit)) = (&self.pool, self.image.shared_unit(&file.handle)) else {
            return;
        };
        let window = units::window(self.bytes, self.image.block_size());
        let Some(ahead) = self.units.step(unit, window) else {
            return;
        };
        for u in ahead {
            let image = self.image.clone();
            pool.spawn(move || image.prefetch_unit(u));
        }
    }
}
