//! The inode and directory tables of a spilled namespace, written in one
//! pass over its merged runs (see `crate::archive::spill`).
//!
//! The entries come in depth-first pre-order, each directory's sorted. A
//! stack holds the directories on the way down, each with its own listing
//! only; when the stream leaves a directory its listing goes to the
//! directory table and its inode to the inode table, after its entries'
//! inodes, as `encode_metadata` writes a tree (post-order). Inodes are
//! numbered in pre-order instead: a directory's number is known when its
//! subdirectories' inodes record it as their parent. The export table is
//! then filled by number, not in write order.
//!
//! The tables grow with the entry count, so they wait in files of the
//! spill directory, not in memory, until the image takes them; so do the
//! files' locations the inodes are written from (`super::data::LocFile`).

use super::data::{DataOutput, LocLookup};
use super::dir;
use super::inode::{self, basic_type, Common};
use super::metadata::{Area, AreaFile, Metadata, MetadataWriter};
use crate::record::{Rec, Spilled, NO_LINK, NO_XATTRS};
use crate::tree::Kind;
use crate::xattrs::XattrSets;
use crate::{PackError, PackOptions};
use packfs_format::codec::{CodecError, Encoder};
use packfs_format::shards::{encode_path, Range, Shard};
use packfs_format::squashfs::inode::encode_dev;
use packfs_format::squashfs::metadata::make_ref;
use packfs_format::squashfs::INVALID_XATTR;
use std::collections::HashMap;
use std::path::Path;

/// What the pass wrote and found.
pub(crate) struct Streamed {
    pub meta: Metadata,
    pub inode_count: u32,
    pub ids: Vec<u32>,
    pub xattrs: XattrSets,
    /// The newest mtime of an inode, as stored.
    pub image_time: u32,
    /// Directory entries, the root included.
    pub entries: u64,
    /// The image's record for a shard manifest.
    pub record: Shard,
}

/// A directory on the way down.
struct Open {
    rec: Rec,
    number: u32,
    /// Its entries so far: name, inode reference, number, basic type.
    listing: Vec<(Vec<u8>, u64, u32, u16)>,
    subdirs: u32,
    /// The newest mtime among its entries (an implied directory's own).
    newest: i64,
}

struct Pass<'a> {
    data: &'a DataOutput,
    locs: LocLookup<'a>,
    runs: &'a dyn Spilled,
    sets: &'a XattrSets,
    all_root: bool,
    mtime: Option<u32>,
    inodes: Table,
    dirs: Table,
    /// Inode references by number - 1, 8 bytes each, as the export table
    /// stores them.
    export: Export,
    ids: Vec<u32>,
    id_index: HashMap<u32, u16>,
    xattrs: XattrSets,
    /// Hard-linked inodes written: number, reference, basic type.
    links: HashMap<u64, (u32, u64, u16)>,
    stack: Vec<Open>,
    image_time: u32,
    clamped: u64,
    files: u64,
    bytes: u64,
    buf: Vec<u8>,
}

