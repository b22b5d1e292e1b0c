//! Opening an image location as the CLI does, with the reads that reach
//! storage counted (for `Image.stats()`).
//!
//! This is `AnyImage::open_location` with one layer added: a counting
//! source under each image (each shard of a manifest), between the file or
//! object and the stream readahead. mountfs's `CountingSource` counts per
//! source; a union has one per shard, so the binding's [`Counted`] adds to
//! one shared set of counters instead. Format detection, the union, remote
//! sources and the readers are mountfs's.

use mountfs::cache::BlockCache;
use mountfs::location::{self, ImageLocation};
use mountfs::open::{open_manifest_bytes, AnyImage};
use mountfs::readahead::StreamReadahead;
use mountfs::remote::disk_cache::DiskCache;
use mountfs::remote::RemoteOptions;
use mountfs::source::{open_image, FileIdentity, ImageSource, IoMode};
use mountfs::union::{OnConflict, UnionOptions};
use mountfs::zip::{index::Index, ZipFs};
use mountfs::FsError;
use packfs_objstore::{ClientOptions, RemoteCounters};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What the caller chose (Python's `Image(...)` arguments, the cache
/// budget already divided among workers).
#[derive(Clone, Debug)]
pub struct Options {
    /// Byte budget of the decoded-block cache.
    pub cache_bytes: usize,
    /// Byte budget of a remote image's fetched-range cache.
    pub range_cache: u64,
    pub profile: Option<String>,
    pub endpoint: Option<String>,
    /// The node-local disk cache of a remote image's fetched bytes, shared
    /// with every other process that opens the same directory.
    pub disk_cache: Option<Arc<DiskCache>>,
    /// How long a remote fetch may take, retries included (`None`: the
    /// command line's default).
    pub timeout: Option<std::time::Duration>,
    /// The index of a ZIP image this process inherited (a forked
    /// DataLoader worker's parent's), used if the file opened is still the
    /// file it was built from.
    pub zip_index: Option<ZipIndex>,
}

/// A local ZIP image's index and the version of the file it describes.
///
/// A ZIP's index (about 90 bytes an entry) is built from its central
/// directory by each process that opens it. A forked child that opens the
/// same, unchanged file again takes its parent's instead: the index is
/// immutable, so its pages stay shared with the parent (copy-on-write,
/// never written), and four forked DataLoader workers hold one index, not
/// five.
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

/// Reads that reached the image file or object source, summed over shards.
#[derive(Debug, Default)]
pub struct StorageCounters {
    pub reads: AtomicU64,
    pub bytes: AtomicU64,
}

/// An image source whose reads are added to shared counters.
struct Counted<S> {
    inner: S,
    counters: Arc<StorageCounters>,
}

impl<S: ImageSource> ImageSource for Counted<S> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> mountfs::Result<()> {
        self.counters.reads.fetch_add(1, Relaxed);
        self.counters.bytes.fetch_add(buf.len() as u64, Relaxed);
        self.inner.read_at(off, buf)
    }
    fn will_need(&self, off: u64, len: usize) {
        self.inner.will_need(off, len)
    }
}

/// An opened image and its counters.
pub struct Opened {
    pub image: AnyImage,
    pub storage: Arc<StorageCounters>,
    pub remote: Option<Arc<RemoteCounters>>,
    /// A local ZIP image's index, for a forked child's [`Options::zip_index`].
    pub zip_index: Option<ZipIndex>,
}

/// Counted, then wrapped for stream readahead, as `AnyImage` opens images.
fn wrap(src: Box<dyn ImageSource>, counters: &Arc<StorageCounters>) -> Box<dyn ImageSource> {
    Box::new(StreamReadahead::new(Counted {
        inner: src,
        counters: counters.clone(),
    }))
}

/// Opens `location` (a file, a shard manifest, `s3://BUCKET/KEY`,
/// `http(s)://...`).
pub fn open(location: &std::path::Path, o: &Options) -> Result<Opened, FsError> {
    let loc = ImageLocation::from_path(location).map_err(FsError::Invalid)?;
    let storage = Arc::new(StorageCounters::default());
    let counters = Arc::new(RemoteCounters::default());
    let client = ClientOptions::default();
    let remote = RemoteOptions {
        client: ClientOptions {
            endpoint: o.endpoint.clone(),
            profile: o.profile.clone(),
            timeout: o.timeout.unwrap_or(client.timeout),
            counters: Some(counters.clone()),
        },
        cache_bytes: o.range_cache,
        disk_cache: o.disk_cache.clone(),
        ..Default::default()
    };
    remote.validate().map_err(FsError::Invalid)?;
    let opened = match location::open_content(&loc, IoMode::Pread, &remote)? {
        location::Content::Image(o) => o,
        location::Content::Manifest(bytes) => {
            let (storage2, shard_remote) = (storage.clone(), remote.clone());
            let opts = UnionOptions {
                cache_bytes: o.cache_bytes,
                on_conflict: OnConflict::Error,
                open: Box::new(move |shard: &ImageLocation, cache| {
                    let src = match shard {
                        ImageLocation::Local(p) => open_image(p, IoMode::Pread)?,
                        _ => location::open_location(shard, IoMode::Pread, &shard_remote)?.source,
                    };
                    AnyImage::from_source_with_cache(
                        wrap(src, &storage2),
                        &shard.to_string(),
                        cache,
                    )
                }),
            };
            let u = open_manifest_bytes(&loc, &bytes, &remote, opts)?;
            let any_remote = loc.is_remote() || u.has_remote();
            return Ok(Opened {
                image: AnyImage::Union(Box::new(u)),
                storage,
                remote: any_remote.then_some(counters),
                zip_index: None,
            });
        }
    };
    let file = opened.source.identity();
    let src = wrap(opened.source, &storage);
    let image = match (&o.zip_index, file) {
        (Some(z), Some(file)) if z.file == file => AnyImage::Zip(ZipFs::with_index(
            Arc::from(src),
            Arc::new(BlockCache::new(o.cache_bytes)),
            z.index.clone(),
        )),
        _ => AnyImage::from_source(src, &opened.name, o.cache_bytes)?,
    };
    let zip_index = match (&image, file) {
        (AnyImage::Zip(z), Some(file)) => Some(ZipIndex {
            file,
            index: z.index(),
        }),
        _ => None,
    };
    Ok(Opened {
        image,
        storage,
        remote: opened.remote,
        zip_index,
    })
}
