//! Opening images: an [`Opener`], built from plain [`OpenOptions`], opens a
//! file, a shard manifest, a remote object or several images merged into
//! one tree as one concrete [`Image`] ([`AnyImage`]), each image's format
//! told by its leading bytes ([`detect`]). The CLI (and with it the
//! bench, which reads through `packfs mount`) and the Python bindings all
//! open images through it.

use crate::cache::BlockCache;
use crate::error::{FsError, Result};
use crate::image::Image;
use crate::location::{self, Content, ImageLocation};
use crate::readahead::StreamReadahead;
use crate::remote::RemoteOptions;
use crate::source::{FileIdentity, ImageSource, IoMode};
use crate::squashfs::SquashFs;
use crate::union::{self, ManifestSource, OnConflict, UnionHandle, UnionImage, UnionOptions};
use crate::zip::{index::Index, ZipFs};
use std::path::{Path, PathBuf};
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
        FsError::Damaged(m) => FsError::Damaged(format!("{name}: {m}")),
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

pub enum AnyHandle {
    SquashFs(crate::squashfs::OpenFile),
    Zip(crate::zip::ZipFile),
    Union(Box<UnionHandle<AnyHandle>>),
}

/// A layer put around each image's source (each shard's) as it is opened,
/// under stream readahead: e.g. one that counts the reads reaching storage.
pub type WrapSource = Arc<dyn Fn(Box<dyn ImageSource>) -> Box<dyn ImageSource> + Send + Sync>;

/// How images are opened, as plain values: what the CLI's flags or
/// Python's arguments say. [`Opener`] does the rest.
#[derive(Clone)]
pub struct OpenOptions {
    /// Byte budget of the decoded-block cache (one cache for all the
    /// shards of a union).
    pub cache_bytes: usize,
    /// How image files are read.
    pub io: IoMode,
    /// How remote images, and the remote shards of a manifest, are read.
    /// Their requests are counted in `remote.client.counters` (made when
    /// absent): see [`OpenedImage::remote`].
    pub remote: RemoteOptions,
    /// Which image shows a path that several plain images given together
    /// hold ([`Opener::open_union`]). A manifest's shards come from one
    /// tree and cannot conflict: they open with [`OnConflict::Error`]
    /// whatever this says.
    pub on_conflict: OnConflict,
    /// Put around each image's (each shard's) source as it is opened,
    /// under the stream readahead.
    pub wrap_source: Option<WrapSource>,
    /// The index of a ZIP image built before (by a forked parent), used
    /// instead of reading the central directory again if the file opened
    /// is still the one it describes. Not used for a manifest's shards.
    pub zip_index: Option<ZipIndex>,
    /// Check every piece read against a SquashFS image's hash record (a
    /// damaged record fails the open). Off only for `packfs verify`'s
    /// second look at an image whose record is damaged.
    pub hash_records: bool,
}

impl OpenOptions {
    /// The defaults (positional reads, default remote options, conflicts
    /// refused, no wrapper, no index) with a cache of `cache_bytes`.
    pub fn new(cache_bytes: usize) -> Self {
        OpenOptions {
            cache_bytes,
            io: IoMode::default(),
            remote: RemoteOptions::default(),
            on_conflict: OnConflict::default(),
            wrap_source: None,
            zip_index: None,
            hash_records: true,
        }
    }
}

/// A local ZIP image's index and the version of the file it describes.
///
/// A ZIP's index (about 90 bytes an entry) is built from its central
/// directory by each process that opens it. A forked child that opens the
/// same, unchanged file again can take its parent's instead
/// ([`OpenOptions::zip_index`]): the index is immutable, so its pages stay
/// shared with the parent (copy-on-write, never written), and four forked
/// DataLoader workers hold one index, not five.
#[derive(Clone)]
pub struct ZipIndex {
    pub file: FileIdentity,
    pub index: Arc<Index>,
}

impl std::fmt::Debug for ZipIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZipIndex")
            .field("file", &self.file)
            .field("nodes", &self.index.nodes.len())
            .finish()
    }
}

/// An image an [`Opener`] opened, with what the caller may report.
pub struct OpenedImage {
    pub image: AnyImage,
    /// Length of the image file or object (of the manifest, for a
    /// manifest; 0 for several images given together).
    pub len: u64,
    /// Request counters, for a remote image or a manifest with a remote
    /// shard.
    #[cfg(feature = "remote")]
    pub remote: Option<Arc<packfs_objstore::RemoteCounters>>,
    /// A local ZIP image's index, for a forked child's
    /// [`OpenOptions::zip_index`].
    pub zip_index: Option<ZipIndex>,
}

