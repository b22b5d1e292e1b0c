//! The knobs of the client, with their defaults and limits: where requests
//! go, with which credentials, and how long they may take. How an object is
//! then read (range sizes, caches, readahead) is the reader's business.

use crate::stats::RemoteCounters;
use std::sync::Arc;
use std::time::Duration;

/// How objects are reached (the CLI's `--endpoint`, `--profile` and
/// `--remote-timeout`).
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// S3 endpoint URL (`--endpoint`); beats `AWS_ENDPOINT_URL` and profiles.
    pub endpoint: Option<String>,
    /// Profile of `~/.aws/credentials` and `~/.aws/config` (`--profile`).
    pub profile: Option<String>,
    /// Longest a request may take, retries included, before it fails.
    pub timeout: Duration,
    /// Counters to add this client's requests to, shared by the shards of
    /// a manifest so one set reports them all; None: the client's own.
    pub counters: Option<Arc<RemoteCounters>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            endpoint: None,
            profile: None,
            timeout: Duration::from_secs(60),
            counters: None,
        }
    }
}

impl ClientOptions {
    /// Time for one attempt of a request: a quarter of the total, 1 to 20 s,
    /// so a stalled connection leaves room for retries.
    pub fn attempt_timeout(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(20))
    }

    /// Checks the values: a timeout of more than zero.
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout.is_zero() {
            return Err("--remote-timeout must be more than 0 seconds".into());
        }
        Ok(())
    }
}
