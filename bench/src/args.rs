//! The `packfs bench` command line.
//!
//! Lists (`--workload`, `--threads`, `--import`) are comma-separated so one
//! invocation sweeps a grid; everything that changes what is measured is
//! echoed into the JSON `config` so a result file explains itself.

use super::error::BenchError;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// List every directory and lstat every entry.
    Walk,
    /// Read every regular file, in tree order.
    Sequential,
    /// Read every regular file in a random order fixed by --seed (a training epoch).
    Shuffle,
    /// Read every regular file in the layout-aware shuffle of
    /// packfs.torch.ShuffleSampler: files grouped by where their data lies
    /// in --image (--group-bytes), --window groups read at once (fixed by --seed).
    Grouped,
    /// Read random byte ranges of the large files.
    Sample,
    /// Run `<tree>/bin/python -c 'import MODULES'` (a venv tree).
    Import,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Walk => "walk",
            Workload::Sequential => "sequential",
            Workload::Shuffle => "shuffle",
            Workload::Grouped => "grouped",
            Workload::Sample => "sample",
            Workload::Import => "import",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColdMode {
    /// drop_caches when running as root, else posix_fadvise(DONTNEED).
    Auto,
    /// `sync; echo 3 > /proc/sys/vm/drop_caches` (root only; affects the whole machine).
    DropCaches,
    /// posix_fadvise(DONTNEED) on every raw file and on the image file.
    Fadvise,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The unpacked tree (the baseline).
    #[arg(long)]
    pub raw: PathBuf,
    /// The image of that tree; mounted by packfs for the run unless --mountpoint is given.
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// An existing mount of the image to measure, `PATH` or `LABEL=PATH`
    /// (e.g. `kernel=/mnt/sq`); repeatable. Disables packfs's own mount
    /// unless --self-mount.
    #[arg(long = "mountpoint", value_name = "[LABEL=]PATH")]
    pub mountpoints: Vec<String>,
    /// Mount the image with packfs as well when --mountpoint is given.
    #[arg(long)]
    pub self_mount: bool,
    /// Workloads to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "walk,sequential,shuffle,sample"
    )]
    pub workload: Vec<Workload>,
    /// Reader thread counts to sweep, comma-separated, each 1 to 1024 (for
    /// `import`: concurrent interpreters).
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = thread_count)]
    pub threads: Vec<usize>,
    /// Repetitions of each (side, workload, threads) cell, each starting cold.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub repeat: usize,
    /// Epochs per repetition: the first is cold, the rest warm.
    #[arg(long, default_value_t = 2, value_parser = at_least_one)]
    pub epochs: usize,
    /// Seed for the shuffle order, the sample offsets and the verified files.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// `grouped`: the span of the image whose files form one group (as the
    /// sampler's group_bytes).
    #[arg(long, default_value = "4M", value_parser = crate::size::parse_size)]
    pub group_bytes: u64,
    /// `grouped`: groups read at once (as the sampler's window). Each group
    /// being read keeps about one readahead window (128 KiB) of the image
    /// in use, so the reader's caches must hold WINDOW of them or the order
    /// costs the storage what a shuffle does (see --client-cache).
    #[arg(long, default_value_t = 64, value_parser = at_least_one)]
    pub window: usize,
    /// Modules for the `import` workload, comma-separated (e.g. numpy,pandas).
    #[arg(long, value_delimiter = ',')]
    pub import: Vec<String>,
    /// Interpreter for `import`, relative to the tree.
    #[arg(long, default_value = "bin/python")]
    pub python: PathBuf,
    /// Reads per `sample` epoch.
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    pub samples: usize,
    /// Bytes per `sample` read.
    #[arg(long, default_value = "64K", value_parser = crate::size::parse_size)]
    pub sample_size: u64,
    /// Files at least this large are sampled (if none is, the largest tenth are).
    #[arg(long, default_value = "1M", value_parser = crate::size::parse_size)]
    pub sample_min_size: u64,
    /// How cold runs are made cold.
    #[arg(long, value_enum, default_value = "auto")]
    pub cold: ColdMode,
    /// Run both sides through a passthrough FUSE layer that sleeps META_US per
    /// metadata operation and READ_US per read of the storage (models a
    /// network filesystem; see docs/BENCH_JSON.md).
    #[arg(long, value_name = "META_US[,READ_US]")]
    pub emulate_latency: Option<String>,
    /// With --emulate-latency: the client's cache of file data is SIZE
    /// bytes kept by the passthrough in 128 KiB chunks (least recently used
    /// evicted first; `none`: no cache), and the kernel's page cache keeps none of
    /// the files read through it (direct I/O), on both sides. Emulates a
    /// data set much larger than the client's memory, where every read the
    /// caches of this size and packfs's own --cache-size miss reaches the
    /// storage. Compare cold epochs: the kernel still caches the files
    /// packfs's mount serves. Default: the kernel's page cache, unbounded.
    #[arg(long, value_name = "SIZE|none", value_parser = client_cache)]
    pub client_cache: Option<ClientCache>,
    /// Write the results as JSON (schema: docs/BENCH_JSON.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a bar chart of the results as SVG (the name must end in .svg).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Every column in the table: also the median latency, the stat calls
    /// and the device's reads (the JSON always has them).
    #[arg(long)]
    pub wide: bool,
    /// Skip checking that the raw tree and the image hold the same files.
    #[arg(long)]
    pub no_verify: bool,
    /// FUSE session threads of packfs's own mount (default: as `packfs mount`).
    #[arg(long)]
    pub mount_threads: Option<usize>,
    /// Block cache of packfs's own mount (default: as `packfs mount`).
    #[arg(long, value_parser = crate::size::parse_size)]
    pub cache_size: Option<u64>,
    /// How packfs's own mount reads the image (`mount --io`).
    #[arg(long, value_enum)]
    pub mount_io: Option<mountfs::source::IoMode>,
    /// Do not time the raw tree (it is still scanned to plan the workloads
    /// and to verify the mounts); there are no ratios then. For comparing
    /// mounts or mount options with each other, e.g. the two --mount-io
    /// modes under --emulate-latency, where the raw side is the slow part.
    #[arg(long)]
    pub no_raw: bool,
}

