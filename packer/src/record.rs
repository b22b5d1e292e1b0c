//! One entry of a namespace spilled to disk, as a run stores it, and what
//! the metadata pass asks of such a namespace: the layer between the
//! reader that spills (`crate::archive::spill`) and the writer of the
//! tables (`crate::squashfs`), which know nothing of each other.

use crate::tree::Kind;
use crate::xattrs::XattrSets;
use crate::PackError;
use std::io::Read;

/// A namespace spilled to sorted runs.
pub(crate) trait Spilled {
    /// Its entries, each once, in depth-first pre-order with each
    /// directory's entries sorted by name, the root first and directories a
    /// path implies made.
    fn entries(&self) -> Result<Box<dyn Entries + '_>, PackError>;
    /// The xattr sets [`Rec::xattrs`] indexes.
    fn xattr_sets(&self) -> &XattrSets;
    /// The names of the inode of identity [`Rec::link`], when its names are
    /// in several runs (no one record then knows them all).
    fn link_names(&self, link: u64) -> Option<u32>;
    /// The directory the runs are in, where the tables written from them
    /// wait too.
    fn dir(&self) -> &std::path::Path;
}

/// [`Spilled::entries`].
pub(crate) trait Entries {
    /// The next entry, `None` after the last.
    fn next_entry(&mut self) -> Result<Option<Rec>, PackError>;
}

/// [`Rec::link`] of an inode with one name.
pub(crate) const NO_LINK: u64 = u64::MAX;

/// No xattr set: [`Rec::xattrs`].
pub(crate) const NO_XATTRS: u32 = u32::MAX;

/// The separator of a record's path components: below every byte a name
/// may hold, so that comparing paths as bytes compares them component by
/// component.
pub(crate) const SEP: u8 = 0;

/// One entry as a run stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rec {
    /// Components joined by [`SEP`]; empty for the root.
    pub path: Vec<u8>,
    pub kind: Kind,
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    /// Files: their size. Directories: the link count at least (`Entry::size`).
    pub size: u64,
    /// Devices: (major, minor).
    pub dev: (u32, u32),
    /// Symlinks: the target.
    pub target: Vec<u8>,
    /// Index into [`Runs::xattrs`], or [`NO_XATTRS`].
    pub xattrs: u32,
    /// Files: the data number.
    pub data: u32,
    /// Given by a member, not implied by a path.
    pub explicit: bool,
    pub source: u16,
    /// Hard-linked inodes: an identity shared by all their names.
    pub link: u64,
    /// Names of the inode.
    pub nlink: u32,
}

impl Rec {
    /// A directory a path implies.
    pub(crate) fn implied_dir(path: Vec<u8>, source: u16) -> Rec {
        Rec {
            path,
            kind: Kind::Dir,
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime: 0,
            size: 0,
            dev: (0, 0),
            target: Vec::new(),
            xattrs: NO_XATTRS,
            data: u32::MAX,
            explicit: false,
            source,
            link: NO_LINK,
            nlink: 1,
        }
    }

    /// The last component of the path.
    pub(crate) fn name(&self) -> &[u8] {
        match self.path.iter().rposition(|&b| b == SEP) {
            Some(i) => &self.path[i + 1..],
            None => &self.path,
        }
    }

    /// Components on the path (0 for the root).
    pub(crate) fn depth(&self) -> usize {
        if self.path.is_empty() {
            0
        } else {
            1 + self.path.iter().filter(|&&b| b == SEP).count()
        }
    }

    /// The path with `/` between components, for messages and manifests.
    pub(crate) fn display(&self) -> Vec<u8> {
        self.path
            .iter()
            .map(|&b| if b == SEP { b'/' } else { b })
            .collect()
    }

    /// Bytes [`Rec::encode`] gives; [`Rec::link`] is in its last 12.
    pub(crate) fn encoded_len(&self) -> u64 {
        (4 + self.path.len() + 39 + self.target.len() + 23) as u64
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.path.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.path);
        out.push(kind_code(self.kind));
        out.extend_from_slice(&self.mode.to_le_bytes());
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        out.extend_from_slice(&self.mtime.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.dev.0.to_le_bytes());
        out.extend_from_slice(&self.dev.1.to_le_bytes());
        out.extend_from_slice(&(self.target.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.target);
        out.extend_from_slice(&self.xattrs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out.push(self.explicit as u8);
        out.extend_from_slice(&self.source.to_le_bytes());
        out.extend_from_slice(&self.link.to_le_bytes());
        out.extend_from_slice(&self.nlink.to_le_bytes());
    }

    /// The next record of `r`, `None` at its end.
    pub(crate) fn decode(r: &mut impl Read) -> std::io::Result<Option<Rec>> {
        let mut len = [0u8; 4];
        match r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let mut path = vec![0u8; u32::from_le_bytes(len) as usize];
        r.read_exact(&mut path)?;
        let mut fixed = [0u8; 1 + 2 + 4 + 4 + 8 + 8 + 4 + 4 + 4];
        r.read_exact(&mut fixed)?;
        let mut f = Fields(&fixed);
        let kind = kind_of(f.take::<1>()[0])?;
        let mode = u16::from_le_bytes(f.take());
        let uid = u32::from_le_bytes(f.take());
        let gid = u32::from_le_bytes(f.take());
        let mtime = i64::from_le_bytes(f.take());
        let size = u64::from_le_bytes(f.take());
        let dev = (u32::from_le_bytes(f.take()), u32::from_le_bytes(f.take()));
        let mut target = vec![0u8; u32::from_le_bytes(f.take()) as usize];
        r.read_exact(&mut target)?;
        let mut rest = [0u8; 4 + 4 + 1 + 2 + 8 + 4];
        r.read_exact(&mut rest)?;
        let mut f = Fields(&rest);
        Ok(Some(Rec {
            path,
            kind,
            mode,
            uid,
            gid,
            mtime,
            size,
            dev,
            target,
            xattrs: u32::from_le_bytes(f.take()),
            data: u32::from_le_bytes(f.take()),
            explicit: f.take::<1>()[0] != 0,
            source: u16::from_le_bytes(f.take()),
            link: u64::from_le_bytes(f.take()),
            nlink: u32::from_le_bytes(f.take()),
        }))
    }
}

/// Fixed-size fields taken in order from a byte slice.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().expect("N bytes")
    }
}

fn kind_code(k: Kind) -> u8 {
    match k {
        Kind::Dir => 0,
        Kind::File => 1,
        Kind::Symlink => 2,
        Kind::BlockDev => 3,
        Kind::CharDev => 4,
        Kind::Fifo => 5,
        Kind::Socket => 6,
    }
}

fn kind_of(c: u8) -> std::io::Result<Kind> {
    Ok(match c {
        0 => Kind::Dir,
        1 => Kind::File,
        2 => Kind::Symlink,
        3 => Kind::BlockDev,
        4 => Kind::CharDev,
        5 => Kind::Fifo,
        6 => Kind::Socket,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a spilled record of an unknown kind",
            ))
        }
    })
}
