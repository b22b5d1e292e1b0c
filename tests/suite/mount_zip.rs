//! The ZIP reader, proven against unzip: archives made by Info-ZIP zip,
//! Python's zipfile and bsdtar are read by packfs (through the filesystem
//! core directly, and through `packfs mount`) and compared entry by entry
//! with what `unzip -K -X` extracts (type, mode, owner, size, mtime, nlink,
//! symlink target, content). Where unzip lacks a method (LZMA), Python's
//! extractall is the content reference.

use crate::common::*;
use mountfs::cache::BlockCache;
use mountfs::fs::{FileKind, PackFs, ROOT};
use mountfs::readahead::StreamReadahead;
use mountfs::source::FileSource;
use mountfs::zip::ZipFs;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// What a ZIP can keep of a tree: files, directories, symlinks, modes,
/// mtimes (2-second DOS granularity: all times here are even).
fn zip_tree(root: &Path) {
    let w = |p: &str, d: &[u8]| {
        let p = root.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, d).unwrap();
    };
    w("empty", b"");
    w("small.txt", b"hello, packfs\n");
    for (i, n) in [1usize, 4097, 131073, 1_048_575, 1_048_577, 3_000_001]
        .into_iter()
        .enumerate()
    {
        w(&format!("d/text{n}"), &bytes(i as u64, n, true));
        w(&format!("d/rand{n}"), &bytes(100 + i as u64, n, false));
    }
    w("d/e/f/ünïcødé-名前.txt", b"unicode");
    w(&format!("d/e/f/{}", "n".repeat(255)), b"long name");
    w("d/e/f/with space", b"space");
    std::os::unix::fs::symlink("small.txt", root.join("rel_link")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("abs_link")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", root.join("d/dangling")).unwrap();
    w("suid", b"#!/bin/sh\n");
    w("private", b"secret");
    w("exec", b"#!/bin/sh\n");
    std::fs::create_dir(root.join("sticky")).unwrap();
    std::fs::create_dir(root.join("emptydir")).unwrap();
    let mut deep = root.join("deep");
    for i in 0..30 {
        deep = deep.join(format!("l{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"deep").unwrap();
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode("suid", 0o4755);
    mode("private", 0o600);
    mode("exec", 0o750);
    mode("sticky", 0o1777);
    // Fixed, even times everywhere (DOS keeps 2 s); an old and a future one.
    let mut all = vec![root.to_path_buf()];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p.clone());
            }
            all.push(p);
        }
    }
    for p in &all {
        set_mtime(p, 1_600_000_000);
    }
    set_mtime(&root.join("small.txt"), 1); // before 1980: zip clamps
    set_mtime(&root.join("d/text1"), 4_000_000_000); // after 2038
}

fn open_zip(p: &Path) -> PackFs<ZipFs> {
    let z = ZipFs::open(
        Box::new(StreamReadahead::new(FileSource::open(p).unwrap())),
        Arc::new(BlockCache::new(8 << 20)),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    PackFs::new(z, 0, 0)
}

/// The tree as the filesystem core shows it, in `manifest` form.
fn core_manifest(img: &Path) -> BTreeMap<PathBuf, Entry> {
    let fs = open_zip(img);
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT, PathBuf::new())];
    while let Some((dir, path)) = stack.pop() {
        for e in fs.list(dir).unwrap() {
            let rel = path.join(std::ffi::OsStr::from_bytes(&e.name));
            let a = fs.getattr(e.node).unwrap();
            assert_eq!(a.kind, e.kind);
            let (kind, bits) = match a.kind {
                FileKind::Dir => ("dir", libc::S_IFDIR),
                FileKind::File => ("file", libc::S_IFREG),
                FileKind::Symlink => ("symlink", libc::S_IFLNK),
                k => panic!("{k:?} in a zip"),
            };
            let hash = (a.kind == FileKind::File).then(|| {
                let mut h = blake3::Hasher::new();
                let n = fs
                    .read_all(a.node, |b| {
                        h.update(b);
                        Ok(())
                    })
                    .unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
                assert_eq!(n, a.size);
                h.finalize()
            });
            let target = (a.kind == FileKind::Symlink)
                .then(|| PathBuf::from(String::from_utf8(fs.readlink(a.node).unwrap()).unwrap()));
            if a.kind == FileKind::Dir {
                stack.push((a.node, rel.clone()));
            }
            out.insert(
                rel.clone(),
                Entry {
                    kind,
                    mode: bits | a.perm as u32,
                    uid: a.uid,
                    gid: a.gid,
                    size: if a.kind == FileKind::Dir { 0 } else { a.size },
                    mtime: a.mtime,
                    nlink: a.nlink as u64,
                    link_group: rel,
                    target,
                    rdev: 0,
                    xattrs: BTreeMap::new(),
                    hash,
                    blocks: 0,
                },
            );
        }
    }
    out
}

