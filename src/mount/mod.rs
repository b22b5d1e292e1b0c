//! The mount process: how a `packfs mount` lives, from its checks to the
//! end of its daemon. What it serves is `mountfs`'s, and which image with
//! which options is `cmd::mount`'s plan.
//!
//! 1. Lock and check: the mountpoint is locked ([`mountlock`]), so that two
//!    mounts started at once cannot both find it free and stack, then
//!    checked ([`mountpoint`]): no FUSE mount on it in the mount table
//!    ([`mountinfo`]; a dead one is removed), a directory this user may
//!    mount on.
//! 2. Fork: [`daemon`] forks the daemon before any thread exists (glibc's
//!    malloc arenas capped first, [`memory`]), and a watcher process that
//!    unmounts the mount if its daemon dies; the caller waits on a pipe for
//!    the daemon's "ok" or its error, so the mount is usable when `packfs
//!    mount` returns. With `--foreground` the caller is the daemon.
//! 3. Rendezvous: once the mount is usable the daemon records its device
//!    in the mount table, listens on a socket named for it ([`rendezvous`])
//!    and the lock is released.
//! 4. Serve: until the mount goes; a memory-mapped image that fails under
//!    it ends the daemon with a line that says why ([`sigbus`]).
//! 5. Unmount: `packfs umount` ([`fusermount`]) connects to the rendezvous
//!    socket, unmounts, and waits for the daemon to end, so that its
//!    `--stats` and `--record-access` are written when it returns. SIGTERM
//!    (a job's end) or `packfs run` gone detaches the mount the same way;
//!    the mount of a daemon that died is the watcher's to remove.
//!
//! [`machine`] has the defaults a mount takes from the machine: session
//! threads from the cores, the cache's budget from the memory.

pub mod daemon;
pub mod fusermount;
pub mod machine;
pub mod memory;
pub mod mountinfo;
pub mod mountlock;
pub mod mountpoint;
pub mod rendezvous;
pub mod sigbus;
