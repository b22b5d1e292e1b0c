//! What an image argument names: a file, `s3://BUCKET/KEY` or `http(s)://`.

/// The location of `image` as `mountfs` parses it; its message as the error.
pub fn location(image: &std::path::Path) -> anyhow::Result<mountfs::location::ImageLocation> {
    mountfs::location::ImageLocation::from_path(image).map_err(anyhow::Error::msg)
}
