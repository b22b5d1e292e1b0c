//! End-to-end tests of the SquashFS writer: build real trees, pack them, and
//! check the image with unsquashfs and the kernel's own squashfs driver.

use crate::common::{is_root, require, require_root, scratch, KernelMount};
use packer::{pack_squashfs, Compressor, PackError, PackOptions};
use packfs_format::codec::XzOptions;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const BS: usize = 131072;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn set_mtime(p: &Path, secs: i64) {
    let ts = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: valid C string and a two-element timespec array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            cstr(p).as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {}", p.display());
}

fn lchown(p: &Path, uid: u32, gid: u32) -> bool {
    // SAFETY: valid C string.
    unsafe { libc::lchown(cstr(p).as_ptr(), uid, gid) == 0 }
}

fn mknod(p: &Path, mode: u32, major: u32, minor: u32) -> bool {
    // SAFETY: valid C string.
    unsafe { libc::mknod(cstr(p).as_ptr(), mode, libc::makedev(major, minor)) == 0 }
}

fn lsetxattr(p: &Path, name: &str, value: &[u8]) -> bool {
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a live slice.
    unsafe {
        libc::lsetxattr(
            cstr(p).as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        ) == 0
    }
}

fn write(p: &Path, data: &[u8]) {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(p, data).unwrap();
}

