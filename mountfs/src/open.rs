//! Opening an image of either format, a shard union or a remote object as
//! one concrete [`Image`] ([`AnyImage`]), told apart by its leading bytes.

use crate::cache::BlockCache;
use crate::error::{FsError, Result};
use crate::image::Image;
use crate::location::ImageLocation;
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
///
/// `FsError::UnknownFormat` only for bytes that were read and are not an
/// image's: a read that fails is its own error (an I/O error, a server that
/// cannot serve ranges), which would be hidden behind "not an image".
pub fn detect(src: &dyn ImageSource, name: &str) -> Result<Format> {
    let mut head = [0u8; 4];
    if src.len() < 4 {
        return Err(FsError::UnknownFormat(name.to_string()));
    }
    src.read_at(0, &mut head)?;
    match u32::from_le_bytes(head) {
        packfs_format::squashfs::MAGIC => Ok(Format::SquashFs),
        // A ZIP starts with its first member, or with its end record when empty.
        packfs_format::zip::SIG_LOCAL | packfs_format::zip::SIG_EOCD => Ok(Format::Zip),
        // The marker that starts the first part of a split ZIP archive.
        0x0807_4b50 => Err(FsError::Unsupported(format!(
            "{name}: the first part of a split ZIP archive (join the parts: zip -s 0 LAST.zip --out JOINED.zip)"
        ))),
        _ => Err(FsError::UnknownFormat(name.to_string())),
    }
}

/// Prefixes structural errors with the image's name (the CLI prints them as
/// they are, and a user with several images needs to know which one).
fn named(name: &str) -> impl Fn(FsError) -> FsError + '_ {
    move |e| match e {
        FsError::Corrupt(m) => FsError::Corrupt(format!("{name}: {m}")),
        FsError::Unsupported(m) => FsError::Unsupported(format!("{name}: {m}")),
        FsError::BadBlock { what, source } => FsError::BadBlock {
            what: format!("{name}: {what}"),
            source,
        },
        other => other,
    }
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
    #[cfg(feature = "remote")]
    pub remote: Option<Arc<packfs_objstore::RemoteCounters>>,
}

pub enum AnyHandle {
    SquashFs(crate::squashfs::OpenFile),
    Zip(crate::zip::ZipFile),
    Union(Box<UnionHandle<AnyHandle>>),
}

/// The union a manifest's `bytes` describe, its shards resolved against
/// `loc` and their lengths checked (remote ones by HEAD, with `remote`).
pub fn open_manifest_bytes<I: Image>(
    loc: &ImageLocation,
    bytes: &[u8],
    remote: &crate::remote::RemoteOptions,
    o: UnionOptions<I>,
) -> Result<UnionImage<I>> {
    let sizes = |locs: &[ImageLocation]| crate::location::lengths(locs, remote);
    union::open_manifest(
        union::ManifestSource {
            location: loc,
            bytes,
            sizes: &sizes,
        },
        o,
    )
}

