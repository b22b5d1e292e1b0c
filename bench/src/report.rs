//! The results: the JSON document (schema in docs/BENCH_JSON.md, versioned
//! by [`SCHEMA_VERSION`]) and the table printed on stdout.
//!
//! Every run is kept (no averaging away of repeats), and each mounted run
//! carries its ratio to the raw run of the same workload, thread count,
//! repetition and epoch, so a reader never pairs a cold run with a warm one.

use serde::{Deserialize, Serialize};

/// Bump on any change a consumer could notice (renamed, removed or retyped
/// field); adding a field does not bump it.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub packfs_version: String,
    pub created_unix: u64,
    pub config: Config,
    pub host: Host,
    pub tree: TreeInfo,
    pub sides: Vec<SideInfo>,
    pub runs: Vec<Run>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Config {
    pub raw: String,
    pub image: Option<String>,
    pub workloads: Vec<String>,
    pub threads: Vec<usize>,
    pub repeat: usize,
    pub epochs: usize,
    pub seed: u64,
    pub import: Vec<String>,
    pub samples: usize,
    pub sample_size: u64,
    pub sample_min_size: u64,
    /// `grouped`'s group span and window (absent from older reports).
    #[serde(default)]
    pub group_bytes: u64,
    #[serde(default)]
    pub window: usize,
    pub emulate_latency: Option<LatencyConfig>,
    /// False with --no-verify: nothing checked that the sides hold the same data.
    pub verified: bool,
    pub cold_method: String,
    pub cold_description: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct LatencyConfig {
    pub meta_us: u64,
    pub read_us: u64,
    /// `--client-cache`: bytes of pages the passthrough keeps in place of
    /// the kernel's page cache (0: none); null: the kernel's page cache.
    #[serde(default)]
    pub client_cache_bytes: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Host {
    pub kernel: String,
    pub cpus: usize,
    pub root: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct TreeInfo {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub other: u64,
    pub file_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SideInfo {
    pub label: String,
    /// "raw", "packfs" (mounted by the bench) or "external" (--mountpoint).
    pub kind: String,
    /// Where the workloads read (a scratch mountpoint for packfs's own mount).
    pub path: String,
    /// What a cold run of this side has had evicted or refreshed.
    pub cold: String,
    /// Where `storage` counters of this side come from.
    pub storage_source: String,
    /// The block cache budget of packfs's own mount, as the daemon reports
    /// it; null for other sides or when it did not answer.
    #[serde(default)]
    pub block_cache_bytes: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Run {
    pub side: String,
    pub workload: String,
    pub threads: usize,
    /// 1-based.
    pub repeat: usize,
    /// 1-based; epoch 1 is cold when `cold` is true.
    pub epoch: usize,
    pub cold: bool,
    pub seconds: f64,
    /// Entries stat'ed (walk), files read (sequential, shuffle), ranges read
    /// (sample), interpreters run (import).
    pub items: u64,
    pub files_per_sec: f64,
    pub bytes: u64,
    pub mb_per_sec: f64,
    pub latency_us: Option<Percentiles>,
    /// seconds / seconds of the raw run with the same workload, threads,
    /// repeat and epoch; null on the raw side.
    pub ratio_vs_raw: Option<f64>,
    pub ops: Ops,
    pub storage: Storage,
    pub errors: u64,
    pub first_error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Operations the workload issued (on every side the same, up to errors).
#[derive(Debug, Serialize, Deserialize)]
pub struct Ops {
    pub files_opened: u64,
    pub stat_calls: u64,
}

/// I/O that reached the storage under the side during the run.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Storage {
    pub read_bytes: Option<u64>,
    pub read_syscalls: Option<u64>,
    pub device_reads: Option<u64>,
    pub device_read_bytes: Option<u64>,
    pub passthrough: Option<PassthroughOps>,
    /// Requests to a remote image (`--image s3://...`), from the daemon's counters.
    #[serde(default)]
    pub remote: Option<RemoteOps>,
}

/// What packfs's mount of a remote image asked of the server during a run.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct RemoteOps {
    /// GET requests sent (retries included).
    pub get_requests: u64,
    /// HEAD requests (one per open of the object: a cold run's mount).
    pub head_requests: u64,
    /// Bytes of object data received.
    pub bytes_fetched: u64,
    /// Bytes found in the node-local disk cache (`--disk-cache`) instead.
    #[serde(default)]
    pub bytes_from_disk: u64,
    /// Ranges fetched ahead of any reader.
    pub ranges_ahead: u64,
    /// Mean time from sending a GET to its response headers, ms.
    pub ttfb_ms_mean: f64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PassthroughOps {
    pub meta_ops: u64,
    pub reads: u64,
    pub read_bytes: u64,
}

/// Fills `ratio_vs_raw` of every non-raw run.
pub fn fill_ratios(runs: &mut [Run], raw_label: &str) {
    let raw: Vec<(String, usize, usize, usize, f64)> = runs
        .iter()
        .filter(|r| r.side == raw_label)
        .map(|r| (r.workload.clone(), r.threads, r.repeat, r.epoch, r.seconds))
        .collect();
    for r in runs.iter_mut().filter(|r| r.side != raw_label) {
        r.ratio_vs_raw = raw
            .iter()
            .find(|(w, t, rep, e, _)| {
                *w == r.workload && *t == r.threads && *rep == r.repeat && *e == r.epoch
            })
            .and_then(|&(.., s)| (s > 0.0).then(|| r.seconds / s));
    }
}

fn opt(v: Option<u64>, scale: f64, prec: usize) -> String {
    match v {
        Some(v) if scale == 1.0 => v.to_string(),
        Some(v) => format!("{:.prec$}", v as f64 / scale),
        None => "-".into(),
    }
}

/// Columns of the table; the ones not [`Column::narrow`] are shown with
/// `--wide` only, so that the default table fits 100 columns (the JSON
/// always has every value).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    Side,
    Workload,
    Threads,
    Epoch,
    Seconds,
    FilesPerSec,
    MbPerSec,
    P50,
    P99,
    VsRaw,
    Opened,
    Stats,
    RdMb,
    RdCalls,
    DevRds,
}

impl Column {
    const ALL: [Column; 15] = [
        Column::Side,
        Column::Workload,
        Column::Threads,
        Column::Epoch,
        Column::Seconds,
        Column::FilesPerSec,
        Column::MbPerSec,
        Column::P50,
        Column::P99,
        Column::VsRaw,
        Column::Opened,
        Column::Stats,
        Column::RdMb,
        Column::RdCalls,
        Column::DevRds,
    ];

    fn head(self) -> &'static str {
        match self {
            Column::Side => "side",
            Column::Workload => "workload",
            Column::Threads => "thr",
            Column::Epoch => "epoch",
            Column::Seconds => "seconds",
            Column::FilesPerSec => "files/s",
            Column::MbPerSec => "MB/s",
            Column::P50 => "p50 ms",
            Column::P99 => "p99 ms",
            Column::VsRaw => "vs raw",
            Column::Opened => "opened",
            Column::Stats => "stats",
            Column::RdMb => "rd MB",
            Column::RdCalls => "rd calls",
            Column::DevRds => "dev rds",
        }
    }

    /// In the default table: the median (the p99 is kept), the stat count
    /// (equal on every side) and the device-wide reads (noisy) are not.
    fn narrow(self) -> bool {
        !matches!(self, Column::P50 | Column::Stats | Column::DevRds)
    }

    fn left_aligned(self) -> bool {
        matches!(self, Column::Side | Column::Workload | Column::Epoch)
    }
}

/// The table on stdout, one line per run, then the notes a reader needs.
/// `wide`: every column (`--wide`); else the narrow set, and no thread
/// column when a single count was run.
pub fn table(rep: &Report, wide: bool) -> String {
    let cols: Vec<Column> = Column::ALL
        .into_iter()
        .filter(|&c| wide || (c.narrow() && (c != Column::Threads || rep.config.threads.len() > 1)))
        .collect();
    let mut rows: Vec<Vec<String>> = vec![cols.iter().map(|c| c.head().to_string()).collect()];
    rows.extend(rep.runs.iter().map(|r| row(rep, r, &cols)));
    let mut out = aligned(&rows, &cols);
    out.push_str(&notes(rep));
    out
}

/// The cells of run `r` in columns `cols`.
fn row(rep: &Report, r: &Run, cols: &[Column]) -> Vec<String> {
    let epoch = format!(
        "{}{}{}",
        if r.cold { "cold" } else { "warm" },
        if rep.config.epochs > 1 {
            format!(" {}", r.epoch)
        } else {
            String::new()
        },
        if rep.config.repeat > 1 {
            format!(" r{}", r.repeat)
        } else {
            String::new()
        },
    );
    let (p50, p99) = match &r.latency_us {
        Some(p) => (format!("{:.3}", p.p50 / 1e3), format!("{:.3}", p.p99 / 1e3)),
        None => ("-".into(), "-".into()),
    };
    let s = &r.storage;
    let (rd_bytes, rd_calls) = match (&s.remote, &s.passthrough) {
        (Some(r), _) => (Some(r.bytes_fetched), Some(r.get_requests)),
        (None, Some(p)) => (Some(p.read_bytes), Some(p.reads)),
        (None, None) => (s.read_bytes, s.read_syscalls),
    };
    let cell = |c: Column| match c {
        Column::Side => r.side.clone(),
        Column::Workload => r.workload.clone(),
        Column::Threads => r.threads.to_string(),
        Column::Epoch => epoch.clone(),
        Column::Seconds => format!("{:.3}", r.seconds),
        Column::FilesPerSec => format!("{:.0}", r.files_per_sec),
        Column::MbPerSec => format!("{:.1}", r.mb_per_sec),
        Column::P50 => p50.clone(),
        Column::P99 => p99.clone(),
        Column::VsRaw => r.ratio_vs_raw.map_or("-".into(), |x| format!("{x:.2}x")),
        Column::Opened => r.ops.files_opened.to_string(),
        Column::Stats => r.ops.stat_calls.to_string(),
        Column::RdMb => opt(rd_bytes, 1e6, 1),
        Column::RdCalls => opt(rd_calls, 1.0, 0),
        Column::DevRds => opt(s.device_reads, 1.0, 0),
    };
    cols.iter().map(|&c| cell(c)).collect()
}

/// `rows` (the first is the heading, underlined) in columns as wide as
/// their widest cell, two spaces apart, aligned as `cols` says.
fn aligned(rows: &[Vec<String>], cols: &[Column]) -> String {
    let widths: Vec<usize> = (0..cols.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if cols[c].left_aligned() {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    out
}

/// What a reader of the table needs to know below it: how runs were made
/// cold, each side's path and counters, emulated latency, what the
/// columns mean for a remote image, and a warning when nothing was
/// verified.
fn notes(rep: &Report) -> String {
    let mut out = format!(
        "\ncold runs: {} ({})\n",
        rep.config.cold_method, rep.config.cold_description
    );
    for s in &rep.sides {
        // The method was said just above: each side adds only what is its own.
        let own = s
            .cold
            .strip_prefix(rep.config.cold_description.as_str())
            .map(|rest| rest.trim_start_matches("; "))
            .unwrap_or(&s.cold);
        let cold = match own.is_empty() {
            true => String::new(),
            false => format!("; cold: {own}"),
        };
        let block_cache = match s.block_cache_bytes {
            Some(b) => format!("; block cache {}", crate::size::human(b)),
            None => String::new(),
        };
        out.push_str(&format!(
            "  {}: {}{cold}{block_cache}; storage counters: {}\n",
            s.label, s.path, s.storage_source
        ));
    }
    if let Some(l) = &rep.config.emulate_latency {
        out.push_str(&format!(
            "emulated latency: {} us per metadata op, {} us per read (rd MB / rd calls = passthrough reads of the storage); client cache of file data: {}\n",
            l.meta_us,
            l.read_us,
            match l.client_cache_bytes {
                None => "the kernel's page cache, unbounded".to_string(),
                Some(0) => "none (direct I/O)".to_string(),
                Some(b) => format!(
                    "{} in the passthrough (direct I/O, no page cache)",
                    crate::size::human(b)
                ),
            }
        ));
    }
    if rep.runs.iter().any(|r| r.storage.remote.is_some()) {
        out.push_str(&remote_notes(rep));
    }
    out.push_str("vs raw = seconds / raw seconds of the same workload, threads and epoch (below 1 = faster than raw)\n");
    if !rep.config.verified {
        out.push_str("WARNING: --no-verify: the sides were not checked to hold the same files\n");
    }
    out
}

/// The notes of a run on a remote image: what rd MB and rd calls count,
/// and the bytes each run found in the `--disk-cache`.
fn remote_notes(rep: &Report) -> String {
    let mut out = String::from(
        "remote image: rd MB / rd calls of packfs = bytes fetched / GET requests sent\n",
    );
    let disk: Vec<String> = rep
        .runs
        .iter()
        .filter_map(|r| Some((r, r.storage.remote.as_ref()?)))
        .filter(|(_, o)| o.bytes_from_disk > 0)
        .map(|(r, o)| {
            format!(
                "{} {} epoch {}: {:.1} MB",
                r.side,
                r.workload,
                r.epoch,
                o.bytes_from_disk as f64 / 1e6
            )
        })
        .collect();
    if !disk.is_empty() {
        out.push_str(&format!(
            "read from the --disk-cache instead of the network: {}\n",
            disk.join("; ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::args::{self, Workload};
    use super::super::assemble;
    use super::super::grid::Cell;
    use super::super::workload::Outcome;
    use super::*;

    /// A report with the widest values a large real run gives: the longest
    /// workload name, an hour-long epoch over ten million files and 100 GB,
    /// second-long items.
    fn wide_report(argv: &[&str]) -> Report {
        let a = args::parse(argv);
        let mut runs = Vec::new();
        for side in 0..2 {
            for epoch in 1..=2 {
                let cell = Cell {
                    plan: 0,
                    threads: 16,
                    repeat: 1,
                    side,
                    epoch,
                };
                let out = Outcome {
                    seconds: 3600.123,
                    items: 9_999_999,
                    bytes: 99_999_000_000,
                    latencies_ns: vec![123_456_789, 1_234_567_890],
                    files_opened: 9_999_999,
                    stat_calls: 9_999_999,
                    ..Outcome::default()
                };
                let storage = Storage {
                    read_bytes: Some(99_999_000_000),
                    read_syscalls: Some(9_999_999),
                    device_reads: Some(9_999_999),
                    ..Storage::default()
                };
                let label = ["raw", "kernel"][side];
                runs.push(assemble::make_run(
                    label,
                    Workload::Sequential,
                    cell,
                    out,
                    storage,
                ));
            }
        }
        assemble::example(&a, runs)
    }

    #[test]
    fn the_default_table_fits_100_columns_and_wide_has_every_column() {
        let rep = wide_report(&["--raw", "/raw"]);
        let narrow = table(&rep, false);
        for line in narrow.lines().take(rep.runs.len() + 2) {
            assert!(
                line.chars().count() <= 100,
                "{} columns:\n{narrow}",
                line.len()
            );
        }
        assert!(
            !narrow.contains("p50 ms") && narrow.contains("p99 ms"),
            "{narrow}"
        );
        let wide = table(&rep, true);
        for c in Column::ALL {
            assert!(wide.lines().next().unwrap().contains(c.head()), "{wide}");
        }
        // Several thread counts: the column is back.
        let rep = wide_report(&["--raw", "/raw", "--threads", "1,16"]);
        assert!(table(&rep, false).lines().next().unwrap().contains(" thr "));
    }

    #[test]
    fn how_runs_were_made_cold_is_said_once() {
        let rep = wide_report(&["--raw", "/raw"]);
        let t = table(&rep, false);
        let method = &rep.config.cold_description;
        assert_eq!(t.matches(method.as_str()).count(), 1, "{t}");
        assert_eq!(t.matches("cold runs:").count(), 1, "{t}");
        // What a side adds of its own is still there.
        assert!(t.contains("not refreshed"), "{t}");
    }

    #[test]
    fn the_notes_say_which_caches_stood_before_the_storage() {
        let mut rep = wide_report(&["--raw", "/raw"]);
        rep.sides[1].block_cache_bytes = Some(64 << 20);
        let latency = |client_cache_bytes| {
            Some(LatencyConfig {
                meta_us: 500,
                read_us: 100,
                client_cache_bytes,
            })
        };
        rep.config.emulate_latency = latency(None);
        let n = notes(&rep);
        assert!(n.contains("kernel: /k; cold: "), "{n}");
        assert!(
            n.contains("; block cache 64.0 MiB; storage counters"),
            "{n}"
        );
        assert!(
            n.contains("client cache of file data: the kernel's page cache"),
            "{n}"
        );
        rep.config.emulate_latency = latency(Some(0));
        assert!(notes(&rep).contains("client cache of file data: none (direct I/O)"));
        rep.config.emulate_latency = latency(Some(256 << 20));
        let n = notes(&rep);
        assert!(
            n.contains("client cache of file data: 256.0 MiB in the passthrough"),
            "{n}"
        );
    }
}
