//! Opening an image file of either format and serving it over FUSE.

use crate::cache::BlockCache;
use crate::error::{FsError, Result};
use crate::fs::{Image, PackFs};
use crate::fuse::FuseAdapter;
use crate::readahead::StreamReadahead;
use crate::source::{open_image, ImageSource, IoMode};
use crate::squashfs::SquashFs;
use crate::union::{self, OnConflict, UnionHandle, UnionImage, UnionOptions};
use crate::zip::ZipFs;
use std::path::Path;
use std::sync::Arc;

/// Image formats packfs reads, told apart by their leading bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    SquashFs,
    Zip,
    /// A union of shards (`crate::union`).
    Union,
}

/// Recognises an image by its magic bytes; `name` is for the error.
pub fn detect(src: &dyn ImageSource, name: &str) -> Result<Format> {
    let mut head = [0u8; 4];
    if src.len() < 4 || src.read_at(0, &mut head).is_err() {
        return Err(FsError::UnknownFormat(name.to_string()));
    }
    match u32::from_le_bytes(head) {
        packfs_format::squashfs::MAGIC => Ok(Format::SquashFs),
        // A ZIP starts with its first member, or with its end record when empty.
        packfs_format::zip::SIG_LOCAL | packfs_format::zip::SIG_EOCD => Ok(Format::Zip),
        _ => Err(FsError::UnknownFormat(name.to_string())),
    }
}

/// Prefixes structural errors with the image's name (the CLI prints them as
/// they are, and a user with several images needs to know which one).
fn named(name: &str) -> impl Fn(FsError) -> FsError + '_ {
    move |e| match e {
        FsError::Corrupt(m) => FsError::Corrupt(format!("{name}: {m}")),
        FsError::Unsupported(m) => FsError::Unsupported(format!("{name}: {m}")),
        other => other,
    }
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
    /// How long the kernel caches "no such name" (`None`: not at all).
    pub negative_ttl: Option<std::time::Duration>,
}

/// What one `-o` option of `packfs mount` does.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Extra {
    /// A mount flag or option the kernel takes.
    Mount(fuser::MountOption),
    AllowOther,
    AllowRoot,
    /// Handled elsewhere or already the behaviour (`nonempty` by the CLI's
    /// mountpoint check, `auto_unmount` by its watcher process).
    Nothing,
}

/// Parses one `-o` option. Known flags become the kernel flags they name
/// (passed through as a raw string, the kernel rejects `noexec` and friends
/// with EINVAL); `rw` and unknown options are refused with a message.
fn parse_option(o: &str) -> std::result::Result<Extra, String> {
    use fuser::MountOption as M;
    Ok(Extra::Mount(match o {
        "ro" => M::RO,
        "rw" => return Err("rw: packfs mounts are read-only".into()),
        "dev" => M::Dev,
        "nodev" => M::NoDev,
        "suid" => M::Suid,
        "nosuid" => M::NoSuid,
        "exec" => M::Exec,
        "noexec" => M::NoExec,
        "atime" => M::Atime,
        "noatime" => M::NoAtime,
        "sync" => M::Sync,
        "async" => M::Async,
        "dirsync" => M::DirSync,
        "default_permissions" => M::DefaultPermissions,
        "allow_other" => return Ok(Extra::AllowOther),
        "allow_root" => return Ok(Extra::AllowRoot),
        "nonempty" | "auto_unmount" => return Ok(Extra::Nothing),
        x if x.starts_with("fsname=") => M::FSName(x["fsname=".len()..].into()),
        x if x.starts_with("subtype=") => M::Subtype(x["subtype=".len()..].into()),
        x if x.starts_with("max_read=") && x["max_read=".len()..].parse::<u32>().is_ok() => {
            M::CUSTOM(x.into())
        }
        x => {
            return Err(format!(
                "unknown mount option {x:?} (known: ro, dev, nodev, suid, nosuid, exec, noexec, \
                 atime, noatime, sync, async, dirsync, default_permissions, allow_other, \
                 allow_root, nonempty, auto_unmount, fsname=, subtype=, max_read=N)"
            ))
        }
    }))
}

