//! `mount --transport`: the io_uring queues answer the requests
//! of a whole tree walk (their own counter, not only a working mount), and
//! `auto` falls back to `/dev/fuse` when the kernel's `enable_uring` is off
//! or `kernel.io_uring_disabled` forbids io_uring, where `uring` is refused
//! before mounting.
//!
//! The tests that switch those two kernel settings are ignored in the plain
//! suite (they change what every new mount of the machine negotiates) and
//! run by `scripts/uring_tests.sh`, as root, one at a time:
//! `cargo test --test tests transport:: -- --ignored --test-threads=1`.
//! Each puts both settings back when it ends, failed or not.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
const IO_URING_DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";

/// The kernel settings as they were, written back on drop; holds a lock so
/// that this module's tests never change them under each other.
struct Settings {
    old: Vec<(&'static str, String)>,
    _lock: MutexGuard<'static, ()>,
}

static LOCK: Mutex<()> = Mutex::new(());

impl Settings {
    fn take() -> Settings {
        let lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            is_root(),
            "this test switches kernel settings: run it as root"
        );
        let old = [ENABLE_URING, IO_URING_DISABLED]
            .into_iter()
            .map(|p| {
                let v = std::fs::read_to_string(p).unwrap_or_else(|e| {
                    panic!(
                        "{p}: {e} (FUSE over io_uring needs Linux 6.14+ with CONFIG_FUSE_IO_URING)"
                    )
                });
                (p, v.trim().to_string())
            })
            .collect();
        Settings { old, _lock: lock }
    }

    fn set(&self, path: &str, v: &str) {
        std::fs::write(path, v).unwrap_or_else(|e| panic!("writing {v} to {path}: {e}"));
    }
}

impl Drop for Settings {
    fn drop(&mut self) {
        for (p, v) in &self.old {
            let _ = std::fs::write(p, v);
        }
    }
}

/// The daemon environment of this module's mounts: the suite's own
/// `PACKFS_TRANSPORT` and `PACKFS_DEV_SPIN_US` do not apply (each test says
/// which transport and threads it wants; empty means the default).
const ISOLATED: [(&str, &str); 2] = [("PACKFS_TRANSPORT", ""), ("PACKFS_DEV_SPIN_US", "")];

/// [`with_stats`] in [`ISOLATED`]'s environment.
fn stats_of(img: &Path, args: &[&str], work: impl FnOnce(&Path)) -> serde_json::Value {
    with_stats_env(img, args, &ISOLATED, work)
}

fn image(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("src");
    fixture_tree(&src, true);
    let img = dir.join("img.sqfs");
    pack(&src, &img, &[]);
    (src, img)
}

/// `packfs mount --transport uring`, expected to fail before mounting:
/// returns its exit code and stderr.
fn uring_refused(img: &Path) -> (Option<i32>, String) {
    refused_mount(img, &["--transport", "uring"], &[])
}

fn served(stats: &serde_json::Value) -> (&str, u64, u64) {
    (
        stats["transport"].as_str().unwrap(),
        stats["uring_requests"].as_u64().unwrap(),
        stats["requests_total"].as_u64().unwrap(),
    )
}

#[test]
#[ignore = "switches enable_uring: run by scripts/uring_tests.sh"]
fn uring_queues_answer_every_request_of_a_tree_walk() {
    let s = Settings::take();
    s.set(ENABLE_URING, "Y");
    s.set(IO_URING_DISABLED, "0");
    let t = scratch();
    let (src, img) = image(t.path());
    let o = ManifestOptions::default();
    let stats = stats_of(&img, &["--transport", "uring"], |mnt| {
        assert_same(
            "uring mount vs source",
            &manifest(mnt, &o),
            &manifest(&src, &o),
        );
    });
    let (transport, uring, total) = served(&stats);
    assert_eq!(transport, "uring", "{stats}");
    // A tree walk with content and xattrs is hundreds of requests; every
    // one counted by the core came through the queues (which also answer
    // the declined OPENs the core does not count).
    assert!(total > 100, "{stats}");
    assert!(
        uring >= total,
        "queues answered {uring} of {total}: {stats}"
    );
    // `auto` picks the queues when the kernel offers them.
    let stats = stats_of(&img, &[], |mnt| {
        std::fs::read_dir(mnt).unwrap().for_each(drop);
    });
    assert_eq!(served(&stats).0, "uring", "{stats}");
}

