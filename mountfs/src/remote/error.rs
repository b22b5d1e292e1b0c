//! The remote layer's error: what went wrong with which URL. Cloneable,
//! because one failed fetch answers every reader waiting for it. At the
//! filesystem boundary it becomes `FsError::Io` (EIO at the FUSE edge).

use crate::error::FsError;

#[derive(Clone, Debug, thiserror::Error)]
pub enum RemoteError {
    /// A URL or configuration that cannot work (bad URL, unreadable profile).
    #[error("{0}")]
    Config(String),
    /// The server answered with an error status (403, 404, ...).
    #[error("{url}: {status}: {detail}")]
    Status {
        url: String,
        status: String,
        detail: String,
    },
    /// The object is no longer the version pinned at open.
    #[error(
        "{url}: the object changed since it was opened ({detail}); remount to read the new version"
    )]
    Changed { url: String, detail: String },
    /// No complete answer within the configured time, retries included.
    #[error("{url}: {what}: no answer within {secs} s (--remote-timeout){last}")]
    Timeout {
        url: String,
        what: String,
        secs: u64,
        last: String,
    },
    /// Connection, protocol or server errors that outlived the retries.
    #[error("{url}: {what}: {detail}")]
    Transport {
        url: String,
        what: String,
        detail: String,
    },
    /// Stopped by a signal (upload).
    #[error("interrupted")]
    Interrupted,
}

impl RemoteError {
    /// The `std::io::ErrorKind` a caller would expect for this error.
    fn kind(&self) -> std::io::ErrorKind {
        use std::io::ErrorKind as K;
        match self {
            RemoteError::Status { status, .. } if status.starts_with("404") => K::NotFound,
            RemoteError::Status { status, .. }
                if status.starts_with("403") || status.starts_with("401") =>
            {
                K::PermissionDenied
            }
            RemoteError::Timeout { .. } => K::TimedOut,
            RemoteError::Interrupted => K::Interrupted,
            _ => K::Other,
        }
    }

    fn url(&self) -> Option<&str> {
        match self {
            RemoteError::Status { url, .. }
            | RemoteError::Changed { url, .. }
            | RemoteError::Timeout { url, .. }
            | RemoteError::Transport { url, .. } => Some(url),
            RemoteError::Config(_) | RemoteError::Interrupted => None,
        }
    }
}

/// `FsError::Io` with the URL as the path and the rest as the message; the
/// errno is EIO (an `io::Error` without an OS code), whatever the kind.
impl From<RemoteError> for FsError {
    fn from(e: RemoteError) -> Self {
        let kind = e.kind();
        let text = e.to_string();
        match e.url() {
            Some(url) => {
                let msg = text
                    .strip_prefix(url)
                    .and_then(|m| m.strip_prefix(": "))
                    .unwrap_or(&text)
                    .to_string();
                FsError::io(url, std::io::Error::new(kind, msg))
            }
            None => FsError::Invalid(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn becomes_eio_naming_the_url_once() {
        let e: FsError = RemoteError::Status {
            url: "s3://b/k.sqfs".into(),
            status: "403 Forbidden".into(),
            detail: "InvalidAccessKeyId".into(),
        }
        .into();
        assert_eq!(e.errno(), libc::EIO);
        let s = e.to_string();
        assert_eq!(s.matches("s3://b/k.sqfs").count(), 1, "{s}");
        assert!(s.contains("403 Forbidden"), "{s}");
        let t: FsError = RemoteError::Timeout {
            url: "http://h/x".into(),
            what: "read of 10 bytes at offset 5".into(),
            secs: 3,
            last: String::new(),
        }
        .into();
        assert_eq!(t.errno(), libc::EIO);
        assert!(t.to_string().contains("offset 5"));
    }
}
