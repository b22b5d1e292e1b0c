//! The hash record: packfs's integrity table for a SquashFS image, kept
//! after the filesystem's end where standard readers never look (they stop
//! at the superblock's `bytes_used`, as they skip the padding).
//!
//! ```text
//! 0 ............ bytes_used   the filesystem (superblock, data, tables)
//!   ............ R            zero padding to 4 KiB (as without a record)
//! R ............ R + 20·n     n entries, sorted by offset, not overlapping
//!   ............ L − 48       zero padding (the file stays a multiple of 4 KiB)
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
//! The [`Trailer`] locates the record from the file's end and carries the
//! record's hash and its own, so that a damaged record is reported, never
//! trusted.

use crate::bytes::{put_u16, put_u32, put_u64, Input, SliceInput};
use crate::FormatError;

/// The trailer's first 8 bytes.
pub const TRAILER_MAGIC: [u8; 8] = *b"PKFSHASH";
/// The layout described here.
pub const RECORD_VERSION: u16 = 1;
/// [`Trailer::algorithm`]: XXH3-64 with seed 0.
pub const ALGO_XXH3_64: u16 = 1;

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

/// The last [`Trailer::SIZE`] bytes of an image with a hash record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// [`TRAILER_MAGIC`].
    pub magic: [u8; 8],
    /// [`RECORD_VERSION`].
    pub version: u16,
    /// The hash function: [`ALGO_XXH3_64`].
    pub algorithm: u16,
    /// Bytes per entry: [`HashEntry::SIZE`].
    pub entry_size: u32,
    /// Absolute position of the first entry: `bytes_used` rounded up to
    /// 4 KiB.
    pub record_start: u64,
    /// Bytes of entries (a multiple of `entry_size`).
    pub record_len: u64,
    /// XXH3-64 of the record's bytes.
    pub record_hash: u64,
    /// XXH3-64 of this trailer's first 40 bytes.
    pub trailer_hash: u64,
}

impl Trailer {
    pub const SIZE: usize = 48;

    /// The trailer of a record of `record_len` bytes at `record_start`
    /// whose bytes hash to `record_hash`.
    pub fn new(record_start: u64, record_len: u64, record_hash: u64) -> Self {
        let mut t = Trailer {
            magic: TRAILER_MAGIC,
            version: RECORD_VERSION,
            algorithm: ALGO_XXH3_64,
            entry_size: HashEntry::SIZE as u32,
            record_start,
            record_len,
            record_hash,
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
        put_u32(&mut v, self.entry_size);
        put_u64(&mut v, self.record_start);
        put_u64(&mut v, self.record_len);
        put_u64(&mut v, self.record_hash);
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

    /// Decodes and checks the trailer's own hash, version, algorithm and
    /// entry size.
    pub fn decode(b: &[u8; Self::SIZE]) -> Result<Self, FormatError> {
        let mut r = SliceInput::new(b, "hash record trailer");
        let t = Trailer {
            magic: r.array()?,
            version: r.u16()?,
            algorithm: r.u16()?,
            entry_size: r.u32()?,
            record_start: r.u64()?,
            record_len: r.u64()?,
            record_hash: r.u64()?,
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
        if t.version != RECORD_VERSION
            || t.algorithm != ALGO_XXH3_64
            || t.entry_size != HashEntry::SIZE as u32
        {
            return Err(FormatError::invalid(format!(
                "hash record version {} (algorithm {}, {}-byte entries) is not one this build reads",
                t.version, t.algorithm, t.entry_size
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
}

/// Where the record starts for an image whose filesystem ends at
/// `bytes_used`.
pub fn record_start(bytes_used: u64) -> u64 {
    bytes_used.div_ceil(super::DEVICE_BLOCK) * super::DEVICE_BLOCK
}

/// The length of an image with a record of `record_len` bytes: record and
/// trailer after the filesystem's padding, padded to 4 KiB.
pub fn image_len(bytes_used: u64, record_len: u64) -> u64 {
    let end = record_start(bytes_used) + record_len + Trailer::SIZE as u64;
    end.div_ceil(super::DEVICE_BLOCK) * super::DEVICE_BLOCK
}

/// Decodes the record's bytes (already checked against the trailer's
/// hash) and checks that its entries are sorted, non-empty, do not
/// overlap and lie within `bytes_used`.
pub fn decode_record(bytes: &[u8], bytes_used: u64) -> Result<Vec<HashEntry>, FormatError> {
    let mut r = SliceInput::new(bytes, "hash record");
    let mut out = Vec::with_capacity(bytes.len() / HashEntry::SIZE);
    let mut end = 0u64;
    for _ in 0..bytes.len() / HashEntry::SIZE {
        let e = HashEntry::decode(&mut r)?;
        let e_end = e.offset.checked_add(e.len as u64);
        if e.len == 0 || e.offset < end || e_end.is_none_or(|x| x > bytes_used) {
            return Err(FormatError::invalid(format!(
                "hash record entry {} ({} bytes at {}) is out of order or outside the filesystem",
                out.len(),
                e.len,
                e.offset
            )));
        }
        end = e_end.unwrap_or(u64::MAX);
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_round_trips_and_refuses_any_flipped_bit() {
        let t = Trailer::new(8192, 400, 0x1234_5678_9abc_def0);
        let b = t.encode();
        assert_eq!(Trailer::decode(&b).unwrap(), t);
        for i in 0..Trailer::SIZE * 8 {
            let mut bad = b;
            bad[i / 8] ^= 1 << (i % 8);
            assert!(Trailer::decode(&bad).is_err(), "bit {i}");
        }
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
        assert_eq!(image_len(4097, 20), 12288);
        assert_eq!(image_len(4097, 4096 - 48), 12288);
        assert_eq!(image_len(4097, 4096 - 47), 16384);
    }
}
