//! What is mounted where, from /proc/self/mountinfo: `mount` refuses a
//! mountpoint that already holds a FUSE mount (stacking a second one there
//! takes two unmounts to undo), and `umount` says "not mounted" for a path
//! that holds none, rather than passing on fusermount's "Invalid argument".

use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount {
    pub mountpoint: PathBuf,
    /// `fuse`, `fuse.packfs`, `tmpfs`...
    pub fstype: String,
    /// What is mounted (an image path, a device), as the table shows it.
    pub source: String,
}

impl Mount {
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.") || self.fstype == "fuseblk"
    }
}

/// The topmost mount at `path` (as given, made absolute without following
/// a symlink in its last component), if any.
pub fn at(path: &Path) -> Option<Mount> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = resolve(path);
    // Later lines are mounted later, on top of earlier ones.
    table
        .lines()
        .rev()
        .filter_map(parse_line)
        .find(|m| m.mountpoint == want)
}

/// `path` made absolute, its parent resolved (a stale FUSE mountpoint
/// cannot be stat'ed, so the path itself is not canonicalised).
fn resolve(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or(abs),
        _ => abs,
    }
}

/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
fn parse_line(line: &str) -> Option<Mount> {
    let (head, tail) = line.split_once(" - ")?;
    let mountpoint = head.split(' ').nth(4)?;
    let mut tail = tail.split(' ');
    Some(Mount {
        mountpoint: PathBuf::from(unescape(mountpoint)),
        fstype: tail.next()?.to_string(),
        source: unescape(tail.next()?),
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
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
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_optional_fields_and_escapes() {
        let l = "52 31 0:45 / /tmp/my\\040mnt rw,nosuid,nodev shared:7 master:1 - fuse.packfs packfs:/data/a\\040b.sqfs rw,user_id=0";
        assert_eq!(
            parse_line(l),
            Some(Mount {
                mountpoint: "/tmp/my mnt".into(),
                fstype: "fuse.packfs".into(),
                source: "packfs:/data/a b.sqfs".into(),
            })
        );
        assert!(parse_line(l).unwrap().is_fuse());
    }

    #[test]
    fn the_root_is_a_mount_and_a_fresh_directory_is_not() {
        assert!(at(Path::new("/")).is_some());
        let d = tempfile::tempdir().unwrap();
        assert_eq!(at(d.path()), None);
    }
}
