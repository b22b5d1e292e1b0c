//! The timed part: each workload as a plan of items (directories, files,
//! byte ranges, interpreter runs) executed by N threads pulling the next
//! item from a shared counter.
//!
//! Plans are built once from the raw tree's listing and replayed under each
//! side's root, so every side does exactly the same syscalls in the same
//! order (up to thread interleaving). The workload code counts what it
//! issues (files and directories opened, stat calls) because that is what a
//! raw tree makes the storage underneath serve one by one; per-item latency
//! is measured around the whole item (open..close) since that is what an
//! application waiting on one sample experiences.

use super::args::Workload;
use super::error::BenchError;
use super::rng::Rng;
use super::tree::Tree;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Keeps the sample offsets independent of the shuffle order for one seed.
const SAMPLE_STREAM: u64 = 0xA5A5_5A5A_0000_5A4D;

pub enum Plan {
    /// List each directory and lstat every entry in it.
    Walk { dirs: Vec<PathBuf> },
    /// Read each file to its end.
    Read { files: Vec<PathBuf> },
    /// Read `len` bytes at `offset` of `file` (opened for each read, as a
    /// data loader fetching one record does).
    Sample { reads: Vec<(PathBuf, u64, u64)> },
    /// Run the interpreter once per thread.
    Import { python: PathBuf, code: String },
}

pub struct PlanOptions<'a> {
    pub seed: u64,
    pub samples: usize,
    pub sample_size: u64,
    pub sample_min_size: u64,
    pub python: &'a Path,
    pub modules: &'a [String],
    /// The image as given (`grouped` reads its layout).
    pub image: Option<&'a Path>,
    pub group_bytes: u64,
    pub window: usize,
}

impl Plan {
    pub fn new(w: Workload, tree: &Tree, o: &PlanOptions) -> Result<Plan, BenchError> {
        Ok(match w {
            Workload::Walk => Plan::Walk {
                dirs: tree.dirs().map(|e| e.rel.clone()).collect(),
            },
            Workload::Sequential => Plan::Read {
                files: tree.files().map(|e| e.rel.clone()).collect(),
            },
            Workload::Shuffle => {
                let mut files: Vec<PathBuf> = tree.files().map(|e| e.rel.clone()).collect();
                Rng::new(o.seed).shuffle(&mut files);
                Plan::Read { files }
            }
            Workload::Grouped => {
                let files: Vec<PathBuf> = tree.files().map(|e| e.rel.clone()).collect();
                let image = o.image.ok_or_else(|| {
                    BenchError::Usage(
                        "--workload grouped needs --image: the order follows its layout".into(),
                    )
                })?;
                let extents = super::grouped::extents(image, &files)?;
                let files = super::grouped::order(
                    files,
                    &extents,
                    o.group_bytes,
                    o.window,
                    &mut Rng::new(o.seed),
                );
                Plan::Read { files }
            }
            Workload::Sample => {
                let mut big: Vec<(&Path, u64)> = tree
                    .files()
                    .filter(|e| e.size >= o.sample_min_size && e.size > 0)
                    .map(|e| (e.rel.as_path(), e.size))
                    .collect();
                if big.is_empty() {
                    let mut all: Vec<(&Path, u64)> = tree
                        .files()
                        .filter(|e| e.size > 0)
                        .map(|e| (e.rel.as_path(), e.size))
                        .collect();
                    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                    all.truncate(all.len().div_ceil(10));
                    big = all;
                }
                if big.is_empty() {
                    return Err(BenchError::Refused(
                        "workload sample: the tree has no non-empty file to sample".into(),
                    ));
                }
                let mut rng = Rng::new(o.seed ^ SAMPLE_STREAM);
                let reads = (0..o.samples)
                    .map(|_| {
                        let (p, size) = big[rng.below(big.len() as u64) as usize];
                        let len = o.sample_size.min(size);
                        let offset = rng.below(size - len + 1);
                        (p.to_path_buf(), offset, len)
                    })
                    .collect();
                Plan::Sample { reads }
            }
            Workload::Import => Plan::Import {
                python: o.python.to_path_buf(),
                code: format!("import {}", o.modules.join(", ")),
            },
        })
    }

    /// Items one epoch runs with `threads` threads.
    pub fn items(&self, threads: usize) -> usize {
        match self {
            Plan::Walk { dirs } => dirs.len(),
            Plan::Read { files } => files.len(),
            Plan::Sample { reads } => reads.len(),
            Plan::Import { .. } => threads,
        }
    }
}

