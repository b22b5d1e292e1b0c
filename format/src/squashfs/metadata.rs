//! Words that frame the image's blocks: the u16 header of a metadata block,
//! the reference that points into a metadata area, and the u32 size word of
//! a data or fragment block.

use super::*;

/// The u16 before every metadata block's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaHeader {
    /// Bytes of payload stored after the header (at most 8 KiB).
    pub stored_len: u16,
    /// The payload is compressed (bit 15 of the word clear).
    pub compressed: bool,
}

impl MetaHeader {
    pub const SIZE: usize = 2;

    pub fn encode(self) -> [u8; 2] {
        let w = if self.compressed {
            self.stored_len
        } else {
            self.stored_len | METADATA_UNCOMPRESSED
        };
        w.to_le_bytes()
    }

    pub fn decode(b: [u8; 2]) -> Self {
        let w = u16::from_le_bytes(b);
        MetaHeader {
            stored_len: w & !METADATA_UNCOMPRESSED,
            compressed: w & METADATA_UNCOMPRESSED == 0,
        }
    }
}

/// Splits a metadata reference into (block position, offset in block).
pub fn split_ref(r: u64) -> (u64, usize) {
    (r >> 16, (r & 0xFFFF) as usize)
}

/// Builds a metadata reference from (block position, offset in block).
pub fn make_ref(block: u64, offset: usize) -> u64 {
    (block << 16) | offset as u64
}

/// The size word of a data block or fragment block: the stored length in
/// the low 24 bits (0 = a sparse block of zeros), bit 24 set when stored
/// uncompressed.
pub fn data_word(stored_len: usize, compressed: bool) -> u32 {
    let len = stored_len as u32;
    if compressed {
        len
    } else {
        len | DATA_UNCOMPRESSED
    }
}

/// Bytes the block of size word `w` occupies in the image.
pub fn data_stored_len(w: u32) -> u32 {
    w & DATA_SIZE_MASK
}

/// Whether the block of size word `w` is stored uncompressed.
pub fn data_is_raw(w: u32) -> bool {
    w & DATA_UNCOMPRESSED != 0
}

/// Number of blocks a file of `size` bytes has, given whether its tail lives
/// in a fragment.
pub fn block_count(size: u64, block_size: u32, tail_in_fragment: bool) -> u64 {
    let bs = block_size as u64;
    if tail_in_fragment {
        size / bs
    } else {
        size.div_ceil(bs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_header_round_trips() {
        for h in [
            MetaHeader {
                stored_len: 8192,
                compressed: false,
            },
            MetaHeader {
                stored_len: 1234,
                compressed: true,
            },
            MetaHeader {
                stored_len: 0,
                compressed: true,
            },
        ] {
            assert_eq!(MetaHeader::decode(h.encode()), h);
        }
        // Bit 15 set = stored raw (what mksquashfs writes for an
        // incompressible 8 KiB block: 0x2000 | 0x8000).
        assert_eq!(
            MetaHeader::decode([0x00, 0xA0]),
            MetaHeader {
                stored_len: 8192,
                compressed: false
            }
        );
    }

    #[test]
    fn references_and_size_words_round_trip() {
        let r = make_ref(0x1_2345, 8191);
        assert_eq!(split_ref(r), (0x1_2345, 8191));
        let w = data_word(131072, false);
        assert_eq!(w, 131072 | (1 << 24));
        assert!(data_is_raw(w) && data_stored_len(w) == 131072);
        let w = data_word(4000, true);
        assert!(!data_is_raw(w) && data_stored_len(w) == 4000);
        assert_eq!(block_count(300_000, 131072, true), 2);
        assert_eq!(block_count(300_000, 131072, false), 3);
    }
}
