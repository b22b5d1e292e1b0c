//! A node-local disk cache of fetched object bytes (`--disk-cache DIR`,
//! `--disk-cache-size SIZE`), shared by every packfs process on the node.
//!
//! # Why
//! The in-memory range cache ([`super::ranges`]) lives as long as one
//! process and is sized to its memory; an image larger than it is fetched
//! again on every shuffled epoch, and several jobs or DataLoader workers on
//! one node each fetch their own copy. A local SSD (or a large `/tmp`)
//! holds far more, survives restarts, and can be shared.
//!
//! # Layout
//! Under `DIR/packfs-cache-v1/`:
//! - `objects/<id>/<chunk>`: one file per *chunk* of one object version.
//!   `<id>` is a 128-bit hash of the object's identity (URL, ETag or
//!   Last-Modified, length, chunk size), so a replaced object (new ETag)
//!   has a new directory and its old chunks are never looked up again;
//!   they age out by LRU. `<chunk>` is the chunk index in hex.
//! - `tmp/`: chunks being written (temporary file, then `rename` into
//!   place: readers see a whole file or none).
//! - `usage`: an 8-byte counter of the bytes cached, read and rewritten
//!   under `flock` by every process (the approximate total that decides
//!   when to evict; see `Usage`).
//! - `evict.lock`: `flock`ed while one process evicts, so two do not scan
//!   at once. Only eviction takes it; reads and writes never wait on it.
//!
//! # Chunks
//! The chunk size is the remote source's piece size (1/16 range, at least
//! 64 KiB): every fetch of the source, a whole range or a piece, is a run
//! of whole aligned chunks (the last chunk of the object may be short), so
//! a fetch is served from disk exactly when all its chunks are there, and
//! otherwise only the span from the first missing chunk to the last is
//! fetched. Each file starts with a header (magic, chunk index, data
//! length, identity) and a CRC-32 of header and data: a file that is
//! truncated, has flipped bytes, or belongs to another object (a hash
//! collision) fails the check, is deleted and fetched again; it is never
//! served.
//!
//! # LRU across processes
//! A file's mtime is its last use: a hit that finds it older than
//! [`TOUCH_AFTER`] sets it to now. When the usage counter would pass the
//! budget, the evicting process lists the files (their number is bounded
//! by budget / chunk: that list is the only memory that grows with the
//! cache, and only during a pass), recounts the real total, and deletes the
//! least recently used down to [`LOW_WATER`] of the budget. The margin
//! absorbs the chunks other processes write meanwhile, so the cache stays
//! within its size as long as fewer than a quarter of the budget is in
//! flight at once. No in-memory index: a process knows nothing about the
//! cache beyond the counter, and holds nothing between reads.
//!
//! # Failures
//! A cache that cannot be written (a full disk, a read-only directory)
//! turns writing off for the process with one warning; reads go on, from
//! the network and from whatever is cached. A cache is never a reason for a
//! read to fail.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"PFSDC001";
/// Bytes of the header before the identity: magic, chunk index (u64),
/// data length (u32), identity length (u32), CRC-32 (u32).
const HEADER: usize = 8 + 8 + 4 + 4 + 4;
/// A hit refreshes the file's mtime (its LRU position) only when older than
/// this: one `futimens` per chunk per minute at most.
pub const TOUCH_AFTER: Duration = Duration::from_secs(60);
/// Eviction goes down to this fraction of the budget (numerator of /8).
pub const LOW_WATER: u64 = 6;
/// Temporary files older than this are left by a process that died.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// What the cache did, for `--stats` and `bench` (all relaxed counters).
#[derive(Debug, Default)]
pub struct DiskCounters {
    /// Chunks read from disk and verified.
    pub hits: AtomicU64,
    pub hit_bytes: AtomicU64,
    /// Chunks looked up and not there.
    pub misses: AtomicU64,
    /// Files that failed their check (deleted, fetched again).
    pub corrupt: AtomicU64,
    pub written_bytes: AtomicU64,
    pub evicted_bytes: AtomicU64,
}

