//! The hash record: packfs's integrity table for a SquashFS image, kept
//! after the filesystem's end where standard readers never look (they stop
//! at the superblock's `bytes_used`, as they skip the padding).
//!
//! ```text
//! 0 ............ bytes_used   the filesystem (superblock, data, tables)
//!   ............ R            zero padding to 4 KiB (as without a record)
//! R ............ R + 20·n     n entries, sorted by offset, not overlapping,
//!                             in pages of K = 2^page_log (the last shorter)
//!   ............ X            zero padding (the file stays a multiple of 4 KiB)
//! X ............ L − 48       the page index: 16 bytes a page
//! L − 48 ....... L            the trailer
//! ```
//!
//! Each [`HashEntry`] covers one piece of the image as stored: the
//! superblock, a metadata block (its 2-byte header included), a data or
//! fragment block (compressed or raw), a lookup table's index (the xattr
//! id table's with its 16-byte header). Readers check a piece's bytes
//! against its entry when they read it from the source, before decoding
//! or caching it. The hash is XXH3-64 (seed 0) of the bytes at
//! `offset..offset + len`: fast enough to check on every read (many GB/s
//! a core, next to a decoder's one) and far beyond what bit rot or a torn
//! copy can collide with; it is no defence against a forger, who can
//! rewrite the record too.
//!
//! The entries are read a page at a time, when a piece of the page is
//! first checked: opening an image reads the trailer and the page index
//! only, whatever the image's size. Each [`PageRef`] in the index holds
//! its page's first offset (to find the page of a piece by binary search)
//! and the hash of the page's bytes (checked when the page is read).
//!
//! The [`Trailer`] locates the record from the file's end and carries the
//! index's hash and its own, so that a damaged record is reported, never
//! trusted.
//!
//! Version 1 records (no index, one hash over all the entries, which
//! readers load whole at open) are still read; only version 2 is written.

use crate::bytes::{put_u16, put_u32, put_u64, Input, SliceInput};
use crate::FormatError;

/// The trailer's first 8 bytes.
pub const TRAILER_MAGIC: [u8; 8] = *b"PKFSHASH";
/// The layout described here: paged entries and a page index.
pub const RECORD_VERSION: u16 = 2;
/// The earlier layout: the entries as one unit, hashed whole.
pub const RECORD_VERSION_1: u16 = 1;
/// [`Trailer::algorithm`]: XXH3-64 with seed 0.
pub const ALGO_XXH3_64: u16 = 1;
/// Entries a page as the writer pages them, log 2: 1024 entries, a
/// 20 KiB page. A page is read when a block it lists is first read from
/// the source, so it should cost little next to that read (a sixth of a
/// 128 KiB block, one more request on a remote image); the index costs
/// 16 bytes a page held in memory for as long as the image is open
/// (16 KiB for a million blocks, a 128 GiB image of 128 KiB blocks).
pub const PAGE_LOG: u16 = 10;
/// The largest page a reader accepts (1.25 MiB), so that a trailer cannot
/// make it allocate more at once.
pub const MAX_PAGE_LOG: u16 = 16;

/// XXH3-64 of `bytes`, as the record stores it.
pub fn hash(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// XXH3-64 of the concatenation of `parts` (a metadata block read as its
/// header and then its body), equal to [`hash`] of the joined bytes.
pub fn hash_parts(parts: &[&[u8]]) -> u64 {
    use std::hash::Hasher;
    if let [one] = parts {
        return hash(one);
    }
    let mut h = twox_hash::XxHash3_64::with_seed(0);
    for p in parts {
        h.write(p);
    }
    h.finish()
}

/// One piece of the image and the hash of its bytes as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashEntry {
    /// Absolute position of the piece's first byte.
    pub offset: u64,
    /// Bytes in the piece (at least 1).
    pub len: u32,
    /// XXH3-64 of the piece's bytes.
    pub hash: u64,
}

