//! packfs read side: image readers, the byte-budgeted block cache and the FUSE adapter.
//!
//! Features: `fuse` (default) builds the FUSE adapter (modules `fuse` and `serve`)
//! and with it `fuser`; without it the crate is the filesystem core
//! ([`fs::PackFs`]) and the readers, for callers that read images in-process.
//! `remote` (default) adds `s3://` and `http(s)://` sources (`remote`), over
//! the object-storage client `packfs-objstore`.
pub mod buffers;
pub mod cache;
pub mod error;
pub mod fs;
#[cfg(feature = "fuse")]
pub mod fuse;
pub mod image;
pub mod location;
pub mod memory;
pub mod open;
#[cfg(feature = "fuse")]
pub mod ops;
pub mod readahead;
pub mod record;
pub mod remote;
pub mod resolve;
#[cfg(feature = "fuse")]
pub mod serve;
pub mod source;
pub mod squashfs;
#[cfg(feature = "fuse")]
pub mod transport;
pub mod union;
pub mod zip;

pub use error::{FsError, Result};

/// The optional features this build of the crate has, in Cargo's names, so
/// a binary can say what it was built with (`packfs --version`).
pub const FEATURES: &[&str] = &[
    #[cfg(feature = "fuse")]
    "fuse",
    #[cfg(feature = "remote")]
    "remote",
];
