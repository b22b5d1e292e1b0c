//! A byte-budgeted, sharded LRU cache of decoded blocks with single-flight
//! loading.
//!
//! # Design
//! * **Budget in bytes, not entries.** Blocks range from a few hundred bytes
//!   (metadata) to 1 MiB (data), so an entry count says nothing about memory.
//!   The budget is split evenly across shards; each shard evicts its least
//!   recently used blocks when its share is exceeded, but always keeps the
//!   block just inserted so progress is guaranteed even with a tiny budget.
//! * **Sharding** keeps the lock hold times short under many FUSE threads:
//!   a shard lock is held only to find or insert a slot, never while
//!   decompressing.
//! * **Single flight.** A miss inserts an empty slot and decodes under the
//!   slot's own mutex. Concurrent readers of the same block find the slot and
//!   wait on that mutex, so a block is decoded once however many threads ask
//!   for it (the common case for a fragment block shared by hundreds of small
//!   files). A failed decode leaves the slot empty; the next reader retries
//!   and gets the same error, which keeps a corrupt block an EIO, not a hang.
//! * Bytes are charged after the decode, and only if the slot is still in its
//!   shard (it may have been evicted while loading), so the accounting never
//!   counts a block that is no longer reachable.
//! * **Served blocks leave early** (when [`BlockCache::release_served`] is
//!   on: a FUSE mount). A block counts the bytes the reader copied out of it
//!   into answers; once that reaches its length, every byte of it sits in
//!   the kernel's page cache, which is where a re-read is answered from, so
//!   the block leaves the cache at once instead of waiting for the LRU. Its
//!   buffer goes back to [`crate::buffers`] for the next decode. Without
//!   this a cold pass fills the whole budget with second copies of what the
//!   kernel already holds, each in fresh pages the daemon faults in and
//!   zeroes, while a cache of served-out blocks recycles a few buffers. A
//!   block still partly unread (a fragment block whose other files come
//!   later in a shuffled pass) stays; a count that overshoots (the same
//!   bytes served twice) releases a block early, which costs one decode,
//!   never a wrong answer. Readers without a page cache in front (Python,
//!   `packfs inspect`) leave this off: the cache is all they have.
//! * **Readahead does not bring a served block back.** A readahead job
//!   runs late when every CPU is busy (several readers on few cores): by
//!   then its reader may have read the block, served it in full and so
//!   released it, and the job would decode it again into a cache entry no
//!   one reads, since the kernel answers those pages itself.
//!   Each shard remembers its last [`RECENT_RELEASES`] releases, and
//!   [`BlockCache::get_or_load_ahead`] (the readahead's way in) skips a
//!   block among them released in the last [`AHEAD_QUIET_MS`] and not in
//!   the cache now; a reader's own
//!   [`BlockCache::get_or_load`] always loads. The bound in time keeps a
//!   later pass over the same data, after the kernel dropped its pages,
//!   from losing its readahead.
//! * **Namespaces.** A union of shard images (`crate::union`) gives every
//!   shard a view of one cache ([`BlockCache::namespace`]): keys are
//!   per-image offsets, so each view tags them with its namespace, and all
//!   views share one budget (N shards must not mean N budgets).

use lru::LruCache;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Shards of a cache whose budget allows it: one lock per shard, so that
/// threads loading different blocks seldom wait for each other.
const SHARDS: usize = 16;
/// Budget per shard below which a cache has fewer shards: each shard keeps
/// at least the block it last loaded, so sixteen shards of a tiny budget
/// would hold sixteen blocks (16 MiB of 1 MiB blocks under `--cache-size 1M`).
const MIN_SHARD_BUDGET: usize = 4 << 20;

/// Shards for a budget: 16, or fewer (at least 1) so that each has
/// [`MIN_SHARD_BUDGET`].
fn shards_for(budget_bytes: usize) -> usize {
    (budget_bytes / MIN_SHARD_BUDGET).clamp(1, SHARDS)
}

