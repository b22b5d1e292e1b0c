//! The crate's single error type. Every variant names the path it concerns so
//! the CLI can print it as is.

use packfs_format::codec::CodecError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a directory", path = path.display())]
    NotADirectory { path: PathBuf },
    #[error("{path}: output already exists (use --force to overwrite)", path = path.display())]
    OutputExists { path: PathBuf },
    #[error("{path}: output directory does not exist", path = path.display())]
    OutputDirMissing { path: PathBuf },
    #[error("{path}: output lies inside the source directory {src}", path = path.display(), src = src.display())]
    OutputInsideSource { path: PathBuf, src: PathBuf },
    #[error("{path}: file changed size while being packed", path = path.display())]
    FileChanged { path: PathBuf },
    #[error("{path}: name is longer than 256 bytes", path = path.display())]
    NameTooLong { path: PathBuf },
    #[error("{path}: more than 65535 distinct uids/gids in the source tree", path = path.display())]
    TooManyIds { path: PathBuf },
    #[error("interrupted")]
    Interrupted,
    #[error("{path}: {source}", path = path.display())]
    Codec {
        path: PathBuf,
        #[source]
        source: CodecError,
    },
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

impl PackError {
    /// Adapter for `map_err`: wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> PackError {
        let path = path.into();
        move |source| PackError::Io { path, source }
    }
}
