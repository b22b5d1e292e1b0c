//! Reading extended attributes from the source tree (without following
//! symlinks) and deduplicating identical sets.

use packfs_format::squashfs::xattr::{prefix, split_name};
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One attribute as SquashFS stores it: namespace id + name without its prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Xattr {
    pub kind: u16,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

impl Xattr {
    /// Length of "prefix.name" — what listxattr reports.
    pub fn full_name_len(&self) -> usize {
        // `kind` comes from `split_name`, so its prefix is always known.
        prefix(self.kind).map_or(0, <[u8]>::len) + self.name.len()
    }
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Reads the xattrs of `path` (lstat semantics), sorted by (namespace, name)
/// so equal sets compare equal. Namespaces SquashFS cannot store are skipped
/// with a warning; a filesystem without xattr support yields an empty set.
pub fn read(path: &Path) -> io::Result<Vec<Xattr>> {
    let c = cpath(path)?;
    let mut names = vec![0u8; 1024];
    let n = loop {
        // SAFETY: the buffer pointer and length describe a live, writable Vec.
        let r = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    };
    let mut out = Vec::new();
    for full in names[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let Some((kind, short)) = split_name(full) else {
            log::warn!(
                "{}: skipping xattr {} (namespace not storable in SquashFS)",
                path.display(),
                String::from_utf8_lossy(full)
            );
            continue;
        };
        let cname = CString::new(full).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        let mut value = vec![0u8; 256];
        let len = loop {
            // SAFETY: as above.
            let r = unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    cname.as_ptr(),
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            };
            if r >= 0 {
                break Some(r as usize);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => value.resize(value.len() * 4, 0),
                // Removed between list and get: nothing to store.
                Some(libc::ENODATA) => break None,
                _ => return Err(e),
            }
        };
        if let Some(len) = len {
            value.truncate(len);
            out.push(Xattr {
                kind,
                name: short.to_vec(),
                value,
            });
        }
    }
    out.sort();
    Ok(out)
}

/// Distinct xattr sets in first-seen order; identical sets share one id.
#[derive(Default)]
pub struct XattrSets {
    pub sets: Vec<Vec<Xattr>>,
    index: HashMap<Vec<Xattr>, u32>,
}

impl XattrSets {
    /// Returns the set's id, or `None` for an empty set.
    pub fn intern(&mut self, set: Vec<Xattr>) -> Option<u32> {
        if set.is_empty() {
            return None;
        }
        if let Some(&id) = self.index.get(&set) {
            return Some(id);
        }
        let id = self.sets.len() as u32;
        self.sets.push(set.clone());
        self.index.insert(set, id);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use packfs_format::squashfs::XATTR_USER;

    #[test]
    fn identical_sets_are_stored_once() {
        let mut s = XattrSets::default();
        let a = vec![Xattr {
            kind: XATTR_USER,
            name: b"a".to_vec(),
            value: b"1".to_vec(),
        }];
        let mut b = a.clone();
        b[0].value = b"2".to_vec();
        assert_eq!(s.intern(a.clone()), Some(0));
        assert_eq!(s.intern(b), Some(1));
        assert_eq!(s.intern(a), Some(0));
        assert_eq!(s.intern(Vec::new()), None);
        assert_eq!(s.sets.len(), 2);
    }
}
