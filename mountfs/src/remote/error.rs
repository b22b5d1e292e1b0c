//! The client's error at the filesystem boundary: `FsError::Io`, EIO at
//! the FUSE edge. Here, not in the client's crate, which knows nothing of
//! filesystems.

use crate::error::FsError;
use packfs_objstore::RemoteError;

/// `FsError::Io` with the URL as the path and the rest as the message; the
/// errno is EIO (an `io::Error` without an OS code), whatever the kind.
impl From<RemoteError> for FsError {
    fn from(e: RemoteError) -> Self {
        let kind = e.io_kind();
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
    use packfs_objstore::Unreachable;

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
