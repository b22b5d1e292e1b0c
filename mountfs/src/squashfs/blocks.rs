//! The image's blocks, decoded through the shared cache: the one place the
//! SquashFS reader touches the [`ImageSource`], the [`BlockCache`] and the
//! codec. Everything above works on decoded blocks. With a hash record,
//! every piece read here is checked against it before it is decoded or
//! cached.

use super::hashes::HashRecord;
use crate::cache::{Block, BlockCache};
use crate::error::{FsError, Result};
use crate::source::ImageSource;
use packfs_format::codec::{decompress, Compressor};
use packfs_format::squashfs::metadata::{data_is_raw, data_stored_len, MetaHeader};
use packfs_format::squashfs::METADATA_SIZE;
use std::sync::Arc;

/// Cache keys of metadata blocks carry this bit so that a corrupt image whose
/// tables point into data blocks can never alias a cached data block.
const META_KEY: u64 = 1 << 63;

/// The image source, its decoded-block cache and the image's compressor.
pub struct Blocks {
    pub(crate) src: Box<dyn ImageSource>,
    pub(crate) cache: Arc<BlockCache>,
    pub compressor: Compressor,
    /// The image's hash record, if it has one.
    pub record: Option<HashRecord>,
}

impl Blocks {
    pub fn new(src: Box<dyn ImageSource>, cache: Arc<BlockCache>, compressor: Compressor) -> Self {
        Blocks {
            src,
            cache,
            compressor,
            record: None,
        }
    }

    /// Checks a piece read from the source against the hash record (if
    /// any); `parts` are its bytes as read, `what` names it.
    pub fn check(&self, pos: u64, parts: &[&[u8]], what: &dyn Fn() -> String) -> Result<()> {
        match &self.record {
            Some(r) => r.check(&*self.src, pos, parts, what),
            None => Ok(()),
        }
    }

    /// The stored bytes of the piece at `pos..pos + len`, checked.
    pub fn read_piece(&self, pos: u64, len: usize, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        let raw = self.src.read_vec(pos, len)?;
        if let Err(e) = self.check(pos, &[&raw], what) {
            crate::buffers::recycle(raw);
            return Err(e);
        }
        Ok(raw)
    }

    /// The decoded metadata block whose header sits at absolute position `pos`.
    pub fn meta_block(&self, pos: u64) -> Result<Arc<Block>> {
        self.cache.get_or_load(pos | META_KEY, || {
            let mut hdr_bytes = [0u8; MetaHeader::SIZE];
            self.src.read_at(pos, &mut hdr_bytes)?;
            let hdr = MetaHeader::decode(hdr_bytes);
            let stored = hdr.stored_len as usize;
            if !hdr.compressed && stored > METADATA_SIZE {
                return Err(FsError::corrupt(format!(
                    "metadata block at {pos} is {stored} bytes, more than {METADATA_SIZE}"
                )));
            }
            let raw = self.src.read_vec(pos + MetaHeader::SIZE as u64, stored)?;
            if let Err(e) = self.check(pos, &[&hdr_bytes, &raw], &|| {
                format!("metadata block at offset {pos}")
            }) {
                crate::buffers::recycle(raw);
                return Err(e);
            }
            let data = if !hdr.compressed {
                raw
            } else {
                let mut out = crate::buffers::take(METADATA_SIZE + 1);
                let r = decompress(self.compressor, &raw, &mut out, METADATA_SIZE);
                crate::buffers::recycle(raw);
                r.map_err(|source| FsError::BadBlock {
                    what: format!("metadata block at offset {pos}"),
                    source,
                })?;
                out
            };
            Ok(Block::new(
                data,
                pos + MetaHeader::SIZE as u64 + stored as u64,
            ))
        })
    }

    /// Decodes (through the cache) a data or fragment block stored at `pos`
    /// with size word `word`, expected to expand to at most `limit` bytes.
    pub fn data_block(&self, pos: u64, word: u32, limit: usize) -> Result<Arc<Block>> {
        self.cache
            .get_or_load(pos, || self.load_data(pos, word, limit))
    }

    /// [`Blocks::data_block`] for readahead: nothing when the block's reader
    /// has just been served all of it (`BlockCache::get_or_load_ahead`).
    pub fn data_block_ahead(&self, pos: u64, word: u32, limit: usize) {
        let _ = self
            .cache
            .get_or_load_ahead(pos, || self.load_data(pos, word, limit));
    }

    fn load_data(&self, pos: u64, word: u32, limit: usize) -> Result<Block> {
        let stored = data_stored_len(word) as usize;
        // Neither a compressed block (the writer stores a block raw
        // when compression does not shrink it) nor a raw one can be
        // longer than a block; refusing here bounds the read buffer.
        if stored > limit {
            return Err(FsError::corrupt(format!(
                "block at offset {pos} is stored in {stored} bytes, more than the {limit}-byte block size"
            )));
        }
        // The hint lets stream readahead see this block (and run ahead
        // of a sequential pass) before the read below waits for it.
        self.src.will_need(pos, stored);
        let raw = self.read_piece(pos, stored, &|| format!("data block at offset {pos}"))?;
        let data = if data_is_raw(word) {
            raw
        } else {
            let mut out = crate::buffers::take(limit + 1);
            let r = decompress(self.compressor, &raw, &mut out, limit);
            crate::buffers::recycle(raw);
            r.map_err(|source| FsError::BadBlock {
                what: format!("data block at offset {pos}"),
                source,
            })?;
            out
        };
        Ok(Block::new(data, pos + stored as u64))
    }
}