/// A usage error found after clap (a combination of flags, a malformed
/// `--emulate-latency`): the CLI exits 2 for it, as for clap's own.
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(BenchError::Usage(format!($($t)*)))
    };
}

/// `--threads`: one count of the list, 1 to 1024.
fn thread_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n @ 1..=1024) => Ok(n),
        Ok(_) => Err("a thread count must be 1 to 1024".into()),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// `--client-cache`: a size, or `none` for no cache at all.
fn client_cache(s: &str) -> Result<ClientCache, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(ClientCache::Bounded(0));
    }
    crate::size::parse_size(s).map(ClientCache::Bounded)
}

/// A count that must be at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// An external mount named on the command line.
#[derive(Clone, Debug)]
pub struct External {
    pub label: String,
    pub path: PathBuf,
}

pub fn parse_mountpoint(spec: &str, index: usize) -> External {
    match spec.split_once('=') {
        Some((l, p)) if !l.is_empty() && !l.contains('/') => External {
            label: l.to_string(),
            path: PathBuf::from(p),
        },
        _ => External {
            label: if index == 0 {
                "mount".to_string()
            } else {
                format!("mount{}", index + 1)
            },
            path: PathBuf::from(spec),
        },
    }
}

/// What caches file data read through the latency-emulating passthrough.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientCache {
    /// The kernel's page cache, every page kept for the life of the mount.
    #[default]
    Kernel,
    /// No page cache; at most this many bytes of file data kept by the
    /// layer (`--client-cache SIZE`, 0 for `none`).
    Bounded(u64),
}

/// `--emulate-latency META_US[,READ_US]`; READ_US defaults to META_US.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Latency {
    pub meta_us: u64,
    pub read_us: u64,
    /// `--client-cache`: what caches the file data read through the layer.
    #[serde(skip)]
    pub client_cache: ClientCache,
}

