//! The read side's one error type. Every variant maps to an errno at the FUSE
//! edge (`FsError::errno`); the CLI prints the `Display` form, which names the
//! image and what is wrong with it.

use packfs_format::codec::CodecError;
use packfs_format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: not a SquashFS or ZIP image (unrecognised magic)")]
    UnknownFormat(String),
    /// Structural damage: an offset out of range, a table that does not parse.
    #[error("corrupt image: {0}")]
    Corrupt(String),
    #[error("corrupt image: {what}: {source}")]
    BadBlock {
        what: String,
        #[source]
        source: CodecError,
    },
    /// Bytes that do not match the image's own check of them (the hash
    /// record), or a hash record that does not check out itself.
    #[error("damaged image: {0}")]
    Damaged(String),
    #[error("unsupported image: {0}")]
    Unsupported(String),
    #[error("no such file or directory")]
    NotFound,
    /// A name longer than the format allows (SquashFS: 256 bytes), so
    /// nothing can have it: the kernel's drivers say so rather than ENOENT.
    #[error("file name too long")]
    NameTooLong,
    /// More symlinks than [`crate::resolve::MAX_SYMLINKS`] on one path.
    #[error("too many levels of symbolic links")]
    SymlinkLoop,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("not a symlink")]
    NotSymlink,
    #[error("no such attribute")]
    NoXattr,
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A union of shards that cannot be served as asked: a shard missing or
    /// not matching its manifest, conflicting paths (the message names the
    /// files and the path).
    #[error("{0}")]
    Shards(String),
}

/// A record that does not decode is structural damage: EIO, and the message
/// says what was wrong.
impl From<FormatError> for FsError {
    fn from(e: FormatError) -> Self {
        FsError::Corrupt(e.to_string())
    }
}

impl FsError {
    pub fn corrupt(msg: impl Into<String>) -> Self {
        FsError::Corrupt(msg.into())
    }

    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        FsError::Io {
            path: path.to_string(),
            source,
        }
    }

    /// The errno a FUSE reply carries for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            FsError::UnknownFormat(_)
            | FsError::Corrupt(_)
            | FsError::BadBlock { .. }
            | FsError::Damaged(_)
            | FsError::Unsupported(_)
            | FsError::Shards(_) => libc::EIO,
            FsError::NotFound => libc::ENOENT,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::SymlinkLoop => libc::ELOOP,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotSymlink => libc::EINVAL,
            FsError::NoXattr => libc::ENODATA,
            FsError::Invalid(_) => libc::EINVAL,
        }
    }
}

pub type Result<T, E = FsError> = std::result::Result<T, E>;