pub use crate::location::is_manifest;

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
        let remote = crate::remote::RemoteOptions::default();
        let o = UnionOptions {
            cache_bytes,
            on_conflict,
            open: Box::new(move |loc: &ImageLocation, cache: Arc<BlockCache>| {
                Self::open_shard(loc, cache, io, &remote)
            }),
        };
        match inputs {
            [one] if is_manifest(one) => {
                let loc = ImageLocation::Local(one.clone());
                let bytes = std::fs::read(one).map_err(|e| FsError::io(one.display(), e))?;
                let remote = crate::remote::RemoteOptions::default();
                Ok(AnyImage::Union(Box::new(open_manifest_bytes(
                    &loc, &bytes, &remote, o,
                )?)))
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

    /// One shard of a union: a file or a remote object, over `cache`,
    /// wrapped for stream readahead.
    pub fn open_shard(
        loc: &ImageLocation,
        cache: Arc<BlockCache>,
        io: IoMode,
        remote: &crate::remote::RemoteOptions,
    ) -> Result<Self> {
        match loc {
            ImageLocation::Local(p) => Self::open_plain(p, cache, io),
            _ => {
                let o = crate::location::open_location(loc, io, remote)?;
                let src = StreamReadahead::new(o.source);
                Self::from_source_with_cache(Box::new(src), &o.name, cache)
            }
        }
    }

    /// Opens the image or shard manifest at `loc` (a file read as `io`
    /// says, or a remote object read as `remote` says), wrapped for stream
    /// readahead. The shards of a manifest may be files or remote objects;
    /// the requests of all remote ones are counted in one set of counters.
    pub fn open_location(
        loc: &ImageLocation,
        cache_bytes: usize,
        io: IoMode,
        remote: &crate::remote::RemoteOptions,
    ) -> Result<OpenedImage> {
        // One set of counters for the image and all its shards.
        #[cfg(feature = "remote")]
        let mut counted = remote.clone();
        #[cfg(feature = "remote")]
        let (remote, counters) = {
            let c = counted.client.counters.get_or_insert_with(Default::default);
            let c = c.clone();
            (&counted, c)
        };
        let o = match crate::location::open_content(loc, io, remote)? {
            crate::location::Content::Image(o) => o,
            crate::location::Content::Manifest(bytes) => {
                let shard_opts = remote.clone();
                let opts = UnionOptions {
                    cache_bytes,
                    on_conflict: OnConflict::Error,
                    open: Box::new(move |l: &ImageLocation, cache: Arc<BlockCache>| {
                        Self::open_shard(l, cache, io, &shard_opts)
                    }),
                };
                let u = open_manifest_bytes(loc, &bytes, remote, opts)?;
                #[cfg(feature = "remote")]
                let any_remote = loc.is_remote() || u.has_remote();
                return Ok(OpenedImage {
                    image: AnyImage::Union(Box::new(u)),
                    len: bytes.len() as u64,
                    #[cfg(feature = "remote")]
                    remote: any_remote.then_some(counters),
                });
            }
        };
        let len = o.source.len();
        let src = StreamReadahead::new(o.source);
        Ok(OpenedImage {
            image: Self::from_source(Box::new(src), &o.name, cache_bytes)?,
            len,
            #[cfg(feature = "remote")]
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
            // With an end record that ends the file, it is one, and what is
            // wrong with it (a split archive's last part, missing leading
            // bytes) is the error, not "unrecognised magic"; a record with
            // bytes after it may be a chance match inside other data. A read
            // that fails while looking is that failure: whether it is an
            // image could not be told.
            // (The tail is read again only for that error, so that opening a
            // self-extractor costs one read of it, not two.)
            Err(unknown @ FsError::UnknownFormat(_)) => {
                let src: Arc<dyn ImageSource> = Arc::from(src);
                match ZipFs::open_shared(src.clone(), cache) {
                    Ok(z) => Ok(AnyImage::Zip(z)),
                    Err(io @ FsError::Io { .. }) => Err(io),
                    Err(e) => match crate::zip::format::end_record(&*src)? {
                        Some(true) => Err(named(name)(e)),
                        _ => Err(unknown),
                    },
                }
            }
            Err(e) => Err(e),
        }
    }

    pub fn format(&self) -> Format {
        match self {
            AnyImage::SquashFs(_) => Format::SquashFs,
            AnyImage::Zip(_) => Format::Zip,
            AnyImage::Union(_) => Format::Union,
        }
    }

    /// Decodes as much of the image into the cache as fits in about 90% of
    /// its budget; a union's shards in shard order, each opened for it.
    /// Returns (blocks, bytes).
    pub fn preload(&self) -> Result<(u64, u64)> {
        match self {
            AnyImage::SquashFs(s) => s.preload(),
            AnyImage::Zip(z) => z.preload(),
            AnyImage::Union(u) => {
                let limit = u.cache().preload_limit();
                let mut total = (0, 0);
                u.each_shard(|shard| {
                    let (blocks, bytes) = shard.preload()?;
                    total = (total.0 + blocks, total.1 + bytes);
                    // Decoded bytes too: blocks the cache evicted (its
                    // shards fill unevenly) would let every shard go on.
                    Ok(total.1 < limit && u.cache().preload_room() > 0)
                })?;
                Ok(total)
            }
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
    fn shared_unit(&self, h: &AnyHandle) -> Option<u64> {
        match (self, h) {
            (AnyImage::SquashFs(i), AnyHandle::SquashFs(h)) => Image::shared_unit(i, h),
            (AnyImage::Zip(i), AnyHandle::Zip(h)) => Image::shared_unit(i, h),
            (AnyImage::Union(i), AnyHandle::Union(h)) => Image::shared_unit(&**i, h),
            _ => None,
        }
    }
    fn prefetch_unit(&self, unit: u64) {
        each!(self, i => Image::prefetch_unit(i, unit))
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
    //! The wrappers forward the readahead hooks: image-order unit readahead
    //! runs through `AnyImage` (what `packfs mount` serves) and through a
    //! union of shards, as it does over a `SquashFs` served directly.

    use super::*;
    use crate::fs::PackFs;
    use crate::source::MemSource;
    use std::time::{Duration, Instant};

    /// Tails per fragment block: 8 KiB files in 128 KiB blocks.
    const PER_FRAGMENT: usize = 16;

    /// Compressible text, different for every `seed`.
    fn text(seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..8192)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b"abcdefgh ijklmnop\n"[(x % 18) as usize]
            })
            .collect()
    }

    /// A SquashFS image of 200 files `{prefix}NNN` of 8 KiB each, so that
    /// their tails fill fragment blocks in name order.
    fn image(dir: &Path, prefix: &str) -> std::path::PathBuf {
        let src = dir.join(prefix);
        std::fs::create_dir(&src).unwrap();
        for i in 0..200u64 {
            std::fs::write(src.join(format!("{prefix}{i:03}")), text(i)).unwrap();
        }
        let img = dir.join(format!("{prefix}.sqfs"));
        packer::pack_squashfs(&src, &img, &packer::PackOptions::default()).unwrap();
        img
    }

    fn read(fs: &PackFs<AnyImage>, name: &str) {
        let node = fs.resolve(name.as_bytes()).unwrap().node;
        let i: u64 = name[1..].parse().unwrap();
        assert!(fs.read(node, 0, 1 << 20).unwrap() == text(i), "{name}");
    }

    fn misses(fs: &PackFs<AnyImage>) -> u64 {
        fs.image.cache().stats().misses
    }

    /// Waits for `want` cache misses (at most 10 s), then a little longer
    /// so that decodes beyond `want` would show too.
    fn settle(fs: &PackFs<AnyImage>, want: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        while misses(fs) < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        misses(fs)
    }

    /// Reads the first file of fragment 0, then of fragment 1: the step by
    /// one unit has fragments 2..=9 decoded in the background (1 MiB of
    /// readahead is a window of 8 blocks), so 9 misses in all after the
    /// first read.
    fn step_and_count(fs: &PackFs<AnyImage>, prefix: &str) {
        // Nodes resolved first: from then on the only misses are data blocks.
        for i in [0, PER_FRAGMENT] {
            fs.resolve(format!("{prefix}{i:03}").as_bytes()).unwrap();
        }
        read(fs, &format!("{prefix}000"));
        // Fragment 0 and the fragment table's metadata block.
        let base = misses(fs);
        read(fs, &format!("{prefix}{PER_FRAGMENT:03}"));
        assert_eq!(settle(fs, base + 9), base + 9, "images of {prefix}");
    }

    #[test]
    fn any_image_forwards_image_order_unit_readahead() {
        let t = tempfile::tempdir().unwrap();
        let img = image(t.path(), "a");
        let any = AnyImage::from_source(
            Box::new(MemSource(std::fs::read(&img).unwrap())),
            "a",
            64 << 20,
        )
        .unwrap();
        assert_eq!(any.format(), Format::SquashFs);
        step_and_count(&PackFs::new(any, 1 << 20, 1), "a");
    }

    #[test]
    fn a_union_forwards_unit_readahead_to_the_shard_being_read() {
        let t = tempfile::tempdir().unwrap();
        let images = [image(t.path(), "a"), image(t.path(), "b")];
        let any =
            AnyImage::open_union(&images, 64 << 20, IoMode::default(), OnConflict::Error).unwrap();
        assert_eq!(any.format(), Format::Union);
        let fs = PackFs::new(any, 1 << 20, 1);
        step_and_count(&fs, "a");
        // The second shard's units are its own: its step is not taken for
        // a jump from the first shard's, and its window decodes its blocks
        // (fragments 2..=9 of the first shard are cached already).
        step_and_count(&fs, "b");
    }
}
