//! Directory listings: iteration from a resumable position, and lookup by
//! name that uses the directory index to skip to the right metadata block.
//!
//! The records (headers, entries, index entries) are decoded by
//! `packfs_format::squashfs::{dir, inode}`; this module walks them. A
//! position in a listing is [`DirPos`]: the byte offset of a header and the
//! index of an entry under it. Positions are what readdir cookies encode, so
//! resuming a listing costs one seek, not a rescan from the start.

use super::blocks::Blocks;
use super::inode::DirInode;
use super::meta::MetaCursor;
use crate::error::{FsError, Result};
use packfs_format::bytes::Input;
use packfs_format::squashfs::dir::{DirEntry, DirHeader};
use packfs_format::squashfs::inode::DirIndex;
use packfs_format::squashfs::metadata::make_ref;
use packfs_format::squashfs::{MAX_NAME_LEN, METADATA_SIZE};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirPos {
    /// Byte offset of a header from the listing start.
    pub header: u32,
    /// Entry index under that header (0..=255).
    pub index: u8,
}

impl DirPos {
    /// Packs the position into a readdir cookie (>= 3; 1 and 2 are "." and "..").
    pub fn to_cookie(self) -> u64 {
        3 + (((self.header as u64) << 8) | self.index as u64)
    }
    pub fn from_cookie(c: u64) -> Self {
        let v = c.saturating_sub(3);
        DirPos {
            header: (v >> 8) as u32,
            index: (v & 0xff) as u8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDirEntry {
    pub name: Vec<u8>,
    pub inode_ref: u64,
    pub inode_number: u32,
    /// Basic inode type (1..=7).
    pub kind: u16,
    /// Position of the entry after this one.
    pub next: DirPos,
}

/// Streams the entries of one directory listing.
pub struct DirIter<'a> {
    c: MetaCursor<'a>,
    /// Bytes of the listing consumed so far.
    pos: u32,
    /// Listing length (inode size minus 3).
    len: u32,
    header_pos: u32,
    remaining: u32,
    index: u32,
    start_block: u32,
    base: u32,
    /// The current entry, filled by `advance` without allocating.
    cur: CurEntry,
}

struct CurEntry {
    name: [u8; MAX_NAME_LEN],
    name_len: usize,
    inode_ref: u64,
    inode_number: u32,
    kind: u16,
    next: DirPos,
}

impl Default for CurEntry {
    fn default() -> Self {
        CurEntry {
            name: [0; MAX_NAME_LEN],
            name_len: 0,
            inode_ref: 0,
            inode_number: 0,
            kind: 0,
            next: DirPos::default(),
        }
    }
}

impl CurEntry {
    fn name(&self) -> &[u8] {
        &self.name[..self.name_len]
    }
}

/// The directory table of an image: where listings are read from.
#[derive(Clone, Copy)]
pub struct Listings<'a> {
    pub blocks: &'a Blocks,
    /// Absolute position of the directory table.
    pub start: u64,
}

fn listing_len(d: &DirInode) -> u32 {
    d.size.saturating_sub(3)
}

impl<'a> Listings<'a> {
    /// Iterates `dir` from `from` (use `DirPos::default()` for the start).
    pub fn read_dir(&self, d: &DirInode, from: DirPos) -> Result<DirIter<'a>> {
        let len = listing_len(d);
        let (block, off, pos) = self.seek_index(d, |idx_pos, _| idx_pos <= from.header)?;
        let mut c = MetaCursor::new(self.blocks, self.start + block, off)?;
        let target = from.header.min(len);
        if target < pos {
            return Err(FsError::corrupt(
                "directory index points past the position sought",
            ));
        }
        c.skip((target - pos) as usize)?;
        let mut it = DirIter {
            c,
            pos: target,
            len,
            header_pos: target,
            remaining: 0,
            index: 0,
            start_block: 0,
            base: 0,
            cur: CurEntry::default(),
        };
        if from.index > 0 && target < len {
            it.read_header()?;
            for _ in 0..from.index {
                if it.remaining == 0 {
                    break;
                }
                it.read_entry()?;
            }
        }
        Ok(it)
    }