fn opts() -> ManifestOptions {
    ManifestOptions {
        nlink: true,
        xattrs: false,
        dir_size: false,
        owners: true,
        blocks: false,
    }
}

/// unzip 6.0 does not restore symlink times (they get the extraction
/// time), so symlink mtimes are left out of every comparison.
fn no_link_times(mut m: BTreeMap<PathBuf, Entry>) -> BTreeMap<PathBuf, Entry> {
    for e in m.values_mut() {
        if e.kind == "symlink" {
            e.mtime = 0;
        }
    }
    m
}

fn unzip_manifest(img: &Path, t: &Path) -> BTreeMap<PathBuf, Entry> {
    let out = t.join(format!("x-{}", img.file_name().unwrap().to_string_lossy()));
    run(Command::new("unzip")
        .args(["-q", "-K", "-X", "-d"])
        .arg(&out)
        .arg(img));
    no_link_times(manifest(&out, &opts()))
}

/// Core vs unzip, and mount vs unzip.
fn differential(img: &Path, t: &Path) {
    differential_synth(img, t, &[]);
}

/// As [`differential`] for archives with directories that have no entry of
/// their own (`synth`): unzip gives those the extraction time, packfs the
/// newest child's, so their mtimes are not compared.
fn differential_synth(img: &Path, t: &Path, synth: &[&str]) {
    let strip = |mut m: BTreeMap<PathBuf, Entry>| {
        for d in synth {
            m.get_mut(Path::new(d))
                .unwrap_or_else(|| panic!("no {d}"))
                .mtime = 0;
        }
        no_link_times(m)
    };
    let want = strip(unzip_manifest(img, t));
    assert_same(
        &format!("core vs unzip for {}", img.display()),
        &strip(core_manifest(img)),
        &want,
    );
    let m = PackfsMount::new(img, &[]);
    assert_same(
        &format!("packfs mount vs unzip for {}", img.display()),
        &strip(manifest(m.path(), &opts())),
        &want,
    );
}

fn python(script: &str, args: &[&Path]) {
    run(Command::new("python3").arg("-c").arg(script).args(args));
}

/// Python zipfile writer: walks the tree, symlinks as S_IFLNK entries.
const PY_WRITE: &str = r#"
import os, sys, stat, time, zipfile
src, out, method = sys.argv[1], sys.argv[2], int(sys.argv[3])
with zipfile.ZipFile(out, 'w', compression=method, strict_timestamps=False) as z:
    for dp, dns, fns in os.walk(src):
        dns.sort()
        for n in sorted(dns) + sorted(fns):
            p = os.path.join(dp, n)
            arc = os.path.relpath(p, src)
            if os.path.islink(p):
                zi = zipfile.ZipInfo(arc, max(time.localtime(os.lstat(p).st_mtime)[:6], (1980, 1, 1, 0, 0, 0)))
                zi.external_attr = (stat.S_IFLNK | 0o777) << 16
                zi.create_system = 3
                z.writestr(zi, os.readlink(p))
            else:
                z.write(p, arc)
"#;

#[test]
fn info_zip_archives_match_unzip() {
    let t = scratch();
    let src = t.path().join("src");
    zip_tree(&src);
    for (name, args) in [
        ("deflate", &["-r", "-X", "-y"][..]),
        ("stored", &["-r", "-X", "-y", "-0"]),
        ("extras", &["-r", "-y"]),
    ] {
        let img = t.path().join(format!("{name}.zip"));
        run(Command::new("zip")
            .args(["-q"])
            .args(args)
            .arg(&img)
            .arg(".")
            .current_dir(&src));
        differential(&img, t.path());
    }
}

