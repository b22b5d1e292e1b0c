//! The knobs of remote reading, with their defaults and limits.

use super::stats::RemoteCounters;
use std::sync::Arc;
use std::time::Duration;

/// How remote images are reached and read (the CLI's remote flags).
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// S3 endpoint URL (`--endpoint`); beats `AWS_ENDPOINT_URL` and profiles.
    pub endpoint: Option<String>,
    /// Profile of `~/.aws/credentials` and `~/.aws/config` (`--profile`).
    pub profile: Option<String>,
    /// Bytes per range request; ranges are aligned to it.
    pub range_size: u64,
    /// Byte budget of the fetched-range cache.
    pub cache_bytes: u64,
    /// Longest a read may take, retries included, before it is EIO.
    pub timeout: Duration,
    /// Ranges fetched ahead of a reader moving through the object.
    pub readahead: u32,
    /// Counters to add this source's requests to, shared by the shards of
    /// a manifest so one set reports them all; None: the source's own.
    pub counters: Option<Arc<RemoteCounters>>,
    /// The node-local disk cache of fetched bytes (`--disk-cache`), None
    /// for none.
    pub disk_cache: Option<Arc<super::disk_cache::DiskCache>>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            endpoint: None,
            profile: None,
            range_size: 4 << 20,
            cache_bytes: 256 << 20,
            timeout: Duration::from_secs(60),
            readahead: 2,
            counters: None,
            disk_cache: None,
        }
    }
}

impl RemoteOptions {
    /// Time for one attempt of a request: a quarter of the total, 1 to 20 s,
    /// so a stalled connection leaves room for retries.
    pub fn attempt_timeout(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(20))
    }

    /// Checks the sizes: a range from 64 KiB to 256 MiB, a power of two, and
    /// a cache of at least two ranges.
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
        if self.timeout.is_zero() {
            return Err("--remote-timeout must be more than 0 seconds".into());
        }
        Ok(())
    }
}