/// One cache directory and its budget, shared by the sources of a process.
pub struct DiskCache {
    root: PathBuf,
    budget: u64,
    usage: Usage,
    /// Set after the first write failure: no more writes (one warning).
    write_off: AtomicBool,
    next_tmp: AtomicU64,
    pub counters: DiskCounters,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("root", &self.root)
            .field("budget", &self.budget)
            .finish()
    }
}

/// The identity of one object version, and where its chunks go.
#[derive(Clone, Debug)]
pub struct ObjectKey {
    identity: Vec<u8>,
    dir: PathBuf,
    chunk: u64,
    len: u64,
}

impl ObjectKey {
    pub fn chunk_size(&self) -> u64 {
        self.chunk
    }
}

/// 128 bits of FNV-1a (two 64-bit lanes with different offsets): a stable
/// name for an identity. Collisions cannot serve wrong bytes (each file
/// holds its full identity, checked on read); they would only cost misses.
fn hash128(b: &[u8]) -> String {
    let lane = |mut h: u64| {
        for &x in b {
            h ^= x as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    format!(
        "{:016x}{:016x}",
        lane(0xcbf2_9ce4_8422_2325),
        lane(0x6c62_272e_07bb_0142)
    )
}

/// The byte counter every process using the directory shares: 8 bytes at
/// the start of the file `usage`, changed under an exclusive `flock` (and
/// this process's mutex, since threads share the lock). Not a shared
/// memory map: a mapped file that something truncates (a user emptying the
/// cache by hand) is SIGBUS at the next access, which would end every mount
/// daemon using the cache. A file shorter than 8 bytes reads as 0.
struct Usage {
    f: std::sync::Mutex<fs::File>,
}

impl Usage {
    fn read(f: &fs::File) -> u64 {
        let mut b = [0u8; 8];
        match std::os::unix::fs::FileExt::read_exact_at(f, &mut b, 0) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => 0,
        }
    }

    /// The counter now.
    fn load(&self) -> u64 {
        Self::read(&self.f.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Sets the counter to `change(old)`; returns the new value.
    fn update(&self, change: impl FnOnce(u64) -> u64) -> u64 {
        use std::os::fd::AsRawFd;
        let f = self.f.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let locked = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0;
        let new = change(Self::read(&f));
        // A failed write leaves the counter behind: it is approximate, and
        // eviction's scan sets it right.
        let _ = std::os::unix::fs::FileExt::write_all_at(&*f, &new.to_le_bytes(), 0);
        if locked {
            // SAFETY: as above.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        }
        new
    }
}

impl DiskCache {
    /// Opens (creating) the cache under `dir` with a budget of `budget`
    /// bytes; the directory must be writable.
    pub fn open(dir: &Path, budget: u64) -> io::Result<Self> {
        // Absolute: a mount's daemon leaves the caller's directory once it
        // is ready.
        let dir = std::path::absolute(dir)?;
        // DIR itself is made if missing, as `mkdir DIR` would; not a chain
        // of parents: a mistyped path (as root, anywhere) must fail, not
        // create `/scratc/...` without a word.
        if let Err(e) = fs::create_dir(&dir) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        let root = dir.join("packfs-cache-v1");
        fs::create_dir_all(root.join("objects"))?;
        fs::create_dir_all(root.join("tmp"))?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(root.join("usage"))?;
        let usage = Usage {
            f: std::sync::Mutex::new(f),
        };
        let c = DiskCache {
            root,
            budget,
            usage,
            write_off: AtomicBool::new(false),
            next_tmp: AtomicU64::new(0),
            counters: DiskCounters::default(),
        };
        if c.used() > budget {
            c.evict(0);
        }
        Ok(c)
    }

    /// The default budget for a cache under `dir`: half the space free on
    /// its filesystem now (at least 64 MiB), so the cache leaves room for
    /// the jobs writing beside it.
    pub fn default_budget(dir: &Path) -> u64 {
        let mut probe = dir.to_path_buf();
        while !probe.exists() {
            if !probe.pop() {
                break;
            }
        }
        let free =
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(probe.as_os_str()))
                .ok()
                .and_then(|c| {
                    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
                    // SAFETY: a NUL-terminated path and a statvfs to fill.
                    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0)
                        .then(|| st.f_bavail as u64 * st.f_frsize as u64)
                })
                .unwrap_or(0);
        (free / 2).max(64 << 20)
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes cached, by the shared counter (approximate: see the module doc).
    pub fn used(&self) -> u64 {
        self.usage.load()
    }

    /// Bytes the cache's files really hold now (a scan).
    pub fn scan_bytes(&self) -> u64 {
        self.files().iter().map(|f| f.1).sum()
    }

    /// The key of one object version: None without a validator (a replaced
    /// object could not be told from the cached one).
    pub fn key(
        &self,
        url: &str,
        etag: Option<&str>,
        modified: Option<&str>,
        len: u64,
        chunk: u64,
    ) -> Option<ObjectKey> {
        let validator = match (etag, modified) {
            (Some(e), _) => format!("etag {e}"),
            (None, Some(m)) => format!("modified {m}"),
            (None, None) => return None,
        };
        let identity = format!("{url}\n{validator}\nlen {len}\nchunk {chunk}").into_bytes();
        let dir = self.root.join("objects").join(hash128(&identity));
        Some(ObjectKey {
            identity,
            dir,
            chunk,
            len,
        })
    }

    fn chunk_path(&self, k: &ObjectKey, idx: u64) -> PathBuf {
        k.dir.join(format!("{idx:x}"))
    }

    /// The data length chunk `idx` of `k` must have.
    fn chunk_len(k: &ObjectKey, idx: u64) -> u64 {
        let start = idx * k.chunk;
        (start + k.chunk).min(k.len).saturating_sub(start)
    }

    /// Chunk `idx` of `k`, read and verified; None when absent or damaged
    /// (a damaged file is deleted so the next write replaces it).
    pub fn get(&self, k: &ObjectKey, idx: u64) -> Option<Vec<u8>> {
        let p = self.chunk_path(k, idx);
        let want = Self::chunk_len(k, idx);
        let found = (|| -> io::Result<Option<Vec<u8>>> {
            let mut f = match File::open(&p) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            let meta = f.metadata()?;
            let total = HEADER as u64 + k.identity.len() as u64 + want;
            let mut buf = Vec::with_capacity(total as usize);
            // One byte more than a good file has: a longer file is damaged too.
            (&mut f).take(total + 1).read_to_end(&mut buf)?;
            if !valid(&buf, k, idx, want) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "check failed"));
            }
            let old = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age > TOUCH_AFTER);
            if old {
                let _ = f.set_modified(SystemTime::now());
            }
            buf.drain(..HEADER + k.identity.len());
            Ok(Some(buf))
        })();
        match found {
            Ok(Some(data)) => {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .hit_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                Some(data)
            }
            Ok(None) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    log::warn!("{}: damaged cache file, fetching again", p.display());
                    self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                    if let Ok(m) = fs::metadata(&p) {
                        if fs::remove_file(&p).is_ok() {
                            self.sub(m.len());
                        }
                    }
                }
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Stores chunk `idx` of `k` (its whole data), unless writing is off.
    /// Evicts first when the counter says the budget would be passed.
    pub fn put(&self, k: &ObjectKey, idx: u64, data: &[u8]) {
        if self.write_off.load(Ordering::Relaxed) || data.len() as u64 != Self::chunk_len(k, idx) {
            return;
        }
        let size = (HEADER + k.identity.len() + data.len()) as u64;
        if size > self.budget {
            return;
        }
        if self.used() + size > self.budget {
            self.evict(size);
        }
        match self.write(k, idx, data) {
            Ok(()) => {
                let now = self.usage.update(|v| v.saturating_add(size));
                self.counters
                    .written_bytes
                    .fetch_add(size, Ordering::Relaxed);
                // The check above and this add are not one step: another
                // process (or thread) may have written in between, so the
                // add that takes the counter past the budget evicts.
                if now > self.budget {
                    self.evict(0);
                }
            }
            Err(e) => {
                if !self.write_off.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "disk cache {}: {e}; caching to disk is off for this process",
                        self.root.display()
                    );
                }
            }
        }
    }

    fn write(&self, k: &ObjectKey, idx: u64, data: &[u8]) -> io::Result<()> {
        let tmp = self.root.join("tmp").join(format!(
            "{}-{}",
            std::process::id(),
            self.next_tmp.fetch_add(1, Ordering::Relaxed)
        ));
        let r = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&encode(k, idx, data))?;
            drop(f);
            let dst = self.chunk_path(k, idx);
            match fs::rename(&tmp, &dst) {
                // The object's directory is new, or an eviction removed it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir_all(&k.dir)?;
                    fs::rename(&tmp, &dst)
                }
                r => r,
            }
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    fn sub(&self, n: u64) {
        self.usage.update(|v| v.saturating_sub(n));
    }

    /// Every chunk file: (mtime, size, path).
    fn files(&self) -> Vec<(SystemTime, u64, PathBuf)> {
        let mut out = Vec::new();
        let Ok(dirs) = fs::read_dir(self.root.join("objects")) else {
            return out;
        };
        for d in dirs.flatten() {
            let Ok(files) = fs::read_dir(d.path()) else {
                continue;
            };
            for f in files.flatten() {
                if let Ok(m) = f.metadata() {
                    if m.is_file() {
                        let t = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                        out.push((t, m.len(), f.path()));
                    }
                }
            }
        }
        out
    }

    /// One eviction pass (under `evict.lock`): recounts the files and
    /// deletes the least recently used until they and `incoming` bytes fit
    /// in [`LOW_WATER`]/8 of the budget; sets the shared counter to what is
    /// left plus what was written meanwhile. Removes temporary files of dead processes and empty object
    /// directories on the way.
    fn evict(&self, incoming: u64) {
        let Ok(lock) = File::create(self.root.join("evict.lock")) else {
            return;
        };
        // SAFETY: flock on a descriptor we own; released when `lock` closes.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
            return;
        }
        // Another process may have just evicted: nothing to do then.
        if self.used() + incoming <= self.budget {
            return;
        }
        // Chunks written while the files are listed are added to the
        // counter by their writers; those adds are kept below (`since`), so
        // the counter never drops under what the files hold (a chunk listed
        // and added meanwhile counts twice, which only evicts early).
        let before = self.used();
        let mut files = self.files();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let target = (self.budget / 8 * LOW_WATER).saturating_sub(incoming);
        files.sort_unstable_by_key(|f| f.0);
        let mut evicted = 0;
        for (_, size, path) in &files {
            if total <= target {
                break;
            }
            if fs::remove_file(path).is_ok() {
                total -= size;
                evicted += size;
                if let Some(d) = path.parent() {
                    // Fails unless empty: that is the point.
                    let _ = fs::remove_dir(d);
                }
            }
        }
        self.usage
            .update(|now| total.saturating_add(now.saturating_sub(before)));
        self.counters
            .evicted_bytes
            .fetch_add(evicted, Ordering::Relaxed);
        if let Ok(tmps) = fs::read_dir(self.root.join("tmp")) {
            for t in tmps.flatten() {
                let old = t
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| m.elapsed().ok())
                    .is_some_and(|a| a > STALE_TMP);
                if old {
                    let _ = fs::remove_file(t.path());
                }
            }
        }
    }
}

