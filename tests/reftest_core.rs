//! Random operation sequences against a reference model, on the filesystem
//! core without a mount (the FUSE adapter only converts what these calls
//! return).
//!
//! The model is the source tree itself, read with `std::fs`. Each seed
//! drives a few thousand operations — stat, ranged reads at awkward
//! offsets, readdir resumed from a random cookie, readlink, xattrs, missing
//! names, hard-link identity — against SquashFS images written by packfs
//! and by mksquashfs with unusual options, each behind a cache far smaller
//! than the data, with sequential prefetch running, so evictions and
//! background decodes interleave with the reads. A failure prints the seed,
//! the image and the operation.

mod common;
use common::*;
use mountfs::cache::BlockCache;
use mountfs::error::FsError;
use mountfs::fs::{Attr, FileKind, PackFs};
use mountfs::source::MemSource;
use mountfs::squashfs::SquashFs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// What the model knows of one path.
struct Model {
    path: PathBuf,
    meta: std::fs::Metadata,
}

fn kind_of(m: &std::fs::Metadata) -> FileKind {
    let t = m.file_type();
    if t.is_dir() {
        FileKind::Dir
    } else if t.is_symlink() {
        FileKind::Symlink
    } else if t.is_file() {
        FileKind::File
    } else if t.is_fifo() {
        FileKind::Fifo
    } else if t.is_socket() {
        FileKind::Socket
    } else if t.is_char_device() {
        FileKind::CharDevice
    } else {
        FileKind::BlockDevice
    }
}

fn walk(root: &Path) -> Vec<Model> {
    let mut out = vec![Model {
        path: PathBuf::new(),
        meta: std::fs::symlink_metadata(root).unwrap(),
    }];
    let mut i = 0;
    while i < out.len() {
        if out[i].meta.is_dir() {
            let dir = root.join(&out[i].path);
            for e in std::fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                out.push(Model {
                    path: out[i].path.join(e.file_name()),
                    meta: e.metadata().unwrap(),
                });
            }
        }
        i += 1;
    }
    out
}

fn open(img: &Path, cache: usize) -> PackFs<SquashFs> {
    let sq = SquashFs::open(
        Box::new(MemSource(std::fs::read(img).unwrap())),
        Arc::new(BlockCache::new(cache)),
    )
    .unwrap();
    // 256 KiB of sequential prefetch on 2 threads: background decodes race
    // with the reads and evictions below.
    PackFs::new(sq, 256 << 10, 2)
}

fn check_attr(m: &Model, a: &Attr) -> Result<(), String> {
    let want_kind = kind_of(&m.meta);
    let mut diffs = Vec::new();
    if a.kind != want_kind {
        diffs.push(format!("kind {:?} != {want_kind:?}", a.kind));
    }
    if a.perm as u32 != m.meta.mode() & 0o7777 {
        diffs.push(format!("perm {:o} != {:o}", a.perm, m.meta.mode() & 0o7777));
    }
    if (a.uid, a.gid) != (m.meta.uid(), m.meta.gid()) {
        diffs.push(format!("owner {}:{}", a.uid, a.gid));
    }
    if a.mtime != m.meta.mtime() {
        diffs.push(format!("mtime {} != {}", a.mtime, m.meta.mtime()));
    }
    if matches!(want_kind, FileKind::File | FileKind::Symlink) && a.size != m.meta.size() {
        diffs.push(format!("size {} != {}", a.size, m.meta.size()));
    }
    if want_kind != FileKind::Dir && a.nlink as u64 != m.meta.nlink() {
        diffs.push(format!("nlink {} != {}", a.nlink, m.meta.nlink()));
    }
    if matches!(want_kind, FileKind::CharDevice | FileKind::BlockDevice) {
        let (ma, mi) = (libc::major(m.meta.rdev()), libc::minor(m.meta.rdev()));
        // Linux new_encode_dev.
        let enc = (mi & 0xff) | (ma << 8) | ((mi & !0xff) << 12);
        if a.rdev != enc {
            diffs.push(format!("rdev {:#x} != {enc:#x}", a.rdev));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join(", "))
    }
}

