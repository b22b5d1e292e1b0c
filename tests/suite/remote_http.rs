//! Images mounted from a web server by range requests, against a
//! real server started here (`scripts/range_server.py`, what a public LUMI-O
//! bucket or nginx serves): the same tree as the kernel's mount of the same
//! image; a replaced object gives EIO and never mixed bytes; a stalled or
//! dead server gives EIO within `--remote-timeout` and the mount reads
//! again once the server is back; 403 and 404 fail at mount, naming the URL.

use crate::common::servers::RangeServer;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Files of distinct incompressible content, so every file has its own
/// data blocks and ranges (`n` files of `size` bytes).
fn distinct_files(root: &Path, n: usize, size: usize) -> Vec<(PathBuf, Vec<u8>)> {
    std::fs::create_dir_all(root).unwrap();
    (0..n)
        .map(|i| {
            let rel = PathBuf::from(format!("f{i:03}.bin"));
            let data = bytes(1000 + i as u64, size, false);
            std::fs::write(root.join(&rel), &data).unwrap();
            (rel, data)
        })
        .collect()
}

/// `n` distinct files of `size` bytes packed without fragments (each file
/// its own data blocks) into `img.sqfs`, served by a range server; the
/// scratch directory holds both.
struct Served {
    dir: tempfile::TempDir,
    files: Vec<(PathBuf, Vec<u8>)>,
    server: RangeServer,
}

fn served_files(n: usize, size: usize) -> Served {
    let dir = scratch();
    let files = distinct_files(&dir.path().join("src"), n, size);
    pack(
        &dir.path().join("src"),
        &dir.path().join("img.sqfs"),
        &["--no-fragments"],
    );
    let server = RangeServer::start(dir.path(), &[]);
    Served { dir, files, server }
}

/// `img.sqfs` of `server` mounted with 64 KiB ranges, a cache of two and
/// `--remote-timeout` of `timeout` seconds: a read of a file not read
/// before asks the server.
fn small_ranges(server: &RangeServer, timeout: &str) -> PackfsMount {
    PackfsMount::new(
        Path::new(&server.url("img.sqfs")),
        &[
            "--range-size",
            "64K",
            "--range-cache",
            "128K",
            "--remote-timeout",
            timeout,
        ],
    )
}

fn read(p: &Path) -> Result<Vec<u8>, i32> {
    std::fs::read(p).map_err(|e| e.raw_os_error().unwrap_or(0))
}

#[test]
fn http_mounts_equal_the_kernel_and_the_source_both_formats() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let sqfs = t.path().join("img.sqfs");
    let zip = t.path().join("img.zip");
    pack(&src, &sqfs, &[]);
    pack(&src, &zip, &[]);
    let server = RangeServer::start(t.path(), &[]);
    let opts = ManifestOptions {
        dir_size: true,
        ..Default::default()
    };
    // Small ranges: reads span ranges, fetched in parallel, with readahead.
    for range in ["64K", "4M"] {
        let m = PackfsMount::new(Path::new(&server.url("img.sqfs")), &["--range-size", range]);
        let got = manifest(m.path(), &opts);
        match KernelMount::new(&sqfs) {
            Some(k) => assert_same(
                &format!("http mount (ranges {range}) vs kernel"),
                &got,
                &manifest(k.path(), &opts),
            ),
            None => eprintln!("no kernel mount: compared with the source only"),
        }
        let o = ManifestOptions::default();
        assert_same(
            "http mount vs source",
            &manifest(m.path(), &o),
            &manifest(&src, &o),
        );
    }
    // ZIP: the same tree as a local mount of the same file, and the
    // source's contents.
    let remote = PackfsMount::new(Path::new(&server.url("img.zip")), &["--range-size", "64K"]);
    let local = PackfsMount::new(&zip, &[]);
    let o = ManifestOptions {
        xattrs: false,
        ..Default::default()
    };
    let got = manifest(remote.path(), &o);
    assert_same("http zip vs local zip", &got, &manifest(local.path(), &o));
    // ZIP keeps no special files: the regular files' contents.
    let hashes = |m: &std::collections::BTreeMap<PathBuf, Entry>| {
        m.iter()
            .filter_map(|(p, e)| Some((p.clone(), e.hash?)))
            .collect::<Vec<_>>()
    };
    assert_eq!(hashes(&got), hashes(&manifest(&src, &o)));
    // info, ls and cat read the same URL without mounting.
    let info = run(Command::new(packfs_bin())
        .arg("info")
        .arg(server.url("img.sqfs")));
    assert!(info.contains("SquashFS 4.0"), "{info}");
    let cat = Command::new(packfs_bin())
        .arg("cat")
        .arg(server.url("img.zip"))
        .arg("d/rand1048577")
        .output()
        .unwrap();
    assert!(cat.status.success());
    assert_eq!(
        cat.stdout,
        std::fs::read(src.join("d/rand1048577")).unwrap()
    );
    let ls = run(Command::new(packfs_bin())
        .args(["ls", "-R"])
        .arg(server.url("img.sqfs")));
    assert!(ls.contains("dup_big_b"), "{ls}");
}

