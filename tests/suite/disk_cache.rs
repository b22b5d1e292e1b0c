//! The node-local disk cache of remote images, against
//! `scripts/range_server.py`, whose counters say how many bytes left the
//! server. Byte counts, never timings: the second shuffled epoch over an
//! image four times larger than the range cache is fetched again without
//! the disk cache and read from disk with it; damaged cache files are
//! refetched, never served; a replaced object is never served from the
//! cache; two processes share one cache directory; the cache stays within
//! its size.

use crate::common::servers::RangeServer;
use crate::common::*;
use mountfs::fs::PackFs;
use mountfs::location::ImageLocation;
use mountfs::open::{AnyImage, OpenOptions, Opener};
use mountfs::remote::disk_cache::DiskCache;
use mountfs::remote::RemoteOptions;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Files of the image, and their bytes.
type Files = Vec<(String, Vec<u8>)>;

const RANGE: u64 = 64 << 10;
const RANGE_CACHE: u64 = 1 << 20;

/// A tree of 300 incompressible files of 15,000 bytes (4.5 MB, about four
/// times the range cache), packed without fragments; served from `root`.
fn image(root: &Path, name: &str, seed: u64) -> Files {
    let src = root.join(format!("{name}.src"));
    std::fs::create_dir_all(&src).unwrap();
    let files: Files = (0..300)
        .map(|i| (format!("f{i:03}"), bytes(seed + i, 15_000, false)))
        .collect();
    for (n, d) in &files {
        std::fs::write(src.join(n), d).unwrap();
    }
    pack(&src, &root.join(name), &["--no-fragments"]);
    files
}

fn open(url: &str, disk: Option<&Arc<DiskCache>>) -> PackFs<AnyImage> {
    let remote = RemoteOptions {
        range_size: RANGE,
        cache_bytes: RANGE_CACHE,
        disk_cache: disk.cloned(),
        ..Default::default()
    };
    let loc = ImageLocation::parse(url).unwrap();
    // A small block cache: a second epoch must go to the source.
    let o = OpenOptions {
        remote,
        ..OpenOptions::new(256 << 10)
    };
    PackFs::new(Opener::new(o).open(&loc).unwrap().image, 0, 0)
}

/// Reads every file in an order shuffled by `seed`, checking its bytes.
fn epoch(fs: &PackFs<AnyImage>, files: &Files, seed: u64) {
    let mut order: Vec<usize> = (0..files.len()).collect();
    let mut x = seed | 1;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for i in order {
        let (name, data) = &files[i];
        let node = fs.resolve(name.as_bytes()).unwrap().node;
        let got = fs.read(node, 0, 1 << 20).unwrap();
        assert!(got == *data, "{name}: wrong bytes");
    }
}

/// Bytes the server sent since the last call.
fn sent(server: &RangeServer, last: &mut u64) -> u64 {
    let now = server.stats().1;
    let d = now - *last;
    *last = now;
    d
}

/// Bytes of the cache's chunk files.
fn cached_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for d in std::fs::read_dir(dir.join("packfs-cache-v1/objects")).unwrap() {
        for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
            total += f.unwrap().metadata().unwrap().len();
        }
    }
    total
}

fn chunk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir.join("packfs-cache-v1/objects")).unwrap() {
        for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn the_second_epoch_reads_the_disk_not_the_network() {
    let t = scratch();
    let files = image(t.path(), "img.sqfs", 1);
    let len = std::fs::metadata(t.path().join("img.sqfs")).unwrap().len();
    assert!(len >= 4 * RANGE_CACHE, "image of {len} bytes");
    let server = RangeServer::start(t.path(), &[]);
    let url = server.url("img.sqfs");
    let mut last = 0;

    // Without the disk cache: each epoch fetches the image again.
    let fs = open(&url, None);
    epoch(&fs, &files, 11);
    sent(&server, &mut last);
    epoch(&fs, &files, 12);
    let without = sent(&server, &mut last);
    assert!(without >= len, "epoch 2 without: {without} of {len}");
    drop(fs);

    // With it: epoch 2 (and a new process's epochs) read the disk.
    let cache_dir = t.path().join("cache");
    let disk = Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap());
    let fs = open(&url, Some(&disk));
    epoch(&fs, &files, 11);
    sent(&server, &mut last);
    epoch(&fs, &files, 12);
    let with = sent(&server, &mut last);
    assert!(
        with * 20 <= len,
        "epoch 2 with the disk cache: {with} of {len}"
    );
    drop(fs);
    // Kept across restarts: a new cache over the same directory.
    drop(disk);
    let disk = Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap());
    let fs = open(&url, Some(&disk));
    epoch(&fs, &files, 13);
    let again = sent(&server, &mut last);
    assert!(again * 20 <= len, "a new process: {again} of {len}");
    assert!(cached_bytes(&cache_dir) <= 64 << 20);
}

