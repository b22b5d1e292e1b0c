//! What an image argument names, and a source for it: the one place the
//! CLI's commands (mount, run, info, ls, cat, extract, bench) turn
//! `IMAGE` into bytes, so that a new kind of location is one change here.

use crate::error::{FsError, Result};
use crate::remote::RemoteOptions;
use crate::source::{open_image, ImageSource, IoMode};
use std::path::{Path, PathBuf};

/// Where an image is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageLocation {
    /// A file.
    Local(PathBuf),
    /// `s3://BUCKET/KEY`: an S3 object (endpoint and keys from the
    /// environment, the AWS files or flags).
    S3 { bucket: String, key: String },
    /// `http://...` or `https://...`: any server that answers range GETs
    /// (a public LUMI-O bucket, a presigned URL, nginx).
    Http(String),
}

impl ImageLocation {
    /// Reads an image argument: `s3://`, `http://` and `https://` prefixes
    /// name remote objects, anything else a file.
    pub fn parse(arg: &str) -> std::result::Result<Self, String> {
        let lower = arg.get(..8).unwrap_or(arg).to_ascii_lowercase();
        if ["s3://", "http://", "https://"]
            .iter()
            .any(|s| lower.starts_with(s))
        {
            return Self::remote(arg);
        }
        if let Some(scheme) = url_scheme(arg) {
            let rest = &arg[scheme.len() + 3..];
            if scheme.eq_ignore_ascii_case("file") {
                // As fsspec and browsers write a local file; RFC 8089
                // allows "localhost" as the host.
                let rest = rest.strip_prefix("localhost").unwrap_or(rest);
                return match rest.starts_with('/') {
                    true => Ok(ImageLocation::Local(percent_decoded(rest))),
                    false => Err(format!("{arg}: a file URL is file:///ABSOLUTE/PATH")),
                };
            }
            // Read as a path, a gs:// or ftp:// URL would be "no such file
            // or directory", which says nothing of the real cause.
            return Err(format!(
                "{arg}: packfs reads images from files and from s3://, http:// and https:// \
                 URLs, not {scheme}:// (a file whose path starts this way: ./{arg})"
            ));
        }
        Ok(ImageLocation::Local(arg.into()))
    }

    /// An `s3://` or `http(s)://` URL, as the client reads it.
    #[cfg(feature = "remote")]
    fn remote(url: &str) -> std::result::Result<Self, String> {
        use packfs_objstore::Target;
        match Target::parse(url) {
            Ok(Target::S3 { bucket, key }) => Ok(ImageLocation::S3 { bucket, key }),
            Ok(Target::Http { url }) => Ok(ImageLocation::Http(url)),
            Err(e) => Err(e.to_string()),
        }
    }

    #[cfg(not(feature = "remote"))]
    fn remote(url: &str) -> std::result::Result<Self, String> {
        Err(format!(
            "{url}: this build of packfs reads no remote images (feature \"remote\")"
        ))
    }

    /// The object of a remote location, as the client names it.
    #[cfg(feature = "remote")]
    pub fn target(&self) -> Option<packfs_objstore::Target> {
        use packfs_objstore::Target;
        match self {
            ImageLocation::Local(_) => None,
            ImageLocation::S3 { bucket, key } => Some(Target::S3 {
                bucket: bucket.clone(),
                key: key.clone(),
            }),
            ImageLocation::Http(url) => Some(Target::Http { url: url.clone() }),
        }
    }

    /// [`ImageLocation::parse`] for a path argument (a non-UTF-8 path is a file).
    pub fn from_path(p: &Path) -> std::result::Result<Self, String> {
        match p.to_str() {
            Some(s) => Self::parse(s),
            None => Ok(ImageLocation::Local(p.into())),
        }
    }

    pub fn is_remote(&self) -> bool {
        !matches!(self, ImageLocation::Local(_))
    }

