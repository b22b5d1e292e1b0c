//! One mount at a time per mountpoint.
//!
//! `packfs mount` checks that nothing is mounted at its mountpoint, then
//! mounts. Two mounts started at the same instant (the tasks of an array
//! job on one node, `srun` steps, two `packfs run` of one venv) could both
//! pass the check and stack, and each job read the other's image. The check
//! and the mount are made under an exclusive lock named for the mountpoint,
//! held until the mount is usable or has failed, so the second mount finds
//! the first and refuses.
//!
//! The lock is `flock` on a file named for the resolved mountpoint, in a
//! directory that depends on the user only, not on the environment (two
//! job steps may not agree on `$XDG_RUNTIME_DIR`): `/run/user/UID/packfs`
//! where that runtime directory exists, else a 0700 directory of the
//! user's in /tmp. Locks are per node, as mounts are, and per user, as
//! FUSE mounts are. Without a usable directory the mount goes ahead
//! unlocked, with a warning: the lock closes a race, it is not a reason to
//! refuse a mount. The holder removes the file before it unlocks, so files
//! do not pile up; a waiter that then gets the lock on the removed file
//! sees that the name is now another file's, and locks again.
//!
//! Invariant: a process holds at most one such lock ([`HELD`]). The daemon
//! forked from the holder closes its inherited descriptor without
//! unlocking (that would unlock the parent's too); the holder unlocks when
//! the mount is usable (foreground) or when the daemon has answered.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

/// The locked descriptor, or -1.
static HELD: AtomicI32 = AtomicI32::new(-1);
/// The locked file's name, removed at [`release`].
static PATH: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Held until dropped (or [`release`]d).
pub struct MountpointLock(());

/// Takes the lock for the mountpoint `resolved` (absolute, symlinks
/// resolved), waiting for a mount in progress there to be ready or fail.
pub fn lock(resolved: &Path) -> Option<MountpointLock> {
    let Some(dir) = lock_dir() else {
        log::warn!(
            "mountpoint {}: mounting without the lock that keeps two mounts started at once \
             from stacking (no usable /run/user or /tmp directory for it)",
            resolved.display()
        );
        return None;
    };
    let file = dir.join(format!("mount-{:016x}.lock", fnv1a(resolved)));
    loop {
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&file)
        {
            Ok(f) => f,
            Err(e) => {
                log::warn!(
                    "mountpoint {}: mounting without its lock: {e}",
                    resolved.display()
                );
                return None;
            }
        };
        let fd = OwnedFd::from(f);
        // SAFETY: flock on a descriptor we own; EINTR is retried.
        while unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                log::warn!(
                    "mountpoint {}: mounting without its lock: {e}",
                    resolved.display()
                );
                return None;
            }
        }
        // The holder before us removed the file it locked: ours may be
        // that one, which no one else will lock again. Locked only if the
        // name is still this file.
        let same = match (fstat_id(&fd), std::fs::symlink_metadata(&file)) {
            (Some(held), Ok(m)) => held == (m.dev(), m.ino()),
            _ => false,
        };
        if same {
            use std::os::fd::IntoRawFd;
            *PATH.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
            HELD.store(fd.into_raw_fd(), SeqCst);
            return Some(MountpointLock(()));
        }
    }
}

/// (device, inode) of an open file.
fn fstat_id(fd: &OwnedFd) -> Option<(u64, u64)> {
    // SAFETY: fstat into a zeroed stat of our own descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Removes, unlocks and closes the lock this process holds, if any.
pub fn release() {
    let fd = HELD.swap(-1, SeqCst);
    if fd >= 0 {
        // SAFETY: the descriptor was ours (taken out of HELD once).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Some(file) = PATH.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // Still locked: no one else can have replaced the name.
            let _ = std::fs::remove_file(file);
        }
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// In a child just forked from the holder: closes the inherited
/// descriptor, leaving the parent's lock held.
pub fn forget_in_child() {
    let fd: RawFd = HELD.swap(-1, SeqCst);
    if fd >= 0 {
        // SAFETY: the child's copy of a descriptor it never uses.
        unsafe { libc::close(fd) };
    }
}

impl Drop for MountpointLock {
    fn drop(&mut self) {
        release();
    }
}

/// `/run/user/UID/packfs` where the user's runtime directory exists, else
/// `/tmp/packfs-UID`: made 0700 if missing, used only if it is a real
/// directory of this user's that no one else can write.
fn lock_dir() -> Option<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let usable = |dir: PathBuf| {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let m = std::fs::symlink_metadata(&dir).ok()?;
        (m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0).then_some(dir)
    };
    let runtime = PathBuf::from(format!("/run/user/{uid}"));
    let owned = std::fs::symlink_metadata(&runtime).is_ok_and(|m| m.is_dir() && m.uid() == uid);
    owned
        .then(|| usable(runtime.join("packfs")))
        .flatten()
        .or_else(|| usable(PathBuf::from(format!("/tmp/packfs-{uid}"))))
}

/// FNV-1a of the path's bytes: a name that every packfs version makes the
/// same for one mountpoint.
fn fnv1a(p: &Path) -> u64 {
    p.as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}
