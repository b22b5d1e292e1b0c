//! The index's node type, shared by the build phases (`index.rs`,
//! `tree.rs`, `layout.rs`) so that none of them imports another's parent.

pub const S_IFMT: u32 = libc::S_IFMT;

/// One node (64 bytes). Files and symlinks use the data fields; a
/// directory has no data, so its `csize` holds its children range in
/// `Index::children` (start << 32 | len) and its `crc` its number of
/// subdirectories (for nlink).
#[derive(Clone, Copy, Debug)]
pub struct Node {
    pub local_offset: u64,
    pub csize: u64,
    pub size: u64,
    pub mtime: i64,
    pub name_off: u32,
    pub parent: u32,
    pub crc: u32,
    pub uid: u32,
    pub gid: u32,
    /// `S_IFMT` bits and permissions.
    pub mode: u32,
    pub name_len: u16,
    pub method: u16,
    pub flags: u16,
}

pub const NODE_SYNTH: u16 = 1 << 15;
pub const NODE_ENCRYPTED: u16 = 1 << 14;
pub const NODE_LZMA_EOS: u16 = 1 << 1;

impl Node {
    pub(super) fn dir(parent: u32, name: (u32, u16), uid: u32, gid: u32) -> Node {
        Node {
            local_offset: 0,
            csize: 0,
            size: 0,
            mtime: i64::MIN,
            name_off: name.0,
            parent,
            crc: 0,
            uid,
            gid,
            mode: libc::S_IFDIR | 0o755,
            name_len: name.1,
            method: 0,
            flags: NODE_SYNTH,
        }
    }
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == libc::S_IFDIR
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == libc::S_IFLNK
    }
    pub fn child_start(&self) -> u32 {
        (self.csize >> 32) as u32
    }
    pub fn child_len(&self) -> u32 {
        self.csize as u32
    }
    pub fn subdirs(&self) -> u32 {
        self.crc
    }
    pub fn encrypted(&self) -> bool {
        self.flags & NODE_ENCRYPTED != 0
    }
}

/// An accepted central record on its way into the tree: its node (with no
/// name or parent yet) and its normalised path in the arena of
/// `Central::paths` (in `index.rs`).
pub(super) struct Pending {
    pub(super) node: Node,
    pub(super) path_off: u64,
    pub(super) path_len: u32,
    pub(super) is_dir: bool,
}
