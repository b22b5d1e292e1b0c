//! What a union is opened with ([`UnionOptions`]: one cache budget, the
//! rule for paths several shards hold, and a caller-provided function that
//! opens a shard), and the [`ShardOpener`] that opens each shard over its
//! own namespace of the one shared cache. The union is generic over the
//! shards' image type (`crate::open::AnyImage` in practice), so it does not
//! depend on the opener of images.

use crate::cache::BlockCache;
use crate::error::Result;
use crate::location::ImageLocation;
use std::sync::Arc;

/// Opens one shard's image (a file or a remote object) over the cache
/// (namespace) it is given.
pub type OpenFn<I> = Box<dyn Fn(&ImageLocation, Arc<BlockCache>) -> Result<I> + Send + Sync>;

pub struct UnionOptions<I> {
    /// One cache budget shared by all shards.
    pub cache_bytes: usize,
    pub on_conflict: OnConflict,
    pub open: OpenFn<I>,
}

/// Opens shard images, each with its own namespace of the shared cache.
pub struct ShardOpener<I> {
    pub(super) cache: Arc<BlockCache>,
    pub(super) open: OpenFn<I>,
    pub(super) next_ns: std::sync::atomic::AtomicU32,
}

impl<I> ShardOpener<I> {
    pub(super) fn open(&self, path: &ImageLocation) -> std::result::Result<I, String> {
        let ns = self
            .next_ns
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Named once: most errors of an open name the file already, some
        // after their kind ("corrupt image: FILE: ...").
        (self.open)(path, Arc::new(self.cache.namespace(ns + 1))).map_err(|e| {
            let (name, msg) = (path.to_string(), e.to_string());
            match msg.contains(&name) {
                true => msg,
                false => format!("{name}: {msg}"),
            }
        })
    }
}

/// Which shard's entry a path held by several shards shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum OnConflict {
    /// Refuse to mount (plain images are checked at open).
    #[default]
    Error,
    First,
    Last,
}
