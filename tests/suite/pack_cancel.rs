//! Ctrl-C during a long pack stops it within a second, whatever the codec,
//! block size and output format: the workers look for the cancel flag
//! before every block (SquashFS), every file and every segment (ZIP), so
//! the work already queued is dropped rather than compressed. Cleanup is as
//! for any interruption: nothing under the output's name, no temporary
//! file, and death by the signal.
//!
//! Each case is slow enough (xz on 1 MiB blocks, zstd -19, a stream of
//! millions of files) that the pack is still running when the signal
//! comes; the test says so if it is not. A stream whose namespace spilled
//! to disk leaves none of its runs either.

use crate::common::{bytes, packfs_bin, scratch};
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// When the signal is sent after the start.
const SIGNAL_AT: Duration = Duration::from_millis(300);
/// How long packfs may take to stop after it.
const STOP_WITHIN: Duration = Duration::from_secs(1);

/// 20 MB of generated text, as one file or as twenty of 1 MB.
fn text_tree(root: &Path, files: usize) {
    fs::create_dir_all(root).unwrap();
    let per = (20 << 20) / files;
    for k in 0..files {
        fs::write(
            root.join(format!("t{k:02}.txt")),
            bytes(k as u64 + 7, per, true),
        )
        .unwrap();
    }
}

/// Packs `src` to `out` with `extra`, sends SIGINT at [`SIGNAL_AT`] and
/// checks the stop: its time, its status, its message, what is left.
fn interrupt(src: &Path, out: &Path, extra: &[&str]) {
    interrupt_after(src, out, extra, SIGNAL_AT, None)
}

/// [`interrupt`], the signal sent at `at`, the stream `feed` writes on
/// stdin when given.
fn interrupt_after(
    src: &Path,
    out: &Path,
    extra: &[&str],
    at: Duration,
    feed: Option<fn(&mut std::process::ChildStdin)>,
) {
    let what = format!(
        "pack {} -o {} {}",
        src.display(),
        out.display(),
        extra.join(" ")
    );
    let mut child = Command::new(packfs_bin())
        .arg("pack")
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(extra)
        .env("RUST_LOG", "packer::archive=debug")
        .stdin(if feed.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feeder = feed.map(|f| {
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || f(&mut stdin))
    });
    std::thread::sleep(at);
    assert!(
        child.try_wait().unwrap().is_none(),
        "{what}: finished before the signal; this test needs a slower pack"
    );
    // SAFETY: kill has no memory effects; the child is ours and alive.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let sent = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{what}: still running 30 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = sent.elapsed();
    let o = child.wait_with_output().unwrap();
    if let Some(f) = feeder {
        // Its writes fail once packfs is gone.
        f.join().unwrap();
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        took < STOP_WITHIN,
        "{what}: stopped {took:?} after SIGINT, want under {STOP_WITHIN:?}; stderr:\n{stderr}"
    );
    assert_eq!(
        status.signal(),
        Some(libc::SIGINT),
        "{what}: {status}; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("interrupted by SIGINT"),
        "{what}: stderr:\n{stderr}"
    );
    let dir = out.parent().unwrap();
    let name = out.file_name().unwrap().to_string_lossy();
    let left: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(name.as_ref()) || n.starts_with(".packfs-spill"))
        .collect();
    assert!(left.is_empty(), "{what}: left behind: {left:?}");
    if feed.is_some() {
        assert!(
            stderr.contains("namespace spilled"),
            "{what}: did not spill before the signal; stderr:\n{stderr}"
        );
    }
}

#[test]
fn sigint_stops_a_stream_whose_namespace_spilled_and_leaves_no_run() {
    let work = scratch();
    let feed: fn(&mut std::process::ChildStdin) = |w| {
        let layout = packfs_testkit::tarstream::Layout {
            files: 20_000_000,
            per_dir: 1000,
        };
        let mut w = std::io::BufWriter::with_capacity(1 << 20, w);
        let _ = packfs_testkit::tarstream::write(layout, &mut w);
    };
    let out = work.path().join("x.sqfs");
    let stdin = Path::new("-");
    let at = Duration::from_secs(3);
    interrupt_after(stdin, &out, &["--memory", "16M"], at, Some(feed));
}

#[test]
fn sigint_stops_an_xz_squashfs_pack_within_a_second() {
    let work = scratch();
    let (one, many) = (work.path().join("one"), work.path().join("many"));
    text_tree(&one, 1);
    text_tree(&many, 20);
    for src in [&one, &many] {
        interrupt(src, &work.path().join("x.sqfs"), &["-c", "xz", "-b", "1M"]);
    }
}

#[test]
fn sigint_stops_a_zip_pack_within_a_second() {
    let work = scratch();
    // One file above the streaming threshold (segments compressed in
    // parallel), and files compressed whole from the window.
    let (one, many) = (work.path().join("one"), work.path().join("many"));
    text_tree(&one, 1);
    text_tree(&many, 20);
    for src in [&one, &many] {
        interrupt(src, &work.path().join("x.zip"), &["-c", "zstd", "-l", "19"]);
    }
}
