//! The process side of a mount: the fork, the ready pipe and the unmount
//! watcher, kept apart from what is served (`cmd::mount`).
//!
//! Without `--foreground` the caller has validated everything it can and
//! opened a local image *before* [`run`] forks (no threads exist yet, so the
//! fork is safe); the child detaches and reports "ok" or the error through a
//! pipe, and the parent exits only after that report, so a script can use
//! the mount as soon as `packfs mount` returns and sees init errors
//! synchronously. In both modes a watcher process unmounts a mount whose
//! server died, and only such a mount (see [`unmount_watcher`]).

use anyhow::bail;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::SeqCst};

/// Called once by the server when the mount is usable.
pub type Ready = Box<dyn FnOnce() + Send>;

/// Where and under which source name a mount is made: what the watcher
/// needs to recognise it.
pub struct Target<'a> {
    pub mountpoint: &'a Path,
    pub fsname: &'a str,
    /// Where the daemon's stderr (its log) goes once the mount is ready;
    /// `/dev/null` without one.
    pub log: Option<&'a Path>,
}

/// Runs a mount: `open` yields what to serve (called in the daemon, after
/// the fork: a remote image's client starts threads a fork would lose),
/// `serve` serves it until the mount ends and calls its [`Ready`], if any,
/// once the mount is usable. With `foreground` all of it runs in this
/// process; otherwise this process returns 0 once the daemon reports ready,
/// or its error, and the daemon exits with `serve`'s status.
pub fn run<T>(
    target: &Target,
    foreground: bool,
    open: impl FnOnce() -> anyhow::Result<T>,
    serve: impl FnOnce(T, Option<Ready>) -> anyhow::Result<i32>,
) -> anyhow::Result<i32> {
    if foreground {
        let _watch = spawn_unmount_watcher(target)?;
        stop_on_signals(target)?;
        let mp = std::fs::canonicalize(target.mountpoint)?;
        let ready: Ready = Box::new(move || {
            mounted_at(&mp);
            super::mountlock::release();
        });
        let r = serve(open()?, Some(ready));
        STATE.store(ENDING, SeqCst);
        return r;
    }
    let (fds, pid) = pipe_and_fork()?;
    if pid > 0 {
        // SAFETY: fds[1] is ours to close; fds[0] becomes owned by the File.
        unsafe { libc::close(fds[1]) };
        // Stopped while waiting (Ctrl-C on a slow open, a job's SIGTERM):
        // the daemon must not go on to mount behind a command that says
        // it was interrupted.
        WAITED_FOR.store(pid, std::sync::atomic::Ordering::SeqCst);
        let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
        // SAFETY: installing a handler that only makes async-signal-safe
        // calls (kill, signal, raise) on an atomic-loaded pid; a signal
        // the caller ignores (nohup) stays ignored.
        let before = signals.map(|s| unsafe {
            let old = libc::signal(s, stop_waited_for as *const () as libc::sighandler_t);
            if old == libc::SIG_IGN {
                libc::signal(s, libc::SIG_IGN);
            }
            old
        });
        let r = wait_ready(unsafe { std::fs::File::from_raw_fd(fds[0]) });
        // SAFETY: putting back what was there.
        for (s, old) in signals.into_iter().zip(before) {
            unsafe { libc::signal(s, old) };
        }
        return r;
    }
    // Child: detach from the terminal and the caller's session. The
    // mountpoint lock stays the parent's, which unlocks once we answer.
    super::mountlock::forget_in_child();
    // SAFETY: plain syscalls on our own process.
    unsafe {
        libc::close(fds[0]);
        libc::setsid();
    }
    std::process::exit(daemon(fds[1], target, open, serve))
}

/// The parent's side: "ok" arrives while the daemon keeps running; anything
/// else is an error message followed by the daemon's exit (EOF).
fn wait_ready(mut r: std::fs::File) -> anyhow::Result<i32> {
    let mut head = [0u8; 2];
    let mut msg = String::new();
    if r.read_exact(&mut head).is_ok() {
        msg.push_str(&String::from_utf8_lossy(&head));
        if &head != b"ok" {
            let _ = r.read_to_string(&mut msg);
        }
    }
    match msg.strip_prefix("ok") {
        Some(_) => Ok(0),
        None if msg.is_empty() => bail!("mount daemon exited before the mount was ready"),
        None => bail!("{}", msg.trim_start_matches("err ").trim()),
    }
}

