//! The process side of a test: scratch directories, running a command, the
//! two packers (`packfs pack`, `mksquashfs`), and what a test needs from the
//! machine (root, a tool on PATH).
//!
//! A test that lacks a tool or root either returns early (on a developer's
//! machine: it says what it skipped) or fails with the reason: when env `CI`
//! is set, because a CI machine without the tool would otherwise report a
//! green run that tested nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn packfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_packfs"))
}

pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch directory on the real disk (not tmpfs, whose xattr and sparse
/// behaviour differs from what users pack), removed on drop.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("packfs-test-")
        .tempdir_in("/var/tmp")
        .expect("scratch dir in /var/tmp")
}

/// A scratch directory for fixtures shared by every test of the process
/// (held in a `static`, which Rust never drops): removed when the process
/// exits, so that a run does not leave its fixtures in `/var/tmp`.
pub fn process_scratch() -> PathBuf {
    use std::sync::{Mutex, Once};
    static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    static HOOK: Once = Once::new();
    extern "C" fn remove_all() {
        if let Ok(dirs) = DIRS.lock() {
            for d in dirs.iter() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    // SAFETY: `remove_all` is an `extern "C"` function with no arguments
    // that does not unwind (it ignores every error), as atexit requires.
    HOOK.call_once(|| unsafe {
        libc::atexit(remove_all);
    });
    let dir = scratch().keep();
    DIRS.lock().unwrap().push(dir.clone());
    dir
}

/// Runs `cmd`, asserting success; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd`, asserting that it fails with status 1 (an error: not a
/// usage error's 2, not a panic's 101, not a signal); returns its stderr.
pub fn error_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{cmd:?}: {e}");
    e
}

/// Asserts that a command's `out` is a success (its stderr is the
/// message if not); returns its stdout.
pub fn assert_ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `packfs pack SRC -o IMG -q EXTRA...`, asserting success.
pub fn pack(src: &Path, img: &Path, extra: &[&str]) {
    run(Command::new(packfs_bin())
        .arg("pack")
        .arg(src)
        .arg("-o")
        .arg(img)
        .arg("-q")
        .args(extra));
}

/// The `mksquashfs SRC IMG` command, quiet and replacing any old image,
/// with `extra` options; returned unrun for a test that expects a failure.
pub fn mksquashfs_cmd(src: &Path, img: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new("mksquashfs");
    c.arg(src)
        .arg(img)
        .args(["-noappend", "-quiet", "-no-progress"])
        .args(extra);
    c
}

/// `mksquashfs SRC IMG EXTRA...`, asserting success.
pub fn mksquashfs(src: &Path, img: &Path, extra: &[&str]) {
    run(&mut mksquashfs_cmd(src, img, extra));
}

/// Whether the test may go on, given that it needs `what` and `have` says
/// whether it is there. Without it: under CI, a failure naming `what`;
/// elsewhere a line on stderr and `false`, for the test to return.
pub fn require(have: bool, what: &str) -> bool {
    if have {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "this test needs {what}, which this CI machine lacks (CI is set, so it fails instead of skipping)"
    );
    eprintln!("skipped: needs {what}");
    false
}

/// [`require`] of root (mounts, loop devices, chown, dropping caches).
pub fn require_root(why: &str) -> bool {
    require(is_root(), &format!("root ({why})"))
}

/// Whether `tool` runs here at all (any exit status counts).
pub fn have_tool(tool: &str) -> bool {
    Command::new(tool)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// [`require`] of a program on PATH.
pub fn require_tool(tool: &str) -> bool {
    require(have_tool(tool), &format!("`{tool}` on PATH"))
}
