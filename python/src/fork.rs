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
//! The gate is one atomic word (a flag and a count), not a mutex, so the
//! child can never inherit it locked.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// High bit: a fork is pending. Low bits: calls inside mountfs.
static GATE: AtomicU64 = AtomicU64::new(0);
const FORKING: u64 = 1 << 63;

/// A call inside mountfs: waits while a fork is pending, and holds the
/// fork off until dropped. Take it with the GIL released.
pub struct Call(());

impl Call {
    pub fn enter() -> Call {
        let mut s = GATE.load(Ordering::Acquire);
        loop {
            if s & FORKING != 0 {
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
        GATE.fetch_or(FORKING, Ordering::AcqRel);
        while GATE.load(Ordering::Acquire) & !FORKING != 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    })
}

/// After a fork, in the parent and in the child: calls may start again.
#[pyfunction]
pub fn after_fork() {
    GATE.fetch_and(!FORKING, Ordering::AcqRel);
}