// Regression: a name that is not UTF-8 from a Unix host was shown as CP437
// ("caf\xe9" as "cafΘ"), so packfs's own ZIP of such a tree read back
// under other names, and Info-ZIP's did not match unzip, which keeps a
// Unix host's bytes.
#[test]
fn non_utf8_names_from_a_unix_host_keep_their_bytes() {
    let t = scratch();
    let src = t.path().join("src");
    let name = |b: &[u8]| src.join(std::ffi::OsStr::from_bytes(b));
    std::fs::create_dir_all(name(b"d\xe4\xfe")).unwrap();
    std::fs::write(name(b"caf\xe9"), b"latin-1 name").unwrap();
    std::fs::write(name(b"d\xe4\xfe/\x80x"), b"under a latin-1 dir").unwrap();
    std::fs::write(src.join("plain"), b"ascii").unwrap();
    // (No 0xff byte: unzip drops it from names.)
    let names = |m: BTreeMap<PathBuf, Entry>| m.into_keys().collect::<Vec<_>>();
    let want = names(manifest(&src, &opts()));

    let ours = t.path().join("packfs.zip");
    pack(&src, &ours, &[]);
    assert_eq!(names(core_manifest(&ours)), want, "packfs pack, read back");
    let m = PackfsMount::new(&ours, &[]);
    assert_eq!(
        names(manifest(m.path(), &opts())),
        want,
        "packfs pack, mounted"
    );
    drop(m);

    let info = t.path().join("info-zip.zip");
    run(Command::new("zip")
        .args(["-q", "-r", "-X", "-y"])
        .arg(&info)
        .arg(".")
        .current_dir(&src));
    assert_eq!(names(core_manifest(&info)), want, "zip -r, read back");
    differential(&info, t.path());
}

/// A large stored member whose bytes do not match its CRC-32 is EIO
/// through the mount, `packfs cat` and `packfs extract` (which leaves no
/// partial file), as `unzip -t` reports it: its damaged bytes were served
/// with no error.
/// Copies of a 3,000,000-byte stored member, written by packfs and by
/// Info-ZIP, each with one bit flipped at the start, the middle or the end
/// of the member's data: (writer, where, image).
fn damaged_stored_members(dir: &Path) -> Vec<(&'static str, &'static str, PathBuf)> {
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    // Random bytes: packfs stores them, and Info-ZIP with -0.
    let content = bytes(5, 3_000_000, false);
    std::fs::write(src.join("photo.jpg"), &content).unwrap();
    let ours = dir.join("packfs.zip");
    pack(&src, &ours, &[]);
    let info = dir.join("info-zip.zip");
    run(Command::new("zip")
        .args(["-q", "-0", "-X"])
        .arg(&info)
        .arg("photo.jpg")
        .current_dir(&src));
    let mut out = Vec::new();
    for (writer, img) in [("packfs", &ours), ("info-zip", &info)] {
        let b = std::fs::read(img).unwrap();
        // The member's data is its content, stored: find where it starts.
        let start = b
            .windows(64)
            .position(|w| w == &content[..64])
            .expect("the stored member's bytes are in the archive");
        for (at, off) in [
            ("start", 0),
            ("middle", content.len() / 2),
            ("end", content.len() - 1),
        ] {
            let mut d = b.clone();
            d[start + off] ^= 1;
            let p = dir.join(format!("{writer}-{at}.zip"));
            std::fs::write(&p, &d).unwrap();
            out.push((writer, at, p));
        }
    }
    out
}

