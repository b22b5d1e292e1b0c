//! The parts of the FUSE kernel ABI (include/uapi/linux/fuse.h, protocol
//! 7.42+) that the io_uring queues read and write themselves: `fuser`'s
//! request parser and reply encoder are private to it. Little-endian byte
//! offsets rather than `repr(C)` structs, because the buffers are shared
//! with the kernel and only ever read or written at these offsets.

use crate::image::{Attr, FileKind};
use std::time::Duration;

// Opcodes (enum fuse_opcode).
pub const LOOKUP: u32 = 1;
pub const FORGET: u32 = 2;
pub const GETATTR: u32 = 3;
pub const READLINK: u32 = 5;
pub const OPEN: u32 = 14;
pub const READ: u32 = 15;
pub const STATFS: u32 = 17;
pub const RELEASE: u32 = 18;
pub const GETXATTR: u32 = 22;
pub const LISTXATTR: u32 = 23;
pub const FLUSH: u32 = 25;
pub const OPENDIR: u32 = 27;
pub const READDIR: u32 = 28;
pub const RELEASEDIR: u32 = 29;
pub const ACCESS: u32 = 34;
pub const INTERRUPT: u32 = 36;
pub const DESTROY: u32 = 38;
pub const IOCTL: u32 = 39;
pub const BATCH_FORGET: u32 = 42;
pub const READDIRPLUS: u32 = 44;