/// Checks `-o` options before anything is mounted, so that a typo is an
/// error at the command line rather than an EINVAL from mount(2).
pub fn check_options(options: &[String]) -> std::result::Result<(), String> {
    options.iter().try_for_each(|o| parse_option(o).map(|_| ()))
}

/// The kernel options for `opts`: packfs's defaults, with any default the
/// user's `-o` contradicts (`atime` against `noatime`, `fsname=`...)
/// replaced by the user's choice.
fn mount_options(
    opts: &ServeOptions,
) -> std::io::Result<(Vec<fuser::MountOption>, fuser::SessionACL)> {
    use fuser::MountOption as M;
    use std::mem::discriminant as kind;
    let mut mo = vec![
        M::RO,
        M::FSName(opts.fsname.clone()),
        M::Subtype("packfs".into()),
        M::DefaultPermissions,
        M::NoAtime,
    ];
    let mut acl = if opts.allow_other {
        fuser::SessionACL::All
    } else {
        fuser::SessionACL::Owner
    };
    let opposite = |m: &M| -> Option<M> {
        Some(match m {
            M::Atime => M::NoAtime,
            M::NoAtime => M::Atime,
            M::Dev => M::NoDev,
            M::NoDev => M::Dev,
            M::Suid => M::NoSuid,
            M::NoSuid => M::Suid,
            M::Exec => M::NoExec,
            M::NoExec => M::Exec,
            M::Sync => M::Async,
            M::Async => M::Sync,
            _ => return None,
        })
    };
    for o in &opts.options {
        match parse_option(o).map_err(std::io::Error::other)? {
            Extra::Mount(m) => {
                let other = opposite(&m);
                mo.retain(|x| {
                    Some(x) != other.as_ref()
                        && !(matches!(m, M::FSName(_) | M::Subtype(_)) && kind(x) == kind(&m))
                });
                if !mo.contains(&m) {
                    mo.push(m);
                }
            }
            Extra::AllowOther => acl = fuser::SessionACL::All,
            Extra::AllowRoot if !opts.allow_other => acl = fuser::SessionACL::RootAndOwner,
            Extra::AllowRoot | Extra::Nothing => {}
        }
    }
    Ok((mo, acl))
}

/// Serves `image` at `mountpoint` until it is unmounted. `on_ready` runs once
/// the kernel has initialised the connection.
pub fn serve<I: Image>(
    image: I,
    mountpoint: &Path,
    opts: &ServeOptions,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
) -> std::io::Result<Arc<PackFs<I>>> {
    let fs = Arc::new(PackFs::new(image, opts.readahead, opts.threads.clamp(1, 4)));
    serve_fs(fs.clone(), mountpoint, opts, on_ready)?;
    Ok(fs)
}

/// [`serve`] for a filesystem the caller built, so that it can keep a
/// handle on it while it is served (e.g. to report its counters on a
/// signal). Returns when the mount goes away.
pub fn serve_fs<I: Image>(
    fs: Arc<PackFs<I>>,
    mountpoint: &Path,
    opts: &ServeOptions,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
) -> std::io::Result<()> {
    // Auto-unmount is not fusermount3's `auto_unmount` (with fuser that
    // forces allow_other, which unprivileged users cannot get without
    // user_allow_other in /etc/fuse.conf); the CLI runs its own watcher
    // process that unmounts when the daemon dies.
    let (mo, acl) = mount_options(opts)?;
    let adapter = FuseAdapter::new(fs, opts.negative_ttl, on_ready);
    let mut config = fuser::Config::default();
    config.mount_options = mo;
    config.acl = acl;
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let session = fuser::Session::new(adapter, mountpoint, &config)?;
    // fuser unmounts the mountpoint *path* when a session ends, even when
    // our mount is gone already (`packfs umount`, the kernel): its check
    // that the mount still exists reports a closed connection as mounted.
    // That unmount then removes whatever is mounted there now, such as the
    // next `packfs mount` of the same image at the same place (seen in CI;
    // `tests/mount_squashfs.rs` makes it certain with SIGSTOP). So the
    // session runs in the background and its handle is never dropped: when
    // it ends there is nothing of ours left to unmount, and a mount whose
    // server died is the CLI's unmount watcher's to remove.
    let bg = std::mem::ManuallyDrop::new(session.spawn()?);
    // SAFETY: `guard` is moved out of `bg` exactly once, and `bg` is never
    // used or dropped after that (ManuallyDrop), so nothing is freed twice.
    let guard = unsafe { std::ptr::read(&bg.guard) };
    guard
        .join()
        .map_err(|_| std::io::Error::other("the FUSE session thread panicked"))?
}

