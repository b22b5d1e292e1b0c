//! The bench's one error type. Its messages are for a person at a terminal
//! (the CLI prints them with their causes, one per line), so a step that
//! fails says what it was doing and keeps what went wrong as its source,
//! as the CLI's own errors do: [`Context`] adds that line.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A bad value or combination of flags that only the bench can see
    /// (after clap): the CLI exits 2 for it, as for clap's own.
    #[error("{0}")]
    Usage(String),
    /// The bench will not measure what it was given, and says why: a tree
    /// with nothing the workloads can read, a side whose files differ from
    /// the raw tree, a cold mode this process cannot honour.
    #[error("{0}")]
    Refused(String),
    /// A mount did not come up or would not go away.
    #[error("{0}")]
    Mount(String),
    /// A system call failed while doing `what`.
    #[error("{what}")]
    Io { what: String, source: io::Error },
    /// A system call failed with nothing more to say than its error.
    #[error(transparent)]
    Os(#[from] io::Error),
    /// The JSON report could not be serialised.
    #[error("{what}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
    /// A step failed: `what` it was doing; `source` is why.
    #[error("{what}")]
    Context {
        what: String,
        source: Box<BenchError>,
    },
}

impl BenchError {
    /// Whether this is a usage error, here or as the cause of a step.
    pub fn is_usage(&self) -> bool {
        match self {
            BenchError::Usage(_) => true,
            BenchError::Context { source, .. } => source.is_usage(),
            _ => false,
        }
    }
}

/// The message and every cause after it, joined by ": " (for a warning
/// printed on one line).
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Says what a failing step was doing: the message becomes `what`, the
/// error it had becomes the cause.
pub trait Context<T>: Sized {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T, BenchError>;

    fn context(self, what: impl Into<String>) -> Result<T, BenchError> {
        self.with_context(move || what)
    }
}

impl<T> Context<T> for Result<T, io::Error> {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Io {
            what: what().into(),
            source,
        })
    }
}

impl<T> Context<T> for Result<T, serde_json::Error> {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Json {
            what: what().into(),
            source,
        })
    }
}

impl<T> Context<T> for Result<T, BenchError> {
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T, BenchError> {
        self.map_err(|e| BenchError::Context {
            what: what().into(),
            source: Box::new(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_keeps_its_cause_and_a_usage_error_is_found_under_it() {
        let e: Result<(), _> = Err(io::Error::from_raw_os_error(libc::ENOENT));
        let e = e.context("listing /x").context("verifying side packfs");
        let e = e.unwrap_err();
        assert_eq!(e.to_string(), "verifying side packfs");
        assert_eq!(
            one_line(&e),
            "verifying side packfs: listing /x: No such file or directory (os error 2)"
        );
        assert!(!e.is_usage());
        let u: Result<(), _> = Err(BenchError::Usage("--threads".into()));
        assert!(u.context("planning").unwrap_err().is_usage());
    }
}
