//! The knobs of remote reading, with their defaults and limits.

use std::sync::Arc;

/// How remote images are reached and read (the CLI's remote flags): the
/// client's options (endpoint, credentials, timeout, counters) and what
/// the image source does with the object (ranges, caches, readahead).
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// How objects are reached.
    #[cfg(feature = "remote")]
    pub client: packfs_objstore::ClientOptions,
    /// Bytes per range request; ranges are aligned to it.
    pub range_size: u64,
    /// Byte budget of the fetched-range cache.
    pub cache_bytes: u64,
    /// Ranges fetched ahead of a reader moving through the object.
    pub readahead: u32,
    /// The node-local disk cache of fetched bytes (`--disk-cache`), None
    /// for none.
    pub disk_cache: Option<Arc<super::disk_cache::DiskCache>>,
    /// A fetched-range cache the objects opened with these options share
    /// (`cache_bytes` for all of them), or None for one of `cache_bytes`
    /// each. The shards of one union share one.
    #[cfg(feature = "remote")]
    pub shared_ranges: Option<super::ranges::SharedRanges>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            #[cfg(feature = "remote")]
            client: Default::default(),
            range_size: 4 << 20,
            cache_bytes: 256 << 20,
            readahead: 2,
            disk_cache: None,
            #[cfg(feature = "remote")]
            shared_ranges: None,
        }
    }
}

impl RemoteOptions {
    /// Checks the sizes: a range from 64 KiB to 256 MiB, a power of two, and
    /// a cache of at least two ranges; and the client's values.
    pub fn validate(&self) -> Result<(), String> {
        let r = self.range_size;
        if !r.is_power_of_two() || !(64 << 10..=256 << 20).contains(&r) {
            return Err(format!(
                "--range-size {r}: must be a power of two from 64K to 256M"
            ));
        }
        if self.cache_bytes < 2 * r {
            return Err(format!(
                "--range-cache {}: must hold at least two ranges ({} bytes)",
                self.cache_bytes,
                2 * r
            ));
        }
        #[cfg(feature = "remote")]
        self.client.validate()?;
        Ok(())
    }
}
