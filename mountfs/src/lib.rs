//! packfs read side: image readers, the byte-budgeted block cache and the FUSE adapter.
pub mod buffers;
pub mod cache;
pub mod error;
pub mod fs;
pub mod fuse;
pub mod image;
pub mod location;
pub mod open;
pub mod readahead;
pub mod remote;
pub mod serve;
pub mod source;
pub mod squashfs;
pub mod union;
pub mod zip;

pub use error::{FsError, Result};
