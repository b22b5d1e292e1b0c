//! The binding's error type and its one mapping to Python exceptions.
//!
//! Python code expects the exceptions `os` raises: a missing path is
//! `FileNotFoundError`, a file where a directory was needed
//! `NotADirectoryError`, and so on, each with `errno`, `strerror` and
//! `filename` set so that `except OSError as e: e.errno` works. Damage and
//! failed storage are `OSError(errno.EIO)` whose message names the image,
//! the path inside it and the offset being read (mountfs's message says
//! what was wrong, often with the image offset). A file that cannot be
//! opened as an image is [`NotAnImageError`], an `OSError` subclass naming
//! the file and the cause.

use mountfs::FsError;
use pyo3::exceptions::{
    PyFileNotFoundError, PyIsADirectoryError, PyNotADirectoryError, PyOSError, PyPermissionError,
    PyValueError,
};
use pyo3::prelude::*;

// Named as `packfs` exports it: pickle finds a class by its module and
// name, and an error a DataLoader worker cannot pickle never reaches the
// main process, which then waits for it forever.
pyo3::create_exception!(
    packfs,
    NotAnImageError,
    PyOSError,
    "The file or object is not a SquashFS or ZIP image packfs can read (or is damaged where the format starts)."
);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The file ended before the size its inode records.
    #[error("corrupt image: the file holds {got} of the {size} bytes its entry records")]
    Short { got: u64, size: u64 },
    /// A read's result does not fit in this process's memory.
    #[error("cannot allocate {bytes} bytes for the read")]
    NoMemory { bytes: u64 },
    /// A panic inside the reader, caught before it reached Python.
    #[error("internal error (a packfs bug, please report it): {0}")]
    Panic(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs `f`, turning a panic into [`Error::Panic`]: a damaged image must
/// raise in Python, never unwind through the interpreter.
pub fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Err(Error::Panic(msg))
        }
    }
}

/// A path inside the image as Python shows names: UTF-8, with undecodable
/// bytes as lone surrogates (`os.fsdecode`), so it round-trips.
pub fn py_name<'py>(py: Python<'py>, name: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match std::str::from_utf8(name) {
        Ok(s) => Ok(pyo3::types::PyString::new(py, s).into_any()),
        Err(_) => {
            pyo3::types::PyBytes::new(py, name).call_method1("decode", ("utf-8", "surrogateescape"))
        }
    }
}

/// Where an error happened, for its message.
pub struct At<'a> {
    /// The image's location, as given.
    pub image: &'a str,
    /// The path inside the image, as given.
    pub path: &'a [u8],
    /// The offset in the file being read, for reads.
    pub offset: Option<u64>,
}

/// The exception for `err` raised while working on `at`.
pub fn to_py(py: Python<'_>, err: Error, at: &At<'_>) -> PyErr {
    let path = match py_name(py, at.path) {
        Ok(p) => p.unbind(),
        Err(e) => return e,
    };
    let here = format!("in image {:?}", at.image);
    match err {
        Error::Fs(FsError::NotFound) => PyFileNotFoundError::new_err((
            libc::ENOENT,
            format!("No such file or directory {here}"),
            path,
        )),
        Error::Fs(FsError::NameTooLong) => PyOSError::new_err((
            libc::ENAMETOOLONG,
            format!("File name too long {here}"),
            path,
        )),
        Error::Fs(FsError::NotDir) => {
            PyNotADirectoryError::new_err((libc::ENOTDIR, format!("Not a directory {here}"), path))
        }
        Error::Fs(FsError::IsDir) => {
            PyIsADirectoryError::new_err((libc::EISDIR, format!("Is a directory {here}"), path))
        }
        Error::Fs(FsError::NotSymlink) => PyOSError::new_err((
            libc::EINVAL,
            format!("Invalid argument (not a symbolic link) {here}"),
            path,
        )),
        // A valid request the entry cannot answer (reading a fifo or a
        // device): the caller's mistake, not damage (EIO).
        Error::Fs(FsError::Invalid(why)) => PyOSError::new_err((
            libc::EINVAL,
            format!("Invalid argument ({why}) {here}"),
            path,
        )),
        Error::NoMemory { bytes } => pyo3::exceptions::PyMemoryError::new_err(format!(
            "cannot allocate {bytes} bytes to read {} {here}",
            lossy(at.path)
        )),
        Error::Fs(FsError::SymlinkLoop) => PyOSError::new_err((
            libc::ELOOP,
            format!("Too many levels of symbolic links {here}"),
            path,
        )),
        Error::Fs(e @ FsError::Io { .. }) if e.errno() == libc::EACCES => {
            PyPermissionError::new_err((libc::EACCES, format!("{e} {here}"), path))
        }
        other => {
            let other = in_python_words(&other.to_string());
            let what = match at.offset {
                Some(off) => format!("{other} (reading {} at offset {off})", lossy(at.path)),
                None => format!("{other} (at {})", lossy(at.path)),
            };
            PyOSError::new_err((libc::EIO, what, at.image.to_string()))
        }
    }
}

