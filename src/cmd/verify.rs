//! `packfs verify IMAGE|MANIFEST`: the whole image checked by
//! `mountfs::verify` (every table, block, hash, checksum and CRC), each
//! damaged path on stdout, one summary line, status 1 when anything is
//! damaged.

use crate::args::cli::RemoteArgs;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mountfs::error::FsError;
use mountfs::fs::PackFs;
use mountfs::open::{OpenOptions, Opener};
use mountfs::verify::{Damage, Progress};
use packfs_bench::size::human;
use std::io::IsTerminal;
use std::path::Path;

/// Enough to keep metadata and each thread's current fragment blocks hot;
/// every data block is decoded once whatever the budget.
const VERIFY_CACHE: usize = 256 << 20;

struct Bar(ProgressBar);

impl Progress for Bar {
    fn total(&self, bytes: u64) {
        self.0.set_length(bytes);
        self.0.set_draw_target(ProgressDrawTarget::stderr());
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

pub fn run(image: &Path, threads: usize, quiet: bool, remote: &RemoteArgs) -> anyhow::Result<i32> {
    let loc = crate::args::location(image)?;
    let options = |hash_records| OpenOptions {
        remote: remote.options(),
        hash_records,
        ..OpenOptions::new(VERIFY_CACHE)
    };
    let t = std::time::Instant::now();
    let mut damaged = Vec::new();
    // A damaged hash record is reported, then the image is checked
    // without it (its blocks' codecs and the tables still are).
    let opened = match Opener::new(options(true)).open(&loc) {
        Err(FsError::Damaged(m)) => {
            damaged.push(Damage {
                path: "(image)".into(),
                error: FsError::Damaged(m).to_string(),
            });
            match Opener::new(options(false)).open(&loc) {
                Ok(o) => o,
                Err(e) => {
                    // Damage that stops the image from opening at all.
                    for d in &damaged {
                        outln!(
                            "{}: DAMAGED: {}",
                            d.path,
                            crate::oserror::plain_text(&d.error)
                        );
                    }
                    return Err(e.into());
                }
            }
        }
        r => r?,
    };
    let fs = PackFs::new(opened.image, 0, 0);
    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let pb = ProgressBar::hidden();
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        Bar(pb)
    });
    let report = match &bar {
        Some(b) => mountfs::verify::verify(&fs, threads, b),
        None => mountfs::verify::verify(&fs, threads, &mountfs::verify::Quiet),
    };
    if let Some(b) = bar {
        b.0.finish_and_clear();
    }
    damaged.extend(report.damaged.iter().cloned());
    for d in &damaged {
        outln!(
            "{}: DAMAGED: {}",
            d.path,
            crate::oserror::plain_text(&d.error)
        );
    }
    let secs = t.elapsed().as_secs_f64();
    let checks = if report.hash_record {
        "hash record, codec checksums"
    } else {
        "no hash record; codec checksums and CRCs"
    };
    outln!(
        "{}: {} ({} files, {} entries, {}) checked in {secs:.1} s ({}/s; {checks}): {}",
        image.display(),
        if damaged.is_empty() { "ok" } else { "DAMAGED" },
        report.files,
        report.entries,
        human(report.bytes),
        human((report.bytes as f64 / secs.max(1e-9)) as u64),
        if damaged.is_empty() {
            "no damage found".to_string()
        } else {
            format!("{} problems", damaged.len())
        }
    );
    Ok(if damaged.is_empty() { 0 } else { 1 })
}
