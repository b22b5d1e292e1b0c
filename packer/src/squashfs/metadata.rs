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
    /// Position of every finished block's header, relative to the area
    /// start.
    block_starts: Vec<u64>,
    /// Bytes of finished blocks taken by [`MetadataWriter::drain`].
    drained: u64,
}

impl MetadataWriter {
    pub fn new(enc: Encoder) -> Self {
        MetadataWriter {
            enc,
            out: Vec::new(),
            buf: Vec::with_capacity(METADATA_SIZE),
            scratch: Vec::new(),
            block_starts: Vec::new(),
            drained: 0,
        }
    }

    /// Finished blocks held, in bytes.
    pub fn finished_len(&self) -> usize {
        self.out.len()
    }

    /// Gives `put` the finished blocks not given yet, and forgets them: an
    /// area too large to hold goes elsewhere as it is made. Positions stay
    /// relative to the area start.
    pub fn drain<E>(&mut self, put: impl FnOnce(&[u8]) -> Result<(), E>) -> Result<(), E> {
        put(&self.out)?;
        self.drained += self.out.len() as u64;
        self.out.clear();
        Ok(())
    }

    /// (position of the current block relative to the area start, offset in its payload).
    pub fn position(&self) -> (u64, usize) {
        (self.drained + self.out.len() as u64, self.buf.len())
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
        self.block_starts.push(self.drained + self.out.len() as u64);
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

    /// Flushes the partial last block and returns the area bytes (those
    /// not drained) together with each block's start position.
    pub fn finish(mut self) -> Result<(Vec<u8>, Vec<u64>), CodecError> {
        if !self.buf.is_empty() {
            self.flush_block()?;
        }
        Ok((self.out, self.block_starts))
    }
}

/// The inode and directory tables, encoded, with the export table's
/// entries and the root's reference.
pub struct Metadata {
    pub inodes: Area,
    pub dirs: Area,
    /// Inode references by inode number - 1.
    pub export: Area,
    pub root_inode: u64,
}

/// Bytes of a table: in memory, or in a file of the spill directory.
pub enum Area {
    Mem(Vec<u8>),
    File(AreaFile),
}

/// Bytes in an unnamed file of the spill directory (gone with its handle,
/// whichever way the pack ends).
pub struct AreaFile {
    file: std::fs::File,
    len: u64,
    /// The spill directory, for messages.
    dir: std::path::PathBuf,
}

impl AreaFile {
    pub fn create(dir: &std::path::Path) -> Result<AreaFile, crate::PackError> {
        let file = tempfile::tempfile_in(dir)
            .map_err(crate::PackError::output(dir, "writing the spilled tables"))?;
        Ok(AreaFile {
            file,
            len: 0,
            dir: dir.to_path_buf(),
        })
    }

    /// Appends `b`.
    pub fn append(&mut self, b: &[u8]) -> Result<(), crate::PackError> {
        self.write_at(b, self.len)
    }

    /// Writes `b` at `at`, past the end or not.
    pub fn write_at(&mut self, b: &[u8], at: u64) -> Result<(), crate::PackError> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, b, at).map_err(
            crate::PackError::output(&self.dir, "writing the spilled tables"),
        )?;
        self.len = self.len.max(at + b.len() as u64);
        Ok(())
    }

    /// Reads from `at` into `out`, as much as there is; returns how much.
    pub fn read_at(&self, at: u64, out: &mut [u8]) -> Result<usize, crate::PackError> {
        let want = (self.len.saturating_sub(at)).min(out.len() as u64) as usize;
        std::os::unix::fs::FileExt::read_exact_at(&self.file, &mut out[..want], at).map_err(
            crate::PackError::output(&self.dir, "reading the spilled tables"),
        )?;
        Ok(want)
    }
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
    fn a_drained_area_is_the_area_written_whole() {
        let enc = Encoder::new(Compressor::Zstd, Some(3), 131072).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let mut whole = MetadataWriter::new(enc);
        whole.write(&data).unwrap();
        let mut drained = MetadataWriter::new(enc);
        let mut out = Vec::new();
        for chunk in data.chunks(3000) {
            drained.write(chunk).unwrap();
            drained
                .drain(|b| {
                    out.extend_from_slice(b);
                    Ok::<_, ()>(())
                })
                .unwrap();
            assert_eq!(drained.finished_len(), 0);
        }
        assert_eq!(drained.position(), whole.position());
        let (rest, starts) = drained.finish().unwrap();
        out.extend_from_slice(&rest);
        assert_eq!((out, starts), whole.finish().unwrap());
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
