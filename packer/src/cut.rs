//! The split of a directory tree too large to hold in memory (the split
//! rule is in `crate::shards`), measured by a depth-first walk whose
//! numbers per entry go to temporary files rather than into a tree.
//!
//! The walk ([`Cut::measure`]) writes, by pre-order position, the weight
//! of everything before each position and, for each directory, the
//! position after its subtree. The cuts are then chosen by the same code
//! the in-memory split uses ([`choose_cuts`]), reading those files, so a
//! tree gets the same cuts whichever way it was measured. A shard's pack
//! walks the tree again depth-first, skips the subtrees that end before
//! its run, and checks every entry of its run against the weights
//! measured (`archive::dir_walk`).
//!
//! In memory: the walk's current path and its directories' listings, and
//! the positions of each file with several links (a cut may not separate
//! its names).

use crate::tree::Kind;
use crate::walk::{self, Step};
use crate::{PackError, PackOptions};
use std::cell::Cell;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The split of a tree into runs of its pre-order positions, with what a
/// shard's walk needs to find and check its run.
pub(crate) struct Cut {
    dir: tempfile::TempDir,
    /// `m + 1` little-endian `u64`s: the weight of positions `0..p`.
    prefix: File,
    /// 16 bytes a position, written for directories only: the position
    /// after their subtree (`u64`) and their subdirectories (`u32`).
    ends: File,
    /// A little-endian `u64` a position: [`mark`] of the entry there, by
    /// which a shard's walk knows the tree is the one measured.
    marks: File,
    /// The root's subdirectories.
    pub root_subdirs: u32,
    /// Entries below the root.
    pub m: usize,
    /// Bytes of the files (each inode once).
    pub total_bytes: u64,
    /// `n + 1` positions: shard k is `cuts[k]..cuts[k + 1]`.
    pub cuts: Vec<usize>,
    /// The weight of an entry beyond its data.
    pub entry_cost: u64,
}

