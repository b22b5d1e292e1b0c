//! [`RemoteSource`]: an [`ImageSource`] over range GETs of one object
//! version (the design is in the [module doc](super)).

use super::disk_cache::{DiskCache, ObjectKey};
use super::options::RemoteOptions;
use super::ranges::{Flight, Lookup, Ranges};
use crate::error::Result;
use crate::source::{range_check, ImageSource};
use bytes::Bytes;
use packfs_objstore::{Remote, RemoteCounters, RemoteError, RemoteStats, Version};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Cache keys with this bit set name pieces, the others ranges.
const PIECE: u64 = 1 << 63;
/// The smallest piece; see [`piece_size`].
const MIN_PIECE: u64 = 64 << 10;
/// Hints longer than this were widened by a sequential stream and fetch
/// whole ranges; shorter ones name the block about to be read.
const STREAM_HINT: u64 = 1 << 20;

/// The piece size for ranges of `range` bytes: 1/16 of a range (256 KiB for
/// the default 4 MiB), at least 64 KiB: about one or two data blocks, so a
/// random read of a small file costs one short GET.
pub fn piece_size(range: u64) -> u64 {
    (range / 16).max(MIN_PIECE).min(range)
}

/// An object read by aligned range requests through a range cache.
///
/// **Pieces.** When the object is larger than the range cache, whole ranges
/// cannot all stay cached, and a shuffled pass over small files would fetch
/// a whole range for each file it reads, fetching many times the object's
/// size per pass and losing each range before its neighbours are read. So for such
/// an object a read that is not moving through the object fetches only the
/// aligned *pieces* ([`piece_size`]) it touches; a read that crossed from
/// one range into the next (a sequential reader) and hints widened by a
/// sequential stream fetch whole ranges, with readahead, as before. A range
/// already cached or in flight always serves. Pieces share the range
/// cache's budget, LRU and single flight (keys with `PIECE` set). An
/// object that fits in the cache is fetched in whole ranges only: every
/// byte fetched stays, and fewer requests are better.
///
/// Invariant: every byte it returns belongs to the version pinned at open
/// (`version`): each answer's ETag (or Last-Modified), total length and
/// range are checked before its bytes are cached.
pub struct RemoteSource {
    shared: Arc<Shared>,
    /// One past the last range a reader asked for, for readahead.
    next: AtomicU64,
    /// Bytes per piece; equal to the range size when pieces are off.
    piece: u64,
    /// Set by the first [`ImageSource::will_read`]: the reader plans its
    /// reads, and no range is read ahead for a stream.
    planned: AtomicBool,
}

struct Shared {
    remote: Remote,
    /// How the object is read (ranges, readahead, disk cache).
    opts: RemoteOptions,
    version: Version,
    ranges: Ranges,
    /// The disk cache and this version's key in it, when one is used.
    disk: Option<(Arc<DiskCache>, ObjectKey)>,
    /// When the server stopped answering (a fetch timed out or could not
    /// connect); None while it answers. See [`Shared::fetch`].
    failing: std::sync::Mutex<Option<std::time::Instant>>,
}

