//! Access profiles: the files a workload reads first, in the order it
//! first read them (what `packfs mount --record-access` writes).
//!
//! Format: one path per line, relative to the image root (a leading `/` is
//! allowed and ignored), raw bytes (not necessarily UTF-8); empty lines and
//! lines starting with `#` are skipped. A name holding a newline cannot be
//! written, so the recorder leaves such files out. Paths the tree lacks, or
//! that are not regular files, are ignored: a profile recorded against an
//! older image still orders what it can.

use crate::tree::{Kind, Tree};
use crate::PackError;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Relative paths as bytes, components separated by `/`.
    paths: Vec<Vec<u8>>,
}

impl Profile {
    pub fn read(file: &Path) -> Result<Profile, PackError> {
        let bytes = std::fs::read(file).map_err(PackError::io(file))?;
        Ok(Profile::parse(&bytes))
    }

    pub fn parse(bytes: &[u8]) -> Profile {
        let paths = bytes
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
            .map(|l| {
                let mut l = l;
                while let Some(r) = l.strip_prefix(b"/") {
                    l = r;
                }
                l.to_vec()
            })
            .filter(|l| !l.is_empty())
            .collect();
        Profile { paths }
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// blake3 of the paths as parsed, each followed by a newline (a parsed
    /// path holds none), hex: equal for two profile files exactly when they
    /// order a tree the same way, whatever their comments, blank lines,
    /// leading slashes or line ends.
    pub fn digest(&self) -> String {
        let mut h = blake3::Hasher::new();
        for p in &self.paths {
            h.update(p);
            h.update(b"\n");
        }
        h.finalize().to_hex().to_string()
    }

    /// The regular-file inodes the profile names, in its order, each once
    /// (a path seen again, or a hard link to a file already listed, keeps
    /// its first place).
    pub(crate) fn inodes(&self, tree: &Tree) -> Vec<u32> {
        let mut seen = vec![false; tree.inodes.len()];
        let mut out = Vec::new();
        for p in &self.paths {
            let Some(node) = lookup(tree, p) else {
                continue;
            };
            let ino = tree.nodes[node as usize].inode;
            if tree.inodes[ino as usize].kind == Kind::File && !seen[ino as usize] {
                seen[ino as usize] = true;
                out.push(ino);
            }
        }
        let missing = self.paths.len() - out.len();
        if missing > 0 {
            log::info!(
                "profile: {missing} of {} paths are not files of this tree (or repeat one)",
                self.paths.len()
            );
        }
        out
    }
}

/// The node at `path` (components separated by `/`; `.` and empty ones
/// skipped), by binary search of each directory's children, which the walk
/// keeps sorted by name bytes. Symlinks are not followed.
fn lookup(tree: &Tree, path: &[u8]) -> Option<u32> {
    let mut node = 0u32;
    for part in path.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." {
            continue;
        }
        let ino = tree.nodes[node as usize].inode;
        if tree.inodes[ino as usize].kind != Kind::Dir {
            return None;
        }
        let (mut lo, mut hi) = (tree.children(node).start, tree.children(node).end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match tree.name(mid).cmp(part) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    lo = mid;
                    break;
                }
            }
        }
        if lo >= tree.children(node).end || tree.name(lo) != part {
            return None;
        }
        node = lo;
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk;
    use crate::PackOptions;
    use std::fs;

    #[test]
    fn digest_is_of_the_paths_not_the_file_bytes() {
        let a = Profile::parse(b"# recorded\n/a/b\r\nc\n\n");
        assert_eq!(a.digest(), Profile::parse(b"a/b\nc\n").digest());
        assert_ne!(a.digest(), Profile::parse(b"c\na/b\n").digest());
        assert_ne!(a.digest(), Profile::parse(b"a/bc\n").digest());
    }

    #[test]
    fn parse_skips_comments_blanks_and_leading_slashes() {
        let p = Profile::parse(b"# recorded\n/a/b\n\nc\r\n//d\n/\n");
        assert_eq!(p.paths, vec![b"a/b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
    }

    #[test]
    fn inodes_follow_the_profile_and_skip_what_the_tree_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        fs::create_dir_all(src.join("d/e")).unwrap();
        for f in ["a", "d/b", "d/e/c", "z"] {
            fs::write(src.join(f), f).unwrap();
        }
        fs::hard_link(src.join("a"), src.join("d/a2")).unwrap();
        let tree = walk::walk(src, &PackOptions::default()).unwrap();
        let p = Profile::parse(b"d/e/c\nmissing\nd\nz\n./d/a2\na\nz\nd/e/c/x\n");
        let names: Vec<_> = p
            .inodes(&tree)
            .into_iter()
            .map(|i| tree.rel_path(tree.inodes[i as usize].node))
            .collect();
        // a and d/a2 are one inode: listed once, at d/a2's place.
        assert_eq!(names.len(), 3);
        assert_eq!(names[0], Path::new("d/e/c"));
        assert_eq!(names[1], Path::new("z"));
        assert!(names[2] == Path::new("a") || names[2] == Path::new("d/a2"));
    }
}
