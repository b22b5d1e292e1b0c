//! Directory listings: headers + entries in the directory table, and the
//! directory index of extended directory inodes.

use super::inode::DirIndex;
use super::metadata::MetadataWriter;
use packfs_format::codec::CodecError;
use packfs_format::squashfs::dir::{DirEntry, DirHeader};
use packfs_format::squashfs::metadata::split_ref;
use packfs_format::squashfs::{
    DIR_ENTRY_SIZE, DIR_HEADER_MAX_ENTRIES, DIR_HEADER_SIZE, METADATA_SIZE,
};

/// One child as the listing needs it.
pub struct Entry<'a> {
    pub name: &'a [u8],
    pub inode_ref: u64,
    pub number: u32,
    /// Basic inode type (listings never carry extended types).
    pub basic_type: u16,
}

/// Where a listing was written and what its inode must record.
pub struct Listing {
    pub start_block: u32,
    pub offset: u16,
    /// Listing bytes (the inode stores this + 3).
    pub size: u32,
    pub index: Vec<DirIndex>,
}

/// A run of entries under one header.
struct Run {
    first: usize,
    count: usize,
    inode_block: u64,
    base: u32,
    /// Virtual (uncompressed) metadata block number the header starts in,
    /// relative to the block the listing starts in.
    vblock: usize,
    /// Header offset from the listing start.
    offset: usize,
}

/// Splits sorted `entries` into header runs. A new header starts when
/// - the current one has 256 entries (the count field's limit),
/// - the inode lives in another inode-table block (a header names one block),
/// - the inode number is not within i16 of the header's base,
/// - the entry would begin in a later directory-table block than its header:
///   this puts a header in every block so the directory index can point
///   lookups straight at the block holding a name.
///
/// `start_offset` is where the listing starts inside its first block;
/// metadata blocks hold exactly 8 KiB uncompressed, so block numbers follow
/// from byte offsets alone.
fn plan_runs(entries: &[Entry], start_offset: usize) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut pos = 0usize;
    for (i, e) in entries.iter().enumerate() {
        let (iblock, _) = split_ref(e.inode_ref);
        let entry_len = DIR_ENTRY_SIZE + e.name.len();
        let fits = runs.last().is_some_and(|r| {
            let delta = e.number as i64 - r.base as i64;
            r.count < DIR_HEADER_MAX_ENTRIES
                && r.inode_block == iblock
                && (i16::MIN as i64..=i16::MAX as i64).contains(&delta)
                && (start_offset + pos) / METADATA_SIZE == r.vblock
        });
        if fits {
            if let Some(r) = runs.last_mut() {
                r.count += 1;
            }
        } else {
            runs.push(Run {
                first: i,
                count: 1,
                inode_block: iblock,
                base: e.number,
                vblock: (start_offset + pos) / METADATA_SIZE,
                offset: pos,
            });
            pos += DIR_HEADER_SIZE;
        }
        pos += entry_len;
    }
    runs
}

/// Writes the listing of `entries` (sorted by name bytes) at the writer's
/// current position.
pub fn write_listing(w: &mut MetadataWriter, entries: &[Entry]) -> Result<Listing, CodecError> {
    let (start_block, start_offset) = w.position();
    let runs = plan_runs(entries, start_offset);
    let mut index = Vec::new();
    let mut buf = Vec::with_capacity(DIR_HEADER_SIZE + DIR_ENTRY_SIZE + 256);
    let mut size = 0usize;
    for (k, run) in runs.iter().enumerate() {
        debug_assert_eq!(run.offset, size);
        // A header that starts in a new block gets an index entry. The block
        // position is known now: the writer is filling that very block.
        if k > 0 && run.vblock != runs[k - 1].vblock {
            let (block, _) = w.position();
            index.push(DirIndex {
                index: run.offset as u32,
                start_block: block as u32,
                name: entries[run.first].name.to_vec(),
            });
        }
        buf.clear();
        DirHeader {
            count: run.count as u32,
            start_block: run.inode_block as u32,
            inode_number: run.base,
        }
        .encode(&mut buf);
        w.write(&buf)?;
        size += buf.len();
        for e in &entries[run.first..run.first + run.count] {
            let (_, off) = split_ref(e.inode_ref);
            buf.clear();
            let delta = (e.number as i64 - run.base as i64) as i16;
            DirEntry::encode(off as u16, delta, e.basic_type, e.name, &mut buf);
            w.write(&buf)?;
            size += buf.len();
        }
    }
    Ok(Listing {
        start_block: start_block as u32,
        offset: start_offset as u16,
        size: size as u32,
        index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use packfs_format::codec::Compressor;
    use packfs_format::codec::Encoder;
    use packfs_format::squashfs::metadata::make_ref;

    fn names(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("file-{i:06}").into_bytes())
            .collect()
    }

    #[test]
    fn headers_split_at_256_entries_block_change_and_number_range() {
        let names = names(600);
        let entries: Vec<Entry> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Entry {
                name: n,
                // entries 0..300 in inode block 0, then block 5000
                inode_ref: make_ref(if i < 300 { 0 } else { 5000 }, i % 100),
                // a jump of 40000 at entry 500 exceeds i16
                number: if i < 500 {
                    i as u32 + 1
                } else {
                    i as u32 + 40_000
                },
                basic_type: 2,
            })
            .collect();
        let runs = plan_runs(&entries, 0);
        let starts: Vec<usize> = runs.iter().map(|r| r.first).collect();
        // 256-entry cap at 256; inode block change at 300; number jump at 500;
        // plus splits wherever an entry crosses into a new 8 KiB block
        // (entries are 19 bytes: ~430 per block).
        for must in [0, 256, 300, 500] {
            assert!(starts.contains(&must), "no header at {must}: {starts:?}");
        }
        assert!(runs.iter().all(|r| r.count <= 256));
        let mut pos = 0;
        for r in &runs {
            assert_eq!(r.offset, pos);
            pos += 12 + r.count * 19;
            // every entry of a run starts in the block its header starts in
            let last_entry_start = r.offset + 12 + (r.count - 1) * 19;
            assert_eq!(last_entry_start / METADATA_SIZE, r.vblock);
        }
    }

    #[test]
    fn index_points_at_headers_in_new_blocks() {
        let enc = Encoder::new(Compressor::Gzip, Some(1), 131072).unwrap();
        let mut w = MetadataWriter::new(enc);
        w.write(&[7u8; 100]).unwrap(); // listing starts mid-block
        let names = names(2000);
        let entries: Vec<Entry> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Entry {
                name: n,
                inode_ref: make_ref(0, i),
                number: i as u32 + 1,
                basic_type: 2,
            })
            .collect();
        let l = write_listing(&mut w, &entries).unwrap();
        assert_eq!((l.start_block, l.offset), (0, 100));
        // 2000 entries * 19 bytes + headers ≈ 38 KB: 4 block changes.
        assert_eq!(l.index.len(), 4);
        for (k, ix) in l.index.iter().enumerate() {
            // The header lies in the (k+1)-th block after the first.
            assert_eq!((100 + ix.index as usize) / METADATA_SIZE, k + 1);
            assert!(ix.start_block > 0);
        }
        assert!(l
            .index
            .windows(2)
            .all(|p| p[0].name < p[1].name && p[0].start_block < p[1].start_block));
    }
}
