//! The xattr table: key/value metadata blocks, xattr id metadata blocks, and
//! a header (kv start, id count) followed by the id blocks' index.

use super::metadata::MetadataWriter;
use super::tables::indexed_table;
use crate::xattrs::Xattr;
use packfs_format::codec::{CodecError, Encoder};
use packfs_format::squashfs::metadata::make_ref;
use packfs_format::squashfs::tables::{XattrIdEntry, XattrTableHeader};
use packfs_format::squashfs::xattr::{encode_value, XattrKey};

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
            XattrKey::encode(x.kind, &x.name, &mut e);
            encode_value(&x.value, &mut e);
            kv.write(&e)?;
            size += (x.full_name_len() + 1 + x.value.len()) as u32;
        }
        XattrIdEntry {
            xattr_ref: make_ref(block, offset),
            count: set.len() as u32,
            size,
        }
        .encode(&mut ids);
    }
    let (mut bytes, _) = kv.finish()?;
    let ids_at = at + bytes.len() as u64;
    // indexed_table puts the index right after the id blocks; the header
    // must sit between them, so build the id blocks and index separately.
    let (id_part, index_pos) = indexed_table(enc, &ids, ids_at)?;
    let blocks_len = (index_pos - ids_at) as usize;
    bytes.extend_from_slice(&id_part[..blocks_len]);
    let header_pos = at + bytes.len() as u64;
    XattrTableHeader {
        kv_start: at,
        count: sets.len() as u32,
        unused: 0,
    }
    .encode(&mut bytes);
    bytes.extend_from_slice(&id_part[blocks_len..]);
    Ok((bytes, header_pos))
}
