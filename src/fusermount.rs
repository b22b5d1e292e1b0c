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

/// `packfs umount`: unmounts `mp`; an error says which tool failed. A
/// path with no FUSE mount on it is refused first, in words (fusermount
/// would say only "Invalid argument").
pub fn umount(given: &Path) -> anyhow::Result<i32> {
    // The mountpoint as the table lists it: fusermount does not follow a
    // symlink it is given.
    let mounted = match crate::mountinfo::at(given) {
        Some(m) if m.is_fuse() => m.mountpoint,
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
    };
    let mp = mounted.as_path();
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
                return Ok(0);
            }
            let said = String::from_utf8_lossy(&out.stderr);
            match said.trim() {
                "" => bail!("{bin} -u {} failed ({})", mp.display(), out.status),
                said => bail!("{said}"),
            }
        }
    }
    umount2(mp, 0)?;
    Ok(0)
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