    /// The location of `name` as a manifest at this location names a shard:
    /// an `s3://` or `http(s)://` URL or an absolute path as it is, anything
    /// else relative to this location's directory (its folder, key prefix,
    /// or URL path without the query). Local and remote shards may mix. A
    /// local shard's path is made absolute now: shards open on first use,
    /// and the process may have changed directory by then (a Python
    /// program's `os.chdir`).
    pub fn resolve(&self, name: &str) -> std::result::Result<ImageLocation, String> {
        let named = Self::parse(name)?;
        if named.is_remote() || name.starts_with('/') {
            return Ok(named);
        }
        if name.is_empty() || (self.is_remote() && name.split('/').any(|c| c == "..")) {
            return Err(format!(
                "{name:?}: a shard of a remote manifest is a URL or a name below the manifest's \
                 prefix (no \"..\")"
            ));
        }
        let dir_of = |s: &str| s.rfind('/').map_or(String::new(), |i| s[..=i].to_string());
        Ok(match self {
            ImageLocation::Local(p) => {
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                // Not canonicalised: ".." after a symlinked directory keeps
                // the meaning it has for the manifest's own path.
                let dir = std::path::absolute(&dir).unwrap_or(dir);
                ImageLocation::Local(dir.join(name))
            }
            ImageLocation::S3 { bucket, key } => ImageLocation::S3 {
                bucket: bucket.clone(),
                key: format!("{}{name}", dir_of(key)),
            },
            ImageLocation::Http(u) => {
                let base = u.split(['?', '#']).next().unwrap_or(u);
                ImageLocation::Http(format!("{}{name}", dir_of(base)))
            }
        })
    }

    /// The last component of the path or key ("train.sqfs").
    pub fn file_name(&self) -> Option<String> {
        match self {
            ImageLocation::Local(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
            ImageLocation::S3 { key, .. } => key.rsplit('/').next().map(str::to_string),
            ImageLocation::Http(u) => {
                let path = u.split(['?', '#']).next().unwrap_or(u);
                path.rsplit('/')
                    .next()
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
            }
        }
    }
}

impl std::fmt::Display for ImageLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageLocation::Local(p) => write!(f, "{}", p.display()),
            ImageLocation::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            ImageLocation::Http(u) => f.write_str(u),
        }
    }
}

/// A file URL's path with its `%XX` escapes decoded (a space is `%20`
/// there); a `%` not followed by two hex digits stays as it is.
fn percent_decoded(path: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out).into()
}

