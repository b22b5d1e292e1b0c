//! SquashFS 4.0 image writer. Layout (see `packfs_format::squashfs`):
//! superblock, compressor options, data + fragment blocks, inode table,
//! directory table, fragment table, export table, id table, xattr table,
//! zero padding to 4 KiB. unsquashfs derives each table's extent from the
//! start of the next, so this order is not optional.

pub mod data;
mod dir;
mod inode;
mod metadata;
mod spilled;
mod tables;
mod write_behind;
mod writer;
mod xattr;

use self::inode::basic_type;
use self::metadata::{Area, Metadata, MetadataWriter};
use crate::tree::{Kind, Tree};
use crate::{cancelled, PackError, PackOptions};
use packfs_format::codec::{CodecError, Encoder};
use packfs_format::squashfs::metadata::make_ref;
use packfs_format::squashfs::superblock::Superblock;
use packfs_format::squashfs::*;
use std::fs::File;
use std::path::Path;
pub use writer::ImageWriter;

pub struct Written {
    /// Directory entries, the root included.
    pub entries: u64,
    pub inodes: u64,
    pub fragments: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub dedup_files: u64,
    pub dedup_bytes: u64,
    /// A spilled namespace's record for a shard manifest (a tree in memory
    /// makes its own).
    pub record: Option<packfs_format::shards::Shard>,
}

/// What the metadata is written from: a tree in memory, or the sorted runs
/// of a stream's namespace spilled to disk (`crate::record`).
pub(crate) enum Laid<T> {
    Tree(T),
    Spilled(Box<dyn crate::record::Spilled>),
}

/// Writes the whole image for `tree` into `file` (at offset 0), in the
/// phases below: [`start_image`] (superblock placeholder, compressor
/// options), `data::write_data` (file data and fragments), [`number_inodes`],
/// [`encode_metadata`] (inode and directory tables, export entries),
/// [`write_tables`], then the superblock ([`superblock`]) over the
/// placeholder. `path` is the final output name, for messages only.
pub fn write_image(
    tree: &Tree,
    file: &File,
    path: &Path,
    opts: &PackOptions,
    pool: &rayon::ThreadPool,
) -> Result<Written, PackError> {
    write_image_with(file, path, opts, |img, enc| {
        let data = data::write_data(tree, img, enc, opts, pool)?;
        Ok((Laid::Tree(tree), data))
    })
    .map(|(w, _)| w)
}

