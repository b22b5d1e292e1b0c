//! SquashFS 4.0: the on-disk format and the lazy reader.
pub mod dir;
pub mod format;
pub mod image;
pub mod inode;
pub mod meta;
pub mod reader;
pub mod xattr;

pub use reader::{OpenFile, SquashFs};
