//! What a client sent and received: counted as requests leave the
//! process, so retries show.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Requests as they leave the process (retries included) and what the
/// reader made of them. All relaxed atomics: statistics, not synchronisation.
#[derive(Debug, Default)]
pub struct RemoteCounters {
    pub gets: AtomicU64,
    pub heads: AtomicU64,
    pub other_requests: AtomicU64,
    /// Requests that failed or answered 5xx/408/429 (each may be retried).
    pub failed_requests: AtomicU64,
    /// Ranges fetched successfully (one logical fetch may take several GETs).
    pub ranges: AtomicU64,
    /// Of those, fetched ahead of any reader.
    pub ranges_ahead: AtomicU64,
    pub bytes: AtomicU64,
    /// Bytes a reader found in its disk cache instead (not in `bytes`):
    /// mountfs's `--disk-cache`.
    pub disk_bytes: AtomicU64,
    /// Sum and maximum of the time from sending a GET to its headers.
    pub ttfb_us_sum: AtomicU64,
    pub ttfb_us_max: AtomicU64,
}

/// A snapshot of [`RemoteCounters`], as `--stats` and `bench` write it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RemoteStats {
    pub get_requests: u64,
    pub head_requests: u64,
    pub other_requests: u64,
    pub failed_requests: u64,
    /// GETs beyond one per range fetched: what retries cost.
    pub retries: u64,
    pub ranges_fetched: u64,
    pub ranges_ahead: u64,
    pub bytes_fetched: u64,
    /// Bytes read from the disk cache instead of the network.
    #[serde(default)]
    pub bytes_from_disk: u64,
    pub ttfb_ms_mean: f64,
    pub ttfb_ms_max: f64,
}

impl RemoteCounters {
    pub fn snapshot(&self) -> RemoteStats {
        let gets = self.gets.load(Relaxed);
        let ranges = self.ranges.load(Relaxed);
        RemoteStats {
            get_requests: gets,
            head_requests: self.heads.load(Relaxed),
            other_requests: self.other_requests.load(Relaxed),
            failed_requests: self.failed_requests.load(Relaxed),
            retries: gets.saturating_sub(ranges),
            ranges_fetched: ranges,
            ranges_ahead: self.ranges_ahead.load(Relaxed),
            bytes_fetched: self.bytes.load(Relaxed),
            bytes_from_disk: self.disk_bytes.load(Relaxed),
            ttfb_ms_mean: if gets > 0 {
                self.ttfb_us_sum.load(Relaxed) as f64 / gets as f64 / 1000.0
            } else {
                0.0
            },
            ttfb_ms_max: self.ttfb_us_max.load(Relaxed) as f64 / 1000.0,
        }
    }
}
