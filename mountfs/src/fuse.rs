//! The FUSE adapter: turns `fuser` requests into [`PackFs`] calls and the
//! results into replies. No filesystem logic lives here.
//!
//! `fuser` 0.15 reads requests on one session thread. Reads, which may
//! decompress a block or fault in pages of the image, are handed to a pool of
//! worker threads and replied to from there, so many reads proceed in
//! parallel; the metadata operations are answered on the session thread, where
//! they are a cache lookup in the common case and a handoff would cost more
//! than the work.

use crate::fs::{Attr, FileKind, Image, PackFs};
use fuser::{
    FileAttr, FileType, KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// The image never changes, so the kernel may cache names and attributes forever.
const TTL: Duration = Duration::from_secs(365 * 24 * 3600);

pub struct FuseAdapter<I: Image> {
    fs: Arc<PackFs<I>>,
    pool: crate::pool::Pool,
    /// Called once the kernel has sent INIT (the mount is usable).
    on_init: Option<Box<dyn FnOnce() + Send>>,
}

impl<I: Image> FuseAdapter<I> {
    pub fn new(
        fs: Arc<PackFs<I>>,
        threads: usize,
        on_init: Option<Box<dyn FnOnce() + Send>>,
    ) -> std::io::Result<Self> {
        let pool = crate::pool::Pool::new(threads, "packfs-fuse")?;
        Ok(FuseAdapter { fs, pool, on_init })
    }
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
        ino: a.node,
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

impl<I: Image> fuser::Filesystem for FuseAdapter<I> {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        use fuser::consts::*;
        for cap in [
            FUSE_DO_READDIRPLUS,
            FUSE_READDIRPLUS_AUTO,
            FUSE_PARALLEL_DIROPS,
            FUSE_CACHE_SYMLINKS,
            FUSE_ASYNC_READ,
        ] {
            let _ = config.add_capabilities(cap);
        }
        // Ask for the largest readahead the kernel allows; it clamps.
        let _ = config
            .set_max_readahead(u32::MAX)
            .or_else(|max| config.set_max_readahead(max));
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        if let Some(f) = self.on_init.take() {
            f();
        }
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent, name.as_bytes()) {
            Ok(a) => reply.entry(&TTL, &file_attr(&a), 0),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.fs.getattr(ino) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.fs.readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn open(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        // Declining OPEN makes the kernel skip OPEN and RELEASE from now on
        // and treat every file as FOPEN_KEEP_CACHE (fs/fuse/file.c,
        // fuse_do_open): one round trip fewer per file, page cache kept.
        // Reads then come addressed by node, which is all PackFs needs.
        reply.error(libc::ENOSYS);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let fs = self.fs.clone();
        self.pool
            .spawn(move || match fs.read(ino, offset.max(0) as u64, size) {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(e.errno()),
            });
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        // As for open: the kernel then defaults to FOPEN_KEEP_CACHE |
        // FOPEN_CACHE_DIR, caching listings, and stops sending OPENDIR.
        reply.error(libc::ENOSYS);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.fs.readdir(ino, offset.max(0) as u64, &mut |e| {
            !reply.add(
                e.node,
                e.cookie as i64,
                file_type(e.kind),
                OsStr::from_bytes(&e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn readdirplus(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let fs = self.fs.clone();
        let mut failed = None;
        let r = fs.readdir(ino, offset.max(0) as u64, &mut |e| {
            // "." and ".." carry no attributes the kernel uses.
            let attr = if e.name == b"." || e.name == b".." {
                fs.getattr(ino)
            } else {
                fs.getattr(e.node)
            };
            match attr {
                Ok(a) => !reply.add(
                    a.node,
                    e.cookie as i64,
                    OsStr::from_bytes(&e.name),
                    &TTL,
                    &file_attr(&a),
                    0,
                ),
                Err(err) => {
                    failed = Some(err.errno());
                    false
                }
            }
        });
        match (r, failed) {
            (Err(e), _) => reply.error(e.errno()),
            (Ok(()), Some(errno)) => reply.error(errno),
            (Ok(()), None) => reply.ok(),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
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

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        match self.fs.getxattr(ino, name.as_bytes()) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        match self.fs.listxattr(ino) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, mask: i32, reply: fuser::ReplyEmpty) {
        // With default_permissions the kernel checks modes itself; only
        // refuse writes.
        if mask & libc::W_OK != 0 {
            reply.error(libc::EROFS)
        } else {
            reply.ok()
        }
    }
}