/// The queues of an image on a local disk have one thread each, whatever
/// `--threads`; where reads go over the network (a remote image, or an
/// image file behind another FUSE server, as on NFS or Lustre) they get
/// enough threads to serve twice `--threads` requests at once (at most
/// `--threads` per queue, at least one), so that one waiting there holds
/// up no other; `PACKFS_URING_THREADS` overrides both. The stats say how
/// many, and that many threads answer.
#[test]
#[ignore = "switches enable_uring: run by scripts/uring_tests.sh"]
fn uring_queues_get_their_threads_from_the_storage_and_threads_or_the_environment() {
    let s = Settings::take();
    s.set(ENABLE_URING, "Y");
    s.set(IO_URING_DISABLED, "0");
    let t = scratch();
    let (_src, img) = image(t.path());
    let server = crate::common::servers::RangeServer::start(t.path(), &[]);
    let url = PathBuf::from(server.url("img.sqfs"));
    // The image as a file of another packfs mount: a FUSE filesystem.
    let outer_src = t.path().join("outer");
    std::fs::create_dir(&outer_src).unwrap();
    std::fs::copy(&img, outer_src.join("img.sqfs")).unwrap();
    let outer_img = t.path().join("outer.sqfs");
    pack(&outer_src, &outer_img, &[]);
    let outer = PackfsMount::new(&outer_img, &[]);
    let behind_fuse = outer.path().join("img.sqfs");
    // One queue per possible CPU; the rule itself has its unit test
    // (`uring::threads_per_queue`), this test checks that mounts apply it.
    let cpus = mountfs::fuse::transport::possible_cpus().unwrap().len();
    let rule = |threads| mountfs::fuse::transport::uring::threads_per_queue(threads, cpus);
    // (image, flags, daemon environment, threads per queue)
    type Case<'a> = (&'a Path, &'a [&'a str], &'a [(&'a str, &'a str)], usize);
    let cases: [Case; 7] = [
        (&img, &["--threads", "16"], &[], 1),
        (&behind_fuse, &["--threads", "4"], &[], rule(4)),
        (&img, &[], &[("PACKFS_URING_THREADS", "2")], 2),
        (&url, &["--threads", "1"], &[], 1),
        (&url, &["--threads", "4"], &[], rule(4)),
        (&url, &["--threads", "16"], &[], rule(16)),
        (
            &url,
            &["--threads", "4"],
            &[("PACKFS_URING_THREADS", "1")],
            1,
        ),
    ];
    for (image, flags, env, per_queue) in cases {
        let mut args = vec!["--transport", "uring"];
        args.extend_from_slice(flags);
        let env: Vec<_> = ISOLATED.iter().chain(env).copied().collect();
        let mut answering = 0;
        let stats = with_stats_env(image, &args, &env, |mnt| {
            std::fs::read_dir(mnt).unwrap().for_each(drop);
            answering = thread_names(daemon_pid(mnt))
                .iter()
                .filter(|n| {
                    // fuse-uring-CPU or fuse-uring-CPU.N, not fuse-uring-stay.
                    n.strip_prefix("fuse-uring-")
                        .is_some_and(|q| q.starts_with(|c: char| c.is_ascii_digit()))
                })
                .count();
        });
        let case = format!("{image:?} {flags:?} {env:?}");
        assert_eq!(
            stats["uring_queue_threads"].as_u64(),
            Some(per_queue as u64),
            "{case}: {stats}"
        );
        assert_eq!(answering, cpus * per_queue, "{case}");
    }
}