/// The cuts of `m` positions into `n` runs (see the module doc), from the
/// cumulative weight before each position (`prefix(0..=m)`, rising) and
/// whether a cut before a position would split a hard-link group:
/// `n + 1` positions, from 0 to `m`.
pub(crate) fn choose_cuts(
    n: u32,
    m: usize,
    prefix: &dyn Fn(usize) -> u128,
    blocked: &dyn Fn(usize) -> bool,
) -> Vec<usize> {
    let total = prefix(m);
    let dist = |c: usize, t: u128| prefix(c).abs_diff(t);
    let mut cuts = vec![0usize];
    for i in 1..n as u128 {
        let t = total * i / n as u128;
        // The first position whose prefix reaches t, by bisection.
        let (mut lo, mut hi) = (0usize, m + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if prefix(mid) < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let above = lo.min(m);
        // Nearest position by weight (ties to the earlier one).
        let mut c = if above > 0 && dist(above - 1, t) <= dist(above, t) {
            above - 1
        } else {
            above
        };
        if blocked(c) {
            let left = (0..c).rev().find(|&x| !blocked(x)).unwrap_or(0);
            let right = (c + 1..=m).find(|&x| !blocked(x)).unwrap_or(m);
            c = if dist(left, t) <= dist(right, t) {
                left
            } else {
                right
            };
        }
        cuts.push(c.max(*cuts.last().expect("non-empty")));
    }
    cuts.push(m);
    cuts
}

/// What a shard's walk checks an entry against: its name, kind and (for
/// a file) size, hashed.
pub(crate) fn mark(name: &[u8], kind: Kind, size: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (name, kind as u8, if kind == Kind::File { size } else { 0 }).hash(&mut h);
    h.finish()
}

/// The weight of an entry in the split (see `crate::shards`).
pub(crate) fn weight(kind: Kind, first_name: bool, size: u64, entry_cost: u64) -> u64 {
    match kind {
        Kind::File if first_name => size + entry_cost,
        _ => entry_cost,
    }
}

impl Cut {
    /// Walks `src` and cuts it into `n` runs; the temporary files go in a
    /// directory beside `near` (a shard's image).
    pub(crate) fn measure(
        src: &Path,
        opts: &PackOptions,
        n: u32,
        entry_cost: u64,
        near: &Path,
    ) -> Result<Cut, PackError> {
        let parent = match near.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let failed = |e| PackError::output(near, "measuring the split into shards")(e);
        let dir = tempfile::Builder::new()
            .prefix(".packfs-split-")
            .tempdir_in(parent)
            .map_err(failed)?;
        let file = |name: &str| -> std::io::Result<(PathBuf, File)> {
            let p = dir.path().join(name);
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&p)?;
            Ok((p, f))
        };
        let (_, prefix) = file("prefix").map_err(failed)?;
        let (_, ends) = file("ends").map_err(failed)?;
        let (_, marks) = file("marks").map_err(failed)?;
        let mut out = BufWriter::with_capacity(1 << 20, &prefix);
        let mut out_marks = BufWriter::with_capacity(1 << 20, &marks);
        out.write_all(&0u64.to_le_bytes()).map_err(failed)?;
        let (mut pos, mut sum, mut total_bytes) = (0usize, 0u64, 0u64);
        // Directories whose subtree is still open: (depth, position,
        // subdirectories so far).
        let mut open: Vec<(usize, usize, u32)> = Vec::new();
        let mut root_subdirs = 0u32;
        // Files with several links: (first, last) position of their names
        // and the names not met yet; a group met whole is a span at once.
        let mut links: HashMap<(u64, u64), (usize, usize, u64)> = HashMap::new();
        let mut spans: Vec<(usize, usize)> = Vec::new();
        let close = |(_, p, subdirs): (usize, usize, u32), end: usize| {
            let mut rec = [0u8; 16];
            rec[..8].copy_from_slice(&(end as u64).to_le_bytes());
            rec[8..12].copy_from_slice(&subdirs.to_le_bytes());
            ends.write_all_at(&rec, p as u64 * 16)
        };
        let mut io_error = None;
        walk::depth_first(src, opts, None, true, &mut |comps, s| {
            while open.last().is_some_and(|&(d, ..)| d >= comps.len()) {
                let dir = open.pop().expect("checked");
                if let Err(e) = close(dir, pos) {
                    io_error = Some(e);
                    return Ok(Step::Stop);
                }
            }
            let kind = walk::kind_of(s.meta.file_type());
            let mut first = true;
            if kind != Kind::Dir && s.meta.nlink() > 1 {
                let key = (s.meta.dev(), s.meta.ino());
                let at = links.entry(key).or_insert((pos, pos, s.meta.nlink()));
                first = at.0 == pos;
                at.1 = pos;
                at.2 -= 1;
                if at.2 == 0 {
                    let (a, b, _) = links.remove(&key).expect("just met");
                    if b > a {
                        spans.push((a + 1, b));
                    }
                }
            }
            if kind == Kind::File && first {
                total_bytes += s.meta.len();
            }
            sum += weight(kind, first, s.meta.len(), entry_cost);
            let m = mark(s.name.as_bytes(), kind, s.meta.len());
            if let Err(e) = out
                .write_all(&sum.to_le_bytes())
                .and_then(|_| out_marks.write_all(&m.to_le_bytes()))
            {
                io_error = Some(e);
                return Ok(Step::Stop);
            }
            if kind == Kind::Dir {
                match open.last_mut() {
                    Some(parent) => parent.2 += 1,
                    None => root_subdirs += 1,
                }
                open.push((comps.len(), pos, 0));
            }
            pos += 1;
            Ok(Step::Enter)
        })?;
        if let Some(e) = io_error {
            return Err(failed(e));
        }
        while let Some(dir) = open.pop() {
            close(dir, pos).map_err(failed)?;
        }
        out.flush().map_err(failed)?;
        out_marks.flush().map_err(failed)?;
        drop((out, out_marks));
        ends.set_len(pos as u64 * 16).map_err(failed)?;
        // A cut before c splits a link group when first < c <= last; the
        // groups with names outside the tree are still in `links`.
        spans.extend(
            links
                .into_values()
                .filter(|&(a, b, _)| b > a)
                .map(|(a, b, _)| (a + 1, b)),
        );
        spans.sort_unstable();
        let mut blocked: Vec<(usize, usize)> = Vec::new();
        for (a, b) in spans {
            match blocked.last_mut() {
                Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
                _ => blocked.push((a, b)),
            }
        }
        let mut cut = Cut {
            dir,
            prefix,
            ends,
            marks,
            root_subdirs,
            m: pos,
            total_bytes,
            cuts: Vec::new(),
            entry_cost,
        };
        let error = Cell::new(None);
        let prefix = |c: usize| match cut.prefix(c) {
            Ok(v) => v as u128,
            Err(e) => {
                error.set(Some(e));
                0
            }
        };
        let is_blocked = |c: usize| {
            let i = blocked.partition_point(|&(a, _)| a <= c);
            i > 0 && c <= blocked[i - 1].1
        };
        let cuts = choose_cuts(n, pos, &prefix, &is_blocked);
        if let Some(e) = error.take() {
            return Err(e);
        }
        cut.cuts = cuts;
        Ok(cut)
    }

    fn read<const N: usize>(
        &self,
        f: &File,
        p: usize,
        what: &'static str,
    ) -> Result<[u8; N], PackError> {
        let mut b = [0u8; N];
        f.read_exact_at(&mut b, (p * N) as u64)
            .map_err(PackError::output(self.dir.path(), what))?;
        Ok(b)
    }

    /// The weight of the positions before `p` (`p <= m`).
    pub(crate) fn prefix(&self, p: usize) -> Result<u64, PackError> {
        let b = self.read(&self.prefix, p, "reading the split's weights")?;
        Ok(u64::from_le_bytes(b))
    }

    /// The position after the subtree of the directory at `p`, and its
    /// subdirectories (0 and 0 for a position that is not a directory's).
    pub(crate) fn dir_at(&self, p: usize) -> Result<(usize, u32), PackError> {
        let b: [u8; 16] = self.read(&self.ends, p, "reading the split's subtrees")?;
        let end = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let subdirs = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        Ok((end as usize, subdirs))
    }

    /// The [`mark`] of the entry measured at `p` (`p < m`).
    pub(crate) fn mark_at(&self, p: usize) -> Result<u64, PackError> {
        let b = self.read(&self.marks, p, "reading the split's marks")?;
        Ok(u64::from_le_bytes(b))
    }
}