/// Any image packfs reads, as one concrete [`Image`] for the CLI and server.
pub enum AnyImage {
    SquashFs(SquashFs),
    Zip(ZipFs),
    /// Several images as one tree; its shards are SquashFs or Zip.
    Union(Box<UnionImage<AnyImage>>),
}

/// An image opened from a location ([`AnyImage::open_location`]).
pub struct OpenedImage {
    pub image: AnyImage,
    /// Length of the image file or object.
    pub len: u64,
    /// Request counters, for a remote image.
    pub remote: Option<Arc<crate::remote::RemoteCounters>>,
}

pub enum AnyHandle {
    SquashFs(crate::squashfs::OpenFile),
    Zip(crate::zip::ZipFile),
    Union(Box<UnionHandle<AnyHandle>>),
}

/// Whether the file at `path` looks like a shard manifest (JSON) rather
/// than an image: images start with binary magic, JSON with `{`.
pub fn is_manifest(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    head[..n]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

impl AnyImage {
    /// Opens the image file at `path` with positional reads, detecting its
    /// format, with a block cache of `cache_bytes`.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<Self> {
        Self::open_with(path, cache_bytes, IoMode::default())
    }

    /// [`AnyImage::open`] reading the file as `io` says. A shard manifest
    /// (`packfs pack --shards`) opens the union of its shards.
    pub fn open_with(path: &Path, cache_bytes: usize, io: IoMode) -> Result<Self> {
        if is_manifest(path) {
            return Self::open_union(
                &[path.to_path_buf()],
                cache_bytes,
                io,
                OnConflict::default(),
            );
        }
        Self::open_plain(path, Arc::new(BlockCache::new(cache_bytes)), io)
    }

    /// One SquashFS or ZIP image file (never a manifest) over `cache`.
    pub fn open_plain(path: &Path, cache: Arc<BlockCache>, io: IoMode) -> Result<Self> {
        // Sequential streams over the image get readahead (see readahead/).
        let src = StreamReadahead::new(open_image(path, io)?);
        Self::from_source_with_cache(Box::new(src), &path.display().to_string(), cache)
    }

    /// One tree over several inputs: a single manifest (its shards), or
    /// plain images in the order given (see [`crate::union`]). One cache of
    /// `cache_bytes` serves all of them. A single plain image opens as itself.
    pub fn open_union(
        inputs: &[std::path::PathBuf],
        cache_bytes: usize,
        io: IoMode,
        on_conflict: OnConflict,
    ) -> Result<Self> {
        let o = UnionOptions {
            cache_bytes,
            on_conflict,
            open: Box::new(move |p: &Path, cache: Arc<BlockCache>| Self::open_plain(p, cache, io)),
        };
        match inputs {
            [one] if is_manifest(one) => {
                Ok(AnyImage::Union(Box::new(union::open_manifest(one, o)?)))
            }
            [one] => Self::open_plain(one, Arc::new(BlockCache::new(cache_bytes)), io),
            many => {
                if let Some(m) = many.iter().find(|p| is_manifest(p)) {
                    return Err(FsError::Invalid(format!(
                        "{}: a manifest mounts alone, not with other images",
                        m.display()
                    )));
                }
                Ok(AnyImage::Union(Box::new(union::open_images(many, o)?)))
            }
        }
    }

    /// Opens the image at `loc` (a file read as `io` says, or a remote
    /// object read as `remote` says), wrapped for stream readahead.
    pub fn open_location(
        loc: &crate::location::ImageLocation,
        cache_bytes: usize,
        io: IoMode,
        remote: &crate::remote::RemoteOptions,
    ) -> Result<OpenedImage> {
        if let crate::location::ImageLocation::Local(p) = loc {
            if is_manifest(p) {
                let image =
                    Self::open_union(std::slice::from_ref(p), cache_bytes, io, OnConflict::Error)?;
                let len = std::fs::metadata(p).map_or(0, |m| m.len());
                return Ok(OpenedImage {
                    image,
                    len,
                    remote: None,
                });
            }
        }
        let o = crate::location::open_location(loc, io, remote)?;
        let len = o.source.len();
        let src = StreamReadahead::new(o.source);
        Ok(OpenedImage {
            image: Self::from_source(Box::new(src), &o.name, cache_bytes)?,
            len,
            remote: o.remote,
        })
    }

    /// Opens an image from any source (a file, memory, a fault-injecting
    /// test source, a remote object), detecting its format; `name` (a path
    /// or URL) prefixes errors.
    pub fn from_source(src: Box<dyn ImageSource>, name: &str, cache_bytes: usize) -> Result<Self> {
        Self::from_source_with_cache(src, name, Arc::new(BlockCache::new(cache_bytes)))
    }

    /// [`AnyImage::from_source`] over a given cache (or cache namespace).
    pub fn from_source_with_cache(
        src: Box<dyn ImageSource>,
        name: &str,
        cache: Arc<BlockCache>,
    ) -> Result<Self> {
        match detect(&*src, name) {
            Ok(Format::SquashFs) => SquashFs::open(src, cache)
                .map(AnyImage::SquashFs)
                .map_err(named(name)),
            Ok(Format::Zip) => ZipFs::open(src, cache)
                .map(AnyImage::Zip)
                .map_err(named(name)),
            Ok(Format::Union) => unreachable!("detect never answers Union"),
            // Anything else may still be a zip: self-extracting archives and
            // zips with data in front start with something other than "PK".
            Err(unknown) => ZipFs::open(src, cache)
                .map(AnyImage::Zip)
                .map_err(|_| unknown),
        }
    }

    pub fn format(&self) -> Format {
        match self {
            AnyImage::SquashFs(_) => Format::SquashFs,
            AnyImage::Zip(_) => Format::Zip,
            AnyImage::Union(_) => Format::Union,
        }
    }

    /// Decodes as much of the image into the cache as fits. Returns (blocks, bytes).
    pub fn preload(&self) -> Result<(u64, u64)> {
        match self {
            AnyImage::SquashFs(s) => s.preload(),
            AnyImage::Zip(z) => z.preload(),
            AnyImage::Union(_) => Ok((0, 0)),
        }
    }

    /// The block cache (for a union: the one all shards share).
    pub fn cache(&self) -> &Arc<BlockCache> {
        match self {
            AnyImage::SquashFs(s) => s.cache(),
            AnyImage::Zip(z) => z.cache(),
            AnyImage::Union(u) => u.cache(),
        }
    }
}

