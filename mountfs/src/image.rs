//! What an image format answers, in plain structs: the [`Image`] trait that
//! the SquashFS and ZIP readers implement and the filesystem core
//! (`fs.rs`) and readahead (`readahead/`) use. It sits below all three, so
//! none of them imports another to reach it.

use crate::error::Result;

pub type NodeId = u64;
pub const ROOT: NodeId = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    BlockDevice,
    CharDevice,
    Fifo,
    Socket,
}

impl FileKind {
    /// The `S_IFMT` bits for this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::BlockDevice => libc::S_IFBLK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
        }
    }
}

/// What `stat` shows for a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub node: NodeId,
    /// `st_ino`: shared by hard links, unique otherwise.
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits (with suid/sgid/sticky), no type bits.
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Seconds since the epoch (may be negative for ZIP entries).
    pub mtime: i64,
    /// Device number for device nodes, in Linux `new_encode_dev` form.
    pub rdev: u32,
    /// `st_blocks`, 512-byte units, counted as the format's kernel driver
    /// would (SquashFS: a regular file's size less its holes, plus its
    /// xattrs; nothing else for other kinds).
    pub blocks: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub node: NodeId,
    pub ino: u64,
    pub kind: FileKind,
    /// Cookie to pass to `readdir` to continue after this entry.
    pub cookie: u64,
}

/// Where a regular file's data lies in the image's storage, for callers
/// that order reads by position (a sampler that reads neighbours together,
/// a reader that coalesces requests). Positions are the format's: they say
/// where the stored bytes are, not how to decode them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    /// Which file or object of a sharded image holds it (0 for one image).
    pub part: u32,
    /// Offset of the file's first stored byte in that part.
    pub offset: u64,
    /// Bytes its data takes there: its blocks as stored, plus a tail kept
    /// in a block shared with other files counted at its decoded length.
    pub len: u64,
}

/// A span's length as a hint's `usize`: a span longer than memory can
/// only be hinted in part, and a hint may be cut.
pub fn clamp_len(len: u64) -> usize {
    usize::try_from(len).unwrap_or(usize::MAX)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub files: u64,
    pub block_size: u32,
    pub name_max: u32,
}

/// One image format, read-only. All methods are called concurrently.
///
/// No method has a default body: an image that wraps others (`AnyImage`,
/// `UnionImage`) must forward each one, and a readahead hook left to a no-op
/// default compiles and only makes reads slower, which no check of contents
/// notices. Without defaults, forgetting one is a compile error.
pub trait Image: Send + Sync + 'static {
    /// A regular file prepared for reading.
    type Handle: Send + Sync + 'static;

    fn getattr(&self, node: NodeId) -> Result<Attr>;
    fn lookup(&self, parent: NodeId, name: &[u8]) -> Result<Attr>;
    /// Lists `dir` starting after `cookie` (0 = from the start; the caller
    /// adds "." and ".."). `sink` returns false when its buffer is full.
    fn readdir(
        &self,
        dir: NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()>;
    fn open(&self, node: NodeId) -> Result<Self::Handle>;
    fn read(&self, h: &Self::Handle, offset: u64, size: u32) -> Result<Vec<u8>>;
    /// Warms the cache for `offset..offset+len` (called off the request
    /// path, when and as far as [`crate::readahead`] decides).
    fn prefetch(&self, h: &Self::Handle, offset: u64, len: u64);
    /// The storage unit holding the end of the file when units are shared
    /// between files and numbered in image order (a SquashFS fragment block),
    /// for image-order readahead ([`crate::readahead`]); `None` when the
    /// format has no such units.
    fn shared_unit(&self, h: &Self::Handle) -> Option<u64>;
    /// Decodes shared unit `unit` into the cache (called off the request
    /// path; errors are left for the read that needs the unit).
    fn prefetch_unit(&self, unit: u64);
    /// Where regular file `node`'s data lies ([`Extent`]); a directory is
    /// `IsDir`, another kind `Invalid`.
    fn extent(&self, node: NodeId) -> Result<Extent>;
    /// The caller will read all of `span` (extents this image gave,
    /// merged) soon: the storage starts fetching it in the background
    /// ([`crate::source::ImageSource::will_read`]). A span outside the
    /// image, or of a part it does not have, is ignored: a hint is never
    /// an error.
    fn will_read(&self, span: Extent);
    fn readlink(&self, node: NodeId) -> Result<Vec<u8>>;
    fn xattrs(&self, node: NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    fn statfs(&self) -> StatFs;
    /// Preferred read unit (the block size), used to size prefetches.
    fn block_size(&self) -> u32;
    /// `st_ino` of a directory's parent (for ".." in readdir; the kernel
    /// resolves ".." itself, so no node id is needed).
    fn parent_ino(&self, dir: NodeId) -> Result<u64>;
}