impl HashEntry {
    pub const SIZE: usize = 20;

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.offset);
        put_u32(out, self.len);
        put_u64(out, self.hash);
    }

    pub fn decode<I: Input>(r: &mut I) -> Result<Self, I::Error> {
        Ok(HashEntry {
            offset: r.u64()?,
            len: r.u32()?,
            hash: r.u64()?,
        })
    }
}

/// A page of entries as the index lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRef {
    /// The offset of the page's first entry: the page of a piece is the
    /// last whose first offset is at most the piece's.
    pub first_offset: u64,
    /// XXH3-64 of the page's bytes (its entries as stored).
    pub hash: u64,
}

impl PageRef {
    pub const SIZE: usize = 16;
}

/// The last [`Trailer::SIZE`] bytes of an image with a hash record.
///
/// Version 1 stored `entry_size` as a u32; version 2 splits that field into
/// `entry_size` (u16) and `page_log` (u16), so a version 1 trailer reads
/// as one with `page_log` 0 and the bytes of both are laid out alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// [`TRAILER_MAGIC`].
    pub magic: [u8; 8],
    /// [`RECORD_VERSION`] (or [`RECORD_VERSION_1`]).
    pub version: u16,
    /// The hash function: [`ALGO_XXH3_64`].
    pub algorithm: u16,
    /// Bytes per entry: [`HashEntry::SIZE`].
    pub entry_size: u16,
    /// Entries a page, log 2 (0 in version 1, which has no pages).
    pub page_log: u16,
    /// Absolute position of the first entry: `bytes_used` rounded up to
    /// 4 KiB.
    pub record_start: u64,
    /// Bytes of entries (a multiple of `entry_size`).
    pub record_len: u64,
    /// XXH3-64 of the page index (version 1: of the entries).
    pub hash: u64,
    /// XXH3-64 of this trailer's first 40 bytes.
    pub trailer_hash: u64,
}

impl Trailer {
    pub const SIZE: usize = 48;

    /// The trailer of a record of `record_len` bytes of entries at
    /// `record_start`, in pages of `2^page_log` entries, whose page index
    /// hashes to `index_hash`.
    pub fn new(record_start: u64, record_len: u64, page_log: u16, index_hash: u64) -> Self {
        Self::sealed(
            RECORD_VERSION,
            page_log,
            record_start,
            record_len,
            index_hash,
        )
    }

    /// The trailer of a version 1 record, which this build reads but no
    /// longer writes (tests write one to check that earlier images read).
    pub fn v1(record_start: u64, record_len: u64, record_hash: u64) -> Self {
        Self::sealed(RECORD_VERSION_1, 0, record_start, record_len, record_hash)
    }

