//! Usage errors found after clap: a bad value, a bad combination of
//! options, a malformed argument that only packfs's own checks can see
//! (a level the chosen codec does not take, an extension that names no
//! format). They exit 2, as clap's own do, so that a script can tell "called
//! wrong" (fix the command line) from "failed" (status 1: look at the
//! file, the disk, the network).

/// A usage error; [`is_usage`] finds it anywhere in an error's chain.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error as an `anyhow::Error`, for `return Err(usage(...))`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Whether `e` is a usage error: ours, the bench's, or an option the
/// packer refused (its `InvalidOption` is only ever a value or a
/// combination given on the command line).
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<UsageError>()
            || c.downcast_ref::<packfs_bench::BenchError>()
                .is_some_and(packfs_bench::BenchError::is_usage)
            || matches!(
                c.downcast_ref::<packer::PackError>(),
                Some(packer::PackError::InvalidOption(_))
            )
    })
}
