//! `packfs run IMAGE:MOUNTPOINT... -- COMMAND`: mount, run, unmount; the
//! command's status is the exit status.

use crate::args::cli::{RemoteArgs, RunArgs};
use crate::args::values::MountSpec;
use crate::mount::fusermount::{self, umount};
use crate::mount::mountinfo;
use anyhow::{bail, Context};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

/// The command's pid, for the signal handler that forwards to it.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Passes a signal sent to `packfs run` on to the command, except one the
/// kernel sent to our whole process group with the command in it (a
/// terminal's Ctrl-C or Ctrl-\): the command has its own copy, and a second
/// would cut short a command that handles the first (a training loop that
/// saves a checkpoint on Ctrl-C). A command in a process group of its own
/// (under `timeout`, `setsid`) gets the kernel's signals from us, and so
/// does it a hangup when we lead the session (`srun --pty`, `ssh -t`): the
/// kernel sends that to the leader alone.
extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid <= 0 {
        return;
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler;
    // getpgid, getpgrp, getsid and getpid are plain system calls.
    let kernel_to_our_group = unsafe {
        !info.is_null()
            && (*info).si_code == libc::SI_KERNEL
            && libc::getpgid(pid) == libc::getpgrp()
            && !(sig == libc::SIGHUP && libc::getsid(0) == libc::getpid())
    };
    if !kernel_to_our_group {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// What `packfs run` made, undone in reverse order by [`Mounted::undo`].
#[derive(Default)]
struct Mounted {
    /// Mountpoints mounted, in order.
    mounts: Vec<PathBuf>,
    /// Directories made for the mountpoints, parents first.
    created: Vec<PathBuf>,
}

impl Mounted {
    fn undo(&self) {
        for mp in self.mounts.iter().rev() {
            // Gone already: its daemon took the job's SIGTERM (Slurm
            // signals every process of a cancelled step) and unmounted.
            if !mountinfo::at(mp).is_some_and(|m| m.is_fuse()) {
                continue;
            }
            let gone = || !mountinfo::at(mp).is_some_and(|m| m.is_fuse());
            if let Err(e) = umount(mp).or_else(|e| if gone() { Ok(0) } else { Err(e) }) {
                // Busy: a process the command left behind (in the
                // background) still has a file open there. Detached now,
                // the mount goes when that file is closed, and its daemon
                // with it; left as it was, it would stay for good.
                let lazy = fusermount::umount_lazy(mp);
                say!(
                    "packfs: warning: {}{}",
                    crate::oserror::plain_text(&format!("{e:#}")),
                    match lazy {
                        Ok(()) =>
                            "; detached instead: it goes when the files open there are closed",
                        Err(_) => "",
                    }
                );
            }
        }
        remove_created(&self.created);
    }
}

pub fn run(args: &RunArgs, remote: &RemoteArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("locating the packfs executable")?;
    for (given, flag) in [
        (args.record_access.is_some(), "--record-access records"),
        (args.stats.is_some(), "--stats counts"),
        (args.preload_profile.is_some(), "--preload-profile preloads"),
    ] {
        if given && args.mounts.len() != 1 {
            return Err(crate::args::usage::usage(format!(
                "{flag} one mount: give one IMAGE:MOUNTPOINT"
            )));
        }
    }
    let stats_before = args.stats.as_deref().and_then(file_id);
    // The mounts' tether: this process holds the write end until it ends,
    // each daemon a read end, whose end of file (this process gone, killed
    // or not) ends its mount (`mount --exit-with-fd`). Close-on-exec: the
    // command must not hold it.
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe");
    }
    // SAFETY: both descriptors were just made and are owned here only.
    let (tether_r, _tether_w) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut done = Mounted::default();
    for spec in &args.mounts {
        if let Err(e) = mount_one(&exe, spec, args, remote, tether_r.as_raw_fd(), &mut done) {
            done.undo();
            return Err(e);
        }
    }
    drop(tether_r);
    let command = &args.command;
    let mut command_line = std::process::Command::new(&command[0]);
    command_line.args(&command[1..]);
    // SAFETY: prctl and getppid are async-signal-safe.
    let run_pid = unsafe { libc::getpid() };
    unsafe {
        command_line.pre_exec(move || {
            // The command ends with `run` (SIGTERM) if `run` is killed
            // first, as its mounts do: it would find them gone.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != run_pid {
                libc::_exit(128 + libc::SIGTERM);
            }
            Ok(())
        });
    }
    let child = command_line.spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            done.undo();
            let (code, why) = spawn_failure(&command[0], &e);
            say!("packfs: {}: {why}", command[0]);
            return Ok(code);
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    // SAFETY: the handler only reads its siginfo and calls kill with an
    // atomic-loaded pid; the sigaction is zeroed, then filled.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = forward as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        for s in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
    }
    let status = child.wait();
    // Reaped: its pid may be anyone's now.
    CHILD.store(0, Ordering::SeqCst);
    done.undo();
    if let Some(f) = &args.stats {
        wait_for_stats(f, stats_before.as_ref());
    }
    let status = status.context("waiting for the command")?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// The status a shell gives for a command it could not start, and why in