macro_rules! each {
    ($self:expr, $i:ident => $e:expr) => {
        match $self {
            AnyImage::SquashFs($i) => $e,
            AnyImage::Zip($i) => $e,
            AnyImage::Union($i) => {
                let $i = &**$i;
                $e
            }
        }
    };
}

impl Image for AnyImage {
    type Handle = AnyHandle;

    fn getattr(&self, node: crate::image::NodeId) -> Result<crate::image::Attr> {
        each!(self, i => i.getattr(node))
    }
    fn lookup(&self, parent: crate::image::NodeId, name: &[u8]) -> Result<crate::image::Attr> {
        each!(self, i => i.lookup(parent, name))
    }
    fn readdir(
        &self,
        dir: crate::image::NodeId,
        cookie: u64,
        sink: &mut dyn FnMut(crate::image::DirEntry) -> bool,
    ) -> Result<()> {
        each!(self, i => i.readdir(dir, cookie, sink))
    }
    fn open(&self, node: crate::image::NodeId) -> Result<AnyHandle> {
        match self {
            AnyImage::SquashFs(i) => Ok(AnyHandle::SquashFs(Image::open(i, node)?)),
            AnyImage::Zip(i) => Ok(AnyHandle::Zip(Image::open(i, node)?)),
            AnyImage::Union(i) => Ok(AnyHandle::Union(Box::new(Image::open(&**i, node)?))),
        }
    }
    fn read(&self, h: &AnyHandle, offset: u64, size: u32) -> Result<Vec<u8>> {
        match (self, h) {
            (AnyImage::SquashFs(i), AnyHandle::SquashFs(h)) => Image::read(i, h, offset, size),
            (AnyImage::Zip(i), AnyHandle::Zip(h)) => Image::read(i, h, offset, size),
            (AnyImage::Union(i), AnyHandle::Union(h)) => Image::read(&**i, h, offset, size),
            _ => Err(FsError::Invalid("handle from another image".into())),
        }
    }
    fn prefetch(&self, h: &AnyHandle, offset: u64, len: u64) {
        match (self, h) {
            (AnyImage::SquashFs(i), AnyHandle::SquashFs(h)) => Image::prefetch(i, h, offset, len),
            (AnyImage::Zip(i), AnyHandle::Zip(h)) => Image::prefetch(i, h, offset, len),
            (AnyImage::Union(i), AnyHandle::Union(h)) => Image::prefetch(&**i, h, offset, len),
            _ => {}
        }
    }

