//! A minimal io_uring with 128-byte submission entries, over the raw
//! system calls: what one FUSE queue thread needs (submit `URING_CMD`
//! entries, wait for completions) and nothing else.
//!
//! The `io-uring` crate's `UringCmd80` cannot set `sqe->addr`/`sqe->len`,
//! which FUSE's REGISTER command uses for its pair of iovecs, so the
//! entries are written here byte for byte; with that done, the rest of a
//! ring (three `mmap`s and `io_uring_enter`) is small enough not to need a
//! dependency. Only one thread uses a ring: no locking, and the kernel is
//! the only other party (head/tail are read and written with the atomic
//! orderings the io_uring ABI prescribes).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

const IORING_SETUP_SQE128: u32 = 1 << 10;
const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_ENTER_GETEVENTS: u32 = 1;
/// `IORING_OP_URING_CMD`: a command for the file's driver (here FUSE).
pub const IORING_OP_URING_CMD: u8 = 46;
/// Bytes of one submission entry with `IORING_SETUP_SQE128`.
pub const SQE_BYTES: usize = 128;

/// `struct io_uring_params` (include/uapi/linux/io_uring.h).
#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: [u32; 10],
    cq_off: [u32; 10],
}

/// One mapped region, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(fd: RawFd, len: usize, offset: i64) -> io::Result<Map> {
        // SAFETY: a fresh shared mapping of the ring fd; the kernel checks
        // `len` and `offset` against the ring it set up.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The `u32` at byte `off`, as an atomic (ring head/tail/mask words).
    fn word(&self, off: u32) -> &AtomicU32 {
        assert!(off as usize + 4 <= self.len);
        // SAFETY: in bounds (checked), 4-byte aligned by the ABI, and
        // shared with the kernel, hence atomic access.
        unsafe { &*(self.ptr.add(off as usize) as *const AtomicU32) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the region mapped in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A completion: the entry's `user_data` and its result (`-errno` on error).
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub user_data: u64,
    pub res: i32,
}

pub struct Ring {
    fd: OwnedFd,
    sq: Map,
    cq: Map,
    sqes: Map,
    sq_entries: u32,
    sq_off: [u32; 10],
    cq_off: [u32; 10],
    /// Entries written but not yet handed to the kernel.
    pending: u32,
}

// SAFETY: the mappings belong to the ring alone; a ring is used by one
// thread at a time (it is moved into its queue thread).
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `entries` 128-byte submission entries.
    pub fn new(entries: u32) -> io::Result<Ring> {
        let mut p = Params {
            flags: IORING_SETUP_SQE128,
            ..Params::default()
        };
        // SAFETY: `p` is a valid `io_uring_params` the kernel fills in.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, &mut p as *mut Params) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor returned to us alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let (sq_off, cq_off) = (p.sq_off, p.cq_off);
        // sq_off: head, tail, ring_mask, ring_entries, flags, dropped, array.
        let sq_len = sq_off[6] as usize + p.sq_entries as usize * 4;
        // cq_off: head, tail, ring_mask, ring_entries, overflow, cqes.
        let cq_len = cq_off[5] as usize + p.cq_entries as usize * 16;
        let raw = fd.as_raw_fd();
        let sq = Map::new(raw, sq_len, IORING_OFF_SQ_RING)?;
        let cq = Map::new(raw, cq_len, IORING_OFF_CQ_RING)?;
        let sqes = Map::new(raw, p.sq_entries as usize * SQE_BYTES, IORING_OFF_SQES)?;
        Ok(Ring {
            fd,
            sq,
            cq,
            sqes,
            sq_entries: p.sq_entries,
            sq_off,
            cq_off,
            pending: 0,
        })
    }

    /// Queues one 128-byte entry (handed to the kernel by [`Ring::submit_and_wait`]).
    /// Callers never have more than `entries` in flight, so the queue
    /// cannot be full.
    pub fn push(&mut self, sqe: &[u8; SQE_BYTES]) {
        let mask = self.sq.word(self.sq_off[2]).load(Ordering::Relaxed);
        let tail = self.sq.word(self.sq_off[1]).load(Ordering::Relaxed);
        let head = self.sq.word(self.sq_off[0]).load(Ordering::Acquire);
        assert!(
            tail.wrapping_sub(head) < self.sq_entries,
            "submission queue full"
        );
        let idx = tail & mask;
        // SAFETY: `idx < sq_entries`, so the entry and the array slot lie in
        // their mappings; the kernel reads neither until the tail moves.
        unsafe {
            std::ptr::copy_nonoverlapping(
                sqe.as_ptr(),
                self.sqes.ptr.add(idx as usize * SQE_BYTES),
                SQE_BYTES,
            );
            let array = self.sq.ptr.add(self.sq_off[6] as usize) as *mut u32;
            *array.add(idx as usize) = idx;
        }
        self.sq
            .word(self.sq_off[1])
            .store(tail.wrapping_add(1), Ordering::Release);
        self.pending += 1;
    }

    /// Entries pushed and not yet submitted.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Submits what was pushed and waits until at least `wait` completions
    /// are there. EINTR is retried.
    pub fn submit_and_wait(&mut self, wait: u32) -> io::Result<()> {
        loop {
            let flags = if wait > 0 { IORING_ENTER_GETEVENTS } else { 0 };
            // SAFETY: plain system call on our ring; no signal mask.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    self.fd.as_raw_fd(),
                    self.pending,
                    wait,
                    flags,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            self.pending -= (r as u32).min(self.pending);
            if self.pending == 0 {
                return Ok(());
            }
        }
    }

    /// Takes the next completion, if one is there.
    pub fn next_completion(&mut self) -> Option<Completion> {
        let head = self.cq.word(self.cq_off[0]).load(Ordering::Relaxed);
        let tail = self.cq.word(self.cq_off[1]).load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let mask = self.cq.word(self.cq_off[2]).load(Ordering::Relaxed);
        let at = self.cq_off[5] as usize + (head & mask) as usize * 16;
        assert!(at + 16 <= self.cq.len);
        // SAFETY: in bounds (checked); the kernel wrote it before moving the tail.
        let c = unsafe {
            let p = self.cq.ptr.add(at);
            Completion {
                user_data: std::ptr::read_unaligned(p as *const u64),
                res: std::ptr::read_unaligned(p.add(8) as *const i32),
            }
        };
        self.cq
            .word(self.cq_off[0])
            .store(head.wrapping_add(1), Ordering::Release);
        Some(c)
    }
}

/// Whether this process may create an io_uring with 128-byte entries
/// (`kernel.io_uring_disabled`, seccomp and old kernels all say no here).
pub fn available() -> io::Result<()> {
    Ring::new(2).map(|_| ())
}