#[test]
fn a_replaced_object_gives_eio_never_mixed_bytes() {
    let Served {
        dir: t,
        files,
        server,
    } = served_files(40, 100_000);
    let img = t.path().join("img.sqfs");
    // 64 KiB ranges and a cache of two: most of the image is not fetched yet.
    let m = PackfsMount::new(
        Path::new(&server.url("img.sqfs")),
        &["--range-size", "64K", "--range-cache", "128K"],
    );
    let (first, rest) = files.split_at(10);
    for (rel, data) in first {
        assert_eq!(read(&m.path().join(rel)).as_ref(), Ok(data), "{rel:?}");
    }
    // Replace the object in place with an image of other files of the
    // same names and sizes.
    let src2 = t.path().join("src2");
    std::fs::create_dir_all(&src2).unwrap();
    for (i, (rel, _)) in files.iter().enumerate() {
        std::fs::write(src2.join(rel), bytes(9000 + i as u64, 100_000, false)).unwrap();
    }
    let img2 = t.path().join("img2.sqfs");
    pack(&src2, &img2, &["--no-fragments"]);
    std::fs::rename(&img2, &img).unwrap();
    let mut eio = 0;
    for (rel, data) in rest {
        match read(&m.path().join(rel)) {
            Ok(got) => assert_eq!(&got, data, "{rel:?}: bytes of another version"),
            Err(e) => {
                assert_eq!(e, libc::EIO, "{rel:?}");
                eio += 1;
            }
        }
    }
    assert!(eio > 0, "no read noticed the replaced object");
}

/// Reads `rel` through `mp`, timing it.
fn timed_read(mp: &Path, rel: &Path) -> (Result<Vec<u8>, i32>, Duration) {
    let t = Instant::now();
    let r = read(&mp.join(rel));
    (r, t.elapsed())
}