/// `enum fuse_uring_cmd`.
pub const CMD_REGISTER: u32 = 1;
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` (the in header of a request,
/// the out header of its answer) at 0, the operation's own header at
/// [`OP_IN`], `struct fuse_uring_ent_in_out` at [`ENT_IN_OUT`].
pub const HEADER_BYTES: usize = 128 + 128 + 32;
pub const OP_IN: usize = 128;
pub const ENT_IN_OUT: usize = 256;
/// In `fuse_uring_ent_in_out`: the request id to commit with, and the
/// bytes used in the payload buffer (request arguments in, answer out).
pub const ENT_COMMIT_ID: usize = ENT_IN_OUT + 8;
pub const ENT_PAYLOAD_SZ: usize = ENT_IN_OUT + 16;

/// `fuse_entry_out`, `fuse_attr_out`, `fuse_kstatfs`, `fuse_dirent` (before its name).
pub const ENTRY_OUT: usize = 128;
pub const ATTR_OUT: usize = 104;
pub const STATFS_OUT: usize = 80;
pub const DIRENT: usize = 24;

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
pub fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// `struct fuse_in_header`'s size: on `/dev/fuse` the operation's own
/// header follows it.
pub const IN_HEADER: usize = 40;
/// `struct fuse_out_header`'s size.
pub const OUT_HEADER: usize = 16;

/// The size of the operation's own header that follows `fuse_in_header`
/// in a request read from `/dev/fuse` (the part io_uring hands over
/// separately as `op_in`); what follows it is the payload (a name). The
/// operations packfs answers, plus those it must read to the end.
pub fn op_in_len(opcode: u32) -> usize {
    match opcode {
        GETATTR => 16,                                       // fuse_getattr_in
        OPEN | OPENDIR | GETXATTR | LISTXATTR | ACCESS => 8, // fuse_open_in, fuse_getxattr_in, fuse_access_in
        RELEASE | RELEASEDIR | FLUSH => 24,                  // fuse_release_in, fuse_flush_in
        READ | READDIR | READDIRPLUS => 40,                  // fuse_read_in
        IOCTL => 32,                                         // fuse_ioctl_in
        _ => 0, // LOOKUP and READLINK (a name or nothing), STATFS, the rest unread
    }
}

/// `struct fuse_in_header`, the fields the transports use.
#[derive(Clone, Copy, Debug)]
pub struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    /// The calling thread (0 for requests the kernel makes on its own).
    pub pid: u32,
}

pub fn in_header(h: &[u8]) -> InHeader {
    InHeader {
        opcode: u32_at(h, 4),
        unique: u64_at(h, 8),
        nodeid: u64_at(h, 16),
        uid: u32_at(h, 24),
        pid: u32_at(h, 32),
    }
}

/// Writes `struct fuse_out_header` (`error` is 0 or a negative errno).
pub fn put_out_header(h: &mut [u8], body: usize, error: i32, unique: u64) {
    put32(h, 0, (16 + body) as u32);
    put32(h, 4, error as u32);
    put64(h, 8, unique);
}

fn mode(kind: FileKind) -> u32 {
    match kind {
        FileKind::File => libc::S_IFREG,
        FileKind::Dir => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::BlockDevice => libc::S_IFBLK,
        FileKind::CharDevice => libc::S_IFCHR,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
    }
}

/// `d_type` of a `fuse_dirent`.
pub fn dirent_type(kind: FileKind) -> u32 {
    mode(kind) >> 12
}

/// `struct fuse_attr` (88 bytes) at `b[0..]`. As in the `fuser` adapter,
/// the node id is also `st_ino`, so hard links keep one identity.
pub fn put_attr(b: &mut [u8], a: &Attr) {
    b[..88].fill(0);
    put64(b, 0, a.node);
    put64(b, 8, a.size);
    put64(b, 16, a.blocks);
    for at in [24, 32, 40] {
        put64(b, at, a.mtime as u64);
    }
    put32(b, 60, mode(a.kind) | u32::from(a.perm));
    put32(b, 64, a.nlink);
    put32(b, 68, a.uid);
    put32(b, 72, a.gid);
    put32(b, 76, a.rdev);
    put32(b, 80, 4096);
}

/// `struct fuse_entry_out` for `attr` (or a negative entry: node 0).
pub fn put_entry(b: &mut [u8], attr: Option<&Attr>, ttl: Duration) {
    b[..ENTRY_OUT].fill(0);
    put64(b, 0, attr.map_or(0, |a| a.node));
    put64(b, 16, ttl.as_secs());
    put64(b, 24, ttl.as_secs());
    put32(b, 32, ttl.subsec_nanos());
    put32(b, 36, ttl.subsec_nanos());
    if let Some(a) = attr {
        put_attr(&mut b[40..], a);
    }
}

/// `struct fuse_attr_out`.
pub fn put_attr_out(b: &mut [u8], a: &Attr, ttl: Duration) {
    b[..16].fill(0);
    put64(b, 0, ttl.as_secs());
    put32(b, 8, ttl.subsec_nanos());
    put_attr(&mut b[16..], a);
}

/// Appends a `fuse_dirent` to `b[*at..]` if it fits; false if it does not.
pub fn put_dirent(
    b: &mut [u8],
    at: &mut usize,
    ino: u64,
    cookie: u64,
    typ: u32,
    name: &[u8],
) -> bool {
    let len = (DIRENT + name.len()).next_multiple_of(8);
    if *at + len > b.len() {
        return false;
    }
    let d = &mut b[*at..*at + len];
    put64(d, 0, ino);
    put64(d, 8, cookie);
    put32(d, 16, name.len() as u32);
    put32(d, 20, typ);
    d[DIRENT..DIRENT + name.len()].copy_from_slice(name);
    d[DIRENT + name.len()..].fill(0);
    *at += len;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirents_are_padded_to_eight_bytes_and_refused_when_full() {
        let mut b = [0xffu8; 64];
        let mut at = 0;
        assert!(put_dirent(&mut b, &mut at, 7, 1, 4, b"abc"));
        assert_eq!(at, 32);
        assert_eq!(u64_at(&b, 0), 7);
        assert_eq!(u32_at(&b, 16), 3);
        assert_eq!(&b[24..32], b"abc\0\0\0\0\0");
        assert!(!put_dirent(&mut b, &mut at, 8, 2, 4, b"a-longer-name-xyz"));
        assert_eq!(at, 32);
    }

    #[test]
    fn attributes_carry_the_type_bits_and_the_node_as_inode() {
        let a = Attr {
            node: 42,
            ino: 9,
            kind: FileKind::Symlink,
            perm: 0o777,
            nlink: 1,
            uid: 5,
            gid: 6,
            size: 1000,
            mtime: 1_700_000_000,
            rdev: 0,
            blocks: 2,
        };
        let mut b = [0u8; 128];
        put_entry(&mut b, Some(&a), Duration::from_millis(1500));
        assert_eq!(u64_at(&b, 0), 42);
        assert_eq!((u64_at(&b, 16), u32_at(&b, 32)), (1, 500_000_000));
        assert_eq!(u64_at(&b, 40), 42);
        assert_eq!(u64_at(&b, 40 + 16), 2);
        assert_eq!(u32_at(&b, 40 + 60), libc::S_IFLNK | 0o777);
        put_entry(&mut b, None, Duration::from_secs(3));
        assert_eq!((u64_at(&b, 0), u64_at(&b, 16), u64_at(&b, 40)), (0, 3, 0));
    }
}