/// Writes the tables of the entries `runs` hold, whose file data `data`
/// located. `path` names the image in messages.
pub(crate) fn encode(
    runs: &dyn Spilled,
    data: &DataOutput,
    enc: Encoder,
    opts: &PackOptions,
    path: &Path,
) -> Result<Streamed, PackError> {
    let mut merged = runs.entries()?;
    let mut p = Pass {
        data,
        locs: data.loc_lookup(),
        runs,
        sets: runs.xattr_sets(),
        all_root: opts.all_root,
        mtime: opts.mtime,
        inodes: Table::new(enc, runs.dir())?,
        dirs: Table::new(enc, runs.dir())?,
        export: Export::new(runs.dir())?,
        ids: Vec::new(),
        id_index: HashMap::new(),
        xattrs: XattrSets::default(),
        links: HashMap::new(),
        stack: Vec::new(),
        image_time: 0,
        clamped: 0,
        files: 0,
        bytes: 0,
        buf: Vec::new(),
    };
    let mut entries = 0u64;
    // The record's range: its first leaf (the first entry that is not a
    // directory leading to the next) and its last entry.
    let mut prev: Option<(Vec<u8>, usize, bool)> = None;
    let mut first_leaf = None;
    let too_many = || PackError::TooManyIds {
        path: path.to_path_buf(),
    };
    while let Some(rec) = merged.next_entry()? {
        let depth = rec.depth();
        if let Some((prev_path, prev_depth, prev_dir)) = prev.take() {
            if first_leaf.is_none() && !(prev_dir && depth == prev_depth + 1) {
                first_leaf = Some(prev_path);
            }
        }
        // The record's range and count leave out the root, as
        // `Tree::whole_record`'s do.
        if depth > 0 {
            prev = Some((rec.display(), depth, rec.kind == Kind::Dir));
        }
        entries += 1;
        if entries.is_multiple_of(1 << 16) && crate::cancelled(opts) {
            return Err(PackError::Interrupted);
        }
        while p.stack.len() > depth {
            p.close(None).map_err(|e| e.into_pack(path))?;
        }
        if depth > 0 && p.stack.is_empty() {
            unreachable!("the merge gives the root first");
        }
        if rec.kind == Kind::Dir {
            let number = p.number();
            p.stack.push(Open {
                rec,
                number,
                listing: Vec::new(),
                subdirs: 0,
                newest: 0,
            });
            continue;
        }
        let (number, r, ty) = match p.links.get(&rec.link) {
            Some(&known) => known,
            None => {
                let number = p.number();
                let (r, ty) = p.leaf(&rec, number).map_err(|e| e.into_pack(path))?;
                if rec.link != NO_LINK {
                    p.links.insert(rec.link, (number, r, ty));
                }
                (number, r, ty)
            }
        };
        let top = p.stack.last_mut().expect("an open directory");
        top.newest = top.newest.max(rec.mtime);
        top.listing.push((rec.name().to_vec(), r, number, ty));
    }
    let range_paths = prev.take().map(|(last, _, _)| {
        let first = first_leaf.take().unwrap_or_else(|| last.clone());
        (first, last)
    });
    let inode_count = p.export.count;
    let mut root_inode = 0;
    while !p.stack.is_empty() {
        root_inode = p
            .close(Some(inode_count + 1))
            .map_err(|e| e.into_pack(path))?;
    }
    if p.ids.len() > u16::MAX as usize {
        return Err(too_many());
    }
    if p.clamped > 0 {
        log::warn!(
            "{} entries have an mtime outside the range an image stores (1970 to 2106): clamped",
            p.clamped
        );
    }
    let range = range_paths.map(|(first, last)| Range {
        first: encode_path(&first),
        last: encode_path(&last),
    });
    let record = Shard {
        index: 0,
        file: String::new(),
        size: 0,
        blake3: String::new(),
        entries: entries.saturating_sub(1),
        files: p.files,
        bytes: p.bytes,
        range,
    };
    Ok(Streamed {
        meta: Metadata {
            inodes: p.inodes.finish().map_err(|e| e.into_pack(path))?,
            dirs: p.dirs.finish().map_err(|e| e.into_pack(path))?,
            export: p.export.finish()?,
            root_inode,
        },
        inode_count,
        ids: p.ids,
        xattrs: p.xattrs,
        image_time: p.mtime.unwrap_or(p.image_time),
        entries,
        record,
    })
}