/// Opens images as its [`OpenOptions`] say: the one way the CLI and the
/// Python bindings open them.
///
/// Every image's source is wrapped (the options' [`WrapSource`], then
/// stream readahead, see [`crate::readahead`]); its format is detected
/// ([`detect`]); structural errors are prefixed with its name.
#[derive(Clone)]
pub struct Opener {
    o: OpenOptions,
}

impl Opener {
    pub fn new(options: OpenOptions) -> Self {
        Opener { o: options }
    }

    pub fn options(&self) -> &OpenOptions {
        &self.o
    }

    /// Opens the image or shard manifest at `loc`: a file read as
    /// [`OpenOptions::io`] says, or a remote object read as
    /// [`OpenOptions::remote`] says. The shards of a manifest may be files
    /// or remote objects; the requests of all remote ones are counted in
    /// one set of counters.
    pub fn open(&self, loc: &ImageLocation) -> Result<OpenedImage> {
        // One set of counters for the image and all its shards.
        #[cfg(feature = "remote")]
        let (me, counters) = self.counted();
        #[cfg(not(feature = "remote"))]
        let me = self;
        let o = match location::open_content(loc, me.o.io, &me.o.remote)? {
            Content::Image(o) => o,
            Content::Manifest(bytes) => {
                let u = me.manifest(loc, &bytes)?;
                #[cfg(feature = "remote")]
                let any_remote = loc.is_remote() || u.has_remote();
                return Ok(OpenedImage {
                    image: AnyImage::Union(Box::new(u)),
                    len: bytes.len() as u64,
                    #[cfg(feature = "remote")]
                    remote: any_remote.then_some(counters),
                    zip_index: None,
                });
            }
        };
        let len = o.source.len();
        let file = o.source.identity();
        let src = me.wrapped(o.source);
        let cache = Arc::new(BlockCache::new(me.o.cache_bytes));
        let image = match (&me.o.zip_index, file) {
            (Some(z), Some(file)) if z.file == file => {
                AnyImage::Zip(ZipFs::with_index(Arc::from(src), cache, z.index.clone()))
            }
            _ => image_of(src, &o.name, cache, me.o.hash_records)?,
        };
        let zip_index = match (&image, file) {
            (AnyImage::Zip(z), Some(file)) => Some(ZipIndex {
                file,
                index: z.index(),
            }),
            _ => None,
        };
        Ok(OpenedImage {
            image,
            len,
            #[cfg(feature = "remote")]
            remote: o.remote,
            zip_index,
        })
    }

    /// One tree over several image files, in the order given (see
    /// [`crate::union`]; paths several hold are shown as
    /// [`OpenOptions::on_conflict`] says), one cache serving all of them.
    /// A single path opens as [`Opener::open`] opens it (an image as
    /// itself, a manifest as the union of its shards); a manifest among
    /// several is refused.
    pub fn open_union(&self, images: &[PathBuf]) -> Result<OpenedImage> {
        if let [one] = images {
            return self.open(&ImageLocation::Local(one.clone()));
        }
        if let Some(m) = images.iter().find(|p| location::is_manifest(p)) {
            return Err(FsError::Invalid(format!(
                "{}: a manifest mounts alone, not with other images",
                m.display()
            )));
        }
        let u = union::open_images(images, self.union_options(self.o.on_conflict))?;
        Ok(OpenedImage {
            image: AnyImage::Union(Box::new(u)),
            len: 0,
            #[cfg(feature = "remote")]
            remote: None,
            zip_index: None,
        })
    }

    /// An image read from `src` as it is (memory, a fault-injecting test
    /// source): no wrapper, no readahead; `name` (a path or URL) prefixes
    /// errors.
    pub fn open_source(&self, src: Box<dyn ImageSource>, name: &str) -> Result<AnyImage> {
        image_of(
            src,
            name,
            Arc::new(BlockCache::new(self.o.cache_bytes)),
            self.o.hash_records,
        )
    }

    /// This opener with its requests counted in one set of counters: the
    /// options' own, or new ones.
    #[cfg(feature = "remote")]
    fn counted(&self) -> (Opener, Arc<packfs_objstore::RemoteCounters>) {
        let mut me = self.clone();
        let counters =
            me.o.remote
                .client
                .counters
                .get_or_insert_with(Default::default)
                .clone();
        (me, counters)
    }