/// The scheme of `arg` when it starts as a URL does (`SCHEME://`, the
/// scheme a letter and then letters, digits, `+`, `-` or `.`).
fn url_scheme(arg: &str) -> Option<&str> {
    let (scheme, _) = arg.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// A source opened for a location, with what the caller may report.
pub struct Opened {
    pub source: Box<dyn ImageSource>,
    /// The path or URL, for messages.
    pub name: String,
    /// Request counters of a remote source.
    #[cfg(feature = "remote")]
    pub remote: Option<std::sync::Arc<packfs_objstore::RemoteCounters>>,
}

/// Opens a source for `loc`: a file with `io`, a remote object with
/// `remote` (a HEAD first: a 403 or 404 is an error here, before anything
/// is mounted). Not yet wrapped for stream readahead (see `open::Opener`).
pub fn open_location(loc: &ImageLocation, io: IoMode, remote: &RemoteOptions) -> Result<Opened> {
    let name = loc.to_string();
    match loc {
        ImageLocation::Local(p) => Ok(Opened {
            source: open_image(p, io)?,
            name,
            #[cfg(feature = "remote")]
            remote: None,
        }),
        #[cfg(feature = "remote")]
        ImageLocation::S3 { .. } | ImageLocation::Http(_) => {
            use crate::remote::RemoteSource;
            let target = loc.target().expect("a remote location");
            let client = packfs_objstore::Remote::connect(&target, &remote.client)?;
            let src = RemoteSource::open(client, remote)?;
            let counters = src.counters();
            Ok(Opened {
                source: Box::new(src),
                name,
                remote: Some(counters),
            })
        }
        #[cfg(not(feature = "remote"))]
        _ => {
            let _ = remote;
            Err(FsError::Unsupported(format!(
                "{name}: this build of packfs reads no remote images (feature \"remote\")"
            )))
        }
    }
}

/// What a location holds: an image, or a shard manifest (its bytes).
pub enum Content {
    Image(Opened),
    Manifest(Vec<u8>),
}

/// Whether the file at `path` looks like a shard manifest (JSON) rather
/// than an image: images start with binary magic, JSON with `{`.
pub fn is_manifest(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    // Only a regular file: opening a fifo would wait for a writer.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    head[..n]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Manifests larger than this are not read (one of 4096 shards is a few MiB).
pub const MAX_MANIFEST: u64 = 64 << 20;

/// Opens `loc` as [`open_location`] does, or reads it when it is a shard
/// manifest: JSON, told from an image by its first byte (`{`; images start
/// with binary magic), for files and remote objects alike.
pub fn open_content(loc: &ImageLocation, io: IoMode, remote: &RemoteOptions) -> Result<Content> {
    if let ImageLocation::Local(p) = loc {
        if is_manifest(p) {
            let name = p.display().to_string();
            return std::fs::read(p)
                .map(Content::Manifest)
                .map_err(|e| FsError::io(&name, e));
        }
    }
    let o = open_location(loc, io, remote)?;
    if !loc.is_remote() {
        return Ok(Content::Image(o));
    }
    let len = o.source.len();
    let mut head = vec![0u8; len.min(64) as usize];
    o.source.read_at(0, &mut head)?;
    let json = head
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if !json {
        return Ok(Content::Image(o));
    }
    if len > MAX_MANIFEST {
        return Err(FsError::Invalid(format!(
            "{}: {len} bytes of JSON: larger than any shard manifest ({MAX_MANIFEST} bytes at most)",
            o.name
        )));
    }
    let mut all = vec![0u8; len as usize];
    o.source.read_at(0, &mut all)?;
    Ok(Content::Manifest(all))
}

/// The lengths of the images at `locs`, in order: files by `stat`, remote
/// objects by HEAD (those of one bucket through one client, concurrently).
/// Each error says which image and why.
pub fn lengths(
    locs: &[ImageLocation],
    remote: &RemoteOptions,
) -> Vec<std::result::Result<u64, String>> {
    #[cfg(feature = "remote")]
    let mut remote_lens = {
        let targets: Vec<_> = locs.iter().filter_map(ImageLocation::target).collect();
        packfs_objstore::bucket::lengths(&targets, &remote.client).into_iter()
    };
    #[cfg(not(feature = "remote"))]
    let _ = remote;
    locs.iter()
        .map(|l| match l {
            ImageLocation::Local(p) => {
                crate::source::image_len(p).map_err(|e| format!("{}: {e}", p.display()))
            }
            #[cfg(feature = "remote")]
            _ => remote_lens
                .next()
                .expect("one length per remote location")
                .map_err(|e| e.to_string()),
            #[cfg(not(feature = "remote"))]
            _ => Err(format!(
                "{l}: this build of packfs reads no remote images (feature \"remote\")"
            )),
        })
        .collect()
}

/// Parses an argument into a location, as an `FsError` for callers that
/// have no other error type.
pub fn parse_arg(arg: &str) -> Result<ImageLocation> {
    ImageLocation::parse(arg).map_err(FsError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_name_files_buckets_and_urls() {
        use ImageLocation as L;
        assert_eq!(L::parse("data.sqfs").unwrap(), L::Local("data.sqfs".into()));
        assert_eq!(L::parse("./s3:/x").unwrap(), L::Local("./s3:/x".into()));
        assert_eq!(
            L::parse("s3://bucket/dir/train.sqfs").unwrap(),
            L::S3 {
                bucket: "bucket".into(),
                key: "dir/train.sqfs".into()
            }
        );
        assert_eq!(
            L::parse("HTTPS://lumidata.eu/b/x.sqfs").unwrap(),
            L::Http("HTTPS://lumidata.eu/b/x.sqfs".into())
        );
        for bad in [
            "s3://",
            "s3://bucket",
            "s3://bucket/",
            "s3:///key",
            "http://",
            "https:///x",
            "file://host/x.sqfs",
        ] {
            assert!(L::parse(bad).is_err(), "{bad}");
        }
        // Regression: any other scheme was a file path, and its error "no
        // such file or directory".
        for other in [
            "gs://b/x.sqfs",
            "ftp://h/x.sqfs",
            "az://c/x.sqfs",
            "S3A://b/k",
        ] {
            let e = L::parse(other).unwrap_err();
            assert!(e.contains("not ") && e.contains("s3://"), "{e}");
        }
        assert_eq!(
            L::parse("file:///data/x.sqfs").unwrap(),
            L::Local("/data/x.sqfs".into())
        );
        assert_eq!(
            L::parse("file://localhost/data/x.sqfs").unwrap(),
            L::Local("/data/x.sqfs".into())
        );
        assert_eq!(
            L::parse("file:///sp%20ace/%C3%BC%2/x%zz.sqfs").unwrap(),
            L::Local("/sp ace/\u{fc}%2/x%zz.sqfs".into())
        );
        for path in ["./gs://b/x", "dir/ftp://x", "a b://x", "1x://y"] {
            assert_eq!(L::parse(path).unwrap(), L::Local(path.into()), "{path}");
        }
        let u = L::parse("http://h:8080/a/b.zip?X-Amz-Signature=1").unwrap();
        assert_eq!(u.file_name().as_deref(), Some("b.zip"));
        assert!(u.is_remote() && !L::parse("x").unwrap().is_remote());
        assert_eq!(
            L::parse("s3://b/k/v.sqfs").unwrap().to_string(),
            "s3://b/k/v.sqfs"
        );
    }

    #[test]
    fn shard_names_resolve_beside_the_manifest_or_as_given() {
        use ImageLocation as L;
        let s3 = L::parse("s3://b/sets/t.manifest.json").unwrap();
        assert_eq!(
            s3.resolve("t-0.sqfs").unwrap(),
            L::parse("s3://b/sets/t-0.sqfs").unwrap()
        );
        assert_eq!(
            s3.resolve("sub/t-1.sqfs").unwrap(),
            L::parse("s3://b/sets/sub/t-1.sqfs").unwrap()
        );
        // URLs and absolute paths as they are: local and remote mix.
        assert_eq!(
            s3.resolve("https://h/x.sqfs").unwrap(),
            L::Http("https://h/x.sqfs".into())
        );
        assert_eq!(
            s3.resolve("/scratch/x.sqfs").unwrap(),
            L::Local("/scratch/x.sqfs".into())
        );
        assert!(s3.resolve("../x.sqfs").is_err() && s3.resolve("").is_err());
        let top = L::parse("s3://b/t.manifest.json").unwrap();
        assert_eq!(
            top.resolve("t-0.sqfs").unwrap(),
            L::parse("s3://b/t-0.sqfs").unwrap()
        );
        let http = L::parse("http://h:8/a/t.manifest.json?sig=1").unwrap();
        assert_eq!(
            http.resolve("t-0.sqfs").unwrap(),
            L::Http("http://h:8/a/t-0.sqfs".into())
        );
        let local = L::parse("d/t.manifest.json").unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            local.resolve("t-0.sqfs").unwrap(),
            L::Local(cwd.join("d/t-0.sqfs"))
        );
        assert_eq!(
            local.resolve("../e/t.sqfs").unwrap(),
            L::Local(cwd.join("d/../e/t.sqfs"))
        );
        assert_eq!(
            L::parse("t.manifest.json")
                .unwrap()
                .resolve("t-0.sqfs")
                .unwrap(),
            L::Local(cwd.join("./t-0.sqfs"))
        );
    }
}
