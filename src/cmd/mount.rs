//! `packfs mount`, `umount`, `run`.
//!
//! Without `--foreground`, `mount` validates everything it can and opens the
//! image *before* forking (no threads exist yet, so the fork is safe), then
//! the child mounts and reports "ready" or the error through a pipe; the
//! parent exits only after that report, so a script can use the mount as
//! soon as `packfs mount` returns and sees init errors synchronously.

use crate::cli::Command;
use anyhow::{bail, Context};
use mountfs::open::AnyImage;
use mountfs::serve::ServeOptions;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

fn check_mountpoint(mp: &Path, options: &[String]) -> anyhow::Result<()> {
    let meta = std::fs::metadata(mp).with_context(|| format!("mountpoint {}", mp.display()))?;
    if !meta.is_dir() {
        bail!("mountpoint {}: not a directory", mp.display());
    }
    let nonempty_ok = options
        .iter()
        .any(|o| o.split(',').any(|x| x == "nonempty"));
    if !nonempty_ok && std::fs::read_dir(mp)?.next().is_some() {
        bail!(
            "mountpoint {}: directory is not empty (pass -o nonempty to mount over it)",
            mp.display()
        );
    }
    if std::fs::metadata("/dev/fuse").is_err() {
        bail!("/dev/fuse is missing: this machine or container has no FUSE support");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0
        && which("fusermount3").is_none()
        && which("fusermount").is_none()
    {
        bail!("fusermount3 not found in PATH: install the fuse3 package (needed to mount without root)");
    }
    Ok(())
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

fn split_options(options: Vec<String>) -> Vec<String> {
    options
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect()
}

pub fn mount(c: Command) -> anyhow::Result<i32> {
    let Command::Mount {
        mut paths,
        on_conflict,
        cache_size,
        threads,
        foreground,
        preload,
        allow_other,
        options,
        io,
        negative_ttl,
        stats,
    } = c
    else {
        unreachable!()
    };
    let mountpoint = paths.pop().expect("clap requires two paths");
    let images = paths;
    check_mountpoint(&mountpoint, &options)?;
    let mut options = split_options(options);
    mountfs::serve::check_options(&options).map_err(|e| anyhow::anyhow!("-o {e}"))?;
    // The watcher recognises the mount by its source name, so a name given
    // with -o fsname= becomes that name rather than a second option.
    let fsname = options
        .iter()
        .rev()
        .find_map(|o| o.strip_prefix("fsname="))
        .map(str::to_string);
    options.retain(|o| !o.starts_with("fsname="));
    let cache = cache_size.unwrap_or_else(super::default_cache_size) as usize;
    // One path (a file, a shard manifest, an s3:// or http(s):// URL) is
    // opened by location; several local images merge into one tree.
    let loc = match images.as_slice() {
        [one] => Some(super::location(one)?),
        many => {
            for i in many {
                if super::location(i)?.is_remote() {
                    bail!(
                        "{}: several images merge as local files only; mount a remote image alone",
                        i.display()
                    );
                }
            }
            None
        }
    };
    let remote = super::remote_args().options();
    let open = || -> anyhow::Result<mountfs::open::OpenedImage> {
        Ok(match &loc {
            Some(l) => AnyImage::open_location(l, cache, io.mode(), &remote)?,
            None => mountfs::open::OpenedImage {
                image: AnyImage::open_union(&images, cache, io.mode(), on_conflict.rule())?,
                len: 0,
                remote: None,
            },
        })
    };
    // A file is opened before the fork, so its errors come straight back. A
    // remote image is opened after it: its client runs threads, which a
    // fork would lose. Its errors (403, 404, timeout) come through the pipe.
    let is_remote = loc.as_ref().is_some_and(|l| l.is_remote());
    let pre = match is_remote {
        false => Some(open()?),
        true => None,
    };
    let source_name = match &loc {
        Some(remote) if is_remote => remote
            // No query (a presigned URL's signature) in the mount table, and
            // no comma, which would split the mount options.
            .to_string()
            .split('?')
            .next()
            .unwrap_or_default()
            .replace(',', "%2C"),
        _ => std::fs::canonicalize(&images[0])
            .unwrap_or(images[0].clone())
            .display()
            .to_string(),
    };
    let opts = ServeOptions {
        threads: threads.unwrap_or_else(super::default_session_threads),
        allow_other,
        options,
        fsname: fsname.unwrap_or_else(|| format!("packfs:{source_name}")),
        readahead: 4 << 20,
        negative_ttl: (negative_ttl > 0).then(|| std::time::Duration::from_secs(negative_ttl)),
    };
    // Relative to where `packfs mount` was started, not the daemon's cwd.
    let stats = stats.map(|p| std::path::absolute(&p).unwrap_or(p));
    if stats.is_some() {
        // Before any thread exists (a remote image's client starts some), so
        // that every thread inherits the mask and SIGUSR1 reaches only the
        // thread that waits for it (see `serve`), never its default action
        // (terminate) in a thread that does not.
        block_sigusr1();
    }
    if foreground {
        let _watch = spawn_unmount_watcher(&mountpoint, &opts.fsname)?;
        let img = match pre {
            Some(i) => i,
            None => open()?,
        };
        return serve(img, &mountpoint, &opts, preload, stats.as_deref(), None);
    }

    let (fds, pid) = pipe_and_fork()?;
    if pid > 0 {
        // Parent: wait for the child's verdict.
        // SAFETY: fds[1] is ours to close; fds[0] becomes owned by the File.
        unsafe { libc::close(fds[1]) };
        let mut r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
        // "ok" arrives while the daemon keeps running; anything else is an
        // error message followed by the daemon's exit (EOF).
        let mut head = [0u8; 2];
        let mut msg = String::new();
        if r.read_exact(&mut head).is_ok() {
            msg.push_str(&String::from_utf8_lossy(&head));
            if &head != b"ok" {
                let _ = r.read_to_string(&mut msg);
            }
        }
        return match msg.strip_prefix("ok") {
            Some(_) => Ok(0),
            None if msg.is_empty() => bail!("mount daemon exited before the mount was ready"),
            None => bail!("{}", msg.trim_start_matches("err ").trim()),
        };
    }
    // Child: detach from the terminal and the caller's session.
    // SAFETY: plain syscalls on our own process.
    unsafe {
        libc::close(fds[0]);
        libc::setsid();
    }
    let w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
    let _watch = match spawn_unmount_watcher(&mountpoint, &opts.fsname) {
        Ok(fd) => fd,
        Err(e) => {
            let mut w = w;
            let _ = write!(w, "err {e:#}");
            std::process::exit(1);
        }
    };
    let img = match pre.map_or_else(open, Ok) {
        Ok(i) => i,
        Err(e) => {
            let mut w = w;
            let _ = write!(w, "err {e}");
            std::process::exit(1);
        }
    };
    let w = std::sync::Mutex::new(Some(w));
    let ready: Box<dyn FnOnce() + Send> = Box::new(move || {
        if let Some(mut w) = w.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.write_all(b"ok");
            // Logs from now on would go to a terminal we no longer own.
            redirect_stdio();
        }
    });
    // The pipe's write end is also held by the closure; if serve fails before
    // INIT we report through a dup.
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own; CLOEXEC keeps it out of
    // fusermount3, which would otherwise hold the pipe open.
    let err_fd = unsafe { libc::fcntl(fds[1], libc::F_DUPFD_CLOEXEC, 0) };
    match serve(
        img,
        &mountpoint,
        &opts,
        preload,
        stats.as_deref(),
        Some(ready),
    ) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            if err_fd >= 0 {
                let mut f = unsafe { std::fs::File::from_raw_fd(err_fd) };
                let _ = write!(f, "err {e:#}");
            }
            std::process::exit(1);
        }
    }
}