    fn sealed(version: u16, page_log: u16, record_start: u64, record_len: u64, h: u64) -> Self {
        let mut t = Trailer {
            magic: TRAILER_MAGIC,
            version,
            algorithm: ALGO_XXH3_64,
            entry_size: HashEntry::SIZE as u16,
            page_log,
            record_start,
            record_len,
            hash: h,
            trailer_hash: 0,
        };
        t.trailer_hash = hash(&t.encode()[..40]);
        t
    }

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut v = Vec::with_capacity(Self::SIZE);
        v.extend_from_slice(&self.magic);
        put_u16(&mut v, self.version);
        put_u16(&mut v, self.algorithm);
        put_u16(&mut v, self.entry_size);
        put_u16(&mut v, self.page_log);
        put_u64(&mut v, self.record_start);
        put_u64(&mut v, self.record_len);
        put_u64(&mut v, self.hash);
        put_u64(&mut v, self.trailer_hash);
        let mut out = [0u8; Self::SIZE];
        out.copy_from_slice(&v);
        out
    }

    /// Whether `b` starts with the trailer's magic: a record was written
    /// (then any other problem with it is damage).
    pub fn has_magic(b: &[u8; Self::SIZE]) -> bool {
        b[..8] == TRAILER_MAGIC
    }

    /// Decodes and checks the trailer's own hash, version, algorithm,
    /// entry size and page size.
    pub fn decode(b: &[u8; Self::SIZE]) -> Result<Self, FormatError> {
        let mut r = SliceInput::new(b, "hash record trailer");
        let t = Trailer {
            magic: r.array()?,
            version: r.u16()?,
            algorithm: r.u16()?,
            entry_size: r.u16()?,
            page_log: r.u16()?,
            record_start: r.u64()?,
            record_len: r.u64()?,
            hash: r.u64()?,
            trailer_hash: r.u64()?,
        };
        if t.magic != TRAILER_MAGIC {
            return Err(FormatError::invalid("no hash record trailer"));
        }
        if hash(&b[..40]) != t.trailer_hash {
            return Err(FormatError::invalid(
                "the hash record's trailer does not match its own hash",
            ));
        }
        let pages_ok = match t.version {
            RECORD_VERSION_1 => t.page_log == 0,
            RECORD_VERSION => t.page_log <= MAX_PAGE_LOG,
            _ => false,
        };
        if !pages_ok || t.algorithm != ALGO_XXH3_64 || t.entry_size != HashEntry::SIZE as u16 {
            return Err(FormatError::invalid(format!(
                "hash record version {} (algorithm {}, {}-byte entries, pages of 2^{}) is not one this build reads",
                t.version, t.algorithm, t.entry_size, t.page_log
            )));
        }
        if !t.record_len.is_multiple_of(HashEntry::SIZE as u64) {
            return Err(FormatError::invalid(format!(
                "hash record of {} bytes is not a whole number of entries",
                t.record_len
            )));
        }
        Ok(t)
    }

    /// Entries in the record.
    pub fn entries(&self) -> u64 {
        self.record_len / HashEntry::SIZE as u64
    }

    /// Entries in a full page (version 1: the whole record is one page).
    pub fn page_entries(&self) -> u64 {
        if self.version == RECORD_VERSION_1 {
            self.entries().max(1)
        } else {
            1 << self.page_log
        }
    }

    /// Pages in the record.
    pub fn pages(&self) -> u64 {
        self.entries().div_ceil(self.page_entries())
    }

    /// Bytes of the page index, which ends where the trailer starts (none
    /// in version 1).
    pub fn index_len(&self) -> u64 {
        if self.version == RECORD_VERSION_1 {
            0
        } else {
            self.pages() * PageRef::SIZE as u64
        }
    }

    /// Page `p`: the position of its first entry, and its entries.
    pub fn page_span(&self, p: u64) -> (u64, u64) {
        let k = self.page_entries();
        let first = p.saturating_mul(k).min(self.entries());
        let n = (self.entries() - first).min(k);
        (self.record_start + first * HashEntry::SIZE as u64, n)
    }
}

/// A record as written: its entries' bytes, its page index's bytes (which
/// the trailer immediately follows) and the trailer.
pub struct EncodedRecord {
    pub entries: Vec<u8>,
    pub index: Vec<u8>,
    pub trailer: Trailer,
}

/// Encodes `entries` (sorted by offset) as a record at `record_start` in
/// pages of `2^page_log` entries.
pub fn encode_record(entries: &[HashEntry], record_start: u64, page_log: u16) -> EncodedRecord {
    let mut bytes = Vec::with_capacity(entries.len() * HashEntry::SIZE);
    let mut index = Vec::with_capacity(entries.len().div_ceil(1 << page_log) * PageRef::SIZE);
    for page in entries.chunks(1 << page_log) {
        let at = bytes.len();
        for e in page {
            e.encode(&mut bytes);
        }
        put_u64(&mut index, page[0].offset);
        put_u64(&mut index, hash(&bytes[at..]));
    }
    let trailer = Trailer::new(record_start, bytes.len() as u64, page_log, hash(&index));
    EncodedRecord {
        entries: bytes,
        index,
        trailer,
    }
}

/// Where the record starts for an image whose filesystem ends at
/// `bytes_used`.
pub fn record_start(bytes_used: u64) -> u64 {
    bytes_used.div_ceil(super::DEVICE_BLOCK) * super::DEVICE_BLOCK
}

