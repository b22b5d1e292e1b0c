//! Opening an image file of either format and serving it over FUSE.

use crate::cache::BlockCache;
use crate::error::{FsError, Result};
use crate::fs::{Image, PackFs};
use crate::fuse::FuseAdapter;
use crate::source::{ImageSource, MmapSource};
use crate::squashfs::SquashFs;
use crate::zip::ZipFs;
use std::path::Path;
use std::sync::Arc;

/// Image formats packfs reads, told apart by their leading bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    SquashFs,
    Zip,
}

/// Recognises an image by its magic bytes.
pub fn detect(src: &dyn ImageSource, path: &Path) -> Result<Format> {
    let head = src
        .slice(0, 4.min(src.len() as usize))
        .map_err(|_| FsError::UnknownFormat(path.display().to_string()))?;
    match head {
        b"hsqs" => Ok(Format::SquashFs),
        b"PK\x03\x04" | b"PK\x05\x06" => Ok(Format::Zip),
        _ => Err(FsError::UnknownFormat(path.display().to_string())),
    }
}

/// Opens a SquashFS image with a fresh cache of `cache_bytes`, adding the
/// path to any error.
pub fn open_squashfs(path: &Path, cache_bytes: usize) -> Result<SquashFs> {
    let src = MmapSource::open(path)?;
    let fmt = detect(&src, path)?;
    if fmt != Format::SquashFs {
        return Err(FsError::Unsupported(format!(
            "{}: {fmt:?} images are not handled here",
            path.display()
        )));
    }
    SquashFs::open(Box::new(src), Arc::new(BlockCache::new(cache_bytes))).map_err(|e| match e {
        FsError::Corrupt(m) => FsError::Corrupt(format!("{}: {m}", path.display())),
        FsError::Unsupported(m) => FsError::Unsupported(format!("{}: {m}", path.display())),
        other => other,
    })
}

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub threads: usize,
    pub allow_other: bool,
    /// Extra `-o` options passed to the kernel / fusermount3.
    pub options: Vec<String>,
    pub fsname: String,
    /// Bytes decoded ahead of a sequential reader.
    pub readahead: u64,
}

/// Serves `image` at `mountpoint` until it is unmounted. `on_ready` runs once
/// the kernel has initialised the connection.
pub fn serve<I: Image>(
    image: I,
    mountpoint: &Path,
    opts: &ServeOptions,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
) -> std::io::Result<Arc<PackFs<I>>> {
    use fuser::MountOption as M;
    let fs = Arc::new(PackFs::new(image, opts.readahead, opts.threads.clamp(1, 4)));
    let mut mo = vec![
        M::RO,
        M::FSName(opts.fsname.clone()),
        M::Subtype("packfs".into()),
        M::DefaultPermissions,
        M::NoAtime,
    ];
    // Auto-unmount is not fusermount3's `auto_unmount` (with fuser that
    // forces allow_other, which unprivileged users cannot get without
    // user_allow_other in /etc/fuse.conf); the CLI runs its own watcher
    // process that unmounts when the daemon dies.
    for o in &opts.options {
        mo.push(M::CUSTOM(o.clone()));
    }
    let adapter = FuseAdapter::new(fs.clone(), on_ready);
    let mut config = fuser::Config::default();
    config.mount_options = mo;
    if opts.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    fuser::Session::new(adapter, mountpoint, &config)?.run()?;
    Ok(fs)
}

/// Any image packfs reads, as one concrete [`Image`] for the CLI and server.
pub enum AnyImage {
    SquashFs(SquashFs),
    Zip(ZipFs),
}

pub enum AnyHandle {
    SquashFs(crate::squashfs::OpenFile),
    Zip(crate::zip::ZipFile),
}

impl AnyImage {
    /// Opens `path`, detecting its format, with a block cache of `cache_bytes`.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<Self> {
        let src = MmapSource::open(path)?;
        match detect(&src, path) {
            Ok(Format::SquashFs) => Ok(AnyImage::SquashFs(open_squashfs(path, cache_bytes)?)),
            Ok(Format::Zip) => Ok(AnyImage::Zip(ZipFs::open_path(path, cache_bytes)?)),
            // Anything else may still be a zip: self-extracting archives and
            // zips with data in front start with something other than "PK".
            Err(unknown) => ZipFs::open_path(path, cache_bytes)
                .map(AnyImage::Zip)
                .map_err(|_| unknown),
        }
    }

    pub fn format(&self) -> Format {
        match self {
            AnyImage::SquashFs(_) => Format::SquashFs,
            AnyImage::Zip(_) => Format::Zip,
        }
    }

    /// Decodes as much of the image into the cache as fits. Returns (blocks, bytes).
    pub fn preload(&self) -> Result<(u64, u64)> {
        match self {
            AnyImage::SquashFs(s) => s.preload(),
            AnyImage::Zip(z) => z.preload(),
        }
    }

    pub fn cache(&self) -> &Arc<BlockCache> {
        match self {
            AnyImage::SquashFs(s) => s.cache(),
            AnyImage::Zip(z) => z.cache(),
        }
    }
}

macro_rules! each {
    ($self:expr, $i:ident => $e:expr) => {
        match $self {
            AnyImage::SquashFs($i) => $e,
            AnyImage::Zip($i) => $e,
        }
    };
}

impl Image for AnyImage {
    type Handle = AnyHandle;

    fn getattr(&self, node: crate::fs::NodeId) -> Result<crate::fs::Attr> {
        each!(self, i => i.getattr(node))
    }
    fn lookup(&self, parent: crate::fs::NodeId, name: &[u8]) -> Result<crate::fs::Attr> {
        each!(self, i => i.lookup(parent, name))
    }
    fn readdir(
        &self,
        dir: crate::fs::NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(crate::fs::DirEntry) -> bool,
    ) -> Result<()> {
        each!(self, i => i.readdir(dir, cookie, sink))
    }
    fn open(&self, node: crate::fs::NodeId) -> Result<AnyHandle> {
        match self {
            AnyImage::SquashFs(i) => Ok(AnyHandle::SquashFs(Image::open(i, node)?)),
            AnyImage::Zip(i) => Ok(AnyHandle::Zip(Image::open(i, node)?)),
        }
    }
    fn read(&self, h: &AnyHandle, offset: u64, size: u32) -> Result<Vec<u8>> {
        match (self, h) {
            (AnyImage::SquashFs(i), AnyHandle::SquashFs(h)) => Image::read(i, h, offset, size),
            (AnyImage::Zip(i), AnyHandle::Zip(h)) => Image::read(i, h, offset, size),
            _ => Err(FsError::Invalid("handle from another image".into())),
        }
    }
    fn prefetch(&self, h: &AnyHandle, offset: u64, len: u64) {
        match (self, h) {
            (AnyImage::SquashFs(i), AnyHandle::SquashFs(h)) => Image::prefetch(i, h, offset, len),
            (AnyImage::Zip(i), AnyHandle::Zip(h)) => Image::prefetch(i, h, offset, len),
            _ => {}
        }
    }
    fn readlink(&self, node: crate::fs::NodeId) -> Result<Vec<u8>> {
        each!(self, i => i.readlink(node))
    }
    fn xattrs(&self, node: crate::fs::NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        each!(self, i => Image::xattrs(i, node))
    }
    fn statfs(&self) -> crate::fs::StatFs {
        each!(self, i => i.statfs())
    }
    fn block_size(&self) -> u32 {
        each!(self, i => Image::block_size(i))
    }
    fn parent_ino(&self, dir: crate::fs::NodeId) -> Result<u64> {
        each!(self, i => i.parent_ino(dir))
    }
}