/// Forks a small process that waits for this one to die (its end of a pipe
/// reaches EOF) and then lazily unmounts `mountpoint` if our mount is still
/// there, so a killed daemon never leaves a dead mount behind. Must be
/// called before any thread is started. Returns the write end, which this
/// process must keep open for as long as it serves.
fn spawn_unmount_watcher(mountpoint: &Path, fsname: &str) -> anyhow::Result<std::os::fd::OwnedFd> {
    use std::os::fd::OwnedFd;
    let mp = std::fs::canonicalize(mountpoint)?;
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
        .arg(fsname)
        .exec();
    eprintln!("packfs: cannot start the unmount watcher: {e}");
    std::process::exit(1);
}

/// Body of the hidden `unmount-watcher` subcommand (see [`spawn_unmount_watcher`]).
pub fn unmount_watcher(fd: i32, mp: &Path, fsname: &str) -> anyhow::Result<i32> {
    // SAFETY: plain syscalls on our own process.
    unsafe {
        libc::setsid();
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    redirect_stdio();
    let mut b = [0u8; 1];
    // SAFETY: read into a valid 1-byte buffer; returns 0 at EOF.
    while unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) } > 0 {}
    let listed = std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
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
        let _ = umount_lazy(mp);
    }
    Ok(0)
}

