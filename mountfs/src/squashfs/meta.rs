//! Reading the metadata areas (inode, directory, fragment, id, export and
//! xattr tables): a cursor that walks across 8 KiB metadata blocks, decoding
//! each block at most once through the shared cache.

use super::format::{METADATA_SIZE, METADATA_UNCOMPRESSED};
use super::reader::SquashFs;
use crate::cache::Block;
use crate::error::{FsError, Result};
use std::sync::Arc;

/// Cache keys of metadata blocks carry this bit so that a corrupt image whose
/// tables point into data blocks can never alias a cached data block.
const META_KEY: u64 = 1 << 63;

impl SquashFs {
    /// The decoded metadata block whose header sits at absolute position `pos`.
    pub(crate) fn meta_block(&self, pos: u64) -> Result<Arc<Block>> {
        self.cache.get_or_load(pos | META_KEY, || {
            let hdr = self.src.slice(pos, 2)?;
            let hdr = u16::from_le_bytes([hdr[0], hdr[1]]);
            let stored = (hdr & !METADATA_UNCOMPRESSED) as usize;
            let raw = self.src.slice(pos + 2, stored)?;
            let data = if hdr & METADATA_UNCOMPRESSED != 0 {
                if stored > METADATA_SIZE {
                    return Err(FsError::corrupt(format!(
                        "metadata block at {pos} is {stored} bytes, more than {METADATA_SIZE}"
                    )));
                }
                let mut out = crate::buffers::take(stored);
                out.extend_from_slice(raw);
                out
            } else {
                let mut out = crate::buffers::take(METADATA_SIZE + 1);
                crate::codec::decompress(self.compressor, raw, &mut out, METADATA_SIZE).map_err(
                    |source| FsError::BadBlock {
                        what: format!("metadata block at offset {pos}"),
                        source,
                    },
                )?;
                out
            };
            Ok(Block {
                data,
                next: pos + 2 + stored as u64,
            })
        })
    }

    /// A cursor at `offset` bytes into the decoded metadata block at `pos`.
    pub(crate) fn meta_cursor(&self, pos: u64, offset: usize) -> Result<MetaCursor<'_>> {
        let block = self.meta_block(pos)?;
        if offset > block.data.len() {
            return Err(FsError::corrupt(format!(
                "metadata reference offset {offset} beyond block at {pos} ({} bytes)",
                block.data.len()
            )));
        }
        Ok(MetaCursor {
            fs: self,
            pos,
            block,
            off: offset,
        })
    }
}

/// A position in a metadata area that reads forward across block boundaries.
pub struct MetaCursor<'a> {
    fs: &'a SquashFs,
    /// Absolute position of the current block's header.
    pub pos: u64,
    block: Arc<Block>,
    /// Offset into the current block's decoded payload.
    pub off: usize,
}

impl MetaCursor<'_> {
    fn advance_block(&mut self) -> Result<()> {
        let next = self.block.next;
        self.block = self.fs.meta_block(next)?;
        if self.block.data.is_empty() {
            return Err(FsError::corrupt(format!("empty metadata block at {next}")));
        }
        self.pos = next;
        self.off = 0;
        Ok(())
    }

    pub fn read_into(&mut self, mut buf: &mut [u8]) -> Result<()> {
        while !buf.is_empty() {
            if self.off >= self.block.data.len() {
                self.advance_block()?;
            }
            let avail = &self.block.data[self.off..];
            let n = avail.len().min(buf.len());
            buf[..n].copy_from_slice(&avail[..n]);
            self.off += n;
            buf = &mut buf[n..];
        }
        Ok(())
    }

    pub fn skip(&mut self, mut n: usize) -> Result<()> {
        while n > 0 {
            if self.off >= self.block.data.len() {
                self.advance_block()?;
            }
            let k = (self.block.data.len() - self.off).min(n);
            self.off += k;
            n -= k;
        }
        Ok(())
    }

    pub fn bytes(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        self.read_into(&mut v)?;
        Ok(v)
    }

    pub fn u16(&mut self) -> Result<u16> {
        let mut b = [0u8; 2];
        self.read_into(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    pub fn i16(&mut self) -> Result<i16> {
        Ok(self.u16()? as i16)
    }
    pub fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read_into(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    pub fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read_into(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// True when the cursor sits at the end of a block whose successor starts at `limit` or later.
    pub fn at_area_end(&self, limit: u64) -> bool {
        self.off >= self.block.data.len() && self.block.next >= limit
    }
}
