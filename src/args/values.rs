//! Value parsers for the command line: each turns one argument into its
//! checked value or says what is wrong with it, so that clap reports it as
//! the usage error it is (exit 2, with the option's name) before anything
//! is read or written.

use std::path::PathBuf;

/// `--endpoint`: a URL with a scheme and a host (refused here, with status
/// 2, rather than when the first request is built).
pub fn endpoint(s: &str) -> Result<String, String> {
    packfs_objstore::config::check_endpoint(s, "--endpoint")
        .map(|()| s.to_string())
        .map_err(|e| match e {
            packfs_objstore::RemoteError::Config(m) => m,
            e => e.to_string(),
        })
}

/// `pack --block-size`: a size (`128K`, `1M`), a power of two from 4K to 1M.
pub fn block_size(s: &str) -> Result<u64, String> {
    let n = packfs_bench::size::parse_size(s)?;
    if !n.is_power_of_two() || !(4096..=1 << 20).contains(&n) {
        return Err(format!(
            "{n} bytes: the block size must be a power of two from 4K to 1M"
        ));
    }
    Ok(n)
}

/// `pack --level`: a number; for xz it may end in `e` (`9e`), the preset's
/// extreme variant as in `xz -9e`. The range is checked against the codec
/// once the codec is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    pub n: i32,
    pub extreme: bool,
}

pub fn level(s: &str) -> Result<Level, String> {
    let (digits, extreme) = match s.strip_suffix('e') {
        Some(d) => (d, true),
        None => (s, false),
    };
    let n = digits.parse::<i32>().map_err(|_| {
        format!("{s:?}: a level is a number (for xz optionally followed by e, as 9e)")
    })?;
    Ok(Level { n, extreme })
}

/// `pack --xz-lzma2`: `KEY=VALUE,...` with xz's own names for LZMA2
/// settings (`xz --lzma2=`): lc, lp, pb, nice, depth; checked against what
/// every SquashFS xz reader decodes (see `packfs_format::codec::XzOptions`).
pub fn xz_lzma2(s: &str) -> Result<packfs_format::codec::XzOptions, String> {
    let mut o = packfs_format::codec::XzOptions::default();
    for kv in s.split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("{kv:?}: expected KEY=VALUE (lc, lp, pb, nice, depth)"))?;
        let v: u32 = v
            .parse()
            .map_err(|_| format!("{kv:?}: the value is not a number"))?;
        let slot = match k {
            "lc" => &mut o.lc,
            "lp" => &mut o.lp,
            "pb" => &mut o.pb,
            "nice" => &mut o.nice_len,
            "depth" => &mut o.depth,
            _ => return Err(format!("{k:?}: not one of lc, lp, pb, nice, depth")),
        };
        *slot = Some(v);
    }
    o.check()?;
    Ok(o)
}

/// `pack --exclude`: a pattern the packer can use (see `packer::exclude`).
pub fn exclude(s: &str) -> Result<String, String> {
    packer::exclude::check(s)?;
    Ok(s.to_string())
}

/// `pack --mount-at`: where the image will be mounted, which only an
/// absolute path can name (a venv's scripts hold it as is).
pub fn absolute_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err(format!(
            "{s:?} is relative; give the absolute path the image will be mounted at"
        ));
    }
    Ok(p)
}

/// `run IMAGE:MOUNTPOINT`.
#[derive(Clone, Debug)]
pub struct MountSpec {
    pub image: String,
    pub mountpoint: PathBuf,
}

/// Either side of `IMAGE:MOUNTPOINT` may hold colons (an image URL has one,
/// a path may), so the split is at the first colon whose left side names
/// an image that is there (a file, or a URL) and whose right side can be a
/// path; failing that, at the last colon, and the missing image is then
/// reported by its name.
pub fn mount_spec(s: &str) -> Result<MountSpec, String> {
    let splits = || {
        s.match_indices(':')
            .map(|(i, _)| (&s[..i], &s[i + 1..]))
            .filter(|(image, mp)| !image.is_empty() && !mp.is_empty() && !mp.starts_with("//"))
    };
    // A URL names an object only with a path after its host: the colon
    // before a port (`http://host:8080/x.sqfs`) does not end it.
    let url_with_path = |image: &str| {
        image.split_once("://").is_some_and(|(_, rest)| {
            rest.split_once('/')
                .is_some_and(|(host, path)| !host.is_empty() && !path.is_empty())
        })
    };
    let names_an_image = |image: &str| {
        (url_with_path(image)
            && mountfs::location::ImageLocation::parse(image).is_ok_and(|l| l.is_remote()))
            || std::path::Path::new(image).exists()
    };
    match splits()
        .find(|(image, _)| names_an_image(image))
        .or_else(|| splits().next_back())
    {
        Some((image, mp)) => Ok(MountSpec {
            image: image.to_string(),
            mountpoint: PathBuf::from(mp),
        }),
        None => Err(format!(
            "{s:?}: expected IMAGE:MOUNTPOINT (e.g. data.sqfs:/tmp/data); the command goes after --"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_outside_4k_to_1m_or_not_powers_of_two_are_refused() {
        assert_eq!(block_size("128K"), Ok(128 << 10));
        assert_eq!(block_size("1M"), Ok(1 << 20));
        for bad in ["3000", "2M", "2K", "96K"] {
            let e = block_size(bad).unwrap_err();
            assert!(e.contains("power of two from 4K to 1M"), "{bad}: {e}");
        }
    }

    #[test]
    fn mount_specs_split_at_the_last_colon() {
        let m = mount_spec("s3://b/k.sqfs:/tmp/d").unwrap();
        assert_eq!(
            (m.image.as_str(), m.mountpoint.to_str()),
            ("s3://b/k.sqfs", Some("/tmp/d"))
        );
        for bad in ["a.sqfs", "a.sqfs:", ":/tmp/d", "http://host/x.sqfs"] {
            assert!(mount_spec(bad).is_err(), "{bad}");
        }
    }

    // Regression: a colon in the mountpoint split it off as part of the
    // image ("no such file: data.sqfs:/tmp/a").
    #[test]
    fn a_colon_in_the_mountpoint_or_the_image_name_splits_where_the_image_is() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().to_str().unwrap();
        for name in ["data.sqfs", "a:b.sqfs"] {
            std::fs::write(t.path().join(name), b"").unwrap();
            let m = mount_spec(&format!("{dir}/{name}:/tmp/x:y")).unwrap();
            assert_eq!(m.image, format!("{dir}/{name}"));
            assert_eq!(m.mountpoint, PathBuf::from("/tmp/x:y"));
        }
        for url in [
            "s3://b/k.sqfs",
            "http://host:8080/k.sqfs",
            "https://h/a/k.sqfs",
        ] {
            for mp in ["/tmp/x:y", "/tmp/d"] {
                let m = mount_spec(&format!("{url}:{mp}")).unwrap();
                assert_eq!((m.image.as_str(), m.mountpoint.to_str()), (url, Some(mp)));
            }
        }
        // No image there: the last colon, as before.
        let m = mount_spec(&format!("{dir}/missing.sqfs:/tmp/d")).unwrap();
        assert_eq!(m.image, format!("{dir}/missing.sqfs"));
    }
}