fn crc(k: &ObjectKey, head: &[u8], data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(&k.identity);
    h.update(data);
    h.finalize()
}

/// A chunk file's bytes: header, identity, data.
fn encode(k: &ObjectKey, idx: u64, data: &[u8]) -> Vec<u8> {
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&idx.to_le_bytes());
    head.extend_from_slice(&(data.len() as u32).to_le_bytes());
    head.extend_from_slice(&(k.identity.len() as u32).to_le_bytes());
    let sum = crc(k, &head, data);
    let mut out = Vec::with_capacity(HEADER + k.identity.len() + data.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&k.identity);
    out.extend_from_slice(data);
    out
}

/// Whether `buf` is the whole, intact file of chunk `idx` of `k`.
fn valid(buf: &[u8], k: &ObjectKey, idx: u64, want: u64) -> bool {
    let id = k.identity.len();
    if buf.len() as u64 != (HEADER + id) as u64 + want || &buf[..8] != MAGIC {
        return false;
    }
    let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().expect("4 bytes"));
    u64_at(8) == idx
        && u32_at(16) as u64 == want
        && u32_at(20) as usize == id
        && &buf[HEADER..HEADER + id] == k.identity.as_slice()
        && u32_at(24) == crc(k, &buf[..24], &buf[HEADER + id..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(idx: u64, n: usize) -> Vec<u8> {
        (0..n).map(|i| (i as u64 * 7 + idx) as u8).collect()
    }

    #[test]
    fn chunks_round_trip_and_damage_is_never_served() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        let k = c
            .key("s3://b/k", Some("\"e1\""), None, 10_000, 4096)
            .unwrap();
        assert!(c.get(&k, 0).is_none());
        c.put(&k, 0, &data(0, 4096));
        c.put(&k, 2, &data(2, 10_000 - 8192));
        assert_eq!(c.get(&k, 0).unwrap(), data(0, 4096));
        assert_eq!(c.get(&k, 2).unwrap(), data(2, 1808));
        // A short write of a chunk is refused (a chunk is whole or absent).
        c.put(&k, 1, &data(1, 100));
        assert!(c.get(&k, 1).is_none());
        // Flipped byte, truncation, extension: each detected and deleted.
        let p = c.chunk_path(&k, 0);
        let good = fs::read(&p).unwrap();
        for bad in [
            {
                let mut b = good.clone();
                let n = b.len();
                b[n - 10] ^= 0x40;
                b
            },
            good[..good.len() - 1].to_vec(),
            [good.clone(), vec![0]].concat(),
        ] {
            fs::write(&p, &bad).unwrap();
            assert!(c.get(&k, 0).is_none());
            assert!(!p.exists());
        }
        assert_eq!(c.counters.corrupt.load(Ordering::Relaxed), 3);
        // Another version of the object has its own chunks.
        let k2 = c
            .key("s3://b/k", Some("\"e2\""), None, 10_000, 4096)
            .unwrap();
        assert!(c.get(&k2, 2).is_none());
        assert!(c.key("s3://b/k", None, None, 10, 4096).is_none());
        // A file of another object under this name fails its check.
        c.put(&k2, 2, &data(9, 1808));
        fs::copy(c.chunk_path(&k2, 2), c.chunk_path(&k, 2)).unwrap();
        assert!(c.get(&k, 2).is_none());
    }

    /// Found by a new user's review: `--disk-cache /typo/a/b` made every
    /// missing parent (as root, anywhere). DIR itself is still made.
    #[test]
    fn the_cache_directory_is_made_but_not_its_missing_parents() {
        let t = tempfile::tempdir().unwrap();
        let e = DiskCache::open(&t.path().join("no/such/cache"), 1 << 20)
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!t.path().join("no").exists());
        DiskCache::open(&t.path().join("cache"), 1 << 20).unwrap();
        assert!(t.path().join("cache/packfs-cache-v1").is_dir());
        DiskCache::open(&t.path().join("cache"), 1 << 20).unwrap();
    }

    /// Bug: the usage counter was a shared memory map of its file, so
    /// emptying that file by hand (`: > usage`) made the next access a
    /// SIGBUS, which ended every mount daemon using the cache. It is read
    /// and written with pread/pwrite now; a short file counts as 0.
    #[test]
    fn an_emptied_usage_file_is_zero_not_a_crash() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        let k = c.key("http://h/x", None, Some("m"), 1 << 20, 4096).unwrap();
        c.put(&k, 0, &data(0, 4096));
        assert!(c.used() > 4096);
        fs::File::create(t.path().join("packfs-cache-v1").join("usage")).unwrap();
        assert_eq!(c.used(), 0);
        c.put(&k, 1, &data(1, 4096));
        assert!(c.used() > 4096 && c.used() < 8192, "{}", c.used());
        assert_eq!(c.get(&k, 0).unwrap(), data(0, 4096));
        // A second handle on the directory (another process) sees the sum.
        let d = DiskCache::open(t.path(), 1 << 20).unwrap();
        assert_eq!(d.used(), c.used());
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_go_first() {
        let t = tempfile::tempdir().unwrap();
        let budget = 64 << 10;
        let c = DiskCache::open(t.path(), budget).unwrap();
        let k = c.key("http://h/x", None, Some("m"), 1 << 30, 4096).unwrap();
        for i in 0..4 {
            c.put(&k, i, &data(i, 4096));
        }
        // Chunk 0 used long ago, 1..3 recently.
        let old = SystemTime::now() - Duration::from_secs(3600);
        File::open(c.chunk_path(&k, 0))
            .unwrap()
            .set_modified(old)
            .unwrap();
        for i in 4..40 {
            c.put(&k, i, &data(i, 4096));
            assert!(c.scan_bytes() <= budget, "after chunk {i}");
            assert!(c.used() <= budget);
        }
        assert!(c.get(&k, 0).is_none());
        assert_eq!(c.get(&k, 39).unwrap(), data(39, 4096));
        // Kept across a reopen: the counter and the files.
        let used = c.used();
        drop(c);
        let c = DiskCache::open(t.path(), budget).unwrap();
        assert_eq!(c.used(), used);
        assert_eq!(c.get(&k, 39).unwrap(), data(39, 4096));
    }

    /// Regression: two processes writing at once passed the budget
    /// (`tests/suite/disk_cache.rs` saw 2,150,066 bytes of 2 MiB): each
    /// found room before the other's add, and an eviction's recount could
    /// drop an add made while it listed the files.
    #[test]
    fn concurrent_writers_of_two_processes_stay_within_the_budget() {
        let t = tempfile::tempdir().unwrap();
        let budget = 64 << 10;
        // Two opens of one directory share the counter as two processes do.
        let caches = [
            DiskCache::open(t.path(), budget).unwrap(),
            DiskCache::open(t.path(), budget).unwrap(),
        ];
        for round in 0..40u64 {
            std::thread::scope(|s| {
                for (n, c) in caches.iter().enumerate() {
                    for w in 0..4u64 {
                        s.spawn(move || {
                            let url = format!("http://h/{round}/{n}/{w}");
                            // Chunks of a quarter of the budget: the
                            // eviction's margin is one of them.
                            let k = c.key(&url, None, Some("m"), 1 << 30, 16384).unwrap();
                            for i in 0..8 {
                                c.put(&k, i, &data(i, 16384));
                            }
                        });
                    }
                }
            });
            let (real, counted) = (caches[0].scan_bytes(), caches[0].used());
            assert!(
                real <= budget,
                "round {round}: {real} bytes cached of {budget}"
            );
            assert!(
                counted >= real,
                "round {round}: counter {counted} < files {real}"
            );
        }
    }

    #[test]
    fn a_cache_that_cannot_be_written_turns_writing_off_and_still_reads() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        let k = c.key("s3://b/k", Some("e"), None, 8192, 4096).unwrap();
        c.put(&k, 0, &data(0, 4096));
        // The temporary directory gone: every write fails.
        fs::remove_dir_all(c.root.join("tmp")).unwrap();
        c.put(&k, 1, &data(1, 4096));
        assert!(c.write_off.load(Ordering::Relaxed));
        assert!(c.get(&k, 1).is_none());
        assert_eq!(c.get(&k, 0).unwrap(), data(0, 4096));
    }
}
