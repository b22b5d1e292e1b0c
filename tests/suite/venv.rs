//! Python environments end to end: a real venv with numpy and a
//! pure-Python package with a console script (from PyPI), packed with
//! `--mount-at` and `--compile`, run inside bubblewrap with its build path
//! hidden, checked with strace to write and compile nothing, and read the
//! same way through the kernel's SquashFS driver and squashfuse_ll.
//!
//! Needs root (mounts), python3-venv, network access to PyPI, bwrap,
//! strace and squashfuse_ll (scripts/setup.sh installs them). Anything
//! missing fails the test with what is missing: a skip would hide that CI
//! stopped checking the venv path.

use crate::common::{
    packfs_bin, process_scratch, require_root, run, scratch, KernelMount, PackfsMount,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What the test venv holds.
struct Venv {
    /// Where it was built (hidden from every run below).
    build: PathBuf,
}

/// One venv for every test in this file (building it costs seconds and a
/// download).
fn venv() -> &'static Venv {
    static V: OnceLock<Venv> = OnceLock::new();
    V.get_or_init(|| {
        let build = process_scratch().join("build-venv");
        run(Command::new("python3").args(["-m", "venv"]).arg(&build));
        let pip = build.join("bin/pip");
        // numpy as pip installs it (with .pyc files); tqdm, pure Python with
        // a console script, without .pyc files, for --compile to supply.
        run(Command::new(&pip).args([
            "install",
            "-q",
            "--disable-pip-version-check",
            "--timeout",
            "60",
            "numpy",
        ]));
        run(Command::new(&pip).args([
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-compile",
            "--timeout",
            "60",
            "tqdm",
        ]));
        Venv { build }
    })
}

fn need(tool: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{tool} is not installed (scripts/setup.sh installs it)");
}

fn pack_venv(img: &Path, extra: &[&str]) -> String {
    let out = Command::new(packfs_bin())
        .arg("pack")
        .arg(&venv().build)
        .arg("-o")
        .arg(img)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "pack failed: {stderr}");
    stderr
}

/// Runs `argv` in bubblewrap with the build path hidden under an empty
/// tmpfs and `at` bound to `mount_at`; returns stdout. With `trace`, under
/// strace; returns the trace too.
fn in_container(at: &Path, mount_at: &Path, argv: &[&str], trace: bool) -> (String, String) {
    let dir = scratch();
    let log = dir.path().join("strace.log");
    let mut cmd = Command::new("bwrap");
    cmd.args(["--dev-bind", "/", "/", "--tmpfs"])
        .arg(&venv().build)
        .arg("--bind")
        .arg(at)
        .arg(mount_at);
    // Nothing from the caller's environment points Python elsewhere or
    // stops it from writing bytecode (as a job's environment would not).
    for v in [
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX",
    ] {
        cmd.env_remove(v);
    }
    if trace {
        cmd.args([
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=open,openat,mkdir,mkdirat,rename,unlink",
            "-o",
        ])
        .arg(&log);
    }
    cmd.args(argv);
    let out = run(&mut cmd);
    let t = if trace {
        std::fs::read_to_string(&log).unwrap()
    } else {
        String::new()
    };
    (out, t)
}

/// Trace lines opening a `.py` source under `root`: with a valid `.pyc`
/// Python only stats the source, so an opened source is a recompile.
fn sources_read(trace: &str, root: &Path) -> Vec<String> {
    let root = root.to_string_lossy();
    trace
        .lines()
        .filter(|l| l.contains(&*root) && l.contains(".py\"") && l.contains("open"))
        .filter(|l| !l.contains("ENOENT"))
        .map(str::to_string)
        .collect()
}

/// Trace lines that write, create or compile under `root`.
fn writes_under(trace: &str, root: &Path) -> Vec<String> {
    let root = root.to_string_lossy();
    trace
        .lines()
        .filter(|l| l.contains(&*root))
        .filter(|l| {
            l.contains("O_WRONLY")
                || l.contains("O_RDWR")
                || l.contains("O_CREAT")
                || l.contains("mkdir")
                || l.contains("rename")
                || l.contains("unlink")
        })
        .map(str::to_string)
        .collect()
}

const IMPORT: &str = "import numpy, tqdm, sys; print(sys.prefix); print(numpy.__file__); print(tqdm.__file__); print(numpy.arange(10).sum())";

/// The container checks, for one reader of the image mounted at `at`.
fn check_reader(what: &str, at: &Path, mount_at: &Path) {
    let m = mount_at.to_str().unwrap();
    let py = format!("{m}/bin/python");
    let (out, trace) = in_container(at, mount_at, &[&py, "-c", IMPORT], true);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], m, "{what}: sys.prefix");
    assert!(lines[1].starts_with(&format!("{m}/lib/")), "{what}: {out}");
    assert!(lines[2].starts_with(&format!("{m}/lib/")), "{what}: {out}");
    assert_eq!(lines[3], "45", "{what}");
    let w = writes_under(&trace, mount_at);
    assert!(
        w.is_empty(),
        "{what}: imports wrote or compiled:\n{}",
        w.join("\n")
    );
    let r = sources_read(&trace, mount_at);
    assert!(
        r.is_empty(),
        "{what}: imports recompiled sources:\n{}",
        r.join("\n")
    );
    // Console scripts by their shebang, not through python.
    let (out, _) = in_container(
        at,
        mount_at,
        &[&format!("{m}/bin/tqdm"), "--version"],
        false,
    );
    assert!(
        out.trim()
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit()),
        "{what}: tqdm --version said {out:?}"
    );
    let (out, _) = in_container(at, mount_at, &[&format!("{m}/bin/pip"), "--version"], false);
    assert!(
        out.contains(&format!("from {m}/lib/")),
        "{what}: pip runs from elsewhere: {out}"
    );
}

