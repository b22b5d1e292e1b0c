//! The `fuser` adapter ([`FuseAdapter`]), the `/dev/fuse` transport of
//! `fuser`'s threads: turns `fuser` requests into [`Ops`] calls and the
//! results into replies. No filesystem logic lives here. `fuser` also
//! mounts, answers INIT (where the io_uring transport is negotiated) and,
//! when the io_uring queues serve, still reads what the kernel keeps on
//! `/dev/fuse` (FORGET, INTERRUPT).
//!
//! `fuser` runs `--threads` session threads, each reading requests from its
//! own clone of the `/dev/fuse` descriptor (`FUSE_DEV_IOC_CLONE`), and every
//! request is answered on the thread that received it: handing reads from
//! one reader thread to a worker pool costs a cross-thread wakeup per
//! request (tens of microseconds on a VM), which a single reader of small
//! files pays on every file.
//! Cloned descriptors give each thread its own request queue end, so threads
//! do not contend on one file lock and the kernel wakes only one of them.

use crate::fs::{Attr, FileKind, Image};
use crate::fuse::ops::{Lookup, Ops, Xattr, TTL};
use crate::fuse::transport::{Shared, MAX_REQUEST};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

pub struct FuseAdapter<I: Image> {
    ops: Arc<Ops<I>>,
    /// What INIT negotiated about the transport, read by `serve` once the
    /// handshake is over.
    transport: Arc<Shared>,
}

impl<I: Image> FuseAdapter<I> {
    pub fn new(ops: Arc<Ops<I>>, transport: Arc<Shared>) -> Self {
        FuseAdapter { ops, transport }
    }
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
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
        blocks: a.blocks,
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
        // Only when the queues can be set up (checked before mounting): once
        // negotiated, the kernel holds every request until each possible
        // CPU's queue has registered.
        if self.transport.want_uring() {
            let ok = config.add_capabilities(F::FUSE_OVER_IO_URING).is_ok();
            self.transport.set_negotiated(ok);
        }
        // Ask for the largest readahead the kernel allows; it clamps.
        let _ = config.set_max_readahead(u32::MAX).or_else(|max| {
            self.transport.set_max_readahead(max);
            config.set_max_readahead(max)
        });
        let _ = config
            .set_max_write(MAX_REQUEST)
            .or_else(|max| config.set_max_write(max));
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.ops.lookup(parent.0, name.as_bytes()) {
            Ok(Lookup::Found(a)) => reply.entry(&TTL, &file_attr(&a), Generation(0)),
            Ok(Lookup::Negative(ttl)) => reply.entry(&ttl, &negative_attr(), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.ops.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.ops.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let Err(e) = self.ops.open() {
            reply.error(errno(e));
        }
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
        match self.ops.read(ino.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let Err(e) = self.ops.open() {
            reply.error(errno(e));
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.ops.readdir(ino.0, offset, &mut |e| {
            !reply.add(
                INodeNo(e.node),
                e.cookie,
                file_type(e.kind),
                OsStr::from_bytes(&e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
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
        let r = self.ops.readdirplus(ino.0, offset, &mut |e, a| {
            !reply.add(
                INodeNo(a.node),
                e.cookie,
                OsStr::from_bytes(&e.name),
                &TTL,
                &file_attr(a),
                Generation(0),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.ops.statfs();
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
        xattr_reply(self.ops.getxattr(ino.0, name.as_bytes(), size), reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(self.ops.listxattr(ino.0, size), reply)
    }

    /// Answered without fuser's default WARN line, which cost a formatted
    /// log record per file opened (see [`Ops::ioctl`]).
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
        if let Err(e) = self.ops.ioctl() {
            reply.error(errno(e));
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.ops.access(mask.bits() as u32) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    // Requests a read-only image has nothing to do for. ENOSYS is what
    // `fuser`'s defaults answer too, and the kernel remembers it (no_flush,
    // no_fsync, no_lseek...) and stops asking; but those defaults also log a
    // "[Not Implemented]" warning, which in a mount's --log reads like a
    // failure. The io_uring queues answer these ENOSYS as well
    // (`transport::dispatch`).

    fn flush(&self, _: &Request, _: INodeNo, _: FileHandle, _: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn fsync(&self, _: &Request, _: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn fsyncdir(&self, _: &Request, _: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn lseek(
        &self,
        _: &Request,
        _: INodeNo,
        _: FileHandle,
        _: i64,
        _: i32,
        reply: fuser::ReplyLseek,
    ) {
        reply.error(Errno::ENOSYS);
    }
}

fn xattr_reply(x: crate::fuse::ops::Answer<Xattr>, reply: ReplyXattr) {
    match x {
        Ok(Xattr::Size(n)) => reply.size(n),
        Ok(Xattr::Data(v)) => reply.data(&v),
        Err(e) => reply.error(errno(e)),
    }
}
