//! The I/O boundary: everything the readers know of the image file goes
//! through [`ImageSource`], positional reads into the caller's buffer.
//! Production reads the file with `pread` ([`FileSource`]); a memory map
//! ([`MmapSource`]) is kept as an opt-in; tests plug in in-memory, failing
//! or counting sources, and a remote object can be one too.
//!
//! Why reads into buffers and not slices of a map: a mapped image turns
//! every storage fault into a signal. Truncate the image under a mount
//! (`cp new.sqfs img.sqfs` does, in place), or let a Lustre client be
//! evicted while a page is being faulted in, and the daemon dies of SIGBUS,
//! taking the whole mount with it. A failed or short `pread` is an error
//! value: the affected read gets EIO, with one log line naming the image and
//! the offset, and every other file keeps working. A trait that fills a
//! buffer also fits a source with latency (an object store), which a trait
//! lending slices of memory does not.
//!
//! Invariant: `read_at(off, buf)` fills all of `buf` or returns an error; a
//! short read is an error, never a partly filled buffer the caller trusts.

use crate::error::{FsError, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub trait ImageSource: Send + Sync {
    /// Image length in bytes (as found when the source was opened).
    fn len(&self) -> u64;
    /// Fills `buf` with the bytes at `off..off + buf.len()`. Out of range is
    /// `FsError::Corrupt` (the image points outside itself); a failed or
    /// short read of a range that should exist is `FsError::Io`.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()>;
    /// Hint that `off..off+len` will be read soon (readahead). Default: nothing.
    fn will_need(&self, _off: u64, _len: usize) {}
    /// Hint that all of `off..off+len` will be read soon, by a reader that
    /// knows it (a sampler's next group of samples): unlike
    /// [`ImageSource::will_need`], which names a block about to be read and
    /// which a source may serve narrowly, this asks for the whole span.
    /// A source told this stops guessing from then on: readahead that
    /// follows sequential streams is for readers that do not say what they
    /// will read, and a planned reader's regions follow each other in an
    /// order no stream detector can see, so its guesses would only fetch
    /// bytes no one reads. Default: `will_need`, which a local file
    /// already serves whole.
    fn will_read(&self, off: u64, len: usize) {
        self.will_need(off, len)
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `len` bytes at `off`, in a buffer from [`crate::buffers`] (give
    /// it back with `buffers::recycle`, or let a cached block own it).
    fn read_vec(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = crate::buffers::take_len(len);
        self.read_at(off, &mut v)?;
        Ok(v)
    }
    /// Which version of which file this source reads, for a source that
    /// reads an open file (`None` for any other).
    fn identity(&self) -> Option<FileIdentity> {
        None
    }
}

/// One version of one file, as `fstat` tells it: what is built from a
/// file's bytes may be reused for another opening of the file only while
/// all of these are the same. Any write to the file moves its change time,
/// which no one can set back; a replaced file has another inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileIdentity {
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Lets a shared source be used where an owned one is expected.
impl<S: ImageSource + ?Sized> ImageSource for std::sync::Arc<S> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_at(off, buf)
    }
    fn will_need(&self, off: u64, len: usize) {
        (**self).will_need(off, len)
    }
    fn will_read(&self, off: u64, len: usize) {
        (**self).will_read(off, len)
    }
    fn identity(&self) -> Option<FileIdentity> {
        (**self).identity()
    }
}

impl<S: ImageSource + ?Sized> ImageSource for Box<S> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_at(off, buf)
    }
    fn will_need(&self, off: u64, len: usize) {
        (**self).will_need(off, len)
    }
    fn will_read(&self, off: u64, len: usize) {
        (**self).will_read(off, len)
    }
    fn identity(&self) -> Option<FileIdentity> {
        (**self).identity()
    }
}

/// Checks `off..off+len` against the image length.
pub fn range_check(total: u64, off: u64, len: usize) -> Result<(usize, usize)> {
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

/// How an image file is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum IoMode {
    /// Positional reads (`pread`): storage faults are errors. The default.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(
            help = "Positional reads: a storage error or a truncated image is EIO for the files it affects, and the mount keeps serving the rest"
        )
    )]
    Pread,
    /// A read-only memory map: a storage fault or a truncated image kills
    /// the process with SIGBUS. Kept for comparison.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "A memory map: a storage error or a truncated image kills the daemon (SIGBUS). For comparison only"
        )
    )]
    Mmap,
}

/// Opens the image at `path` for reading with `mode`: the one place a
/// mount, `packfs inspect` and the benchmarks get an image source from.
pub fn open_image(path: &Path, mode: IoMode) -> Result<Box<dyn ImageSource>> {
    Ok(match mode {
        IoMode::Pread => Box::new(FileSource::open(path)?),
        IoMode::Mmap => Box::new(MmapSource::open(path)?),
    })
}

/// Opens the image file; a directory is refused here, by name, because
/// opening one succeeds and only its reads would fail.
/// The length of the image at `path`, a file or a block device.
pub fn image_len(path: &Path) -> std::io::Result<u64> {
    let f = File::open(path)?;
    let meta = f.metadata()?;
    len_of(&f, &meta)
}

/// A block device (a partition, a logical volume, a loop device holding an
/// image) has no length in its metadata: its end is where it is.
fn len_of(f: &File, meta: &std::fs::Metadata) -> std::io::Result<u64> {
    if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        std::io::Seek::seek(&mut &*f, std::io::SeekFrom::End(0))
    } else {
        Ok(meta.len())
    }
}

