//! How FUSE requests reach packfs: the `/dev/fuse` threads of `fuser`
//! (`super::adapter`), packfs's own `/dev/fuse` threads that spin before
//! they sleep ([`dev`]), or FUSE-over-io_uring queues ([`uring`]) where the
//! kernel offers them. All call the same [`crate::fuse::ops::Ops`].
//!
//! The choice is made before mounting: once INIT has negotiated
//! `FUSE_OVER_IO_URING`, the kernel holds every request until a queue for
//! each possible CPU has registered (fs/fuse/dev.c, `fuse_block_alloc`),
//! so a transport that might fail is probed first rather than tried.

mod abi;
pub mod dev;
mod dispatch;
mod ring;
pub mod uring;

use crate::fuse::stats::RequestCounters;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// `--transport`: how the mount receives requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Transport {
    /// io_uring queues where the kernel offers them, `/dev/fuse` otherwise.
    #[default]
    Auto,
    /// io_uring queues, or an error before mounting.
    Uring,
    /// `/dev/fuse` threads only.
    Dev,
}

/// The module parameter that lets INIT offer FUSE over io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// The sysctl that can forbid io_uring to unprivileged processes (1) or to
/// all (2).
const IO_URING_DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";
/// The CPUs the kernel may ever run on, as a list like `0-3,8`.
const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";

/// Why io_uring queues cannot serve a mount here. Each variant is one
/// cause a user can act on; the messages name the file or sysctl to look
/// at, so a caller prints them as they are.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// `enable_uring` exists and is not `Y`: the kernel can, root has not
    /// switched it on.
    #[error(
        "the kernel's FUSE over io_uring is switched off ({ENABLE_URING} is N; root can write Y \
         to it)"
    )]
    UringSwitchedOff,
    /// `enable_uring` cannot be read: a kernel older than 6.14, or built
    /// without `CONFIG_FUSE_IO_URING`.
    #[error(
        "this kernel has no FUSE over io_uring ({ENABLE_URING} is missing; it needs Linux 6.14+ \
         with CONFIG_FUSE_IO_URING)"
    )]
    NoFuseUring,
    /// Creating a ring was refused (EPERM) while `kernel.io_uring_disabled`
    /// is set (`value`, 1 or 2).
    #[error(
        "io_uring is not available to this process: {source} (see sysctl kernel.io_uring_disabled)"
    )]
    IoUringDisabled { value: u8, source: std::io::Error },
    /// Creating a ring with 128-byte entries failed for another reason
    /// (seccomp, a kernel without io_uring or without `IORING_SETUP_SQE128`,
    /// resource limits); `source` carries the errno.
    #[error(
        "io_uring is not available to this process: {source} (see sysctl kernel.io_uring_disabled)"
    )]
    RingSetup { source: std::io::Error },
    /// The possible-CPU list cannot be read.
    #[error("{POSSIBLE_CPUS}: {source}")]
    CpuListUnreadable { source: std::io::Error },
    /// The possible-CPU list does not parse (or lists no CPU), so there is
    /// no telling which queues the kernel waits for.
    #[error("{POSSIBLE_CPUS}: cannot parse {text:?}")]
    NoCpuList { text: String },
}

/// Why io_uring queues cannot serve a mount here, or `Ok` if they can.
pub fn probe() -> Result<(), TransportError> {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" => {}
        Ok(_) => return Err(TransportError::UringSwitchedOff),
        Err(_) => return Err(TransportError::NoFuseUring),
    }
    ring::available().map_err(|e| ring_refused(e, io_uring_disabled()))?;
    possible_cpus().map(|_| ())
}

/// `kernel.io_uring_disabled` when it is set (non-zero), else `None`.
fn io_uring_disabled() -> Option<u8> {
    std::fs::read_to_string(IO_URING_DISABLED)
        .ok()
        .and_then(|v| v.trim().parse::<u8>().ok())
        .filter(|&v| v != 0)
}

/// Names why creating a ring failed: the sysctl when it is set (`disabled`)
/// and the kernel said EPERM, which is what it answers when the sysctl
/// forbids; else the errno itself.
fn ring_refused(source: std::io::Error, disabled: Option<u8>) -> TransportError {
    match disabled {
        Some(value) if source.raw_os_error() == Some(libc::EPERM) => {
            TransportError::IoUringDisabled { value, source }
        }
        _ => TransportError::RingSetup { source },
    }
}

/// The CPUs the kernel may ever run on (`/sys/devices/system/cpu/possible`,
/// e.g. `0-3,8`): the kernel wants a queue for each.
pub fn possible_cpus() -> Result<Vec<usize>, TransportError> {
    let text = std::fs::read_to_string(POSSIBLE_CPUS)
        .map_err(|source| TransportError::CpuListUnreadable { source })?;
    parse_cpu_list(text.trim()).ok_or(TransportError::NoCpuList { text })
}

fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Largest read request the kernel may send (it derives `max_pages` from
/// this): 1 MiB, so a large `read(2)` costs one round trip, not eight.
pub const MAX_REQUEST: u32 = 1 << 20;

/// The largest answer body a request can need: a READ of the most the
/// kernel may ask at once (`max_write` and the readahead it allowed).
fn largest_answer(shared: &Shared) -> usize {
    (MAX_REQUEST.max(shared.max_readahead()) as usize)
        .max(8192)
        .next_multiple_of(4096)
}

/// Which transport served a mount, as `--stats` and the daemon log name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    Dev,
    Uring,
}

impl Served {
    pub fn name(self) -> &'static str {
        match self {
            Served::Dev => "dev",
            Served::Uring => "uring",
        }
    }
}

/// What the adapter's INIT, the queues and the stats share about a mount's
/// transport, and the requests it answered.
#[derive(Debug, Default)]
pub struct Shared {
    /// FUSE requests answered, by kind, whichever transport carried them
    /// (counted by [`crate::fuse::ops::Ops`]).
    pub requests: Arc<RequestCounters>,
    want_uring: AtomicBool,
    negotiated: AtomicBool,
    /// The largest readahead the kernel allowed at INIT (bytes).
    max_readahead: AtomicU32,
    served: AtomicU8,
    /// Requests answered through the io_uring queues.
    pub uring_requests: AtomicU64,
    /// Under io_uring: the threads serving each queue.
    pub queue_threads: AtomicU64,
    /// Under io_uring: submissions made in `SCHED_IDLE` to keep callers on
    /// their CPU (`uring/sched_idle.rs`).
    pub stay_submissions: AtomicU64,
    /// Under `dev`: how long packfs's own threads spin (µs), 0 when
    /// `fuser`'s threads serve.
    pub dev_spin_us: AtomicU64,
}

impl Shared {
    /// Whether INIT should offer to serve through io_uring queues.
    pub fn set_want_uring(&self, want: bool) {
        self.want_uring.store(want, Ordering::Relaxed);
    }

    pub fn want_uring(&self) -> bool {
        self.want_uring.load(Ordering::Relaxed)
    }

    pub fn set_negotiated(&self, ok: bool) {
        self.negotiated.store(ok, Ordering::Relaxed);
    }

    pub fn negotiated(&self) -> bool {
        self.negotiated.load(Ordering::Relaxed)
    }

    pub fn set_max_readahead(&self, bytes: u32) {
        self.max_readahead.store(bytes, Ordering::Relaxed);
    }

    pub fn max_readahead(&self) -> u32 {
        self.max_readahead.load(Ordering::Relaxed)
    }

    pub fn set_served(&self, s: Served) {
        self.served.store(s as u8, Ordering::Relaxed);
    }

    pub fn served(&self) -> Served {
        match self.served.load(Ordering::Relaxed) {
            x if x == Served::Uring as u8 => Served::Uring,
            _ => Served::Dev,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("0-1,4-5"), Some(vec![0, 1, 4, 5]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn a_refused_ring_is_blamed_on_the_sysctl_only_when_it_is_set_and_the_kernel_said_eperm() {
        let eperm = || std::io::Error::from_raw_os_error(libc::EPERM);
        let enosys = || std::io::Error::from_raw_os_error(libc::ENOSYS);
        assert!(matches!(
            ring_refused(eperm(), Some(2)),
            TransportError::IoUringDisabled { value: 2, .. }
        ));
        assert!(matches!(
            ring_refused(eperm(), None),
            TransportError::RingSetup { .. }
        ));
        assert!(matches!(
            ring_refused(enosys(), Some(2)),
            TransportError::RingSetup { .. }
        ));
    }

    /// The CLI prints these as they are, and tests/suite/transport.rs looks
    /// for the names in them.
    #[test]
    fn messages_name_what_to_look_at() {
        assert_eq!(
            TransportError::UringSwitchedOff.to_string(),
            "the kernel's FUSE over io_uring is switched off \
             (/sys/module/fuse/parameters/enable_uring is N; root can write Y to it)"
        );
        assert_eq!(
            TransportError::NoFuseUring.to_string(),
            "this kernel has no FUSE over io_uring (/sys/module/fuse/parameters/enable_uring \
             is missing; it needs Linux 6.14+ with CONFIG_FUSE_IO_URING)"
        );
        let e = ring_refused(std::io::Error::from_raw_os_error(libc::EPERM), Some(2));
        assert_eq!(
            e.to_string(),
            "io_uring is not available to this process: Operation not permitted (os error 1) \
             (see sysctl kernel.io_uring_disabled)"
        );
        let e = TransportError::NoCpuList { text: "x\n".into() };
        assert_eq!(
            e.to_string(),
            "/sys/devices/system/cpu/possible: cannot parse \"x\\n\""
        );
    }
}