/// The daemon's side, after the fork: starts the watcher, opens, serves;
/// every error before the mount is ready goes back through the pipe
/// (`pipe_fd`, its write end). Returns the exit status.
fn daemon<T>(
    pipe_fd: i32,
    target: &Target,
    open: impl FnOnce() -> anyhow::Result<T>,
    serve: impl FnOnce(T, Option<Ready>) -> anyhow::Result<i32>,
) -> i32 {
    // SAFETY: the write end is ours; the File owns it from here.
    let mut w = unsafe { std::fs::File::from_raw_fd(pipe_fd) };
    let _watch = match spawn_unmount_watcher(target).and_then(|fd| {
        stop_on_signals(target)?;
        Ok(fd)
    }) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = write!(w, "err {e:#}");
            return 1;
        }
    };
    let served = match open() {
        Ok(s) => s,
        Err(e) => {
            let _ = write!(w, "err {e}");
            return 1;
        }
    };
    let w = std::sync::Mutex::new(Some(w));
    let log = target.log.map(Path::to_path_buf);
    let mp = std::fs::canonicalize(target.mountpoint).unwrap_or_default();
    let ready: Ready = Box::new(move || {
        if let Some(mut w) = w.lock().unwrap_or_else(|p| p.into_inner()).take() {
            mounted_at(&mp);
            let _ = w.write_all(b"ok");
            // Logs from now on would go to a terminal we no longer own:
            // to --log's file, or nowhere.
            redirect_stdio();
            if let Some(log) = &log {
                log_to(log);
            }
            // Everything the daemon still opens has an absolute path now;
            // holding the caller's directory would keep its filesystem
            // from being unmounted (a job's scratch directory).
            // SAFETY: chdir with a valid NUL-terminated path.
            unsafe { libc::chdir(c"/".as_ptr()) };
        }
    });
    // The pipe's write end is also held by the closure; if serve fails before
    // INIT we report through a dup.
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own; CLOEXEC keeps it out of
    // fusermount3, which would otherwise hold the pipe open.
    let err_fd = unsafe { libc::fcntl(pipe_fd, libc::F_DUPFD_CLOEXEC, 0) };
    let r = serve(served, Some(ready));
    STATE.store(ENDING, SeqCst);
    match r {
        Ok(code) => code,
        Err(e) => {
            if err_fd >= 0 {
                // SAFETY: err_fd is the dup made above, owned by nothing else.
                let mut f = unsafe { std::fs::File::from_raw_fd(err_fd) };
                let _ = write!(f, "err {e:#}");
            }
            1
        }
    }
}

/// Where the mount is in its life, for [`stop_on_signals`]: [`STARTING`]
/// until it is usable, [`MOUNTED`] while served, [`ENDING`] once the server
/// has returned (writing `--stats` and `--record-access`, then exiting).
static STATE: AtomicU8 = AtomicU8::new(STARTING);
const STARTING: u8 = 0;
const MOUNTED: u8 = 1;
const ENDING: u8 = 2;
/// The mount's `MAJ:MIN` in the mount table once usable: what is mounted
/// at the path has another when our mount is no longer there, and is then
/// not ours to remove.
static MOUNT_DEV: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Called by the [`Ready`] of both modes: records the mount's device from
/// the mount table (`mp` is canonical). Not by a stat of the mountpoint:
/// that is a FUSE request, which the daemon may not be able to answer yet
/// (`fuser`'s session threads start after the ready call), and it would
/// fill the kernel's attribute cache of the root.
fn mounted_at(mp: &Path) {
    if let Some(m) = super::mountinfo::at_resolved(mp) {
        super::rendezvous::listen(&m.dev);
        *MOUNT_DEV.lock().unwrap_or_else(|p| p.into_inner()) = m.dev;
    }
    STATE.store(MOUNTED, SeqCst);
}

/// Whether the topmost mount at `mp` is still ours.
fn still_ours(mp: &Path) -> bool {
    let ours = MOUNT_DEV.lock().unwrap_or_else(|p| p.into_inner()).clone();
    super::mountinfo::at_resolved(mp).is_some_and(|m| ours.is_empty() || m.dev == ours)
}