/// CPU changes of the calling thread over a one-thread read of `files`
/// (each a LOOKUP and a READ through the queues), the page cache dropped
/// first so that the daemon reads its image from the disk as in a real
/// cold pass.
fn cpu_hops_reading(files: &[PathBuf]) -> (usize, Vec<blake3::Hash>) {
    // Written-back first: the tree and image this test has just written
    // would otherwise be flushed by a kernel thread during the pass, which
    // keeps the other CPU busy and so leaves the reader nowhere to hop.
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").unwrap();
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = || unsafe { libc::sched_getcpu() };
    let mut hops = 0;
    let mut sums = Vec::with_capacity(files.len());
    let mut last = cpu();
    for f in files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        sums.push(blake3::hash(&data));
        let now = cpu();
        hops += usize::from(now != last);
        last = now;
    }
    (hops, sums)
}

// A cold one-thread shuffled read through the queues, with the queue
// threads' SCHED_IDLE submissions (fuse/transport/uring/sched_idle.rs, on as root):
// every file reads back whole and the reader rarely changes CPU. On the
// Linux tree a reader changed CPU at about half of its files without the
// switch (docs/benchmarks/uring.md); this small tree does not make it hop even
// without it, so the test guards the switch (it must not move the reader
// or break the queues), and benches/transport.sh shows what it saves.
#[test]
#[ignore = "switches enable_uring: run by scripts/uring_tests.sh"]
fn a_cold_one_thread_read_through_the_queues_keeps_its_cpu() {
    use rand::{Rng, SeedableRng};
    let s = Settings::take();
    s.set(ENABLE_URING, "Y");
    s.set(IO_URING_DISABLED, "0");
    let t = scratch();
    let src = t.path().join("src");
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    let words: Vec<String> = (0..2000)
        .map(|i| format!("w{:x}", i * 7919 % 65521))
        .collect();
    let n = 3000;
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let dir = src.join(format!("d{:02}", i % 40));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        let len = rng.gen_range(2_000..20_000);
        while text.len() < len {
            text.push_str(&words[rng.gen_range(0..words.len())]);
            text.push(if rng.gen_ratio(1, 12) { '\n' } else { ' ' });
        }
        let name = format!("d{:02}/f{i:05}.txt", i % 40);
        std::fs::write(src.join(&name), text).unwrap();
        names.push(name);
    }
    // A fixed shuffled order, as a training epoch reads.
    for i in (1..n).rev() {
        names.swap(i, rng.gen_range(0..=i));
    }
    let img = t.path().join("img.sqfs");
    pack(&src, &img, &[]);
    let stayed = |stats: &serde_json::Value| {
        let (_, uring, _) = served(stats);
        stats["uring_stay_submissions"].as_u64().unwrap() as f64 / uring as f64
    };
    // The switch is on only while the reader is seen to hop, which needs
    // the other CPU idle; anything else running on this machine (CI's own
    // processes) can hold it busy for a whole pass, and then leaving the
    // switch off is right. So a pass that barely used it is tried again,
    // fresh mount and cold cache, up to three times.
    let mut halting = Vec::new();
    while halting.len() < 3 && halting.iter().all(|&h| h <= 0.3) {
        let (mut hops, mut sums) = (0, Vec::new());
        let stats = stats_of(&img, &["--transport", "uring"], |mnt| {
            let files: Vec<PathBuf> = names.iter().map(|f| mnt.join(f)).collect();
            (hops, sums) = cpu_hops_reading(&files);
        });
        for (name, sum) in names.iter().zip(&sums) {
            assert_eq!(
                *sum,
                blake3::hash(&std::fs::read(src.join(name)).unwrap()),
                "{name}"
            );
        }
        // The anchor: the same reader over the tree on the local disk, in
        // the same order, cold. What else runs on the machine moves both
        // alike, so the queues are held to the larger of a fixed share and
        // twice what the disk alone showed in this pass.
        let raw: Vec<PathBuf> = names.iter().map(|f| src.join(f)).collect();
        let (raw_hops, _) = cpu_hops_reading(&raw);
        eprintln!("{hops} CPU changes in {n} files ({raw_hops} reading the tree directly)");
        assert_eq!(served(&stats).0, "uring", "{stats}");
        assert!(
            hops * 100 <= n * 15 || hops <= 2 * raw_hops,
            "the reader changed CPU {hops} times in {n} files read through the queues, \
             {raw_hops} times reading the tree directly"
        );
        halting.push(stayed(&stats));
    }
    // With idle CPUs polling (/dev/cpu_dma_latency held at 0) a hop costs
    // nothing to avoid: the switch stays off once the watchdog has seen
    // the sleeping idle states' counters stand still.
    let idle_states = std::path::Path::new("/sys/devices/system/cpu/cpu0/cpuidle/state1");
    assert!(
        idle_states.exists(),
        "{}: this test needs cpuidle's sleeping idle states (a VM's haltpoll, intel_idle...)",
        idle_states.display()
    );
    let polling = {
        let mut dma = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .unwrap();
        std::io::Write::write_all(&mut dma, &0i32.to_ne_bytes()).unwrap();
        let stats = stats_of(&img, &["--transport", "uring"], |mnt| {
            let files: Vec<PathBuf> = names.iter().map(|f| mnt.join(f)).collect();
            cpu_hops_reading(&files);
        });
        drop(dma);
        stayed(&stats)
    };
    eprintln!("submissions kept on the CPU: halting {halting:.3?}, polling {polling:.3}");
    assert!(
        halting.iter().any(|&h| h > 0.3),
        "the switch was not used with idle CPUs halting, in {} passes: {halting:.3?}",
        halting.len()
    );
    assert!(
        polling < 0.1,
        "the switch was used with idle CPUs polling: {polling:.3}"
    );
}

