//! Work handed to a pool without a scope, so that the thread writing the
//! image can stop waiting for it.
//!
//! A scope (`rayon::scope`) joins every task it spawned before it returns,
//! so a cancelled pack would first compress whatever was queued: seconds of
//! xz or zstd -19 after the user pressed Ctrl-C. Tasks spawned here own
//! their data instead, and their results come back on a channel that
//! [`wait`] polls together with the cancel flag: on a signal the writer
//! returns at once, its temporary file is removed, and the tasks still
//! running find the flag raised before their next block and end.

use crate::{cancelled, PackError, PackOptions};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// How often a waiting writer looks at the cancel flag.
const POLL: Duration = Duration::from_millis(20);

/// A task's result, or the panic that ended it.
pub(crate) type Outcome<T> = std::thread::Result<T>;

/// Runs `f` on `pool`; its result, or its panic, arrives on the receiver.
pub(crate) fn spawn<T, F>(pool: &rayon::ThreadPool, f: F) -> Receiver<Outcome<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    pool.spawn(move || {
        // Caught so that a panic reaches the writer (as a scope would
        // propagate it) instead of aborting the process in a pool thread.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // The receiver is gone only when the writer stopped early.
        let _ = tx.send(r);
    });
    rx
}

/// Waits for a task's result; `Interrupted` as soon as the pack is
/// cancelled. A panic in the task is resumed here.
pub(crate) fn wait<T>(rx: &Receiver<Outcome<T>>, opts: &PackOptions) -> Result<T, PackError> {
    loop {
        if cancelled(opts) {
            return Err(PackError::Interrupted);
        }
        match rx.recv_timeout(POLL) {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                unreachable!("a task sends its result or its panic before it ends")
            }
        }
    }
}