/// The signals that stop a mount: Slurm's at a job's end or cancel, a
/// terminal's, a closed session's.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Makes SIGTERM, SIGINT and SIGHUP stop the daemon the way `packfs
/// umount` does, so that what it writes at the end (`--stats`,
/// `--record-access`) is written: once the mount is usable the first of
/// them detaches it (lazily: files still open through it are served until
/// closed) and the server returns as after any unmount. Before the mount is
/// usable, or at a second signal, the daemon exits at once with 128+N (the
/// watcher removes a half-made mount). A signal that arrives while the
/// server is ending is left to the exit under way; one that finds another
/// mount at the path (ours was detached already) unmounts nothing. A signal
/// the caller ignores (`nohup`, a script's background job and SIGINT) stays
/// ignored: it is not waited for. Must be called before any thread is
/// started: the signals are blocked in this thread, every thread inherits
/// that, and one thread waits for them. Processes the daemon starts do not
/// inherit the mask (std's `Command` clears it).
fn stop_on_signals(target: &Target) -> anyhow::Result<()> {
    let mp = std::fs::canonicalize(target.mountpoint)?;
    // SAFETY: sigaction with a null new action only reads the current one;
    // a sigset_t filled by sigemptyset/sigaddset before use; the mask
    // change is this thread's (and its future threads').
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in STOP_SIGNALS {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(s, std::ptr::null(), &mut old);
            if old.sa_sigaction != libc::SIG_IGN {
                libc::sigaddset(&mut set, s);
            }
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::Builder::new()
        .name("stop-signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: `set` is a valid signal set; sigwait stores into `sig`.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            match STATE.load(SeqCst) {
                ENDING => continue,
                MOUNTED if !DETACHED.swap(true, SeqCst) => detach(&mp, signal_name(sig), 128 + sig),
                _ => std::process::exit(128 + sig),
            }
        })?;
    Ok(())
}

/// Set by the first stop (a signal, or `packfs run` gone): the mount is
/// detached, and the server returns once its files are closed.
static DETACHED: AtomicBool = AtomicBool::new(false);

/// Detaches our mount at `mp` (lazily: files open there are served until
/// closed), as `packfs umount` would; exits with `code` if it cannot.
fn detach(mp: &Path, why: &str, code: i32) {
    if !still_ours(mp) {
        log::info!("{why}: our mount at {} is gone already", mp.display());
        return;
    }
    log::info!("{why}: unmounting {}", mp.display());
    if let Err(e) = super::fusermount::umount_lazy(mp) {
        log::error!("{why}: cannot unmount {}: {e:#}", mp.display());
        std::process::exit(code);
    }
}