impl Pass<'_> {
    /// The next inode number.
    fn number(&mut self) -> u32 {
        self.export.count += 1;
        self.export.count
    }

    /// The fields every inode of `rec` starts with; `mtime` as recorded.
    fn common(&mut self, rec: &Rec, mtime: i64, number: u32) -> Result<Common, PassError> {
        let (uid, gid) = match self.all_root {
            true => (0, 0),
            false => (rec.uid, rec.gid),
        };
        let t = match self.mtime {
            Some(t) => t,
            None => {
                if !(0..=u32::MAX as i64).contains(&mtime) {
                    self.clamped += 1;
                }
                mtime.clamp(0, u32::MAX as i64) as u32
            }
        };
        self.image_time = self.image_time.max(t);
        Ok(Common {
            mode: rec.mode & 0o7777,
            uid_idx: self.id(uid)?,
            gid_idx: self.id(gid)?,
            mtime: t,
            number,
        })
    }

    fn id(&mut self, id: u32) -> Result<u16, PassError> {
        if let Some(&i) = self.id_index.get(&id) {
            return Ok(i);
        }
        if self.ids.len() >= u16::MAX as usize {
            return Err(PassError::TooManyIds);
        }
        let i = self.ids.len() as u16;
        self.ids.push(id);
        self.id_index.insert(id, i);
        Ok(i)
    }

    fn xattr(&mut self, rec: &Rec) -> u32 {
        match rec.xattrs {
            NO_XATTRS => INVALID_XATTR,
            x => self
                .xattrs
                .intern(self.sets.sets[x as usize].clone())
                .unwrap_or(INVALID_XATTR),
        }
    }

    /// Writes the inode of `rec`, not a directory, as `number`; returns
    /// its reference and basic type.
    fn leaf(&mut self, rec: &Rec, number: u32) -> Result<(u64, u16), PassError> {
        let c = self.common(rec, rec.mtime, number)?;
        let nlink = self.runs.link_names(rec.link).unwrap_or(rec.nlink);
        let xattr = self.xattr(rec);
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        match rec.kind {
            Kind::File => {
                let loc = self.locs.get(rec.data).map_err(PassError::Pack)?;
                self.files += 1;
                self.bytes += rec.size;
                inode::file(
                    &mut buf,
                    &c,
                    &inode::File {
                        blocks_start: loc.blocks_start,
                        size: rec.size,
                        sparse: loc.sparse,
                        nlink,
                        fragment: loc.fragment,
                        frag_offset: loc.frag_offset,
                        xattr,
                        block_sizes: &self.data.block_sizes
                            [loc.sizes_start..loc.sizes_start + loc.block_count],
                    },
                );
            }
            Kind::Symlink => inode::symlink(&mut buf, &c, nlink, &rec.target, xattr),
            Kind::BlockDev | Kind::CharDev => {
                let rdev = encode_dev(rec.dev.0, rec.dev.1);
                inode::special(&mut buf, &c, basic_type(rec.kind), nlink, Some(rdev), xattr)
            }
            Kind::Fifo | Kind::Socket => {
                inode::special(&mut buf, &c, basic_type(rec.kind), nlink, None, xattr)
            }
            Kind::Dir => unreachable!("directories are written when closed"),
        }
        let r = self.add(number, &buf)?;
        self.buf = buf;
        Ok((r, basic_type(rec.kind)))
    }

    /// Appends an encoded inode numbered `number`; returns its reference.
    fn add(&mut self, number: u32, buf: &[u8]) -> Result<u64, PassError> {
        let (block, offset) = self.inodes.w.position();
        let r = make_ref(block, offset);
        self.export.set(number, r).map_err(PassError::Pack)?;
        self.inodes.write(buf)?;
        Ok(r)
    }

    /// Writes the listing and inode of the innermost open directory and
    /// adds it to its parent's listing; `root_parent` is what the root
    /// records as its parent. Returns the inode's reference.
    fn close(&mut self, root_parent: Option<u32>) -> Result<u64, PassError> {
        let d = self.stack.pop().expect("an open directory");
        let entries: Vec<dir::Entry> = d
            .listing
            .iter()
            .map(|(name, r, number, ty)| dir::Entry {
                name,
                inode_ref: *r,
                number: *number,
                basic_type: *ty,
            })
            .collect();
        let l = dir::write_listing(&mut self.dirs.w, &entries)?;
        drop(entries);
        self.dirs.spill()?;
        let mtime = if d.rec.explicit {
            d.rec.mtime
        } else {
            d.newest
        };
        let c = self.common(&d.rec, mtime, d.number)?;
        let xattr = self.xattr(&d.rec);
        let parent = match self.stack.last() {
            Some(p) => p.number,
            None => root_parent.unwrap_or(0),
        };
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        inode::dir(
            &mut buf,
            &c,
            &inode::Dir {
                start_block: l.start_block,
                offset: l.offset,
                file_size: l.size + 3,
                // At least what a shard keeps of its source (`Entry::size`).
                nlink: (2 + d.subdirs).max(d.rec.size.min(u32::MAX as u64) as u32),
                parent,
                xattr,
                index: &l.index,
            },
        );
        let r = self.add(d.number, &buf)?;
        self.buf = buf;
        if let Some(p) = self.stack.last_mut() {
            p.subdirs += 1;
            p.newest = p.newest.max(mtime);
            p.listing
                .push((d.rec.name().to_vec(), r, d.number, basic_type(Kind::Dir)));
        }
        Ok(r)
    }
}