/// What one epoch did and how long it took.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seconds: f64,
    /// Entries stat'ed (walk), files read (sequential, shuffle), ranges read
    /// (sample) or interpreters run (import).
    pub items: u64,
    pub bytes: u64,
    /// Per-item latency in nanoseconds, unsorted.
    pub latencies_ns: Vec<u64>,
    pub files_opened: u64,
    pub stat_calls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

#[derive(Default)]
struct Local {
    items: u64,
    bytes: u64,
    lat: Vec<u64>,
    opened: u64,
    stats: u64,
    errors: u64,
    first_error: Option<String>,
    buf: Vec<u8>,
}

impl Local {
    fn fail(&mut self, what: &Path, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{}: {e}", what.display()));
        }
    }
}

/// Runs one epoch of `plan` under `root` with `threads` threads.
pub fn execute(plan: &Plan, root: &Path, threads: usize) -> Outcome {
    let n = plan.items(threads);
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let locals: Vec<Local> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut l = Local {
                        buf: vec![0; 256 << 10],
                        ..Local::default()
                    };
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        run_item(plan, i, root, &mut l);
                    }
                    l
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut o = Outcome {
        seconds,
        ..Outcome::default()
    };
    for l in locals {
        o.items += l.items;
        o.bytes += l.bytes;
        o.latencies_ns.extend(l.lat);
        o.files_opened += l.opened;
        o.stat_calls += l.stats;
        o.errors += l.errors;
        if o.first_error.is_none() {
            o.first_error = l.first_error;
        }
    }
    o
}

fn run_item(plan: &Plan, i: usize, root: &Path, l: &mut Local) {
    match plan {
        Plan::Walk { dirs } => walk_dir(&root.join(&dirs[i]), l),
        Plan::Read { files } => {
            let p = root.join(&files[i]);
            let t = Instant::now();
            match read_whole(&p, &mut l.buf) {
                Ok(n) => {
                    l.lat.push(t.elapsed().as_nanos() as u64);
                    l.items += 1;
                    l.bytes += n;
                }
                Err(e) => l.fail(&p, e),
            }
            l.opened += 1;
        }
        Plan::Sample { reads } => {
            let (rel, offset, len) = &reads[i];
            let p = root.join(rel);
            let t = Instant::now();
            match read_range(&p, *offset, *len as usize, &mut l.buf) {
                Ok(n) => {
                    l.lat.push(t.elapsed().as_nanos() as u64);
                    l.items += 1;
                    l.bytes += n;
                }
                Err(e) => l.fail(&p, e),
            }
            l.opened += 1;
        }
        Plan::Import { python, code } => {
            let exe = root.join(python);
            let t = Instant::now();
            let out = Command::new(&exe)
                .arg("-c")
                .arg(code)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output();
            match out {
                Ok(o) if o.status.success() => {
                    l.lat.push(t.elapsed().as_nanos() as u64);
                    l.items += 1;
                }
                Ok(o) => {
                    let err = String::from_utf8_lossy(&o.stderr);
                    let last = err.lines().last().unwrap_or("").to_string();
                    l.fail(&exe, format!("`-c {code:?}` failed ({}): {last}", o.status))
                }
                Err(e) => l.fail(&exe, e),
            }
        }
    }
}

/// Lists `dir` and lstats each entry (fstatat on the open directory, as
/// `find` and `os.scandir` do). Each lstat is one item.
fn walk_dir(dir: &Path, l: &mut Local) {
    l.opened += 1;
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return l.fail(dir, e),
    };
    for e in rd {
        let e = match e {
            Ok(e) => e,
            Err(err) => return l.fail(dir, err),
        };
        let t = Instant::now();
        l.stats += 1;
        match e.metadata() {
            Ok(_) => {
                l.lat.push(t.elapsed().as_nanos() as u64);
                l.items += 1;
            }
            Err(err) => l.fail(&e.path(), err),
        }
    }
}

fn read_whole(p: &Path, buf: &mut [u8]) -> std::io::Result<u64> {
    let mut f = std::fs::File::open(p)?;
    let mut n = 0u64;
    loop {
        match f.read(buf) {
            Ok(0) => return Ok(n),
            Ok(k) => n += k as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn read_range(p: &Path, offset: u64, len: usize, buf: &mut Vec<u8>) -> std::io::Result<u64> {
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let f = std::fs::File::open(p)?;
    let mut done = 0usize;
    while done < len {
        match f.read_at(&mut buf[done..len], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done as u64)
}

/// (p50, p99, max) of `v` in nanoseconds, by nearest rank.
pub fn percentiles(v: &mut [u64]) -> Option<(u64, u64, u64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some((rank(0.50), rank(0.99), v[v.len() - 1]))
}
