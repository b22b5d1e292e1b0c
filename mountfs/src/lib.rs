//! packfs read side: image readers, the byte-budgeted block cache and the FUSE server.
//!
//! The filesystem core ([`fs::PackFs`]) answers over any [`image::Image`]:
//! the readers (`squashfs`, `zip`, `union`), their sources (`source`,
//! `remote`), the block cache and readahead. Images are opened by
//! [`open::Opener`]. None of it knows FUSE.
//!
//! Features: `fuse` (default) adds the FUSE server (module `fuse`: the
//! answer policy, the `fuser` adapter, the transports, mounting) and with it
//! `fuser`; without it the crate is the core, for callers that read images
//! in-process (the Python extension). `remote` (default) adds `s3://` and
//! `http(s)://` sources (`remote`), over the object-storage client
//! `packfs-objstore`.
pub mod access_profile;
pub mod buffers;
pub mod cache;
pub mod error;
pub mod fs;
#[cfg(feature = "fuse")]
pub mod fuse;
pub mod image;
pub mod location;
pub mod memory_limit;
pub mod open;
pub mod path_of;
pub mod readahead;
pub mod remote;
pub mod resolve;
pub mod source;
pub mod squashfs;
pub mod union;
pub mod verify;
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
