//! Lookup tables stored as metadata blocks followed by a u64 index of those
//! blocks' absolute positions (fragment, export, id and xattr id tables).

use super::metadata::MetadataWriter;
use packfs_format::codec::{CodecError, Encoder};

/// Encodes `payload` as metadata blocks placed at absolute position `at`,
/// followed by the index. Returns the bytes and the absolute position of the
/// index (what the superblock records as the table start).
pub fn indexed_table(enc: Encoder, payload: &[u8], at: u64) -> Result<(Vec<u8>, u64), CodecError> {
    let mut w = MetadataWriter::new(enc);
    w.write(payload)?;
    let (mut bytes, starts) = w.finish()?;
    let index_pos = at + bytes.len() as u64;
    for s in starts {
        bytes.extend_from_slice(&(at + s).to_le_bytes());
    }
    Ok((bytes, index_pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use packfs_format::codec::Compressor;
    use packfs_format::squashfs::METADATA_SIZE;

    #[test]
    fn index_lists_absolute_block_positions() {
        let enc = Encoder::new(Compressor::Zstd, Some(3), 4096).unwrap();
        let payload: Vec<u8> = (0..3 * METADATA_SIZE as u32)
            .map(|i| (i / 7) as u8)
            .collect();
        let (bytes, index_pos) = indexed_table(enc, &payload, 1000).unwrap();
        let idx = &bytes[(index_pos - 1000) as usize..];
        assert_eq!(idx.len(), 24);
        let first = u64::from_le_bytes(idx[..8].try_into().unwrap());
        assert_eq!(first, 1000);
        let second = u64::from_le_bytes(idx[8..16].try_into().unwrap());
        let hdr = u16::from_le_bytes([bytes[0], bytes[1]]) & 0x7FFF;
        assert_eq!(second, 1000 + 2 + hdr as u64);
    }
}
