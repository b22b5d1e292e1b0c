//! The image's hash record (`packfs_format::squashfs::hashes`), checked by
//! [`super::blocks::Blocks`] on every piece it reads from the source,
//! before the piece is decoded or cached: bytes that fail are never cached
//! or served.
//!
//! Memory, whatever the image's size: opening reads the trailer and the
//! page index (16 bytes a page of 1024 entries, held while the image is
//! open); a page of entries is read when a piece it lists is first
//! checked, checked against its hash in the index, and kept in a cache of
//! at most [`PAGE_CACHE_BYTES`]. A version 1 record, which has no pages,
//! is loaded whole at open, as the build that wrote it did. Which pieces
//! were checked (what `packfs verify` reads afterwards to cover the pieces
//! no file led to) is tracked only once [`HashRecord::track_checks`] asks
//! for it: a bit an entry.

use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::squashfs::hashes::{
    self, decode_entries, decode_index, record_start, PageRef, Trailer, RECORD_VERSION_1,
};
use packfs_format::squashfs::DEVICE_BLOCK;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The byte budget of each record's cache of decoded pages: 200 pages of
/// 1024 entries, the pieces of some 25 GiB of 128 KiB blocks. Beyond that,
/// a block read from the source whose page was evicted reads its page
/// again (20 KiB, most often from the page cache or the range cache).
pub const PAGE_CACHE_BYTES: usize = 4 << 20;

pub struct HashRecord {
    trailer: Trailer,
    pages: Pages,
    /// One bit an entry, once asked for: checked since then.
    checked: OnceLock<Vec<AtomicU64>>,
    /// Where the entries end and the page index (or the trailer) starts:
    /// the zero padding between them is in no entry.
    pub gap: (u64, u64),
}

enum Pages {
    /// A version 1 record: all its entries, loaded at open.
    Whole(Arc<Page>),
    /// A version 2 record: its page index, its pages read on demand.
    Lazy {
        index: Vec<PageRef>,
        bytes_used: u64,
        cache: PageCache,
    },
}

/// The decoded entries of one page.
struct Page {
    /// The record's number of the page's first entry.
    first: u64,
    offsets: Vec<u64>,
    lens: Vec<u32>,
    hashes: Vec<u64>,
}

impl Page {
    fn new(first: u64, entries: Vec<hashes::HashEntry>) -> Self {
        Page {
            first,
            offsets: entries.iter().map(|e| e.offset).collect(),
            lens: entries.iter().map(|e| e.len).collect(),
            hashes: entries.iter().map(|e| e.hash).collect(),
        }
    }

    fn bytes(&self) -> usize {
        self.offsets.len() * 20 + std::mem::size_of::<Page>()
    }
}

/// Decoded pages by number, least recently used evicted first, within a
/// byte budget. The lock is held for a lookup or an insertion only, never
/// across a read: two threads missing the same page may both read it (the
/// second insertion keeps the first's).
struct PageCache {
    budget: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    pages: HashMap<u64, (Arc<Page>, u64)>,
    tick: u64,
    bytes: usize,
}

impl PageCache {
    fn new(budget: usize) -> Self {
        PageCache {
            budget,
            inner: Mutex::new(CacheInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // The map stays consistent whatever a panicking holder did (each
        // change is one call), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, p: u64) -> Option<Arc<Page>> {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        c.pages.get_mut(&p).map(|(page, used)| {
            *used = tick;
            page.clone()
        })
    }

    /// Keeps `page` as page `p` (or the copy another thread kept first),
    /// evicting the least recently used until it fits; returns the kept one.
    fn insert(&self, p: u64, page: Arc<Page>) -> Arc<Page> {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        if let Some((kept, used)) = c.pages.get_mut(&p) {
            *used = tick;
            return kept.clone();
        }
        let size = page.bytes();
        while c.bytes + size > self.budget {
            let Some((&old, _)) = c.pages.iter().min_by_key(|(_, (_, used))| *used) else {
                break;
            };
            if let Some((gone, _)) = c.pages.remove(&old) {
                c.bytes -= gone.bytes();
            }
        }
        // A page larger than the budget is still kept: the one being used.
        c.bytes += size;
        c.pages.insert(p, (page.clone(), tick));
        page
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let c = self.lock();
        (c.pages.len(), c.bytes)
    }
}

/// What [`HashRecord::find`] says of an image's end.
pub enum Found {
    /// No bytes after the filesystem's padding: an image without a record
    /// (mksquashfs's, `pack --no-checksums`).
    None,
    /// Bytes after the padding that end in no record trailer: not packfs's
    /// record (another tool's appendix), or one whose trailer is damaged.
    Unknown(u64),
    Record(HashRecord),
}

