//! The mount, proven against the kernel: images made by mksquashfs with every
//! compressor and layout option, mounted by packfs and by the kernel's own
//! SquashFS driver, must show identical trees (type, mode, owner, size, mtime,
//! nlink, hard-link identity, symlink targets, xattrs, content).

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Mounts `img` with packfs and the kernel and compares the two trees;
/// also compares the packfs tree to `src` for content and link structure.
fn differential(img: &Path, src: &Path) {
    let ours = PackfsMount::new(img, &[]);
    let opts = ManifestOptions {
        dir_size: true,
        blocks: true,
        ..Default::default()
    };
    let got = manifest(ours.path(), &opts);
    match KernelMount::new(img) {
        Some(k) => assert_same(
            &format!("packfs vs kernel for {}", img.display()),
            &got,
            &manifest(k.path(), &opts),
        ),
        None => eprintln!("no kernel mount: compared with the source only"),
    }
    let no_dir_size = ManifestOptions::default();
    assert_same(
        &format!("packfs mount vs source for {}", img.display()),
        &manifest(ours.path(), &no_dir_size),
        &manifest(src, &no_dir_size),
    );
}

#[test]
fn mksquashfs_images_match_the_kernel() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, true);
    let variants: &[(&str, &[&str])] = &[
        ("gzip", &["-comp", "gzip"]),
        ("xz", &["-comp", "xz"]),
        ("lz4", &["-comp", "lz4"]),
        ("lz4hc", &["-comp", "lz4", "-Xhc"]),
        ("lzo", &["-comp", "lzo"]),
        // mksquashfs's default LZO encoder is lzo1x_999; the fast one
        // writes other instructions (shorter matches, more literal runs).
        (
            "lzo1x_1",
            &["-comp", "lzo", "-Xalgorithm", "lzo1x_1", "-b", "1M"],
        ),
        ("zstd", &["-comp", "zstd"]),
        ("nofrag", &["-comp", "zstd", "-no-fragments"]),
        ("alwaysfrag", &["-comp", "zstd", "-always-use-fragments"]),
        ("uncompressed", &["-noI", "-noD", "-noF", "-noX"]),
        ("b4k", &["-comp", "gzip", "-b", "4K"]),
        ("b1m", &["-comp", "zstd", "-b", "1M"]),
        (
            "noexport-noxattr",
            &["-comp", "zstd", "-no-exports", "-no-xattrs"],
        ),
        ("nodups", &["-comp", "zstd", "-no-duplicates"]),
    ];
    for (name, args) in variants {
        let img = t.path().join(format!("{name}.sqfs"));
        mksquashfs(&src, &img, args);
        if args.contains(&"-no-xattrs") {
            // Compared with the kernel only: the source has xattrs, the image not.
            let ours = PackfsMount::new(&img, &[]);
            if let Some(k) = KernelMount::new(&img) {
                let o = ManifestOptions {
                    dir_size: true,
                    blocks: true,
                    ..Default::default()
                };
                assert_same(name, &manifest(ours.path(), &o), &manifest(k.path(), &o));
            }
            continue;
        }
        differential(&img, &src);
    }
}

// Regression: a file whose list of block sizes is longer than the image
// (a large sparse file: its run of zero size words compresses to almost
// nothing) was refused as corrupt, and with it the listing of its
// directory. Its `st_blocks` counted the holes, which the kernel's do not.
#[test]
fn a_large_sparse_file_lists_and_reads_as_the_kernel_shows_it() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    {
        use std::os::unix::fs::FileExt;
        // 64 MiB in 4 KiB blocks: a 64 KiB block list, one block of data.
        let f = std::fs::File::create(src.join("disk.img")).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"data in the middle", 32 << 20).unwrap();
    }
    std::fs::write(src.join("small"), b"hi\n").unwrap();
    let theirs = t.path().join("mksquashfs.sqfs");
    mksquashfs(&src, &theirs, &["-b", "4K"]);
    let ours = t.path().join("packfs.sqfs");
    pack(&src, &ours, &["-b", "4K"]);
    for img in [&theirs, &ours] {
        let len = std::fs::metadata(img).unwrap().len();
        assert!(len < 64 << 10, "{}: {len} bytes", img.display());
        differential(img, &src);
    }
}

