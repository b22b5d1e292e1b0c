//! The error of a record that does not decode, shared by every decoder in
//! this crate.

/// A record that does not decode. The readers turn it into their own error
/// (`mountfs::FsError::Corrupt`, EIO at the FUSE edge); the message says
/// what was wrong in terms a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The input ended inside a record.
    #[error("{0} is truncated")]
    Truncated(&'static str),
    /// A field holds a value the format does not allow.
    #[error("{0}")]
    Invalid(String),
}

impl FormatError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        FormatError::Invalid(msg.into())
    }
}