impl RemoteSource {
    /// Opens the object: one HEAD pins its length and ETag, and fails with
    /// the status (403, 404...) when the object cannot be read; then the
    /// first range (or piece) is fetched, which every reader reads first
    /// (the magic, the superblock), so that a server that cannot serve
    /// ranges (one that ignores `Range`, one that drops the validator) is
    /// an error of the open, with its cause, and not of a later read.
    pub fn open(remote: Remote, opts: &RemoteOptions) -> std::result::Result<Self, RemoteError> {
        opts.validate().map_err(RemoteError::Config)?;
        let version = remote.head()?;
        if version.len == 0 {
            return Err(RemoteError::Config(format!(
                "{}: empty object",
                remote.url()
            )));
        }
        if version.etag.is_none() && version.modified.is_none() {
            log::warn!(
                "{}: the server sends neither ETag nor Last-Modified: a replaced object is \
                 detected only if its length changes",
                remote.url()
            );
        }
        let ranges = match &opts.shared_ranges {
            Some(shared) => Ranges::join(shared).map_err(RemoteError::Config)?,
            None => Ranges::own(opts.cache_bytes as usize, opts.range_size as usize),
        };
        // Pieces when what shares the cache cannot all stay in it: this
        // object, or all the shards of its union together (each may be
        // small, their sum is what a shuffled reader moves over).
        let sharing = opts
            .shared_ranges
            .as_ref()
            .map_or(version.len, |s| s.total_len());
        let piece = if version.len.max(sharing) > opts.cache_bytes {
            piece_size(opts.range_size)
        } else {
            opts.range_size
        };
        let disk = opts.disk_cache.as_ref().and_then(|dc| {
            let key = dc.key(
                remote.url(),
                version.etag.as_deref(),
                version.modified.as_deref(),
                version.len,
                piece_size(opts.range_size),
            );
            if key.is_none() {
                log::warn!(
                    "{}: not cached on disk: without ETag or Last-Modified a replaced object \
                     could not be told from the cached one",
                    remote.url()
                );
            }
            key.map(|k| (dc.clone(), k))
        });
        let src = RemoteSource {
            piece,
            shared: Arc::new(Shared {
                remote,
                opts: opts.clone(),
                version,
                ranges,
                disk,
                failing: Default::default(),
            }),
            next: AtomicU64::new(u64::MAX),
            planned: AtomicBool::new(false),
        };
        // The entry a first read of byte 0 uses (see `entries`), so that
        // read finds it cached. Fetched here, not spawned, so that an
        // error here is the open's error.
        let key = if src.pieces() { PIECE } else { 0 };
        let sh = &src.shared;
        let first = sh
            .remote
            .block_on("", sh.fetch(src.span(key)))
            .map_err(RemoteError::at_open)?;
        if let Lookup::Wait(flight, true) = sh.ranges.lookup(key, false) {
            sh.ranges.finish(key, &flight, Ok(first));
        }
        Ok(src)
    }

    pub fn url(&self) -> &str {
        self.shared.remote.url()
    }

    pub fn version(&self) -> &Version {
        &self.shared.version
    }

    pub fn stats(&self) -> RemoteStats {
        self.shared.remote.counters.snapshot()
    }

    /// The counters, shared, for a caller that outlives its borrow.
    pub fn counters(&self) -> Arc<RemoteCounters> {
        self.shared.remote.counters.clone()
    }

    fn range_size(&self) -> u64 {
        self.shared.opts.range_size
    }

    fn last_range(&self) -> u64 {
        (self.shared.version.len - 1) / self.range_size()
    }

    fn pieces(&self) -> bool {
        self.piece < self.range_size()
    }

    /// The range or piece `key` (see [`PIECE`]), in flight or cached;
    /// starts its fetch when neither.
    fn start(&self, key: u64, ahead: bool) -> Lookup {
        self.fetch_claimed(key, ahead, self.shared.ranges.lookup(key, ahead))
    }

    /// Starts the fetch of `key` when `l` claimed it for this caller.
    fn fetch_claimed(&self, key: u64, ahead: bool, l: Lookup) -> Lookup {
        if let Lookup::Wait(flight, true) = &l {
            let (shared, flight) = (self.shared.clone(), flight.clone());
            let span = self.span(key);
            self.shared.remote.handle().spawn(async move {
                let r = shared.fetch(span).await;
                if r.is_ok() && ahead {
                    shared.remote.counters.ranges_ahead.fetch_add(1, Relaxed);
                }
                shared.ranges.finish(key, &flight, r);
            });
        }
        l
    }

    /// The object's bytes that `key` holds.
    fn span(&self, key: u64) -> std::ops::Range<u64> {
        let (idx, size) = match key & PIECE {
            0 => (key, self.range_size()),
            _ => (key & !PIECE, self.piece),
        };
        let start = idx * size;
        start..(start + size).min(self.len())
    }

    /// Cache entries to read `off..end` (within range `idx`) from: the
    /// range, or with pieces on and `whole` false, the pieces it touches
    /// unless the range is cached or on its way. With each, where its bytes
    /// start in the object.
    fn entries(
        &self,
        idx: u64,
        off: u64,
        end: u64,
        whole: bool,
        ahead: bool,
    ) -> Vec<(u64, Lookup)> {
        let rs = self.range_size();
        if whole || !self.pieces() || self.shared.ranges.has(idx) {
            return vec![(idx * rs, self.start(idx, ahead))];
        }
        let ps = self.piece;
        let (a, b) = (off.max(idx * rs), end.min((idx + 1) * rs));
        (a / ps..=(b - 1) / ps)
            .map(|p| (p * ps, self.start(PIECE | p, ahead)))
            .collect()
    }