impl Latency {
    pub fn parse(s: &str) -> Result<Self, BenchError> {
        let mut it = s.split(',').map(str::trim);
        let num = |v: Option<&str>, what: &str| -> Result<Option<u64>, BenchError> {
            v.map(|v| {
                v.parse::<u64>().map_err(|_| {
                    BenchError::Usage(format!(
                        "--emulate-latency {s:?}: {what} {v:?} is not a number of microseconds"
                    ))
                })
            })
            .transpose()
        };
        let meta = num(it.next(), "META_US")?.unwrap_or(0);
        let read = num(it.next(), "READ_US")?.unwrap_or(meta);
        if it.next().is_some() {
            usage!("--emulate-latency {s:?}: expected META_US[,READ_US]");
        }
        if meta > 10_000_000 || read > 10_000_000 {
            usage!("--emulate-latency {s:?}: more than 10 s per operation");
        }
        Ok(Latency {
            meta_us: meta,
            read_us: read,
            client_cache: ClientCache::Kernel,
        })
    }
    pub fn meta(&self) -> Duration {
        Duration::from_micros(self.meta_us)
    }
    pub fn read(&self) -> Duration {
        Duration::from_micros(self.read_us)
    }
}

/// Checks what clap cannot: combinations of flags. Every error is a
/// [`BenchError::Usage`].
pub fn validate(a: &BenchArgs) -> Result<(), BenchError> {
    if a.threads.is_empty() {
        usage!("--threads: name at least one thread count");
    }
    if a.workload.is_empty() {
        usage!("--workload: name at least one workload");
    }
    if a.workload.contains(&Workload::Import) && a.import.iter().all(|m| m.trim().is_empty()) {
        usage!("--workload import needs --import MODULE[,MODULE...]");
    }
    for m in &a.import {
        let ok = !m.is_empty()
            && m.split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
        if !ok {
            usage!("--import: {m:?} is not a Python module name");
        }
    }
    if a.image.is_none() && (a.mountpoints.is_empty() || a.self_mount) {
        usage!("--image is required (unless --mountpoint names the mounts to measure)");
    }
    if a.emulate_latency.is_some() && !a.mountpoints.is_empty() {
        usage!("--emulate-latency cannot be combined with --mountpoint: an existing mount does not read through the emulation layer");
    }
    if a.client_cache.is_some() && a.emulate_latency.is_none() {
        usage!("--client-cache needs --emulate-latency: it is the cache of the emulated network filesystem's client");
    }
    if a.client_cache.is_some() && a.mount_io == Some(mountfs::source::IoMode::Mmap) {
        usage!("--client-cache cannot be combined with --mount-io mmap: a memory map of the image is served from the kernel's page cache, which --client-cache keeps out");
    }
    if a.sample_size == 0 {
        usage!("--sample-size must be positive");
    }
    if let Some(p) = &a.plot {
        let svg = p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        if !svg {
            usage!(
                "--plot {}: the chart is written as SVG; name the file .svg (and convert it, e.g. rsvg-convert -o chart.png chart.svg)",
                p.display()
            );
        }
    }
    Ok(())
}

/// `packfs bench ARGS...` as clap parses it, for the phases' unit tests.
#[cfg(test)]
pub fn parse(argv: &[&str]) -> BenchArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }
    Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
        .unwrap()
        .a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_error(argv: &[&str]) -> String {
        match validate(&parse(argv)) {
            Err(e @ BenchError::Usage(_)) => e.to_string(),
            other => panic!("{argv:?}: not a usage error: {other:?}"),
        }
    }

    #[test]
    fn client_cache_is_a_size_or_none_and_needs_emulated_latency() {
        let lat = ["--raw", "r", "--image", "i", "--emulate-latency", "500,100"];
        let cache = |v: &str| {
            let argv: Vec<&str> = lat.iter().copied().chain(["--client-cache", v]).collect();
            let a = parse(&argv);
            assert!(validate(&a).is_ok());
            a.client_cache
        };
        assert_eq!(parse(&lat).client_cache, None);
        assert_eq!(cache("none"), Some(ClientCache::Bounded(0)));
        assert_eq!(cache("64M"), Some(ClientCache::Bounded(64 << 20)));

        let e = usage_error(&["--raw", "r", "--image", "i", "--client-cache", "1G"]);
        assert!(e.contains("--client-cache needs --emulate-latency"), "{e}");
        let argv: Vec<&str> = lat
            .iter()
            .copied()
            .chain(["--client-cache", "1G", "--mount-io", "mmap"])
            .collect();
        let e = usage_error(&argv);
        assert!(e.contains("cannot be combined with --mount-io mmap"), "{e}");
    }
}