fn damaged(m: impl std::fmt::Display) -> FsError {
    FsError::Damaged(format!("hash record: {m}"))
}

impl HashRecord {
    /// Finds the record of an image whose filesystem ends at `bytes_used`
    /// and reads its trailer and page index (a version 1 record: all its
    /// entries). A trailer that is there but damaged, or an index (a
    /// version 1 record) that does not match its trailer's hash, is
    /// [`FsError::Damaged`].
    pub fn find(src: &dyn ImageSource, bytes_used: u64) -> Result<Found> {
        Self::find_with(src, bytes_used, PAGE_CACHE_BYTES)
    }

    /// [`HashRecord::find`] with a page cache of `budget` bytes.
    pub fn find_with(src: &dyn ImageSource, bytes_used: u64, budget: usize) -> Result<Found> {
        let len = src.len();
        let start = record_start(bytes_used);
        if len <= start {
            return Ok(Found::None);
        }
        if len < start + Trailer::SIZE as u64 {
            return Ok(Found::Unknown(len - start));
        }
        // The image's last 4 KiB in one read: the trailer and, but for a
        // record of over 250 pages, the whole index (one request, not two,
        // on a remote image).
        let tail_len = (len - start).min(DEVICE_BLOCK);
        let tail = src.read_vec(len - tail_len, tail_len as usize)?;
        let mut t = [0u8; Trailer::SIZE];
        t.copy_from_slice(&tail[tail.len() - Trailer::SIZE..]);
        if !Trailer::has_magic(&t) {
            crate::buffers::recycle(tail);
            return Ok(Found::Unknown(len - start));
        }
        let r = Self::load(src, bytes_used, budget, &tail, &t);
        crate::buffers::recycle(tail);
        r.map(Found::Record)
    }

    fn load(
        src: &dyn ImageSource,
        bytes_used: u64,
        budget: usize,
        tail: &[u8],
        t: &[u8; Trailer::SIZE],
    ) -> Result<HashRecord> {
        let len = src.len();
        let start = record_start(bytes_used);
        let t = Trailer::decode(t).map_err(damaged)?;
        let index_len = t.index_len();
        let index_at = t
            .record_start
            .checked_add(t.record_len)
            .filter(|&end| {
                end.checked_add(index_len)
                    .is_some_and(|x| x <= len - Trailer::SIZE as u64)
            })
            .map(|_| len - Trailer::SIZE as u64 - index_len);
        let Some(index_at) = index_at.filter(|_| t.record_start == start) else {
            return Err(damaged(format!(
                "its trailer places it at {} ({} bytes, {index_len} of index), not after the filesystem's end at {start} in a file of {len} bytes",
                t.record_start, t.record_len
            )));
        };
        let gap = (t.record_start + t.record_len, index_at);
        if t.version == RECORD_VERSION_1 {
            let raw = src.read_vec(t.record_start, t.record_len as usize)?;
            let entries = if hashes::hash(&raw) != t.hash {
                Err(damaged("its bytes do not match the hash in its trailer"))
            } else {
                decode_entries(&raw, None, bytes_used).map_err(damaged)
            };
            crate::buffers::recycle(raw);
            return Ok(HashRecord {
                trailer: t,
                pages: Pages::Whole(Arc::new(Page::new(0, entries?))),
                checked: OnceLock::new(),
                gap,
            });
        }
        let in_tail = (tail.len() - Trailer::SIZE) as u64;
        let read;
        let index_bytes = if index_len <= in_tail {
            let end = tail.len() - Trailer::SIZE;
            &tail[end - index_len as usize..end]
        } else {
            read = src.read_vec(index_at, index_len as usize)?;
            &read[..]
        };
        if hashes::hash(index_bytes) != t.hash {
            return Err(damaged(
                "its page index does not match the hash in its trailer",
            ));
        }
        let index = decode_index(index_bytes, bytes_used).map_err(damaged)?;
        Ok(HashRecord {
            trailer: t,
            pages: Pages::Lazy {
                index,
                bytes_used,
                cache: PageCache::new(budget),
            },
            checked: OnceLock::new(),
            gap,
        })
    }