#[test]
fn legacy_lzma_images_match_unsquashfs() {
    // The kernel has no lzma (only xz) support; unsquashfs is the reference.
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let img = t.path().join("lzma.sqfs");
    let st = mksquashfs_cmd(&src, &img, &["-comp", "lzma"])
        .status()
        .unwrap();
    if !require(st.success(), "a mksquashfs built with lzma support") {
        return;
    }
    let out = t.path().join("unsq");
    run(Command::new("unsquashfs")
        .arg("-q")
        .arg("-n")
        .arg("-d")
        .arg(&out)
        .arg(&img));
    let ours = PackfsMount::new(&img, &[]);
    let o = ManifestOptions {
        nlink: false,
        ..Default::default()
    };
    let mut a = manifest(ours.path(), &o);
    let mut b = manifest(&out, &o);
    // unsquashfs cannot recreate sockets and keeps no hard-link nlink of dirs.
    a.retain(|p, _| p != Path::new("socket"));
    b.retain(|p, _| p != Path::new("socket"));
    assert_same("packfs vs unsquashfs (lzma)", &a, &b);
}

#[test]
fn eight_threads_reading_random_ranges_get_the_right_bytes() {
    use rand::{Rng, SeedableRng};
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let img = t.path().join("s.sqfs");
    mksquashfs(&src, &img, &["-comp", "zstd", "-b", "64K"]);
    // A small cache forces evictions while threads race on the same blocks.
    let m = PackfsMount::new(&img, &["--cache-size", "1M", "--threads", "8"]);
    let files: Vec<_> = manifest(&src, &ManifestOptions::default())
        .into_iter()
        .filter(|(_, e)| e.kind == "file")
        .map(|(p, _)| p)
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    std::thread::scope(|s| {
        for tid in 0..8u64 {
            let (files, src, mnt) = (&files, &src, m.path());
            s.spawn(move || {
                use std::os::unix::fs::FileExt;
                let mut rng = rand::rngs::StdRng::seed_from_u64(tid);
                let mut checked = 0u64;
                while std::time::Instant::now() < deadline {
                    let p = &files[rng.gen_range(0..files.len())];
                    let want = std::fs::read(src.join(p)).unwrap();
                    let f = std::fs::File::open(mnt.join(p)).unwrap();
                    let off = rng.gen_range(0..=want.len());
                    let len = rng.gen_range(0..=(want.len() - off).min(300_000));
                    let mut buf = vec![0u8; len];
                    let n = f.read_at(&mut buf, off as u64).unwrap();
                    assert_eq!(
                        &buf[..n],
                        &want[off..off + n],
                        "{} at {off}+{len}",
                        p.display()
                    );
                    checked += n as u64;
                }
                assert!(checked > 0);
            });
        }
    });
}

