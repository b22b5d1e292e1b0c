//! Naming the file behind a node when a read of it fails as damaged.
//!
//! A mount knows a file by its node only: the kernel asks to read node N,
//! never a path. A user told "inode 4711 is damaged" has to go and find it,
//! so the first time a node's read fails as [`FsError::Damaged`], the image
//! is searched breadth first from the root for an entry with that node, and
//! the path is put in the error (and so in the mount's log).
//!
//! The search is on the error path only, never on a healthy read. It is
//! bounded in time ([`SEARCH_BUDGET`]): a huge tree, or one whose listings
//! are themselves damaged, gives up and says so rather than stall the
//! request. Names found (or not) are remembered for a bounded number of
//! nodes, so a damaged file read again and again costs one search.

use crate::error::FsError;
use crate::image::{FileKind, Image, NodeId, ROOT};
use lru::LruCache;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one search may take before it gives up.
pub const SEARCH_BUDGET: Duration = Duration::from_secs(1);

/// Nodes whose search result is remembered.
const REMEMBERED: usize = 256;

/// The searches' results, by node: `None` when the search gave up.
pub struct DamagedNames {
    found: Mutex<LruCache<NodeId, Option<String>>>,
}

impl Default for DamagedNames {
    fn default() -> Self {
        DamagedNames {
            found: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(REMEMBERED).expect("non-zero"),
            )),
        }
    }
}

impl DamagedNames {
    /// `e` with the path of `node` in front when `e` is damage; any other
    /// error is returned as it is.
    pub fn name<I: Image + ?Sized>(&self, image: &I, node: NodeId, e: FsError) -> FsError {
        let FsError::Damaged(m) = e else { return e };
        let known = self
            .found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .cloned();
        let path = match known {
            Some(p) => p,
            None => {
                let p = search(image, node, SEARCH_BUDGET);
                self.found
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .put(node, p.clone());
                p
            }
        };
        match path {
            Some(p) => FsError::Damaged(format!("{p}: {m}")),
            None => FsError::Damaged(format!(
                "{m} (its path was not found within {} s; `packfs verify` names every damaged file)",
                SEARCH_BUDGET.as_secs()
            )),
        }
    }
}

/// The '/'-separated path from the root of an entry whose node is `node`,
/// or `None` if none is found within `budget`.
pub fn search<I: Image + ?Sized>(image: &I, node: NodeId, budget: Duration) -> Option<String> {
    let until = Instant::now() + budget;
    let mut dirs: VecDeque<(NodeId, String)> = VecDeque::from([(ROOT, String::new())]);
    while let Some((dir, path)) = dirs.pop_front() {
        let mut hit = None;
        let mut late = false;
        // A listing that fails is skipped: the search only names a file.
        let _ = image.readdir(dir, 2, &mut |e| {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            if e.node == node {
                hit = Some(p);
                return false;
            }
            if e.kind == FileKind::Dir {
                dirs.push_back((e.node, p));
            }
            late = Instant::now() > until;
            !late
        });
        if hit.is_some() || late {
            return hit;
        }
    }
    None
}
