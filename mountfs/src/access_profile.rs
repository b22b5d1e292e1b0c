//! Access profiles: the order in which a mount's files are first read,
//! recorded (`packfs mount --record-access FILE`, for `pack --order
//! profile:FILE`) and replayed to warm the cache (`--preload-profile FILE`,
//! [`preload_profile`]).
//!
//! The recorder learns names from lookups (the kernel looks a name up
//! before it opens it) and, on a file's first read, notes its path. The
//! file is rewritten atomically (a temporary file renamed over it) at most
//! once per [`FLUSH_EVERY`] while reads bring new files, and once more when
//! the recorder is dropped (at unmount), so a daemon that is killed loses
//! at most the last interval. Format: one path per line, from the image
//! root with a leading `/` (see `packer::order::Profile`); a name holding a
//! newline cannot be written that way and is left out.

use crate::image::{FileKind, Image, NodeId, ROOT};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often, at most, the profile file is rewritten while files are read.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct AccessRecorder {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Node -> (parent, name), from lookups.
    names: HashMap<NodeId, (NodeId, Vec<u8>)>,
    seen: HashSet<NodeId>,
    /// Paths of first reads, in order.
    order: Vec<Vec<u8>>,
    /// Paths in `order` not yet in the file.
    unflushed: bool,
    last_flush: Option<Instant>,
}

impl AccessRecorder {
    /// A recorder writing to `path` (created at the first flush).
    pub fn new(path: &Path) -> AccessRecorder {
        AccessRecorder {
            path: path.to_path_buf(),
            state: Mutex::new(State::default()),
        }
    }

    /// A lookup found `name` in `parent` as `node`.
    pub fn named(&self, parent: NodeId, name: &[u8], node: NodeId) {
        let mut s = self.lock();
        if !s.seen.contains(&node) {
            s.names.insert(node, (parent, name.to_vec()));
        }
    }

    /// `node` was read; the first time, its path is recorded.
    pub fn read(&self, node: NodeId) {
        let mut s = self.lock();
        if !s.seen.insert(node) {
            return;
        }
        let Some(path) = s.path_of(node) else {
            return;
        };
        s.order.push(path);
        s.unflushed = true;
        if s.last_flush.is_none_or(|t| t.elapsed() >= FLUSH_EVERY) {
            if let Err(e) = self.write(&mut s) {
                log::warn!("{}: writing the access profile: {e}", self.path.display());
            }
        }
    }

    /// Writes what is recorded and not yet in the file.
    pub fn flush(&self) -> std::io::Result<()> {
        let mut s = self.lock();
        if s.unflushed || s.last_flush.is_none() {
            self.write(&mut s)?;
        }
        Ok(())
    }

    /// Where the profile is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The paths recorded so far, in order.
    pub fn paths(&self) -> Vec<Vec<u8>> {
        self.lock().order.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self, s: &mut State) -> std::io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        for p in &s.order {
            w.write_all(b"/")?;
            w.write_all(p)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        drop(w);
        if let Err(e) = std::fs::rename(&tmp, &self.path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        s.unflushed = false;
        s.last_flush = Some(Instant::now());
        Ok(())
    }
}

impl State {
    /// `node`'s path from the root, from the names lookups gave; None when
    /// a step was never looked up or a name holds a newline.
    fn path_of(&self, mut node: NodeId) -> Option<Vec<u8>> {
        let mut parts = Vec::new();
        while node != ROOT {
            let (parent, name) = self.names.get(&node)?;
            if name.contains(&b'\n') {
                return None;
            }
            parts.push(name.as_slice());
            node = *parent;
        }
        parts.reverse();
        Some(parts.join(&b'/'))
    }
}

/// Warms the cache with the files a profile lists (same format as the
/// recorder writes), in its order: for an image packed with `--order
/// profile:FILE` that is one sequential pass over the image's first region,
/// done before the workload asks for it. Lines naming nothing in the image
/// are skipped; errors are left for the reads that meet them. Returns the
/// files and bytes asked for.
pub fn preload_profile<I: Image>(image: &I, profile: &[u8]) -> (u64, u64) {
    let (mut files, mut bytes) = (0u64, 0u64);
    for line in profile.split(|&b| b == b'\n') {
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let mut node = ROOT;
        let mut attr = None;
        for part in line
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty() && *p != b".")
        {
            match image.lookup(node, part) {
                Ok(a) => {
                    node = a.node;
                    attr = Some(a);
                }
                Err(_) => {
                    attr = None;
                    break;
                }
            }
        }
        let Some(a) = attr.filter(|a| a.kind == FileKind::File) else {
            continue;
        };
        if let Ok(h) = image.open(a.node) {
            image.prefetch(&h, 0, a.size);
            files += 1;
            bytes += a.size;
        }
    }
    (files, bytes)
}

impl Drop for AccessRecorder {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::warn!("{}: writing the access profile: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_first_reads_in_order_and_writes_them_at_drop() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("profile.txt");
        let r = AccessRecorder::new(&out);
        r.named(ROOT, b"d", 2);
        r.named(2, b"b", 3);
        r.named(ROOT, b"a", 4);
        r.named(ROOT, b"bad\nname", 5);
        r.read(3);
        r.read(4);
        r.read(3);
        r.read(5);
        r.read(99); // never looked up
        assert_eq!(r.paths(), vec![b"d/b".to_vec(), b"a".to_vec()]);
        // The first read flushed at once.
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "/d/b\n");
        drop(r);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "/d/b\n/a\n");
    }
}