#[test]
fn damaged_cache_files_are_fetched_again_and_never_served() {
    let t = scratch();
    let files = image(t.path(), "img.sqfs", 2);
    let server = RangeServer::start(t.path(), &[]);
    let url = server.url("img.sqfs");
    let cache_dir = t.path().join("cache");
    let disk = Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap());
    epoch(&open(&url, Some(&disk)), &files, 1);
    // Damage a third of the chunk files: flipped bytes, truncated, emptied.
    let chunks = chunk_files(&cache_dir);
    assert!(chunks.len() > 30, "{} chunk files", chunks.len());
    for (i, p) in chunks.iter().enumerate() {
        let mut b = std::fs::read(p).unwrap();
        match i % 9 {
            0 => {
                let n = b.len();
                b[n / 2] ^= 0x01;
                b[n - 1] ^= 0x80;
            }
            3 => b.truncate(b.len() - 100),
            6 => b.clear(),
            _ => continue,
        }
        std::fs::write(p, b).unwrap();
    }
    let mut last = server.stats().1;
    let disk = Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap());
    epoch(&open(&url, Some(&disk)), &files, 2);
    let refetched = sent(&server, &mut last);
    let corrupt = disk
        .counters
        .corrupt
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(corrupt > 0, "no damage detected");
    assert!(refetched > 0, "damaged chunks were not fetched again");
    // Repaired: a third pass is served from disk alone.
    epoch(&open(&url, Some(&disk)), &files, 3);
    assert_eq!(sent(&server, &mut last), 0);
}

#[test]
fn a_replaced_object_is_never_served_from_the_cache() {
    let t = scratch();
    let _old = image(t.path(), "img.sqfs", 3);
    let server = RangeServer::start(t.path(), &[]);
    let url = server.url("img.sqfs");
    let cache_dir = t.path().join("cache");
    let disk = Arc::new(DiskCache::open(&cache_dir, 64 << 20).unwrap());
    epoch(&open(&url, Some(&disk)), &_old, 1);
    // Same names and sizes, other bytes, another mtime (the server's ETag).
    let new_dir = t.path().join("new");
    std::fs::create_dir(&new_dir).unwrap();
    let new = image(&new_dir, "img.sqfs", 900);
    std::fs::rename(new_dir.join("img.sqfs"), t.path().join("img.sqfs")).unwrap();
    set_mtime(&t.path().join("img.sqfs"), 1_600_000_000);
    epoch(&open(&url, Some(&disk)), &new, 2);
}

#[test]
fn two_processes_share_one_cache_within_its_size() {
    let t = scratch();
    let files = image(t.path(), "img.sqfs", 4);
    let server = RangeServer::start(t.path(), &[]);
    let url = server.url("img.sqfs");
    let cache_dir = t.path().join("cache");
    // Smaller than the image: the processes evict while the other reads.
    let budget: u64 = 2 << 20;
    let extract = |to: &Path| {
        Command::new(packfs_bin())
            .args(["extract", &url, "-o"])
            .arg(to)
            .args(["--range-size", "64K", "--range-cache", "1M", "--disk-cache"])
            .arg(&cache_dir)
            .args(["--disk-cache-size", &budget.to_string()])
            .spawn()
            .unwrap()
    };
    for round in 0..2 {
        let (a, b) = (
            t.path().join(format!("a{round}")),
            t.path().join(format!("b{round}")),
        );
        let (mut pa, mut pb) = (extract(&a), extract(&b));
        assert!(pa.wait().unwrap().success() && pb.wait().unwrap().success());
        for dir in [&a, &b] {
            for (name, data) in &files {
                assert!(std::fs::read(dir.join(name)).unwrap() == *data, "{name}");
            }
        }
        let used = cached_bytes(&cache_dir);
        assert!(
            used <= budget,
            "round {round}: {used} bytes cached of {budget}"
        );
        assert!(used > 0, "round {round}: nothing cached");
    }
}

/// `packfs bench --image URL --disk-cache DIR`: each repetition starts a
/// new mount daemon (cold), so the second repetition's shuffled epoch is
/// what a restarted job reads: from the disk cache, and the JSON says so
/// per run (`bytes_fetched`, `bytes_from_disk`). Without the disk cache the
/// same epoch fetches the image again (`the_second_epoch_reads_the_disk_not_the_network`).
#[test]
fn bench_reports_fetched_and_disk_bytes_per_epoch() {
    let t = scratch();
    let files = image(t.path(), "img.sqfs", 5);
    let len = std::fs::metadata(t.path().join("img.sqfs")).unwrap().len();
    let src = t.path().join("img.sqfs.src");
    let server = RangeServer::start(t.path(), &[]);
    let cache = t.path().join("cache");
    let (out, rep) = server.bench(
        &src,
        "img.sqfs",
        &[
            "--workload",
            "shuffle",
            "--threads",
            "1",
            "--epochs",
            "1",
            "--repeat",
            "2",
            "--range-size",
            "64K",
            "--range-cache",
            "1M",
            "--disk-cache",
            cache.to_str().unwrap(),
        ],
    );
    assert!(out.contains("read from the --disk-cache"), "{out}");
    let runs: Vec<_> = rep["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["side"] == "packfs")
        .collect();
    assert_eq!(runs.len(), 2, "{rep}");
    let remote = |i: usize, f: &str| runs[i]["storage"]["remote"][f].as_u64().unwrap();
    assert_eq!(runs[0]["errors"], 0);
    assert_eq!(runs[1]["errors"], 0);
    // The first repetition follows the bench's check of the sides, which
    // read through a mount too (and filled the disk cache): its bytes come
    // from both.
    assert!(
        remote(0, "bytes_fetched") + remote(0, "bytes_from_disk") >= len * 9 / 10,
        "{rep}"
    );
    assert!(remote(1, "bytes_fetched") * 20 <= len, "{rep}");
    assert!(remote(1, "bytes_from_disk") >= len * 9 / 10, "{rep}");
    assert_eq!(files.len(), 300);
}
