//! `packfs bench`: the honest "mounted vs raw" comparison, on the user's
//! own data.
//!
//! A speed-up claimed for a packed image is only worth something when both
//! sides did the same work from the same starting state. So the bench
//! * plans every workload once from the raw tree and replays it on each
//!   side (`workload`),
//! * refuses to compare a mount that does not hold the raw tree's files
//!   (`verify`),
//! * starts each repetition cold, says exactly what "cold" meant, and never
//!   labels a warm run cold (`cold`),
//! * reports what reached the storage underneath next to the times
//!   (`iostat`), because "one open of an image instead of 70,000 opens of
//!   files" is the mechanism a reader should see, and
//! * can replay both sides through a latency-injecting passthrough
//!   (`passthrough`) to show what a network filesystem would do to them.

mod args;
mod cold;
mod iostat;
mod mounts;
mod passthrough;
mod plot;
mod report;
mod rng;
mod tree;
mod verify;
mod workload;

pub use args::BenchArgs;

use anyhow::{bail, Context};
use args::{Latency, Workload};
use mounts::OwnMount;
use passthrough::{CounterSnapshot, EmulatedMount};
use report::{Report, Run};
use std::path::{Path, PathBuf};
use tree::{Kind, Tree};
use workload::{Outcome, Plan, PlanOptions};

enum SideKind {
    Raw {
        emu: Option<EmulatedMount>,
    },
    Packfs {
        mount: OwnMount,
        /// The passthrough of the image's directory (with --emulate-latency);
        /// declared after `mount` so that it is unmounted after it.
        emu: Option<EmulatedMount>,
    },
    External {
        path: PathBuf,
    },
}

struct Side {
    label: String,
    kind: SideKind,
}

impl Side {
    fn root<'a>(&'a self, raw: &'a Path) -> &'a Path {
        match &self.kind {
            SideKind::Raw { emu: Some(e) } => e.path(),
            SideKind::Raw { emu: None } => raw,
            SideKind::Packfs { mount, .. } => mount.path(),
            SideKind::External { path } => path,
        }
    }

    fn passthrough(&self) -> Option<CounterSnapshot> {
        match &self.kind {
            SideKind::Raw { emu: Some(e) } | SideKind::Packfs { emu: Some(e), .. } => {
                Some(e.counters.snapshot())
            }
            _ => None,
        }
    }
}

/// Everything a run's storage counters are computed from.
struct Snapshot {
    proc: Option<iostat::ProcIo>,
    children: u64,
    disk: Option<iostat::DiskReads>,
    pt: Option<CounterSnapshot>,
}

struct Ctx {
    raw: PathBuf,
    image: Option<PathBuf>,
    tree: Tree,
    method: cold::Method,
    raw_dev: Option<(u32, u32)>,
    image_dev: Option<(u32, u32)>,
}

impl Ctx {
    /// Counters now. `before` orders the reads so that the bench's own
    /// reads of /proc fall outside the measured window (proc io read last
    /// before the run, first after it).
    fn snapshot(&self, side: &Side, before: bool) -> Snapshot {
        let (pid, dev) = match &side.kind {
            SideKind::Raw { .. } => (None, self.raw_dev),
            SideKind::Packfs { mount, .. } => (mount.pid(), self.image_dev),
            SideKind::External { .. } => (None, self.image_dev),
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
        Snapshot {
            proc: if before { proc() } else { first },
            children,
            disk,
            pt,
        }
    }

    /// Files whose pages a fadvise-based cold start evicts.
    fn evict_list<'a>(&'a self, sides: &'a [Side]) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.tree.files().map(|e| self.raw.join(&e.rel)).collect();
        v.extend(self.image.iter().cloned());
        for s in sides {
            if let SideKind::External { path } = &s.kind {
                v.extend(self.tree.files().map(|e| path.join(&e.rel)));
            }
        }
        v
    }

    /// Makes `side` cold: remount what the bench owns, evict the rest.
    fn make_cold(&self, sides: &mut [Side], i: usize) -> anyhow::Result<()> {
        let files = self.evict_list(sides);
        let side = &mut sides[i];
        match &mut side.kind {
            SideKind::Raw { emu } => {
                if let Some(e) = emu {
                    e.stop();
                }
                cold::evict(self.method, files.iter().map(PathBuf::as_path))?;
                if let Some(e) = emu {
                    e.start()?;
                }
            }
            SideKind::Packfs { mount, emu } => {
                mount.stop()?;
                if let Some(e) = emu {
                    e.stop();
                }
                cold::evict(self.method, files.iter().map(PathBuf::as_path))?;
                if let Some(e) = emu {
                    e.start()?;
                }
                mount.start()?;
            }
            SideKind::External { .. } => {
                cold::evict(self.method, files.iter().map(PathBuf::as_path))?;
            }
        }
        Ok(())
    }
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(b?.saturating_sub(a?))
}

fn storage(before: &Snapshot, after: &Snapshot, w: Workload, raw: bool) -> report::Storage {
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
    }
}