#[test]
fn mount_errors_are_clear_and_synchronous() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let img = t.path().join("s.sqfs");
    mksquashfs(&src, &img, &[]);
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let fail = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(packfs_bin()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Truncated image: refused at mount time, naming the file.
    let bytes = std::fs::read(&img).unwrap();
    let trunc = t.path().join("trunc.sqfs");
    let used = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    std::fs::write(&trunc, &bytes[..used / 2]).unwrap();
    let e = fail(&["mount".as_ref(), trunc.as_os_str(), mp.as_os_str()]);
    assert!(e.contains("trunc.sqfs") && e.contains("truncated"), "{e}");
    // Not an image.
    let junk = t.path().join("junk.sqfs");
    std::fs::write(&junk, b"definitely not an image").unwrap();
    let e = fail(&["mount".as_ref(), junk.as_os_str(), mp.as_os_str()]);
    assert!(e.contains("junk.sqfs"), "{e}");
    // Missing and non-empty mountpoints.
    let e = fail(&[
        "mount".as_ref(),
        img.as_os_str(),
        t.path().join("nope").as_os_str(),
    ]);
    assert!(e.contains("nope"), "{e}");
    let e = fail(&["mount".as_ref(), img.as_os_str(), src.as_os_str()]);
    assert!(e.contains("not empty"), "{e}");
    // Options the mount cannot honour, before anything is mounted.
    for (o, says) in [("rw", "read-only"), ("colour=blue", "unknown mount option")] {
        let e = fail(&[
            "mount".as_ref(),
            "-o".as_ref(),
            o.as_ref(),
            img.as_os_str(),
            mp.as_os_str(),
        ]);
        assert!(e.contains(says), "{o}: {e}");
    }
    // Nothing was left mounted.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(mp.to_str().unwrap()), "{mounts}");
    // Options it can: kernel flags reach the kernel as flags (given as a
    // raw option string, mount(2) refuses them with EINVAL).
    let m = PackfsMount::new(&img, &["-o", "noexec,atime", "-o", "fsname=dataset"]);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(m.path().to_str().unwrap()))
        .unwrap_or_else(|| panic!("not mounted: {mounts}"));
    assert!(line.starts_with("dataset "), "{line}");
    assert!(
        line.contains("noexec") && !line.contains("noatime"),
        "{line}"
    );
    assert_eq!(std::fs::read(m.path().join("f")).unwrap(), b"x");
}

#[test]
fn killed_daemon_leaves_no_dead_mount() {
    let t = scratch();
    let img = one_file_image(t.path());
    kill_daemon_and_expect_no_mount(&img, &[]);
}

/// Regression: with packfs's own `/dev/fuse` threads, a daemon killed while
/// a thread was reading requests sometimes left its mount behind, because
/// the watcher's statfs, caught in the connection's teardown, failed with
/// ECANCELED and the watcher took the mount for a live one. One kill in a
/// dozen met it, hence the repetitions.
#[test]
fn killed_daemon_with_spinning_threads_leaves_no_dead_mount() {
    let t = scratch();
    let img = one_file_image(t.path());
    for _ in 0..20 {
        kill_daemon_and_expect_no_mount(&img, &["--dev-spin", "50"]);
    }
}

fn one_file_image(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let img = dir.join("s.sqfs");
    mksquashfs(&src, &img, &[]);
    img
}

/// Mounts `img`, reads through it, kills its daemon hard and waits for the
/// watcher to remove the mount.
fn kill_daemon_and_expect_no_mount(img: &Path, extra: &[&str]) {
    let m = PackfsMount::new(img, extra);
    let mp = std::fs::canonicalize(m.path()).unwrap();
    assert_eq!(std::fs::read(mp.join("f")).unwrap(), b"x");
    // Find the daemon serving this mountpoint and kill it hard.
    let ps = run(Command::new("pgrep")
        .arg("-f")
        .arg(format!("packfs mount {}", img.display())));
    for pid in ps.split_whitespace() {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    let gone = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .contains(mp.to_str().unwrap())
    });
    assert!(gone, "mount survived its daemon ({extra:?})");
}

