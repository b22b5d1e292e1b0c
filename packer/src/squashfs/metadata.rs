//! Metadata block writer: the 8 KiB-payload blocks that hold inodes,
//! directory listings and the lookup tables.

use packfs_format::codec::{CodecError, Encoder};
use packfs_format::squashfs::metadata::MetaHeader;
use packfs_format::squashfs::METADATA_SIZE;

/// Accumulates a metadata area in memory.
///
/// Invariants: every block but the last holds exactly [`METADATA_SIZE`]
/// uncompressed bytes (readers rely on this to turn a listing offset into a
/// block + offset), and the pending buffer is always shorter than
/// [`METADATA_SIZE`], so [`MetadataWriter::position`] always names a valid
/// offset inside the block being filled.
pub struct MetadataWriter {
    enc: Encoder,
    /// Finished blocks (header + payload), positions relative to the area start.
    out: Vec<u8>,
    /// Uncompressed bytes of the block being filled.
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Position of every finished block's header in `out`.
    block_starts: Vec<u64>,
}

impl MetadataWriter {
    pub fn new(enc: Encoder) -> Self {
        MetadataWriter {
            enc,
            out: Vec::new(),
            buf: Vec::with_capacity(METADATA_SIZE),
            scratch: Vec::new(),
            block_starts: Vec::new(),
        }
    }

    /// (position of the current block relative to the area start, offset in its payload).
    pub fn position(&self) -> (u64, usize) {
        (self.out.len() as u64, self.buf.len())
    }

    pub fn write(&mut self, mut data: &[u8]) -> Result<(), CodecError> {
        while !data.is_empty() {
            let n = (METADATA_SIZE - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == METADATA_SIZE {
                self.flush_block()?;
            }
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<(), CodecError> {
        self.block_starts.push(self.out.len() as u64);
        let compressed = self.enc.compress(&self.buf, &mut self.scratch)?;
        let payload = if compressed { &self.scratch } else { &self.buf };
        let header = MetaHeader {
            stored_len: payload.len() as u16,
            compressed,
        };
        self.out.extend_from_slice(&header.encode());
        self.out.extend_from_slice(payload);
        self.buf.clear();
        Ok(())
    }

    /// Flushes the partial last block and returns the area bytes together
    /// with each block's start position.
    pub fn finish(mut self) -> Result<(Vec<u8>, Vec<u64>), CodecError> {
        if !self.buf.is_empty() {
            self.flush_block()?;
        }
        Ok((self.out, self.block_starts))
    }
}

/// The inode and directory tables, encoded in memory, with the export
/// table's entries and the root's reference.
pub struct Metadata {
    pub inodes: Vec<u8>,
    pub dirs: Vec<u8>,
    /// Inode references by inode number - 1.
    pub export: Vec<u8>,
    pub root_inode: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use packfs_format::codec::decompress;
    use packfs_format::codec::Compressor;
    use packfs_format::squashfs::METADATA_UNCOMPRESSED;

    fn read_all(area: &[u8]) -> Vec<u8> {
        let mut pos = 0;
        let mut all = Vec::new();
        while pos < area.len() {
            let h = u16::from_le_bytes([area[pos], area[pos + 1]]);
            let len = (h & !METADATA_UNCOMPRESSED) as usize;
            let payload = &area[pos + 2..pos + 2 + len];
            if h & METADATA_UNCOMPRESSED != 0 {
                all.extend_from_slice(payload);
            } else {
                let mut d = Vec::new();
                decompress(Compressor::Zstd, payload, &mut d, METADATA_SIZE).unwrap();
                assert!(d.len() == METADATA_SIZE || pos + 2 + len == area.len());
                all.extend_from_slice(&d);
            }
            pos += 2 + len;
        }
        all
    }

    #[test]
    fn blocks_are_8k_and_round_trip() {
        let enc = Encoder::new(Compressor::Zstd, Some(3), 131072).unwrap();
        let mut w = MetadataWriter::new(enc);
        let data: Vec<u8> = (0..30_000u32).map(|i| (i % 251) as u8).collect();
        w.write(&data[..5000]).unwrap();
        assert_eq!(w.position(), (0, 5000));
        w.write(&data[5000..]).unwrap();
        // 30000 = 3 full blocks + 5424 bytes pending.
        assert_eq!(w.position().1, 30_000 - 3 * METADATA_SIZE);
        let (area, starts) = w.finish().unwrap();
        assert_eq!(starts.len(), 4);
        assert_eq!(starts[0], 0);
        assert_eq!(read_all(&area), data);
    }

    #[test]
    fn incompressible_block_is_stored_raw() {
        let enc = Encoder::new(Compressor::Zstd, Some(3), 131072).unwrap();
        let mut w = MetadataWriter::new(enc);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<u8> = (0..METADATA_SIZE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        w.write(&data).unwrap();
        // Exactly full: the block is flushed at once and a new one begins.
        assert_eq!(w.position(), (2 + METADATA_SIZE as u64, 0));
        let (area, _) = w.finish().unwrap();
        assert_eq!(
            u16::from_le_bytes([area[0], area[1]]),
            METADATA_SIZE as u16 | METADATA_UNCOMPRESSED
        );
        assert_eq!(read_all(&area), data);
    }
}
