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
    /// Object storage (an `s3://` or `http(s)://` source); the message
    /// names the URL.
    #[error(transparent)]
    Remote(#[from] packfs_objstore::RemoteError),
    #[error("{path}: output already exists (use --force to overwrite)", path = path.display())]
    OutputExists { path: PathBuf },
    #[error("{path}: output directory does not exist", path = path.display())]
    OutputDirMissing { path: PathBuf },
    #[error("{path}: output lies inside the source directory {src}", path = path.display(), src = src.display())]
    OutputInsideSource { path: PathBuf, src: PathBuf },
    /// A source file's size differs from the one the walk recorded (the
    /// directory entries and inodes already promise that size).
    #[error("{path}: changed size during the pack: {was} -> {now} bytes", path = path.display())]
    FileChanged { path: PathBuf, was: u64, now: u64 },
    /// A file the walk found is gone when its data is read. Said plainly:
    /// a bare ENOENT for a file the user can see in their tree reads like
    /// a packer bug.
    #[error("{path}: deleted or renamed during the pack", path = path.display())]
    FileVanished { path: PathBuf },
    /// A regular file the walk found is something else (a FIFO, a symlink,
    /// a directory) when its data is read.
    #[error("{path}: replaced during the pack (not the file the scan found)", path = path.display())]
    FileReplaced { path: PathBuf },
    #[error("{path}: name is longer than 256 bytes", path = path.display())]
    NameTooLong { path: PathBuf },
    #[error("{path}: more than 65535 distinct uids/gids in the source tree", path = path.display())]
    TooManyIds { path: PathBuf },
    /// Writing the image failed (out of space, quota, I/O error...).
    /// `path` is the output as given, not the temporary file being written:
    /// that one is deleted by the time the message is read.
    #[error("{path}: {action}: {source}", path = path.display())]
    Output {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("interrupted")]
    Interrupted,
    #[error("{path}: {source}", path = path.display())]
    Codec {
        path: PathBuf,
        #[source]
        source: CodecError,
    },
    /// A Python environment that `--mount-at`/`--compile` cannot handle.
    #[error("{path}: {message}", path = path.display())]
    Venv { path: PathBuf, message: String },
    /// A shard sidecar or manifest that is missing, malformed or does not
    /// match its images (the message names the file).
    #[error("{0}")]
    Shards(String),
    /// A value or a combination of options the packer cannot take; only ever
    /// from what the caller asked for, so the CLI reports it as a usage error.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// An archive that cannot be packed: damaged, truncated, not an
    /// archive, or holding a member extraction would refuse. `offset` is
    /// the byte of the (decompressed) tar stream where it was found.
    #[error("{}", archive_message(path, member.as_deref(), *offset, message))]
    Archive {
        path: PathBuf,
        member: Option<String>,
        offset: Option<u64>,
        message: String,
    },
    /// A path given by two sources (`--on-conflict` says which wins).
    #[error(
        "{path}: {member}: also given by {first} (pass --on-conflict first or last to keep one)",
        path = path.display(),
        member = member.as_deref().unwrap_or("the root"),
        first = first.display()
    )]
    SourceConflict {
        path: PathBuf,
        member: Option<String>,
        first: PathBuf,
    },
    /// The worker or I/O threads could not be started (a resource limit).
    #[error("starting {0}")]
    Threads(String),
}

fn archive_message(
    path: &std::path::Path,
    member: Option<&str>,
    offset: Option<u64>,
    message: &str,
) -> String {
    let mut s = format!("{}: ", path.display());
    if let Some(m) = member {
        s.push_str(m);
        s.push_str(": ");
    }
    s.push_str(message);
    if let Some(o) = offset {
        s.push_str(&format!(" (at byte {o} of the tar stream)"));
    }
    s
}

impl PackError {
    /// [`PackError::Archive`] for `member` (bytes, shown lossily) of
    /// `archive`, at no particular offset.
    pub(crate) fn archive(
        archive: &std::path::Path,
        member: Option<&[u8]>,
        message: String,
    ) -> PackError {
        PackError::Archive {
            path: archive.to_path_buf(),
            member: member.map(|m| String::from_utf8_lossy(m).into_owned()),
            offset: None,
            message,
        }
    }

    /// Adapter for `map_err`: wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> PackError {
        let path = path.into();
        move |source| PackError::Io { path, source }
    }

    /// Adapter for `map_err`: an I/O error on the image being written to
    /// `path` (the final output name).
    pub(crate) fn output(
        path: impl Into<PathBuf>,
        action: &'static str,
    ) -> impl FnOnce(std::io::Error) -> PackError {
        let path = path.into();
        move |source| PackError::Output {
            path,
            action,
            source,
        }
    }
}
