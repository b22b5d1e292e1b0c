//! How FUSE requests reach packfs: the `/dev/fuse` threads of `fuser`
//! (module `fuse`), or FUSE-over-io_uring queues ([`uring`]) where the
//! kernel offers them. Both call the same [`crate::ops::Ops`].
//!
//! The choice is made before mounting: once INIT has negotiated
//! `FUSE_OVER_IO_URING`, the kernel holds every request until a queue for
//! each possible CPU has registered (fs/fuse/dev.c, `fuse_block_alloc`),
//! so a transport that might fail is probed first rather than tried.

mod abi;
mod ring;
pub mod uring;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

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

/// Why io_uring queues cannot serve a mount here, or `Ok` if they can.
pub fn probe() -> Result<(), String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" => {}
        Ok(_) => {
            return Err(format!(
                "the kernel's FUSE over io_uring is switched off ({ENABLE_URING} is N; root can \
                 write Y to it)"
            ))
        }
        Err(_) => {
            return Err(format!(
                "this kernel has no FUSE over io_uring ({ENABLE_URING} is missing; it needs \
                 Linux 6.14+ with CONFIG_FUSE_IO_URING)"
            ))
        }
    }
    ring::available().map_err(|e| {
        format!(
            "io_uring is not available to this process: {e} (see sysctl kernel.io_uring_disabled)"
        )
    })?;
    possible_cpus().map(|_| ())
}

/// The CPUs the kernel may ever run on (`/sys/devices/system/cpu/possible`,
/// e.g. `0-3,8`): the kernel wants a queue for each.
pub fn possible_cpus() -> Result<Vec<usize>, String> {
    let path = "/sys/devices/system/cpu/possible";
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    parse_cpu_list(text.trim()).ok_or_else(|| format!("{path}: cannot parse {text:?}"))
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
/// transport.
#[derive(Debug, Default)]
pub struct Shared {
    want_uring: AtomicBool,
    negotiated: AtomicBool,
    /// The largest readahead the kernel allowed at INIT (bytes).
    max_readahead: AtomicU32,
    served: AtomicU8,
    /// Requests answered through the io_uring queues.
    pub uring_requests: AtomicU64,
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
}