fn open_file(path: &Path) -> Result<(File, u64)> {
    // Before opening: opening a fifo waits for a writer, forever.
    if let Ok(m) = std::fs::metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        let what = if t.is_fifo() {
            Some("a pipe")
        } else if t.is_socket() {
            Some("a socket")
        } else if t.is_char_device() {
            Some("a character device")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(FsError::io(
                path.display(),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{what}, not a file: an image is read at any offset, so it must be a \
                         file or a block device"
                    ),
                ),
            ));
        }
    }
    let file = File::open(path).map_err(|e| FsError::io(path.display(), e))?;
    let meta = file
        .metadata()
        .map_err(|e| FsError::io(path.display(), e))?;
    if meta.is_dir() {
        return Err(FsError::io(
            path.display(),
            std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
        ));
    }
    let len = len_of(&file, &meta).map_err(|e| FsError::io(path.display(), e))?;
    if len == 0 {
        return Err(FsError::corrupt(format!("{}: empty file", path.display())));
    }
    Ok((file, len))
}

/// The image file read with `pread`. Its length is fixed at open: an image
/// that shrinks later gives short reads, which are I/O errors naming the
/// offset, and an image that is restored gives good reads again (nothing
/// remembers a failure).
pub struct FileSource {
    file: File,
    path: String,
    len: u64,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<Self> {
        let (file, len) = open_file(path)?;
        Ok(FileSource {
            file,
            path: path.display().to_string(),
            len,
        })
    }
}

impl ImageSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        range_check(self.len, off, buf.len())?;
        self.file.read_exact_at(buf, off).map_err(|e| {
            let e = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "short read of {} bytes at offset {off} (the image shrank since it was opened?)",
                        buf.len()
                    ),
                )
            } else {
                std::io::Error::new(
                    e.kind(),
                    format!("read of {} bytes at offset {off}: {e}", buf.len()),
                )
            };
            // Not logged here: the caller says it once (the FUSE edge logs
            // what it answers EIO for, the CLI prints it).
            FsError::io(&self.path, e)
        })
    }
    /// Asks the kernel to start reading `off..off+len`, widened to whole
    /// [`ADVICE_ALIGN`] units, into the page cache, so the `pread` that
    /// follows does not wait for the device.
    fn will_need(&self, off: u64, len: usize) {
        if len == 0 {
            return;
        }
        let (start, end) = advice_window(off, len, self.len);
        // SAFETY: posix_fadvise on a valid fd has no memory effects; it is
        // advisory and its result is ignored.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                start as libc::off_t,
                (end - start) as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }
    /// A regular file's only: a block device's node keeps its inode and
    /// times while the device (a loop device re-pointed) changes contents.
    fn identity(&self) -> Option<FileIdentity> {
        let m = self.file.metadata().ok()?;
        m.file_type().is_file().then(|| FileIdentity::of(&m))
    }
}

/// The unit `FileSource` advises in. A hint names one block, often a small
/// file's bytes inside a fragment block; advised exactly, a shuffled pass
/// over small files reads the image in many small device requests, where
/// the map's page faults read more around each block. Whole 128 KiB units
/// cut the device requests of such a pass to the map's speed or better
/// (docs/benchmarks/reads.md) while reading at most 128 KiB beyond a hint: a
/// random reader on a network filesystem pays for every byte read ahead,
/// so wider units are not worth it.
pub const ADVICE_ALIGN: u64 = 128 << 10;

/// `off..off+len` widened to whole [`ADVICE_ALIGN`] units, within `0..image_len`.
fn advice_window(off: u64, len: usize, image_len: u64) -> (u64, u64) {
    let start = off / ADVICE_ALIGN * ADVICE_ALIGN;
    let end = (off + len as u64).div_ceil(ADVICE_ALIGN) * ADVICE_ALIGN;
    (start.min(image_len), end.min(image_len))
}

/// The image file mapped read-only (`--io mmap`). The image must not change
/// or fail while mapped: a truncated image or a storage error while a page
/// is faulted in is SIGBUS, which ends the daemon (see the module doc).
pub struct MmapSource {
    map: memmap2::Mmap,
}

impl MmapSource {
    pub fn open(path: &Path) -> Result<Self> {
        let (file, len) = open_file(path)?;
        let len = usize::try_from(len)
            .map_err(|_| FsError::Unsupported(format!("{}: too large to map", path.display())))?;
        // SAFETY: the mapping is read-only and private to this process; the
        // documented contract of `--io mmap` is that images are not
        // modified while in use.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file) }
            .map_err(|e| FsError::io(path.display(), e))?;
        Ok(MmapSource { map })
    }
}

impl ImageSource for MmapSource {
    fn len(&self) -> u64 {
        self.map.len() as u64
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let (s, e) = range_check(self.len(), off, buf.len())?;
        buf.copy_from_slice(&self.map[s..e]);
        Ok(())
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
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let (s, e) = range_check(self.len(), off, buf.len())?;
        buf.copy_from_slice(&self.0[s..e]);
        Ok(())
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
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_at(off, buf)
    }
    fn will_need(&self, off: u64, len: usize) {
        self.inner.will_need(off, len)
    }
    fn will_read(&self, off: u64, len: usize) {
        self.inner.will_read(off, len)
    }
    fn identity(&self) -> Option<FileIdentity> {
        self.inner.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_is_widened_to_whole_units_within_the_image() {
        const A: u64 = ADVICE_ALIGN;
        // A small read inside one unit: that unit.
        assert_eq!(advice_window(A + 100, 18_000, 10 * A), (A, 2 * A));
        // Across a boundary: both units.
        assert_eq!(advice_window(2 * A - 10, 20, 10 * A), (A, 3 * A));
        // Aligned already: unchanged.
        assert_eq!(advice_window(3 * A, A as usize, 10 * A), (3 * A, 4 * A));
        // Never past the end of the image.
        assert_eq!(advice_window(A + 5, 10, A + 100), (A, A + 100));
    }
}
