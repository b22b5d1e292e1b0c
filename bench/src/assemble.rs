//! Turning measurements into the report: each run's record, then the
//! whole document (types in `report`), which echoes everything that
//! changes what was measured so a result file explains itself.

use super::args::{BenchArgs, ClientCache, Workload};
use super::grid::Cell;
use super::plan::{Ctx, Prepared};
use super::report::{self, Report, Run};
use super::sides::{Side, SideKind};
use super::tree::{Kind, Tree};
use super::workload::{self, Outcome};

/// A run's record from what the workload did and what reached the storage.
pub fn make_run(
    label: &str,
    w: Workload,
    c: Cell,
    mut out: Outcome,
    storage: report::Storage,
) -> Run {
    // A run too quick for the clock still gets finite rates.
    let secs = out.seconds.max(1e-9);
    let latency_us =
        workload::percentiles(&mut out.latencies_ns).map(|(p50, p99, max)| report::Percentiles {
            p50: p50 as f64 / 1e3,
            p99: p99 as f64 / 1e3,
            max: max as f64 / 1e3,
        });
    Run {
        side: label.to_string(),
        workload: w.name().to_string(),
        threads: c.threads,
        repeat: c.repeat,
        epoch: c.epoch,
        cold: c.cold(),
        seconds: out.seconds,
        items: out.items,
        files_per_sec: out.items as f64 / secs,
        bytes: out.bytes,
        mb_per_sec: out.bytes as f64 / 1e6 / secs,
        latency_us,
        ratio_vs_raw: None,
        ops: report::Ops {
            files_opened: out.files_opened,
            stat_calls: out.stat_calls,
        },
        storage,
        errors: out.errors,
        first_error: out.first_error,
    }
}

/// Phase 5: the report, from the arguments, what [`super::plan::prepare`]
/// found, the sides (still mounted: their paths are reported) and every
/// run, to which it adds the ratios to raw. Hands the document to output.
pub fn report(a: &BenchArgs, p: &Prepared, sides: &[Side], mut runs: Vec<Run>) -> Report {
    report::fill_ratios(&mut runs, "raw");
    Report {
        schema_version: report::SCHEMA_VERSION,
        packfs_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        config: config(a, p),
        host: host(),
        tree: tree_info(&p.ctx.tree),
        sides: sides.iter().map(|s| side_info(&p.ctx, s)).collect(),
        runs,
    }
}

fn config(a: &BenchArgs, p: &Prepared) -> report::Config {
    report::Config {
        raw: p.ctx.raw.display().to_string(),
        image: p.ctx.image.as_ref().map(|p| p.display().to_string()),
        workloads: p.plans.iter().map(|(w, _)| w.name().to_string()).collect(),
        threads: a.threads.clone(),
        repeat: a.repeat,
        epochs: a.epochs,
        seed: a.seed,
        import: a.import.clone(),
        samples: a.samples,
        sample_size: a.sample_size,
        sample_min_size: a.sample_min_size,
        group_bytes: a.group_bytes,
        window: a.window,
        emulate_latency: p.latency.map(|l| report::LatencyConfig {
            meta_us: l.meta_us,
            read_us: l.read_us,
            client_cache_bytes: match l.client_cache {
                ClientCache::Kernel => None,
                ClientCache::Bounded(b) => Some(b),
            },
        }),
        verified: !a.no_verify,
        cold_method: p.ctx.method.name().to_string(),
        cold_description: p.ctx.method.describe().to_string(),
    }
}

fn host() -> report::Host {
    report::Host {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        // SAFETY: geteuid has no preconditions.
        root: unsafe { libc::geteuid() } == 0,
    }
}

fn tree_info(t: &Tree) -> report::TreeInfo {
    report::TreeInfo {
        files: t.count(Kind::File),
        dirs: t.count(Kind::Dir),
        symlinks: t.count(Kind::Symlink),
        other: t.count(Kind::Other),
        file_bytes: t.file_bytes(),
    }
}

/// What a side is, what its cold runs had evicted or refreshed, and where
/// its storage counters come from: a reader cannot weigh the numbers
/// without these.
fn side_info(ctx: &Ctx, s: &Side) -> report::SideInfo {
    let method = ctx.method.describe();
    let dev = |d: Option<(u32, u32)>| match d {
        Some((a, b)) => format!("; device {a}:{b} from /proc/diskstats (device-wide)"),
        None => "; no block device to count".to_string(),
    };
    let remounted = |emu: bool| if emu { "; passthrough remounted" } else { "" };
    let pt_counters = |emu: bool| if emu { "passthrough counters; " } else { "" };
    let (kind, cold, source) = match &s.kind {
        SideKind::Raw { emu } => (
            "raw",
            format!("{method}{}", remounted(emu.is_some())),
            format!(
                "{}bench process /proc/self/io (+ ru_inblock of import's interpreters){}",
                pt_counters(emu.is_some()),
                dev(ctx.raw_dev)
            ),
        ),
        SideKind::Packfs { .. } if ctx.image_remote => (
            "packfs",
            format!("{method}; mount refreshed (daemon restarted: block and range caches empty, object opened anew)"),
            "requests the daemon sent to the server (--stats on SIGUSR1): GETs, bytes fetched, time to first byte; mount daemon /proc/PID/io".to_string(),
        ),
        SideKind::Packfs { emu, .. } => (
            "packfs",
            format!(
                "{method}; mount refreshed (daemon restarted, block cache empty){}",
                remounted(emu.is_some())
            ),
            format!(
                "{}mount daemon /proc/PID/io (read_bytes: what reached the disk; syscr: its reads of /dev/fuse, about one per FUSE request, plus its pread calls on the image, or none for them with --mount-io mmap){}",
                pt_counters(emu.is_some()),
                dev(ctx.image_dev)
            ),
        ),
        SideKind::External { .. } => (
            "external",
            format!("{method}; mount not refreshed (not ours to remount)"),
            format!("device counters only{}", dev(ctx.image_dev)),
        ),
    };
    report::SideInfo {
        label: s.label.clone(),
        kind: kind.to_string(),
        path: s.root(&ctx.raw).display().to_string(),
        cold,
        storage_source: source,
        block_cache_bytes: match &s.kind {
            SideKind::Packfs { mount, .. } => mount
                .stats()
                .and_then(|v| v.get("cache")?.get("budget")?.as_u64()),
            _ => None,
        },
    }
}