/// mountfs's messages name the CLI's flags ("no answer within 60 s
/// (--remote-timeout)"); a Python caller set the same thing as an
/// argument of `packfs.Image`, so the message names that.
fn in_python_words(msg: &str) -> String {
    const FLAGS: [(&str, &str); 7] = [
        ("--remote-timeout", "remote_timeout"),
        ("--disk-cache-size", "disk_cache_size"),
        ("--disk-cache", "disk_cache"),
        ("--range-cache", "range_cache"),
        ("--cache-size", "cache_size"),
        ("--endpoint", "endpoint"),
        ("--profile", "profile"),
    ];
    let mut out = msg.to_string();
    if out.contains("--") {
        for (flag, arg) in FLAGS {
            out = out.replace(flag, arg);
        }
    }
    out
}

/// The exception for a failed open of the image at `location`.
/// An I/O error's text without the " (os error N)" Rust appends to the
/// system's words: the exception carries N as its errno already.
fn os_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(n) => text
            .strip_suffix(&format!(" (os error {n})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

pub fn open_to_py(err: Error, location: &str) -> PyErr {
    // mountfs names the image in some messages, first or after what kind
    // of failure it is ("corrupt image: IMG: empty file"); the exception
    // carries it as `filename`, so once is enough. Only there: elsewhere
    // the name is part of the sentence ("shard 1 of IMG: ./s-1.sqfs: ...").
    let strip = |m: String| {
        let m = in_python_words(&m);
        let tag = format!("{location}: ");
        if let Some(rest) = m.strip_prefix(&tag) {
            return rest.to_string();
        }
        for kind in ["corrupt image: ", "unsupported image: "] {
            if let Some(rest) = m.strip_prefix(kind).and_then(|r| r.strip_prefix(&tag)) {
                return format!("{kind}{rest}");
            }
        }
        m
    };
    let loc = location.to_string();
    match err {
        Error::Fs(FsError::Io { source, .. }) => {
            let msg = strip(os_text(&source));
            match source.kind() {
                std::io::ErrorKind::NotFound => {
                    PyFileNotFoundError::new_err((libc::ENOENT, msg, loc))
                }
                std::io::ErrorKind::PermissionDenied => {
                    PyPermissionError::new_err((libc::EACCES, msg, loc))
                }
                std::io::ErrorKind::IsADirectory => {
                    PyIsADirectoryError::new_err((libc::EISDIR, msg, loc))
                }
                // OSError(errno, ...) is built as its subclass for the errno
                // (ConnectionRefusedError, TimeoutError), as `os` raises them.
                k => {
                    let errno = source.raw_os_error().unwrap_or(match k {
                        std::io::ErrorKind::ConnectionRefused => libc::ECONNREFUSED,
                        std::io::ErrorKind::TimedOut => libc::ETIMEDOUT,
                        std::io::ErrorKind::HostUnreachable => libc::EHOSTUNREACH,
                        _ => libc::EIO,
                    });
                    PyOSError::new_err((errno, msg, loc))
                }
            }
        }
        Error::Fs(FsError::Invalid(m)) => PyValueError::new_err(strip(m)),
        Error::Fs(e @ FsError::UnknownFormat(_)) => {
            NotAnImageError::new_err((libc::EINVAL, strip(e.to_string()), loc))
        }
        Error::Fs(
            e @ (FsError::Corrupt(_) | FsError::BadBlock { .. } | FsError::Unsupported(_)),
        ) => NotAnImageError::new_err((libc::EIO, strip(e.to_string()), loc)),
        other => PyOSError::new_err((libc::EIO, strip(other.to_string()), loc)),
    }
}

fn lossy(p: &[u8]) -> String {
    let s = String::from_utf8_lossy(p);
    if s.is_empty() {
        "/".into()
    } else {
        format!("{s:?}")
    }
}
