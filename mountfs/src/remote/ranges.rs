//! Fetched ranges: an LRU with a byte budget, and the fetches in flight.
//!
//! Invariants: a range index is either cached, in flight, or neither, never
//! two flights for one index (so concurrent readers of a range cost one
//! request); cached bytes never exceed the budget (the range just inserted
//! always stays, so the budget must hold two ranges); readahead never has
//! more than half the budget in flight (counted in whole ranges); a failure is handed to the readers
//! waiting for that flight and then forgotten.
//!
//! One cache may serve several objects, the remote shards of one union
//! ([`SharedRanges`]): the loader's budget is then one budget for all of
//! them, not one per shard, and each object's keys carry its tag
//! ([`Ranges`]) so that they never meet another's.

use bytes::Bytes;
use lru::LruCache;
use packfs_objstore::RemoteError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Readahead fetches in flight at most (demand fetches are not limited).
pub const MAX_AHEAD: usize = 8;

/// Where an object's tag starts in a key: range and piece numbers stay
/// below it (an object of 2^40 ranges of at least 64 KiB is 64 EiB), the
/// piece bit above it.
const TAG_SHIFT: u32 = 40;
/// Objects one shared cache can tell apart: the tag's bits up to the piece bit.
const MAX_TAGS: u64 = 1 << (63 - TAG_SHIFT);

/// A range cache several objects share, one budget for all of them.
#[derive(Clone)]
pub struct SharedRanges {
    cache: Arc<RangeCache>,
    /// Tags given so far.
    joined: Arc<AtomicU64>,
    /// Bytes of all the objects together: what decides, against the
    /// budget, whether a random reader fetches pieces (see `source.rs`).
    total_len: u64,
}

impl SharedRanges {
    /// A cache of `budget` bytes for ranges of `range` bytes, shared by
    /// objects of `total_len` bytes together.
    pub fn new(budget: usize, range: usize, total_len: u64) -> Self {
        SharedRanges {
            cache: Arc::new(RangeCache::new(budget, range)),
            joined: Arc::new(AtomicU64::new(0)),
            total_len,
        }
    }

    /// Bytes of all the objects sharing the cache.
    pub fn total_len(&self) -> u64 {
        self.total_len
    }

    /// Bytes cached now, for every object together.
    pub fn cached_bytes(&self) -> usize {
        self.cache.cached_bytes()
    }
}

impl std::fmt::Debug for SharedRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRanges")
            .field("budget", &self.cache.budget)
            .field("objects", &self.joined.load(Relaxed))
            .finish()
    }
}

/// One object's keys in a range cache: its own cache, or a shared one with
/// the object's tag in every key.
pub struct Ranges {
    cache: Arc<RangeCache>,
    tag: u64,
}

impl Ranges {
    /// A cache of `budget` bytes for this object alone.
    pub fn own(budget: usize, range: usize) -> Self {
        Ranges {
            cache: Arc::new(RangeCache::new(budget, range)),
            tag: 0,
        }
    }

    /// This object's part of `shared`, under a tag of its own.
    pub fn join(shared: &SharedRanges) -> Result<Self, String> {
        let n = shared.joined.fetch_add(1, Relaxed);
        if n >= MAX_TAGS {
            return Err(format!(
                "more than {MAX_TAGS} remote objects share one range cache"
            ));
        }
        Ok(Ranges {
            cache: shared.cache.clone(),
            tag: n << TAG_SHIFT,
        })
    }

    fn key(&self, key: u64) -> u64 {
        debug_assert!(key & !(1 << 63) < 1 << TAG_SHIFT, "key {key:#x}");
        key | self.tag
    }

    /// [`RangeCache::lookup`] of this object's `key`.
    pub fn lookup(&self, key: u64, ahead: bool) -> Lookup {
        self.cache.lookup(self.key(key), ahead)
    }

    /// [`RangeCache::lookup_planned`] of this object's `key`.
    pub fn lookup_planned(&self, key: u64) -> Lookup {
        self.cache.lookup_planned(self.key(key))
    }

    /// [`RangeCache::has`] of this object's `key`.
    pub fn has(&self, key: u64) -> bool {
        self.cache.has(self.key(key))
    }

    /// [`RangeCache::finish`] of this object's `key`.
    pub fn finish(&self, key: u64, flight: &Flight, result: Result<Bytes, RemoteError>) {
        self.cache.finish(self.key(key), flight, result)
    }
}

