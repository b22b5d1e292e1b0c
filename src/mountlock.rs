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
//! The lock is `flock` on a file named for the resolved mountpoint, in the
//! user's runtime directory (`$XDG_RUNTIME_DIR`, else a 0700 directory of
//! the user's in /tmp): locks are per node, as mounts are. Without a
//! usable directory the mount goes ahead unlocked (said at debug level):
//! the lock closes a race, it is not a reason to refuse a mount.
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

/// Held until dropped (or [`release`]d).
pub struct MountpointLock(());

/// Takes the lock for the mountpoint `resolved` (absolute, symlinks
/// resolved), waiting for a mount in progress there to be ready or fail.
pub fn lock(resolved: &Path) -> Option<MountpointLock> {
    let dir = lock_dir()?;
    let file = dir.join(format!("mount-{:016x}.lock", fnv1a(resolved)));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&file)
        .map_err(|e| log::debug!("no mountpoint lock {}: {e}", file.display()))
        .ok()?;
    let fd = OwnedFd::from(f);
    // SAFETY: flock on a descriptor we own; EINTR is retried.
    while unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            log::debug!("no mountpoint lock {}: {e}", file.display());
            return None;
        }
    }
    use std::os::fd::IntoRawFd;
    HELD.store(fd.into_raw_fd(), SeqCst);
    Some(MountpointLock(()))
}

/// Unlocks and closes the lock this process holds, if any.
pub fn release() {
    let fd = HELD.swap(-1, SeqCst);
    if fd >= 0 {
        // SAFETY: the descriptor was ours (taken out of HELD once).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
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

/// `$XDG_RUNTIME_DIR/packfs`, else `/tmp/packfs-UID`: made 0700 if
/// missing, used only if it is a real directory of this user's that no
/// one else can write.
fn lock_dir() -> Option<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("packfs"),
        None => PathBuf::from(format!("/tmp/packfs-{uid}")),
    };
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let m = std::fs::symlink_metadata(&dir).ok()?;
    (m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0).then_some(dir)
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