/// [`write_image`] with the data phase given: `data` writes the file data
/// and fragments into the image and returns the tree they belong to (or
/// the runs of a spilled namespace), whose file inodes index the
/// [`data::DataOutput`] it returns. A stream's tree is known only once its
/// data is written. Returns the tree too.
pub(crate) fn write_image_with<T: std::borrow::Borrow<Tree>>(
    file: &File,
    path: &Path,
    opts: &PackOptions,
    data: impl FnOnce(&mut ImageWriter, Encoder) -> Result<(Laid<T>, data::DataOutput), PackError>,
) -> Result<(Written, Laid<T>), PackError> {
    let codec_err = |source: CodecError| PackError::Codec {
        path: path.to_path_buf(),
        source,
    };
    opts.xz
        .check()
        .map_err(|m| PackError::InvalidOption(format!("xz: {m}")))?;
    let enc = Encoder {
        xz: opts.xz,
        ..Encoder::new(opts.compressor, opts.level, opts.block_size).map_err(codec_err)?
    };
    let mut img = ImageWriter::new(file, path)
        .followed(opts.follow.clone())
        .hashed(opts.checksums);
    let mut flags = start_image(&mut img, enc, opts).map_err(|e| e.into_pack(path))?;

    let t = std::time::Instant::now();
    let (laid, data) = data(&mut img, enc)?;
    log::debug!("data: {:.2} s", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    if cancelled(opts) {
        return Err(PackError::Interrupted);
    }

    let mut streamed = None;
    let (meta, inode_count, ids, xattrs, image_time, entries) = match &laid {
        Laid::Tree(tree) => {
            let tree: &Tree = tree.borrow();
            let order = tree.post_order();
            let (numbers, inode_count) = number_inodes(tree, &order);
            let meta = encode_metadata(tree, &order, &numbers, inode_count, &data, enc)
                .map_err(codec_err)?;
            drop((order, numbers));
            let entries = tree.nodes.len() as u64;
            (
                meta,
                inode_count,
                &tree.ids[..],
                &tree.xattrs,
                tree.image_time,
                entries,
            )
        }
        Laid::Spilled(runs) => {
            let s = spilled::encode(runs.as_ref(), &data, enc, opts, path)?;
            let (ids, xattrs, _) = &*streamed.insert((s.ids, s.xattrs, s.record));
            (
                s.meta,
                s.inode_count,
                &ids[..],
                xattrs,
                Some(s.image_time),
                s.entries,
            )
        }
    };
    let tables =
        write_tables(&mut img, enc, ids, xattrs, &data, meta).map_err(|e| e.into_pack(path))?;
    if tables.xattr_id_table_start == INVALID_TABLE {
        flags |= FLAG_NO_XATTRS;
    }
    let sb = superblock(
        opts,
        flags,
        inode_count,
        (image_time, ids.len() as u16),
        &data,
        &tables,
        img.pos(),
    );
    let bytes_out = img.finish(&sb)?;
    log::debug!("metadata and tables: {:.2} s", t.elapsed().as_secs_f64());
    let record = streamed.map(|(_, _, record)| record);
    let w = Written {
        entries,
        inodes: inode_count as u64,
        fragments: data.fragment_count as u64,
        bytes_in: data.bytes_in,
        bytes_out,
        dedup_files: data.dedup_files,
        dedup_bytes: data.dedup_bytes,
        record,
    };
    Ok((w, laid))
}

/// A phase's failure: writing the image or encoding a block.
enum PhaseError {
    Pack(PackError),
    Codec(CodecError),
}

impl PhaseError {
    fn into_pack(self, path: &Path) -> PackError {
        match self {
            PhaseError::Pack(e) => e,
            PhaseError::Codec(source) => PackError::Codec {
                path: path.to_path_buf(),
                source,
            },
        }
    }
}

impl From<PackError> for PhaseError {
    fn from(e: PackError) -> Self {
        PhaseError::Pack(e)
    }
}

impl From<CodecError> for PhaseError {
    fn from(e: CodecError) -> Self {
        PhaseError::Codec(e)
    }
}

/// Reserves the superblock and writes the compressor options when the codec
/// needs them. Returns the superblock flags known so far.
fn start_image(img: &mut ImageWriter, enc: Encoder, opts: &PackOptions) -> Result<u16, PhaseError> {
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
        w.write(&payload)?;
        img.write_meta(&w.finish()?.0)?;
    }
    Ok(flags)
}

/// Inode numbers, indexed by the tree's inode index, and their count.
/// Numbers follow post-order so that every directory's parent number is
/// known when it is written; [`encode_metadata`] writes in the same order.
/// Hard links share their inode's number.
fn number_inodes(tree: &Tree, post_order: &[u32]) -> (Vec<u32>, u32) {
    let mut numbers = vec![0u32; tree.inodes.len()];
    let mut next = 1u32;
    for &n in post_order {
        let ino = tree.nodes[n as usize].inode as usize;
        if numbers[ino] == 0 {
            numbers[ino] = next;
            next += 1;
        }
    }
    (numbers, next - 1)
}