/// One fetch in flight; readers wait on it.
#[derive(Default)]
pub struct Flight {
    done: Mutex<Option<Result<Bytes, RemoteError>>>,
    cv: Condvar,
    /// Started by readahead (counts against `MAX_AHEAD`).
    ahead: bool,
}

impl Flight {
    /// Waits for the result, at most `limit`; None when it did not come.
    pub fn wait(&self, limit: Duration) -> Option<Result<Bytes, RemoteError>> {
        let deadline = Instant::now() + limit;
        let mut g = self.done.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = &*g {
                return Some(r.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// What a lookup found.
pub enum Lookup {
    Ready(Bytes),
    /// In flight; `true` when this caller started it and must run the fetch.
    Wait(Arc<Flight>, bool),
    /// Not cached, and readahead may not start it now.
    Skip,
}

struct State {
    ready: LruCache<u64, Bytes>,
    bytes: usize,
    flying: HashMap<u64, Arc<Flight>>,
    ahead: usize,
}

pub struct RangeCache {
    budget: usize,
    range: usize,
    state: Mutex<State>,
}

impl RangeCache {
    /// A cache of `budget` bytes for ranges of `range` bytes.
    pub fn new(budget: usize, range: usize) -> Self {
        RangeCache {
            budget,
            range,
            state: Mutex::new(State {
                ready: LruCache::unbounded(),
                bytes: 0,
                flying: HashMap::new(),
                ahead: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The range `idx`: cached, in flight, or claimed for the caller to fetch.
    /// `ahead` (readahead) claims only within `MAX_AHEAD` and the budget.
    pub fn lookup(&self, idx: u64, ahead: bool) -> Lookup {
        self.claim(idx, ahead, if ahead { MAX_AHEAD } else { usize::MAX })
    }

    /// As a readahead [`RangeCache::lookup`], for a reader that said what it
    /// will read: its plan bounds how much it asks for at once (a sampler's
    /// window of regions), so only the budget limits it.
    pub fn lookup_planned(&self, idx: u64) -> Lookup {
        self.claim(idx, true, usize::MAX)
    }

    /// `lookup` with at most `flights` readahead fetches in flight.
    fn claim(&self, idx: u64, ahead: bool, flights: usize) -> Lookup {
        let mut s = self.lock();
        if let Some(b) = s.ready.get(&idx) {
            return Lookup::Ready(b.clone());
        }
        if let Some(f) = s.flying.get(&idx) {
            return Lookup::Wait(f.clone(), false);
        }
        // Readahead may evict cached ranges (it is what a reader moving
        // through the object needs next) but never have more than half the
        // budget in flight, so it cannot evict what it fetched before use.
        if ahead && (s.ahead >= flights || (s.ahead + 1) * self.range > self.budget / 2) {
            return Lookup::Skip;
        }
        let f = Arc::new(Flight {
            ahead,
            ..Default::default()
        });
        s.flying.insert(idx, f.clone());
        s.ahead += ahead as usize;
        Lookup::Wait(f, true)
    }

    /// Whether `idx` is cached or in flight (no LRU update).
    pub fn has(&self, idx: u64) -> bool {
        let s = self.lock();
        s.ready.contains(&idx) || s.flying.contains_key(&idx)
    }

    /// Ends the flight of `idx` with `result`: wakes its readers, caches a
    /// success (evicting the least recently used ranges over the budget).
    pub fn finish(&self, idx: u64, flight: &Flight, result: Result<Bytes, RemoteError>) {
        {
            let mut s = self.lock();
            s.flying.remove(&idx);
            s.ahead -= flight.ahead as usize;
            if let Ok(b) = &result {
                s.bytes += b.len();
                if let Some(old) = s.ready.put(idx, b.clone()) {
                    s.bytes -= old.len();
                }
                while s.bytes > self.budget && s.ready.len() > 1 {
                    match s.ready.pop_lru() {
                        Some((_, old)) => s.bytes -= old.len(),
                        None => break,
                    }
                }
            }
        }
        *flight.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        flight.cv.notify_all();
    }

    /// Bytes cached now.
    pub fn cached_bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(c: &RangeCache, idx: u64, n: usize) {
        let Lookup::Wait(f, true) = c.lookup(idx, false) else {
            panic!("{idx} not claimable")
        };
        c.finish(idx, &f, Ok(Bytes::from(vec![idx as u8; n])));
    }

    #[test]
    fn objects_sharing_a_cache_keep_their_keys_apart_within_one_budget() {
        let shared = SharedRanges::new(300, 100, 1000);
        let (a, b) = (
            Ranges::join(&shared).unwrap(),
            Ranges::join(&shared).unwrap(),
        );
        let fill = |r: &Ranges, key: u64, byte: u8| {
            let Lookup::Wait(f, true) = r.lookup(key, false) else {
                panic!("{key} not claimable")
            };
            r.finish(key, &f, Ok(Bytes::from(vec![byte; 100])));
        };
        // The same range number in two objects is two entries.
        fill(&a, 0, 1);
        assert!(a.has(0) && !b.has(0));
        fill(&b, 0, 2);
        let Lookup::Ready(got) = a.lookup(0, false) else {
            panic!()
        };
        assert_eq!(got[0], 1);
        // Pieces too.
        fill(&a, 1 << 63 | 5, 3);
        assert!(a.has(1 << 63 | 5) && !b.has(1 << 63 | 5) && !a.has(5));
        // One budget for both: three ranges of 100 in 300, the least
        // recently used out (b's 0: a's 0 was read since).
        fill(&b, 1, 4);
        assert!(shared.cached_bytes() <= 300);
        assert!(a.has(0) && !b.has(0) && b.has(1));
        // An object alone has a budget of its own.
        let own = Ranges::own(300, 100);
        assert!(!own.has(0));
    }

    #[test]
    fn one_flight_per_range_and_the_budget_holds() {
        let c = RangeCache::new(300, 100);
        let Lookup::Wait(f, true) = c.lookup(7, false) else {
            panic!()
        };
        // A second reader joins the flight instead of fetching.
        let Lookup::Wait(g, false) = c.lookup(7, false) else {
            panic!()
        };
        assert!(Arc::ptr_eq(&f, &g));
        c.finish(7, &f, Ok(Bytes::from_static(&[1; 100])));
        assert_eq!(g.wait(Duration::ZERO).unwrap().unwrap().len(), 100);
        for i in 0..5 {
            done(&c, i, 100);
        }
        assert!(c.cached_bytes() <= 300);
        // The most recent are kept, the oldest evicted.
        assert!(c.has(4) && c.has(3) && !c.has(0) && !c.has(7));
    }

    #[test]
    fn failures_reach_the_waiters_and_are_forgotten() {
        let c = RangeCache::new(1000, 100);
        let Lookup::Wait(f, true) = c.lookup(1, false) else {
            panic!()
        };
        let Lookup::Wait(g, false) = c.lookup(1, false) else {
            panic!()
        };
        c.finish(1, &f, Err(RemoteError::Config("boom".into())));
        assert!(g.wait(Duration::ZERO).unwrap().is_err());
        // The next reader fetches again.
        assert!(matches!(c.lookup(1, false), Lookup::Wait(_, true)));
    }

    #[test]
    fn readahead_is_bounded_by_flights_and_budget() {
        let c = RangeCache::new(100 * 20, 100);
        let mut claimed = Vec::new();
        for i in 0..20 {
            if let Lookup::Wait(f, true) = c.lookup(i, true) {
                claimed.push((i, f));
            }
        }
        assert_eq!(claimed.len(), MAX_AHEAD);
        // Demand fetches are never refused.
        assert!(matches!(c.lookup(100, false), Lookup::Wait(_, true)));
        for (i, f) in &claimed {
            c.finish(*i, f, Ok(Bytes::from(vec![0; 100])));
        }
        // At most half the budget in flight ahead...
        let small = RangeCache::new(400, 100);
        let Lookup::Wait(f0, true) = small.lookup(0, true) else {
            panic!()
        };
        assert!(matches!(small.lookup(1, true), Lookup::Wait(_, true)));
        assert!(matches!(small.lookup(2, true), Lookup::Skip));
        // ...but a full cache does not stop readahead: it evicts the oldest.
        small.finish(0, &f0, Ok(Bytes::from(vec![0; 100])));
        for i in 10..14 {
            done(&small, i, 100);
        }
        assert_eq!(small.cached_bytes(), 400);
        assert!(matches!(small.lookup(3, true), Lookup::Wait(_, true)));
    }

    #[test]
    fn a_waiter_gives_up_after_its_limit() {
        let c = RangeCache::new(1000, 100);
        let Lookup::Wait(f, true) = c.lookup(3, false) else {
            panic!()
        };
        let t = Instant::now();
        assert!(f.wait(Duration::from_millis(50)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(50));
    }
}
