//! The checkpoint store: decoder positions inside large compressed members,
//! shared by every open handle, bounded by one byte budget for the whole
//! archive.
//!
//! Keys are `(node, output offset)`. An LRU orders them for eviction; a
//! sorted set of the same keys answers "the nearest checkpoint at or before
//! offset x in member n" in O(log n). Both live under one mutex that is held
//! only for map operations, never while decoding.

use super::decoders::Checkpoint;
use lru::LruCache;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Output bytes between two deflate checkpoints of one member (before
/// [`Checkpoints::interval`] widens it for members too large for the
/// budget). A deflate checkpoint holds the 32 KiB window plus ~11 KiB of
/// inflater state (~43 KiB): at 1 MiB that is ~4% of the output it covers,
/// and a read anywhere in the member decodes at most 1 MiB (milliseconds
/// of inflate) past the checkpoint before its chunk. At 4 MiB memory would be
/// 1%, but a random 128 KiB read would decode 16x its size on average; at
/// 256 KiB (one chunk) reads would cost nothing extra but checkpoints would
/// take 17% of the member size, crowding the budget out for large members.
pub const INTERVAL: u64 = 1 << 20;

/// Bookkeeping per checkpoint beyond [`Checkpoint::bytes`]: the LRU node and
/// its hash slot, the set entry, the `Arc` counts.
const OVERHEAD: usize = 128;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints held now.
    pub count: u64,
    /// Bytes they are charged for (always <= `budget`).
    pub bytes: u64,
    pub budget: u64,
    /// Checkpoints recorded / dropped for the budget since opening.
    pub recorded: u64,
    pub evicted: u64,
    /// Decoders started from a checkpoint rather than the member's start.
    pub resumed: u64,
}

struct Inner {
    lru: LruCache<(u32, u64), (Arc<Checkpoint>, usize)>,
    keys: BTreeSet<(u32, u64)>,
    bytes: usize,
}

pub struct Checkpoints {
    budget: usize,
    inner: Mutex<Inner>,
    recorded: AtomicU64,
    evicted: AtomicU64,
    resumed: AtomicU64,
}

impl Checkpoints {
    pub fn new(budget: usize) -> Checkpoints {
        Checkpoints {
            budget,
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                keys: BTreeSet::new(),
                bytes: 0,
            }),
            recorded: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The maps stay consistent whatever panicked (each update is one
        // insert or remove on each), so a poisoned lock is recovered.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Output bytes between checkpoints of a member of `size` bytes:
    /// [`INTERVAL`], doubled until the member's whole set of deflate
    /// checkpoints fits in the budget. A 50 GB member with a 64 MiB budget
    /// gets one every 32 MiB, so a random read decodes at most that much
    /// instead of up to 50 GB; and one member's checkpoints never evict each
    /// other in a loop when it is read from start to end.
    pub fn interval(&self, size: u64) -> u64 {
        let fit = (self.budget / (Checkpoint::inflate_bytes() + OVERHEAD)).max(1) as u64;
        let mut iv = INTERVAL;
        while size / iv > fit && iv < 1 << 40 {
            iv *= 2;
        }
        iv
    }

    /// Whether member `node` has a checkpoint at an offset in `lo..hi`.
    pub fn covers(&self, node: u32, lo: u64, hi: u64) -> bool {
        self.lock()
            .keys
            .range((node, lo)..(node, hi))
            .next()
            .is_some()
    }

    /// Stores `cp`, evicting the least recently used checkpoints (of any
    /// member) until the total is within the budget. A checkpoint larger
    /// than the whole budget is not stored (a budget of 0 disables them).
    pub fn insert(&self, node: u32, cp: Checkpoint) {
        let cost = cp.bytes() + OVERHEAD;
        if cost > self.budget {
            return;
        }
        let key = (node, cp.pos);
        let mut g = self.lock();
        let inner = &mut *g;
        if inner.lru.contains(&key) {
            return;
        }
        inner.lru.push(key, (Arc::new(cp), cost));
        inner.keys.insert(key);
        inner.bytes += cost;
        self.recorded.fetch_add(1, Ordering::Relaxed);
        while inner.bytes > self.budget {
            let Some((k, (_, c))) = inner.lru.pop_lru() else {
                break;
            };
            inner.keys.remove(&k);
            inner.bytes -= c;
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The checkpoint of member `node` nearest at or before `offset`
    /// (marked as recently used), if one is held.
    pub fn nearest(&self, node: u32, offset: u64) -> Option<Arc<Checkpoint>> {
        let mut g = self.lock();
        let key = *g.keys.range((node, 0)..=(node, offset)).next_back()?;
        g.lru.get(&key).map(|(cp, _)| cp.clone())
    }

    /// Counts a decoder resumed from a checkpoint (for stats and tests).
    pub fn note_resumed(&self) {
        self.resumed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> CheckpointStats {
        let g = self.lock();
        CheckpointStats {
            count: g.lru.len() as u64,
            bytes: g.bytes as u64,
            budget: self.budget as u64,
            recorded: self.recorded.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
        }
    }
}