/// Bytes of finished blocks a [`Table`] holds before it writes them out.
const TABLE_HELD: usize = 1 << 20;

/// The inode or directory table, its finished blocks written to a file of
/// the spill directory as they come: an image of a spilled namespace has
/// more entries than its tables would fit in its budget.
struct Table {
    w: MetadataWriter,
    file: AreaFile,
}

impl Table {
    fn new(enc: Encoder, dir: &Path) -> Result<Table, PackError> {
        Ok(Table {
            w: MetadataWriter::new(enc),
            file: AreaFile::create(dir)?,
        })
    }

    fn write(&mut self, b: &[u8]) -> Result<(), PassError> {
        self.w.write(b)?;
        self.spill()
    }

    /// Writes out the finished blocks once they are many.
    fn spill(&mut self) -> Result<(), PassError> {
        if self.w.finished_len() < TABLE_HELD {
            return Ok(());
        }
        let file = &mut self.file;
        self.w.drain(|b| file.append(b)).map_err(PassError::Pack)
    }

    fn finish(mut self) -> Result<Area, PassError> {
        let (rest, _) = self.w.finish()?;
        self.file.append(&rest).map_err(PassError::Pack)?;
        Ok(Area::File(self.file))
    }
}

/// References the export table gathers before it writes them.
const EXPORT_HELD: usize = 1 << 16;

/// The export table, in a file of the spill directory: references come
/// out of number order (a directory's after its entries'), so they are
/// gathered, sorted and written in runs of consecutive numbers.
struct Export {
    /// Inodes numbered so far.
    count: u32,
    held: Vec<(u32, u64)>,
    file: AreaFile,
    buf: Vec<u8>,
}

impl Export {
    fn new(dir: &Path) -> Result<Export, PackError> {
        Ok(Export {
            count: 0,
            held: Vec::with_capacity(EXPORT_HELD),
            file: AreaFile::create(dir)?,
            buf: Vec::new(),
        })
    }

    /// Records the reference of inode `number`.
    fn set(&mut self, number: u32, r: u64) -> Result<(), PackError> {
        self.held.push((number, r));
        if self.held.len() >= EXPORT_HELD {
            self.write_held()?;
        }
        Ok(())
    }

    fn write_held(&mut self) -> Result<(), PackError> {
        self.held.sort_unstable_by_key(|&(n, _)| n);
        let mut i = 0;
        while i < self.held.len() {
            let first = self.held[i].0;
            self.buf.clear();
            while i < self.held.len() && self.held[i].0 == first + (self.buf.len() / 8) as u32 {
                self.buf.extend_from_slice(&self.held[i].1.to_le_bytes());
                i += 1;
            }
            let at = (first as u64 - 1) * 8;
            self.file.write_at(&self.buf, at)?;
        }
        self.held.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<Area, PackError> {
        self.write_held()?;
        Ok(Area::File(self.file))
    }
}

/// A failure of the pass: a block's encoding, the id table's size, or
/// the spill directory's files.
enum PassError {
    Codec(CodecError),
    TooManyIds,
    Pack(PackError),
}

impl From<CodecError> for PassError {
    fn from(e: CodecError) -> Self {
        PassError::Codec(e)
    }
}

impl PassError {
    fn into_pack(self, path: &Path) -> PackError {
        match self {
            PassError::Codec(source) => PackError::Codec {
                path: path.to_path_buf(),
                source,
            },
            PassError::TooManyIds => PackError::TooManyIds {
                path: path.to_path_buf(),
            },
            PassError::Pack(e) => e,
        }
    }
}