/// The report of a raw side and an external mount labelled "kernel" over
/// [`Ctx::for_test`]'s tree, one `walk` planned, for unit tests.
#[cfg(test)]
pub fn example(a: &BenchArgs, runs: Vec<Run>) -> Report {
    let p = Prepared {
        ctx: Ctx::for_test(None),
        plans: vec![(
            Workload::Walk,
            super::workload::Plan::Walk { dirs: Vec::new() },
        )],
        latency: None,
    };
    let sides = [
        Side {
            label: "raw".into(),
            kind: SideKind::Raw { emu: None },
        },
        Side {
            label: "kernel".into(),
            kind: SideKind::External { path: "/k".into() },
        },
    ];
    report(a, &p, &sides, runs)
}

#[cfg(test)]
mod tests {
    use super::super::args;
    use super::*;

    fn cell(side: usize, epoch: usize) -> Cell {
        Cell {
            plan: 0,
            threads: 2,
            repeat: 1,
            side,
            epoch,
        }
    }

    fn outcome(seconds: f64) -> Outcome {
        Outcome {
            seconds,
            items: 50,
            bytes: 3_000_000,
            latencies_ns: vec![3000, 1000, 2000],
            files_opened: 50,
            stat_calls: 7,
            ..Outcome::default()
        }
    }

    #[test]
    fn a_run_carries_rates_latencies_in_us_and_its_cell() {
        let r = make_run(
            "raw",
            Workload::Sequential,
            cell(0, 1),
            outcome(2.0),
            report::Storage::default(),
        );
        assert_eq!(
            (r.side.as_str(), r.workload.as_str()),
            ("raw", "sequential")
        );
        assert_eq!((r.threads, r.repeat, r.epoch, r.cold), (2, 1, 1, true));
        assert_eq!((r.files_per_sec, r.mb_per_sec), (25.0, 1.5));
        let p = r.latency_us.unwrap();
        assert_eq!((p.p50, p.max), (2.0, 3.0));
        assert_eq!((r.ops.files_opened, r.ops.stat_calls), (50, 7));
        assert_eq!(r.ratio_vs_raw, None);

        let r = make_run(
            "raw",
            Workload::Walk,
            cell(0, 2),
            Outcome::default(),
            report::Storage::default(),
        );
        assert!(!r.cold && r.latency_us.is_none());
        assert_eq!((r.seconds, r.files_per_sec), (0.0, 0.0));
    }

    #[test]
    fn report_echoes_the_config_and_pairs_each_run_with_raw() {
        let a = args::parse(&[
            "--raw",
            "/raw",
            "--mountpoint",
            "kernel=/k",
            "--workload",
            "walk",
            "--threads",
            "2",
            "--no-verify",
        ]);
        let run = |side: usize, label: &str, epoch, secs| {
            let s = report::Storage::default();
            make_run(label, Workload::Walk, cell(side, epoch), outcome(secs), s)
        };
        let runs = vec![
            run(0, "raw", 1, 4.0),
            run(0, "raw", 2, 1.0),
            run(1, "kernel", 1, 2.0),
            run(1, "kernel", 2, 3.0),
        ];
        let rep = example(&a, runs);

        let ratios: Vec<Option<f64>> = rep.runs.iter().map(|r| r.ratio_vs_raw).collect();
        assert_eq!(ratios, [None, None, Some(0.5), Some(3.0)]);
        assert_eq!(rep.schema_version, report::SCHEMA_VERSION);
        assert_eq!(rep.config.raw, "/raw");
        assert_eq!(rep.config.image, None);
        assert_eq!(rep.config.workloads, ["walk"]);
        assert_eq!(rep.config.threads, [2]);
        assert!(!rep.config.verified && rep.config.emulate_latency.is_none());
        assert_eq!(rep.config.cold_method, "fadvise");
        let t = &rep.tree;
        assert_eq!((t.files, t.dirs, t.symlinks, t.other), (1, 1, 1, 0));
        assert_eq!(t.file_bytes, 100);

        let kinds: Vec<(&str, &str, &str)> = rep
            .sides
            .iter()
            .map(|s| (s.label.as_str(), s.kind.as_str(), s.path.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [("raw", "raw", "/raw"), ("kernel", "external", "/k")]
        );
        assert_eq!(
            rep.sides[0].storage_source,
            "bench process /proc/self/io (+ ru_inblock of import's interpreters); no block device to count"
        );
        assert_eq!(
            rep.sides[1].cold,
            format!(
                "{}; mount not refreshed (not ours to remount)",
                cold_fadvise()
            )
        );
        assert_eq!(rep.sides[0].cold, cold_fadvise());
    }

    fn cold_fadvise() -> &'static str {
        super::super::cold::Method::Fadvise.describe()
    }
}