/// Releases each shard remembers, so that readahead does not decode a
/// block its reader has just served (module doc): 4,096 blocks in all with
/// 16 shards, 512 MiB at the default block size, about a second of a cold
/// pass.
pub const RECENT_RELEASES: usize = 256;

/// How long after its release a block is left to readers (module doc):
/// far longer than a readahead job waits for a worker, far shorter than
/// the time between two passes over a dataset.
pub const AHEAD_QUIET_MS: u64 = 2000;

/// A decoded block. `next` is the position just past the block on disk,
/// which metadata readers need to continue into the following block.
/// Its buffer goes back to [`crate::buffers`] when the last reference to
/// the block is dropped.
#[derive(Debug)]
pub struct Block {
    pub data: Vec<u8>,
    pub next: u64,
    /// Bytes of `data` copied into answers so far (see the module doc:
    /// served blocks leave early). May exceed `data.len()`.
    served: AtomicUsize,
}

impl Block {
    pub fn new(data: Vec<u8>, next: u64) -> Block {
        crate::buffers::note_block();
        Block {
            data,
            next,
            served: AtomicUsize::new(0),
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        crate::buffers::recycle(std::mem::take(&mut self.data));
    }
}

#[derive(Default)]
struct Slot {
    value: Mutex<Option<Arc<Block>>>,
    charged: AtomicUsize,
}

/// A key as stored: (namespace, the image's own key).
type Key = (u32, u64);

struct Shard {
    lru: LruCache<Key, Arc<Slot>>,
    bytes: usize,
    /// The last [`RECENT_RELEASES`] blocks released from this shard, with
    /// when (milliseconds on [`Core::clock`]), oldest first.
    released: VecDeque<(Key, u64)>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Blocks that left because every byte of them had been served.
    pub released: u64,
    /// Readahead loads skipped because the block had just been released.
    pub ahead_skipped: u64,
    pub bytes: u64,
    pub budget: u64,
}

pub struct BlockCache {
    core: Arc<Core>,
    /// This view's namespace (0 unless made by [`BlockCache::namespace`]).
    ns: u32,
}

struct Core {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    budget: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    released: AtomicU64,
    ahead_skipped: AtomicU64,
    release_served: AtomicBool,
    /// The time base of [`Shard::released`].
    clock: Instant,
    /// [`AHEAD_QUIET_MS`].
    ahead_quiet_ms: u64,
    /// Added to the clock: tests move time on without sleeping.
    skew_ms: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a cache lock cannot leave the LRU inconsistent in
    // a way that matters (worst case: a stale byte count), so recover.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BlockCache {
    pub fn new(budget_bytes: usize) -> Self {
        BlockCache {
            core: Arc::new(Core::new(budget_bytes)),
            ns: 0,
        }
    }

    /// Another view of the same cache (same blocks budget and statistics)
    /// whose keys cannot collide with this one's or any other namespace's.
    pub fn namespace(&self, ns: u32) -> BlockCache {
        BlockCache {
            core: self.core.clone(),
            ns,
        }
    }

    pub fn budget(&self) -> usize {
        self.core.budget
    }

    /// How full `--preload` may make the cache: 90% of the budget, the
    /// rest left to what reads bring in.
    pub fn preload_limit(&self) -> u64 {
        self.budget() as u64 * 9 / 10
    }

    /// What a preload may still decode: [`Self::preload_limit`] less what
    /// the cache holds (a union's shards preload into one cache in turn).
    pub fn preload_room(&self) -> u64 {
        self.preload_limit().saturating_sub(self.stats().bytes)
    }

    /// Returns the cached block for `key`, or runs `load` (once, whatever the
    /// number of concurrent callers) and caches its result.
    pub fn get_or_load<E>(
        &self,
        key: u64,
        load: impl FnOnce() -> Result<Block, E>,
    ) -> Result<Arc<Block>, E> {
        self.core.get_or_load((self.ns, key), load)
    }