/// Encodes every inode (once per hard-linked inode) and every directory
/// listing, in post-order: a directory's children are written before it,
/// so their references are known when its listing is built.
fn encode_metadata(
    tree: &Tree,
    post_order: &[u32],
    numbers: &[u32],
    inode_count: u32,
    data: &data::DataOutput,
    enc: Encoder,
) -> Result<Metadata, CodecError> {
    let mut m = MetadataEncoder {
        tree,
        numbers,
        inode_count,
        data,
        inodes: MetadataWriter::new(enc),
        dirs: MetadataWriter::new(enc),
        export: Vec::with_capacity(inode_count as usize * 8),
    };
    let mut buf = Vec::new();
    for &n in post_order {
        let ino = tree.nodes[n as usize].inode;
        if m.written(ino) {
            continue; // a further hard link to an inode already written
        }
        buf.clear();
        m.encode_inode(n, &mut buf)?;
        m.add_inode(ino, &buf)?;
    }
    let root_inode = m.inode_ref(tree.nodes[0].inode);
    Ok(Metadata {
        inodes: Area::Mem(m.inodes.finish()?.0),
        dirs: Area::Mem(m.dirs.finish()?.0),
        export: Area::Mem(m.export),
        root_inode,
    })
}

/// [`encode_metadata`]'s state: the inode and directory tables being
/// filled, and the references of the inodes written so far.
struct MetadataEncoder<'a> {
    tree: &'a Tree,
    numbers: &'a [u32],
    inode_count: u32,
    data: &'a data::DataOutput,
    inodes: MetadataWriter,
    dirs: MetadataWriter,
    /// Inode references by inode number - 1: the export table, and the
    /// references of the inodes written so far (numbers follow the order
    /// they are written in), so there is no second table of them by inode
    /// index.
    export: Vec<u8>,
}

impl MetadataEncoder<'_> {
    /// Whether inode `ino` is in the inode table already.
    fn written(&self, ino: u32) -> bool {
        self.numbers[ino as usize] as usize <= self.export.len() / 8
    }

    /// The reference of inode `ino`, which is written.
    fn inode_ref(&self, ino: u32) -> u64 {
        let at = (self.numbers[ino as usize] as usize - 1) * 8;
        u64::from_le_bytes(self.export[at..at + 8].try_into().expect("8 bytes"))
    }

    /// Encodes the inode of node `n` into `buf` (a directory's listing is
    /// written to the directory table first).
    fn encode_inode(&mut self, n: u32, buf: &mut Vec<u8>) -> Result<(), CodecError> {
        let tree = self.tree;
        let ino = tree.nodes[n as usize].inode;
        let i = &tree.inodes[ino as usize];
        let c = inode::Common {
            mode: i.mode,
            uid_idx: i.uid_idx,
            gid_idx: i.gid_idx,
            mtime: i.mtime,
            number: self.numbers[ino as usize],
        };
        match i.kind {
            Kind::Dir => self.dir_inode(n, &c, buf)?,
            Kind::File => self.file_inode(ino, &c, buf),
            Kind::Symlink => inode::symlink(buf, &c, i.nlink, tree.symlink_target(ino), i.xattr),
            Kind::BlockDev | Kind::CharDev => {
                inode::special(buf, &c, basic_type(i.kind), i.nlink, Some(i.rdev), i.xattr)
            }
            Kind::Fifo | Kind::Socket => {
                inode::special(buf, &c, basic_type(i.kind), i.nlink, None, i.xattr)
            }
        }
        Ok(())
    }

    /// Writes the listing of directory node `n` and encodes its inode.
    fn dir_inode(
        &mut self,
        n: u32,
        c: &inode::Common,
        buf: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let (tree, numbers) = (self.tree, self.numbers);
        let i = &tree.inodes[tree.nodes[n as usize].inode as usize];
        let entries: Vec<dir::Entry> = tree
            .children(n)
            .map(|ch| {
                let ci = tree.nodes[ch as usize].inode as usize;
                dir::Entry {
                    name: tree.name(ch),
                    inode_ref: self.inode_ref(ci as u32),
                    number: numbers[ci],
                    basic_type: basic_type(tree.inodes[ci].kind),
                }
            })
            .collect();
        let l = dir::write_listing(&mut self.dirs, &entries)?;
        let parent = if n == 0 {
            self.inode_count + 1 // what mksquashfs records for the root
        } else {
            numbers[tree.nodes[tree.nodes[n as usize].parent as usize].inode as usize]
        };
        inode::dir(
            buf,
            c,
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
        Ok(())
    }

    /// Encodes the inode of regular file `ino`, whose data is written.
    fn file_inode(&self, ino: u32, c: &inode::Common, buf: &mut Vec<u8>) {
        let i = &self.tree.inodes[ino as usize];
        let loc = self.data.loc(ino);
        inode::file(
            buf,
            c,
            &inode::File {
                blocks_start: loc.blocks_start,
                size: i.size,
                sparse: loc.sparse,
                nlink: i.nlink,
                fragment: loc.fragment,
                frag_offset: loc.frag_offset,
                xattr: i.xattr,
                block_sizes: &self.data.block_sizes
                    [loc.sizes_start..loc.sizes_start + loc.block_count],
            },
        );
    }

    /// Appends inode `ino`, encoded in `buf`, to the inode table, and
    /// records its reference.
    fn add_inode(&mut self, ino: u32, buf: &[u8]) -> Result<(), CodecError> {
        let (block, offset) = self.inodes.position();
        let r = make_ref(block, offset);
        // Numbers were handed out in this same order, so the export table
        // (indexed by number - 1) fills sequentially.
        debug_assert_eq!(
            self.export.len() / 8 + 1,
            self.numbers[ino as usize] as usize
        );
        self.export.extend_from_slice(&r.to_le_bytes());
        self.inodes.write(buf)
    }
}

