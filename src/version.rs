//! What `packfs --version` says: the version, the commit (from build.rs),
//! how it is linked and the optional features it was built with, so a bug
//! report or a site's module file names exactly which build is installed.

use std::sync::OnceLock;

/// `packfs -V`: one line, version and commit.
pub const SHORT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PACKFS_COMMIT"),
    ")"
);

/// `packfs --version`: [`SHORT`], then the target and link mode, then the
/// features.
pub fn long() -> &'static str {
    static LONG: OnceLock<String> = OnceLock::new();
    LONG.get_or_init(|| {
        format!(
            "{SHORT}\ntarget: {} ({})\nfeatures: {}",
            env!("PACKFS_TARGET"),
            env!("PACKFS_LINK"),
            features().join(", ")
        )
    })
}

/// The features, as the words a user would look for: the read side's
/// optional ones (mountfs's Cargo features: `fuse`, `remote`, the latter
/// shown as the URL schemes it brings) and the write side's output formats.
pub fn features() -> Vec<&'static str> {
    let mut v = Vec::new();
    for f in mountfs::FEATURES {
        match *f {
            "remote" => v.extend(["s3", "http"]),
            other => v.push(other),
        }
    }
    v.extend(["squashfs", "zip"]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_names_version_commit_link_and_features() {
        let l = long();
        assert!(l.starts_with(env!("CARGO_PKG_VERSION")), "{l}");
        assert!(l.contains("commit "), "{l}");
        assert!(l.contains("static") || l.contains("dynamic"), "{l}");
        // The binary always has the FUSE adapter and remote images.
        assert!(l.contains("features: fuse, s3, http"), "{l}");
    }
}
