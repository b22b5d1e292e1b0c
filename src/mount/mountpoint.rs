//! Whether a mountpoint can take a mount, asked before the fork (under
//! the mountpoint's lock, [`super::mountlock`]) so that `packfs mount`
//! refuses in words what the kernel or fusermount3 would refuse with a
//! bare errno, or would let stack.

use anyhow::{bail, Context};
use std::path::Path;

/// Refuses a mountpoint that cannot or should not take the mount: one
/// where a FUSE filesystem is mounted already (a second mount would stack
/// on it and take two unmounts to undo; a dead one cannot even be listed),
/// one that is not a directory, or, unless `nonempty`, one with contents
/// (the mount would hide them).
pub fn check(mp: &Path, nonempty: bool) -> anyhow::Result<()> {
    let mut mounted = super::mountinfo::at(mp);
    // A FUSE mount whose server is gone (a daemon killed with its watcher,
    // by the OOM killer or a job's end) answers nothing but ENOTCONN: no one
    // can use it, and a fixed mountpoint (a venv's) must be mountable again.
    if let Some(m) = mounted.as_ref().filter(|m| m.is_fuse()) {
        if super::daemon::is_dead_fuse_mount(&m.mountpoint) {
            log::warn!(
                "mountpoint {}: removing a dead mount ({} from {}: its server is gone)",
                mp.display(),
                m.fstype,
                m.source
            );
            super::fusermount::umount_lazy(&m.mountpoint).with_context(|| {
                format!(
                    "mountpoint {}: a dead mount is there and cannot be removed",
                    mp.display()
                )
            })?;
            mounted = super::mountinfo::at(mp);
        }
    }
    if let Some(m) = mounted.as_ref().filter(|m| m.is_fuse()) {
        bail!(
            "mountpoint {}: already mounted ({} from {}); unmount it first with `packfs umount {}`",
            mp.display(),
            m.fstype,
            m.source,
            mp.display()
        );
    }
    let meta = std::fs::metadata(mp).with_context(|| format!("mountpoint {}", mp.display()))?;
    if !meta.is_dir() {
        bail!("mountpoint {}: not a directory", mp.display());
    }
    let listed = std::fs::read_dir(mp).with_context(|| format!("mountpoint {}", mp.display()))?;
    if !nonempty && listed.into_iter().next().is_some() {
        // Another filesystem mounted there (a kernel one: FUSE ones are
        // refused above) is what makes it non-empty; say so.
        let there = mounted
            .map(|m| format!(" ({} from {} is mounted there)", m.fstype, m.source))
            .unwrap_or_default();
        bail!(
            "mountpoint {}: directory is not empty{there} (pass --nonempty to mount over it; its contents are hidden until unmounted)",
            mp.display()
        );
    }
    fuse_allowed(mp, &meta)
}

/// Whether this user may mount a FUSE filesystem at `mp` (whose metadata
/// is `meta`): /dev/fuse there (all root needs), open to them,
/// fusermount3 on $PATH, and fusermount3's own rules for the mountpoint.
fn fuse_allowed(mp: &Path, meta: &std::fs::Metadata) -> anyhow::Result<()> {
    if std::fs::metadata("/dev/fuse").is_err() {
        bail!("/dev/fuse is missing: this machine or container has no FUSE support");
    }
    use super::fusermount::which;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        return Ok(());
    }
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c"/dev/fuse".as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "/dev/fuse: {}: this machine lets only some users mount FUSE filesystems (the fuse3 package makes it mode 0666; ask the administrator)",
            crate::oserror::plain(&e)
        );
    }
    if which("fusermount3").is_none() && which("fusermount").is_none() {
        bail!("fusermount3 not found in PATH: install the fuse3 package (needed to mount without root)");
    }
    // fusermount3's own rule for a user's mount; refused by it, the mount
    // fails with a bare "permission denied".
    use std::os::unix::fs::MetadataExt;
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        bail!(
            "mountpoint {}: you cannot write to it, and a user may mount only on a directory they can write to (fusermount3's rule); use a directory of your own, e.g. under $TMPDIR",
            mp.display()
        );
    }
    if meta.mode() & libc::S_ISVTX != 0 && meta.uid() != euid {
        bail!(
            "mountpoint {}: a sticky directory of another user (fusermount3 mounts only on a sticky directory its user owns); use a directory of your own, e.g. under $TMPDIR",
            mp.display()
        );
    }
    Ok(())
}