    /// Pieces in the record.
    pub fn len(&self) -> u64 {
        self.trailer.entries()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record's version (`RECORD_VERSION_1` or `RECORD_VERSION`).
    pub fn version(&self) -> u16 {
        self.trailer.version
    }

    /// Pages of entries (a version 1 record is one).
    pub fn pages(&self) -> u64 {
        self.trailer.pages()
    }

    /// From now on, notes which pieces are checked (for
    /// [`HashRecord::was_checked`]): a bit an entry, allocated here.
    pub fn track_checks(&self) {
        self.checked.get_or_init(|| {
            (0..self.len().div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        });
    }

    /// Whether entry `i` was checked (passed or not) since
    /// [`HashRecord::track_checks`]; false when nothing is tracked.
    pub fn was_checked(&self, i: u64) -> bool {
        self.checked.get().is_some_and(|bits| {
            bits.get((i / 64) as usize)
                .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (i % 64)) != 0)
        })
    }

    /// The pieces page `p` lists: (entry number, offset, length). Reads
    /// the page if it is not cached.
    pub fn page_pieces(&self, src: &dyn ImageSource, p: u64) -> Result<Vec<(u64, u64, u32)>> {
        let page = self.page(src, p)?;
        Ok((0..page.offsets.len())
            .map(|j| (page.first + j as u64, page.offsets[j], page.lens[j]))
            .collect())
    }

    /// Page `p`, from the cache or read, checked and decoded.
    fn page(&self, src: &dyn ImageSource, p: u64) -> Result<Arc<Page>> {
        let (index, bytes_used, cache) = match &self.pages {
            Pages::Whole(page) => return Ok(page.clone()),
            Pages::Lazy {
                index,
                bytes_used,
                cache,
            } => (index, *bytes_used, cache),
        };
        if let Some(page) = cache.get(p) {
            return Ok(page);
        }
        let Some(r) = index.get(p as usize) else {
            return Err(damaged(format!("it has no page {p}")));
        };
        let (pos, n) = self.trailer.page_span(p);
        let raw = src.read_vec(pos, n as usize * hashes::HashEntry::SIZE)?;
        let entries = if hashes::hash(&raw) != r.hash {
            Err(damaged(format!(
                "page {p} ({n} entries at offset {pos}) does not match the hash in its index"
            )))
        } else {
            let end = index
                .get(p as usize + 1)
                .map_or(bytes_used, |q| q.first_offset);
            decode_entries(&raw, Some(r.first_offset), end)
                .map_err(|e| damaged(format!("page {p}: {e}")))
        };
        crate::buffers::recycle(raw);
        let page = Arc::new(Page::new(p * self.trailer.page_entries(), entries?));
        Ok(cache.insert(p, page))
    }

    /// The page that would list a piece at `pos`.
    fn page_of(&self, pos: u64) -> Option<u64> {
        match &self.pages {
            Pages::Whole(_) => Some(0),
            Pages::Lazy { index, .. } => {
                let after = index.partition_point(|r| r.first_offset <= pos);
                after.checked_sub(1).map(|p| p as u64)
            }
        }
    }

