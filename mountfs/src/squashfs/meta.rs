//! Reading the metadata areas (inode, directory, fragment, id, export and
//! xattr tables): a cursor that walks across 8 KiB metadata blocks, decoding
//! each block at most once through the shared cache. It implements the
//! format crate's [`Input`], so records decode across block boundaries.

use super::blocks::Blocks;
use crate::cache::Block;
use crate::error::{FsError, Result};
use packfs_format::bytes::Input;
use std::sync::Arc;

/// A position in a metadata area that reads forward across block boundaries.
pub struct MetaCursor<'a> {
    blocks: &'a Blocks,
    /// Absolute position of the current block's header.
    pub pos: u64,
    block: Arc<Block>,
    /// Offset into the current block's decoded payload.
    pub off: usize,
}

impl<'a> MetaCursor<'a> {
    /// A cursor at `offset` bytes into the decoded metadata block at `pos`.
    pub fn new(blocks: &'a Blocks, pos: u64, offset: usize) -> Result<Self> {
        let block = blocks.meta_block(pos)?;
        if offset > block.data.len() {
            return Err(FsError::corrupt(format!(
                "metadata reference offset {offset} beyond block at {pos} ({} bytes)",
                block.data.len()
            )));
        }
        Ok(MetaCursor {
            blocks,
            pos,
            block,
            off: offset,
        })
    }

    fn advance_block(&mut self) -> Result<()> {
        let next = self.block.next;
        self.block = self.blocks.meta_block(next)?;
        if self.block.data.is_empty() {
            return Err(FsError::corrupt(format!("empty metadata block at {next}")));
        }
        self.pos = next;
        self.off = 0;
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

    /// True when the cursor sits at the end of a block whose successor starts at `limit` or later.
    pub fn at_area_end(&self, limit: u64) -> bool {
        self.off >= self.block.data.len() && self.block.next >= limit
    }
}

impl Input for MetaCursor<'_> {
    type Error = FsError;

    fn read_into(&mut self, mut buf: &mut [u8]) -> Result<()> {
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
}