/// A whole read of a damaged large stored member fails with EIO however the
/// kernel orders, splits and spreads the reads among serving threads: 50
/// fresh mounts (so that nothing is in the page cache), each read whole by
/// three readers at once. Its CRC-32 was once checked only over reads in
/// order from offset 0, which readahead and several threads seldom give, so
/// the damage was served. scripts/uring_tests.sh runs this again with the
/// io_uring transport.
#[test]
fn a_damaged_large_stored_member_read_whole_through_the_mount_is_eio_every_time() {
    let t = scratch();
    let images = damaged_stored_members(t.path());
    for round in 0..50 {
        let (writer, at, img) = &images[round % images.len()];
        let m = PackfsMount::new(img, &[]);
        let file = m.path().join("photo.jpg");
        let results: Vec<std::io::Result<Vec<u8>>> = std::thread::scope(|s| {
            let readers: Vec<_> = (0..3).map(|_| s.spawn(|| std::fs::read(&file))).collect();
            readers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(d) => panic!(
                    "round {round}, {writer} damaged at the {at}: reader {k} read {} bytes, no error",
                    d.len()
                ),
                Err(e) => assert_eq!(
                    e.raw_os_error(),
                    Some(libc::EIO),
                    "round {round}, {writer} damaged at the {at}, reader {k}: {e}"
                ),
            }
        }
    }
}

