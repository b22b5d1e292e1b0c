//! The remote layer's error: what went wrong with which URL. Cloneable,
//! because one failed fetch answers every reader waiting for it. At the
//! filesystem boundary it becomes `FsError::Io` (EIO at the FUSE edge).

use crate::error::FsError;

#[derive(Clone, Debug, thiserror::Error)]
pub enum RemoteError {
    /// A URL or configuration that cannot work (bad URL, unreadable profile).
    #[error("{0}")]
    Config(String),
    /// Nothing that answers is where the URL points, and asking again will
    /// not change that: the connection was refused, the host is unknown,
    /// TLS failed. Only before the server has answered once: later, a
    /// refused connection is a server restarting and is retried.
    #[error("{url}: {detail}")]
    Unreachable {
        url: String,
        why: Unreachable,
        detail: String,
    },
    /// The server answered with an error status a retry cannot fix (403,
    /// 404, ...). `status` is the code and its reason phrase ("404 Not
    /// Found"); `detail` the S3 error code and message when the answer had
    /// them, else empty: a web server's error page is never shown.
    #[error("{url}: HTTP {status}{}", colon(detail))]
    Status {
        url: String,
        status: String,
        detail: String,
    },
    /// The server answered a range GET with the whole object: it cannot
    /// serve an image (found on the first read, at open).
    #[error(
        "{url}: the server ignores Range requests (it answered a range GET with the whole \
         object); packfs needs one that serves ranges (nginx, S3; `python3 -m http.server` \
         does not)"
    )]
    RangeUnsupported { url: String },
    /// A range answer without the validator (`ETag` or `Last-Modified`)
    /// the object was pinned by at open: whether it is still that version
    /// cannot be told, so its bytes are not used.
    #[error(
        "{url}: the server's range answers carry no {validator}, though it sent one at open \
         ({pinned}): packfs cannot tell whether the object changed since it was opened"
    )]
    NoValidator {
        url: String,
        validator: &'static str,
        pinned: String,
    },
    /// The object is no longer the version pinned at open.
    #[error(
        "{url}: the object changed since it was opened ({detail}); open it again (remount) to read the new version"
    )]
    Changed { url: String, detail: String },
    /// No complete answer within the configured time, retries included;
    /// `cause` is the last failed attempt (a 5xx status, a refused
    /// connection), None when the server did not answer at all.
    #[error("{url}: {}{}", colon_after(what), timeout_text(*secs, cause, extra))]
    Timeout {
        url: String,
        /// The operation, for reads of a mount ("read of 4096 bytes at
        /// offset 0"); empty at open, where the URL says enough.
        what: String,
        secs: u64,
        cause: Option<String>,
        /// Appended as is (what the read was waiting for, how long the
        /// server has been failing).
        extra: String,
    },
    /// Connection, protocol or server errors that outlived the retries.
    #[error("{url}: {}{detail}", colon_after(what))]
    Transport {
        url: String,
        what: String,
        detail: String,
    },
    /// Stopped by a signal (upload).
    #[error("interrupted")]
    Interrupted,
}

/// Why nothing answers ([`RemoteError::Unreachable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// Connection refused: nothing listens on that host and port.
    Refused,
    /// The host name does not resolve.
    UnknownHost,
    /// The TLS handshake failed (not a TLS server, a certificate not trusted).
    Tls,
}

/// `": detail"`, or nothing for an empty detail.
fn colon(detail: &str) -> String {
    match detail {
        "" => String::new(),
        d => format!(": {d}"),
    }
}

/// `"what: "`, or nothing for an empty `what`.
fn colon_after(what: &str) -> String {
    match what {
        "" => String::new(),
        w => format!("{w}: "),
    }
}

fn timeout_text(secs: u64, cause: &Option<String>, extra: &str) -> String {
    match cause {
        Some(c) => {
            format!("{c}, still failing after {secs} s of retries (--remote-timeout){extra}")
        }
        None => format!("no answer within {secs} s (--remote-timeout){extra}"),
    }
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
            RemoteError::Unreachable { why, .. } => match why {
                Unreachable::Refused => K::ConnectionRefused,
                Unreachable::UnknownHost => K::HostUnreachable,
                Unreachable::Tls => K::Other,
            },
            RemoteError::Timeout { .. } => K::TimedOut,
            RemoteError::Interrupted => K::Interrupted,
            _ => K::Other,
        }
    }

    fn url(&self) -> Option<&str> {
        match self {
            RemoteError::Status { url, .. }
            | RemoteError::Unreachable { url, .. }
            | RemoteError::RangeUnsupported { url }
            | RemoteError::NoValidator { url, .. }
            | RemoteError::Changed { url, .. }
            | RemoteError::Timeout { url, .. }
            | RemoteError::Transport { url, .. } => Some(url),
            RemoteError::Config(_) | RemoteError::Interrupted => None,
        }
    }

    /// The error without the operation it interrupted: at open the URL is
    /// context enough ("range GET of bytes 0..4194304" says nothing to a
    /// user who asked to list an image).
    pub fn at_open(self) -> Self {
        match self {
            RemoteError::Timeout {
                url,
                secs,
                cause,
                extra,
                ..
            } => RemoteError::Timeout {
                url,
                what: String::new(),
                secs,
                cause,
                extra,
            },
            RemoteError::Transport { url, detail, .. } => RemoteError::Transport {
                url,
                what: String::new(),
                detail,
            },
            other => other,
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
            cause: None,
            extra: String::new(),
        }
        .into();
        assert_eq!(t.errno(), libc::EIO);
        assert!(t.to_string().contains("offset 5"));
    }

    #[test]
    fn a_timeout_names_the_last_failure_and_at_open_drops_the_operation() {
        let t = RemoteError::Timeout {
            url: "http://h/x".into(),
            what: "range GET of bytes 0..4".into(),
            secs: 2,
            cause: Some("HTTP 503 Service Unavailable".into()),
            extra: String::new(),
        };
        assert_eq!(
            t.clone().at_open().to_string(),
            "http://h/x: HTTP 503 Service Unavailable, still failing after 2 s of retries \
             (--remote-timeout)"
        );
        assert!(t
            .to_string()
            .starts_with("http://h/x: range GET of bytes 0..4: HTTP 503"));
        let silent = RemoteError::Timeout {
            url: "http://h/x".into(),
            what: String::new(),
            secs: 2,
            cause: None,
            extra: String::new(),
        };
        assert_eq!(
            silent.to_string(),
            "http://h/x: no answer within 2 s (--remote-timeout)"
        );
        let refused: FsError = RemoteError::Unreachable {
            url: "http://h:1/x".into(),
            why: Unreachable::Refused,
            detail: "connection refused by h:1".into(),
        }
        .into();
        match refused {
            FsError::Io { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused)
            }
            other => panic!("{other:?}"),
        }
    }
}