    /// Finds `name` in `dir`, using the directory index when there is one.
    pub fn lookup(&self, d: &DirInode, name: &[u8]) -> Result<Option<RawDirEntry>> {
        let len = listing_len(d);
        let (block, off, pos) = self.seek_index(d, |_, idx_name| idx_name <= name)?;
        let c = MetaCursor::new(self.blocks, self.start + block, off)?;
        let mut it = DirIter {
            c,
            pos,
            len,
            header_pos: pos,
            remaining: 0,
            index: 0,
            start_block: 0,
            base: 0,
            cur: CurEntry::default(),
        };
        while it.advance()? {
            if it.cur.name() == name {
                return Ok(Some(it.current()));
            }
            // Sorted listing: once past the name, it is not here. Compare only
            // the first byte, as the kernel does, to tolerate images whose
            // writer sorted with a different collation beyond that.
            if it.cur.name().first() > name.first() {
                break;
            }
        }
        Ok(None)
    }

    /// Walks the directory index, returning the (relative block, offset,
    /// listing position) of the last index entry accepted by `take`, or the
    /// listing start. Index entries are in listing order.
    fn seek_index(
        &self,
        d: &DirInode,
        mut take: impl FnMut(u32, &[u8]) -> bool,
    ) -> Result<(u64, usize, u32)> {
        let mut best = (d.block as u64, d.offset as usize, 0u32);
        if let Some((ipos, ioff)) = d.index_at {
            let mut c = MetaCursor::new(self.blocks, ipos, ioff)?;
            let mut name = [0u8; MAX_NAME_LEN];
            for _ in 0..d.index_count {
                let e = DirIndex::decode(&mut c)?;
                c.read_into(&mut name[..e.name_len])?;
                if !take(e.index, &name[..e.name_len]) {
                    break;
                }
                let off = (d.offset as usize + e.index as usize) % METADATA_SIZE;
                best = (e.start_block as u64, off, e.index);
            }
        }
        Ok(best)
    }
}

impl DirIter<'_> {
    fn read_header(&mut self) -> Result<()> {
        if self.len - self.pos < DirHeader::SIZE as u32 {
            return Err(FsError::corrupt("directory listing ends inside a header"));
        }
        self.header_pos = self.pos;
        let h = DirHeader::decode(&mut self.c)?;
        self.start_block = h.start_block;
        self.base = h.inode_number;
        self.remaining = h.count;
        self.index = 0;
        self.pos += DirHeader::SIZE as u32;
        Ok(())
    }

    /// Reads the next entry of the current header into `self.cur`.
    fn read_entry(&mut self) -> Result<()> {
        if self.len - self.pos < DirEntry::SIZE as u32 {
            return Err(FsError::corrupt("directory listing ends inside an entry"));
        }
        let e = DirEntry::decode(&mut self.c)?;
        let (offset, delta, kind) = (e.offset, e.inode_delta, e.inode_type);
        let name_len = e.name_len as u32;
        if name_len as usize > MAX_NAME_LEN
            || self.len - self.pos - (DirEntry::SIZE as u32) < name_len
        {
            return Err(FsError::corrupt(
                "directory entry name runs past the listing",
            ));
        }
        self.c.read_into(&mut self.cur.name[..name_len as usize])?;
        self.cur.name_len = name_len as usize;
        self.pos += DirEntry::SIZE as u32 + name_len;
        self.remaining -= 1;
        self.index += 1;
        self.cur.next = if self.remaining > 0 {
            DirPos {
                header: self.header_pos,
                index: self.index as u8,
            }
        } else {
            DirPos {
                header: self.pos,
                index: 0,
            }
        };
        let name = self.cur.name();
        if name.contains(&b'/') || name == b"." || name == b".." {
            return Err(FsError::corrupt(format!(
                "directory entry with invalid name {:?}",
                String::from_utf8_lossy(name)
            )));
        }
        self.cur.inode_ref = make_ref(self.start_block as u64, offset as usize);
        self.cur.inode_number = self.base.wrapping_add(delta as i32 as u32);
        self.cur.kind = kind;
        Ok(())
    }

    /// Moves to the next entry (into `self.cur`); false at the end.
    fn advance(&mut self) -> Result<bool> {
        if self.remaining == 0 {
            if self.pos >= self.len {
                return Ok(false);
            }
            self.read_header()?;
        }
        self.read_entry()?;
        Ok(true)
    }

    fn current(&self) -> RawDirEntry {
        RawDirEntry {
            name: self.cur.name().to_vec(),
            inode_ref: self.cur.inode_ref,
            inode_number: self.cur.inode_number,
            kind: self.cur.kind,
            next: self.cur.next,
        }
    }

    /// The next entry, or `None` at the end of the listing.
    pub fn next_entry(&mut self) -> Result<Option<RawDirEntry>> {
        Ok(self.advance()?.then(|| self.current()))
    }
}

impl Iterator for DirIter<'_> {
    type Item = Result<RawDirEntry>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry().transpose()
    }
}
