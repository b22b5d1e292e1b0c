//! FUSE over io_uring: a queue per possible CPU, served by threads pinned
//! to it, each with its own ring holding registered entries (`ENTRIES`
//! for a queue's only thread, one each where a queue has several: see
//! [`start`]). An entry
//! is a header buffer (`struct fuse_uring_req_header`) and a payload buffer
//! the size of the largest request; the kernel fills one with a request and
//! completes its command, the thread answers in the same buffers and one
//! `COMMIT_AND_FETCH` both sends the answer and offers the entry for the
//! next request. The kernel hands a request to the queue of the CPU its
//! caller runs on, so it is served there without a cross-CPU wakeup.
//!
//! FORGET and INTERRUPT stay on `/dev/fuse`, read by `fuser`'s threads.
//! Requests are decoded and answered by `super::dispatch`, through the
//! same [`Ops`] as the `/dev/fuse` transports.

mod sched_idle;

use super::abi::{self, *};
pub use super::dispatch::Access;
use super::dispatch::{dispatch, refused};
use super::ring::{Ring, SQE_BYTES};
use super::{Served, Shared};
use crate::fs::Image;
use crate::fuse::ops::Ops;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Registered entries per queue: one being answered while the kernel fills
/// the others, so a queue thread never waits for the kernel to copy.
const ENTRIES: usize = 4;

/// The running queues of one mount.
pub struct Queues {
    done: mpsc::Receiver<()>,
    threads: usize,
    windows: Option<Arc<sched_idle::Windows>>,
}

impl Drop for Queues {
    fn drop(&mut self) {
        if let Some(w) = &self.windows {
            w.stop();
        }
    }
}

impl Queues {
    /// Waits up to `limit` for the queue threads to end (they end when the
    /// kernel tears the ring down at unmount); a thread still in the kernel
    /// after that is left to the process exit.
    pub fn wait(self, limit: Duration) {
        let end = std::time::Instant::now() + limit;
        for _ in 0..self.threads {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if self.done.recv_timeout(left).is_err() {
                return;
            }
        }
    }
}

/// Threads per queue for a mount whose requests may wait on the network,
/// served by `threads` threads on `/dev/fuse`: together at least twice as
/// many, so that the queues serve at least as many requests at once as
/// those threads even when callers crowd on some CPUs, and never more per
/// queue than `threads` (the most callers one CPU can be expected to hold).
pub fn threads_per_queue(threads: usize, queues: usize) -> usize {
    let threads = threads.max(1);
    (2 * threads).div_ceil(queues.max(1)).clamp(1, threads)
}

/// Starts a queue for every possible CPU (`cpus`) on `dev` (the mount's
/// `/dev/fuse` descriptor, after INIT negotiated `FUSE_OVER_IO_URING`),
/// each served by `per_queue` threads, and returns once each thread has
/// registered its entries, or the first error.
///
/// One thread holds `ENTRIES` entries; several threads of one queue hold
/// one entry each. The kernel hands a request to an entry that is offered,
/// and a thread busy with a request offers none, so a request that waits
/// on slow storage holds up only its own thread, not the CPU's next
/// requests. With entries to spare, the kernel would hand those to the
/// busy thread too.
pub fn start<I: Image>(
    dev: &OwnedFd,
    cpus: &[usize],
    ops: Arc<Ops<I>>,
    shared: Arc<Shared>,
    access: Option<Access>,
    per_queue: usize,
) -> io::Result<Queues> {
    let per_queue = per_queue.max(1);
    let entries = if per_queue == 1 { ENTRIES } else { 1 };
    let threads = cpus.len() * per_queue;
    let payload = super::largest_answer(&shared);
    let wanted = std::env::var_os("PACKFS_URING_STAY").is_none_or(|v| v != "0");
    let windows = sched_idle::Windows::new(threads, cpus.len(), wanted);
    log::debug!(
        "FUSE io_uring queues: {per_queue} thread(s) each, keeping callers on their CPU: {}",
        windows.is_some()
    );
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    for (q, &cpu) in cpus.iter().enumerate() {
        for j in 0..per_queue {
            let dev = dev.try_clone()?;
            let stay = windows.clone().map(|w| Stay {
                windows: w,
                queue: q,
                thread: q * per_queue + j,
            });
            let (ops, shared, ready, done) = (
                ops.clone(),
                shared.clone(),
                ready_tx.clone(),
                done_tx.clone(),
            );
            let name = match per_queue {
                1 => format!("fuse-uring-{cpu}"),
                _ => format!("fuse-uring-{cpu}.{j}"),
            };
            std::thread::Builder::new().name(name).spawn(move || {
                let q = Queue::new(cpu, dev, entries, payload, ops, shared, access, stay);
                match q {
                    Ok(mut q) => {
                        let _ = ready.send(Ok(()));
                        drop(ready);
                        q.serve();
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                    }
                }
                let _ = done.send(());
            })?;
        }
    }
    drop(ready_tx);
    // Built first so that an error below also stops the windows' watchdog.
    let queues = Queues {
        done: done_rx,
        threads,
        windows,
    };
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("a FUSE io_uring queue thread died")),
        }
    }
    shared
        .queue_threads
        .store(per_queue as u64, Ordering::Relaxed);
    shared.set_served(Served::Uring);
    Ok(queues)
}

