//! What a job script and a user at the terminal meet: negative
//! lookups cached by the kernel (counted with `mount --stats`), `packfs run`
//! on a mountpoint that does not exist yet, dates in `ls -l` and `info`,
//! and an error that states its cause once.

use crate::common::{pack, packfs_bin, require_root, run, scratch, with_stats};
use std::path::Path;
use std::process::Command;

fn small_image(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("pkg/sub")).unwrap();
    std::fs::write(src.join("pkg/a.py"), b"x = 1\n").unwrap();
    std::fs::write(src.join("pkg/sub/b.txt"), b"b").unwrap();
    let img = dir.join("img.sqfs");
    pack(&src, &img, &["--mtime", "1795427936"]);
    img
}

/// Looks up missing names `n` times each through a mount made with
/// `extra`; returns the daemon's stats.
fn probe_missing(img: &Path, extra: &[&str], n: usize) -> serde_json::Value {
    with_stats(img, extra, |mnt| {
        for _ in 0..n {
            for name in ["nope.py", "pkg/missing.so", "pkg/sub/none"] {
                let e = std::fs::symlink_metadata(mnt.join(name)).unwrap_err();
                assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
            }
            // Existing names still resolve.
            assert_eq!(std::fs::read(mnt.join("pkg/sub/b.txt")).unwrap(), b"b");
        }
    })
}

#[test]
fn missing_names_are_asked_once_and_then_cached_by_the_kernel() {
    if !require_root("mounts") {
        return;
    }
    let dir = scratch();
    let img = small_image(dir.path());
    let cached = probe_missing(&img, &[], 20);
    let uncached = probe_missing(&img, &["--negative-ttl", "0"], 20);
    let neg = |v: &serde_json::Value| v["negative_lookups"].as_u64().unwrap();
    // Three missing names: each asked once when cached, every time when not.
    assert_eq!(neg(&cached), 3, "{cached}");
    assert_eq!(neg(&uncached), 60, "{uncached}");
    let total = |v: &serde_json::Value| v["requests_total"].as_u64().unwrap();
    assert!(
        total(&cached) + 57 <= total(&uncached),
        "{cached} vs {uncached}"
    );
    assert_eq!(cached["errors"], 0);
}

#[test]
fn run_creates_a_missing_mountpoint_and_removes_only_what_it_made() {
    if !require_root("mounts") {
        return;
    }
    let dir = scratch();
    let img = small_image(dir.path());
    let base = dir.path().join("job");
    std::fs::create_dir(&base).unwrap();
    let mp = base.join("1234/data");
    let out = run(Command::new(packfs_bin())
        .arg("run")
        .arg(format!("{}:{}", img.display(), mp.display()))
        .arg("--")
        .arg("cat")
        .arg(mp.join("pkg/sub/b.txt")));
    assert_eq!(out, "b");
    assert!(
        !base.join("1234").exists(),
        "created directories left behind"
    );
    assert!(base.exists(), "an existing parent was removed");
    // An existing mountpoint stays; the exit status passes through.
    let keep = dir.path().join("keep");
    std::fs::create_dir(&keep).unwrap();
    let st = Command::new(packfs_bin())
        .arg("run")
        .arg(format!("{}:{}", img.display(), keep.display()))
        .args(["--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    assert!(keep.is_dir());
    // A failed mount removes what was made for it too.
    let bad = dir.path().join("bad/mp");
    let st = Command::new(packfs_bin())
        .arg("run")
        .arg(format!(
            "{}:{}",
            dir.path().join("missing.sqfs").display(),
            bad.display()
        ))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(!dir.path().join("bad").exists());
}

#[test]
fn ls_and_info_print_dates() {
    let dir = scratch();
    let img = small_image(dir.path());
    let out = run(Command::new(packfs_bin())
        .env("TZ", "UTC")
        .args(["ls", "-l"])
        .arg(&img)
        .arg("pkg"));
    // 1795427936 = 2026-11-23 09:58:56 UTC.
    assert!(
        out.lines().all(|l| l.contains(" 2026-11-23 09:58 ")),
        "{out}"
    );
    assert!(out.contains("a.py") && out.contains("sub"), "{out}");
    let info = run(Command::new(packfs_bin())
        .env("TZ", "UTC")
        .arg("info")
        .arg(&img));
    assert!(info.contains("2026-11-23 09:58:56 UTC"), "{info}");
}

#[test]
fn an_error_states_its_cause_once() {
    let dir = scratch();
    let out = Command::new(packfs_bin())
        .args(["pack", "/nonexistent-packfs-src", "-o"])
        .arg(dir.path().join("x.sqfs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("no such file or directory").count(), 1, "{err}");
    assert!(err.contains("/nonexistent-packfs-src"), "{err}");
}

#[test]
fn terminal_ioctls_are_answered_not_a_tty_and_counted() {
    if !require_root("mounts") {
        return;
    }
    let dir = scratch();
    let img = small_image(dir.path());
    let s = with_stats(&img, &[], |mnt| {
        // Python's open() asks isatty (ioctl TCGETS) of every file it opens.
        let out = run(Command::new("python3")
            .arg("-c")
            .arg("import sys\nfor _ in range(5):\n    f = open(sys.argv[1], 'rb'); print(f.isatty(), f.read()); f.close()")
            .arg(mnt.join("pkg/sub/b.txt")));
        assert_eq!(out.matches("False b'b'").count(), 5, "{out}");
    });
    assert!(s["requests"]["other"].as_u64().unwrap() >= 10, "{s}");
    assert_eq!(s["errors"], 0, "{s}");
}
