//! SquashFS 4.0 image writer. Layout (see `mountfs::squashfs::format`):
//! superblock, compressor options, data + fragment blocks, inode table,
//! directory table, fragment table, export table, id table, xattr table,
//! zero padding to 4 KiB. unsquashfs derives each table's extent from the
//! start of the next, so this order is not optional.

pub mod data;
mod dir;
mod inode;
mod tables;
mod xattr;

use crate::metadata::MetadataWriter;
use crate::walk::{cancelled, Kind, Tree};
use crate::{PackError, PackOptions};
use mountfs::codec::{CodecError, Encoder};
use mountfs::squashfs::format::*;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Sequential writer over the output file that knows its position.
pub struct ImageWriter<'f> {
    out: BufWriter<&'f File>,
    pos: u64,
    path: PathBuf,
}

impl<'f> ImageWriter<'f> {
    pub fn new(file: &'f File, path: &Path) -> Self {
        ImageWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            pos: 0,
            path: path.to_path_buf(),
        }
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&mut self, b: &[u8]) -> Result<(), PackError> {
        self.out.write_all(b).map_err(PackError::io(&self.path))?;
        self.pos += b.len() as u64;
        Ok(())
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
                .map_err(PackError::io(&self.path))?;
            self.pos = pos;
        }
        Ok(())
    }

    /// Pads to 4 KiB with zeros, cuts off anything a rewind left beyond the
    /// end, and writes the superblock.
    fn finish(mut self, sb: &Superblock) -> Result<u64, PackError> {
        let padded = self.pos.div_ceil(DEVICE_BLOCK) * DEVICE_BLOCK;
        let pad = vec![0u8; (padded - self.pos) as usize];
        self.write(&pad)?;
        self.out
            .seek(SeekFrom::Start(0))
            .map_err(PackError::io(&self.path))?;
        self.out
            .write_all(&sb.to_bytes())
            .map_err(PackError::io(&self.path))?;
        let file = self
            .out
            .into_inner()
            .map_err(|e| PackError::io(&self.path)(e.into_error()))?;
        file.set_len(padded).map_err(PackError::io(&self.path))?;
        Ok(padded)
    }
}

pub struct Written {
    pub inodes: u64,
    pub fragments: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub dedup_files: u64,
    pub dedup_bytes: u64,
}

fn basic_type(kind: Kind) -> u16 {
    match kind {
        Kind::Dir => INODE_BASIC_DIR,
        Kind::File => INODE_BASIC_FILE,
        Kind::Symlink => INODE_BASIC_SYMLINK,
        Kind::BlockDev => INODE_BASIC_BLKDEV,
        Kind::CharDev => INODE_BASIC_CHRDEV,
        Kind::Fifo => INODE_BASIC_FIFO,
        Kind::Socket => INODE_BASIC_SOCKET,
    }
}