/// `cat` and `extract` fail on a damaged large stored member, wherever the
/// damage is, and `extract` leaves no partial file; unzip agrees.
#[test]
fn a_damaged_large_stored_member_is_an_error_for_cat_and_extract() {
    let t = scratch();
    for (writer, at, img) in damaged_stored_members(t.path()) {
        let what = format!("{writer} damaged at the {at}");
        let out = Command::new("unzip").arg("-tq").arg(&img).output().unwrap();
        assert!(!out.status.success(), "unzip -t accepts {what}");
        let out = Command::new(packfs_bin())
            .arg("cat")
            .arg(&img)
            .arg("photo.jpg")
            .output()
            .unwrap();
        assert!(!out.status.success(), "cat of {what}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("CRC-32 mismatch"), "{what}: {stderr}");
        let dest = t.path().join("out");
        let out = Command::new(packfs_bin())
            .arg("extract")
            .arg(&img)
            .arg("-o")
            .arg(&dest)
            .output()
            .unwrap();
        assert!(!out.status.success(), "extract of {what}");
        assert!(
            !dest.join("photo.jpg").exists(),
            "{what}: a partial file is left"
        );
        let _ = std::fs::remove_dir_all(&dest);
    }
}

/// Through the filesystem core, a damaged large stored member read in
/// pieces backwards, or in pieces by several handles, fails on the read
/// that completes it and on every read after; an undamaged one is served
/// whole in any order.
#[test]
fn a_large_stored_member_is_checked_over_reads_in_any_order_and_handles() {
    use mountfs::image::Image as _;
    let t = scratch();
    let images = damaged_stored_members(t.path());
    let open = |p: &Path| {
        let src = FileSource::open(p).unwrap();
        ZipFs::open(Box::new(src), Arc::new(BlockCache::new(8 << 20))).unwrap()
    };
    for (writer, at, img) in &images {
        let fs = open(img);
        let a = fs.lookup(ROOT, b"photo.jpg").unwrap();
        let h1 = fs.open(a.node).unwrap();
        let h2 = fs.open(a.node).unwrap();
        // 64 KiB pieces from the end backwards, alternating handles.
        let piece = 65_536u64;
        let mut failed_at = None;
        let mut off = (a.size / piece) * piece;
        loop {
            let h = if (off / piece).is_multiple_of(2) {
                &h1
            } else {
                &h2
            };
            if let Err(e) = fs.read(h, off, piece as u32) {
                assert_eq!(e.errno(), libc::EIO, "{writer}, {at}: {e}");
                failed_at = Some(off);
                break;
            }
            if off == 0 {
                break;
            }
            off -= piece;
        }
        assert_eq!(
            failed_at,
            Some(0),
            "{writer} damaged at the {at}: the completing read did not fail"
        );
        let e = fs.read(&h1, a.size / 2, 4096).unwrap_err();
        assert_eq!(
            e.errno(),
            libc::EIO,
            "{writer}, {at}: a later read is served"
        );
    }
    // The same member undamaged: served whole, out of order, every time.
    let good = t.path().join("good.zip");
    pack(&t.path().join("src"), &good, &[]);
    let fs = open(&good);
    let a = fs.lookup(ROOT, b"photo.jpg").unwrap();
    let h = fs.open(a.node).unwrap();
    let mut got = vec![0u8; a.size as usize];
    let offsets: Vec<u64> = (0..a.size).step_by(100_000).collect();
    for &off in offsets.iter().rev() {
        let d = fs.read(&h, off, 100_000).unwrap();
        got[off as usize..off as usize + d.len()].copy_from_slice(&d);
    }
    assert_eq!(got, bytes(5, 3_000_000, false));
    fs.read(&h, 0, 4096).unwrap();
}

#[test]
fn bsdtar_archives_match_unzip() {
    let t = scratch();
    let src = t.path().join("src");
    zip_tree(&src);
    let img = t.path().join("bsdtar.zip");
    run(Command::new("bsdtar")
        .args(["-a", "-cf"])
        .arg(&img)
        .arg(".")
        .current_dir(&src));
    differential(&img, t.path());
}

#[test]
fn python_archives_match_unzip() {
    let t = scratch();
    let src = t.path().join("src");
    zip_tree(&src);
    // 0 stored, 8 deflate, 12 bzip2 (unzip reads these)
    for method in ["0", "8", "12"] {
        let img = t.path().join(format!("py{method}.zip"));
        run(Command::new("python3")
            .arg("-c")
            .arg(PY_WRITE)
            .arg(&src)
            .arg(&img)
            .arg(method));
        differential(&img, t.path());
    }
}

/// Deflate64 (method 9) as 7-Zip writes it: core and mount vs unzip
/// (Info-ZIP unzip 6.0 reads Deflate64), contents also vs `7z x`. The tree
/// gets a member whose only redundancy is at distances of 48 KiB, which
/// deflate's 32 KiB window cannot reach but Deflate64's 64 KiB one can, so
/// the long-distance path of the decoder is exercised, and random reads with
/// a tiny cache exercise its restarts.
#[test]
fn seven_zip_deflate64_archives_match_unzip_and_7z() {
    if !require_tool("7z") {
        return;
    }
    let t = scratch();
    let src = t.path().join("src");
    zip_tree(&src);
    let block = bytes(7, 48 << 10, false);
    let far: Vec<u8> = block
        .iter()
        .cycle()
        .take(41 * block.len())
        .copied()
        .collect();
    std::fs::write(src.join("d/far64"), &far).unwrap();
    set_mtime(&src.join("d/far64"), 1_600_000_000);
    set_mtime(&src.join("d"), 1_600_000_000);
    let img = t.path().join("deflate64.zip");
    run(Command::new("7z")
        .args(["a", "-tzip", "-mm=Deflate64", "-bd", "-bso0", "-bsp0"])
        .arg(&img)
        .arg(".")
        .current_dir(&src));
    // Python's zipfile lists Deflate64 members (it cannot read them).
    let listing = run(Command::new("python3")
        .arg("-c")
        .arg("import sys, zipfile\nfor i in zipfile.ZipFile(sys.argv[1]).infolist(): print(i.compress_type, i.compress_size, i.filename)")
        .arg(&img));
    let members: BTreeMap<String, (u16, u64)> = listing
        .lines()
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            let m = f.next().unwrap().parse().unwrap();
            let c = f.next().unwrap().parse().unwrap();
            (f.next().unwrap().to_string(), (m, c))
        })
        .collect();
    let (method, csize) = members["d/far64"];
    assert_eq!(method, 9, "{listing}");
    assert!(
        csize < far.len() as u64 / 10,
        "48 KiB distances unused: {csize}"
    );
    assert_eq!(members["d/text3000001"].0, 9, "{listing}");

    differential(&img, t.path());

    // 7-Zip's own extraction agrees on every file's content.
    let x = t.path().join("7z-x");
    run(Command::new("7z")
        .args(["x", "-bd", "-bso0", "-bsp0"])
        .arg(format!("-o{}", x.display()))
        .arg(&img));
    let hashes = |m: BTreeMap<PathBuf, Entry>| -> BTreeMap<PathBuf, blake3::Hash> {
        m.into_iter()
            .filter_map(|(p, e)| e.hash.map(|h| (p, h)))
            .collect()
    };
    let want = hashes(manifest(&x, &opts()));
    assert!(want.len() > 10);
    assert_eq!(hashes(core_manifest(&img)), want);

    // Random reads with a 64 KiB cache: a Deflate64 decoder cannot resume
    // from a checkpoint, so backward reads restart it at the member start.
    let fs = PackFs::new(
        ZipFs::open(
            Box::new(StreamReadahead::new(FileSource::open(&img).unwrap())),
            Arc::new(BlockCache::new(64 << 10)),
        )
        .unwrap(),
        0,
        0,
    );
    for (name, data) in [
        ("d/far64", far.clone()),
        (
            "d/text3000001",
            std::fs::read(src.join("d/text3000001")).unwrap(),
        ),
    ] {
        let node = fs.resolve(name.as_bytes()).unwrap().node;
        let mut x = 3u64;
        for _ in 0..25 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 20) % data.len() as u64;
            let len = ((x >> 8) % 400_000) as u32;
            let got = fs.read(node, off, len).unwrap();
            let end = (off as usize + len as usize).min(data.len());
            assert_eq!(got, &data[off as usize..end], "{name} at {off}");
        }
    }
}