/// `mount --exit-with-fd`: stops the mount as a first SIGTERM does once
/// `fd`, the read end of a pipe whose write end `packfs run` holds,
/// reaches its end, which is when `run` is gone, SIGKILL included. Never
/// as a second signal: `run` ends after its command, normally after a
/// first stop (Slurm's SIGTERM to the whole step), and the daemon must
/// then still serve the files open there and write its `--stats` and
/// `--record-access`.
pub fn end_with(fd: i32, mountpoint: &Path) -> anyhow::Result<()> {
    let mp = std::fs::canonicalize(mountpoint)?;
    std::thread::Builder::new()
        .name("packfs-tether".into())
        .spawn(move || {
            let mut b = [0u8; 64];
            loop {
                // SAFETY: reading into a valid buffer from our descriptor.
                let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
                let again = n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
                if n <= 0 && !again {
                    break;
                }
            }
            // Not usable yet: detached once it is (a failed mount ends the
            // process anyway). Stopped already: nothing to add.
            while STATE.load(SeqCst) == STARTING {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if STATE.load(SeqCst) == MOUNTED && !DETACHED.swap(true, SeqCst) {
                detach(&mp, "packfs run is gone", 128 + libc::SIGTERM);
            }
        })?;
    Ok(())
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Forks a small process that waits for this one to die (its end of a pipe
/// reaches EOF) and then lazily unmounts the mountpoint if our mount is
/// still there, so a killed daemon never leaves a dead mount behind. Must be
/// called before any thread is started. Returns the write end, which this
/// process must keep open for as long as it serves.
fn spawn_unmount_watcher(target: &Target) -> anyhow::Result<OwnedFd> {
    let mp = std::fs::canonicalize(target.mountpoint)?;
    let (fds, pid) = pipe_and_fork()?;
    if pid > 0 {
        // SAFETY: closing our copy of the read end; the write end is returned owned.
        unsafe { libc::close(fds[0]) };
        return Ok(unsafe { OwnedFd::from_raw_fd(fds[1]) });
    }
    // Watcher: re-exec ourselves so that it has its own command line (a
    // `pkill -f "packfs mount"` aimed at the daemon must not also kill the
    // process that cleans up after it).
    // SAFETY: plain syscalls in the freshly forked child; the read end loses
    // CLOEXEC so it survives the exec.
    unsafe {
        libc::close(fds[1]);
        libc::fcntl(fds[0], libc::F_SETFD, 0);
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(exe)
        .arg("unmount-watcher")
        .arg(fds[0].to_string())
        .arg(&mp)
        .arg(target.fsname)
        .exec();
    say!(
        "packfs: cannot start the unmount watcher: {}",
        crate::oserror::plain(&e)
    );
    std::process::exit(1);
}

/// Body of the hidden `unmount-watcher` subcommand (see [`spawn_unmount_watcher`]).
pub fn unmount_watcher(fd: i32, mp: &Path, fsname: &str) -> anyhow::Result<i32> {
    // SAFETY: plain syscalls on our own process; chdir with a valid
    // NUL-terminated path.
    unsafe {
        libc::setsid();
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        // As the daemon: the directory `packfs mount` was started in must
        // not stay busy (unmountable) for as long as the mount lives.
        libc::chdir(c"/".as_ptr());
    }
    redirect_stdio();
    let mut b = [0u8; 1];
    // SAFETY: read into a valid 1-byte buffer; returns 0 at EOF.
    while unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) } > 0 {}
    // Bytes, then lossy: one mountpoint anywhere that is not UTF-8 must not
    // hide the table (this mountpoint's own bytes compare lossily too).
    let table =
        std::fs::read("/proc/self/mounts").map(|b| String::from_utf8_lossy(&b).into_owned());
    let listed = table.is_ok_and(|m| {
        m.lines().any(|l| {
            let mut f = l.split(' ');
            f.next().map(unescape_mount_path).as_deref() == Some(fsname)
                && f.next().map(unescape_mount_path) == Some(mp.to_string_lossy().into_owned())
        })
    });
    // A mount of the same image at the same place is not necessarily ours:
    // after `packfs umount` our daemon exits, and a `packfs mount` right
    // after it can mount again before we look. Only a mount whose server is
    // gone is ours to remove: it answers ENOTCONN (or ECONNABORTED once
    // aborted); a live one answers. statfs, not stat: the root's attributes
    // may be cached by the kernel, statfs always asks the server.
    if listed && is_dead_fuse_mount(mp) {
        let _ = super::fusermount::umount_lazy(mp);
    }
    Ok(0)
}

/// Whether `mp` is a FUSE mount whose server has gone away. A statfs that
/// meets the connection while the kernel is still tearing it down can fail
/// with another errno (ECANCELED has been seen right after a daemon was
/// killed mid-read); asked again a moment later it says what the mount is.
pub fn is_dead_fuse_mount(mp: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    for _ in 0..20 {
        // SAFETY: valid NUL-terminated path and a zeroed statfs to fill.
        let r = unsafe {
            let mut st: libc::statfs = std::mem::zeroed();
            libc::statfs(c.as_ptr(), &mut st)
        };
        if r == 0 {
            return false;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOTCONN) | Some(libc::ECONNABORTED) => return true,
            _ => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    false
}

/// /proc/mounts escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// A close-on-exec pipe, then fork: returns the pipe (read end, write end)
/// and the child's pid (0 in the child). Only sound before any thread has
/// been started, which is how both callers use it.
/// The daemon `packfs mount` is waiting for (see [`run`]), 0 when none.
static WAITED_FOR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Signal handler while waiting for the daemon: ends it (with SIGKILL: it
/// handles no signal, and a half-open mount is the watcher's to remove),
/// then dies of `sig` as if no handler were installed.
extern "C" fn stop_waited_for(sig: libc::c_int) {
    let pid = WAITED_FOR.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: kill, signal and raise are async-signal-safe.
    unsafe {
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn pipe_and_fork() -> anyhow::Result<([i32; 2], libc::pid_t)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array; CLOEXEC keeps the pipe out of
    // exec'd helpers such as fusermount3.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the process is single-threaded at this point (see above).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    Ok((fds, pid))
}

/// Points stderr (where the log goes) at `path`, appended to.
fn log_to(path: &Path) {
    use std::os::fd::IntoRawFd;
    let Ok(f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    else {
        return;
    };
    let fd = f.into_raw_fd();
    // SAFETY: dup2 of a descriptor we own onto stderr, then closing ours.
    unsafe {
        libc::dup2(fd, 2);
        libc::close(fd);
    }
}

fn redirect_stdio() {
    // SAFETY: opening /dev/null and dup2 onto our standard descriptors.
    unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if fd >= 0 {
            libc::dup2(fd, 0);
            libc::dup2(fd, 1);
            libc::dup2(fd, 2);
            if fd > 2 {
                libc::close(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mount_table_escapes_are_undone() {
        assert_eq!(
            super::unescape_mount_path("/tmp/a\\040b\\011c\\134d"),
            "/tmp/a b\tc\\d"
        );
    }
}
