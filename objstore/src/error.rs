//! The client's error: what went wrong with which URL. Cloneable, because
//! one failed fetch answers every reader waiting for it. A reader that
//! speaks `std::io` passes it on inside an `io::Error` (see the `From`
//! impl below), so its caller can still tell a network failure from bad
//! data; mountfs turns it into its own `FsError::Io` (EIO at the FUSE edge).

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
    pub fn io_kind(&self) -> std::io::ErrorKind {
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

    /// The URL the error is about; None for a configuration error that
    /// names none, and for an interrupted upload.
    pub fn url(&self) -> Option<&str> {
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

    /// The error restated for the read that waited for it (`at`, such as
    /// "read of 4096 bytes at offset 0"): the fetch it came from (a range
    /// of another length and offset) moves into the detail. Errors about
    /// the server as a whole (it ignores ranges, sends no validator, cannot
    /// be reached) and about the configuration are the same for any read.
    pub fn during(self, at: String) -> Self {
        match self {
            RemoteError::Timeout {
                url,
                secs,
                what,
                cause,
                extra,
            } => RemoteError::Timeout {
                url,
                what: at,
                secs,
                cause,
                extra: format!("{}{extra}", parenthesised(&what)),
            },
            RemoteError::Transport { url, what, detail } => RemoteError::Transport {
                url,
                what: at,
                detail: format!("{}{detail}", colon_after(&what)),
            },
            RemoteError::Changed { url, detail } => RemoteError::Changed {
                url,
                detail: format!("{at}: {detail}"),
            },
            RemoteError::Status {
                url,
                status,
                detail,
            } => RemoteError::Status {
                url,
                status,
                detail: format!("{at}{}", colon(&detail)),
            },
            other => other,
        }
    }
}

/// `" (what)"`, or nothing for an empty `what`.
fn parenthesised(what: &str) -> String {
    match what {
        "" => String::new(),
        w => format!(" ({w})"),
    }
}

/// An `io::Error` of the kind [`RemoteError::io_kind`] says, holding the
/// error itself: `get_ref()` and a downcast give it back, so a caller of a
/// reader can tell a failed request from bad bytes.
impl From<RemoteError> for std::io::Error {
    fn from(e: RemoteError) -> Self {
        std::io::Error::new(e.io_kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn an_io_error_holds_it_and_a_read_restates_it() {
        let refused = RemoteError::Unreachable {
            url: "http://h:1/x".into(),
            why: Unreachable::Refused,
            detail: "connection refused by h:1".into(),
        };
        let io = std::io::Error::from(refused.clone());
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(io.to_string(), refused.to_string());
        let inner = io.get_ref().and_then(|e| e.downcast_ref::<RemoteError>());
        assert!(
            matches!(inner, Some(RemoteError::Unreachable { .. })),
            "{io:?}"
        );
        let at = || "read at offset 8".to_string();
        let t = RemoteError::Timeout {
            url: "http://h/x".into(),
            what: "range GET of bytes 8..16".into(),
            secs: 2,
            cause: None,
            extra: String::new(),
        };
        assert_eq!(
            t.during(at()).to_string(),
            "http://h/x: read at offset 8: no answer within 2 s (--remote-timeout) \
             (range GET of bytes 8..16)"
        );
        let s = RemoteError::Status {
            url: "s3://b/k".into(),
            status: "403 Forbidden".into(),
            detail: "AccessDenied: Access Denied".into(),
        };
        assert_eq!(
            s.during(at()).to_string(),
            "s3://b/k: HTTP 403 Forbidden: read at offset 8: AccessDenied: Access Denied"
        );
        let r = RemoteError::RangeUnsupported {
            url: "http://h/x".into(),
        };
        assert_eq!(r.clone().during(at()).to_string(), r.to_string());
    }
}
