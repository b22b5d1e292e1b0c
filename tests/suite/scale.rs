//! Packing at scale from a stream: a tar of two million tiny files made on
//! the fly (`packfs_testkit::tarstream`, never stored) is packed from stdin,
//! then the image is checked against the stream by two readers nobody else
//! tests at this size: the kernel lists every directory through a loop
//! mount (and reads a sample of files), and packfs's own reader lists every
//! directory and reads every file. Names and contents are functions of a
//! file's index, so the check needs no copy of the stream. The same stream
//! packed under a memory budget far below what its namespace takes in
//! memory goes through the spill to sorted runs on disk, and is checked
//! the same way.

use crate::common::*;
use mountfs::cache::BlockCache;
use mountfs::fs::{FileKind, PackFs};
use mountfs::source::FileSource;
use mountfs::squashfs::SquashFs;
use packfs_testkit::tarstream::{self, Layout};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// The stream's size: two million files in 2,000 directories.
const LAYOUT: Layout = Layout {
    files: 2_000_000,
    per_dir: 1000,
};

/// Packs the stream of `layout` from stdin into `img`, with `extra`
/// arguments; returns the summary line and the log.
fn pack_stream(layout: Layout, img: &std::path::Path, extra: &[&str]) -> String {
    let mut child = Command::new(packfs_bin())
        .args(["pack", "-", "-o"])
        .arg(img)
        .args(extra)
        .env("RUST_LOG", "packer::archive=debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run packfs pack");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut stdin);
        tarstream::write(layout, &mut w)?;
        w.flush()
    });
    let out = child.wait_with_output().expect("wait for packfs pack");
    writer.join().unwrap().expect("the stream goes to packfs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "pack failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned() + &stderr
}

/// The sorted names of directory `d` of `layout`.
fn names_in(layout: Layout, d: u64) -> Vec<String> {
    let first = d * layout.per_dir;
    let last = (first + layout.per_dir).min(layout.files);
    // Zero-padded names: index order is name order.
    (first..last).map(|i| layout.file_name(i)).collect()
}

/// The peak memory the summary line reports, in MiB.
fn peak_mib(summary: &str) -> f64 {
    let at = summary
        .find("peak memory ")
        .expect("the summary says the peak")
        + 12;
    let rest = &summary[at..];
    let (n, unit) = rest.split_once(' ').expect("a number and a unit");
    let n: f64 = n.parse().expect("a number");
    match &unit[..3] {
        "GiB" => n * 1024.0,
        "MiB" => n,
        _ => n / 1024.0,
    }
}

#[test]
fn a_streamed_tar_of_two_million_files_packs_and_reads_back_whole() {
    let layout = LAYOUT;
    let t = scratch();
    let img = t.path().join("scale.sqfs");
    let summary = pack_stream(layout, &img, &[]);
    assert!(!summary.contains("namespace spilled"), "{summary}");
    reads_back_whole(layout, &img, &summary);
}

#[test]
fn a_streamed_tar_of_two_million_files_spills_under_a_small_budget_and_reads_back_whole() {
    let layout = LAYOUT;
    let t = scratch();
    let img = t.path().join("spilled.sqfs");
    let summary = pack_stream(layout, &img, &["--memory", "32M"]);
    assert!(summary.contains("namespace spilled"), "{summary}");
    // In memory the namespace alone takes over 400 MiB at this size.
    let peak = peak_mib(&summary);
    assert!(peak < 300.0, "peak memory {peak} MiB: {summary}");
    // Nothing is left beside the image but the image.
    let left: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["spilled.sqfs"]);
    reads_back_whole(layout, &img, &summary);
}

/// Checks the image `img` packed from the stream of `layout` (whose
/// summary line is `summary`) against the stream, through packfs's reader
/// and the kernel's.
fn reads_back_whole(layout: Layout, img: &std::path::Path, summary: &str) {
    let entries = 1 + layout.dirs() + layout.files;
    assert!(
        summary.contains(&format!("packed {entries} entries")),
        "{summary}"
    );
    assert!(summary.contains("entries/s") && summary.contains("peak memory"));

    // packfs's reader: every directory listed, every file read.
    let sq = SquashFs::open(
        Box::new(FileSource::open(img).unwrap()),
        Arc::new(BlockCache::new(64 << 20)),
    )
    .unwrap();
    let fs = PackFs::new(sq, 0, 0);
    let root = fs.resolve(b"").unwrap();
    let top: Vec<String> = fs
        .list(root.node)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    let want_top: Vec<String> = (0..layout.dirs()).map(Layout::dir_name).collect();
    assert_eq!(top, want_top);
    let mut want = Vec::new();
    for (d, dir) in fs.list(root.node).unwrap().into_iter().enumerate() {
        let listing = fs.list(dir.node).unwrap();
        let names: Vec<String> = listing
            .iter()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .collect();
        assert_eq!(names, names_in(layout, d as u64), "listing of {}", top[d]);
        for (k, e) in listing.iter().enumerate() {
            let i = d as u64 * layout.per_dir + k as u64;
            assert_eq!(e.kind, FileKind::File);
            tarstream::content(i, &mut want);
            let mut got = Vec::new();
            fs.read_all(e.node, |b| {
                got.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
            assert!(got == want, "content of {}", layout.file_path(i));
        }
    }

    // The kernel's reader: every directory listed, a sample of files read.
    let Some(m) = KernelMount::new(img) else {
        return;
    };
    let mut listed = 0u64;
    for d in 0..layout.dirs() {
        let dir = m.path().join(Layout::dir_name(d));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, names_in(layout, d), "kernel listing of {d}");
        listed += names.len() as u64;
    }
    assert_eq!(listed, layout.files);
    for i in (0..layout.files).step_by(9973) {
        tarstream::content(i, &mut want);
        let got = std::fs::read(m.path().join(layout.file_path(i))).unwrap();
        assert!(got == want, "kernel read of {}", layout.file_path(i));
    }
}
