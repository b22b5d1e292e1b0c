//! Images read straight from object storage (`s3://BUCKET/KEY`) or a web
//! server (`http(s)://HOST/PATH`) by range requests: no staging copy, no
//! inodes, and many nodes can read one object at once.
//!
//! # Design
//!
//! **What a request costs.** On object storage every request pays a first-byte
//! latency (tens of ms on LUMI-O or S3) that dwarfs the
//! transfer of a few MiB, and some stores bill per request. So the unit of
//! I/O is a *range*: the object is cut into aligned ranges of
//! `RemoteOptions::range_size` bytes (4 MiB by default, `--range-size`), and a
//! read of any bytes fetches the ranges that cover them, whole. The readers
//! above ask for small, scattered pieces (a 96-byte superblock, 8 KiB
//! metadata blocks, the fragment and id indexes at the end, 128 KiB data
//! blocks): aligned ranges turn the metadata walk of a whole image into a
//! handful of requests, where the decoded-block cache alone would send one
//! request per metadata block.
//!
//! **The range cache** ([`ranges`]) keeps fetched ranges in an LRU with a byte
//! budget (`--range-cache`; the CLI's default is an eighth of the memory the
//! process may use, 256 MiB to 8 GiB), so memory is bounded
//! whatever the image size, and a fetch in flight is shared: a second reader
//! of the same range waits for the first request instead of sending its own
//! (single flight, as the block cache does for decoding). A failed fetch is
//! not remembered: the next read asks again, so a mount recovers when the
//! server does.
//!
//! **Pieces, for an object larger than the cache.** Whole ranges pay off
//! when what they bring stays until it is read; for an object larger than
//! the range cache, a reader jumping around (a shuffled epoch over small
//! files) would fetch a whole range per file and lose it before its
//! neighbours are read (many times the image per pass). There a read that
//! is not moving through the object fetches aligned pieces of 1/16 range
//! (256 KiB by default) instead; sequential readers still get whole ranges
//! and readahead (see [`source::RemoteSource`]).
//!
//! **Parallel requests and readahead.** A read spanning several ranges
//! starts all of their fetches at once, on a small tokio runtime that all
//! clients of the process share ([`client::runtime`]; `read_at` is synchronous and called from FUSE session
//! threads, which wait on the fetch). `will_need` hints start fetches without
//! waiting; the image source is wrapped in
//! [`crate::readahead::StreamReadahead`] like a local one, which widens the
//! hints of sequential streams to run 4 MiB ahead, and the source itself runs
//! [`RemoteOptions::readahead`] ranges ahead of a reader that moves from one
//! range to the next (a sequential pass then waits for the network once,
//! not once per range). Readahead fetches are bounded: at most
//! [`ranges::MAX_AHEAD`] at a time and never more than half the cache
//! budget in flight.
//!
//! **Failures are bounded in time.** Each request has an attempt timeout
//! (a quarter of `--remote-timeout`, 1 to 20 s); 5xx answers, 408, 429,
//! connection errors and timed-out attempts are retried with exponential
//! backoff (object_store's retry loop: 50 ms doubling to 2 s); and the whole
//! fetch, retries included, is cut at `--remote-timeout`. Past that the read
//! is `FsError::Io` naming the URL and the offset (EIO at the FUSE edge),
//! never a hang; 4xx answers fail at once. Until the server has answered
//! once, a refused connection, an unknown host or a failed TLS handshake
//! fail at once too: that is a wrong URL or endpoint, which retrying for a
//! minute only hides; after, a refused connection is a server restarting,
//! and is retried. A timeout names the last failed attempt ("HTTP 503
//! …, still failing after 60 s"), and no message carries a server's error
//! page (an S3 error's Code and Message are kept).
//!
//! **One version of the object.** The length and ETag (or, for servers
//! without ETags, Last-Modified) are pinned when the source is opened, by a
//! HEAD request that also proves the credentials and the object before
//! anything is mounted (a 403 or 404 is an error naming the URL and the
//! status). Every GET carries `If-Match: ETAG`, and the ETag, total length
//! and range of each answer are checked again, so an object replaced while
//! mounted gives EIO ("changed since it was opened"), never a mix of old and
//! new bytes. Ranges already cached are of the pinned version and keep
//! being served. The first range is fetched at open, so that a server that
//! ignores `Range` or sends no validator on range answers is an error of
//! the open, saying so, never "not an image".
//!
//! **Counted.** [`RemoteCounters`]: HTTP requests by kind as they leave the
//! process (retries included), ranges fetched, bytes fetched, readahead
//! fetches, failures and time to first byte; `packfs mount --stats` and
//! `packfs bench` report them.
//!
//! **The disk cache** ([`disk_cache`], `--disk-cache DIR`): fetched bytes
//! kept on node-local disk in checksummed chunks, keyed by the pinned
//! version, shared by the processes of a node and kept across restarts, so
//! a second epoch over an image larger than the range cache reads the disk
//! instead of the network. Every fetch asks it first (see that module).
//!
//! **Credentials** ([`config`]) come the way S3 users have them: the
//! `AWS_*` environment, `AWS_PROFILE` or `--profile` with `~/.aws/credentials`
//! and `~/.aws/config` (what LUMI's `lumio-conf` writes), `--endpoint`; no
//! credentials means anonymous requests (public buckets). Signing is
//! object_store's; nothing here signs requests.
//!
//! **Upload** ([`upload`]): `packfs pack -o s3://...` writes the image to a
//! local temporary file and then sends it as a multipart upload, part by
//! part (see that module for why not while it is written).

#[cfg(feature = "remote")]
pub mod client;
pub mod config;
pub mod disk_cache;
pub mod error;
#[cfg(feature = "remote")]
pub mod objects;
pub mod options;
#[cfg(feature = "remote")]
pub mod ranges;
#[cfg(feature = "remote")]
mod roots;
#[cfg(feature = "remote")]
pub mod source;
pub mod stats;
#[cfg(feature = "remote")]
pub mod upload;

#[cfg(feature = "remote")]
pub use client::{Remote, Target};
pub use error::RemoteError;
pub use options::RemoteOptions;
#[cfg(feature = "remote")]
pub use source::RemoteSource;
pub use stats::{RemoteCounters, RemoteStats};
