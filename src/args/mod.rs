//! The command line: what packfs accepts, and how each argument becomes a
//! checked value before any command runs.
//!
//! - [`cli`]: the commands and their options (clap derive), with their help.
//! - [`parse`](mod@parse): the command tree as the user meets it (the remote-image
//!   options shown only under the commands that take an image) and the
//!   parse of the process's arguments.
//! - [`values`]: value parsers, each option checked as clap reads it.
//! - [`braces`]: brace ranges in source arguments (`train-{000..127}.tar`).
//! - [`usage`]: usage errors found after clap (a bad combination, a
//!   malformed URL), which exit 2 as clap's own do.
//! - [`location`], here: what an image argument names.

pub mod braces;
pub mod cli;
pub mod parse;
pub mod usage;
pub mod values;

pub use parse::parse;

/// What an image argument names, as `mountfs` parses it: a file,
/// `s3://BUCKET/KEY` or `http(s)://`. A malformed URL is a usage error
/// (exit 2): the command line is wrong, not the image.
pub fn location(image: &std::path::Path) -> anyhow::Result<mountfs::location::ImageLocation> {
    mountfs::location::ImageLocation::from_path(image).map_err(usage::usage)
}
