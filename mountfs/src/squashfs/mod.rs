//! The lazy SquashFS reader. The on-disk records are decoded by
//! `packfs_format::squashfs`; these modules walk them.
//!
//! Dependencies run one way, top to bottom (no module imports one above it):
//!
//! ```text
//! image    the Image trait for the filesystem core (node ids, attrs)
//! reader   SquashFs: open, file reads, prefetch, preload
//! inode, dir, xattr   functions over a metadata cursor and the tables
//! tables   id table, fragment and xattr id indexes
//! meta     MetaCursor: reads forward across metadata blocks
//! blocks   Blocks: image source + block cache + codec (+ hash record)
//! hashes   HashRecord: the hash record, found from the image's end
//! ```
pub mod blocks;
pub mod dir;
pub mod hashes;
pub mod image;
pub mod inode;
pub mod meta;
pub mod reader;
pub mod tables;
pub mod xattr;

pub use reader::{OpenFile, SquashFs};