    /// Checks the piece at `pos` whose bytes, as read from `src`, are the
    /// concatenation of `parts`; `what` names it for the error ("data
    /// block at offset N"). A piece the record does not list is damage
    /// too: the tables that led to it are wrong. Reads the piece's page
    /// of the record from `src` if it is not cached.
    pub fn check(
        &self,
        src: &dyn ImageSource,
        pos: u64,
        parts: &[&[u8]],
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let not_listed = || {
            FsError::Damaged(format!(
                "{}: the image's hash record lists no piece there (the table that points at it is damaged)",
                what()
            ))
        };
        let Some(p) = self.page_of(pos) else {
            return Err(not_listed());
        };
        // Damage of the record is named with the piece that needed it (the
        // mount's log, verify's report); a failed read is the read's error.
        let page = self.page(src, p).map_err(|e| match e {
            FsError::Damaged(m) => FsError::Damaged(format!("{}: {m}", what())),
            e => e,
        })?;
        let Ok(j) = page.offsets.binary_search(&pos) else {
            return Err(not_listed());
        };
        if let Some(bits) = self.checked.get() {
            // Looked at, whatever the outcome: whoever looked reports a
            // failure. A load first: every read of a block passes here,
            // and a read-modify-write of a word shared by 64 neighbouring
            // blocks would bounce its cache line between the threads
            // serving them, for a bit that is set once.
            let i = page.first + j as u64;
            if let Some(w) = bits.get((i / 64) as usize) {
                let bit = 1 << (i % 64);
                if w.load(Ordering::Relaxed) & bit == 0 {
                    w.fetch_or(bit, Ordering::Relaxed);
                }
            }
        }
        if page.lens[j] as usize != len {
            return Err(FsError::Damaged(format!(
                "{}: read as {len} bytes, but the hash record lists {} (the table that sized it is damaged)",
                what(),
                page.lens[j]
            )));
        }
        if hashes::hash_parts(parts) != page.hashes[j] {
            return Err(FsError::Damaged(format!(
                "{}: its {len} bytes do not match the image's hash record",
                what()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{CountingSource, MemSource};
    use packfs_format::squashfs::hashes::{encode_record, image_len, HashEntry, PageRef};

    const USED: u64 = 5000;

    /// Pieces of 50 bytes from offset 0 to `USED`, their bytes.
    fn pieces() -> (Vec<u8>, Vec<HashEntry>) {
        let fs: Vec<u8> = (0..USED).map(|i| (i * 31 % 251) as u8).collect();
        let entries = (0..USED / 50)
            .map(|i| HashEntry {
                offset: i * 50,
                len: 50,
                hash: hashes::hash(&fs[(i * 50) as usize..(i * 50 + 50) as usize]),
            })
            .collect();
        (fs, entries)
    }

    /// An image of [`pieces`] with a version 2 record in pages of
    /// `2^page_log` entries.
    fn image(page_log: u16) -> Vec<u8> {
        let (mut img, entries) = pieces();
        let r = encode_record(&entries, record_start(USED), page_log);
        let len = image_len(USED, r.entries.len() as u64, r.index.len() as u64);
        img.resize(record_start(USED) as usize, 0);
        img.extend_from_slice(&r.entries);
        img.resize(len as usize - Trailer::SIZE - r.index.len(), 0);
        img.extend_from_slice(&r.index);
        img.extend_from_slice(&r.trailer.encode());
        assert_eq!(img.len() as u64, len);
        img
    }

    /// The same pieces with a version 1 record, as the earlier writer
    /// wrote it.
    fn image_v1() -> Vec<u8> {
        let (mut img, entries) = pieces();
        let mut rec = Vec::new();
        for e in &entries {
            e.encode(&mut rec);
        }
        let len = image_len(USED, rec.len() as u64, 0);
        let t = Trailer::v1(record_start(USED), rec.len() as u64, hashes::hash(&rec));
        img.resize(record_start(USED) as usize, 0);
        img.extend_from_slice(&rec);
        img.resize(len as usize - Trailer::SIZE, 0);
        img.extend_from_slice(&t.encode());
        img
    }

    fn open(img: Vec<u8>, budget: usize) -> (CountingSource<MemSource>, Result<HashRecord>) {
        let src = CountingSource::new(MemSource(img));
        let r = match HashRecord::find_with(&src, USED, budget) {
            Ok(Found::Record(r)) => Ok(r),
            Ok(_) => panic!("no record found"),
            Err(e) => Err(e),
        };
        (src, r)
    }

    fn check(r: &HashRecord, src: &CountingSource<MemSource>, i: u64) -> Result<()> {
        let at = (i * 50) as usize;
        let bytes = src.inner.0[at..at + 50].to_vec();
        r.check(src, i * 50, &[&bytes], &|| format!("piece {i}"))
    }

    fn read(src: &CountingSource<MemSource>) -> u64 {
        src.bytes.load(Ordering::Relaxed)
    }

    #[test]
    fn opening_reads_the_trailer_and_index_only_and_a_check_reads_its_page_once() {
        // 100 entries in pages of 8: 13 pages.
        let (src, r) = open(image(3), PAGE_CACHE_BYTES);
        let r = r.unwrap();
        assert_eq!((r.len(), r.pages()), (100, 13));
        assert_eq!(read(&src), DEVICE_BLOCK, "the image's last 4 KiB");
        check(&r, &src, 17).unwrap();
        assert_eq!(read(&src), DEVICE_BLOCK + 8 * 20, "page 2");
        check(&r, &src, 18).unwrap();
        check(&r, &src, 23).unwrap();
        assert_eq!(read(&src), DEVICE_BLOCK + 8 * 20, "page 2 again");
        check(&r, &src, 99).unwrap();
        assert_eq!(read(&src), DEVICE_BLOCK + 8 * 20 + 4 * 20, "the last page");
        // Bytes that do not match, a length that does not, a position no
        // entry starts at.
        let e = r.check(&src, 50, &[&[0u8; 50]], &|| "x".into());
        assert!(matches!(e, Err(FsError::Damaged(_))), "{e:?}");
        let e = r.check(&src, 50, &[&src.inner.0[50..99]], &|| "x".into());
        assert!(matches!(e, Err(FsError::Damaged(_))), "{e:?}");
        let e = r.check(&src, 51, &[&src.inner.0[51..101]], &|| "x".into());
        assert!(matches!(e, Err(FsError::Damaged(_))), "{e:?}");
    }

    #[test]
    fn damage_in_a_page_is_found_when_a_piece_of_that_page_is_checked() {
        let mut img = image(3);
        // Page 5's third entry's hash.
        let at = record_start(USED) as usize + (5 * 8 + 2) * 20 + 15;
        img[at] ^= 4;
        let (src, r) = open(img, PAGE_CACHE_BYTES);
        let r = r.expect("the index is intact: the image opens");
        for i in (0..100).filter(|i| i / 8 != 5) {
            check(&r, &src, i).unwrap();
        }
        for i in 40..48 {
            match check(&r, &src, i) {
                Err(FsError::Damaged(m)) => assert!(
                    m.contains(&format!("piece {i}"))
                        && m.contains("hash record")
                        && m.contains("page 5"),
                    "{m}"
                ),
                e => panic!("piece {i}: {e:?}"),
            }
        }
    }

    #[test]
    fn a_damaged_index_or_trailer_is_damage_of_the_record() {
        let good = image(3);
        let len = good.len();
        let index_at = len - Trailer::SIZE - 13 * PageRef::SIZE;
        // A page's first offset, a page's hash, the trailer's version, its
        // index hash, its own hash.
        for at in [
            index_at + 16,
            index_at + 5 * 16 + 9,
            len - 40,
            len - 16,
            len - 1,
        ] {
            let mut img = good.clone();
            img[at] ^= 1;
            match open(img, PAGE_CACHE_BYTES).1 {
                Err(FsError::Damaged(m)) => assert!(m.contains("hash record"), "{at}: {m}"),
                Err(e) => panic!("{at}: {e}"),
                Ok(_) => panic!("{at}: a damaged record was trusted"),
            }
        }
    }

    #[test]
    fn the_page_cache_keeps_to_its_budget() {
        let page = Page::new(
            0,
            vec![
                HashEntry {
                    offset: 0,
                    len: 1,
                    hash: 0
                };
                8
            ],
        )
        .bytes();
        let (src, r) = open(image(3), 3 * page);
        let r = r.unwrap();
        for i in 0..100 {
            check(&r, &src, i).unwrap();
        }
        let Pages::Lazy { cache, .. } = &r.pages else {
            panic!("a version 2 record");
        };
        let (n, bytes) = cache.held();
        assert!(n == 3 && bytes <= 3 * page, "{n} pages, {bytes} bytes");
        // The last pages stayed, the first was evicted and is read again.
        let before = read(&src);
        check(&r, &src, 90).unwrap();
        assert_eq!(read(&src), before);
        check(&r, &src, 0).unwrap();
        assert_eq!(read(&src), before + 8 * 20);
    }

    #[test]
    fn pages_are_read_and_checked_on_several_threads() {
        let (src, r) = open(image(2), 4 * 1024);
        let r = r.unwrap();
        r.track_checks();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (r, src) = (&r, &src);
                s.spawn(move || {
                    for k in 0..400 {
                        check(r, src, (k * 7 + t * 13) % 100).unwrap();
                    }
                });
            }
        });
        assert!((0..100).all(|i| r.was_checked(i)));
    }

    #[test]
    fn checks_are_tracked_only_once_asked_for() {
        let (src, r) = open(image(3), PAGE_CACHE_BYTES);
        let r = r.unwrap();
        check(&r, &src, 3).unwrap();
        assert!(r.checked.get().is_none() && !r.was_checked(3));
        r.track_checks();
        check(&r, &src, 4).unwrap();
        assert!(r.was_checked(4) && !r.was_checked(3) && !r.was_checked(5));
        let listed = r.page_pieces(&src, 0).unwrap();
        assert_eq!(listed.len(), 8);
        assert_eq!(listed[4], (4, 200, 50));
    }

    #[test]
    fn a_version_1_record_is_loaded_whole_and_checked_as_before() {
        let (src, r) = open(image_v1(), PAGE_CACHE_BYTES);
        let r = r.unwrap();
        assert_eq!((r.version(), r.len(), r.pages()), (1, 100, 1));
        let at_open = read(&src);
        assert_eq!(at_open, DEVICE_BLOCK + 100 * 20);
        for i in 0..100 {
            check(&r, &src, i).unwrap();
        }
        assert_eq!(read(&src), at_open);
        assert!(check(&r, &src, 3).is_ok());
        // An entry flipped: the record's hash fails at open.
        let mut img = image_v1();
        img[record_start(USED) as usize + 20 * 7 + 3] ^= 2;
        assert!(matches!(
            open(img, PAGE_CACHE_BYTES).1,
            Err(FsError::Damaged(_))
        ));
    }
}
