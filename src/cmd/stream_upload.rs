//! `packfs pack -o s3://...` of a SquashFS image: the image is sent while
//! it is written, so neither the whole image nor its upload waits for the
//! other, and local disk holds only what is not final yet.
//!
//! The packer writes the image into a temporary file and tells, through a
//! [`Follow`], how many of its bytes are final (everything before the file
//! it is writing, whose blocks it may still undo as a duplicate). A thread
//! sends each 16 MiB part that became final, numbered by its place in the
//! image, and punches it out of the file (the file keeps its size; its
//! blocks are freed). Part 0 holds the superblock, written last: it is kept
//! and sent at the end with whatever followed the last final part. So the
//! local disk holds part 0, the file in progress and the parts in the air,
//! not the image. Where the filesystem cannot punch holes the file keeps
//! its bytes (the old cost: room for one image), and the upload still
//! overlaps the pack.

use packer::follow::Follow;
use packfs_objstore::parts::NumberedUpload;
use packfs_objstore::RemoteError;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of a part sent while the image is written.
const PART: u64 = 16 << 20;
/// S3 allows 10,000 parts: parts streamed stop short of it, so that what
/// remains at the end can still go in larger ones.
const MAX_STREAMED: u64 = 9_000;
/// How often the follower looks at what became final.
const POLL: Duration = Duration::from_millis(100);

/// The follower thread's state: the upload, and the next part to send.
pub struct Streamer {
    up: NumberedUpload,
    next: u64,
    punch: bool,
}

impl Streamer {
    pub fn new(up: NumberedUpload) -> Self {
        // Part 0 is sent last.
        Streamer {
            up,
            next: 1,
            punch: true,
        }
    }

    /// Sends parts as they become final until `done` is raised (the pack
    /// ended, well or not) or `cancel`; returns the streamer to finish with.
    pub fn follow(
        mut self,
        follow: &Follow,
        done: &AtomicBool,
        cancel: &AtomicBool,
    ) -> Result<Streamer, RemoteError> {
        loop {
            if cancel.load(Ordering::SeqCst) {
                return Err(RemoteError::Interrupted);
            }
            let finished = done.load(Ordering::SeqCst);
            if let Some(file) = follow.file() {
                let fin = follow.final_len();
                while self.next < MAX_STREAMED && (self.next + 1) * PART <= fin {
                    self.send(file, self.next * PART, PART, cancel)?;
                    self.next += 1;
                }
            }
            if finished {
                return Ok(self);
            }
            std::thread::sleep(POLL);
        }
    }

    fn send(
        &mut self,
        file: &File,
        at: u64,
        len: u64,
        cancel: &AtomicBool,
    ) -> Result<(), RemoteError> {
        self.up
            .put((at / PART) as usize, read(file, at, len)?, Some(cancel))?;
        if self.punch && at > 0 {
            self.punch = punch_hole(file, at, len);
        }
        Ok(())
    }

    /// The pack is done and the image whole in `file` (`len` bytes): sends
    /// what the follower has not (the rest in parts of at least 16 MiB, and
    /// part 0 last) and completes the upload. Returns the number of parts.
    pub fn finish(
        mut self,
        file: &File,
        len: u64,
        cancel: &AtomicBool,
    ) -> Result<usize, RemoteError> {
        if len > PART {
            // Parts 1 to next - 1 were sent while the image was written.
            let mut at = self.next * PART;
            let left = len - at.min(len);
            // Within S3's 10,000 parts, whatever the image's size.
            let room = 9_999 - self.next;
            let part = PART.max(left.div_ceil(room).div_ceil(1 << 20) << 20);
            let mut idx = self.next;
            while at < len {
                let n = part.min(len - at);
                self.up
                    .put(idx as usize, read(file, at, n)?, Some(cancel))?;
                at += n;
                idx += 1;
            }
        }
        self.up
            .put(0, read(file, 0, len.min(PART))?, Some(cancel))?;
        self.up.complete(Some(cancel))
    }
}

/// Runs `pack`, which writes the image into the file `follow` is told of,
/// while a thread sends the parts that become final through `up`. An upload
/// that fails stops the pack (through `cancel`). Returns the pack's result
/// and the follower's: the streamer to finish with (see [`send_rest`]), or
/// the upload's error.
pub fn pack_while_sending<T>(
    up: NumberedUpload,
    follow: &Follow,
    cancel: &AtomicBool,
    pack: impl FnOnce() -> Result<T, packer::PackError>,
) -> (Result<T, packer::PackError>, Result<Streamer, RemoteError>) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = Streamer::new(up).follow(follow, &done, cancel);
            if matches!(&r, Err(e) if !matches!(e, RemoteError::Interrupted)) {
                cancel.store(true, Ordering::SeqCst);
            }
            r
        });
        // Raised however the pack ends, a panic included: the
        // follower must not wait for it forever.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let guard = Done(&done);
        let packed = pack();
        drop(guard);
        let st = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        (packed, st)
    })
}

/// Sends what the follower has not of the image packed at `local` and
/// completes the upload (see [`Streamer::finish`]); says how it went,
/// timed from `started`, unless `quiet`. Returns the number of parts.
pub fn send_rest(
    st: Streamer,
    local: &Path,
    cancel: &AtomicBool,
    quiet: bool,
    started: Instant,
) -> Result<u64, RemoteError> {
    let file =
        File::open(local).map_err(|e| RemoteError::Config(format!("{}: {e}", local.display())))?;
    let len = file
        .metadata()
        .map_err(|e| RemoteError::Config(format!("{}: {e}", local.display())))?
        .len();
    let parts = st.finish(&file, len, cancel)?;
    if !quiet {
        say!(
            "uploaded in {parts} parts, sent while packing ({:.2} s in all)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(parts as u64)
}

/// `len` bytes of the image at `at`.
fn read(file: &File, at: u64, len: u64) -> Result<Vec<u8>, RemoteError> {
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, at)
        .map_err(|e| RemoteError::Config(format!("reading the image being sent: {e}")))?;
    Ok(buf)
}

/// Frees the file's blocks of `len` bytes at `at` (the file keeps its
/// size); false when the filesystem cannot.
fn punch_hole(file: &File, at: u64, len: u64) -> bool {
    // SAFETY: fallocate on a valid fd with in-range arguments has no
    // memory effects.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            at as libc::off_t,
            len as libc::off_t,
        )
    };
    if r != 0 {
        log::info!(
            "the filesystem of $TMPDIR cannot free the parts sent ({}): the image stays whole there until it is sent",
            std::io::Error::last_os_error()
        );
    }
    r == 0
}

/// Shares a [`Follow`] with the pack.
pub fn follow() -> Arc<Follow> {
    Arc::new(Follow::default())
}
