//! The image file as written: a sequential writer that knows its position.

use crate::PackError;
use packfs_format::squashfs::hashes::{self, HashEntry, Trailer};
use packfs_format::squashfs::metadata::MetaHeader;
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::{DEVICE_BLOCK, SUPERBLOCK_SIZE};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Sequential writer over the output file that knows its position.
pub struct ImageWriter<'f> {
    out: BufWriter<&'f File>,
    pos: u64,
    /// The final output name, for messages (see [`PackError::Output`]).
    path: PathBuf,
    follow: Option<std::sync::Arc<crate::follow::Follow>>,
    /// The pieces written so far and their hashes, in image order, when the
    /// image gets a hash record; the superblock's is added by `finish`.
    /// Held until then (20 bytes a piece, and the record encoded from them
    /// as much again), since the record is written after the filesystem.
    pieces: Option<Vec<HashEntry>>,
}

impl<'f> ImageWriter<'f> {
    pub fn new(file: &'f File, path: &Path) -> Self {
        ImageWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            pos: 0,
            path: path.to_path_buf(),
            follow: None,
            pieces: None,
        }
    }

    /// Records a hash of every piece written with [`ImageWriter::write_piece`]
    /// and [`ImageWriter::write_meta`], for the hash record `finish` appends.
    pub fn hashed(mut self, on: bool) -> Self {
        self.pieces = on.then(Vec::new);
        self
    }

    /// Tells `follow` which bytes are final as the image is written.
    pub fn followed(mut self, follow: Option<std::sync::Arc<crate::follow::Follow>>) -> Self {
        if let Some(f) = &follow {
            f.start(self.out.get_ref());
        }
        self.follow = follow;
        self
    }

    /// Nothing before `pos` will be written again (but the superblock):
    /// flushed to the file and told to the follower, if any.
    pub fn publish_final(&mut self, pos: u64) -> Result<(), PackError> {
        let Some(f) = &self.follow else {
            return Ok(());
        };
        self.out
            .flush()
            .map_err(PackError::output(&self.path, "writing the image"))?;
        f.publish(pos.min(self.pos));
        Ok(())
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&mut self, b: &[u8]) -> Result<(), PackError> {
        self.out
            .write_all(b)
            .map_err(PackError::output(&self.path, "writing the image"))?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Writes one piece a reader reads whole (a data or fragment block, a
    /// table's index), hashed for the record.
    pub fn write_piece(&mut self, b: &[u8]) -> Result<(), PackError> {
        if let Some(p) = &mut self.pieces {
            if !b.is_empty() {
                p.push(HashEntry {
                    offset: self.pos,
                    len: b.len() as u32,
                    hash: hashes::hash(b),
                });
            }
        }
        self.write(b)
    }

    /// Writes a run of metadata blocks, each hashed as a piece (its 2-byte
    /// header included: readers read them as one).
    pub fn write_meta(&mut self, b: &[u8]) -> Result<(), PackError> {
        if let Some(p) = &mut self.pieces {
            let mut at = 0;
            while at + MetaHeader::SIZE <= b.len() {
                let hdr = MetaHeader::decode([b[at], b[at + 1]]);
                let end = (at + MetaHeader::SIZE + hdr.stored_len as usize).min(b.len());
                p.push(HashEntry {
                    offset: self.pos + at as u64,
                    len: (end - at) as u32,
                    hash: hashes::hash(&b[at..end]),
                });
                at = end;
            }
        }
        self.write(b)
    }

    /// Starts writeback of what reached the file so far, without waiting.
    /// The image is synced before it is renamed into place; without this
    /// nothing would be written until then (the kernel's dirty limits are
    /// far above an image's size on most machines), so the final sync would
    /// write the whole image after everything else. Advisory: errors are
    /// ignored (the final sync reports real ones).
    pub fn start_writeback(&self) {
        // SAFETY: sync_file_range on a valid fd has no memory effects.
        unsafe {
            libc::sync_file_range(
                self.out.get_ref().as_raw_fd(),
                0,
                0,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }

    /// Moves back to `pos`; later writes overwrite what followed it.
    pub fn rewind(&mut self, pos: u64) -> Result<(), PackError> {
        if pos != self.pos {
            self.out
                .seek(SeekFrom::Start(pos))
                .map_err(PackError::output(&self.path, "writing the image"))?;
            self.pos = pos;
        }
        if let Some(p) = &mut self.pieces {
            while p.last().is_some_and(|e| e.offset >= pos) {
                p.pop();
            }
        }
        Ok(())
    }

    /// Pads to 4 KiB with zeros, appends the hash record if asked for,
    /// cuts off anything a rewind left beyond the end, and writes the
    /// superblock. Returns the image's length.
    pub(super) fn finish(mut self, sb: &Superblock) -> Result<u64, PackError> {
        let padded = self.pos.div_ceil(DEVICE_BLOCK) * DEVICE_BLOCK;
        let pad = vec![0u8; (padded - self.pos) as usize];
        self.write(&pad)?;
        let sb_bytes = sb.encode();
        let mut end = padded;
        if let Some(mut pieces) = self.pieces.take() {
            // The placeholder's zeros were written unhashed; the real
            // superblock is the first piece.
            pieces.insert(
                0,
                HashEntry {
                    offset: 0,
                    len: SUPERBLOCK_SIZE as u32,
                    hash: hashes::hash(&sb_bytes),
                },
            );
            let record = hashes::encode_record(&pieces, padded, hashes::PAGE_LOG);
            drop(pieces);
            end = hashes::image_len(
                sb.bytes_used,
                record.entries.len() as u64,
                record.index.len() as u64,
            );
            self.write(&record.entries)?;
            // The index ends where the trailer starts, so that a reader
            // finds both in the image's last bytes.
            let index_at = end - Trailer::SIZE as u64 - record.index.len() as u64;
            let gap = vec![0u8; (index_at - self.pos) as usize];
            self.write(&gap)?;
            self.write(&record.index)?;
            self.write(&record.trailer.encode())?;
        }
        self.out
            .seek(SeekFrom::Start(0))
            .map_err(PackError::output(&self.path, "writing the image"))?;
        self.out
            .write_all(&sb_bytes)
            .map_err(PackError::output(&self.path, "writing the image"))?;
        let file = self
            .out
            .into_inner()
            .map_err(|e| PackError::output(&self.path, "writing the image")(e.into_error()))?;
        file.set_len(end)
            .map_err(PackError::output(&self.path, "writing the image"))?;
        Ok(end)
    }
}
