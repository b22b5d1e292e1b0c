//! The answer to each FUSE operation packfs serves, independent of how the
//! request arrived: every transport (the `fuser` adapter in `adapter.rs`,
//! packfs's own `/dev/fuse` threads and the io_uring queues in
//! `transport/`) calls these and only converts the results to its reply
//! format, so the policies here (negative entries, declined OPEN, refused
//! writes, counting requests by kind) are the same whichever transport
//! served a request.

use super::stats::{Op, RequestCounters};
use crate::error::FsError;
use crate::fs::{Attr, DirEntry, Image, PackFs, StatFs};
use std::sync::Arc;
use std::time::Duration;

/// The image never changes, so the kernel may cache names and attributes forever.
pub const TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// An operation's outcome: the value, or the errno to answer.
pub type Answer<T> = std::result::Result<T, i32>;

/// What LOOKUP answers.
pub enum Lookup {
    Found(Attr),
    /// A negative entry (node id 0) the kernel keeps for this long
    /// (fs/fuse/dir.c, fuse_lookup_name): an interpreter probing hundreds
    /// of absent module paths asks once, not per start.
    Negative(Duration),
}

/// What GETXATTR/LISTXATTR answer: the size asked for (a request of size
/// 0), or the bytes.
pub enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

pub struct Ops<I: Image> {
    pub fs: Arc<PackFs<I>>,
    /// How long the kernel may remember that a name does not exist
    /// (`None`: answer ENOENT, which the kernel does not cache).
    pub negative_ttl: Option<Duration>,
    /// Requests answered, by kind (the mount's, shared with its stats).
    pub requests: Arc<RequestCounters>,
}

/// The errno answered for `e`; a real failure (not a missing name or
/// xattr, which programs probe for) is logged here, the only place a mount
/// reports it: the application sees only the errno.
fn errno(e: &FsError) -> i32 {
    if !matches!(
        e,
        FsError::NotFound | FsError::NameTooLong | FsError::SymlinkLoop | FsError::NoXattr
    ) {
        log::error!("{e}");
    }
    e.errno()
}

fn xattr(v: crate::error::Result<Vec<u8>>, size: u32) -> Answer<Xattr> {
    match v {
        Ok(v) if size == 0 => Ok(Xattr::Size(v.len() as u32)),
        Ok(v) if v.len() <= size as usize => Ok(Xattr::Data(v)),
        Ok(_) => Err(libc::ERANGE),
        Err(e) => Err(errno(&e)),
    }
}

impl<I: Image> Ops<I> {
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Answer<Lookup> {
        self.requests.count(Op::Lookup);
        match (self.fs.lookup(parent, name), self.negative_ttl) {
            (Ok(a), _) => Ok(Lookup::Found(a)),
            (Err(FsError::NotFound), Some(ttl)) => Ok(Lookup::Negative(ttl)),
            (Err(e), _) => Err(errno(&e)),
        }
    }

    pub fn getattr(&self, node: u64) -> Answer<Attr> {
        self.requests.count(Op::Getattr);
        self.fs.getattr(node).map_err(|e| errno(&e))
    }

    pub fn readlink(&self, node: u64) -> Answer<Vec<u8>> {
        self.requests.count(Op::Readlink);
        self.fs.readlink(node).map_err(|e| errno(&e))
    }

    /// OPEN and OPENDIR are declined: the kernel then skips OPEN and RELEASE
    /// from now on and treats every file as FOPEN_KEEP_CACHE (and every
    /// directory as FOPEN_CACHE_DIR) (fs/fuse/file.c, fuse_do_open): one
    /// round trip fewer per file, page cache kept. Reads then come
    /// addressed by node, which is all PackFs needs.
    pub fn open(&self) -> Answer<()> {
        Err(libc::ENOSYS)
    }

    pub fn read(&self, node: u64, offset: u64, size: u32) -> Answer<Vec<u8>> {
        self.requests.count(Op::Read);
        self.fs.read(node, offset, size).map_err(|e| errno(&e))
    }

    /// Lists `dir` from `cookie`; `add` returns false once the reply is full.
    pub fn readdir(
        &self,
        dir: u64,
        cookie: u64,
        add: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Answer<()> {
        self.requests.count(Op::Readdir);
        self.fs
            .readdir(dir, cookie, &mut |e| add(&e))
            .map_err(|e| errno(&e))
    }

    /// READDIRPLUS: each entry with its attributes ("." and ".." carry
    /// those of `dir`; the kernel does not use them).
    pub fn readdirplus(
        &self,
        dir: u64,
        cookie: u64,
        add: &mut dyn FnMut(&DirEntry, &Attr) -> bool,
    ) -> Answer<()> {
        self.requests.count(Op::Readdir);
        let fs = &self.fs;
        let mut failed = None;
        let r = fs.readdir(dir, cookie, &mut |e| {
            let node = if e.name == b"." || e.name == b".." {
                dir
            } else {
                e.node
            };
            match fs.getattr(node) {
                Ok(a) => add(&e, &a),
                Err(err) => {
                    failed = Some(errno(&err));
                    false
                }
            }
        });
        match (r, failed) {
            (Err(e), _) => Err(errno(&e)),
            (Ok(()), Some(errno)) => Err(errno),
            (Ok(()), None) => Ok(()),
        }
    }

    pub fn statfs(&self) -> StatFs {
        self.requests.count(Op::Other);
        self.fs.statfs()
    }

    pub fn getxattr(&self, node: u64, name: &[u8], size: u32) -> Answer<Xattr> {
        self.requests.count(Op::Xattr);
        xattr(self.fs.getxattr(node, name), size)
    }

    pub fn listxattr(&self, node: u64, size: u32) -> Answer<Xattr> {
        self.requests.count(Op::Xattr);
        xattr(self.fs.listxattr(node), size)
    }

    /// Every `open()` in Python (and C stdio, and `isatty`) asks TCGETS of
    /// the new file; the kernel forwards each to the server (it remembers
    /// no refusal, unlike FLUSH). Answered as "not a terminal".
    pub fn ioctl(&self) -> Answer<()> {
        self.requests.count(Op::Other);
        Err(libc::ENOTTY)
    }

    /// With default_permissions the kernel checks modes itself; only
    /// writes are refused.
    pub fn access(&self, mask: u32) -> Answer<()> {
        self.requests.count(Op::Other);
        if mask & libc::W_OK as u32 != 0 {
            Err(libc::EROFS)
        } else {
            Ok(())
        }
    }
}
