//! Source checks: a file the walk found, opened to read its data or
//! checked by name, with what changed since the walk (vanished, replaced
//! by another file, resized) reported as such rather than as a bare errno.

use crate::PackError;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens a regular file the walk found, to read its data; what changed
/// since the walk is reported as such ([`PackError::FileVanished`],
/// [`PackError::FileReplaced`]) rather than as a bare errno.
///
/// The first open is `O_NONBLOCK` because a file replaced by a FIFO since
/// the walk would otherwise block `open()` until some writer comes, i.e.
/// hang the pack. But `O_NONBLOCK` also makes `open()` fail with
/// `EWOULDBLOCK` instead of waiting while another process holds a lease on
/// the file (Samba and the NFS server take leases for their clients; a
/// `fcntl(F_SETLEASE)` holder gets up to `/proc/sys/fs/lease-break-time`
/// seconds to let go): only a regular file has leases, so that case opens
/// again, waiting for the lease like any reader.
///
/// `walked` is the file's `st_ino` at the walk (0: not known): another file
/// now under the name (replaced by a rename, as editors and `cp` to a
/// temporary name do) is [`PackError::FileReplaced`], even at the same size.
pub fn open_source(path: &Path, walked: u64) -> Result<std::fs::File, PackError> {
    let open = |flags: libc::c_int| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | flags)
            .open(path)
    };
    let file = match open(libc::O_NONBLOCK) {
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => open(0),
        r => r,
    }
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => PackError::FileVanished { path: path.into() },
        // O_NOFOLLOW on what is now a symlink.
        Some(libc::ELOOP) => PackError::FileReplaced { path: path.into() },
        _ => PackError::io(path)(e),
    })?;
    let meta = file.metadata().map_err(PackError::io(path))?;
    if !meta.is_file() || (walked != 0 && meta.ino() != walked) {
        return Err(PackError::FileReplaced { path: path.into() });
    }
    Ok(file)
}

/// An empty file has no data to read, so it is checked by name: still
/// there, still empty, still the file the walk found (`walked` inode).
pub fn check_empty(path: &Path, walked: u64) -> Result<(), PackError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => PackError::FileVanished { path: path.into() },
        _ => PackError::io(path)(e),
    })?;
    if !meta.is_file() || (walked != 0 && meta.ino() != walked) {
        return Err(PackError::FileReplaced { path: path.into() });
    }
    if meta.len() != 0 {
        return Err(PackError::FileChanged {
            path: path.into(),
            was: 0,
            now: meta.len(),
        });
    }
    Ok(())
}

/// The error for a file found to differ from the `was` bytes the walk
/// recorded, with its size now (of the open file, so also right when the
/// name has been unlinked or reused since).
pub fn changed_size(path: &Path, file: &std::fs::File, was: u64) -> PackError {
    match file.metadata() {
        Ok(m) => PackError::FileChanged {
            path: path.into(),
            was,
            now: m.len(),
        },
        Err(e) => PackError::io(path)(e),
    }
}
