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
//! starts all of their fetches at once, on the runtime that all clients of
//! the process share (`read_at` is synchronous and called from FUSE session
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
//! **The client** is the `packfs_objstore` crate, which the write side
//! shares (design note in its crate doc): credentials, the shared runtime,
//! retries and timeouts, the version pinned at open by a HEAD and checked
//! on every range GET, request counters, uploads. What the source adds:
//!
//! **Failures are bounded in time.** Each fetch, retries included, is cut
//! at `--remote-timeout` by the client; past that the read is `FsError::Io`
//! naming the URL and the offset (EIO at the FUSE edge), never a hang.
//! While the server is failing, a fetch gets one attempt's time instead of
//! the whole timeout (see `source.rs`), so one `read()` that makes several
//! FUSE requests does not wait the timeout several times.
//!
//! **One version of the object.** Length and ETag are pinned when the
//! source is opened, before anything is mounted, and every fetch is of
//! that version, so an object replaced while mounted gives EIO ("changed
//! since it was opened"), never a mix of old and new bytes. Ranges already
//! cached are of the pinned version and keep being served. The first range
//! is fetched at open, so that a server that ignores `Range` or sends no
//! validator on range answers is an error of the open, saying so, never
//! "not an image". `packfs mount --stats` and `packfs bench` report the
//! client's counters of the source's requests.
//!
//! **The disk cache** ([`disk_cache`], `--disk-cache DIR`): fetched bytes
//! kept on node-local disk in checksummed chunks, keyed by the pinned
//! version, shared by the processes of a node and kept across restarts, so
//! a second epoch over an image larger than the range cache reads the disk
//! instead of the network. Every fetch asks it first (see that module).

pub mod disk_cache;
#[cfg(feature = "remote")]
mod error;
pub mod options;
#[cfg(feature = "remote")]
pub mod ranges;
#[cfg(feature = "remote")]
pub mod source;

pub use options::RemoteOptions;
#[cfg(feature = "remote")]
pub use source::RemoteSource;