/// Writes the whole image for `tree` into `file` (at offset 0).
pub fn write_image(
    tree: &Tree,
    file: &File,
    path: &Path,
    opts: &PackOptions,
    pool: &rayon::ThreadPool,
) -> Result<Written, PackError> {
    let codec_err = |source: CodecError| PackError::Codec {
        path: path.to_path_buf(),
        source,
    };
    let enc = Encoder::new(opts.compressor, opts.level, opts.block_size).map_err(codec_err)?;
    let mut img = ImageWriter::new(file, path);
    img.write(&[0u8; SUPERBLOCK_SIZE])?;
    let mut flags = FLAG_DUPLICATES | FLAG_EXPORTABLE;
    flags |= if opts.no_fragments {
        FLAG_NO_FRAGMENTS
    } else {
        FLAG_ALWAYS_FRAGMENTS
    };
    if let Some(payload) = enc.options_payload() {
        flags |= FLAG_COMPRESSOR_OPTIONS;
        let mut w = MetadataWriter::new(enc);
        w.write(&payload).map_err(codec_err)?;
        img.write(&w.finish().map_err(codec_err)?.0)?;
    }

    let t = std::time::Instant::now();
    let data = data::write_data(tree, &mut img, enc, opts, pool)?;
    log::debug!("data: {:.2} s", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    if cancelled(opts) {
        return Err(PackError::Interrupted);
    }

    // Inode numbers follow post-order so that every directory's parent
    // number is known; writing happens in the same order.
    let order = tree.post_order();
    let mut numbers = vec![0u32; tree.inodes.len()];
    let mut next = 1u32;
    for &n in &order {
        let ino = tree.nodes[n as usize].inode as usize;
        if numbers[ino] == 0 {
            numbers[ino] = next;
            next += 1;
        }
    }
    let inode_count = next - 1;

    let mut iw = MetadataWriter::new(enc);
    let mut dw = MetadataWriter::new(enc);
    let mut refs = vec![u64::MAX; tree.inodes.len()];
    let mut export = Vec::with_capacity(inode_count as usize * 8);
    let mut buf = Vec::new();
    for &n in &order {
        let ino = tree.nodes[n as usize].inode;
        if refs[ino as usize] != u64::MAX {
            continue; // a further hard link to an inode already written
        }
        let i = &tree.inodes[ino as usize];
        let c = inode::Common {
            mode: i.mode,
            uid_idx: i.uid_idx,
            gid_idx: i.gid_idx,
            mtime: i.mtime,
            number: numbers[ino as usize],
        };
        buf.clear();
        match i.kind {
            Kind::Dir => {
                let entries: Vec<dir::Entry> = tree
                    .children(n)
                    .map(|ch| {
                        let ci = tree.nodes[ch as usize].inode as usize;
                        dir::Entry {
                            name: tree.name(ch),
                            inode_ref: refs[ci],
                            number: numbers[ci],
                            basic_type: basic_type(tree.inodes[ci].kind),
                        }
                    })
                    .collect();
                let l = dir::write_listing(&mut dw, &entries).map_err(codec_err)?;
                let parent = if n == 0 {
                    inode_count + 1 // what mksquashfs records for the root
                } else {
                    numbers[tree.nodes[tree.nodes[n as usize].parent as usize].inode as usize]
                };
                inode::dir(
                    &mut buf,
                    &c,
                    &inode::Dir {
                        start_block: l.start_block,
                        offset: l.offset,
                        file_size: l.size + 3,
                        nlink: i.nlink,
                        parent,
                        xattr: i.xattr,
                        index: &l.index,
                    },
                );
            }
            Kind::File => {
                let loc = &data.locs[ino as usize];
                inode::file(
                    &mut buf,
                    &c,
                    &inode::File {
                        blocks_start: loc.blocks_start,
                        size: i.size,
                        sparse: loc.sparse,
                        nlink: i.nlink,
                        fragment: loc.fragment,
                        frag_offset: loc.frag_offset,
                        xattr: i.xattr,
                        block_sizes: &data.block_sizes
                            [loc.sizes_start..loc.sizes_start + loc.block_count],
                    },
                );
            }
            Kind::Symlink => {
                inode::symlink(&mut buf, &c, i.nlink, tree.symlink_target(ino), i.xattr)
            }
            Kind::BlockDev | Kind::CharDev => inode::special(
                &mut buf,
                &c,
                basic_type(i.kind),
                i.nlink,
                Some(i.rdev),
                i.xattr,
            ),
            Kind::Fifo | Kind::Socket => {
                inode::special(&mut buf, &c, basic_type(i.kind), i.nlink, None, i.xattr)
            }
        }
        let (block, offset) = iw.position();
        let r = make_ref(block, offset);
        refs[ino as usize] = r;
        // Numbers were handed out in this same order, so the export table
        // (indexed by number - 1) fills sequentially.
        debug_assert_eq!(export.len() / 8 + 1, c.number as usize);
        export.extend_from_slice(&r.to_le_bytes());
        iw.write(&buf).map_err(codec_err)?;
    }
    let root_inode = refs[tree.nodes[0].inode as usize];
    drop(numbers);

    let inode_table_start = img.pos();
    img.write(&iw.finish().map_err(codec_err)?.0)?;
    let directory_table_start = img.pos();
    img.write(&dw.finish().map_err(codec_err)?.0)?;

    // Without fragments the table is empty but its start still marks the
    // end of the directory table, which is how unsquashfs sizes it.
    let fragment_table_start = if data.fragment_count > 0 {
        let (b, start) =
            tables::indexed_table(enc, &data.fragment_entries, img.pos()).map_err(codec_err)?;
        img.write(&b)?;
        start
    } else {
        img.pos()
    };
    let (b, export_table_start) =
        tables::indexed_table(enc, &export, img.pos()).map_err(codec_err)?;
    img.write(&b)?;
    let ids: Vec<u8> = tree.ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    let (b, id_table_start) = tables::indexed_table(enc, &ids, img.pos()).map_err(codec_err)?;
    img.write(&b)?;
    let xattr_id_table_start = if tree.xattrs.sets.is_empty() {
        flags |= FLAG_NO_XATTRS;
        INVALID_TABLE
    } else {
        let (b, start) =
            xattr::xattr_table(enc, &tree.xattrs.sets, img.pos()).map_err(codec_err)?;
        img.write(&b)?;
        start
    };
    let bytes_used = img.pos();
    let mod_time = opts.mtime.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
            .unwrap_or(0)
    });
    let sb = Superblock {
        magic: MAGIC,
        inode_count,
        mod_time,
        block_size: opts.block_size,
        fragment_count: data.fragment_count,
        compression_id: opts.compressor as u16,
        block_log: opts.block_size.trailing_zeros() as u16,
        flags,
        id_count: tree.ids.len() as u16,
        version_major: 4,
        version_minor: 0,
        root_inode,
        bytes_used,
        id_table_start,
        xattr_id_table_start,
        inode_table_start,
        directory_table_start,
        fragment_table_start,
        export_table_start,
    };
    let bytes_out = img.finish(&sb)?;
    log::debug!("metadata and tables: {:.2} s", t.elapsed().as_secs_f64());
    Ok(Written {
        inodes: inode_count as u64,
        fragments: data.fragment_count as u64,
        bytes_in: data.bytes_in,
        bytes_out,
        dedup_files: data.dedup_files,
        dedup_bytes: data.dedup_bytes,
    })
}