/// The length of an image with `record_len` bytes of entries and
/// `index_len` bytes of page index: record, index and trailer after the
/// filesystem's padding, padded to 4 KiB.
pub fn image_len(bytes_used: u64, record_len: u64, index_len: u64) -> u64 {
    let end = record_start(bytes_used) + record_len + index_len + Trailer::SIZE as u64;
    end.div_ceil(super::DEVICE_BLOCK) * super::DEVICE_BLOCK
}

/// Decodes the bytes of entries (already checked against their hash) and
/// checks that they are sorted, non-empty, do not overlap and end by
/// `end`; with `first`, that the first is at that offset (a page's, as
/// its index says). A version 1 record is one such run with `end` =
/// `bytes_used`; a page's `end` is the next page's first offset.
pub fn decode_entries(
    bytes: &[u8],
    first: Option<u64>,
    end: u64,
) -> Result<Vec<HashEntry>, FormatError> {
    let mut r = SliceInput::new(bytes, "hash record");
    let mut out = Vec::with_capacity(bytes.len() / HashEntry::SIZE);
    let mut at = 0u64;
    for _ in 0..bytes.len() / HashEntry::SIZE {
        let e = HashEntry::decode(&mut r)?;
        let e_end = e.offset.checked_add(e.len as u64);
        let misplaced = out.is_empty() && first.is_some_and(|f| f != e.offset);
        if misplaced || e.len == 0 || e.offset < at || e_end.is_none_or(|x| x > end) {
            return Err(FormatError::invalid(format!(
                "hash record entry {} ({} bytes at {}) is out of order or outside the filesystem",
                out.len(),
                e.len,
                e.offset
            )));
        }
        at = e_end.unwrap_or(u64::MAX);
        out.push(e);
    }
    Ok(out)
}

/// [`decode_entries`] for a whole version 1 record.
pub fn decode_record(bytes: &[u8], bytes_used: u64) -> Result<Vec<HashEntry>, FormatError> {
    decode_entries(bytes, None, bytes_used)
}