    /// [`BlockCache::get_or_load`] for readahead: `None`, without loading,
    /// when the block was released in the last [`AHEAD_QUIET_MS`] (its
    /// reader has had every byte of it; module doc).
    pub fn get_or_load_ahead<E>(
        &self,
        key: u64,
        load: impl FnOnce() -> Result<Block, E>,
    ) -> Option<Result<Arc<Block>, E>> {
        let key = (self.ns, key);
        if self.core.just_released(key) {
            self.core.ahead_skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.core.get_or_load(key, load))
    }

    /// Returns the block if it is cached, without loading or waiting.
    pub fn peek(&self, key: u64) -> Option<Arc<Block>> {
        self.core.peek((self.ns, key))
    }

    /// Whether blocks leave once served in full (for every view of this
    /// cache): on for a FUSE mount, whose answers the kernel's page cache
    /// keeps; off (the default) for readers that have only this cache.
    pub fn release_served(&self, on: bool) {
        self.core.release_served.store(on, Ordering::Relaxed);
    }

    /// Records that `n` bytes of `block` (cached under `key`) were copied
    /// into an answer; with [`BlockCache::release_served`] on, the call
    /// that brings the count to the block's length takes the block out.
    pub fn served(&self, key: u64, block: &Arc<Block>, n: usize) {
        let before = block.served.fetch_add(n, Ordering::Relaxed);
        let len = block.data.len();
        if before < len && before + n >= len && self.core.release_served.load(Ordering::Relaxed) {
            self.core.release((self.ns, key), block);
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.core.stats()
    }
}

impl Core {
    fn new(budget_bytes: usize) -> Self {
        Core {
            shards: (0..shards_for(budget_bytes))
                .map(|_| {
                    Mutex::new(Shard {
                        lru: LruCache::unbounded(),
                        bytes: 0,
                        released: VecDeque::with_capacity(RECENT_RELEASES),
                    })
                })
                .collect(),
            shard_budget: budget_bytes / shards_for(budget_bytes),
            budget: budget_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            released: AtomicU64::new(0),
            ahead_skipped: AtomicU64::new(0),
            release_served: AtomicBool::new(false),
            clock: Instant::now(),
            ahead_quiet_ms: AHEAD_QUIET_MS,
            skew_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64 + self.skew_ms.load(Ordering::Relaxed)
    }

    /// Whether `key` is among its shard's remembered releases of the last
    /// [`AHEAD_QUIET_MS`] and not in the cache now.
    fn just_released(&self, key: Key) -> bool {
        let now = self.now_ms();
        let sh = lock(self.shard(key));
        !sh.lru.contains(&key)
            && sh
                .released
                .iter()
                .rev()
                .take_while(|&&(_, at)| now.saturating_sub(at) < self.ahead_quiet_ms)
                .any(|&(k, _)| k == key)
    }

    fn shard(&self, key: Key) -> &Mutex<Shard> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.shards[(h.finish() as usize) % self.shards.len()]
    }

    fn get_or_load<E>(
        &self,
        key: Key,
        load: impl FnOnce() -> Result<Block, E>,
    ) -> Result<Arc<Block>, E> {
        let shard = self.shard(key);
        let slot = {
            let mut sh = lock(shard);
            match sh.lru.get(&key) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(Slot::default());
                    sh.lru.push(key, s.clone());
                    s
                }
            }
        };
        let mut value = lock(&slot.value);
        if let Some(b) = value.as_ref() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(b.clone());
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let block = Arc::new(load()?);
        *value = Some(block.clone());
        drop(value);
        self.charge(shard, key, &slot, block.data.capacity());
        Ok(block)
    }

    fn peek(&self, key: Key) -> Option<Arc<Block>> {
        let slot = lock(self.shard(key)).lru.peek(&key).cloned()?;
        let v = slot.value.try_lock().ok()?;
        v.clone()
    }

