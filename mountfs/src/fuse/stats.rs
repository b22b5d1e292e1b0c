//! What a mount answered: FUSE requests counted by kind at the answer
//! policy ([`super::ops`]), and with the core's counters the statistics
//! `packfs mount --stats FILE` writes ([`MountStats`]).

use crate::fs::FsCounts;
use std::sync::atomic::{AtomicU64, Ordering};

/// FUSE requests by kind, counted once per request at the FUSE edge (a
/// core call such as `getattr` also runs inside other requests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Getattr,
    Readlink,
    Read,
    Readdir,
    Xattr,
    Other,
}

const OPS: usize = 7;

/// Requests answered, by [`Op`] (relaxed atomics).
#[derive(Debug, Default)]
pub struct RequestCounters {
    requests: [AtomicU64; OPS],
}

impl RequestCounters {
    /// Counts one FUSE request of kind `op`.
    pub fn count(&self, op: Op) {
        self.requests[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Requests {
        let r = |op: Op| self.requests[op as usize].load(Ordering::Relaxed);
        Requests {
            lookup: r(Op::Lookup),
            getattr: r(Op::Getattr),
            readlink: r(Op::Readlink),
            read: r(Op::Read),
            readdir: r(Op::Readdir),
            xattr: r(Op::Xattr),
            other: r(Op::Other),
        }
    }
}

/// FUSE requests the daemon answered, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Requests {
    pub lookup: u64,
    pub getattr: u64,
    pub readlink: u64,
    pub read: u64,
    pub readdir: u64,
    pub xattr: u64,
    pub other: u64,
}

impl Requests {
    pub fn total(&self) -> u64 {
        self.lookup
            + self.getattr
            + self.readlink
            + self.read
            + self.readdir
            + self.xattr
            + self.other
    }
}

/// What a mount did, as `packfs mount --stats FILE` writes it (JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MountStats {
    pub requests_total: u64,
    pub requests: Requests,
    /// Lookups of names that do not exist.
    pub negative_lookups: u64,
    /// File bytes served by reads.
    pub read_bytes: u64,
    /// Requests answered with an error other than ENOENT/ENODATA.
    pub errors: u64,
}

impl MountStats {
    /// The requests `served` counted, with what the core counted (`fs`).
    pub fn new(served: &RequestCounters, fs: &FsCounts) -> Self {
        let requests = served.snapshot();
        MountStats {
            requests_total: requests.total(),
            requests,
            negative_lookups: fs.negative_lookups,
            read_bytes: fs.read_bytes,
            errors: fs.errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--stats` files are read by `packfs bench`, scripts and tests by
    /// these keys.
    #[test]
    fn the_stats_json_keeps_its_keys() {
        let c = RequestCounters::default();
        c.count(Op::Lookup);
        c.count(Op::Read);
        c.count(Op::Read);
        let fs = FsCounts {
            negative_lookups: 1,
            read_bytes: 10,
            errors: 2,
            ..Default::default()
        };
        let v = serde_json::to_value(MountStats::new(&c, &fs)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "requests_total": 3,
                "requests": {
                    "lookup": 1, "getattr": 0, "readlink": 0, "read": 2,
                    "readdir": 0, "xattr": 0, "other": 0
                },
                "negative_lookups": 1,
                "read_bytes": 10,
                "errors": 2
            })
        );
    }
}