#[test]
fn a_stalled_or_dead_server_gives_eio_in_time_and_the_mount_recovers() {
    let Served {
        dir: _t,
        files,
        mut server,
    } = served_files(8, 300_000);
    let m = small_ranges(&server, "3");
    // A read() may take two READs: the kernel's readahead READ fails, then
    // it reads the first page again with a READ of its own. Each may take
    // the whole timeout, and where an io_uring queue has one thread (many
    // CPUs, few `--threads`) the second waits for the first in its CPU's
    // queue: 6 s, 7.01 s once in a loaded CI run, against a limit of 7 s.
    // The bound that shows no read hangs is two timeouts and some slack.
    let limit = Duration::from_secs(2 * 3 + 3);
    assert_eq!(read(&m.path().join(&files[0].0)), Ok(files[0].1.clone()));

    // Stalled: no answer at all.
    server.stall();
    let (r, took) = timed_read(m.path(), &files[1].0);
    assert_eq!(r, Err(libc::EIO), "read from a stalled server");
    assert!(took < limit, "EIO after {took:?}");
    assert!(took >= Duration::from_secs(2), "gave up early: {took:?}");
    server.resume();
    let (r, _) = timed_read(m.path(), &files[1].0);
    assert_eq!(
        r.as_ref(),
        Ok(&files[1].1),
        "after the server answered again"
    );

    // Dead: connections refused, retried until the timeout.
    server.kill();
    let (r, took) = timed_read(m.path(), &files[2].0);
    assert_eq!(r, Err(libc::EIO), "read from a dead server");
    assert!(took < limit, "EIO after {took:?}");
    server.restart();
    let (r, _) = timed_read(m.path(), &files[2].0);
    assert_eq!(r.as_ref(), Ok(&files[2].1), "after the server came back");
    // And a server that comes back within the timeout is never noticed.
    server.kill();
    let reader = {
        let p = m.path().join(&files[3].0);
        std::thread::spawn(move || read(&p))
    };
    std::thread::sleep(Duration::from_millis(800));
    server.restart();
    assert_eq!(reader.join().unwrap().as_ref(), Ok(&files[3].1));
    // The remaining files read whole.
    for (rel, data) in &files[4..] {
        assert_eq!(read(&m.path().join(rel)).as_ref(), Ok(data));
    }
}

/// Runs `f` on a thread of its own pinned to CPU 0.
fn on_cpu0<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        // SAFETY: a zeroed cpu_set_t is empty; CPU 0 is in bounds.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
        f()
    })
}

