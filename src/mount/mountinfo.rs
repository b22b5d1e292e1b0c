//! What is mounted where, from /proc/self/mountinfo: `mount` refuses a
//! mountpoint that already holds a FUSE mount (stacking a second one there
//! takes two unmounts to undo), and `umount` says "not mounted" for a path
//! that holds none, rather than passing on fusermount's "Invalid argument".
//! And, from statfs, whether the filesystem under a path is reached over
//! the network ([`on_network_fs`]), which sizes a mount's io_uring queues.

use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount {
    pub mountpoint: PathBuf,
    /// `fuse`, `fuse.packfs`, `tmpfs`...
    pub fstype: String,
    /// What is mounted (an image path, a device), as the table shows it.
    pub source: String,
    /// `MAJ:MIN` of the mounted filesystem: a new mount at the same place
    /// (of the same image, even) has another.
    pub dev: String,
}

impl Mount {
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.") || self.fstype == "fuseblk"
    }
}

/// The topmost mount at `path` (as given, made absolute without following
/// a symlink in its last component), if any.
pub fn at(path: &Path) -> Option<Mount> {
    at_resolved(&resolve(path))
}

/// The topmost mount at `want`, an absolute path with no symlink in it,
/// looked up without touching the path itself: a FUSE daemon asking about
/// its own mountpoint must not send itself a request.
pub fn at_resolved(want: &Path) -> Option<Mount> {
    // Bytes: one mountpoint anywhere that is not UTF-8 (any user's) must
    // not hide the whole table.
    let table = std::fs::read("/proc/self/mountinfo").ok()?;
    // Later lines are mounted later, on top of earlier ones.
    table
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(parse_line)
        .find(|m| m.mountpoint == want)
}

/// `path` made absolute and resolved, symlinks included (a mountpoint
/// given through a link is listed under its target). A stale FUSE
/// mountpoint cannot be stat'ed: then only its parent is resolved.
pub fn resolve(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or(abs),
        _ => abs,
    }
}

/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
fn parse_line(line: &[u8]) -> Option<Mount> {
    use std::os::unix::ffi::OsStringExt;
    let sep = line.windows(3).position(|w| w == b" - ")?;
    let (head, tail) = (&line[..sep], &line[sep + 3..]);
    let mut fields = head.split(|&b| b == b' ');
    let dev = fields.nth(2)?;
    let mountpoint = fields.nth(1)?;
    let mut tail = tail.split(|&b| b == b' ');
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some(Mount {
        mountpoint: PathBuf::from(std::ffi::OsString::from_vec(unescape(mountpoint))),
        fstype: text(tail.next()?),
        source: text(&unescape(tail.next()?)),
        dev: text(dev),
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// `statfs` magic numbers of filesystems whose reads go over the network
/// or through another FUSE server: NFS, SMB (three), Lustre, GPFS, BeeGFS,
/// CephFS, 9P, AFS (two), OrangeFS, FUSE.
const NETWORK_FS: [i64; 13] = [
    0x6969,
    0x517B,
    0xFE53_4D42,
    0xFF53_4D42,
    0x0BD0_0BD0,
    0x4750_4653,
    0x1983_0326,
    0x00C3_6400,
    0x0102_1997,
    0x6B41_4653,
    0x5346_414F,
    0x2003_0528,
    0x6573_5546,
];

/// Whether `path` is on a filesystem reached over the network or through
/// another FUSE server (list above), where a read of the image may wait
/// for milliseconds. Unknown (statfs fails) counts as local.
pub fn on_network_fs(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path and a zeroed statfs to fill.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return false;
        }
        st
    };
    // f_type is signed on some targets: compare its low 32 bits.
    NETWORK_FS.contains(&(i64::from(st.f_type as u32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_optional_fields_and_escapes() {
        let l = "52 31 0:45 / /tmp/my\\040mnt rw,nosuid,nodev shared:7 master:1 - fuse.packfs packfs:/data/a\\040b.sqfs rw,user_id=0";
        assert_eq!(
            parse_line(l.as_bytes()),
            Some(Mount {
                mountpoint: "/tmp/my mnt".into(),
                fstype: "fuse.packfs".into(),
                source: "packfs:/data/a b.sqfs".into(),
                dev: "0:45".into(),
            })
        );
        assert!(parse_line(l.as_bytes()).unwrap().is_fuse());
        // A mountpoint that is not UTF-8 keeps its bytes.
        let l = b"53 31 0:46 / /tmp/m\xff rw - fuse.packfs packfs:/x.sqfs rw";
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(
            parse_line(l).unwrap().mountpoint.as_os_str().as_bytes(),
            b"/tmp/m\xff"
        );
    }

    #[test]
    fn the_root_is_a_mount_and_a_fresh_directory_is_not() {
        assert!(at(Path::new("/")).is_some());
        let d = tempfile::tempdir().unwrap();
        assert_eq!(at(d.path()), None);
    }

    #[test]
    fn procfs_and_missing_paths_are_not_network_storage() {
        // A FUSE mount is, checked by the io_uring transport tests with a
        // packfs mount; here the answers that need no mount.
        assert!(!on_network_fs(std::path::Path::new("/proc/self")));
        assert!(!on_network_fs(std::path::Path::new(
            "/nonexistent/packfs/image.sqfs"
        )));
        assert!(!on_network_fs(std::path::Path::new("bad\0path")));
    }
}
