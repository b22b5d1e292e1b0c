//! packfs's own `/dev/fuse` threads, for kernels without FUSE over io_uring
//! (or with it switched off), that spin for a bounded time before they
//! sleep. Requests are decoded and answered by `super::dispatch`, as the
//! io_uring queues do; `fuser` only mounts and answers INIT.
//!
//! Why not `fuser`'s threads with a spin added: every thread blocked in a
//! read of `/dev/fuse` is a kernel waiter, and the kernel wakes one for
//! each request it queues, whether or not another thread is spinning for
//! it, so the spin would save nothing and the woken thread would still
//! cost a wakeup (a vCPU halt and IPI on this kind of VM). Here at most one
//! thread, the *leader*, waits on the device: it reads without blocking for
//! up to `spin`, then sleeps in `poll(2)`. The others park in user space,
//! where the kernel does not see them. A thread that has answered a request
//! reads again without blocking: a request already waiting (a backlog)
//! unparks one more thread, so threads join as load grows; one that finds
//! nothing becomes the leader if there is none, else parks. While another
//! thread is answering, the leader does not spin, and when it takes a
//! request it unparks a successor, so a busy mount behaves like `fuser`'s
//! threads and only a mount with one request at a time spins.
//!
//! Invariant: a thread that is not parked always comes back to read, so
//! requests cannot wait while every thread is parked (a thread parks only
//! while another one leads, and the leader reads again after answering).
//! A request queued while the leader answers the previous one waits for
//! that answer unless a backlog unparked a helper: the price of not having
//! a second waiter for the kernel to wake. That price is why these threads
//! are not the default (`mount --dev-spin 0`, `fuser`'s threads): a request
//! that blocks on slow storage (a stalled remote server, seconds) holds up
//! the one queued behind it, where `fuser`'s threads answer both at once.

use super::abi::*;
use super::dispatch::{dispatch, refused, Access};
use super::Shared;
use crate::fs::Image;
use crate::fuse::ops::Ops;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `FUSE_DEV_IOC_CLONE`, `_IOR(229, 0, uint32_t)`: attaches a new
/// `/dev/fuse` descriptor to the connection of another.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// The running threads of one mount.
pub struct Threads {
    done: mpsc::Receiver<()>,
    threads: usize,
}

impl Threads {
    /// Returns when every thread has ended (they end when the connection
    /// goes: unmount, or `fusermount -u`).
    pub fn wait(self) {
        for _ in 0..self.threads {
            if self.done.recv().is_err() {
                return;
            }
        }
    }
}

/// Starts `threads` threads serving the connection of `dev` (after INIT),
/// each on its own non-blocking clone of it.
pub fn start<I: Image>(
    dev: BorrowedFd<'_>,
    threads: usize,
    spin: Duration,
    ops: Arc<Ops<I>>,
    shared: Arc<Shared>,
    access: Option<Access>,
) -> io::Result<Threads> {
    // The kernel refuses a read into a buffer that could not hold a WRITE
    // of max_write (fs/fuse/dev.c, fuse_dev_do_read).
    let request = (super::MAX_REQUEST as usize + IN_HEADER + 40).max(8192);
    let answer = OUT_HEADER + super::largest_answer(&shared);
    let baton = Arc::new(Baton::default());
    let (done_tx, done_rx) = mpsc::channel();
    let threads = threads.max(1);
    for i in 0..threads {
        let fd = nonblocking_dev(dev)?;
        let (ops, baton, done) = (ops.clone(), baton.clone(), done_tx.clone());
        std::thread::Builder::new()
            .name(format!("fuse-dev-{i}"))
            .spawn(move || {
                let mut t = Thread {
                    fd,
                    request: vec![0; request],
                    answer: vec![0; answer],
                    ops,
                    access,
                    baton,
                    spin,
                };
                t.serve();
                let _ = done.send(());
            })?;
    }
    shared
        .dev_spin_us
        .store(spin.as_micros().max(1) as u64, Ordering::Relaxed);
    log::debug!("FUSE /dev/fuse: {threads} threads of packfs, spin {spin:?}");
    Ok(Threads {
        done: done_rx,
        threads,
    })
}