/// Python's extractall as the reference: contents only (it restores no
/// modes, times or links).
fn python_extract(img: &Path, t: &Path) -> BTreeMap<PathBuf, Option<blake3::Hash>> {
    let out = t.join(format!("py-{}", img.file_name().unwrap().to_string_lossy()));
    python(
        "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
        &[img, &out],
    );
    manifest(&out, &opts())
        .into_iter()
        .map(|(p, e)| (p, e.hash))
        .collect()
}

#[test]
fn python_lzma_matches_python_extraction() {
    let t = scratch();
    let src = t.path().join("src");
    zip_tree(&src);
    let img = t.path().join("py14.zip");
    run(Command::new("python3")
        .arg("-c")
        .arg(PY_WRITE)
        .arg(&src)
        .arg(&img)
        .arg("14"));
    let want = python_extract(&img, t.path());
    let got: BTreeMap<_, _> = core_manifest(&img)
        .into_iter()
        .filter(|(_, e)| e.kind != "symlink")
        .map(|(p, e)| (p, e.hash))
        .collect();
    let want: BTreeMap<_, _> = want
        .into_iter()
        .filter(|(p, _)| got.contains_key(p))
        .collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let m = PackfsMount::new(&img, &[]);
    for (p, h) in &got {
        if let Some(h) = h {
            let data = std::fs::read(m.path().join(p)).unwrap();
            assert_eq!(blake3::hash(&data), *h, "{}", p.display());
        }
    }
}

#[test]
fn streamed_zip64_and_many_entries() {
    let t = scratch();
    let img = t.path().join("streamed.zip");
    // A non-seekable output forces data descriptors (flag bit 3); force_zip64
    // writes Zip64 extras; 70000 entries need the Zip64 end record.
    python(
        r#"
import sys, zipfile, io
class Pipe(io.RawIOBase):
    def __init__(s, f): s.f = f
    def writable(s): return True
    def seekable(s): return False
    def write(s, b): return s.f.write(b)
    def flush(s): s.f.flush()
with open(sys.argv[1], 'wb') as f:
    with zipfile.ZipFile(Pipe(f), 'w', compression=zipfile.ZIP_DEFLATED) as z:
        for i in range(3):
            with z.open(f'streamed/{i}.txt', 'w') as w:
                w.write((f'line {i}\n' * (100000 * (i + 1))).encode())
        with z.open('z64.bin', 'w', force_zip64=True) as w:
            w.write(bytes(range(256)) * 5000)
        with z.open('dt/old.txt', 'w') as w:
            w.write(b'old')
with zipfile.ZipFile(sys.argv[2], 'w', compression=zipfile.ZIP_STORED) as z:
    for i in range(70000):
        z.writestr(f'many/{i // 1000:02d}/{i}', str(i))
"#,
        &[&img, &t.path().join("many.zip")],
    );
    differential_synth(&img, t.path(), &["streamed", "dt"]);
    let many = open_zip(&t.path().join("many.zip"));
    let info = many.image.info();
    assert_eq!((info.entries, info.files), (70000, 70000));
    assert!(info.zip64);
    let a = many.resolve(b"many/69/69999").unwrap();
    let mut got = Vec::new();
    many.read_all(a.node, |b| {
        got.extend_from_slice(b);
        Ok(())
    })
    .unwrap();
    assert_eq!(got, b"69999");
    assert_eq!(
        many.list(many.resolve(b"many/00").unwrap().node)
            .unwrap()
            .len(),
        1000
    );
}