fn random(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

fn text(n: usize, seed: usize) -> Vec<u8> {
    (0..)
        .flat_map(|i| format!("line {} of file {seed}: lorem ipsum dolor\n", i % 1000).into_bytes())
        .take(n)
        .collect()
}

/// What the fixture could do on this machine.
struct Caps {
    xattrs: bool,
}

/// Every entry type and edge case the writer must handle.
fn build_full_tree(src: &Path) -> Caps {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    fs::create_dir_all(src).unwrap();
    write(&src.join("empty"), b"");
    write(&src.join("empty2"), b"");
    write(&src.join("small.txt"), b"hello squashfs\n");
    write(&src.join("ünïcödé-日本語.txt"), "unicode ✓\n".as_bytes());
    write(&src.join("a".repeat(255)), b"long name\n");
    for (i, n) in [BS - 1, BS, BS + 1, 2 * BS, 3 * BS + 7]
        .into_iter()
        .enumerate()
    {
        let mut d = text(n / 2, i);
        d.extend(random(&mut rng, n - n / 2));
        write(&src.join(format!("blocks/size-{n}")), &d);
    }
    write(
        &src.join("blocks/random-jpeg-like"),
        &random(&mut rng, 5 * BS / 2),
    );
    // Duplicates, small and large, in different directories.
    write(&src.join("dup/small-1"), b"duplicate content\n");
    write(&src.join("dup/deeper/small-2"), b"duplicate content\n");
    let big = [text(300_000, 7), random(&mut rng, 100_000)].concat();
    write(&src.join("dup/large-1"), &big);
    write(&src.join("dup/deeper/large-2"), &big);
    // Hard links: one with 2 names, one with 3 (across directories).
    write(&src.join("hl/two-a"), b"two links\n");
    fs::hard_link(src.join("hl/two-a"), src.join("hl/two-b")).unwrap();
    write(&src.join("hl/three-a"), b"three links\n");
    fs::hard_link(src.join("hl/three-a"), src.join("hl/three-b")).unwrap();
    fs::create_dir_all(src.join("other")).unwrap();
    fs::hard_link(src.join("hl/three-a"), src.join("other/three-c")).unwrap();
    // Symlinks.
    std::os::unix::fs::symlink("small.txt", src.join("link-rel")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("link-abs")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", src.join("link-dangling")).unwrap();
    // Special files.
    fs::create_dir_all(src.join("dev")).unwrap();
    if is_root() {
        assert!(mknod(&src.join("dev/blk"), libc::S_IFBLK | 0o660, 8, 1));
        assert!(mknod(&src.join("dev/chr"), libc::S_IFCHR | 0o666, 1, 3));
        assert!(mknod(
            &src.join("dev/bigchr"),
            libc::S_IFCHR | 0o600,
            259,
            70000
        ));
    }
    assert!(mknod(&src.join("dev/fifo"), libc::S_IFIFO | 0o644, 0, 0));
    drop(std::os::unix::net::UnixListener::bind(src.join("dev/sock")).unwrap());
    // Modes.
    write(&src.join("modes/suid"), b"#!/bin/sh\n");
    fs::set_permissions(src.join("modes/suid"), fs::Permissions::from_mode(0o4755)).unwrap();
    write(&src.join("modes/sgid"), b"#!/bin/sh\n\n");
    fs::set_permissions(src.join("modes/sgid"), fs::Permissions::from_mode(0o2711)).unwrap();
    fs::create_dir_all(src.join("modes/sticky")).unwrap();
    fs::set_permissions(src.join("modes/sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    write(&src.join("modes/private"), b"secret\n");
    fs::set_permissions(src.join("modes/private"), fs::Permissions::from_mode(0o600)).unwrap();
    // Owners.
    if is_root() {
        write(&src.join("owners/u1000"), b"u\n");
        assert!(lchown(&src.join("owners/u1000"), 1000, 2000));
        write(&src.join("owners/nobody"), b"n\n");
        assert!(lchown(&src.join("owners/nobody"), 65534, 65534));
        std::os::unix::fs::symlink("nobody", src.join("owners/link")).unwrap();
        assert!(lchown(&src.join("owners/link"), 4242, 4343));
        assert!(lchown(&src.join("owners"), 123, 456));
    }
    // Sparse file with holes (10 MiB, data at 3 MiB and at the end).
    {
        let mut f = File::create(src.join("sparse")).unwrap();
        f.set_len(10 << 20).unwrap();
        f.seek(SeekFrom::Start(3 << 20)).unwrap();
        f.write_all(&text(200_000, 3)).unwrap();
        f.seek(SeekFrom::Start((10 << 20) - 1000)).unwrap();
        f.write_all(&[0xAB; 1000]).unwrap();
    }
    // > 4 GiB sparse file: only its data regions are real.
    {
        let mut f = File::create(src.join("huge")).unwrap();
        f.set_len(5 << 30).unwrap();
        f.seek(SeekFrom::Start((2 << 30) + 12345)).unwrap();
        f.write_all(&text(500_000, 9)).unwrap();
        f.seek(SeekFrom::Start((5 << 30) - 777)).unwrap();
        f.write_all(&[0x5A; 777]).unwrap();
    }
    // Deep tree.
    let mut deep = src.join("deep");
    for i in 0..40 {
        deep.push(format!("level{i}"));
    }
    write(&deep.join("leaf"), b"bottom\n");
    // 10k-entry directory: forces a multi-block listing and directory index.
    let bigdir = src.join("bigdir");
    fs::create_dir_all(&bigdir).unwrap();
    for i in 0..10_000 {
        let name = format!("entry-{i:05}-{}", "x".repeat(i % 40));
        if i % 1000 == 0 {
            fs::create_dir(bigdir.join(&name)).unwrap();
        } else {
            fs::write(bigdir.join(&name), format!("{i}\n")).unwrap();
        }
    }
    // Xattrs (the fs may refuse; then that part is skipped).
    let xattrs = lsetxattr(&src.join("small.txt"), "user.comment", b"hello")
        && lsetxattr(&src.join("small.txt"), "user.empty", b"")
        && lsetxattr(&src.join("blocks"), "user.dir", b"on a directory")
        && lsetxattr(&src.join("dup/small-1"), "user.comment", b"hello")
        && lsetxattr(&src.join("hl/two-a"), "user.linked", &[0, 1, 2, 255]);
    let xattrs = require(xattrs, "user.* xattrs on /var/tmp (for the xattr checks)");
    if xattrs && is_root() {
        assert!(lsetxattr(&src.join("modes/suid"), "security.test", b"sec"));
        assert!(lsetxattr(&src.join("link-rel"), "trusted.onlink", b"t"));
    }
    // Times last (creating children changes directory mtimes): old, future,
    // then a fixed time for everything else, deepest first.
    let mut all = Vec::new();
    collect(src, &mut all);
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in &all {
        set_mtime(p, 1_600_000_000);
    }
    set_mtime(&src.join("small.txt"), 315_532_800); // 1980
    set_mtime(&src.join("empty"), 4_000_000_000); // 2096
    set_mtime(&src.join("link-abs"), 1);
    set_mtime(src, 1_700_000_000);
    Caps { xattrs }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            collect(&p, out);
        }
        out.push(p);
    }
}

/// Everything compared about one entry.
#[derive(Debug, PartialEq)]
struct Entry {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    size: u64,
    rdev: u64,
    nlink: u64,
    target: Option<PathBuf>,
    xattrs: BTreeMap<String, Vec<u8>>,
    content: Option<Vec<u8>>,
}

/// Content to compare: whole file when small; for big (sparse) files a few
/// windows at and around the data regions, so 5 GiB is never read.
fn content(p: &Path, size: u64) -> Vec<u8> {
    let mut f = File::open(p).unwrap();
    if size <= 64 << 20 {
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        return v;
    }
    let mut v = Vec::new();
    for off in [
        0,
        1 << 30,
        (2 << 30) + 12000,
        (2 << 30) + 400_000,
        size - 5000,
    ] {
        let mut b = vec![0u8; 5000];
        f.seek(SeekFrom::Start(off)).unwrap();
        f.read_exact(&mut b).unwrap();
        v.extend(b);
    }
    v
}

fn snapshot(root: &Path, with_xattrs: bool) -> (BTreeMap<PathBuf, Entry>, Vec<Vec<PathBuf>>) {
    let mut paths = vec![root.to_path_buf()];
    collect(root, &mut paths);
    let mut map = BTreeMap::new();
    let mut by_ino: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    for p in paths {
        let m = fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        if !m.is_dir() {
            by_ino.entry(m.ino()).or_default().push(rel.clone());
        }
        let mut xattrs = BTreeMap::new();
        if with_xattrs {
            for name in xattr::list(&p).unwrap() {
                let n = name.to_string_lossy().into_owned();
                if n.starts_with("user.") || n.starts_with("trusted.") || n.starts_with("security.")
                {
                    xattrs.insert(n, xattr::get(&p, &name).unwrap().unwrap_or_default());
                }
            }
        }
        let ft = m.file_type();
        map.insert(
            rel,
            Entry {
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                mtime: m.mtime(),
                size: if ft.is_file() || ft.is_symlink() {
                    m.len()
                } else {
                    0
                },
                rdev: if ft.is_block_device() || ft.is_char_device() {
                    m.rdev()
                } else {
                    0
                },
                nlink: m.nlink(),
                target: ft.is_symlink().then(|| fs::read_link(&p).unwrap()),
                xattrs,
                content: ft.is_file().then(|| content(&p, m.len())),
            },
        );
    }
    let mut groups: Vec<Vec<PathBuf>> = by_ino.into_values().filter(|g| g.len() > 1).collect();
    for g in &mut groups {
        g.sort();
    }
    groups.sort();
    (map, groups)
}

/// Compares two trees entry by entry, with a readable first difference.
fn assert_same_tree(src: &Path, copy: &Path, xattrs: bool, what: &str) {
    let (a, ga) = snapshot(src, xattrs);
    let (b, gb) = snapshot(copy, xattrs);
    let ka: Vec<_> = a.keys().collect();
    let kb: Vec<_> = b.keys().collect();
    assert_eq!(ka, kb, "{what}: different entry names");
    for (k, ea) in &a {
        let eb = &b[k];
        if ea != eb {
            let mut da = format!("{ea:?}");
            let mut db = format!("{eb:?}");
            da.truncate(600);
            db.truncate(600);
            panic!(
                "{what}: {} differs\n source: {da}\n   copy: {db}",
                k.display()
            );
        }
    }
    assert_eq!(ga, gb, "{what}: hard-link groups differ");
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {stderr}");
    assert!(
        stderr.trim().is_empty(),
        "{cmd:?} wrote to stderr: {stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check_with_unsquashfs(img: &Path, src: &Path, work: &Path, xattrs: bool, what: &str) {
    let info = run(Command::new("unsquashfs").arg("-s").arg(img));
    assert!(info.contains("Filesystem size"), "{info}");
    run(Command::new("unsquashfs").arg("-lln").arg(img));
    let out = work.join(format!("unsq-{what}"));
    // As root unsquashfs restores owners, and xattrs by default.
    run(Command::new("unsquashfs").arg("-d").arg(&out).arg(img));
    assert_same_tree(src, &out, xattrs, &format!("unsquashfs {what}"));
    fs::remove_dir_all(&out).unwrap();
}

fn check_with_kernel(img: &Path, src: &Path, xattrs: bool, what: &str) {
    if let Some(k) = KernelMount::new(img) {
        let mnt = k.path();
        assert_same_tree(src, mnt, xattrs, &format!("kernel {what}"));
        // Lookups by name (these walk the directory index in big dirs).
        for i in (0..10_000).step_by(997) {
            let name = format!("entry-{i:05}-{}", "x".repeat(i % 40));
            let p = mnt.join("bigdir").join(&name);
            if src.join("bigdir").exists() {
                assert!(
                    fs::symlink_metadata(&p).is_ok(),
                    "kernel lookup of {name} failed"
                );
            }
        }
    }
}

fn opts(compressor: Compressor, block_size: u32, threads: usize) -> PackOptions {
    PackOptions {
        compressor,
        level: None,
        block_size,
        threads,
        mtime: None,
        ..Default::default()
    }
}

#[test]
fn full_tree_round_trips_through_unsquashfs_and_kernel() {
    let work = scratch();
    let src = work.path().join("src");
    let caps = build_full_tree(&src);
    let img = work.path().join("full.sqfs");
    let s = pack_squashfs(&src, &img, &opts(Compressor::Zstd, BS as u32, 2)).unwrap();
    assert!(s.dedup_files >= 2, "{s:?}");
    assert!(s.fragments > 0);
    assert_eq!(fs::metadata(&img).unwrap().len() % 4096, 0);
    check_with_unsquashfs(&img, &src, work.path(), caps.xattrs, "full");
    check_with_kernel(&img, &src, caps.xattrs, "full");

    // Deterministic for any thread count (with a fixed mtime for the superblock).
    let mut o1 = opts(Compressor::Zstd, BS as u32, 1);
    o1.mtime = Some(1_234_567_890);
    let mut o2 = opts(Compressor::Zstd, BS as u32, 2);
    o2.mtime = Some(1_234_567_890);
    let a = work.path().join("t1.sqfs");
    let b = work.path().join("t2.sqfs");
    pack_squashfs(&src, &a, &o1).unwrap();
    pack_squashfs(&src, &b, &o2).unwrap();
    assert!(
        fs::read(&a).unwrap() == fs::read(&b).unwrap(),
        "threads 1 and 2 gave different images"
    );
}

/// A smaller tree with the data-path edge cases, for the codec/block-size matrix.
fn build_small_tree(src: &Path) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (i, n) in [
        0usize,
        1,
        4095,
        4096,
        4097,
        65536,
        300_000,
        1 << 20,
        (1 << 20) + 1,
    ]
    .into_iter()
    .enumerate()
    {
        let mut d = text(n / 2, i);
        d.extend(random(&mut rng, n - n / 2));
        write(&src.join(format!("f{n}")), &d);
    }
    // Incompressible tails (a raw block of their own at 128 KiB blocks).
    write(&src.join("noise-17000"), &random(&mut rng, 17_000));
    write(&src.join("noise-tail"), &random(&mut rng, 131_072 + 20_000));
    write(&src.join("same-a"), &text(500_000, 1));
    write(&src.join("sub/same-b"), &text(500_000, 1));
    write(&src.join("sub/zeros"), &vec![0u8; 3 << 20]);
    let mut f = File::create(src.join("sparse")).unwrap();
    f.set_len(4 << 20).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(&random(&mut rng, 10_000)).unwrap();
    std::os::unix::fs::symlink("f1", src.join("sub/link")).unwrap();
    for i in 0..600 {
        write(
            &src.join(format!("many/{i:04}")),
            format!("file {i}\n").as_bytes(),
        );
    }
}

#[test]
fn every_codec_and_extreme_block_sizes_mount() {
    let work = scratch();
    let src = work.path().join("src");
    build_small_tree(&src);
    let cases = [
        (Compressor::Gzip, 131072),
        (Compressor::Xz, 131072),
        (Compressor::Lz4, 131072),
        (Compressor::Zstd, 131072),
        (Compressor::Zstd, 4096),
        (Compressor::Gzip, 1 << 20),
        (Compressor::Lz4, 4096),
    ];
    for (i, (c, bs)) in cases.into_iter().enumerate() {
        let what = format!("{}-{bs}", c.name());
        let img = work.path().join(format!("{i}.sqfs"));
        let mut o = opts(c, bs, 2);
        o.no_fragments = i == 6;
        pack_squashfs(&src, &img, &o).unwrap_or_else(|e| panic!("{what}: {e}"));
        run(Command::new("unsquashfs").arg("-s").arg(&img));
        check_with_kernel(&img, &src, false, &what);
    }
    // Check at least one codec through unsquashfs extraction too.
    check_with_unsquashfs(&work.path().join("1.sqfs"), &src, work.path(), false, "xz");
    // xz beyond its levels: the extreme preset, and lc/lp/pb at the edges
    // of what the kernel's decoder takes (lc + lp = 4); each image the same
    // bytes again on another thread count.
    let tunings = [
        (
            "9e-lc4-lp0-pb0-1M",
            9,
            1 << 20,
            XzOptions {
                extreme: true,
                lc: Some(4),
                lp: Some(0),
                pb: Some(0),
                ..Default::default()
            },
        ),
        (
            "1-lc0-lp4-pb4-nice273-depth8",
            1,
            131072,
            XzOptions {
                lc: Some(0),
                lp: Some(4),
                pb: Some(4),
                nice_len: Some(273),
                depth: Some(8),
                ..Default::default()
            },
        ),
    ];
    for (what, level, bs, xz) in tunings {
        let img = work.path().join(format!("xz-{what}.sqfs"));
        let mut o = opts(Compressor::Xz, bs, 2);
        (o.level, o.xz) = (Some(level), xz);
        pack_squashfs(&src, &img, &o).unwrap_or_else(|e| panic!("xz {what}: {e}"));
        // With a fixed image time, the same bytes on any thread count.
        let packed = |threads| {
            let img = work.path().join(format!("xz-{what}-j{threads}.sqfs"));
            let o = PackOptions {
                threads,
                mtime: Some(0),
                ..opts(Compressor::Xz, bs, threads)
            };
            let o = PackOptions {
                level: Some(level),
                xz,
                ..o
            };
            pack_squashfs(&src, &img, &o).unwrap_or_else(|e| panic!("xz {what}: {e}"));
            fs::read(&img).unwrap()
        };
        assert!(
            packed(1) == packed(2),
            "xz {what}: -j 1 and -j 2 gave other bytes"
        );
        check_with_unsquashfs(&img, &src, work.path(), false, &format!("xz-{what}"));
        check_with_kernel(&img, &src, false, &format!("xz-{what}"));
    }
    // Settings the kernel's decoder would refuse are refused.
    let mut o = opts(Compressor::Xz, 131072, 2);
    o.xz.lc = Some(4);
    o.xz.lp = Some(1);
    let err = pack_squashfs(&src, &work.path().join("bad.sqfs"), &o).unwrap_err();
    assert!(err.to_string().contains("lc + lp"), "{err}");
}

#[test]
fn options_exclude_all_root_and_mtime() {
    let work = scratch();
    let src = work.path().join("src");
    write(&src.join("keep.txt"), b"keep");
    write(&src.join("skip.log"), b"skip");
    write(&src.join("cache/big"), b"skip");
    write(&src.join("sub/also.log"), b"skip");
    let img = work.path().join("o.sqfs");
    let o = PackOptions {
        excludes: vec!["*.log".into(), "cache".into()],
        all_root: true,
        mtime: Some(1_000_000),
        ..Default::default()
    };
    let s = pack_squashfs(&src, &img, &o).unwrap();
    assert_eq!(s.entries, 3, "{s:?}"); // root, keep.txt, sub
    let list = run(Command::new("unsquashfs").arg("-lln").arg(&img));
    assert!(
        list.contains("keep.txt") && !list.contains(".log") && !list.contains("cache"),
        "{list}"
    );
    assert!(list.contains("0/0"), "{list}");
    assert!(list.contains("1970-01-12"), "{list}");
}

#[test]
fn bad_input_is_reported_and_leaves_nothing_behind() {
    let work = scratch();
    let src = work.path().join("src");
    write(&src.join("a"), b"a");
    let o = PackOptions::default();

    let missing = work.path().join("no-such-dir/out.sqfs");
    let e = pack_squashfs(&src, &missing, &o).unwrap_err();
    assert!(matches!(e, PackError::OutputDirMissing { .. }), "{e}");
    assert!(e.to_string().contains("no-such-dir"), "{e}");
    assert!(!work.path().join("no-such-dir").exists());

    let exists = work.path().join("exists.sqfs");
    fs::write(&exists, b"old").unwrap();
    let e = pack_squashfs(&src, &exists, &o).unwrap_err();
    assert!(matches!(e, PackError::OutputExists { .. }), "{e}");
    assert_eq!(fs::read(&exists).unwrap(), b"old");
    let forced = PackOptions {
        force: true,
        ..Default::default()
    };
    pack_squashfs(&src, &exists, &forced).unwrap();
    assert_eq!(&fs::read(&exists).unwrap()[..4], b"hsqs");

    let e = pack_squashfs(&src, &src.join("inside.sqfs"), &o).unwrap_err();
    assert!(matches!(e, PackError::OutputInsideSource { .. }), "{e}");
    let e = pack_squashfs(&src, &src.join("sub/../x.sqfs"), &o).unwrap_err();
    assert!(
        matches!(
            e,
            PackError::OutputInsideSource { .. } | PackError::OutputDirMissing { .. }
        ),
        "{e}"
    );

    let e = pack_squashfs(&src.join("a"), &work.path().join("f.sqfs"), &o).unwrap_err();
    assert!(matches!(e, PackError::NotADirectory { .. }), "{e}");

    let e = pack_squashfs(&work.path().join("nope"), &work.path().join("f.sqfs"), &o).unwrap_err();
    assert!(
        matches!(e, PackError::Io { .. }) && e.to_string().contains("nope"),
        "{e}"
    );

    let bad = PackOptions {
        block_size: 5000,
        ..Default::default()
    };
    assert!(matches!(
        pack_squashfs(&src, &work.path().join("b.sqfs"), &bad),
        Err(PackError::InvalidOption(_))
    ));

    // A file that grows after the scan: Progress::start runs between the
    // walk and the data pass, so append there.
    struct Grow(PathBuf);
    impl packer::Progress for Grow {
        fn start(&self, _: u64, _: u64) {
            let mut f = fs::OpenOptions::new().append(true).open(&self.0).unwrap();
            f.write_all(b"more").unwrap();
        }
        fn advance(&self, _: u64) {}
        fn finish(&self) {}
    }
    let grow_dir = work.path().join("grow-out");
    fs::create_dir(&grow_dir).unwrap();
    let grow = PackOptions {
        progress: Some(Arc::new(Grow(src.join("a")))),
        ..Default::default()
    };
    let e = pack_squashfs(&src, &grow_dir.join("g.sqfs"), &grow).unwrap_err();
    assert!(
        matches!(&e, PackError::FileChanged { path, .. } if path.ends_with("a")),
        "{e}"
    );
    assert_eq!(
        fs::read_dir(&grow_dir).unwrap().count(),
        0,
        "temp file left behind"
    );

    let outdir = work.path().join("outdir");
    fs::create_dir(&outdir).unwrap();
    let cancel = PackOptions {
        cancel: Some(Arc::new(AtomicBool::new(true))),
        ..Default::default()
    };
    let e = pack_squashfs(&src, &outdir.join("c.sqfs"), &cancel).unwrap_err();
    assert!(matches!(e, PackError::Interrupted), "{e}");
    assert_eq!(
        fs::read_dir(&outdir).unwrap().count(),
        0,
        "output dir not empty after cancel"
    );
}

/// The image's mode follows the umask, as any new file's (it was always
/// 0644: a private tree packed under umask 077 came out world-readable);
/// `--force` keeps the mode and owner of the image it replaces; a device,
/// fifo or socket (or a link to one) is refused, not replaced by a regular
/// file; an output name of up to 255 bytes works (its temporary file's name
/// was 12 bytes longer).
#[test]
fn the_output_gets_a_files_mode_and_must_be_a_regular_file() {
    let work = scratch();
    let src = work.path().join("src");
    write(&src.join("a"), b"secret");
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;

    let private = work.path().join("private.sqfs");
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec \"$0\" pack -q -o \"$1\" \"$2\"")
        .arg(crate::common::packfs_bin())
        .arg(&private)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&private), 0o600);

    let forced = PackOptions {
        force: true,
        ..Default::default()
    };
    let old = work.path().join("old.sqfs");
    fs::write(&old, b"old").unwrap();
    fs::set_permissions(&old, fs::Permissions::from_mode(0o640)).unwrap();
    // As root, another user's image stays theirs.
    let other = is_root() && lchown(&old, 4321, 4322);
    pack_squashfs(&src, &old, &forced).unwrap();
    assert_eq!(mode(&old), 0o640);
    if other {
        let m = fs::metadata(&old).unwrap();
        assert_eq!((m.uid(), m.gid()), (4321, 4322));
    }

    let fifo = work.path().join("fifo");
    assert!(mknod(&fifo, libc::S_IFIFO | 0o644, 0, 0));
    let link = work.path().join("link-to-fifo");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    for p in [&fifo, &link] {
        let e = pack_squashfs(&src, p, &forced).unwrap_err();
        assert!(e.to_string().contains("output is a fifo"), "{e}");
    }
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());

    let long = work.path().join(format!("{}.sqfs", "o".repeat(250)));
    pack_squashfs(&src, &long, &PackOptions::default()).unwrap();
    assert_eq!(&fs::read(&long).unwrap()[..4], b"hsqs");
}

