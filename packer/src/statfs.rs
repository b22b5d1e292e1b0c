//! The filesystem a path is on, as `statfs` tells it (its magic number):
//! the walk asks whether the source is a FUSE filesystem, the output
//! whether its directory is on Lustre.

use std::path::Path;

/// `statfs(path).f_type`, the filesystem's magic number; `None` when it
/// cannot be asked.
pub fn fs_type(path: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: zeroed is a valid statfs; `c` is a valid C string and `st` a
    // buffer of the right type.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (r == 0).then_some(st.f_type as i64)
}
