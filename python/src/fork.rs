//! Making `fork` safe for the reader.
//!
//! A forked child has one thread, but a copy of every lock as it was at the
//! fork. mountfs has one process-wide lock, the pool of recycled block
//! buffers (`mountfs::buffers`); if another thread held it at the fork, the
//! child's first decode would wait forever. Images themselves are never
//! shared across a fork (the Python side reopens in a new process, see
//! `image.rs`), but that global is.
//!
//! So every call into mountfs runs inside [`Call`], and Python's
//! `os.register_at_fork` runs [`before_fork`] (wait until no call is inside
//! mountfs and let none start) and [`after_fork`] (in parent and child:
//! let calls start again). Then no thread is inside mountfs at the fork,
//! and no lock of it is held. Nothing else runs mountfs code in the
//! background: the binding opens images with readahead off (no prefetch
//! pool), and the decoding threads of `read_many` are all inside a call.
//! The remote client's runtime threads do not touch the buffer pool.
//!
//! The gate is one atomic word (pending forks and a count of calls), not a
//! mutex, so the child can never inherit it locked. Forks are counted, not
//! flagged: two threads may fork at once, and the first to finish must not
//! let calls start while the second has yet to fork.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// High half: forks pending. Low half: calls inside mountfs.
static GATE: AtomicU64 = AtomicU64::new(0);
const FORK: u64 = 1 << 32;
const CALLS: u64 = FORK - 1;

/// A call inside mountfs: waits while a fork is pending, and holds the
/// fork off until dropped. Take it with the GIL released.
pub struct Call(());

impl Call {
    pub fn enter() -> Call {
        let mut s = GATE.load(Ordering::Acquire);
        loop {
            if s >= FORK {
                std::thread::sleep(Duration::from_micros(50));
                s = GATE.load(Ordering::Acquire);
                continue;
            }
            match GATE.compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Call(()),
                Err(now) => s = now,
            }
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        GATE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Before a fork: no new calls, and wait for the running ones to end.
#[pyfunction]
pub fn before_fork(py: Python<'_>) {
    py.detach(|| {
        GATE.fetch_add(FORK, Ordering::AcqRel);
        while GATE.load(Ordering::Acquire) & CALLS != 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    })
}

/// After a fork, in the parent: this fork is done; calls start again once
/// no other thread's fork is pending.
#[pyfunction]
pub fn after_fork_in_parent() {
    GATE.fetch_sub(FORK, Ordering::AcqRel);
}

/// After a fork, in the child: its only thread is the one that forked, so
/// no call is inside mountfs and no other fork is pending here.
#[pyfunction]
pub fn after_fork_in_child() {
    GATE.store(0, Ordering::Release);
}
