//! Packer faults, through the real `packfs pack` binary and for both output
//! formats: out of space, a source file deleted / truncated / grown /
//! replaced during the pack, permission denied, SIGINT and SIGTERM mid-pack.
//! Each must end with a message naming the path and what happened, a
//! non-zero status, nothing under the final name and no temporary file.
//!
//! "During the pack" is made deterministic, not a race: the source tree's
//! first file in data order is a *gate*, a file on which the test holds a
//! write lease (`fcntl(F_SETLEASE)`). The walk only `lstat`s it; when the
//! data phase opens it, the kernel blocks that `open` until the lease holder
//! lets go, and shows the holder that someone is waiting (`F_GETLEASE` stops
//! answering `F_WRLCK`). So the test knows packfs is past the walk (every
//! size recorded) and has not read the files after the gate yet; it changes
//! the tree or sends a signal, then releases the gate. Samba and the NFS
//! server hold leases the same way, so this is also a case packfs must
//! handle: wait for the lease, not fail.
//!
//! Ordering behind the gate: SquashFS reads files in depth-first name order
//! on the compression pool, one file after another with `--threads 1`; ZIP
//! streams a file above `STREAM_ABOVE` (8 MiB) on the main thread only once
//! everything before it is written and before anything after it is read.
//! The gate comes first by name and is 9 MiB, so both block on it before
//! touching the victim.

use crate::common::{bytes, is_root, packfs_bin, require_root, run, scratch};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const FORMATS: [&str; 2] = ["sqfs", "zip"];
/// Longest a single packfs run may take here before the test gives up on it
/// (a hang is a failure, not a stuck test suite). Runs take well under 1 s.
const DEADLINE: Duration = Duration::from_secs(30);
/// Above the ZIP writer's streaming threshold (8 MiB), see the module doc.
const GATE_SIZE: usize = 9 << 20;
/// `F_SETSIG` (asm-generic value, the same on x86_64 and aarch64); the libc
/// crate does not export it for glibc targets.
const F_SETSIG: libc::c_int = 10;

/// `packfs pack SRC -o OUT -q --threads 1`, stderr captured.
fn pack_cmd(src: &Path, out: &Path) -> Command {
    let mut c = Command::new(packfs_bin());
    c.arg("pack")
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(["-q", "--threads", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Waits for `child` at most [`DEADLINE`]; past that kills it and panics.
fn finish(mut child: Child, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: packfs still running after {DEADLINE:?} (killed); stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts a run that failed with status 1 and a stderr containing every
/// needle; returns stderr.
fn assert_error(out: &Output, what: &str, needles: &[String]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: want exit status 1, got {}; stderr:\n{stderr}",
        out.status
    );
    for n in needles {
        assert!(
            stderr.contains(n.as_str()),
            "{what}: stderr lacks {n:?}:\n{stderr}"
        );
    }
    stderr
}

/// Nothing under the final name, and no `.NAME.tmp-*` beside it.
fn assert_no_output(out: &Path, what: &str) {
    assert!(
        fs::symlink_metadata(out).is_err(),
        "{what}: {} exists",
        out.display()
    );
    let name = out.file_name().unwrap().to_string_lossy();
    let prefix = format!(".{name}.tmp-");
    let left: Vec<String> = fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "{what}: temporary files left: {left:?}");
}

/// A source file whose opening blocks packfs until the test releases it
/// (see the module doc).
struct Gate {
    path: PathBuf,
    file: Option<fs::File>,
}

impl Gate {
    fn new(path: &Path) -> Gate {
        fs::write(path, bytes(0x6a7e, GATE_SIZE, false)).unwrap();
        let file = fs::File::open(path).unwrap();
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on an fd we own. The lease break is signalled to
        // the holder with SIGIO by default, which would kill the test
        // process; SIGURG is ignored by default. Polling F_GETLEASE is how
        // the test learns of the break.
        assert_eq!(unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) }, 0);
        // A write lease needs the file open nowhere else. A child another
        // test thread is spawning holds copies of all our fds, the one
        // that wrote this file included, until its exec closes them: wait
        // that out.
        let start = Instant::now();
        // SAFETY: as above.
        while unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) } != 0 {
            let e = std::io::Error::last_os_error();
            assert!(
                e.raw_os_error() == Some(libc::EAGAIN) && start.elapsed() < DEADLINE,
                "{}: F_SETLEASE: {e}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        Gate {
            path: path.into(),
            file: Some(file),
        }
    }

    /// Returns once packfs is blocked opening the gate; panics if it exits
    /// (or takes past [`DEADLINE`]) first.
    fn wait_reached(&self, child: &mut Child) {
        let fd = self.file.as_ref().unwrap().as_raw_fd();
        let start = Instant::now();
        loop {
            // SAFETY: fcntl on an fd we own.
            if unsafe { libc::fcntl(fd, libc::F_GETLEASE) } != libc::F_WRLCK {
                return;
            }
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                panic!(
                    "packfs ended ({st}) before opening {}:\n{err}",
                    self.path.display()
                );
            }
            assert!(
                start.elapsed() < DEADLINE,
                "packfs did not open {} within {DEADLINE:?}",
                self.path.display()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Lets packfs open the gate (closing the fd drops the lease).
    fn release(&mut self) {
        self.file = None;
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.release();
    }
}

/// A tmpfs of `size` mounted on a scratch directory, unmounted on drop
/// (also when the test panics).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = scratch();
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path()));
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