    /// Starts readahead of the ranges after `idx` when a reader moved from
    /// one range to the next (or, without pieces, stayed on one).
    fn follow(&self, first: u64, last: u64) {
        let prev = self.next.swap(last + 1, Relaxed);
        let n = self.shared.opts.readahead as u64;
        let moving = prev == first || (prev == first + 1 && !self.pieces());
        if n == 0 || !moving || self.planned.load(Relaxed) {
            return;
        }
        for idx in last + 1..=(last + n).min(self.last_range()) {
            if let Lookup::Skip = self.start(idx, true) {
                break;
            }
        }
    }
}

impl Shared {
    /// The bytes of `span` (a range or a piece: whole aligned disk-cache
    /// chunks): from the disk cache when it has every chunk, else the span
    /// from the first missing chunk to the last is fetched and its chunks
    /// are stored. Without a disk cache, [`Shared::fetch_net`].
    async fn fetch(&self, span: std::ops::Range<u64>) -> std::result::Result<Bytes, RemoteError> {
        let Some((dc, key)) = &self.disk else {
            return self.fetch_net(span).await;
        };
        let cs = key.chunk_size();
        let (c0, c1) = (span.start / cs, (span.end - 1) / cs);
        let mut parts: Vec<Option<Vec<u8>>> = (c0..=c1).map(|i| dc.get(key, i)).collect();
        let first = parts.iter().position(Option::is_none);
        let last = parts.iter().rposition(Option::is_none);
        // Chunks from disk outside the span fetched: what the disk saved.
        let (a, b) = (first.unwrap_or(parts.len()), last.unwrap_or(0));
        let from_disk: u64 = parts
            .iter()
            .enumerate()
            .filter(|(i, _)| *i < a || *i > b)
            .flat_map(|(_, p)| p.as_ref().map(|p| p.len() as u64))
            .sum();
        if let (Some(a), Some(b)) = (first, last) {
            let (m0, m1) = (c0 + a as u64, c0 + b as u64);
            let sub = (m0 * cs).max(span.start)..((m1 + 1) * cs).min(span.end);
            let got = self.fetch_net(sub.clone()).await?;
            for i in m0..=m1 {
                let at = (i * cs - sub.start) as usize;
                let chunk = &got[at..(at + cs as usize).min(got.len())];
                let slot = &mut parts[(i - c0) as usize];
                if slot.is_none() {
                    dc.put(key, i, chunk);
                    *slot = Some(chunk.to_vec());
                }
            }
        }
        self.remote
            .counters
            .disk_bytes
            .fetch_add(from_disk, Relaxed);
        let mut out = Vec::with_capacity((span.end - span.start) as usize);
        for p in parts {
            out.extend_from_slice(&p.expect("every chunk read or fetched"));
        }
        Ok(Bytes::from(out))
    }

    /// One range GET with `If-Match`, its answer checked against the pin.
    /// Retries are object_store's; the whole fetch is cut at the timeout.
    ///
    /// While the server is failing, a fetch gets one attempt's time instead
    /// of the whole timeout: one `read()` makes several FUSE requests (the
    /// kernel retries a failed readahead page by page, an `open` looks up
    /// and reads), and each waiting the full timeout would multiply it. The
    /// first answer ends the failing state, so the mount recovers at once.
    async fn fetch_net(
        &self,
        span: std::ops::Range<u64>,
    ) -> std::result::Result<Bytes, RemoteError> {
        let failing_since = *self.failing.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.fetch_within(span, failing_since).await;
        let mut f = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match &r {
            Ok(_) => *f = None,
            Err(
                RemoteError::Timeout { .. }
                | RemoteError::Transport { .. }
                | RemoteError::Unreachable { .. },
            ) => {
                f.get_or_insert_with(std::time::Instant::now);
            }
            Err(_) => {}
        }
        r
    }

