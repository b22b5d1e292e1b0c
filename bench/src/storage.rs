//! What reached the storage under a side during one run: the counters
//! (see `iostat` and the passthrough's) read before and after it, and
//! their difference as the report's `storage`.

use super::args::Workload;
use super::iostat;
use super::passthrough::CounterSnapshot;
use super::plan::Ctx;
use super::report;
use super::sides::{Side, SideKind};

/// Everything a run's storage counters are computed from.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub proc: Option<iostat::ProcIo>,
    /// Bytes read by waited-for children (`import`'s interpreters).
    pub children: u64,
    pub disk: Option<iostat::DiskReads>,
    pub pt: Option<CounterSnapshot>,
    /// The daemon's request counters, for a remote image.
    pub remote: Option<packfs_objstore::RemoteStats>,
}

/// Counters of `side` now. `before` orders the reads so that the bench's
/// own reads of /proc fall outside the measured window (proc io read last
/// before the run, first after it).
pub fn snapshot(ctx: &Ctx, side: &Side, before: bool) -> Snapshot {
    let (pid, dev) = match &side.kind {
        SideKind::Raw { .. } => (None, ctx.raw_dev),
        SideKind::Packfs { mount, .. } => (mount.pid(), ctx.image_dev),
        SideKind::External { .. } => (None, ctx.image_dev),
    };
    let proc = || match &side.kind {
        SideKind::External { .. } => None,
        SideKind::Packfs { .. } if pid.is_none() => None,
        _ => iostat::proc_io(pid),
    };
    let first = if before { None } else { proc() };
    let disk = dev.and_then(iostat::diskstats);
    let pt = side.passthrough();
    let children = iostat::children_read_bytes();
    let remote = match &side.kind {
        SideKind::Packfs { mount, .. } if ctx.image_remote => remote_stats(mount),
        _ => None,
    };
    Snapshot {
        proc: if before { proc() } else { first },
        children,
        disk,
        pt,
        remote,
    }
}

/// The `remote` part of the daemon's counters.
fn remote_stats(mount: &super::mounts::OwnMount) -> Option<packfs_objstore::RemoteStats> {
    serde_json::from_value(mount.stats()?.get("remote")?.clone()).ok()
}

/// The counters a cold run of `side` is charged from, read before the side
/// is made cold: a fresh packfs daemon's reads while mounting (tables, and
/// whatever the device's readahead pulls in) are part of a cold start, so
/// its process counters start at 0 rather than at the old daemon's.
pub fn before_cold(ctx: &Ctx, side: &Side) -> Snapshot {
    let mut pre = snapshot(ctx, side, true);
    if matches!(side.kind, SideKind::Packfs { .. }) {
        pre.proc = Some(iostat::ProcIo::default());
        // Likewise its requests: the HEAD and the table reads of the mount.
        if ctx.image_remote {
            pre.remote = Some(Default::default());
        }
    }
    pre
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(b?.saturating_sub(a?))
}

/// The run's `storage`: each counter's growth from `before` to `after`,
/// None where either end could not be read. On the raw side, `import`'s
/// interpreters are children of the bench, so their reads are added to the
/// bench's own.
pub fn storage(before: &Snapshot, after: &Snapshot, w: Workload, raw: bool) -> report::Storage {
    let mut read_bytes = delta(
        before.proc.map(|p| p.read_bytes),
        after.proc.map(|p| p.read_bytes),
    );
    if raw && w == Workload::Import {
        read_bytes = read_bytes.map(|b| b + after.children.saturating_sub(before.children));
    }
    report::Storage {
        read_bytes,
        read_syscalls: delta(before.proc.map(|p| p.syscr), after.proc.map(|p| p.syscr)),
        device_reads: delta(before.disk.map(|d| d.reads), after.disk.map(|d| d.reads)),
        device_read_bytes: delta(before.disk.map(|d| d.bytes), after.disk.map(|d| d.bytes)),
        passthrough: match (before.pt, after.pt) {
            (Some(a), Some(b)) => Some(report::PassthroughOps {
                meta_ops: b.meta_ops - a.meta_ops,
                reads: b.reads - a.reads,
                read_bytes: b.read_bytes - a.read_bytes,
            }),
            _ => None,
        },
        remote: match (&before.remote, &after.remote) {
            (Some(a), Some(b)) => Some(remote_delta(a, b)),
            _ => None,
        },
    }
}

