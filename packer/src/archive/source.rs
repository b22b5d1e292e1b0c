//! What a pack reads: its sources as the command line names them, and the
//! options for reading them.

use super::remote::RemoteArchive;
use super::stage::OnConflict;
use std::path::{Path, PathBuf};

/// One thing to pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A directory: its contents join the image's root.
    Dir(PathBuf),
    /// A file holding an archive, told by its content.
    Archive(PathBuf),
    /// An archive on standard input (`-`).
    Stdin,
    /// An archive in object storage or on a web server (`s3://`,
    /// `http(s)://`), read where it is.
    Remote(String),
}

impl Source {
    /// What `arg` names: `-` is stdin, a directory (following symlinks) a
    /// directory, anything else an archive (whose content is checked when
    /// it is read).
    pub fn from_arg(arg: &Path) -> Source {
        let s = arg.to_string_lossy();
        if arg.as_os_str() == "-" {
            Source::Stdin
        } else if ["s3://", "http://", "https://"]
            .iter()
            .any(|p| s.starts_with(p))
        {
            Source::Remote(s.into_owned())
        } else if arg.is_dir() {
            Source::Dir(arg.to_path_buf())
        } else {
            Source::Archive(arg.to_path_buf())
        }
    }

    /// As messages name it.
    pub fn display(&self) -> PathBuf {
        match self {
            Source::Dir(p) | Source::Archive(p) => p.clone(),
            Source::Stdin => PathBuf::from("<stdin>"),
            Source::Remote(url) => PathBuf::from(url),
        }
    }
}

/// How sources other than one directory are read.
#[derive(Clone, Debug, Default)]
pub struct SourceOptions {
    /// Leading path components dropped from each archive member, as
    /// `tar -x --strip-components`; members with no more are left out.
    pub strip_components: usize,
    /// A path given by two sources.
    pub on_conflict: OnConflict,
    /// Member archives whose path (or name) matches one of these globs are
    /// read as directories of their name without the archive extension
    /// (`n01440764.tar` -> `n01440764/`), from the stream itself.
    pub expand_nested: Vec<String>,
    /// How `s3://` and `http(s)://` sources are reached.
    pub client: packfs_objstore::ClientOptions,
}

/// A source opened before the pack starts.
pub(super) enum Input {
    File(std::fs::File),
    Remote(Box<RemoteArchive>),
}
