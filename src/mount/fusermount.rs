//! Unmounting a FUSE mount as a user would: `fusermount3 -u` (or the older
//! `fusermount`), else umount(2), which works for root.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

/// The first `bin` on $PATH.
pub fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// `packfs umount`: unmounts `mp`, then waits (a bounded time) for a
/// packfs daemon serving it to end, so that its `--stats` and
/// `--record-access` are written when this returns; an error says which
/// tool failed. A path with no FUSE mount on it is refused first, in words
/// (fusermount would say only "Invalid argument").
pub fn umount(given: &Path) -> anyhow::Result<i32> {
    let (mounted, daemon) = fuse_mount_at(given)?;
    unmount(&mounted)?;
    if let Some(d) = daemon {
        if !d.wait_for_exit(std::time::Duration::from_secs(10)) {
            say!(
                "packfs: warning: {}: unmounted, but its daemon has not ended within 10 s \
                 (its --stats and --record-access may come later)",
                mounted.display()
            );
        }
    }
    Ok(0)
}

/// The mountpoint of the FUSE mount at `given`, as the table lists it
/// (fusermount does not follow a symlink it is given), and a connection to
/// its packfs daemon, if one serves it.
fn fuse_mount_at(given: &Path) -> anyhow::Result<(PathBuf, Option<super::rendezvous::Daemon>)> {
    match super::mountinfo::at(given) {
        Some(m) if m.is_fuse() => {
            let daemon = super::rendezvous::connect(&m.dev);
            Ok((m.mountpoint, daemon))
        }
        Some(m) => bail!(
            "{}: not a FUSE mount ({} from {}); packfs unmounts FUSE mounts only",
            given.display(),
            m.fstype,
            m.source
        ),
        None => match std::fs::symlink_metadata(given) {
            Err(e) => bail!("{}: {}", given.display(), crate::oserror::plain(&e)),
            Ok(_) => bail!("{}: not mounted", given.display()),
        },
    }
}

fn unmount(mp: &Path) -> anyhow::Result<()> {
    for bin in ["fusermount3", "fusermount"] {
        if which(bin).is_some() {
            // Its message is kept for ours: a caller that finds the mount
            // gone meanwhile (its daemon unmounted it) says nothing.
            let out = std::process::Command::new(bin)
                .arg("-u")
                .arg(mp)
                .stdin(std::process::Stdio::null())
                .output()
                .with_context(|| format!("running {bin}"))?;
            if out.status.success() {
                return Ok(());
            }
            let said = String::from_utf8_lossy(&out.stderr);
            match said.trim() {
                "" => bail!("{bin} -u {} failed ({})", mp.display(), out.status),
                said => bail!("{said}"),
            }
        }
    }
    umount2(mp, 0)
}

/// A lazy unmount (`-z`, MNT_DETACH): the mount goes at once, busy or not.
pub fn umount_lazy(mp: &Path) -> anyhow::Result<()> {
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
    umount2(mp, libc::MNT_DETACH)
}

fn umount2(mp: &Path, flags: libc::c_int) -> anyhow::Result<()> {
    let c = std::ffi::CString::new(mp.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        bail!(
            "umount {}: {}",
            mp.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
