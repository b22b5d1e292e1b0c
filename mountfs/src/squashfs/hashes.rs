//! The image's hash record (`packfs_format::squashfs::hashes`), loaded at
//! open and checked by [`super::blocks::Blocks`] on every piece it reads
//! from the source, before the piece is decoded or cached: bytes that fail
//! are never cached or served.
//!
//! Memory: 20 bytes an entry (one a stored block), plus a bit an entry for
//! which pieces were checked (what `packfs verify` reads afterwards to
//! cover the pieces no file led to).

use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::squashfs::hashes::{self, decode_record, record_start, Trailer};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct HashRecord {
    offsets: Vec<u64>,
    lens: Vec<u32>,
    hashes: Vec<u64>,
    /// One bit an entry: checked since open.
    checked: Vec<AtomicU64>,
    /// Where the entries end and the trailer starts: the zero padding
    /// between them is in no entry.
    pub gap: (u64, u64),
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

impl HashRecord {
    /// Finds and loads the record of an image whose filesystem ends at
    /// `bytes_used`. A trailer that is there but damaged, or a record that
    /// does not match its trailer's hash, is [`FsError::Damaged`].
    pub fn find(src: &dyn ImageSource, bytes_used: u64) -> Result<Found> {
        let len = src.len();
        let start = record_start(bytes_used);
        if len <= start {
            return Ok(Found::None);
        }
        if len < start + Trailer::SIZE as u64 {
            return Ok(Found::Unknown(len - start));
        }
        let mut t = [0u8; Trailer::SIZE];
        src.read_at(len - Trailer::SIZE as u64, &mut t)?;
        if !Trailer::has_magic(&t) {
            return Ok(Found::Unknown(len - start));
        }
        let damaged = |m: String| FsError::Damaged(format!("hash record: {m}"));
        let t = Trailer::decode(&t).map_err(|e| damaged(e.to_string()))?;
        if t.record_start != start
            || t.record_start
                .checked_add(t.record_len)
                .is_none_or(|end| end > len - Trailer::SIZE as u64)
        {
            return Err(damaged(format!(
                "its trailer places it at {} ({} bytes), not after the filesystem's end at {start} in a file of {len} bytes",
                t.record_start, t.record_len
            )));
        }
        let raw = src.read_vec(t.record_start, t.record_len as usize)?;
        if hashes::hash(&raw) != t.record_hash {
            crate::buffers::recycle(raw);
            return Err(damaged(
                "its bytes do not match the hash in its trailer".into(),
            ));
        }
        let entries = decode_record(&raw, bytes_used);
        crate::buffers::recycle(raw);
        let entries = entries.map_err(|e| damaged(e.to_string()))?;
        let n = entries.len();
        Ok(Found::Record(HashRecord {
            offsets: entries.iter().map(|e| e.offset).collect(),
            lens: entries.iter().map(|e| e.len).collect(),
            hashes: entries.iter().map(|e| e.hash).collect(),
            checked: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            gap: (t.record_start + t.record_len, len - Trailer::SIZE as u64),
        }))
    }

    /// Pieces in the record.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Entry `i`: (offset, length).
    pub fn piece(&self, i: usize) -> (u64, u32) {
        (self.offsets[i], self.lens[i])
    }

    /// Whether entry `i` was checked since open (passed or not).
    pub fn was_checked(&self, i: usize) -> bool {
        self.checked[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// Checks the piece at `pos` whose bytes, as read, are the
    /// concatenation of `parts`; `what` names it for the error ("data
    /// block at offset N"). A piece the record does not list is damage
    /// too: the tables that led to it are wrong.
    pub fn check(&self, pos: u64, parts: &[&[u8]], what: &dyn Fn() -> String) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let Ok(i) = self.offsets.binary_search(&pos) else {
            return Err(FsError::Damaged(format!(
                "{}: the image's hash record lists no piece there (the table that points at it is damaged)",
                what()
            )));
        };
        // Looked at, whatever the outcome: whoever looked reports a failure.
        // A load first: every read of a block passes here, and a
        // read-modify-write of a word shared by 64 neighbouring blocks would
        // bounce its cache line between the threads serving them, for a
        // bit that is set once.
        let bit = 1 << (i % 64);
        if self.checked[i / 64].load(Ordering::Relaxed) & bit == 0 {
            self.checked[i / 64].fetch_or(bit, Ordering::Relaxed);
        }
        if self.lens[i] as usize != len {
            return Err(FsError::Damaged(format!(
                "{}: read as {len} bytes, but the hash record lists {} (the table that sized it is damaged)",
                what(),
                self.lens[i]
            )));
        }
        if hashes::hash_parts(parts) != self.hashes[i] {
            return Err(FsError::Damaged(format!(
                "{}: its {len} bytes do not match the image's hash record",
                what()
            )));
        }
        Ok(())
    }
}