/// Decodes a page index (already checked against the trailer's hash) and
/// checks that the pages' first offsets rise within `bytes_used`.
pub fn decode_index(bytes: &[u8], bytes_used: u64) -> Result<Vec<PageRef>, FormatError> {
    let mut r = SliceInput::new(bytes, "hash record index");
    let mut out: Vec<PageRef> = Vec::with_capacity(bytes.len() / PageRef::SIZE);
    for _ in 0..bytes.len() / PageRef::SIZE {
        let p = PageRef {
            first_offset: r.u64()?,
            hash: r.u64()?,
        };
        if p.first_offset >= bytes_used
            || out.last().is_some_and(|q| q.first_offset >= p.first_offset)
        {
            return Err(FormatError::invalid(format!(
                "hash record index: page {} starts at {}, out of order or outside the filesystem",
                out.len(),
                p.first_offset
            )));
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_round_trips_and_refuses_any_flipped_bit() {
        for t in [
            Trailer::new(8192, 400, PAGE_LOG, 0x1234_5678_9abc_def0),
            Trailer::v1(8192, 400, 0x1234_5678_9abc_def0),
        ] {
            let b = t.encode();
            assert_eq!(Trailer::decode(&b).unwrap(), t);
            for i in 0..Trailer::SIZE * 8 {
                let mut bad = b;
                bad[i / 8] ^= 1 << (i % 8);
                assert!(Trailer::decode(&bad).is_err(), "bit {i}");
            }
        }
    }

    #[test]
    fn a_version_1_trailer_reads_as_one_with_its_u32_entry_size() {
        // Version 1's layout: the entry size as a u32 where version 2 has
        // the entry size and the page log as two u16.
        let mut b = Vec::new();
        b.extend_from_slice(&TRAILER_MAGIC);
        put_u16(&mut b, 1);
        put_u16(&mut b, ALGO_XXH3_64);
        put_u32(&mut b, 20);
        put_u64(&mut b, 4096);
        put_u64(&mut b, 60);
        put_u64(&mut b, 77);
        let h = hash(&b);
        put_u64(&mut b, h);
        let t = Trailer::decode(&b[..].try_into().unwrap()).unwrap();
        assert_eq!(t, Trailer::v1(4096, 60, 77));
        assert_eq!((t.pages(), t.page_entries(), t.index_len()), (1, 3, 0));
        assert_eq!(t.page_span(0), (4096, 3));
    }

    #[test]
    fn a_trailer_with_pages_too_large_or_an_unknown_version_is_refused() {
        let big = Trailer::new(4096, 20, MAX_PAGE_LOG + 1, 0);
        assert!(Trailer::decode(&big.encode()).is_err());
        let mut v3 = Trailer::new(4096, 20, PAGE_LOG, 0);
        v3.version = 3;
        v3.trailer_hash = hash(&v3.encode()[..40]);
        assert!(Trailer::decode(&v3.encode()).is_err());
    }

    #[test]
    fn a_record_is_paged_and_its_index_lists_each_page_and_its_hash() {
        let entries: Vec<HashEntry> = (0..10u64)
            .map(|i| HashEntry {
                offset: i * 100,
                len: 100,
                hash: i,
            })
            .collect();
        let r = encode_record(&entries, 4096, 2);
        let t = r.trailer;
        assert_eq!((t.entries(), t.pages(), t.index_len()), (10, 3, 48));
        assert_eq!(r.index.len(), 48);
        assert_eq!(t.hash, hash(&r.index));
        let index = decode_index(&r.index, 1000).unwrap();
        let mut all = Vec::new();
        for (p, page) in index.iter().enumerate() {
            let (pos, n) = t.page_span(p as u64);
            let at = (pos - 4096) as usize;
            let bytes = &r.entries[at..at + n as usize * HashEntry::SIZE];
            assert_eq!(hash(bytes), page.hash);
            let end = index.get(p + 1).map_or(1000, |q| q.first_offset);
            all.extend(decode_entries(bytes, Some(page.first_offset), end).unwrap());
        }
        assert_eq!(all, entries);
        assert_eq!(t.page_span(2), (4096 + 8 * 20, 2));
        // A page read as another's: its first entry is not where the
        // index puts that page.
        assert!(decode_entries(&r.entries[..80], Some(400), 800).is_err());
        // Index offsets must rise.
        let mut bad = r.index.clone();
        bad.copy_within(0..8, 16);
        assert!(decode_index(&bad, 1000).is_err());
        assert!(decode_index(&r.index, 800).is_err());
    }

    #[test]
    fn streamed_hash_equals_the_one_shot_hash() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(hash_parts(&[&data[..2], &data[2..]]), hash(&data));
        assert_eq!(hash_parts(&[&data]), hash(&data));
    }

    #[test]
    fn records_out_of_order_or_past_the_filesystem_are_refused() {
        let enc = |es: &[(u64, u32)]| {
            let mut v = Vec::new();
            for &(offset, len) in es {
                HashEntry {
                    offset,
                    len,
                    hash: 0,
                }
                .encode(&mut v);
            }
            v
        };
        assert_eq!(
            decode_record(&enc(&[(0, 96), (96, 10)]), 106)
                .unwrap()
                .len(),
            2
        );
        for bad in [
            &[(0, 96), (95, 10)][..],
            &[(0, 96), (96, 11)][..],
            &[(10, 0)][..],
            &[(u64::MAX, 2)][..],
        ] {
            assert!(decode_record(&enc(bad), 106).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_record_sits_after_the_padding_and_the_image_stays_4k_aligned() {
        assert_eq!(record_start(4096), 4096);
        assert_eq!(record_start(4097), 8192);
        assert_eq!(image_len(4097, 20, 16), 12288);
        assert_eq!(image_len(4097, 4096 - 64, 16), 12288);
        assert_eq!(image_len(4097, 4096 - 63, 16), 16384);
    }
}
