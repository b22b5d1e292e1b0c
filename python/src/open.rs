//! Python's `Image(...)` arguments as mountfs's opener options, and the
//! one layer the binding adds to each image's source (each shard's): its
//! reads counted, for `Image.stats()`. Opening itself (locations, format
//! detection, the union, remote sources) is mountfs's [`Opener`].

use mountfs::open::{OpenOptions, OpenedImage, Opener, ZipIndex};
use mountfs::remote::disk_cache::DiskCache;
use mountfs::remote::RemoteOptions;
use mountfs::source::{ImageSource, IoMode};
use mountfs::union::OnConflict;
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
    /// Bytes per range request of a remote image (`None`: the command
    /// line's default).
    pub range_size: Option<u64>,
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

/// Reads that reached the image file or object source, summed over shards.
#[derive(Debug, Default)]
pub struct StorageCounters {
    pub reads: AtomicU64,
    pub bytes: AtomicU64,
}

/// An image source whose reads are added to shared counters (mountfs's
/// `CountingSource` counts per source; a union has one per shard).
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
    fn will_read(&self, off: u64, len: usize) {
        self.inner.will_read(off, len)
    }
}

/// An opened image and its counters.
pub struct Opened {
    pub image: OpenedImage,
    pub storage: Arc<StorageCounters>,
}

/// Opens `location` (a file, a shard manifest, `s3://BUCKET/KEY`,
/// `http(s)://...`).
pub fn open(location: &std::path::Path, o: &Options) -> Result<Opened, FsError> {
    let loc = mountfs::location::ImageLocation::from_path(location).map_err(FsError::Invalid)?;
    let client = ClientOptions::default();
    let remote = RemoteOptions {
        client: ClientOptions {
            endpoint: o.endpoint.clone(),
            profile: o.profile.clone(),
            timeout: o.timeout.unwrap_or(client.timeout),
            counters: Some(Arc::new(RemoteCounters::default())),
        },
        cache_bytes: o.range_cache,
        disk_cache: o.disk_cache.clone(),
        ..Default::default()
    };
    let remote = RemoteOptions {
        range_size: o.range_size.unwrap_or(remote.range_size),
        ..remote
    };
    remote.validate().map_err(FsError::Invalid)?;
    let storage = Arc::new(StorageCounters::default());
    let counters = storage.clone();
    let image = Opener::new(OpenOptions {
        cache_bytes: o.cache_bytes,
        io: IoMode::Pread,
        remote,
        on_conflict: OnConflict::Error,
        wrap_source: Some(Arc::new(move |inner| {
            Box::new(Counted {
                inner,
                counters: counters.clone(),
            })
        })),
        zip_index: o.zip_index.clone(),
        hash_records: true,
    })
    .open(&loc)?;
    Ok(Opened { image, storage })
}
