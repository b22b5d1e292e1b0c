//! The mounts the bench makes for itself, and the helpers to wait for and
//! remove a mount (shared with the latency-emulating passthrough).
//!
//! packfs's own mount is a `packfs mount --foreground` child of the bench:
//! its pid is known exactly (for `/proc/<pid>/io`), a cold run can restart
//! it (emptying its block cache), and it is unmounted at the end whatever
//! happens. Readiness is the mountpoint's `st_dev` changing, which is what
//! a user of the mount would observe.

use super::error::{one_line, BenchError, Context};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How the bench starts packfs's own mount, given by its caller.
#[derive(Clone, Debug)]
pub struct MountCommand {
    /// The packfs executable to run as `packfs mount --foreground ...`.
    pub program: PathBuf,
    /// Flags that say how a remote image is reached (endpoint, profile,
    /// range size and cache, timeout), added to the mount of a remote
    /// `--image` so that the daemon reads it as the bench was told to.
    pub remote_args: Vec<String>,
}

/// A scratch directory for mountpoints, removed on drop.
pub fn scratch_dir(what: &str) -> Result<tempfile::TempDir, BenchError> {
    tempfile::Builder::new()
        .prefix(&format!("packfs-bench-{what}-"))
        .tempdir()
        .context("creating a scratch mountpoint")
}

pub fn dev(p: &Path) -> Result<u64, BenchError> {
    Ok(std::fs::metadata(p)
        .with_context(|| format!("{}", p.display()))?
        .dev())
}

/// Waits (up to 20 s) for `mp`'s device to differ from `before`; fails early
/// if `child` (the server) exits.
pub fn wait_mounted(
    mp: &Path,
    before: u64,
    mut child: Option<&mut Child>,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if std::fs::metadata(mp).is_ok_and(|m| m.dev() != before) {
            return Ok(());
        }
        if let Some(c) = child.as_deref_mut() {
            if let Some(st) = c.try_wait()? {
                return Err(BenchError::Mount(format!(
                    "the mount server exited ({st}) before {} was mounted",
                    mp.display()
                )));
            }
        }
        if Instant::now() > deadline {
            return Err(BenchError::Mount(format!(
                "{} was not mounted within 20 s",
                mp.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `fusermount3 -u` (or fusermount, or umount(2) as root).
pub fn umount(mp: &Path) -> Result<(), BenchError> {
    for bin in ["fusermount3", "fusermount"] {
        match Command::new(bin)
            .arg("-u")
            .arg(mp)
            .stderr(Stdio::piped())
            .output()
        {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => {
                return Err(BenchError::Mount(format!(
                    "{bin} -u {}: {}",
                    mp.display(),
                    String::from_utf8_lossy(&o.stderr).trim()
                )))
            }
            Err(_) => continue,
        }
    }
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())
        .map_err(|e| BenchError::Mount(e.to_string()))?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        return Err(BenchError::Mount(format!(
            "umount {}: {}",
            mp.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// packfs's own mount of the image, served by a child process.
pub struct OwnMount {
    image: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    dir: tempfile::TempDir,
    /// Holds the daemon's `--stats` file (the mountpoint cannot).
    stats_dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnMount {
    /// Mounts `image` with `PROGRAM mount --foreground ARGS...`.
    pub fn new(image: &Path, program: &Path, args: &[String]) -> Result<Self, BenchError> {
        let mut m = OwnMount {
            image: image.to_path_buf(),
            program: program.to_path_buf(),
            args: args.to_vec(),
            dir: scratch_dir("mnt")?,
            stats_dir: scratch_dir("stats")?,
            child: None,
        };
        m.start()?;
        Ok(m)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn stats_path(&self) -> PathBuf {
        self.stats_dir.path().join("stats.json")
    }

    /// The daemon's counters now: it writes its `--stats` file on SIGUSR1,
    /// which this waits for (5 s at most). None when not mounted, or when
    /// the answer does not come.
    pub fn stats(&self) -> Option<serde_json::Value> {
        let pid = self.pid()?;
        let path = self.stats_path();
        // Gone first, so that the file read below is this signal's answer
        // (the daemon writes it whole, by rename).
        let _ = std::fs::remove_file(&path);
        // SAFETY: kill on our own child's pid.
        if unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) } != 0 {
            return None;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                return serde_json::from_str(&text).ok();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Mounts the image (the mount must be stopped).
    pub fn start(&mut self) -> Result<(), BenchError> {
        let before = dev(self.path())?;
        // The daemon's log goes to a file: read back if mounting fails,
        // dropped otherwise (fuser logs a harmless error when it finds the
        // mount already gone at exit).
        let mut log = tempfile::tempfile().context("creating the mount's log file")?;
        // arg0 keeps `pgrep -f "packfs mount"` working whatever the program's path.
        use std::os::unix::process::CommandExt;
        // SAFETY: getpid is async-signal-safe.
        let bench = unsafe { libc::getpid() };
        let mut child = Command::new(&self.program);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            child.pre_exec(move || {
                // A bench that dies without unmounting (SIGTERM from
                // `timeout` or a scheduler, SIGKILL) takes its mount with
                // it: the daemon gets SIGTERM, which unmounts as `packfs
                // umount` does. Spawned from the bench's main thread, whose
                // end is the process's. Checked after: the bench may have
                // died before the request.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::getppid() != bench {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = child
            .arg0("packfs")
            .arg("mount")
            .arg("--foreground")
            .arg("--stats")
            .arg(self.stats_path())
            .args(&self.args)
            .arg(&self.image)
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.try_clone()?)
            .spawn()
            .context("starting packfs mount")?;
        if let Err(e) = wait_mounted(self.dir.path(), before, Some(&mut child)) {
            let _ = child.kill();
            let _ = child.wait();
            use std::io::{Read, Seek};
            let mut text = String::new();
            let _ = log.rewind().and_then(|_| log.read_to_string(&mut text));
            // The daemon's own words first, under what was being done.
            let e = if text.trim().is_empty() {
                Err(e)
            } else {
                Err(e).context(text.trim())
            };
            return e.context(format!("mounting {}", self.image.display()));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Unmounts and waits for the server to exit.
    pub fn stop(&mut self) -> Result<(), BenchError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let r = umount(self.dir.path());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        r
    }
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("packfs: warning: {}", one_line(&e));
        }
    }
}