    async fn fetch_within(
        &self,
        span: std::ops::Range<u64>,
        failing_since: Option<std::time::Instant>,
    ) -> std::result::Result<Bytes, RemoteError> {
        let opts = &self.remote.opts;
        let limit = match failing_since {
            Some(_) => opts.attempt_timeout().min(opts.timeout),
            None => opts.timeout,
        };
        let r = self.remote.get_range(&self.version, span, limit).await;
        match (r, failing_since) {
            // Said when the fetch gives up, not when it started: a server
            // that just began failing has failed for the whole attempt by
            // now.
            (
                Err(RemoteError::Timeout {
                    url,
                    what,
                    secs,
                    cause,
                    extra,
                }),
                Some(t),
            ) => Err(RemoteError::Timeout {
                url,
                what,
                secs,
                cause,
                extra: format!(
                    "{extra} (the server has not answered for {} s)",
                    t.elapsed().as_secs()
                ),
            }),
            (r, _) => r,
        }
    }
}

impl ImageSource for RemoteSource {
    fn len(&self) -> u64 {
        self.shared.version.len
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        range_check(self.len(), off, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        let rs = self.range_size();
        let end = off + buf.len() as u64;
        let (first, last) = (off / rs, (end - 1) / rs);
        // A reader that crossed into this range from the one before is
        // moving through the object: whole ranges (see the type's doc).
        let whole = self.next.load(Relaxed) == first;
        // Every fetch first, then the waits: the ranges come in parallel.
        let looked: Vec<(u64, Lookup)> = (first..=last)
            .flat_map(|i| self.entries(i, off, end, whole, false))
            .collect();
        self.follow(first, last);
        let timeout = self.shared.remote.opts.timeout;
        for (r0, l) in looked {
            let data = match l {
                Lookup::Ready(b) => b,
                // Not logged here: the caller says it once (the FUSE
                // edge logs what it answers EIO for, the CLI prints it).
                Lookup::Wait(f, _) => wait(&f, timeout, self.url()).map_err(|e| {
                    e.during(format!("read of {} bytes at offset {off}", buf.len()))
                })?,
                Lookup::Skip => unreachable!("demand lookups are never skipped"),
            };
            // The part of this range or piece that the read covers.
            let from = off.max(r0);
            let to = (off + buf.len() as u64).min(r0 + data.len() as u64);
            buf[(from - off) as usize..(to - off) as usize]
                .copy_from_slice(&data[(from - r0) as usize..(to - r0) as usize]);
        }
        Ok(())
    }

    fn will_need(&self, off: u64, len: usize) {
        if len == 0 || off >= self.len() {
            return;
        }
        let rs = self.range_size();
        let end = (off + len as u64).min(self.len());
        // A short hint names the block about to be read; a long one was
        // widened along a sequential stream.
        let whole = len as u64 > STREAM_HINT;
        for idx in off / rs..=(end - 1) / rs {
            let started = self.entries(idx, off, end, whole, true);
            if started.iter().any(|(_, l)| matches!(l, Lookup::Skip)) {
                break;
            }
        }
    }

    /// Whole ranges, as readahead: the reader said it will read all of
    /// the span, so a range serves it with one request where pieces would
    /// take many, whatever the object's size against the cache.
    fn will_read(&self, off: u64, len: usize) {
        self.planned.store(true, Relaxed);
        if len == 0 || off >= self.len() {
            return;
        }
        let rs = self.range_size();
        let end = (off + len as u64).min(self.len());
        for idx in off / rs..=(end - 1) / rs {
            let claimed = self.shared.ranges.lookup_planned(idx);
            if let Lookup::Skip = self.fetch_claimed(idx, true, claimed) {
                break;
            }
        }
    }
}

/// Waits for a flight; the runtime cuts each fetch at `timeout`, so this
/// limit (a little longer) only guards against a runtime that stopped.
fn wait(f: &Flight, timeout: Duration, url: &str) -> std::result::Result<Bytes, RemoteError> {
    f.wait(timeout + Duration::from_secs(5)).unwrap_or_else(|| {
        Err(RemoteError::Timeout {
            url: url.into(),
            what: "waiting for a fetch".into(),
            secs: timeout.as_secs(),
            cause: None,
            extra: String::new(),
        })
    })
}
