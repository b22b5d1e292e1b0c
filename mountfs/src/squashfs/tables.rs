//! The lookup tables a reader keeps from open to close: the uid/gid values
//! (loaded whole: at most 65,536 u32) and the block indexes of the fragment
//! and xattr id tables, whose entries are then decoded on demand.

use super::blocks::Blocks;
use super::meta::MetaCursor;
use crate::error::{FsError, Result};
use packfs_format::bytes::Input;
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::tables::{
    entry_at, index_len, FragmentEntry, XattrIdEntry, XattrTableHeader,
};
use packfs_format::squashfs::{INVALID_TABLE, METADATA_SIZE};

pub struct Tables {
    ids: Vec<u32>,
    /// Absolute positions of the fragment table's metadata blocks.
    frag_index: Vec<u64>,
    fragment_count: u32,
    /// Absolute positions of the xattr id table's metadata blocks.
    xattr_index: Vec<u64>,
    /// Start of the xattr key/value area.
    pub xattr_kv_start: u64,
    xattr_count: u32,
}

/// A table whose entries are spread over metadata blocks indexed by a list of
/// u64 block positions at `start`: reads that list, checked against the
/// hash record as one piece with the `header` bytes just before it.
fn read_index(
    blocks: &Blocks,
    start: u64,
    entries: u64,
    entry_size: u64,
    what: &str,
    header: &[u8],
) -> Result<Vec<u64>> {
    let n = index_len(entries, entry_size);
    let len = (n * 8) as usize;
    crate::source::range_check(blocks.src.len(), start, len).map_err(|_| {
        FsError::corrupt(format!(
            "{what} index at {start} runs past the end of the image"
        ))
    })?;
    let raw = blocks.src.read_vec(start, len)?;
    let piece = start - header.len() as u64;
    if let Err(e) = blocks.check(piece, &[header, &raw], &|| {
        format!("{what} index at offset {piece}")
    }) {
        crate::buffers::recycle(raw);
        return Err(e);
    }
    let index = raw
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect();
    crate::buffers::recycle(raw);
    Ok(index)
}

impl Tables {
    /// Loads the id table and the fragment and xattr id indexes that `sb`
    /// points at (its table positions are checked by the caller).
    pub fn load(blocks: &Blocks, sb: &Superblock) -> Result<Self> {
        let id_blocks = read_index(
            blocks,
            sb.id_table_start,
            sb.id_count as u64,
            4,
            "id table",
            &[],
        )?;
        let mut ids = Vec::with_capacity(sb.id_count as usize);
        let per_block = METADATA_SIZE / 4;
        for pos in id_blocks {
            let n = (sb.id_count as usize - ids.len()).min(per_block);
            let mut c = MetaCursor::new(blocks, pos, 0)?;
            for _ in 0..n {
                ids.push(c.u32()?);
            }
        }
        let mut t = Tables {
            ids,
            frag_index: Vec::new(),
            fragment_count: sb.fragment_count,
            xattr_index: Vec::new(),
            xattr_kv_start: 0,
            xattr_count: 0,
        };
        if sb.fragment_count > 0 && sb.fragment_table_start != INVALID_TABLE {
            t.frag_index = read_index(
                blocks,
                sb.fragment_table_start,
                sb.fragment_count as u64,
                FragmentEntry::SIZE as u64,
                "fragment table",
                &[],
            )?;
        }
        if sb.xattr_id_table_start != INVALID_TABLE {
            let mut h = [0u8; XattrTableHeader::SIZE];
            crate::source::range_check(blocks.src.len(), sb.xattr_id_table_start, h.len())
                .map_err(|_| {
                    FsError::corrupt("xattr id table header runs past the end of the image")
                })?;
            blocks.src.read_at(sb.xattr_id_table_start, &mut h)?;
            let header = h;
            let h = XattrTableHeader::decode(&mut packfs_format::bytes::SliceInput::new(
                &h,
                "xattr id table header",
            ))?;
            t.xattr_kv_start = h.kv_start;
            t.xattr_count = h.count;
            t.xattr_index = read_index(
                blocks,
                sb.xattr_id_table_start + XattrTableHeader::SIZE as u64,
                h.count as u64,
                XattrIdEntry::SIZE as u64,
                "xattr id table",
                &header,
            )?;
        }
        Ok(t)
    }

    /// The uid or gid stored at index `idx` of the id table.
    pub fn id(&self, idx: u16) -> Result<u32> {
        self.ids
            .get(idx as usize)
            .copied()
            .ok_or_else(|| FsError::corrupt(format!("uid/gid index {idx} out of range")))
    }

    /// Xattr id table entry `idx`.
    pub fn xattr_entry(&self, blocks: &Blocks, idx: u32) -> Result<XattrIdEntry> {
        if idx >= self.xattr_count {
            return Err(FsError::corrupt(format!("xattr index {idx} out of range")));
        }
        let (block, off) = entry_at(idx as u64, XattrIdEntry::SIZE);
        let mut c = MetaCursor::new(blocks, self.xattr_index[block], off)?;
        XattrIdEntry::decode(&mut c)
    }

    /// Fragment table entry `idx`.
    pub fn fragment_entry(&self, blocks: &Blocks, idx: u32) -> Result<FragmentEntry> {
        if idx >= self.fragment_count {
            return Err(FsError::corrupt(format!(
                "fragment index {idx} out of range ({} fragments)",
                self.fragment_count
            )));
        }
        let (block, off) = entry_at(idx as u64, FragmentEntry::SIZE);
        let pos = *self
            .frag_index
            .get(block)
            .ok_or_else(|| FsError::corrupt("fragment table index too short"))?;
        let mut c = MetaCursor::new(blocks, pos, off)?;
        FragmentEntry::decode(&mut c)
    }
}
