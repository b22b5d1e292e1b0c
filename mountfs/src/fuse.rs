//! The FUSE adapter: turns `fuser` requests into [`PackFs`] calls and the
//! results into replies. No filesystem logic lives here.
//!
//! `fuser` runs `--threads` session threads, each reading requests from its
//! own clone of the `/dev/fuse` descriptor (`FUSE_DEV_IOC_CLONE`), and every
//! request is answered on the thread that received it: handing reads from
//! one reader thread to a worker pool costs a cross-thread wakeup per
//! request (tens of microseconds on a VM), which a single reader of small
//! files pays on every file.
//! Cloned descriptors give each thread its own request queue end, so threads
//! do not contend on one file lock and the kernel wakes only one of them.

use crate::error::FsError;
use crate::fs::{Attr, FileKind, Image, Op, PackFs};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

/// The image never changes, so the kernel may cache names and attributes forever.
const TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Largest read request the kernel may send (it derives `max_pages` from
/// this): 1 MiB, so a large `read(2)` costs one round trip, not eight.
const MAX_REQUEST: u32 = 1 << 20;

pub struct FuseAdapter<I: Image> {
    fs: Arc<PackFs<I>>,
    /// How long the kernel may remember that a name does not exist
    /// (`None`: answer ENOENT, which the kernel does not cache).
    negative_ttl: Option<Duration>,
    /// Called once the kernel has sent INIT (the mount is usable). A mutex
    /// only because `fuser` wants the adapter `Sync`; INIT runs once.
    on_init: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl<I: Image> FuseAdapter<I> {
    pub fn new(
        fs: Arc<PackFs<I>>,
        negative_ttl: Option<Duration>,
        on_init: Option<Box<dyn FnOnce() + Send>>,
    ) -> Self {
        FuseAdapter {
            fs,
            negative_ttl,
            on_init: Mutex::new(on_init),
        }
    }
}

/// The errno answered for `e`; a real failure (not a missing name or
/// xattr, which programs probe for) is logged here, the only place a mount
/// reports it: the application sees only the errno.
fn errno(e: &crate::error::FsError) -> Errno {
    use crate::error::FsError;
    if !matches!(e, FsError::NotFound | FsError::NoXattr) {
        log::error!("{e}");
    }
    Errno::from_i32(e.errno())
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    let t = if a.mtime >= 0 {
        UNIX_EPOCH + Duration::from_secs(a.mtime as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(a.mtime.unsigned_abs())
    };
    FileAttr {
        // fuser uses `ino` as both the node id and st_ino; node ids are shared
        // by hard links, so link identity is preserved.
        ino: INodeNo(a.node),
        size: a.size,
        blocks: a.blocks(),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

/// The attributes of a negative entry: only the node id (0) matters.
fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl<I: Image> fuser::Filesystem for FuseAdapter<I> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        use fuser::InitFlags as F;
        let _ = config.add_capabilities(
            F::FUSE_DO_READDIRPLUS
                | F::FUSE_READDIRPLUS_AUTO
                | F::FUSE_PARALLEL_DIROPS
                | F::FUSE_CACHE_SYMLINKS
                | F::FUSE_ASYNC_READ,
        );
        // Ask for the largest readahead the kernel allows; it clamps.
        let _ = config
            .set_max_readahead(u32::MAX)
            .or_else(|max| config.set_max_readahead(max));
        let _ = config
            .set_max_write(MAX_REQUEST)
            .or_else(|max| config.set_max_write(max));
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        let f = self.on_init.get_mut().ok().and_then(|f| f.take());
        if let Some(f) = f {
            f();
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.fs.counters.request(Op::Lookup);
        match (self.fs.lookup(parent.0, name.as_bytes()), self.negative_ttl) {
            (Ok(a), _) => reply.entry(&TTL, &file_attr(&a), Generation(0)),
            // Node id 0 is a negative entry the kernel keeps for the TTL
            // (fs/fuse/dir.c, fuse_lookup_name): an interpreter probing
            // hundreds of absent module paths asks once, not per start.
            (Err(FsError::NotFound), Some(ttl)) => {
                reply.entry(&ttl, &negative_attr(), Generation(0))
            }
            (Err(e), _) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.fs.counters.request(Op::Getattr);
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.fs.counters.request(Op::Readlink);
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Declining OPEN makes the kernel skip OPEN and RELEASE from now on
        // and treat every file as FOPEN_KEEP_CACHE (fs/fuse/file.c,
        // fuse_do_open): one round trip fewer per file, page cache kept.
        // Reads then come addressed by node, which is all PackFs needs.
        reply.error(Errno::ENOSYS);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.fs.counters.request(Op::Read);
        match self.fs.read(ino.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // As for open: the kernel then defaults to FOPEN_KEEP_CACHE |
        // FOPEN_CACHE_DIR, caching listings, and stops sending OPENDIR.
        reply.error(Errno::ENOSYS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.fs.counters.request(Op::Readdir);
        let r = self.fs.readdir(ino.0, offset, &mut |e| {
            !reply.add(
                INodeNo(e.node),
                e.cookie,
                file_type(e.kind),
                OsStr::from_bytes(&e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.fs.counters.request(Op::Readdir);
        let fs = &self.fs;
        let mut failed = None;
        let r = fs.readdir(ino.0, offset, &mut |e| {
            // "." and ".." carry no attributes the kernel uses.
            let attr = if e.name == b"." || e.name == b".." {
                fs.getattr(ino.0)
            } else {
                fs.getattr(e.node)
            };
            match attr {
                Ok(a) => !reply.add(
                    INodeNo(a.node),
                    e.cookie,
                    OsStr::from_bytes(&e.name),
                    &TTL,
                    &file_attr(&a),
                    Generation(0),
                ),
                Err(err) => {
                    failed = Some(errno(&err));
                    false
                }
            }
        });
        match (r, failed) {
            (Err(e), _) => reply.error(errno(&e)),
            (Ok(()), Some(errno)) => reply.error(errno),
            (Ok(()), None) => reply.ok(),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.fs.counters.request(Op::Other);
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks,
            0,
            0,
            s.files,
            0,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.fs.counters.request(Op::Xattr);
        match self.fs.getxattr(ino.0, name.as_bytes()) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(Errno::ERANGE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.fs.counters.request(Op::Xattr);
        match self.fs.listxattr(ino.0) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(Errno::ERANGE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Every `open()` in Python (and C stdio, and `isatty`) asks TCGETS of
    /// the new file; the kernel forwards each to the server (it remembers no
    /// refusal, unlike FLUSH). Answered here as "not a terminal" without
    /// fuser's default WARN line, which cost a formatted log record per
    /// file opened.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.fs.counters.request(Op::Other);
        reply.error(Errno::ENOTTY);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.fs.counters.request(Op::Other);
        // With default_permissions the kernel checks modes itself; only
        // refuse writes.
        if mask.contains(AccessFlags::W_OK) {
            reply.error(Errno::EROFS)
        } else {
            reply.ok()
        }
    }
}