/// A read waiting on a request the server holds keeps no other reader
/// waiting, not even one on the same CPU. Under `--transport uring` the
/// kernel sends a CPU's requests to that CPU's queue; regression: one
/// thread served a queue, answering its requests in turn, so every reader
/// on that CPU waited for the held one.
#[test]
fn a_read_the_server_holds_does_not_hold_up_another_on_the_same_cpu() {
    let Served {
        dir: _t,
        files,
        server,
    } = served_files(4, 300_000);
    let m = small_ranges(&server, "60");
    // Every lookup first, so that the held request is a read of data.
    for (rel, _) in &files {
        std::fs::metadata(m.path().join(rel)).unwrap();
    }
    server.stall_next();
    let held = {
        let p = m.path().join(&files[0].0);
        on_cpu0(move || read(&p))
    };
    let until = Instant::now() + Duration::from_secs(20);
    while server.held() == 0 {
        assert!(
            Instant::now() < until,
            "the first read never reached the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let other = {
        let p = m.path().to_path_buf();
        let rel = files[1].0.clone();
        on_cpu0(move || timed_read(&p, &rel))
    };
    let (r, took) = other.join().unwrap();
    assert_eq!(r.as_ref(), Ok(&files[1].1));
    assert!(
        took < Duration::from_secs(10),
        "a read on the held read's CPU took {took:?}"
    );
    assert_eq!(server.held(), 1, "the held read was let go early");
    server.resume();
    assert_eq!(held.join().unwrap().as_ref(), Ok(&files[0].1));
}

#[test]
fn forbidden_and_missing_objects_fail_at_mount_naming_the_url_and_status() {
    let t = scratch();
    let src = t.path().join("src");
    distinct_files(&src, 2, 1000);
    std::fs::create_dir(t.path().join("private")).unwrap();
    pack(&src, &t.path().join("private/img.sqfs"), &[]);
    let server = RangeServer::start(t.path(), &["--forbid", "/private/"]);
    let mp = scratch();
    for (name, status) in [("private/img.sqfs", "403"), ("missing.sqfs", "404")] {
        let url = server.url(name);
        for args in [
            vec!["mount", &url, mp.path().to_str().unwrap()],
            vec!["info", &url],
        ] {
            let out = Command::new(packfs_bin()).args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(
                err.contains(&url) && err.contains(status),
                "{args:?}: {err}"
            );
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        assert!(
            !mounts.contains(mp.path().to_str().unwrap()),
            "mounted anyway"
        );
    }
    // A malformed location is a usage error naming it, before any request.
    let out = Command::new(packfs_bin())
        .args(["info", "s3://bucket-without-key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("s3://BUCKET/KEY"));
}

/// A presigned URL (the signature in its query covers GET only; S3 answers
/// HEAD with 403 SignatureDoesNotMatch): the object is pinned by a one-byte
/// GET instead of the HEAD, and the mount reads it, signature and all; the
/// mount table shows the URL without its query. A wrong signature is the
/// server's 403, named, and the message does not repeat the signature.
#[test]
fn a_presigned_url_mounts_though_head_is_refused() {
    let t = scratch();
    let src = t.path().join("src");
    let files = distinct_files(&src, 8, 200_000);
    pack(&src, &t.path().join("img.sqfs"), &[]);
    let server = RangeServer::start(t.path(), &["--presign", "s3cr3t"]);
    let url = format!(
        "{}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=3600&sig=s3cr3t",
        server.url("img.sqfs")
    );
    let m = PackfsMount::new(Path::new(&url), &["--range-size", "64K"]);
    for (rel, data) in &files {
        assert!(
            read(&m.path().join(rel)).unwrap() == *data,
            "{}",
            rel.display()
        );
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(m.path().to_str().unwrap()))
        .expect("mounted");
    assert!(
        !line.contains("s3cr3t") && !line.contains("X-Amz"),
        "{line}"
    );
    drop(m);
    let bad = url.replace("sig=s3cr3t", "sig=guess");
    let out = Command::new(packfs_bin())
        .args(["info", &bad])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("403") && err.contains("SignatureDoesNotMatch"),
        "{err}"
    );
    // Named without the query: a signature is a credential.
    assert!(
        err.contains("/img.sqfs?…") && !err.contains("sig="),
        "{err}"
    );
}

/// `packfs bench --image URL` mounts the object itself and charges each run
/// with the requests its daemon sent: a cold pass over every file fetches
/// about the image once (whole aligned ranges), a warm pass nothing.
#[test]
fn bench_of_a_remote_image_reports_its_requests_per_run() {
    let t = scratch();
    let src = t.path().join("src");
    distinct_files(&src, 40, 300_000);
    let img = t.path().join("img.sqfs");
    pack(&src, &img, &[]);
    let len = std::fs::metadata(&img).unwrap().len();
    let server = RangeServer::start(t.path(), &[]);
    let (out, rep) = server.bench(
        &src,
        "img.sqfs",
        &[
            "--workload",
            "sequential",
            "--threads",
            "1",
            "--epochs",
            "2",
            "--range-size",
            "1M",
        ],
    );
    assert!(
        out.contains("remote image: rd MB / rd calls of packfs = bytes fetched / GET requests"),
        "{out}"
    );
    let runs = rep["runs"].as_array().unwrap();
    let packfs: Vec<_> = runs.iter().filter(|r| r["side"] == "packfs").collect();
    assert_eq!(packfs.len(), 2, "{rep}");
    let (gets, _) = server.stats();
    let mut charged = 0;
    for r in &packfs {
        assert_eq!(r["errors"], 0, "{r}");
        let remote = &r["storage"]["remote"];
        let n = remote["get_requests"].as_u64().unwrap();
        let bytes = remote["bytes_fetched"].as_u64().unwrap();
        charged += n;
        if r["cold"] == true {
            // Every file read once: the image's 1 MiB ranges, each fetched once.
            assert!(
                bytes >= len * 9 / 10 && bytes <= len * 13 / 10,
                "cold pass fetched {bytes} of a {len}-byte image: {remote}"
            );
            assert!(
                n >= len / (1 << 20) && n <= len.div_ceil(1 << 20) + 2,
                "{remote}"
            );
            assert_eq!(remote["head_requests"], 1, "{remote}");
            assert!(remote["ttfb_ms_mean"].as_f64().unwrap() > 0.0, "{remote}");
        } else {
            assert_eq!(
                (n, bytes),
                (0, 0),
                "a warm pass is served from the caches: {remote}"
            );
        }
    }
    // The runs' requests are the server's, less the bench's check of the
    // mount before the timed runs.
    assert!(
        charged > 0 && charged <= gets,
        "{charged} charged, {gets} served"
    );
    // No column of the raw side claims remote requests.
    assert!(runs
        .iter()
        .filter(|r| r["side"] == "raw")
        .all(|r| r["storage"]["remote"].is_null()));
}

/// The daemon's `--stats` now (it writes them on SIGUSR1), as JSON.
fn live_stats(mountpoint: &Path, file: &Path) -> serde_json::Value {
    let _ = std::fs::remove_file(file);
    signal("-USR1", daemon_pid(mountpoint));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(t) = std::fs::read_to_string(file) {
            return serde_json::from_str(&t).unwrap();
        }
        assert!(Instant::now() < deadline, "no stats written on SIGUSR1");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An object larger than the range cache: small files read in a shuffled
/// order fetch the pieces they need, not a whole range (and readahead) per
/// file, which fetched the image many times over; a sequential pass still
/// fetches whole ranges, about the image once. The bytes are the source's
/// either way.
#[test]
fn an_object_larger_than_the_range_cache_is_read_in_pieces_when_shuffled() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // 30 small files, each followed by a 2 MB one: small files far apart,
    // as in an image much larger than this one, where random readers seldom
    // land near each other.
    let mut files = Vec::new();
    for i in 0..30u64 {
        for (name, size) in [
            (format!("{i:02}a_small"), 100_000),
            (format!("{i:02}b_big"), 2_000_000),
        ] {
            let data = bytes(5000 + 2 * i + (size > 100_000) as u64, size, false);
            std::fs::write(src.join(&name), &data).unwrap();
            files.push((PathBuf::from(name), data));
        }
    }
    // Each file in its own blocks, where the listing puts it (packed
    // together as fragments, the small files would sit side by side).
    let img = t.path().join("img.sqfs");
    pack(&src, &img, &["--no-fragments"]);
    let len = std::fs::metadata(&img).unwrap().len();
    let server = RangeServer::start(t.path(), &[]);
    let url = server.url("img.sqfs");
    let stats = t.path().join("stats.json");
    // 1 MiB ranges, a cache of 16 (a quarter of the image): 64 KiB pieces.
    let pass = |order: &[usize]| -> (u64, u64) {
        let m = PackfsMount::new(
            Path::new(&url),
            &[
                "--range-size",
                "1M",
                "--range-cache",
                "16M",
                "--cache-size",
                "1M",
                "--stats",
                stats.to_str().unwrap(),
            ],
        );
        for &i in order {
            let (rel, data) = &files[i];
            assert!(
                read(&m.path().join(rel)).unwrap() == *data,
                "{}",
                rel.display()
            );
        }
        let s = live_stats(m.path(), &stats);
        let r = &s["remote"];
        (
            r["get_requests"].as_u64().unwrap(),
            r["bytes_fetched"].as_u64().unwrap(),
        )
    };
    let mut small: Vec<usize> = (0..files.len()).step_by(2).collect();
    let mut x = 7u64;
    for i in (1..small.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        small.swap(i, (x >> 33) as usize % (i + 1));
    }
    let (gets, bytes) = pass(&small);
    // 3 MB of small files; a whole range per file would be 30 MiB or more.
    assert!(
        bytes < 8 << 20,
        "shuffled small files fetched {bytes} bytes in {gets} GETs"
    );
    let all: Vec<usize> = (0..files.len()).collect();
    let (gets, bytes) = pass(&all);
    assert!(
        bytes <= len * 13 / 10 && gets <= 2 * len.div_ceil(1 << 20),
        "sequential pass fetched {bytes} bytes in {gets} GETs of a {len}-byte image"
    );
}