#[test]
fn run_mounts_runs_and_returns_the_exit_status() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"payload").unwrap();
    let img = t.path().join("s.sqfs");
    mksquashfs(&src, &img, &[]);
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let spec = format!("{}:{}", img.display(), mp.display());
    let out = Command::new(packfs_bin())
        .args(["run", &spec, "--", "sh", "-c"])
        .arg(format!("cat {}/f; exit 7", mp.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(out.stdout, b"payload");
    // Unmounted afterwards.
    assert!(std::fs::read_dir(&mp).unwrap().next().is_none());
}

#[test]
fn packfs_images_match_the_kernel() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, true);
    for (name, args) in [
        ("zstd", &["-c", "zstd"][..]),
        ("gzip-4k", &["-c", "gzip", "-b", "4K"][..]),
        (
            "xz-1m-nofrag",
            &["-c", "xz", "-b", "1M", "--no-fragments"][..],
        ),
        ("lz4", &["-c", "lz4"][..]),
    ] {
        let img = t.path().join(format!("{name}.sqfs"));
        let out = run(Command::new(packfs_bin())
            .arg("pack")
            .arg(&src)
            .arg("-o")
            .arg(&img)
            .args(args));
        assert!(out.is_empty(), "pack printed on stdout: {out}");
        differential(&img, &src);
    }
}

/// The daemon's own memory (anonymous RSS: heap, cache, buffers; not the
/// mapped image, which is page cache) stays within the cache budget plus a
/// small constant after reading twelve times the budget through it.
#[test]
fn daemon_memory_stays_within_the_cache_budget() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..48u64 {
        std::fs::write(src.join(format!("f{i:02}")), bytes(i, 4 << 20, true)).unwrap();
    }
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let m = PackfsMount::new(&img, &["--cache-size", "16M"]);
    let pid = daemon_pid(m.path());
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let dir = m.path().to_path_buf();
            s.spawn(move || {
                for i in (k..48).step_by(4) {
                    let got = std::fs::read(dir.join(format!("f{i:02}"))).unwrap();
                    assert!(got == bytes(i, 4 << 20, true), "f{i:02}");
                }
            });
        }
    });
    let anon_kb = anon_rss_kb(pid);
    let limit_kb = (16 + 16) << 10;
    assert!(
        anon_kb <= limit_kb,
        "daemon anonymous RSS {anon_kb} kB > 16 MiB budget + 16 MiB"
    );
}

/// Blocks served in full leave the daemon's cache, whose bytes the kernel's
/// page cache now holds: a cold pass over a tree ends with the cache nearly
/// empty; after the kernel drops its copies, a second pass decodes those
/// blocks again and gets the same bytes; `--preload`, which asks the daemon
/// to hold the image, keeps every block, as `PACKFS_RELEASE_SERVED=0` does.
#[test]
fn blocks_served_in_full_leave_the_cache_and_read_back_the_same() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Small files share fragment blocks; the large ones have full blocks.
    let mut files = Vec::new();
    for i in 0..300u64 {
        files.push((
            format!("s{i:03}"),
            bytes(i, 1000 + (i as usize * 131) % 40_000, true),
        ));
    }
    for i in 0..3u64 {
        files.push((format!("l{i}"), bytes(1000 + i, (1 << 20) + 777, true)));
    }
    for (name, data) in &files {
        std::fs::write(src.join(name), data).unwrap();
    }
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let read_all = |m: &Path| {
        for (name, data) in &files {
            assert!(std::fs::read(m.join(name)).unwrap() == *data, "{name}");
        }
    };
    let decoded: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    let cache = |s: &serde_json::Value, k: &str| s["cache"][k].as_u64().unwrap();

    let one = with_stats(&img, &[], |m| read_all(m));
    assert!(cache(&one, "released") > 0, "{one}");
    assert!(
        cache(&one, "bytes") < decoded / 8,
        "{} bytes still cached after serving {decoded}: {one}",
        cache(&one, "bytes")
    );
    let two = with_stats(&img, &[], |m| {
        read_all(m);
        std::fs::write("/proc/sys/vm/drop_caches", "3").expect("dropping the page cache (root)");
        read_all(m);
    });
    assert!(
        cache(&two, "misses") > cache(&one, "misses"),
        "the second pass found released blocks cached: {one} {two}"
    );
    let kept = with_stats(&img, &["--preload"], |m| read_all(m));
    assert_eq!(cache(&kept, "released"), 0, "{kept}");
    assert!(cache(&kept, "bytes") >= decoded, "{kept}");
    // The switch benchmarks compare with.
    let kept = with_stats_env(&img, &[], &[("PACKFS_RELEASE_SERVED", "0")], |m| {
        read_all(m)
    });
    assert_eq!(cache(&kept, "released"), 0, "{kept}");
    assert!(cache(&kept, "bytes") >= decoded, "{kept}");
    // Any other value is a usage error before anything is mounted.
    let (code, err) = refused_mount(&img, &[], &[("PACKFS_RELEASE_SERVED", "no")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("PACKFS_RELEASE_SERVED=\"no\""), "{err}");
}