#[test]
#[ignore = "switches enable_uring: run by scripts/uring_tests.sh"]
fn auto_serves_through_dev_fuse_when_enable_uring_is_off() {
    let s = Settings::take();
    s.set(ENABLE_URING, "N");
    let t = scratch();
    let (src, img) = image(t.path());
    let o = ManifestOptions::default();
    let stats = stats_of(&img, &["--transport", "auto"], |mnt| {
        assert_same(
            "auto mount vs source",
            &manifest(mnt, &o),
            &manifest(&src, &o),
        );
    });
    assert_eq!(served(&stats).0, "dev", "{stats}");
    assert_eq!(served(&stats).1, 0, "{stats}");
    let (code, err) = uring_refused(&img);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--transport uring") && err.contains("enable_uring"),
        "{err}"
    );
}

#[test]
#[ignore = "switches kernel.io_uring_disabled: run by scripts/uring_tests.sh"]
fn auto_serves_through_dev_fuse_when_io_uring_is_disabled() {
    let s = Settings::take();
    s.set(ENABLE_URING, "Y");
    s.set(IO_URING_DISABLED, "2");
    let t = scratch();
    let (_src, img) = image(t.path());
    let stats = stats_of(&img, &[], |mnt| {
        std::fs::read_dir(mnt).unwrap().for_each(drop);
    });
    assert_eq!(served(&stats).0, "dev", "{stats}");
    let (code, err) = uring_refused(&img);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("io_uring_disabled"), "{err}");
}

