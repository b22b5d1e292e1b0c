//! packfs on-disk formats: the one place where the bytes of a SquashFS 4.0
//! image and of a ZIP archive are described, and the block codecs both
//! formats' data goes through.
//!
//! Both sides of packfs depend on this crate and on nothing of each other:
//! `packer` (the writer) encodes records with it, `mountfs` (the readers)
//! decodes them. A record is a Rust struct with one doc line per field in
//! on-disk order, and its `encode` and `decode` sit next to each other, so a
//! layout is written down once and round-trip tests pin it (see
//! `docs/FORMAT.md` for the byte-by-byte drawings).
//!
//! What is *not* here: policy. Which inode kind the writer picks, how it
//! orders entries or when it needs Zip64 lives in `packer`; how readers walk
//! tables, cache blocks and validate cross-references lives in `mountfs`.
//! Decoders here check only what a record itself can tell (lengths, a
//! signature, a type id) and report it as [`FormatError`]. One exception,
//! because both sides need it: [`zip::unzip`], the rules by which unzip
//! turns a ZIP's records into files, which the ZIP mount and the packer's
//! ZIP input both follow so that they agree.
//!
//! Dependencies point one way: [`codec`] knows nothing of SquashFS or ZIP
//! (it names compressors by [`codec::Compressor`]); [`squashfs`] and [`zip`]
//! use [`bytes`] for little-endian fields and never each other.

pub mod bytes;
pub mod codec;
mod error;
pub mod lzo;
pub mod shards;
pub mod squashfs;
pub mod zip;

pub use error::FormatError;