/// Bug: `packfs run` took none of the mount options the docs recommend
/// for jobs (`--stats`, `--preload-profile`, `--transport`, ...), only
/// through the environment. They pass to its mounts now, and the stats
/// are written by the time `run` returns.
#[test]
fn run_passes_mount_options_and_its_stats_are_there_when_it_returns() {
    let t = scratch();
    let img = one_file_image(t.path());
    let profile = t.path().join("profile");
    std::fs::write(&profile, "f\n").unwrap();
    let stats = t.path().join("stats.json");
    let mp = t.path().join("mp");
    let spec = format!("{}:{}", img.display(), mp.display());
    let out = Command::new(packfs_bin())
        .args([
            "run",
            &spec,
            "--transport",
            "dev",
            "-j",
            "2",
            "--preload-profile",
        ])
        .arg(&profile)
        .arg("--stats")
        .arg(&stats)
        .args(["--", "cat"])
        .arg(mp.join("f"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"x");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("no stats after run"))
            .unwrap();
    assert_eq!(v["transport"], "dev", "{v}");
    assert_eq!(v["read_bytes"], 1, "{v}");
    // One file of counters for one mount.
    let two = format!(
        "{spec} {}:{}",
        img.display(),
        t.path().join("mp2").display()
    );
    let out = Command::new(packfs_bin())
        .arg("run")
        .args(two.split(' '))
        .arg("--stats")
        .arg(&stats)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stats counts one mount"));
}

/// Bug: after a shuffled pass the daemon kept its peak memory for good
/// (a Linux-tree pass left 772 MB resident with 15 MB in the cache):
/// blocks that left the cache were freed inside malloc's arenas, never
/// returned. Once decoding stops, the freed memory goes back to the kernel.
#[test]
fn memory_freed_after_a_shuffled_pass_goes_back_to_the_kernel() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Small text files, four to a fragment block: a shuffled reader holds
    // a block in the cache until its last file is read.
    let n = 4000u64;
    for i in 0..n {
        std::fs::write(src.join(format!("f{i:04}")), bytes(i, 30 << 10, true)).unwrap();
    }
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let m = PackfsMount::new(&img, &["--cache-size", "256M"]);
    let pid = daemon_pid(m.path());
    // A fixed permutation (odd stride), read by two threads.
    let order: Vec<u64> = (0..n).map(|k| (k * 2654435761) % n).collect();
    std::thread::scope(|s| {
        for half in order.chunks(order.len() / 2) {
            let dir = m.path().to_path_buf();
            s.spawn(move || {
                for &i in half {
                    let got = std::fs::read(dir.join(format!("f{i:04}"))).unwrap();
                    assert!(got == bytes(i, 30 << 10, true), "f{i:04}");
                }
            });
        }
    });
    let peak_kb = anon_rss_kb(pid);
    assert!(
        peak_kb > 48 << 10,
        "the pass held only {peak_kb} kB: nothing to check"
    );
    let returned = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        anon_rss_kb(pid) < 32 << 10
    });
    assert!(
        returned,
        "anonymous RSS {} kB 10 s after the pass (peak {peak_kb} kB)",
        anon_rss_kb(pid)
    );
}
