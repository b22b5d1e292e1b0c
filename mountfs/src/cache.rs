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

use lru::LruCache;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const SHARDS: usize = 16;

/// A decoded block. `next` is the position just past the block on disk,
/// which metadata readers need to continue into the following block.
/// Its buffer goes back to [`crate::buffers`] when the last reference to
/// the block is dropped.
#[derive(Debug)]
pub struct Block {
    pub data: Vec<u8>,
    pub next: u64,
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

struct Shard {
    lru: LruCache<u64, Arc<Slot>>,
    bytes: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bytes: u64,
    pub budget: u64,
}

pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    budget: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a cache lock cannot leave the LRU inconsistent in
    // a way that matters (worst case: a stale byte count), so recover.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BlockCache {
    pub fn new(budget_bytes: usize) -> Self {
        BlockCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        lru: LruCache::unbounded(),
                        bytes: 0,
                    })
                })
                .collect(),
            shard_budget: budget_bytes / SHARDS,
            budget: budget_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    fn shard(&self, key: u64) -> &Mutex<Shard> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.shards[(h.finish() as usize) % SHARDS]
    }

    /// Returns the cached block for `key`, or runs `load` (once, whatever the
    /// number of concurrent callers) and caches its result.
    pub fn get_or_load<E>(
        &self,
        key: u64,
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

    /// Returns the block if it is cached, without loading or waiting.
    pub fn peek(&self, key: u64) -> Option<Arc<Block>> {
        let slot = lock(self.shard(key)).lru.peek(&key).cloned()?;
        let v = slot.value.try_lock().ok()?;
        v.clone()
    }

    fn charge(&self, shard: &Mutex<Shard>, key: u64, slot: &Arc<Slot>, size: usize) {
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

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
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
        Block {
            data: vec![7u8; n],
            next: 0,
        }
    }

    #[test]
    fn stays_within_budget() {
        let c = BlockCache::new(16 * 100_000);
        for k in 0..1000u64 {
            c.get_or_load(k, || Ok::<_, ()>(block(10_000))).unwrap();
        }
        let s = c.stats();
        assert!(s.bytes <= s.budget, "{s:?}");
        assert!(s.evictions > 0);
        assert_eq!(s.misses, 1000);
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