/// One random operation; `Err` describes a divergence from the model.
fn step(
    rng: &mut StdRng,
    fs: &PackFs<SquashFs>,
    src: &Path,
    model: &[Model],
    by_kind: &BTreeMap<&'static str, Vec<usize>>,
) -> Result<String, String> {
    let pick = |rng: &mut StdRng, k: &str| -> &Model {
        let v = &by_kind[k];
        &model[v[rng.gen_range(0..v.len())]]
    };
    let resolve = |m: &Model| {
        fs.resolve(m.path.as_os_str().as_bytes())
            .map_err(|e| format!("resolve {}: {e}", m.path.display()))
    };
    match rng.gen_range(0..100) {
        // stat anything
        0..=19 => {
            let m = &model[rng.gen_range(0..model.len())];
            let a = resolve(m)?;
            check_attr(m, &a).map_err(|d| format!("stat {}: {d}", m.path.display()))?;
            Ok(format!("stat {}", m.path.display()))
        }
        // ranged read of a regular file, at and around block edges and EOF
        20..=54 => {
            let m = pick(rng, "file");
            let a = resolve(m)?;
            let size = m.meta.size();
            let edges = [
                0,
                4095,
                4096,
                131_071,
                131_072,
                size,
                size.saturating_sub(1),
            ];
            let off = if rng.gen_bool(0.5) {
                edges[rng.gen_range(0..edges.len())]
            } else {
                rng.gen_range(0..=size + 10)
            };
            let len = [1u32, 100, 4096, 131_073, 1 << 20][rng.gen_range(0..5)];
            let got = fs
                .read(a.node, off, len)
                .map_err(|e| format!("read {} @{off}+{len}: {e}", m.path.display()))?;
            let data = std::fs::read(src.join(&m.path)).unwrap();
            let s = (off as usize).min(data.len());
            let e = (off as usize + len as usize).min(data.len());
            if got != data[s..e] {
                return Err(format!(
                    "read {} @{off}+{len}: {} bytes, differ from the source",
                    m.path.display(),
                    got.len()
                ));
            }
            Ok(format!("read {} @{off}+{len}", m.path.display()))
        }
        // full listing, then resume from a random cookie
        55..=69 => {
            let m = pick(rng, "dir");
            let a = resolve(m)?;
            let list = fs
                .list(a.node)
                .map_err(|e| format!("list {}: {e}", m.path.display()))?;
            let mut want: Vec<Vec<u8>> = std::fs::read_dir(src.join(&m.path))
                .unwrap()
                .map(|e| e.unwrap().file_name().as_bytes().to_vec())
                .collect();
            want.sort();
            let names: Vec<Vec<u8>> = list.iter().map(|e| e.name.clone()).collect();
            if names != want {
                return Err(format!("list {}: names differ", m.path.display()));
            }
            if list.is_empty() {
                return Ok(format!("list {} (empty)", m.path.display()));
            }
            let k = rng.gen_range(0..list.len());
            let mut rest = Vec::new();
            fs.readdir(a.node, list[k].cookie, &mut |e| {
                rest.push(e.name);
                // A small reply buffer now and then: stop early.
                rest.len() < 3 || stop_every_fifth(&rest)
            })
            .map_err(|e| format!("readdir {} from {k}: {e}", m.path.display()))?;
            let tail = &names[k + 1..];
            if rest[..] != tail[..rest.len().min(tail.len())] || rest.len() > tail.len() {
                return Err(format!(
                    "readdir {} resumed after entry {k}: wrong entries",
                    m.path.display()
                ));
            }
            Ok(format!("readdir {} after {k}", m.path.display()))
        }
        70..=77 => {
            let m = pick(rng, "symlink");
            let a = resolve(m)?;
            let t = fs.readlink(a.node).map_err(|e| e.to_string())?;
            let want = std::fs::read_link(src.join(&m.path)).unwrap();
            if t != want.as_os_str().as_bytes() {
                return Err(format!("readlink {}", m.path.display()));
            }
            Ok(format!("readlink {}", m.path.display()))
        }
        78..=85 => {
            let m = &model[rng.gen_range(0..model.len())];
            let a = resolve(m)?;
            let mut want: Vec<_> = xattr::list(src.join(&m.path))
                .map(|l| l.map(|n| n.as_bytes().to_vec()).collect())
                .unwrap_or_default();
            want.sort();
            let mut got: Vec<Vec<u8>> = fs
                .listxattr(a.node)
                .map_err(|e| e.to_string())?
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| n.to_vec())
                .collect();
            got.sort();
            if got != want {
                return Err(format!("listxattr {}", m.path.display()));
            }
            for n in &want {
                let name = std::ffi::OsStr::from_bytes(n);
                let v = xattr::get(src.join(&m.path), name).unwrap().unwrap();
                if fs.getxattr(a.node, n).map_err(|e| e.to_string())? != v {
                    return Err(format!("getxattr {} {name:?}", m.path.display()));
                }
            }
            match fs.getxattr(a.node, b"user.not-there") {
                Err(FsError::NoXattr) => Ok(format!("xattrs {}", m.path.display())),
                other => Err(format!("missing xattr on {}: {other:?}", m.path.display())),
            }
        }
        86..=91 => {
            let m = pick(rng, "dir");
            let a = resolve(m)?;
            let name = format!("missing-{}", rng.gen::<u32>());
            match fs.lookup(a.node, name.as_bytes()) {
                Err(FsError::NotFound) => Ok(format!("lookup missing in {}", m.path.display())),
                other => Err(format!("lookup {name} in {}: {other:?}", m.path.display())),
            }
        }
        92..=95 => {
            let m = pick(rng, "dir");
            let a = resolve(m)?;
            match fs.read(a.node, 0, 10) {
                Err(FsError::IsDir) => Ok(format!("read dir {}", m.path.display())),
                other => Err(format!("read of dir {}: {other:?}", m.path.display())),
            }
        }
        _ => {
            // Hard-link identity: same source inode <=> same st_ino.
            let x = &model[rng.gen_range(0..model.len())];
            let y = pick(rng, "file");
            let (ax, ay) = (resolve(x)?, resolve(y)?);
            let same_src = x.meta.ino() == y.meta.ino();
            if same_src != (ax.ino == ay.ino) {
                return Err(format!(
                    "link identity {} / {}: source {same_src}, image {}",
                    x.path.display(),
                    y.path.display(),
                    ax.ino == ay.ino
                ));
            }
            Ok(format!(
                "identity {} {}",
                x.path.display(),
                y.path.display()
            ))
        }
    }
}