#[test]
fn out_of_space() {
    if !require_root("mounting a small tmpfs") {
        return;
    }
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    // 3 MB of incompressible data: no image of it fits in 2 MB.
    fs::write(src.join("noise"), bytes(1, 3 << 20, false)).unwrap();
    fs::write(src.join("small"), b"small").unwrap();
    for fmt in FORMATS {
        let what = format!("out of space, {fmt}");
        let tmpfs = Tmpfs::mount("2m");
        let out = tmpfs.path().join(format!("x.{fmt}"));
        let o = finish(pack_cmd(&src, &out).spawn().unwrap(), &what);
        assert_error(
            &o,
            &what,
            &[
                format!("{}: ", out.display()),
                "no space left on device".into(),
            ],
        );
        assert_no_output(&out, &what);
        let left: Vec<_> = fs::read_dir(tmpfs.path()).unwrap().collect();
        assert!(left.is_empty(), "{what}: left on the tmpfs: {left:?}");
    }
}

/// Packs a tree `a-gate`, `b-victim` (`victim_size` bytes), `c-after`;
/// calls `change` on the victim once packfs has scanned the tree and is
/// blocked on the gate; expects an error whose stderr holds `needles(victim)`.
fn change_during_pack(
    what: &str,
    victim_size: usize,
    change: impl Fn(&Path),
    needles: impl Fn(&Path) -> Vec<String>,
) {
    for fmt in FORMATS {
        let what = format!("{what}, {victim_size} bytes, {fmt}");
        let work = scratch();
        let src = work.path().join("src");
        fs::create_dir(&src).unwrap();
        let mut gate = Gate::new(&src.join("a-gate"));
        let victim = src.join("b-victim");
        fs::write(&victim, bytes(2, victim_size, true)).unwrap();
        fs::write(src.join("c-after"), b"after").unwrap();
        let out = work.path().join(format!("x.{fmt}"));
        let mut child = pack_cmd(&src, &out).spawn().unwrap();
        gate.wait_reached(&mut child);
        change(&victim);
        gate.release();
        let o = finish(child, &what);
        assert_error(&o, &what, &needles(&victim));
        assert_no_output(&out, &what);
    }
}

/// A small file (one block, its tail in a fragment) and one of several
/// pieces that ZIP streams.
const VICTIM_SIZES: [usize; 2] = [100_000, GATE_SIZE + 1];