/// words: 127 when there is no such command, 126 when it is there but
/// cannot be executed (no permission, a directory, not a program).
fn spawn_failure(command: &str, e: &std::io::Error) -> (i32, String) {
    use crate::exit::{CANNOT_EXECUTE, NOT_FOUND};
    match e.kind() {
        // The file is there, so it is its `#!` interpreter that is not (a
        // venv's script packed without --mount-at names the venv's old
        // python).
        std::io::ErrorKind::NotFound => match missing_interpreter(command) {
            Some(interp) => (
                NOT_FOUND,
                format!("its interpreter {interp} (its #! line) is not found"),
            ),
            None => (NOT_FOUND, "command not found".into()),
        },
        std::io::ErrorKind::PermissionDenied => (
            CANNOT_EXECUTE,
            "cannot execute: permission denied (not executable, or a directory)".into(),
        ),
        _ => (
            CANNOT_EXECUTE,
            format!("cannot execute: {}", crate::oserror::plain(e)),
        ),
    }
}

/// The `#!` interpreter of `command` (a path, or a name on PATH) when the
/// file exists and starts with one.
fn missing_interpreter(command: &str) -> Option<String> {
    let path = if command.contains('/') {
        Path::new(command).to_path_buf()
    } else {
        fusermount::which(command)?
    };
    let mut head = [0u8; 256];
    let n = std::io::Read::read(&mut std::fs::File::open(path).ok()?, &mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let interp = String::from_utf8_lossy(line)
        .split_whitespace()
        .next()?
        .to_string();
    Some(interp)
}

/// Mounts one IMAGE:MOUNTPOINT with `packfs mount`, recording in `done`
/// what it made.
fn mount_one(
    exe: &Path,
    spec: &MountSpec,
    args: &RunArgs,
    remote: &RemoteArgs,
    tether: RawFd,
    done: &mut Mounted,
) -> anyhow::Result<()> {
    let (img, mp) = (&spec.image, &spec.mountpoint);
    create_mountpoint(mp, &mut done.created)?;
    let io = clap::ValueEnum::to_possible_value(&args.io).expect("no I/O mode is hidden");
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount")
        .arg(img)
        .arg(mp)
        .arg("--io")
        .arg(io.get_name());
    cmd.args(remote.to_args());
    if let Some(c) = args.cache_size {
        cmd.arg("--cache-size").arg(c.to_string());
    }
    if args.nonempty {
        cmd.arg("--nonempty");
    }
    if let Some(f) = &args.record_access {
        cmd.arg("--record-access")
            .arg(std::path::absolute(f).unwrap_or_else(|_| f.clone()));
    }
    for (flag, file) in [
        ("--log", &args.log),
        ("--stats", &args.stats),
        ("--preload-profile", &args.preload_profile),
    ] {
        if let Some(f) = file {
            cmd.arg(flag)
                .arg(std::path::absolute(f).unwrap_or_else(|_| f.clone()));
        }
    }
    for (flag, on) in [
        ("--preload", args.preload),
        ("--allow-other", args.allow_other),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    if let Some(n) = args.threads {
        cmd.arg("--threads").arg(n.to_string());
    }
    if let Some(t) = args.transport {
        let t = clap::ValueEnum::to_possible_value(&t).expect("no transport is hidden");
        cmd.arg("--transport").arg(t.get_name());
    }
    if let Some(us) = args.dev_spin {
        cmd.arg("--dev-spin").arg(us.to_string());
    }
    cmd.arg("--exit-with-fd").arg(tether.to_string());
    // SAFETY: fcntl is async-signal-safe; the tether's read end is kept
    // open across this one exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::fcntl(tether, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let st = cmd.status().context("starting packfs mount")?;
    if !st.success() {
        bail!("mounting {img} at {} failed", mp.display());
    }
    done.mounts.push(mp.clone());
    Ok(())
}

/// The identity of a `--stats` file as it is now (device and inode; the
/// daemon writes a new file and renames it over, so each write changes
/// it), or None when there is none.
fn file_id(file: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(file).ok().map(|m| (m.dev(), m.ino()))
}

/// Waits (up to 10 s) for the mount's daemon to have written its
/// `--stats` file since the run began (`before`: the file then), so that a
/// script can read it as soon as `run` returns; a daemon that does not is
/// warned about. By identity, not time: a daemon stopped with the job's
/// SIGTERM may have written it before the command ended, and file times
/// come from a coarse clock (a server's, on NFS).
fn wait_for_stats(file: &Path, before: Option<&(u64, u64)>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = file_id(file);
        if now.is_some() && now.as_ref() != before {
            return;
        }
        if std::time::Instant::now() >= deadline {
            say!(
                "packfs: warning: --stats {}: not written within 10 s of the unmount",
                file.display()
            );
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Creates `mp` and whichever of its parents are missing, recording each
/// directory made (outermost first) so that [`remove_created`] can take
/// exactly those away again.
fn create_mountpoint(mp: &Path, created: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(mp);
    while let Some(p) = at.filter(|p| !p.as_os_str().is_empty()) {
        if std::fs::symlink_metadata(p).is_ok() {
            break;
        }
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    for dir in missing.into_iter().rev() {
        match std::fs::create_dir(&dir) {
            Ok(()) => created.push(dir),
            // Another task of the same job on this node made it first.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| format!("creating mountpoint {}", dir.display()))
            }
        }
    }
    Ok(())
}

/// Removes the directories [`create_mountpoint`] made, innermost first;
/// one that is not empty (something a job left) is kept, with a warning.
/// One with a mount on it is kept without: a `run` that lost the race for
/// the mountpoint to another job's mount left that job's mount there.
fn remove_created(created: &[PathBuf]) {
    for dir in created.iter().rev() {
        if let Err(e) = std::fs::remove_dir(dir) {
            if e.kind() != std::io::ErrorKind::NotFound && e.raw_os_error() != Some(libc::EBUSY) {
                say!(
                    "packfs: warning: {}: not removed: {}",
                    dir.display(),
                    crate::oserror::plain(&e)
                );
            }
        }
    }
}