    /// `src` wrapped as every image's source is.
    fn wrapped(&self, src: Box<dyn ImageSource>) -> Box<dyn ImageSource> {
        let src = match &self.o.wrap_source {
            Some(wrap) => wrap(src),
            None => src,
        };
        Box::new(StreamReadahead::new(src))
    }

    /// A union whose shards this opener opens, one cache of the options'
    /// budget for them all.
    fn union_options(&self, on_conflict: OnConflict) -> UnionOptions<AnyImage> {
        let me = self.clone();
        UnionOptions {
            cache_bytes: self.o.cache_bytes,
            on_conflict,
            open: Box::new(move |loc: &ImageLocation, cache: Arc<BlockCache>| me.shard(loc, cache)),
        }
    }

    /// One shard of a union: a file or a remote object, over `cache`.
    fn shard(&self, loc: &ImageLocation, cache: Arc<BlockCache>) -> Result<AnyImage> {
        let o = location::open_location(loc, self.o.io, &self.o.remote)?;
        image_of(self.wrapped(o.source), &o.name, cache, self.o.hash_records)
    }

    /// The union a manifest's `bytes` describe, its shards resolved against
    /// `loc` and their lengths checked (remote ones by HEAD).
    fn manifest(&self, loc: &ImageLocation, bytes: &[u8]) -> Result<UnionImage<AnyImage>> {
        let sizes = |locs: &[ImageLocation]| location::lengths(locs, &self.o.remote);
        // One range cache for all the remote shards: the budget is the
        // image's, as a mount's block cache is, not each shard's (a union
        // of N shards would otherwise hold N budgets).
        #[cfg(feature = "remote")]
        let me = {
            let mut me = self.clone();
            let r = &mut me.o.remote;
            // The shards' sizes as the manifest records them (the union
            // checks them against the objects); 0 for a manifest it refuses.
            let total: u64 = serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .and_then(|m| {
                    m["shards"]
                        .as_array()
                        .map(|s| s.iter().filter_map(|s| s["size"].as_u64()).sum())
                })
                .unwrap_or(0);
            r.shared_ranges.get_or_insert_with(|| {
                crate::remote::ranges::SharedRanges::new(
                    r.cache_bytes as usize,
                    r.range_size as usize,
                    total,
                )
            });
            me
        };
        #[cfg(not(feature = "remote"))]
        let me = self;
        union::open_manifest(
            ManifestSource {
                location: loc,
                bytes,
                sizes: &sizes,
            },
            me.union_options(OnConflict::Error),
        )
    }
}

/// Detects the format of the image `src` holds and opens it over `cache`,
/// checking a SquashFS image's hash record with `hash_records`; `name` (a
/// path or URL) prefixes errors.
fn image_of(
    src: Box<dyn ImageSource>,
    name: &str,
    cache: Arc<BlockCache>,
    hash_records: bool,
) -> Result<AnyImage> {
    match detect(&*src, name) {
        Ok(Format::SquashFs) => SquashFs::open_with(src, cache, hash_records)
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
                Err(e) => match crate::zip::records::end_record(&*src)? {
                    Some(true) => Err(named(name)(e)),
                    _ => Err(unknown),
                },
            }
        }
        Err(e) => Err(e),
    }
}

impl AnyImage {
    /// The image file or shard manifest at `path` with the default
    /// options and a block cache of `cache_bytes`: [`Opener::open`].
    pub fn open(path: &Path, cache_bytes: usize) -> Result<Self> {
        let loc = ImageLocation::Local(path.to_path_buf());
        Ok(Opener::new(OpenOptions::new(cache_bytes)).open(&loc)?.image)
    }

    /// The image `src` holds, read as it is: [`Opener::open_source`].
    pub fn from_source(src: Box<dyn ImageSource>, name: &str, cache_bytes: usize) -> Result<Self> {
        Opener::new(OpenOptions::new(cache_bytes)).open_source(src, name)
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

    fn extent(&self, node: crate::image::NodeId) -> Result<crate::image::Extent> {
        each!(self, i => i.extent(node))
    }
    fn will_read(&self, span: crate::image::Extent) {
        each!(self, i => Image::will_read(i, span))
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
        let any = Opener::new(OpenOptions::new(64 << 20))
            .open_union(&images)
            .unwrap()
            .image;
        assert_eq!(any.format(), Format::Union);
        let fs = PackFs::new(any, 1 << 20, 1);
        step_and_count(&fs, "a");
        // The second shard's units are its own: its step is not taken for
        // a jump from the first shard's, and its window decodes its blocks
        // (fragments 2..=9 of the first shard are cached already).
        step_and_count(&fs, "b");
    }
}