/// A non-blocking descriptor on the connection of `dev`: a clone of its
/// own, or where `/dev/fuse` cannot be opened by this process (a mount
/// whose descriptor came from a setuid `fusermount3`) a duplicate of `dev`
/// itself. Duplicates share one file, and so its non-blocking flag; nothing
/// else reads `dev` once these threads serve.
fn nonblocking_dev(dev: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let fd = match clone_dev(dev) {
        Ok(fd) => return Ok(fd),
        Err(e) => {
            log::debug!("cloning the /dev/fuse descriptor: {e}; sharing it");
            dev.try_clone_to_owned()?
        }
    };
    // SAFETY: F_GETFL/F_SETFL on a descriptor this function owns.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// A non-blocking descriptor of its own on the connection of `dev`.
fn clone_dev(dev: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: a plain open(2) of a NUL-terminated path; the result is
    // checked and owned at once.
    let fd = unsafe {
        libc::open(
            c"/dev/fuse".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut source = dev.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 from a valid pointer.
    if unsafe { libc::ioctl(fd.as_raw_fd(), FUSE_DEV_IOC_CLONE as _, &mut source) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// What a read of the device gave.
enum Got {
    Request(usize),
    Nothing,
    /// The connection is gone (unmounted), or the device failed.
    Gone,
}

fn read_once(fd: &OwnedFd, buf: &mut [u8]) -> Got {
    loop {
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Got::Request(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Got::Nothing,
            // A request interrupted while it was being read; a signal.
            Some(libc::ENOENT) | Some(libc::EINTR) => continue,
            Some(libc::ENODEV) => return Got::Gone,
            _ => {
                log::error!("reading /dev/fuse: {e}");
                return Got::Gone;
            }
        }
    }
}

/// Reads without blocking for up to `spin`, while no other thread is
/// answering, then sleeps until the device has a request: its length, or
/// `None` when the connection is gone.
/// Under concurrent load the CPU a spin would burn belongs to the callers,
/// and their next requests come anyway, so a busy mount does not spin.
fn lead(fd: &OwnedFd, buf: &mut [u8], spin: Duration, busy: &AtomicUsize) -> Option<usize> {
    let until = Instant::now() + spin;
    loop {
        match read_once(fd, buf) {
            Got::Request(n) => return Some(n),
            Got::Gone => return None,
            Got::Nothing if busy.load(Ordering::Relaxed) == 0 && Instant::now() < until => {
                std::hint::spin_loop()
            }
            Got::Nothing => break,
        }
    }
    loop {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd. EINTR and spurious wakeups read again.
        unsafe { libc::poll(&mut p, 1, -1) };
        match read_once(fd, buf) {
            Got::Request(n) => return Some(n),
            Got::Gone => return None,
            Got::Nothing => continue,
        }
    }
}

/// Who waits on the device, and who is parked.
#[derive(Default)]
struct Baton {
    leader: AtomicBool,
    /// Threads answering a request.
    busy: AtomicUsize,
    /// Parked threads, read without the lock to skip it when none are.
    parked: AtomicUsize,
    state: Mutex<Parked>,
    wake: Condvar,
}

#[derive(Default)]
struct Parked {
    /// Unparks granted and not yet taken.
    tokens: usize,
    gone: bool,
}

impl Baton {
    fn try_lead(&self) -> bool {
        self.leader
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Parks until unparked (true) or the connection is gone (false). A
    /// thread that finds no leader any more returns at once to read.
    fn park(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.parked.fetch_add(1, Ordering::AcqRel);
        // Re-checked under the lock: a leader that gave up leading before
        // this thread parked would otherwise leave it asleep behind a
        // request nobody waits for.
        while s.tokens == 0 && !s.gone && self.leader.load(Ordering::Acquire) {
            s = self.wake.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        self.parked.fetch_sub(1, Ordering::AcqRel);
        if s.tokens > 0 {
            s.tokens -= 1;
        }
        !s.gone
    }

    /// A backlog: one more thread to help, if one is parked.
    fn unpark_one(&self) {
        if self.parked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.tokens < self.parked.load(Ordering::Acquire) {
            s.tokens += 1;
            self.wake.notify_one();
        }
    }

    fn gone(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.gone = true;
        self.wake.notify_all();
    }
}

struct Thread<I: Image> {
    fd: OwnedFd,
    request: Vec<u8>,
    /// `fuse_out_header`, then the answer's body.
    answer: Vec<u8>,
    ops: Arc<Ops<I>>,
    access: Option<Access>,
    baton: Arc<Baton>,
    spin: Duration,
}

impl<I: Image> Thread<I> {
    fn serve(&mut self) {
        loop {
            let got = match read_once(&self.fd, &mut self.request) {
                Got::Request(n) => {
                    self.baton.unpark_one();
                    Some(n)
                }
                Got::Nothing if self.baton.try_lead() => {
                    let got = lead(&self.fd, &mut self.request, self.spin, &self.baton.busy);
                    self.baton.leader.store(false, Ordering::Release);
                    // Others are answering too: someone should wait on the
                    // device while this thread answers, as `fuser`'s
                    // blocked threads would.
                    if self.baton.busy.load(Ordering::Relaxed) > 0 {
                        self.baton.unpark_one();
                    }
                    got
                }
                Got::Nothing => {
                    if !self.baton.park() {
                        return;
                    }
                    continue;
                }
                Got::Gone => None,
            };
            let Some(n) = got else {
                self.baton.gone();
                return;
            };
            self.baton.busy.fetch_add(1, Ordering::Relaxed);
            self.answer(n);
            self.baton.busy.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Answers the request in the first `len` bytes of `self.request`.
    fn answer(&mut self, len: usize) {
        let req = &self.request[..len];
        if req.len() < IN_HEADER {
            return;
        }
        let h = in_header(req);
        // Requests the kernel expects no answer to.
        if matches!(h.opcode, FORGET | BATCH_FORGET | INTERRUPT) {
            return;
        }
        let rest = &req[IN_HEADER..];
        let op_len = op_in_len(h.opcode).min(rest.len());
        let mut op_in = [0u8; 128];
        op_in[..op_len].copy_from_slice(&rest[..op_len]);
        let payload = &rest[op_len..];
        let body = &mut self.answer[OUT_HEADER..];
        let in_len = payload.len().min(body.len());
        body[..in_len].copy_from_slice(&payload[..in_len]);
        let r = if h.opcode == DESTROY {
            Ok(0)
        } else if self.access.is_some_and(|a| refused(a, &h)) {
            Err(libc::EACCES)
        } else {
            dispatch(&self.ops, &h, &op_in, body, in_len)
        };
        let (error, n) = match r {
            Ok(n) => (0, n),
            Err(errno) => (-errno, 0),
        };
        put_out_header(&mut self.answer, n, error, h.unique);
        let out = &self.answer[..OUT_HEADER + n];
        // SAFETY: writes out.len() bytes from out.
        let w = unsafe { libc::write(self.fd.as_raw_fd(), out.as_ptr().cast(), out.len()) };
        if w < 0 {
            let e = io::Error::last_os_error();
            // ENOENT: the request was interrupted and is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                log::warn!("answering FUSE request {}: {e}", h.unique);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Where no clone can be made (here: the ioctl refuses a pipe; on a
    /// machine where this process cannot open /dev/fuse, the open fails),
    /// the threads share the descriptor, made non-blocking: a read of an
    /// empty one says so at once instead of sleeping.
    #[test]
    fn a_descriptor_that_cannot_be_cloned_is_shared_and_made_nonblocking() {
        let mut ends = [0; 2];
        // SAFETY: pipe(2) fills two descriptors, owned at once below.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        let fd = nonblocking_dev(r.as_fd()).unwrap();
        // SAFETY: F_GETFL on an owned descriptor.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0);
        assert!(matches!(read_once(&fd, &mut [0; 64]), Got::Nothing));
    }
}