#[test]
fn dev_transport_is_named_in_the_stats_and_a_bad_choice_is_a_usage_error() {
    if !require_root("mounts") {
        return;
    }
    let t = scratch();
    let (_src, img) = image(t.path());
    let stats = stats_of(&img, &["--transport", "dev"], |mnt| {
        std::fs::read_dir(mnt).unwrap().for_each(drop);
    });
    assert_eq!(served(&stats), ("dev", 0, served(&stats).2), "{stats}");
    let (code, err) = refused_mount(&img, &[], &[("PACKFS_TRANSPORT", "carrier-pigeon")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("PACKFS_TRANSPORT"), "{err}");
    // A spin that is not a number of microseconds is a usage error too,
    // before anything is mounted.
    let (code, err) = refused_mount(&img, &[], &[("PACKFS_DEV_SPIN_US", "fast")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("PACKFS_DEV_SPIN_US=\"fast\""), "{err}");
    // So are threads per io_uring queue that are not a count from 1 to 64.
    for bad in ["0", "many", "65"] {
        let (code, err) = refused_mount(&img, &[], &[("PACKFS_URING_THREADS", bad)]);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("PACKFS_URING_THREADS"), "{err}");
    }
}

/// The names of a process's threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

/// user+system CPU ticks of a process.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// `/dev/fuse` served by packfs's own threads (`--dev-spin N` or
/// `PACKFS_DEV_SPIN_US`) or by `fuser`'s (the default, `--dev-spin 0`):
/// each serves a whole tree walk and four readers at once (so that threads
/// unpark on a backlog and park again), every byte checked; and once the
/// readers stop, the spin ends: an idle mount costs no CPU.
#[test]
fn dev_fuse_threads_serve_concurrent_readers_and_sleep_when_idle() {
    if !require_root("mounts") {
        return;
    }
    let t = scratch();
    let (src, img) = image(t.path());
    let o = ManifestOptions::default();
    let files: Vec<PathBuf> = manifest(&src, &o)
        .into_iter()
        .filter(|(_, e)| e.kind == "file")
        .map(|(p, _)| p)
        .collect();
    assert!(files.len() > 100, "{} files", files.len());
    // (mount flags, daemon environment, names of the serving threads)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    // (case, the spin the stats report)
    let cases: [(Case, u64); 4] = [
        ((&[], &[], "fuser-"), 0),
        ((&["--dev-spin", "300"], &[], "fuse-dev-"), 300),
        ((&[], &[("PACKFS_DEV_SPIN_US", "200")], "fuse-dev-"), 200),
        (
            (
                &["--dev-spin", "0"],
                &[("PACKFS_DEV_SPIN_US", "200")],
                "fuser-",
            ),
            0,
        ),
    ];
    for ((flags, env, threads), spin_us) in cases {
        let case = format!("{flags:?} {env:?}");
        let mut args = vec!["--transport", "dev", "--threads", "4"];
        args.extend_from_slice(flags);
        let env: Vec<_> = ISOLATED.iter().chain(env).copied().collect();
        let stats = with_stats_env(&img, &args, &env, |mnt| {
            let pid = daemon_pid(mnt);
            // A new thread names itself once it runs: wait for that.
            let deadline = Instant::now() + Duration::from_secs(5);
            let serving = |names: &[String]| {
                names
                    .iter()
                    .filter(|n| {
                        n.strip_prefix(threads)
                            .is_some_and(|i| i.parse::<u32>().is_ok())
                    })
                    .count()
            };
            let mut names = thread_names(pid);
            while serving(&names) < 4 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                names = thread_names(pid);
            }
            assert_eq!(serving(&names), 4, "{case}: {names:?}");
            let other = if threads == "fuser-" {
                "fuse-dev-"
            } else {
                "fuser-"
            };
            assert!(
                !names.iter().any(|n| n.starts_with(other)),
                "{case}: {other} threads also read /dev/fuse: {names:?}"
            );
            assert_same(
                &format!("/dev/fuse threads {case} vs source"),
                &manifest(mnt, &o),
                &manifest(&src, &o),
            );
            std::thread::scope(|sc| {
                for k in 0..4 {
                    let (files, src, case) = (&files, &src, &case);
                    sc.spawn(move || {
                        for f in files.iter().skip(k).step_by(2) {
                            let got = std::fs::read(mnt.join(f)).unwrap();
                            let want = std::fs::read(src.join(f)).unwrap();
                            assert!(got == want, "{case}: {} differs", f.display());
                        }
                    });
                }
            });
            // Idle: no thread may keep spinning (100 ticks a second
            // each); allow a few for the stats thread and scheduling.
            std::thread::sleep(Duration::from_millis(100));
            let before = cpu_ticks(pid);
            std::thread::sleep(Duration::from_secs(1));
            let used = cpu_ticks(pid) - before;
            assert!(used <= 5, "{case}: an idle mount used {used} ticks in 1 s");
        });
        assert_eq!(served(&stats).0, "dev", "{stats}");
        assert!(served(&stats).2 > 100, "{stats}");
        assert_eq!(stats["dev_spin_us"].as_u64(), Some(spin_us), "{stats}");
    }
}