#[test]
fn extreme_times_match_unzip() {
    // DOS time plus extended timestamp (0x5455) extras, including the cases
    // where unzip ignores the extended time (bit 31 set and the DOS date
    // before 2038) and where it reads it as unsigned (DOS date after 2038).
    let t = scratch();
    let img = t.path().join("times.zip");
    python(
        r#"
import sys, zipfile, struct
def ut(t): return struct.pack('<HHBI', 0x5455, 5, 1, t & 0xffffffff)
cases = [
    ('dos_only_1980', (1980, 1, 1, 0, 0, 0), b''),
    ('dos_only_2107', (2107, 12, 31, 23, 59, 58), b''),
    ('dos_2000_summer', (2000, 7, 1, 12, 30, 10), b''),
    ('ut_1970', (1980, 1, 1, 0, 0, 0), ut(1)),
    ('ut_1979', (1980, 1, 1, 0, 0, 0), ut(300000000)),
    ('ut_negative', (1980, 1, 1, 0, 0, 0), ut(-100000000)),
    ('ut_2096', (2096, 10, 2, 7, 6, 40), ut(4000000000)),
    ('ut_2096_dos_1980', (1980, 1, 1, 0, 0, 0), ut(4000000000)),
    ('ut_2038', (2038, 2, 1, 0, 0, 0), ut(2150000000)),
]
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for name, dt, extra in cases:
        zi = zipfile.ZipInfo(name, dt)
        zi.extra = extra
        zi.create_system = 3
        zi.external_attr = 0o100644 << 16
        z.writestr(zi, name)
"#,
        &[&img],
    );
    differential(&img, t.path());
}

#[test]
fn malicious_names_stay_inside() {
    let t = scratch();
    let img = t.path().join("evil.zip");
    python(
        r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for n in ['../evil', '/abs', 'a/../../b', '../../etc/passwd', './ok/./fine', 'dup', 'dup', 'x/../y']:
        zi = zipfile.ZipInfo(n, (2020, 1, 1, 0, 0, 0))
        zi.external_attr = 0o100644 << 16
        z.writestr(zi, n)
"#,
        &[&img],
    );
    let fs = open_zip(&img);
    let mut names: Vec<_> = fs
        .list(ROOT)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["abs", "dup", "ok"]);
    let m = PackfsMount::new(&img, &[]);
    let got = manifest(m.path(), &opts());
    let paths: Vec<_> = got.keys().map(|p| p.display().to_string()).collect();
    assert_eq!(paths, ["abs", "dup", "ok", "ok/fine"]);
    assert_eq!(std::fs::read(m.path().join("dup")).unwrap(), b"dup");
    assert!(!t.path().join("evil").exists());
}

#[test]
fn truncated_zip_fails_to_open_with_a_clear_error() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), bytes(1, 100_000, false)).unwrap();
    let img = t.path().join("full.zip");
    run(Command::new("zip")
        .args(["-q", "-r"])
        .arg(&img)
        .arg(".")
        .current_dir(&src));
    let data = std::fs::read(&img).unwrap();
    let cut = t.path().join("cut.zip");
    std::fs::write(&cut, &data[..data.len() / 2]).unwrap();
    let err = ZipFs::open(
        Box::new(StreamReadahead::new(FileSource::open(&cut).unwrap())),
        Arc::new(BlockCache::new(1 << 20)),
    )
    .err()
    .expect("truncated zip must not open");
    assert!(
        err.to_string().contains("end of central directory"),
        "{err}"
    );
    std::fs::create_dir(t.path().join("mnt")).unwrap();
    let out = Command::new(packfs_bin())
        .arg("mount")
        .arg(&cut)
        .arg(t.path().join("mnt"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("cut.zip"), "{msg}");
}