/// Whether `mp` is a FUSE mount whose server has gone away.
fn is_dead_fuse_mount(mp: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: valid NUL-terminated path and a zeroed statfs to fill.
    let r = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st)
    };
    r != 0
        && matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)
        )
}

/// /proc/mounts escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn umount_lazy(mp: &Path) -> anyhow::Result<()> {
    for bin in ["fusermount3", "fusermount"] {
        if which(bin).is_some() {
            let st = std::process::Command::new(bin)
                .arg("-u")
                .arg("-z")
                .arg(mp)
                .status()?;
            if st.success() {
                return Ok(());
            }
        }
    }
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        bail!(
            "umount {}: {}",
            mp.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// A close-on-exec pipe, then fork: returns the pipe (read end, write end)
/// and the child's pid (0 in the child). Only sound before any thread has
/// been started, which is how both callers use it.
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

fn serve(
    opened: mountfs::open::OpenedImage,
    mountpoint: &Path,
    opts: &ServeOptions,
    preload: bool,
    stats: Option<&Path>,
    ready: Option<Box<dyn FnOnce() + Send>>,
) -> anyhow::Result<i32> {
    let mountfs::open::OpenedImage {
        image: img, remote, ..
    } = opened;
    if preload {
        let t = std::time::Instant::now();
        let (blocks, bytes) = img.preload()?;
        log::info!(
            "preloaded {blocks} blocks ({}) in {:.2} s",
            crate::size::human(bytes),
            t.elapsed().as_secs_f64()
        );
    }
    let fs = std::sync::Arc::new(mountfs::fs::PackFs::new(
        img,
        opts.readahead,
        opts.threads.clamp(1, 4),
    ));
    if let Some(path) = stats {
        let (fs, remote, path) = (fs.clone(), remote.clone(), path.to_path_buf());
        std::thread::Builder::new()
            .name("stats".into())
            .spawn(move || loop {
                if !wait_sigusr1() {
                    return;
                }
                let r = remote.as_ref().map(|r| r.snapshot());
                if let Err(e) = write_stats(&path, &fs.counters.snapshot(), r.as_ref()) {
                    log::error!("{e:#}");
                }
            })
            .context("starting the stats thread")?;
    }
    mountfs::serve::serve_fs(fs.clone(), mountpoint, opts, ready)
        .with_context(|| format!("mounting at {}", mountpoint.display()))?;
    if let Some(path) = stats {
        let remote = remote.map(|r| r.snapshot());
        write_stats(path, &fs.counters.snapshot(), remote.as_ref())?;
    }
    Ok(0)
}

/// Blocks SIGUSR1 in this thread and every thread it starts from now on.
fn block_sigusr1() {
    // SAFETY: sigset_t initialised by sigemptyset before use; the mask
    // change affects only this thread (and threads created after it).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for a SIGUSR1 sent to the process (blocked by [`block_sigusr1`]);
/// false if waiting failed.
fn wait_sigusr1() -> bool {
    // SAFETY: as above; sigwait stores the signal number in `sig`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        let mut sig = 0;
        libc::sigwait(&set, &mut sig) == 0
    }
}

/// Writes the mount's counters as JSON, atomically (temp + rename), so a
/// reader polling for the file never sees half of it.
/// A remote image adds `"remote"`: its requests, bytes and first-byte times.
fn write_stats(
    path: &Path,
    stats: &mountfs::fs::FsStats,
    remote: Option<&mountfs::remote::RemoteStats>,
) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp~");
    let mut value = serde_json::to_value(stats)?;
    if let (Some(r), Some(obj)) = (remote, value.as_object_mut()) {
        obj.insert("remote".into(), serde_json::to_value(r)?);
    }
    let json = serde_json::to_string_pretty(&value)?;
    std::fs::write(&tmp, json + "\n")
        .and_then(|_| std::fs::rename(&tmp, path))
        .with_context(|| format!("--stats {}", path.display()))
}

