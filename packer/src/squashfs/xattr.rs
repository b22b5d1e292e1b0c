//! The xattr table: key/value metadata blocks, xattr id metadata blocks, and
//! a header (kv start, id count) followed by the id blocks' index.

use super::tables::indexed_table;
use crate::metadata::MetadataWriter;
use crate::xattrs::Xattr;
use mountfs::codec::{CodecError, Encoder};
use mountfs::squashfs::format::make_ref;

/// Encodes all sets for placement at absolute position `at`. Returns the
/// bytes and the absolute position of the header (the superblock's
/// `xattr_id_table_start`).
pub fn xattr_table(
    enc: Encoder,
    sets: &[Vec<Xattr>],
    at: u64,
) -> Result<(Vec<u8>, u64), CodecError> {
    let mut kv = MetadataWriter::new(enc);
    let mut ids = Vec::with_capacity(sets.len() * 16);
    for set in sets {
        let (block, offset) = kv.position();
        // `size` is what listxattr + getxattr need: names with prefix and
        // NUL plus values (what mksquashfs records; the kernel ignores it).
        let mut size = 0u32;
        for x in set {
            let mut e = Vec::with_capacity(8 + x.name.len() + x.value.len());
            e.extend_from_slice(&x.kind.to_le_bytes());
            e.extend_from_slice(&(x.name.len() as u16).to_le_bytes());
            e.extend_from_slice(&x.name);
            e.extend_from_slice(&(x.value.len() as u32).to_le_bytes());
            e.extend_from_slice(&x.value);
            kv.write(&e)?;
            size += (x.full_name_len() + 1 + x.value.len()) as u32;
        }
        ids.extend_from_slice(&make_ref(block, offset).to_le_bytes());
        ids.extend_from_slice(&(set.len() as u32).to_le_bytes());
        ids.extend_from_slice(&size.to_le_bytes());
    }
    let (mut bytes, _) = kv.finish()?;
    let ids_at = at + bytes.len() as u64;
    // indexed_table puts the index right after the id blocks; the header
    // must sit between them, so build the id blocks and index separately.
    let (id_part, index_pos) = indexed_table(enc, &ids, ids_at)?;
    let blocks_len = (index_pos - ids_at) as usize;
    bytes.extend_from_slice(&id_part[..blocks_len]);
    let header_pos = at + bytes.len() as u64;
    bytes.extend_from_slice(&at.to_le_bytes());
    bytes.extend_from_slice(&(sets.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&id_part[blocks_len..]);
    Ok((bytes, header_pos))
}
