//! What an image argument names: a file, `s3://BUCKET/KEY` or `http(s)://`.

/// The location of `image` as `mountfs` parses it. A malformed URL is a
/// usage error (exit 2): the command line is wrong, not the image.
pub fn location(image: &std::path::Path) -> anyhow::Result<mountfs::location::ImageLocation> {
    mountfs::location::ImageLocation::from_path(image).map_err(crate::usage::usage)
}
