//! packfs's object-storage client: objects on S3 (`s3://BUCKET/KEY`) or a
//! web server (`http(s)://HOST/PATH`), read by range requests of one
//! pinned version, read front to back as a stream, and written by
//! multipart upload. Both sides use it: mountfs reads images through it
//! (its `remote` module adds the range cache, readahead and disk cache of
//! an image source), the packer reads archives and uploads images. It
//! knows nothing of images or archives.
//!
//! # Design
//!
//! **Sync on the outside.** Callers are synchronous (FUSE session threads,
//! the packer's workers): they call [`Remote::block_on`] or spawn onto
//! [`Remote::handle`] and wait. The requests run on a small tokio runtime
//! that every client of the process shares ([`client::runtime`]: a
//! manifest of hundreds of shards opens hundreds of objects, and two
//! worker threads serve them all), started on first use and again in a
//! process forked after it (see [`client`]).
//!
//! **Failures are bounded in time.** Each request has an attempt timeout
//! (a quarter of `--remote-timeout`, 1 to 20 s,
//! [`ClientOptions::attempt_timeout`]); 5xx answers, 408, 429, connection
//! errors and timed-out attempts are retried with exponential backoff
//! (object_store's retry loop: 50 ms doubling to 2 s); and the whole
//! fetch, retries included, is cut at `--remote-timeout`. Past that it is a
//! [`RemoteError`] naming the URL and the operation, never a hang; 4xx
//! answers fail at once. Until the server has answered once, a refused
//! connection, an unknown host or a failed TLS handshake fail at once too:
//! that is a wrong URL or endpoint, which retrying for a minute only hides;
//! after, a refused connection is a server restarting, and is retried. A
//! timeout names the last failed attempt ("HTTP 503 …, still failing
//! after 60 s"), and no message carries a server's error page (an S3
//! error's Code and Message are kept).
//!
//! **One version of the object.** A reader pins the length and ETag (or,
//! for servers without ETags, Last-Modified) when it opens the object, by
//! a HEAD ([`Remote::head`]) that also proves the credentials and the
//! object before anything is read (a 403 or 404 is an error naming the URL
//! and the status; a presigned URL that refuses HEAD is pinned by a
//! one-byte GET). Every range GET ([`Remote::get_range`]) carries
//! `If-Match: ETAG`, and the ETag, total length and range of each answer
//! are checked again, so an object replaced while it is read is an error
//! ("changed since it was opened"), never a mix of old and new bytes.
//!
//! **Streaming reads** ([`ObjectReader`], module [`reader`]): one object as
//! a `std::io::Read`, in chunks of 8 MiB with two fetched ahead, so the
//! network works while the consumer does; memory is bounded by the chunks.
//!
//! **Counted.** [`RemoteCounters`]: HTTP requests by kind as they leave the
//! process (retries included), ranges and bytes fetched, fetches made ahead
//! of a reader, failures and time to first byte; `packfs mount --stats`
//! and `packfs bench` report them.
//!
//! **Credentials** ([`config`]) come the way S3 users have them: the
//! `AWS_*` environment, `AWS_PROFILE` or `--profile` with `~/.aws/credentials`
//! and `~/.aws/config` (what LUMI's `lumio-conf` writes), `--endpoint`; no
//! credentials means anonymous requests (public buckets). Signing is
//! object_store's; nothing here signs requests. TLS roots: the machine's
//! and Mozilla's (`tls_roots.rs`).
//!
//! **Other objects of a bucket** ([`bucket`]): the lengths of a manifest's
//! shards (concurrent HEADs), listing, small GETs and PUTs.
//!
//! **Upload** ([`upload`]): `packfs pack -o s3://...` writes the image to a
//! local temporary file and then sends it as a multipart upload, part by
//! part (see that module for why not while it is written).

pub mod bucket;
pub mod client;
pub mod config;
pub mod error;
pub mod options;
pub mod parts;
mod range;
pub mod reader;
pub mod stats;
mod tls_roots;
pub mod upload;

pub use client::{Remote, Target, Version};
pub use error::{RemoteError, Unreachable};
pub use options::ClientOptions;
pub use reader::{ObjectReader, ReaderOptions};
pub use stats::{RemoteCounters, RemoteStats};