fn side_info(ctx: &Ctx, s: &Side) -> report::SideInfo {
    let method = ctx.method.describe();
    let dev = |d: Option<(u32, u32)>| match d {
        Some((a, b)) => format!("; device {a}:{b} from /proc/diskstats (device-wide)"),
        None => "; no block device to count".to_string(),
    };
    let (kind, cold, source) = match &s.kind {
        SideKind::Raw { emu } => (
            "raw",
            format!(
                "{method}{}",
                if emu.is_some() { "; passthrough remounted" } else { "" }
            ),
            format!(
                "{}bench process /proc/self/io (+ ru_inblock of import's interpreters){}",
                if emu.is_some() { "passthrough counters; " } else { "" },
                dev(ctx.raw_dev)
            ),
        ),
        SideKind::Packfs { emu, .. } => (
            "packfs",
            format!(
                "{method}; mount refreshed (daemon restarted, block cache empty){}",
                if emu.is_some() { "; passthrough remounted" } else { "" }
            ),
            format!(
                "{}mount daemon /proc/PID/io (the image is mmapped: read_bytes counts faults that reached the disk; syscr counts its reads of /dev/fuse, about one per FUSE request){}",
                if emu.is_some() { "passthrough counters; " } else { "" },
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
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn run(a: BenchArgs) -> anyhow::Result<i32> {
    args::validate(&a)?;
    let latency = a
        .emulate_latency
        .as_deref()
        .map(Latency::parse)
        .transpose()?;
    let raw =
        std::fs::canonicalize(&a.raw).with_context(|| format!("--raw {}", a.raw.display()))?;
    let image = match &a.image {
        Some(p) => {
            let p = std::fs::canonicalize(p).with_context(|| format!("--image {}", p.display()))?;
            if !p.is_file() {
                bail!("--image {}: not a regular file", p.display());
            }
            Some(p)
        }
        None => None,
    };
    let tree = Tree::scan(&raw).context("scanning the raw tree")?;
    let needs_files = a.workload.iter().any(|w| {
        matches!(
            w,
            Workload::Sequential | Workload::Shuffle | Workload::Sample
        )
    });
    if needs_files && tree.count(Kind::File) == 0 {
        bail!("{}: no regular file to read", raw.display());
    }
    if a.workload.contains(&Workload::Import) && !raw.join(&a.python).exists() {
        bail!(
            "--workload import: {} does not exist (is --raw a venv? see --python)",
            raw.join(&a.python).display()
        );
    }
    let popts = PlanOptions {
        seed: a.seed,
        samples: a.samples,
        sample_size: a.sample_size,
        sample_min_size: a.sample_min_size,
        python: &a.python,
        modules: &a.import,
    };
    let mut plans: Vec<(Workload, Plan)> = Vec::new();
    for &w in &a.workload {
        if !plans.iter().any(|(x, _)| *x == w) {
            plans.push((w, Plan::new(w, &tree, &popts)?));
        }
    }
    let method = cold::choose(a.cold)?;
    let ctx = Ctx {
        raw_dev: iostat::device_of(&raw),
        image_dev: image.as_deref().and_then(iostat::device_of),
        raw: raw.clone(),
        image: image.clone(),
        tree,
        method,
    };

    // Sides: raw first, then the mounts.
    let mut sides = vec![Side {
        label: "raw".into(),
        kind: SideKind::Raw {
            emu: latency
                .as_ref()
                .map(|l| EmulatedMount::mount(&raw, l))
                .transpose()?,
        },
    }];
    if a.mountpoints.is_empty() || a.self_mount {
        let img = image.as_ref().context("--image is required")?;
        let (emu, path) = match &latency {
            Some(l) => {
                let dir = img.parent().unwrap_or(Path::new("/"));
                let e = EmulatedMount::mount(dir, l)?;
                let p = e.path().join(img.file_name().unwrap_or_default());
                (Some(e), p)
            }
            None => (None, img.clone()),
        };
        let mount = OwnMount::new(&path, a.mount_threads, a.cache_size)?;
        sides.push(Side {
            label: "packfs".into(),
            kind: SideKind::Packfs { mount, emu },
        });
    }
    for (i, spec) in a.mountpoints.iter().enumerate() {
        let e = args::parse_mountpoint(spec, i);
        let path = std::fs::canonicalize(&e.path)
            .with_context(|| format!("--mountpoint {}", e.path.display()))?;
        if sides.iter().any(|s| s.label == e.label) {
            bail!("--mountpoint {spec}: label {:?} is used twice", e.label);
        }
        sides.push(Side {
            label: e.label,
            kind: SideKind::External { path },
        });
    }

    if a.no_verify {
        eprintln!("packfs bench: --no-verify: not checking that the sides hold the same files");
    } else {
        for s in sides.iter().skip(1) {
            let root = s.root(&raw);
            let diffs = verify::differences(&ctx.tree, &raw, root, a.seed)
                .with_context(|| format!("verifying side {}", s.label))?;
            if !diffs.is_empty() {
                let shown: Vec<&str> = diffs.iter().take(8).map(String::as_str).collect();
                bail!(
                    "the raw tree {} and side {:?} ({}) do not hold the same files ({} difference{}):\n    {}{}\nrefusing to report a speed-up; rebuild the image from this tree, or pass --no-verify to measure anyway",
                    raw.display(),
                    s.label,
                    root.display(),
                    diffs.len(),
                    if diffs.len() == 1 { "" } else { "s" },
                    shown.join("\n    "),
                    if diffs.len() > shown.len() { "\n    ..." } else { "" }
                );
            }
        }
    }

    let mut runs: Vec<Run> = Vec::new();
    for (w, plan) in &plans {
        for &threads in &a.threads {
            for repeat in 1..=a.repeat {
                for si in 0..sides.len() {
                    for epoch in 1..=a.epochs {
                        let cold = epoch == 1;
                        // A cold run is charged from before the remount: a
                        // fresh packfs daemon's reads while mounting (tables,
                        // and whatever the device's readahead pulls in) are
                        // part of a cold start, so its counters start at 0.
                        let mut before = None;
                        if cold {
                            let mut pre = ctx.snapshot(&sides[si], true);
                            if matches!(sides[si].kind, SideKind::Packfs { .. }) {
                                pre.proc = Some(iostat::ProcIo::default());
                            }
                            before = Some(pre);
                            ctx.make_cold(&mut sides, si)
                                .with_context(|| format!("making side {} cold", sides[si].label))?;
                        }
                        let side = &sides[si];
                        let before = before.unwrap_or_else(|| ctx.snapshot(side, true));
                        let out = workload::execute(plan, side.root(&raw), threads);
                        let after = ctx.snapshot(side, false);
                        let is_raw = matches!(side.kind, SideKind::Raw { .. });
                        let r = make_run(
                            side,
                            *w,
                            threads,
                            repeat,
                            epoch,
                            cold,
                            out,
                            storage(&before, &after, *w, is_raw),
                        );
                        eprintln!(
                            "packfs bench: {:<8} {:<10} {:>3} thr  {} {}  {:.3} s{}",
                            r.side,
                            r.workload,
                            threads,
                            if cold { "cold" } else { "warm" },
                            epoch,
                            r.seconds,
                            if r.errors > 0 {
                                format!("  ({} errors)", r.errors)
                            } else {
                                String::new()
                            }
                        );
                        runs.push(r);
                    }
                }
            }
        }
    }
    report::fill_ratios(&mut runs, "raw");

    let rep = Report {
        schema_version: report::SCHEMA_VERSION,
        packfs_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        config: report::Config {
            raw: raw.display().to_string(),
            image: image.as_ref().map(|p| p.display().to_string()),
            workloads: plans.iter().map(|(w, _)| w.name().to_string()).collect(),
            threads: a.threads.clone(),
            repeat: a.repeat,
            epochs: a.epochs,
            seed: a.seed,
            import: a.import.clone(),
            samples: a.samples,
            sample_size: a.sample_size,
            sample_min_size: a.sample_min_size,
            emulate_latency: latency.map(|l| report::LatencyConfig {
                meta_us: l.meta_us,
                read_us: l.read_us,
            }),
            verified: !a.no_verify,
            cold_method: method.name().to_string(),
            cold_description: method.describe().to_string(),
        },
        host: report::Host {
            kernel: kernel_release(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
        },
        tree: report::TreeInfo {
            files: ctx.tree.count(Kind::File),
            dirs: ctx.tree.count(Kind::Dir),
            symlinks: ctx.tree.count(Kind::Symlink),
            other: ctx.tree.count(Kind::Other),
            file_bytes: ctx.tree.file_bytes(),
        },
        sides: sides.iter().map(|s| side_info(&ctx, s)).collect(),
        runs,
    };
    // Unmount before writing anything, so a failure below leaves no mount.
    drop(sides);

    print!("{}", report::table(&rep));
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&rep).context("serialising the report")?;
        std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        std::fs::write(p, plot::svg(&rep)).with_context(|| format!("writing {}", p.display()))?;
    }
    let failed: u64 = rep.runs.iter().map(|r| r.errors).sum();
    if failed > 0 {
        let first = rep
            .runs
            .iter()
            .find_map(|r| r.first_error.as_deref())
            .unwrap_or("");
        eprintln!("packfs bench: {failed} operations failed (first: {first}); the times above are not comparable");
        return Ok(1);
    }
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
fn make_run(
    side: &Side,
    w: Workload,
    threads: usize,
    repeat: usize,
    epoch: usize,
    cold: bool,
    mut out: Outcome,
    storage: report::Storage,
) -> Run {
    let secs = out.seconds.max(1e-9);
    let latency_us =
        workload::percentiles(&mut out.latencies_ns).map(|(p50, p99, max)| report::Percentiles {
            p50: p50 as f64 / 1e3,
            p99: p99 as f64 / 1e3,
            max: max as f64 / 1e3,
        });
    Run {
        side: side.label.clone(),
        workload: w.name().to_string(),
        threads,
        repeat,
        epoch,
        cold,
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