/// The requests between two snapshots of one daemon's counters.
fn remote_delta(
    a: &packfs_objstore::RemoteStats,
    b: &packfs_objstore::RemoteStats,
) -> report::RemoteOps {
    let gets = b.get_requests.saturating_sub(a.get_requests);
    // The counters keep a mean; the window's mean comes from the two sums.
    let sum = |s: &packfs_objstore::RemoteStats| s.ttfb_ms_mean * s.get_requests as f64;
    report::RemoteOps {
        get_requests: gets,
        head_requests: b.head_requests.saturating_sub(a.head_requests),
        bytes_fetched: b.bytes_fetched.saturating_sub(a.bytes_fetched),
        bytes_from_disk: b.bytes_from_disk.saturating_sub(a.bytes_from_disk),
        ranges_ahead: b.ranges_ahead.saturating_sub(a.ranges_ahead),
        ttfb_ms_mean: if gets > 0 {
            ((sum(b) - sum(a)) / gets as f64).max(0.0)
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(read_bytes: u64, syscr: u64, children: u64, dev: u64, pt: u64) -> Snapshot {
        Snapshot {
            proc: Some(iostat::ProcIo { read_bytes, syscr }),
            children,
            disk: Some(iostat::DiskReads {
                reads: dev,
                bytes: dev * 4096,
            }),
            pt: Some(CounterSnapshot {
                meta_ops: pt,
                reads: pt * 2,
                read_bytes: pt * 3,
            }),
            remote: None,
        }
    }

    #[test]
    fn storage_is_the_growth_of_each_counter() {
        let s = storage(
            &snap(1000, 10, 0, 5, 1),
            &snap(5096, 13, 0, 6, 4),
            Workload::Walk,
            true,
        );
        assert_eq!(s.read_bytes, Some(4096));
        assert_eq!(s.read_syscalls, Some(3));
        assert_eq!(s.device_reads, Some(1));
        assert_eq!(s.device_read_bytes, Some(4096));
        let pt = s.passthrough.unwrap();
        assert_eq!((pt.meta_ops, pt.reads, pt.read_bytes), (3, 6, 9));
    }

    #[test]
    fn import_children_count_on_the_raw_side_only() {
        let (a, b) = (snap(0, 0, 512, 0, 0), snap(100, 1, 8704, 0, 0));
        let bytes = |w, raw| storage(&a, &b, w, raw).read_bytes;
        assert_eq!(bytes(Workload::Import, true), Some(100 + 8192));
        assert_eq!(bytes(Workload::Import, false), Some(100));
        assert_eq!(bytes(Workload::Sequential, true), Some(100));
    }

    #[test]
    fn an_unreadable_counter_is_none_not_zero() {
        let none = Snapshot::default();
        let some = snap(10, 1, 0, 1, 1);
        for (a, b) in [(&none, &some), (&some, &none)] {
            let s = storage(a, b, Workload::Import, true);
            assert_eq!(s.read_bytes, None);
            assert_eq!(s.read_syscalls, None);
            assert_eq!(s.device_reads, None);
            assert_eq!(s.device_read_bytes, None);
            assert!(s.passthrough.is_none());
        }
    }

    #[test]
    fn a_counter_that_went_back_counts_zero() {
        // Saturating: a counter of a process since replaced can be above the new one's.
        let s = storage(
            &snap(9000, 90, 0, 0, 0),
            &snap(100, 1, 0, 0, 0),
            Workload::Walk,
            false,
        );
        assert_eq!((s.read_bytes, s.read_syscalls), (Some(0), Some(0)));
    }

    #[test]
    fn remote_requests_are_the_growth_and_the_window_mean_first_byte() {
        let s = |gets, bytes, mean| packfs_objstore::RemoteStats {
            get_requests: gets,
            head_requests: 1,
            bytes_fetched: bytes,
            ttfb_ms_mean: mean,
            ..Default::default()
        };
        let (a, b) = (s(10, 1000, 5.0), s(30, 9000, 7.0));
        let before = Snapshot {
            remote: Some(a),
            ..Snapshot::default()
        };
        let after = Snapshot {
            remote: Some(b),
            ..Snapshot::default()
        };
        let r = storage(&before, &after, Workload::Shuffle, false)
            .remote
            .unwrap();
        assert_eq!(
            (r.get_requests, r.head_requests, r.bytes_fetched),
            (20, 0, 8000)
        );
        // (30 * 7 - 10 * 5) / 20 = 8 ms for the 20 GETs of the window.
        assert!((r.ttfb_ms_mean - 8.0).abs() < 1e-9, "{}", r.ttfb_ms_mean);
        assert!(
            storage(&before, &Snapshot::default(), Workload::Walk, false)
                .remote
                .is_none()
        );
    }

    #[test]
    fn an_external_side_without_a_device_has_nothing_to_count() {
        let ext = Side {
            label: "k".into(),
            kind: SideKind::External { path: "/k".into() },
        };
        let pre = before_cold(&Ctx::for_test(None), &ext);
        assert!(pre.proc.is_none() && pre.disk.is_none() && pre.pt.is_none());
    }
}