/// One entry's buffers. Boxed slices never move, so their addresses stay
/// valid for the kernel while the entry is registered.
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    /// `struct iovec[2]` for REGISTER, pointing at the two buffers.
    iov: Box<[libc::iovec; 2]>,
    live: bool,
}

/// A queue thread's place in the `SCHED_IDLE` windows: callers' hops are
/// counted by queue (CPU), windows by thread.
struct Stay {
    windows: Arc<sched_idle::Windows>,
    queue: usize,
    thread: usize,
}

struct Queue<I: Image> {
    qid: u16,
    dev: OwnedFd,
    ring: Ring,
    entries: Vec<Entry>,
    ops: Arc<Ops<I>>,
    shared: Arc<Shared>,
    access: Option<Access>,
    /// The `SCHED_IDLE` windows, when the process may use them (module
    /// `sched_idle`).
    stay: Option<Stay>,
    /// Callers of the answers queued since the last submission.
    callers: Vec<u32>,
    submissions: u32,
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays in bounds for
    // cpu < CPU_SETSIZE, checked first. A CPU that is possible but not
    // online cannot be pinned to; its queue then runs unpinned.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

impl<I: Image> Queue<I> {
    /// Creates the ring and registers `n` entries; an error means the
    /// kernel refused (it answers a bad REGISTER at once).
    #[allow(clippy::too_many_arguments)]
    fn new(
        cpu: usize,
        dev: OwnedFd,
        n: usize,
        payload: usize,
        ops: Arc<Ops<I>>,
        shared: Arc<Shared>,
        access: Option<Access>,
        stay: Option<Stay>,
    ) -> io::Result<Queue<I>> {
        pin_to(cpu);
        if let Some(s) = &stay {
            s.windows.register(s.thread);
        }
        let qid = u16::try_from(cpu).map_err(|_| io::Error::other("CPU number too large"))?;
        let ring = Ring::new(n as u32)?;
        let mut entries: Vec<Entry> = (0..n)
            .map(|_| {
                let mut header = vec![0u8; HEADER_BYTES].into_boxed_slice();
                let mut payload = vec![0u8; payload].into_boxed_slice();
                let iov = Box::new([
                    libc::iovec {
                        iov_base: header.as_mut_ptr().cast(),
                        iov_len: header.len(),
                    },
                    libc::iovec {
                        iov_base: payload.as_mut_ptr().cast(),
                        iov_len: payload.len(),
                    },
                ]);
                Entry {
                    header,
                    payload,
                    iov,
                    live: true,
                }
            })
            .collect();
        let mut q = Queue {
            qid,
            dev,
            ring,
            entries: Vec::new(),
            ops,
            shared,
            access,
            stay,
            callers: Vec::with_capacity(n),
            submissions: 0,
        };
        for (i, e) in entries.iter_mut().enumerate() {
            let sqe = q.command(CMD_REGISTER, i, 0, Some(&e.iov));
            q.ring.push(&sqe);
        }
        q.entries = entries;
        q.ring.submit_and_wait(0)?;
        // A refused REGISTER completes during the submission; an accepted
        // one completes only when a request arrives, which cannot happen
        // before every queue has registered.
        let mut err = None;
        while let Some(c) = q.ring.next_completion() {
            if c.res < 0 {
                q.entries[c.user_data as usize].live = false;
                err = Some(io::Error::from_raw_os_error(-c.res));
            } else {
                q.answer(c.user_data as usize);
            }
        }
        match err {
            Some(e) => {
                // Entries the kernel accepted stay registered until the
                // connection ends: their buffers must outlive this thread.
                std::mem::forget(q);
                Err(io::Error::new(
                    e.kind(),
                    format!("FUSE io_uring queue {cpu} refused: {e}"),
                ))
            }
            None => Ok(q),
        }
    }