/// Where [`write_tables`] put each table (absolute positions, as the
/// superblock records them).
struct TablePositions {
    root_inode: u64,
    inode_table_start: u64,
    directory_table_start: u64,
    fragment_table_start: u64,
    export_table_start: u64,
    id_table_start: u64,
    /// [`INVALID_TABLE`] when no entry has xattrs.
    xattr_id_table_start: u64,
}

/// Writes the metadata areas and lookup tables after the data, in the
/// order unsquashfs expects (it sizes each table by the start of the next).
fn write_tables(
    img: &mut ImageWriter,
    enc: Encoder,
    ids: &[u32],
    xattrs: &crate::xattrs::XattrSets,
    data: &data::DataOutput,
    meta: Metadata,
) -> Result<TablePositions, PhaseError> {
    let inode_table_start = img.pos();
    write_meta_area(img, &meta.inodes)?;
    let directory_table_start = img.pos();
    write_meta_area(img, &meta.dirs)?;

    // Without fragments the table is empty but its start still marks the
    // end of the directory table, which is how unsquashfs sizes it.
    let fragment_table_start = if data.fragment_count > 0 {
        let (b, start) = tables::indexed_table(enc, &data.fragment_entries, img.pos())?;
        write_table(img, &b, start)?;
        start
    } else {
        img.pos()
    };
    let export_table_start = write_export(img, enc, &meta.export)?;
    let ids: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    let (b, id_table_start) = tables::indexed_table(enc, &ids, img.pos())?;
    write_table(img, &b, id_table_start)?;
    let xattr_id_table_start = if xattrs.sets.is_empty() {
        INVALID_TABLE
    } else {
        let (b, start) = xattr::xattr_table(enc, &xattrs.sets, img.pos())?;
        write_table(img, &b, start)?;
        start
    };
    Ok(TablePositions {
        root_inode: meta.root_inode,
        inode_table_start,
        directory_table_start,
        fragment_table_start,
        export_table_start,
        id_table_start,
        xattr_id_table_start,
    })
}

/// Bytes of a table read from its file at a time.
const COPY_BYTES: usize = 1 << 20;