    fn readlink(&self, node: crate::image::NodeId) -> Result<Vec<u8>> {
        each!(self, i => i.readlink(node))
    }
    fn xattrs(&self, node: crate::image::NodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        each!(self, i => Image::xattrs(i, node))
    }
    fn statfs(&self) -> crate::image::StatFs {
        each!(self, i => i.statfs())
    }
    fn block_size(&self) -> u32 {
        each!(self, i => Image::block_size(i))
    }
    fn parent_ino(&self, dir: crate::image::NodeId) -> Result<u64> {
        each!(self, i => i.parent_ino(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::MountOption as M;

    fn opts(o: &[&str]) -> ServeOptions {
        ServeOptions {
            threads: 1,
            allow_other: false,
            options: o.iter().map(|s| s.to_string()).collect(),
            fsname: "packfs:x".into(),
            readahead: 0,
            negative_ttl: None,
        }
    }

    #[test]
    fn user_options_replace_the_defaults_they_contradict() {
        let (mo, acl) =
            mount_options(&opts(&["atime", "noexec", "fsname=data", "nonempty"])).unwrap();
        assert!(
            mo.contains(&M::Atime) && !mo.contains(&M::NoAtime),
            "{mo:?}"
        );
        assert!(mo.contains(&M::NoExec));
        assert!(mo.contains(&M::FSName("data".into())));
        assert!(!mo.contains(&M::FSName("packfs:x".into())));
        assert!(mo.contains(&M::RO) && mo.contains(&M::DefaultPermissions));
        assert_eq!(acl, fuser::SessionACL::Owner);
        let (_, acl) = mount_options(&opts(&["allow_other"])).unwrap();
        assert_eq!(acl, fuser::SessionACL::All);
        let (_, acl) = mount_options(&opts(&["allow_root"])).unwrap();
        assert_eq!(acl, fuser::SessionACL::RootAndOwner);
    }

    #[test]
    fn rw_and_unknown_options_are_refused_with_a_message() {
        assert!(check_options(&["rw".into()])
            .unwrap_err()
            .contains("read-only"));
        let e = check_options(&["noexec".into(), "colour=blue".into()]).unwrap_err();
        assert!(e.contains("colour=blue") && e.contains("known:"), "{e}");
        assert!(check_options(&["max_read=abc".into()]).is_err());
        assert!(check_options(&["max_read=131072".into(), "nosuid".into()]).is_ok());
    }
}