pub fn umount(mp: &Path) -> anyhow::Result<i32> {
    for bin in ["fusermount3", "fusermount"] {
        if which(bin).is_some() {
            let st = std::process::Command::new(bin)
                .arg("-u")
                .arg(mp)
                .status()
                .with_context(|| format!("running {bin}"))?;
            if st.success() {
                return Ok(0);
            }
            bail!("{bin} -u {} failed ({st})", mp.display());
        }
    }
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        bail!(
            "umount {}: {}",
            mp.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(0)
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
/// one that is not empty (a mount still there, something a job left) is
/// kept, with a warning.
fn remove_created(created: &[PathBuf]) {
    for dir in created.iter().rev() {
        if let Err(e) = std::fs::remove_dir(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("packfs: leaving {}: {e}", dir.display());
            }
        }
    }
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

pub fn run(
    mounts: &[String],
    cache_size: Option<u64>,
    io: crate::cli::Io,
    command: &[String],
) -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("locating the packfs executable")?;
    let mut mounted: Vec<PathBuf> = Vec::new();
    // Directories this run made for its mountpoints, parents first.
    let mut created: Vec<PathBuf> = Vec::new();
    let cleanup = |mounted: &[PathBuf]| {
        for mp in mounted.iter().rev() {
            if let Err(e) = umount(mp) {
                eprintln!("packfs: {e:#}");
            }
        }
    };
    for spec in mounts {
        let Some((img, mp)) = spec.rsplit_once(':') else {
            cleanup(&mounted);
            remove_created(&created);
            bail!("{spec:?}: expected IMAGE:MOUNTPOINT");
        };
        if let Err(e) = create_mountpoint(Path::new(mp), &mut created) {
            cleanup(&mounted);
            remove_created(&created);
            return Err(e);
        }
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("mount").arg(img).arg(mp).arg("--io").arg(io.name());
        cmd.args(super::remote_args().to_args());
        if let Some(c) = cache_size {
            cmd.arg("--cache-size").arg(c.to_string());
        }
        let st = cmd.status().context("starting packfs mount")?;
        if !st.success() {
            cleanup(&mounted);
            remove_created(&created);
            bail!("mounting {img} at {mp} failed");
        }
        mounted.push(PathBuf::from(mp));
    }
    let child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            cleanup(&mounted);
            remove_created(&created);
            bail!("{}: {e}", command[0]);
        }
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    // SAFETY: the handler only calls kill with an atomic-loaded pid.
    unsafe {
        for s in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(s, forward as *const () as usize);
        }
    }
    let status = child.wait();
    cleanup(&mounted);
    remove_created(&created);
    let status = status.context("waiting for the command")?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