#[test]
fn a_venv_packed_for_another_path_runs_there_in_a_container_and_writes_nothing() {
    if !require_root("the mounts and bwrap binds") {
        return;
    }
    for t in ["bwrap", "strace", "squashfuse_ll"] {
        need(t);
    }
    let dir = scratch();
    let mount_at = dir.path().join("opt/venv");
    std::fs::create_dir_all(&mount_at).unwrap();
    let img = dir.path().join("venv.sqfs");
    let report = pack_venv(
        &img,
        &["--mount-at", mount_at.to_str().unwrap(), "--compile"],
    );
    assert!(report.contains("rewritten in the image for"), "{report}");
    assert!(report.contains("console-script shebangs"), "{report}");
    assert!(report.contains("base interpreter"), "{report}");
    let compiled: u64 = report
        .split("compiled ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no compile line: {report}"));
    assert!(compiled > 10, "tqdm's .py files were compiled: {report}");
    // The source venv is untouched: still no .pyc for tqdm, scripts as built.
    let tqdm_cache = std::fs::read_dir(venv().build.join("lib"))
        .unwrap()
        .flatten()
        .map(|d| d.path().join("site-packages/tqdm/__pycache__"))
        .find(|p| p.exists());
    assert!(tqdm_cache.is_none(), "--compile wrote into the source tree");
    let pip_head = std::fs::read_to_string(venv().build.join("bin/pip")).unwrap();
    assert!(pip_head.starts_with(&format!("#!{}", venv().build.display())));

    // packfs's own mount, the kernel's, squashfuse_ll's: the same behaviour.
    let packfs = PackfsMount::new(&img, &[]);
    check_reader("packfs", packfs.path(), &mount_at);
    drop(packfs);
    let kernel = KernelMount::new(&img).expect("kernel loop mount of the venv image");
    check_reader("kernel", kernel.path(), &mount_at);
    drop(kernel);
    let sq = scratch();
    run(Command::new("squashfuse_ll").arg(&img).arg(sq.path()));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("fusermount3").arg("-u").arg(self.0).status();
        }
    }
    let _u = Unmount(sq.path());
    check_reader("squashfuse_ll", sq.path(), &mount_at);
}

#[test]
fn without_compile_python_tries_to_write_pycache_so_the_check_above_can_fail() {
    if !require_root("mounts and bwrap binds") {
        return;
    }
    need("bwrap");
    need("strace");
    let dir = scratch();
    let mount_at = dir.path().join("venv");
    std::fs::create_dir_all(&mount_at).unwrap();
    let img = dir.path().join("venv.sqfs");
    pack_venv(&img, &["--mount-at", mount_at.to_str().unwrap()]);
    let m = PackfsMount::new(&img, &[]);
    let py = format!("{}/bin/python", mount_at.display());
    let (_, trace) = in_container(m.path(), &mount_at, &[&py, "-c", IMPORT], true);
    let w = writes_under(&trace, &mount_at);
    assert!(
        w.iter().any(|l| l.contains("tqdm/__pycache__")),
        "expected attempts to write tqdm's __pycache__, got:\n{}",
        w.join("\n")
    );
    let r = sources_read(&trace, &mount_at);
    assert!(
        r.iter().any(|l| l.contains("tqdm/")),
        "expected tqdm's sources to be read and compiled, got:\n{}",
        r.join("\n")
    );
}

#[test]
fn without_mount_at_the_report_says_where_the_image_works() {
    let dir = scratch();
    let img = dir.path().join("venv.sqfs");
    let report = pack_venv(&img, &["-q"]);
    assert!(
        report.contains(&format!(
            "works only when mounted at {}",
            venv().build.display()
        )),
        "{report}"
    );
    // The image is the source as it is: scripts still name the build path.
    let out = run(Command::new(packfs_bin())
        .arg("cat")
        .arg(&img)
        .arg("bin/pip"));
    assert!(out.starts_with(&format!("#!{}/bin/python", venv().build.display())));
}

#[test]
fn mount_at_on_a_tree_that_is_not_a_venv_is_a_clear_error() {
    let dir = scratch();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/a"), b"a").unwrap();
    let out = Command::new(packfs_bin())
        .arg("pack")
        .arg(dir.path().join("src"))
        .arg("-o")
        .arg(dir.path().join("x.sqfs"))
        .args(["--mount-at", "/opt/x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no pyvenv.cfg"), "{err}");
    assert!(!dir.path().join("x.sqfs").exists());
    let out = Command::new(packfs_bin())
        .arg("pack")
        .arg(&venv().build)
        .arg("-o")
        .arg(dir.path().join("y.sqfs"))
        .args(["--mount-at", "opt/relative"])
        .output()
        .unwrap();
    // A usage error, found while parsing: status 2.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mount-at") && err.contains("\"opt/relative\" is relative"),
        "{err}"
    );
    assert!(!dir.path().join("y.sqfs").exists());
}

#[test]
fn zip_images_get_the_same_rewrites_and_compiled_files() {
    let dir = scratch();
    let img = dir.path().join("venv.zip");
    pack_venv(&img, &["-q", "--mount-at", "/opt/zipvenv", "--compile"]);
    let pip = run(Command::new("unzip").arg("-p").arg(&img).arg("bin/pip"));
    assert!(pip.starts_with("#!/opt/zipvenv/bin/python"), "{pip}");
    let list = run(Command::new("unzip").arg("-Z1").arg(&img));
    assert!(
        list.lines()
            .any(|l| l.contains("site-packages/tqdm/__pycache__/") && l.ends_with(".pyc")),
        "no compiled tqdm in the ZIP"
    );
    run(Command::new("unzip").arg("-tq").arg(&img));
}