    fn charge(&self, shard: &Mutex<Shard>, key: Key, slot: &Arc<Slot>, size: usize) {
        let mut sh = lock(shard);
        let still_here = sh.lru.peek(&key).is_some_and(|s| Arc::ptr_eq(s, slot));
        if !still_here {
            return;
        }
        let charge = size + std::mem::size_of::<Block>() + 64;
        slot.charged.store(charge, Ordering::Relaxed);
        sh.bytes += charge;
        while sh.bytes > self.shard_budget && sh.lru.len() > 1 {
            match sh.lru.pop_lru() {
                Some((k, s)) if k == key => {
                    // Keep the block just loaded; put it back as most recent.
                    sh.lru.push(k, s);
                    if sh.lru.len() == 1 {
                        break;
                    }
                }
                Some((_, s)) => {
                    sh.bytes -= s.charged.load(Ordering::Relaxed);
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
    }

    /// Takes `block` out if it is what `key`'s slot holds (it may have
    /// been evicted and loaded again since).
    fn release(&self, key: Key, block: &Arc<Block>) {
        let mut sh = lock(self.shard(key));
        let Some(slot) = sh.lru.peek(&key).cloned() else {
            return;
        };
        // Never wait for a slot's mutex under the shard lock (a loader
        // holds it while decoding); a busy slot just stays.
        let ours = match slot.value.try_lock() {
            Ok(v) => v.as_ref().is_some_and(|b| Arc::ptr_eq(b, block)),
            Err(_) => false,
        };
        if ours {
            sh.lru.pop(&key);
            sh.bytes -= slot.charged.load(Ordering::Relaxed);
            self.released.fetch_add(1, Ordering::Relaxed);
            if sh.released.len() == RECENT_RELEASES {
                sh.released.pop_front();
            }
            let now = self.now_ms();
            sh.released.push_back((key, now));
        }
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            ahead_skipped: self.ahead_skipped.load(Ordering::Relaxed),
            bytes: self.shards.iter().map(|s| lock(s).bytes as u64).sum(),
            budget: self.budget as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn block(n: usize) -> Block {
        Block::new(vec![7u8; n], 0)
    }

    #[test]
    fn namespaces_share_the_budget_but_not_keys() {
        let c = BlockCache::new(1 << 20);
        let (a, b) = (c.namespace(1), c.namespace(2));
        a.get_or_load(7, || Ok::<_, ()>(block(10))).unwrap();
        let got = b.get_or_load(7, || Ok::<_, ()>(block(20))).unwrap();
        assert_eq!(got.data.len(), 20, "namespace 2 saw namespace 1's block");
        assert!(c.peek(7).is_none());
        assert_eq!(a.peek(7).unwrap().data.len(), 10);
        assert_eq!(c.stats().misses, 2);
        assert_eq!(a.budget(), c.budget());
    }

    #[test]
    fn stays_within_budget() {
        let c = BlockCache::new(16 << 20);
        assert_eq!(c.core.shards.len(), 4);
        for k in 0..1000u64 {
            c.get_or_load(k, || Ok::<_, ()>(block(100_000))).unwrap();
        }
        let s = c.stats();
        assert!(s.bytes <= s.budget, "{s:?}");
        assert!(s.evictions > 0);
        assert_eq!(s.misses, 1000);
    }

    /// Regression: under a budget of a few blocks, sixteen shards each kept
    /// their last block, so `--cache-size 1M` held 16 blocks of 1 MiB.
    #[test]
    fn a_tiny_budget_holds_about_its_budget_whatever_the_block_size() {
        // At most the budget, or one block when a block is larger.
        for (block_size, most) in [(1 << 20, (1 << 20) + 4096), (128 << 10, 1 << 20)] {
            let c = BlockCache::new(1 << 20);
            for k in 0..100u64 {
                c.get_or_load(k, || Ok::<_, ()>(block(block_size))).unwrap();
            }
            assert!(c.stats().bytes <= most, "{block_size}: {:?}", c.stats());
        }
        // A budget of 64 MiB or more keeps all sixteen shards.
        assert_eq!(super::shards_for(64 << 20), 16);
        assert_eq!(super::shards_for(8 << 20), 2);
    }

    #[test]
    fn hit_does_not_reload() {
        let c = BlockCache::new(1 << 20);
        let loads = AtomicUsize::new(0);
        for _ in 0..5 {
            c.get_or_load(1, || {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ()>(block(10))
            })
            .unwrap();
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(c.stats().hits, 4);
    }

    #[test]
    fn concurrent_misses_decode_once() {
        let c = Arc::new(BlockCache::new(1 << 20));
        let loads = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (c, loads) = (c.clone(), loads.clone());
                std::thread::spawn(move || {
                    c.get_or_load(42, || {
                        loads.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        Ok::<_, ()>(block(100))
                    })
                    .unwrap()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap().data.len(), 100);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn failed_load_is_retried_and_not_cached() {
        let c = BlockCache::new(1 << 20);
        assert!(c.get_or_load(3, || Err::<Block, _>("bad")).is_err());
        assert!(c.get_or_load(3, || Err::<Block, _>("bad")).is_err());
        assert_eq!(
            c.get_or_load(3, || Ok::<_, &str>(block(5)))
                .unwrap()
                .data
                .len(),
            5
        );
        assert_eq!(c.stats().hits, 0);
    }

    #[test]
    fn blocks_served_in_full_leave_only_when_release_is_on() {
        let c = BlockCache::new(1 << 20);
        let b = c.get_or_load(1, || Ok::<_, ()>(block(100))).unwrap();
        // Off (the default): serving every byte keeps the block.
        c.served(1, &b, 100);
        assert!(c.peek(1).is_some());
        c.release_served(true);
        let b2 = c.get_or_load(2, || Ok::<_, ()>(block(100))).unwrap();
        c.served(2, &b2, 60);
        assert!(c.peek(2).is_some(), "left with 40 bytes unserved");
        c.served(2, &b2, 40);
        assert!(c.peek(2).is_none(), "served in full but still cached");
        let s = c.stats();
        assert_eq!((s.released, s.evictions), (1, 0));
        // Block 1 is all that is charged now.
        assert_eq!(s.bytes, (100 + std::mem::size_of::<Block>() + 64) as u64);
        // The reader still holds its copy; the next ask decodes again.
        assert_eq!(b2.data.len(), 100);
        let loads = AtomicUsize::new(0);
        c.get_or_load(2, || {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(block(100))
        })
        .unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_stale_copy_served_in_full_does_not_release_its_successor() {
        let c = BlockCache::new(1 << 20);
        c.release_served(true);
        let old = c.get_or_load(5, || Ok::<_, ()>(block(10))).unwrap();
        c.served(5, &old, 10);
        // Loaded again after the release: a new block under the same key.
        let new = c.get_or_load(5, || Ok::<_, ()>(block(10))).unwrap();
        assert!(!Arc::ptr_eq(&old, &new));
        // Bytes served from the old copy (counted past its length) must
        // not take the new one out.
        c.served(5, &old, 10);
        assert!(c.peek(5).is_some());
        assert_eq!(c.stats().released, 1);
    }

    /// Releases racing loads, hits and evictions: every block read back
    /// holds what was loaded under its key, and the byte count stays the
    /// sum of the charges of the blocks still cached (a release or an
    /// eviction of a block charged twice, or never, would break it).
    #[test]
    fn releases_racing_loads_and_evictions_keep_the_accounting() {
        // Two shards, and more distinct blocks than the budget holds.
        let c = Arc::new(BlockCache::new(8 << 20));
        assert_eq!(c.core.shards.len(), 2);
        c.release_served(true);
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..5000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let key = x % 12_000;
                        let len = 500 + (key as usize * 37) % 1500;
                        let b = c
                            .get_or_load(key, || Ok::<_, ()>(Block::new(vec![key as u8; len], 0)))
                            .unwrap();
                        assert!(b.data.len() == len && b.data.iter().all(|&v| v == key as u8));
                        c.served(key, &b, (x as usize >> 20) % (len / 2 + 1));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = c.stats();
        assert!(s.released > 0 && s.evictions > 0, "{s:?}");
        let charged: usize = c
            .core
            .shards
            .iter()
            .map(|sh| {
                let sh = lock(sh);
                let sum: usize = sh
                    .lru
                    .iter()
                    .map(|(_, s)| s.charged.load(Ordering::Relaxed))
                    .sum();
                assert_eq!(sh.bytes, sum, "a shard's count is not its blocks' charges");
                sum
            })
            .sum();
        assert_eq!(s.bytes, charged as u64);
    }

    #[test]
    fn readahead_skips_a_block_just_served_in_full_but_a_reader_loads_it() {
        let c = BlockCache::new(1 << 20);
        c.release_served(true);
        let loads = AtomicUsize::new(0);
        let load = || {
            loads.fetch_add(1, Ordering::Relaxed);
            Ok::<_, ()>(block(100))
        };
        let b = c.get_or_load(7, load).unwrap();
        c.served(7, &b, 100);
        assert_eq!(c.stats().released, 1);
        // A late readahead job: nothing loaded.
        assert!(c.get_or_load_ahead(7, load).is_none());
        assert_eq!(
            (loads.load(Ordering::Relaxed), c.stats().ahead_skipped),
            (1, 1)
        );
        // Other keys, and other namespaces' key 7, are not affected.
        assert!(c.get_or_load_ahead(8, load).is_some());
        assert!(c.namespace(1).get_or_load_ahead(7, load).is_some());
        assert_eq!(loads.load(Ordering::Relaxed), 3);
        // A reader asking again is served.
        let b = c.get_or_load(7, load).unwrap();
        assert_eq!(loads.load(Ordering::Relaxed), 4);
        // Cached again: readahead finds it without loading.
        assert!(c.get_or_load_ahead(7, load).is_some());
        assert_eq!(loads.load(Ordering::Relaxed), 4);
        // Released again, then quiet long enough: readahead loads it.
        c.served(7, &b, 100);
        assert!(c.get_or_load_ahead(7, load).is_none());
        c.core.skew_ms.store(AHEAD_QUIET_MS - 1, Ordering::Relaxed);
        assert!(c.get_or_load_ahead(7, load).is_none());
        c.core.skew_ms.store(AHEAD_QUIET_MS + 1, Ordering::Relaxed);
        assert!(c.get_or_load_ahead(7, load).is_some());
        assert_eq!(loads.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn only_the_last_releases_of_a_shard_are_remembered() {
        let c = BlockCache::new(64 << 20);
        c.release_served(true);
        // Keys of one shard: the first and RECENT_RELEASES more.
        let shard = |k: u64| c.core.shard((0, k)) as *const _;
        let keys: Vec<u64> = (0..)
            .filter(|&k| shard(k) == shard(0))
            .take(RECENT_RELEASES + 1)
            .collect();
        for &k in &keys {
            let b = c.get_or_load(k, || Ok::<_, ()>(block(10))).unwrap();
            c.served(k, &b, 10);
        }
        let loaded = |k| c.get_or_load_ahead(k, || Ok::<_, ()>(block(10))).is_some();
        assert!(loaded(keys[0]), "the oldest release is forgotten");
        assert!(!loaded(keys[RECENT_RELEASES]));
        assert!(!loaded(keys[1]));
    }

    #[test]
    fn tiny_budget_still_returns_blocks() {
        let c = BlockCache::new(1);
        for k in 0..10 {
            assert_eq!(
                c.get_or_load(k, || Ok::<_, ()>(block(4096)))
                    .unwrap()
                    .data
                    .len(),
                4096
            );
        }
    }
}