    /// A URING_CMD entry for `/dev/fuse`: `fuse_uring_cmd_req` in the
    /// command area, the entry index as user data.
    fn command(
        &self,
        op: u32,
        entry: usize,
        commit_id: u64,
        iov: Option<&[libc::iovec; 2]>,
    ) -> [u8; SQE_BYTES] {
        let mut s = [0u8; SQE_BYTES];
        s[0] = super::ring::IORING_OP_URING_CMD;
        put32(&mut s, 4, self.dev.as_raw_fd() as u32);
        put32(&mut s, 8, op);
        if let Some(iov) = iov {
            put64(&mut s, 16, iov.as_ptr() as u64);
            put32(&mut s, 24, 2);
        }
        put64(&mut s, 32, entry as u64);
        // struct fuse_uring_cmd_req { flags, commit_id, qid } at `cmd`.
        put64(&mut s, 56, commit_id);
        s[64..66].copy_from_slice(&self.qid.to_le_bytes());
        s
    }

    /// Serves until the kernel has ended every entry (at unmount it
    /// completes them with ENOTCONN).
    fn serve(&mut self) {
        loop {
            if !self.entries.iter().any(|e| e.live) {
                return;
            }
            if let Err(e) = self.submit_and_wait() {
                log::error!("FUSE io_uring queue {}: {e}", self.qid);
                // The kernel may still write into registered buffers.
                std::mem::forget(std::mem::take(&mut self.entries));
                return;
            }
            while let Some(c) = self.ring.next_completion() {
                let i = c.user_data as usize;
                if c.res < 0 {
                    self.entries[i].live = false;
                } else {
                    self.answer(i);
                }
            }
        }
    }

    /// Submits the queued answers and waits for the next request. While
    /// callers are seen to change CPU (module `sched_idle`), the answers go first,
    /// on their own and in `SCHED_IDLE`, so that the callers they wake stay
    /// on this CPU; otherwise (and for a probe now and then) they go with
    /// the wait, and their callers' next requests tell whether they hopped.
    fn submit_and_wait(&mut self) -> io::Result<()> {
        let callers = std::mem::take(&mut self.callers);
        if let Some(s) = &self.stay {
            self.submissions = self.submissions.wrapping_add(1);
            let probe = self.submissions.is_multiple_of(sched_idle::PROBE_EVERY);
            if self.ring.pending() > 0 && s.windows.hops.on() && !probe {
                let ring = &mut self.ring;
                s.windows.around(s.thread, || ring.submit_and_wait(0))?;
                self.shared.stay_submissions.fetch_add(1, Ordering::Relaxed);
            } else {
                callers.iter().for_each(|&t| s.windows.hops.told(t));
            }
        }
        self.callers = callers;
        self.callers.clear();
        self.ring.submit_and_wait(1)
    }

    /// Answers the request in entry `i` and queues its COMMIT_AND_FETCH.
    fn answer(&mut self, i: usize) {
        let e = &mut self.entries[i];
        let h = abi::in_header(&e.header);
        let commit_id = u64_at(&e.header, ENT_COMMIT_ID);
        let in_len = (u32_at(&e.header, ENT_PAYLOAD_SZ) as usize).min(e.payload.len());
        let op_in: [u8; 128] = e.header[OP_IN..OP_IN + 128].try_into().unwrap();
        if let Some(s) = &self.stay {
            s.windows.hops.arrived(s.queue, h.pid);
            self.callers.push(h.pid);
        }
        let r = if self.access.is_some_and(|a| refused(a, &h)) {
            Err(libc::EACCES)
        } else {
            dispatch(&self.ops, &h, &op_in, &mut e.payload, in_len)
        };
        self.shared.uring_requests.fetch_add(1, Ordering::Relaxed);
        let (error, body) = match r {
            Ok(n) => (0, n),
            Err(errno) => (-errno, 0),
        };
        put_out_header(&mut e.header, body, error, h.unique);
        put32(&mut e.header, ENT_PAYLOAD_SZ, body as u32);
        let sqe = self.command(CMD_COMMIT_AND_FETCH, i, commit_id, None);
        self.ring.push(&sqe);
    }
}

#[cfg(test)]
mod tests {
    use super::threads_per_queue;

    #[test]
    fn queues_serve_twice_the_threads_at_most_threads_each() {
        // Two CPUs, four threads: four per queue, eight in all.
        assert_eq!(threads_per_queue(4, 2), 4);
        // One CPU: never more per queue than the threads.
        assert_eq!(threads_per_queue(4, 1), 4);
        assert_eq!(threads_per_queue(16, 8), 4);
        assert_eq!(threads_per_queue(5, 4), 3);
        // More CPUs than twice the threads: one each.
        assert_eq!(threads_per_queue(16, 128), 1);
        assert_eq!(threads_per_queue(0, 2), 1);
        assert_eq!(threads_per_queue(1, 0), 1);
    }
}