#[test]
fn file_deleted_during_pack() {
    for n in VICTIM_SIZES {
        change_during_pack(
            "deleted",
            n,
            |v| fs::remove_file(v).unwrap(),
            |v| {
                vec![format!(
                    "{}: deleted or renamed during the pack",
                    v.display()
                )]
            },
        );
    }
}

#[test]
fn file_truncated_during_pack() {
    for n in VICTIM_SIZES {
        change_during_pack(
            "truncated",
            n,
            |v| {
                let f = fs::OpenOptions::new().write(true).open(v).unwrap();
                f.set_len(n as u64 / 2).unwrap();
            },
            |v| {
                vec![format!(
                    "{}: changed size during the pack: {n} -> {} bytes",
                    v.display(),
                    n / 2
                )]
            },
        );
    }
}

#[test]
fn file_grown_during_pack() {
    for n in VICTIM_SIZES {
        change_during_pack(
            "grown",
            n,
            |v| {
                let mut f = fs::OpenOptions::new().append(true).open(v).unwrap();
                f.write_all(&[b'x'; 4096]).unwrap();
            },
            |v| {
                vec![format!(
                    "{}: changed size during the pack: {n} -> {} bytes",
                    v.display(),
                    n + 4096
                )]
            },
        );
    }
}

/// A file replaced by a FIFO: opening a FIFO for reading blocks until a
/// writer comes, so a packer that opens it like a file hangs forever.
#[test]
fn file_replaced_by_fifo_during_pack() {
    change_during_pack(
        "replaced by a fifo",
        100_000,
        |v| {
            fs::remove_file(v).unwrap();
            let c = std::ffi::CString::new(v.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: valid path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        },
        |v| {
            vec![format!(
                "{}: replaced during the pack (not the file the scan found)",
                v.display()
            )]
        },
    );
}

/// A file replaced by another of the same size, renamed over it (what
/// editors and `cp` to a temporary name do): the sizes agree, so only the
/// inode tells. It was packed with the new bytes under the old metadata.
#[test]
fn file_replaced_by_a_rename_during_pack() {
    for n in VICTIM_SIZES {
        change_during_pack(
            "replaced by a rename",
            n,
            |v| {
                let tmp = v.with_extension("new");
                fs::write(&tmp, bytes(3, n, true)).unwrap();
                fs::rename(&tmp, v).unwrap();
            },
            |v| {
                vec![format!(
                    "{}: replaced during the pack (not the file the scan found)",
                    v.display()
                )]
            },
        );
    }
}

/// An empty file has no data to read, so nothing looked at it again: one
/// that grew or went away during the pack was packed as it was scanned.
#[test]
fn an_empty_file_that_grows_or_goes_during_pack() {
    change_during_pack(
        "empty, grown",
        0,
        |v| fs::write(v, b"grown").unwrap(),
        |v| {
            vec![format!(
                "{}: changed size during the pack: 0 -> 5 bytes",
                v.display()
            )]
        },
    );
    change_during_pack(
        "empty, deleted",
        0,
        |v| fs::remove_file(v).unwrap(),
        |v| {
            vec![format!(
                "{}: deleted or renamed during the pack",
                v.display()
            )]
        },
    );
}

/// Whether signal `sig` is still pending for process `pid` (not yet taken
/// by one of its threads), from /proc/PID/status.
fn signal_pending(pid: u32, sig: libc::c_int) -> bool {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().any(|l| {
        l.strip_prefix("ShdPnd:")
            .or_else(|| l.strip_prefix("SigPnd:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (sig - 1)) != 0)
    })
}

fn interrupt(sig: libc::c_int, name: &str) {
    for fmt in FORMATS {
        let what = format!("{name}, {fmt}");
        let work = scratch();
        let src = work.path().join("src");
        fs::create_dir(&src).unwrap();
        let mut gate = Gate::new(&src.join("a-gate"));
        fs::write(src.join("b-after"), bytes(3, 100_000, true)).unwrap();
        let out = work.path().join(format!("x.{fmt}"));
        let mut child = pack_cmd(&src, &out).spawn().unwrap();
        gate.wait_reached(&mut child);
        // Mid-pack: the tree is scanned and the temporary file exists.
        let tmp_prefix = format!(".x.{fmt}.tmp-");
        assert!(
            fs::read_dir(work.path()).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(&tmp_prefix)),
            "{what}: no temporary file while packing"
        );
        // SAFETY: kill has no memory effects; the child is ours and alive.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
        // Let the handler run before the data flows again.
        let start = Instant::now();
        while signal_pending(child.id(), sig) {
            assert!(start.elapsed() < DEADLINE, "{what}: signal never taken");
            std::thread::sleep(Duration::from_millis(2));
        }
        gate.release();
        let o = finish(child, &what);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.signal(),
            Some(sig),
            "{what}: want death by {name} after cleanup (shell status {}), got {}; stderr:\n{stderr}",
            128 + sig,
            o.status
        );
        assert!(
            stderr.contains(&format!("packfs: interrupted by {name}")),
            "{what}: stderr:\n{stderr}"
        );
        assert_no_output(&out, &what);
    }
}

#[test]
fn sigint_mid_pack() {
    interrupt(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_mid_pack() {
    interrupt(libc::SIGTERM, "SIGTERM");
}

/// Runs packfs as an unprivileged user when root (root reads any file), as
/// is otherwise.
fn unprivileged(src: &Path, out: &Path) -> Command {
    let mut c = if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(packfs_bin());
        c
    } else {
        Command::new(packfs_bin())
    };
    c.arg("pack")
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg("-q")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn permission_denied() {
    let work = scratch();
    // The unprivileged user must reach the tree and write the output dir.
    chmod(work.path(), 0o755);
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/ok"), b"readable").unwrap();
    fs::write(src.join("secret"), b"not for you").unwrap();
    chmod(&src, 0o755);
    chmod(&src.join("d"), 0o755);
    let out_dir = work.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    let ro_dir = work.path().join("ro");
    fs::create_dir(&ro_dir).unwrap();
    // Root-owned 0555: read-only for everyone but root.
    chmod(&ro_dir, 0o555);
    chmod(&out_dir, 0o777);
    // Root owns these: 0700/0600 keeps them from the unprivileged user;
    // when not root, 0 keeps them from the owner.
    let (dmode, fmode) = if is_root() { (0o700, 0o600) } else { (0, 0) };

    let cases: [(&str, PathBuf, &Path, PathBuf); 3] = [
        (
            "unreadable file",
            src.join("secret"),
            &out_dir,
            src.join("secret"),
        ),
        (
            "unreadable directory",
            src.join("d"),
            &out_dir,
            src.join("d"),
        ),
        (
            "unwritable output directory",
            PathBuf::new(),
            &ro_dir,
            PathBuf::new(),
        ),
    ];
    for (case, lock, dir, named) in cases {
        for fmt in FORMATS {
            let what = format!("{case}, {fmt}");
            let out = dir.join(format!("x.{fmt}"));
            if !lock.as_os_str().is_empty() {
                chmod(&lock, if lock.is_dir() { dmode } else { fmode });
            }
            let o = finish(unprivileged(&src, &out).spawn().unwrap(), &what);
            if !lock.as_os_str().is_empty() {
                chmod(&lock, if lock.is_dir() { 0o755 } else { 0o644 });
            }
            let named = if named.as_os_str().is_empty() {
                &out
            } else {
                &named
            };
            assert_error(
                &o,
                &what,
                &[format!("{}: ", named.display()), "permission denied".into()],
            );
            assert_no_output(&out, &what);
        }
    }
    chmod(&ro_dir, 0o755);
}