/// An output directory that reaches into the source by another path (a
/// bind mount of it) put the image's own temporary file into the image:
/// the check on paths cannot see it, so the walk leaves the file out by
/// its inode.
#[test]
fn the_image_being_written_is_left_out_when_a_bind_mount_shows_it() {
    if !require_root("bind mounts") {
        return;
    }
    let work = scratch();
    let src = work.path().join("src");
    write(&src.join("a"), b"a");
    let bind = work.path().join("bind");
    fs::create_dir(&bind).unwrap();
    run(Command::new("mount").arg("--bind").arg(&src).arg(&bind));
    let img = bind.join("x.sqfs");
    let packed = pack_squashfs(&src, &img, &PackOptions::default());
    let copy = work.path().join("x.sqfs");
    if packed.is_ok() {
        fs::copy(&img, &copy).unwrap();
    }
    run(Command::new("umount").arg(&bind));
    packed.unwrap();
    let listing = run(Command::new("unsquashfs")
        .args(["-lc", "-d", ""])
        .arg(&copy));
    let names: Vec<&str> = listing.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(names, ["/a"], "{listing}");
}

/// SquashFS holds at most 65,535 distinct uids and gids together (the id
/// count is 16 bits). One more is a clear error naming the file that would
/// need it, before any data is written, and nothing under the output name.
#[test]
fn more_ids_than_squashfs_holds_is_an_error_naming_the_file() {
    if !require_root("chown to arbitrary ids") {
        return;
    }
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    // 32,768 files, each with its own uid and gid: 65,536 ids.
    for i in 0..32_768u32 {
        let p = src.join(format!("{i:05}"));
        File::create(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(200_000 + 2 * i), Some(200_001 + 2 * i)).unwrap();
    }
    let out = work.path().join("ids.sqfs");
    let e = pack_squashfs(&src, &out, &PackOptions::default()).unwrap_err();
    assert!(
        matches!(&e, PackError::TooManyIds { path } if path.ends_with("32767")),
        "{e}"
    );
    assert!(e.to_string().contains("65535"), "{e}");
    assert!(!out.exists());
    assert_eq!(
        fs::read_dir(work.path()).unwrap().count(),
        1,
        "temp file left"
    );

    // One file fewer fits exactly (65,534 ids + root's 0), and the kernel
    // reads every owner back.
    fs::remove_file(src.join("32767")).unwrap();
    pack_squashfs(&src, &out, &PackOptions::default()).unwrap();
    let listing = String::from_utf8(
        Command::new("unsquashfs")
            .args(["-lln", "-no-progress"])
            .arg(&out)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        listing.contains("265532/265533"),
        "{}",
        &listing[..500.min(listing.len())]
    );
}