/// Writes a run of metadata blocks; from a file, a bounded buffer at a
/// time, cut between blocks (each is hashed as a piece).
fn write_meta_area(img: &mut ImageWriter, area: &Area) -> Result<(), PhaseError> {
    let f = match area {
        Area::Mem(b) => return Ok(img.write_meta(b)?),
        Area::File(f) => f,
    };
    let mut buf = vec![0u8; COPY_BYTES];
    let (mut have, mut at) = (0, 0u64);
    loop {
        let n = f.read_at(at, &mut buf[have..])?;
        at += n as u64;
        have += n;
        let mut end = 0;
        while end + 2 <= have {
            let h = metadata_header(&buf[end..end + 2]);
            if end + 2 + h > have {
                break;
            }
            end += 2 + h;
        }
        if n == 0 && end == 0 {
            // What is left is not a whole block: never written so, but
            // copied as it is rather than lost.
            img.write(&buf[..have])?;
            return Ok(());
        }
        img.write_meta(&buf[..end])?;
        buf.copy_within(end..have, 0);
        have -= end;
    }
}

/// The stored length a metadata block's header gives.
fn metadata_header(h: &[u8]) -> usize {
    packfs_format::squashfs::metadata::MetaHeader::decode([h[0], h[1]]).stored_len as usize
}

/// Writes the export table; from a file, a bounded buffer at a time, with
/// the bytes [`tables::indexed_table`] would give. Returns its start.
fn write_export(img: &mut ImageWriter, enc: Encoder, export: &Area) -> Result<u64, PhaseError> {
    let f = match export {
        Area::Mem(b) => {
            let (b, start) = tables::indexed_table(enc, b, img.pos())?;
            write_table(img, &b, start)?;
            return Ok(start);
        }
        Area::File(f) => f,
    };
    let first = img.pos();
    let mut w = MetadataWriter::new(enc);
    let mut buf = vec![0u8; COPY_BYTES];
    let mut at = 0u64;
    loop {
        let n = f.read_at(at, &mut buf)?;
        if n == 0 {
            break;
        }
        at += n as u64;
        w.write(&buf[..n])?;
        w.drain(|b| img.write_meta(b))?;
    }
    let (rest, starts) = w.finish()?;
    img.write_meta(&rest)?;
    let start = img.pos();
    let index: Vec<u8> = starts
        .iter()
        .flat_map(|s| (first + s).to_le_bytes())
        .collect();
    img.write_piece(&index)?;
    Ok(start)
}

/// Writes a table as [`tables::indexed_table`] and [`xattr::xattr_table`]
/// lay it out: metadata blocks, then from `index_pos` on what a reader reads
/// in one piece (the index; for xattrs the header and the index).
fn write_table(img: &mut ImageWriter, b: &[u8], index_pos: u64) -> Result<(), PhaseError> {
    let (blocks, index) = b.split_at((index_pos - img.pos()) as usize);
    img.write_meta(blocks)?;
    img.write_piece(index)?;
    Ok(())
}

/// The superblock for an image whose tables are at `t` and whose used
/// bytes end at `bytes_used`.
fn superblock(
    opts: &PackOptions,
    flags: u16,
    inode_count: u32,
    (image_time, id_count): (Option<u32>, u16),
    data: &data::DataOutput,
    t: &TablePositions,
    bytes_used: u64,
) -> Superblock {
    let mod_time = opts.mtime.or(image_time).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
            .unwrap_or(0)
    });
    Superblock {
        magic: MAGIC,
        inode_count,
        mod_time,
        block_size: opts.block_size,
        fragment_count: data.fragment_count,
        compression_id: opts.compressor.id(),
        block_log: opts.block_size.trailing_zeros() as u16,
        flags,
        id_count,
        version_major: 4,
        version_minor: 0,
        root_inode: t.root_inode,
        bytes_used,
        id_table_start: t.id_table_start,
        xattr_id_table_start: t.xattr_id_table_start,
        inode_table_start: t.inode_table_start,
        directory_table_start: t.directory_table_start,
        fragment_table_start: t.fragment_table_start,
        export_table_start: t.export_table_start,
    }
}