/// Deterministic early stop for readdir sinks (every fifth entry count).
fn stop_every_fifth(rest: &[Vec<u8>]) -> bool {
    !rest.len().is_multiple_of(5)
}

#[test]
fn random_operations_match_the_source_tree() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let model = walk(&src);
    let mut by_kind: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    for (i, m) in model.iter().enumerate() {
        let k = match kind_of(&m.meta) {
            FileKind::File => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            _ => "special",
        };
        by_kind.entry(k).or_default().push(i);
    }

    let mut images = Vec::new();
    for (name, args) in [
        ("packfs-zstd", vec![]),
        ("packfs-gzip-4K", vec!["-c", "gzip", "-b", "4K"]),
        ("packfs-lz4-1M", vec!["-c", "lz4", "-b", "1M"]),
    ] {
        let img = t.path().join(format!("{name}.sqfs"));
        pack(&src, &img, &args);
        images.push((name, img));
    }
    for (name, args) in [
        (
            "mksquashfs-xz-4K-frag",
            vec!["-comp", "xz", "-b", "4096", "-always-use-fragments"],
        ),
        (
            "mksquashfs-uncompressed",
            vec!["-noI", "-noD", "-noF", "-noX"],
        ),
    ] {
        let img = t.path().join(format!("{name}.sqfs"));
        run(Command::new("mksquashfs")
            .arg(&src)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress"])
            .args(&args));
        images.push((name, img));
    }

    for seed in 0..3u64 {
        for (name, img) in &images {
            // 96 KiB of cache: smaller than one 1M block, a few 128K ones.
            let fs = open(img, 96 << 10);
            let mut rng = StdRng::seed_from_u64(seed);
            for i in 0..1500 {
                if let Err(e) = step(&mut rng, &fs, &src, &model, &by_kind) {
                    panic!("seed {seed}, image {name}, operation {i}: {e}");
                }
            }
        }
    }
}
