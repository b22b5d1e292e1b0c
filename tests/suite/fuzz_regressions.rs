//! Replays the fuzzers' finds on stable: every file under
//! `tests/fuzz_regressions/<target>/` (a crash, hang or out-of-memory input
//! that `scripts/fuzz.sh` found, plus a few tiny inputs so the folders are
//! never empty) goes through the walk the fuzz target runs
//! (`packfs_testkit::open_and_walk`), and through format detection too. It
//! must return, without a panic, within a time bound.

use crate::common::mksquashfs;
use packfs_testkit::{open_and_walk, Limits, Target};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Far above what any input takes (milliseconds); only a hang gets there.
const TIME_LIMIT: Duration = Duration::from_secs(60);

fn inputs() -> Vec<(Target, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut out = Vec::new();
    for d in std::fs::read_dir(&dir).unwrap() {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue; // README.md
        }
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        let target = Target::from_name(&name)
            .unwrap_or_else(|| panic!("{}: not a fuzz target", d.display()));
        for f in std::fs::read_dir(&d).unwrap() {
            out.push((target, f.unwrap().path()));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// Runs `target` on `bytes` on its own thread, failing on a panic or when
/// it does not return within [`TIME_LIMIT`].
fn replay(target: Target, path: &Path, bytes: Vec<u8>) {
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    let worker = std::thread::spawn(move || {
        let r = open_and_walk(target, &bytes, Limits::default());
        let _ = tx.send(r);
    });
    match rx.recv_timeout(TIME_LIMIT) {
        Ok(r) => eprintln!(
            "{} as {target:?}: {} in {:?}",
            path.display(),
            match r {
                Some(s) => format!(
                    "{} nodes, {} entries, {} bytes read, {} errors",
                    s.nodes, s.entries, s.read_bytes, s.errors
                ),
                None => "refused at open".into(),
            },
            t0.elapsed()
        ),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let e = worker.join().expect_err("the walk ended without a result");
            panic!("{} as {target:?}: panicked: {e:?}", path.display());
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!(
                "{} as {target:?}: still running after {TIME_LIMIT:?}",
                path.display()
            )
        }
    }
}

#[test]
fn fuzz_regression_inputs_give_errors_not_panics_or_hangs() {
    let inputs = inputs();
    for t in ["squashfs", "zip"] {
        assert!(
            inputs
                .iter()
                .any(|(target, _)| Some(*target) == Target::from_name(t)),
            "no regression inputs for {t}"
        );
    }
    for (target, path) in inputs {
        let bytes = std::fs::read(&path).unwrap();
        replay(target, &path, bytes.clone());
        if target != Target::Any {
            replay(Target::Any, &path, bytes);
        }
    }
}

/// The seed images of `scripts/fuzz_seeds.sh`, when built, open and walk
/// with no error at all: a seed the walk could not read would only teach the
/// fuzzer error paths. Not run by default (the seeds are not in git):
/// `scripts/fuzz_seeds.sh && cargo test --test tests suite::fuzz_regressions -- --ignored`.
#[test]
#[ignore]
fn seed_images_walk_without_errors() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let mut n = 0;
    for (dir, target) in [("squashfs", Target::SquashFs), ("zip", Target::Zip)] {
        let Ok(rd) = std::fs::read_dir(seeds.join(dir)) else {
            continue;
        };
        for f in rd {
            let p = f.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            for t in [target, Target::Any] {
                let s = open_and_walk(t, &bytes, Limits::default())
                    .unwrap_or_else(|| panic!("{}: did not open as {t:?}", p.display()));
                eprintln!("{} as {t:?}: {s:?}", p.display());
                assert_eq!(s.errors, 0, "{} as {t:?}: {s:?}", p.display());
                let empty = p.to_string_lossy().contains("empty");
                assert!(
                    empty || (s.nodes >= 10 && s.read_bytes > 10_000),
                    "{}: {s:?}",
                    p.display()
                );
            }
            n += 1;
        }
    }
    assert!(
        n > 0,
        "no seeds in {}: run scripts/fuzz_seeds.sh",
        seeds.display()
    );
}

/// The walk reaches everything in a real image (so a regression input that
/// opens is really walked): the fixture of `scripts/fuzz_seeds.sh` in small,
/// as mksquashfs and `zip` write it.
#[test]
fn the_walk_reads_every_node_of_an_intact_image() {
    use std::process::Command;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a"), b"hello").unwrap();
    std::fs::write(src.join("d/b"), vec![7u8; 300_000]).unwrap();
    std::os::unix::fs::symlink("a", src.join("l")).unwrap();
    let sq = t.path().join("i.sqfs");
    mksquashfs(&src, &sq, &["-b", "4K"]);
    let zip = t.path().join("i.zip");
    let ok = Command::new("zip")
        .current_dir(&src)
        .args(["-q", "-r", "-y"])
        .arg(&zip)
        .arg(".")
        .status()
        .unwrap()
        .success();
    assert!(ok, "zip failed");
    for (target, img) in [
        (Target::SquashFs, &sq),
        (Target::Zip, &zip),
        (Target::Any, &sq),
        (Target::Any, &zip),
    ] {
        let bytes = std::fs::read(img).unwrap();
        let s = open_and_walk(target, &bytes, Limits::default())
            .unwrap_or_else(|| panic!("{target:?}: {} did not open", img.display()));
        // Root, a, d, d/b, l.
        assert_eq!(s.nodes, 5, "{target:?} {}: {s:?}", img.display());
        assert_eq!(s.errors, 0, "{target:?} {}: {s:?}", img.display());
        assert!(s.read_bytes >= 300_005, "{target:?}: {s:?}");
    }
}
