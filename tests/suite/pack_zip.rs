//! End-to-end tests of the ZIP writer (`packer::pack_zip` and `packfs pack
//! -o x.zip`): archives are checked by readers nobody here wrote (Info-ZIP
//! unzip, Python's zipfile, bsdtar) and extracted with `unzip -K -X`, then
//! compared with the source tree entry by entry (type, mode, owner, size,
//! mtime, symlink target, content). zstd entries (method 93), which those
//! readers lack, are checked through `packfs mount`.

use crate::common::*;
use packer::{pack_zip, Compressor, PackError, PackOptions};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn deflate(threads: usize) -> PackOptions {
    PackOptions {
        compressor: Compressor::Gzip,
        level: None,
        threads,
        ..Default::default()
    }
}

fn zstd(threads: usize) -> PackOptions {
    PackOptions {
        compressor: Compressor::Zstd,
        level: Some(3),
        threads,
        ..Default::default()
    }
}

/// Files above the writer's streaming threshold (8 MiB): compressible text
/// (streamed in compressed segments), noise (stored at once by the entropy
/// test) and near-noise whose entropy passes that test but which zstd
/// cannot shrink (compressed, then rewritten stored).
fn add_big_files(root: &Path) {
    let big = root.join("big");
    fs::create_dir_all(&big).unwrap();
    fs::write(big.join("text"), bytes(11, 9_500_001, true)).unwrap();
    fs::write(big.join("noise"), bytes(12, 9 << 20, false)).unwrap();
    let near: Vec<u8> = bytes(13, 10 << 20, false)
        .into_iter()
        .map(|b| b % 245)
        .collect();
    fs::write(big.join("near-noise"), near).unwrap();
}

fn mopts() -> ManifestOptions {
    ManifestOptions {
        nlink: false,
        xattrs: false,
        dir_size: false,
        owners: true,
        blocks: false,
    }
}

/// What a ZIP keeps of a tree: no fifos, sockets or devices, hard links as
/// separate files, no xattrs; symlink times are not compared (unzip does
/// not restore them).
fn zip_view(mut m: BTreeMap<PathBuf, Entry>) -> BTreeMap<PathBuf, Entry> {
    m.retain(|_, e| matches!(e.kind, "file" | "dir" | "symlink"));
    for (p, e) in m.iter_mut() {
        e.link_group = p.clone();
        if e.kind != "dir" {
            e.nlink = 1;
        }
        if e.kind == "symlink" {
            e.mtime = 0;
        }
    }
    m
}

fn expected(src: &Path) -> BTreeMap<PathBuf, Entry> {
    zip_view(manifest(src, &mopts()))
}

fn unzip_extract(zip: &Path, dest: &Path) -> BTreeMap<PathBuf, Entry> {
    run(Command::new("unzip")
        .args(["-q", "-K", "-X", "-d"])
        .arg(dest)
        .arg(zip));
    zip_view(manifest(dest, &mopts()))
}

/// Python's zipfile: CRCs of every member (deflate/stored archives only),
/// Unix host, UTF-8 flag on non-ASCII names, directory and symlink modes.
/// Prints the member count.
const PY_CHECK: &str = r#"
import stat, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
if sys.argv[2] == "test":
    bad = z.testzip()
    assert bad is None, bad
for i in z.infolist():
    assert i.create_system == 3, i
    if not i.filename.isascii():
        assert i.flag_bits & 0x800, i
    mode = i.external_attr >> 16
    if i.filename.endswith("/"):
        assert stat.S_ISDIR(mode), i
    elif stat.S_ISLNK(mode):
        assert i.compress_type == 0, i
    else:
        assert stat.S_ISREG(mode), i
print(len(z.infolist()))
"#;

fn python_check(zip: &Path, test: bool) -> usize {
    let out = run(Command::new("python3")
        .arg("-c")
        .arg(PY_CHECK)
        .arg(zip)
        .arg(if test { "test" } else { "list" }));
    out.trim().parse().unwrap()
}

/// Method of each member, from Python.
fn methods(zip: &Path) -> BTreeMap<String, u16> {
    let out = run(Command::new("python3")
        .arg("-c")
        .arg("import sys, zipfile\nfor i in zipfile.ZipFile(sys.argv[1]).infolist(): print(i.compress_type, i.filename)")
        .arg(zip));
    out.lines()
        .map(|l| {
            let (m, n) = l.split_once(' ').unwrap();
            (n.to_string(), m.parse().unwrap())
        })
        .collect()
}

fn unzip_test(zip: &Path) {
    let out = run(Command::new("unzip").arg("-t").arg("-q").arg(zip));
    assert!(out.contains("No errors detected"), "{out}");
}

fn bsdtar_count(zip: &Path) -> usize {
    run(Command::new("bsdtar").arg("-tf").arg(zip))
        .lines()
        .count()
}

/// Whether the archive ends with Zip64 end records.
fn has_zip64_end(zip: &Path) -> bool {
    let b = fs::read(zip).unwrap();
    b.len() >= 42 && b[b.len() - 42..b.len() - 38] == [0x50, 0x4b, 0x06, 0x07]
}

#[test]
fn deflate_archive_round_trips_through_unzip_python_and_bsdtar() {
    let work = scratch();
    let src = work.path().join("src");
    fixture_tree(&src, true);
    add_big_files(&src);
    let zip = work.path().join("out.zip");
    let s = pack_zip(&src, &zip, &deflate(0)).unwrap();

    unzip_test(&zip);
    let want = expected(&src);
    let n = python_check(&zip, true);
    assert_eq!(n, want.len());
    assert_eq!(bsdtar_count(&zip), want.len());
    assert_eq!(s.entries as usize, want.len(), "{s:?}");
    assert_eq!(s.bytes_out, fs::metadata(&zip).unwrap().len());
    let file_bytes: u64 = want
        .values()
        .filter(|e| e.kind == "file")
        .map(|e| e.size)
        .sum();
    assert_eq!(s.bytes_in, file_bytes);
    assert_eq!((s.dedup_files, s.dedup_bytes), (0, 0));
    assert!(!has_zip64_end(&zip), "zip64 end records without need");

    let m = methods(&zip);
    assert_eq!(m["big/text"], 8, "streamed text is deflated");
    assert_eq!(m["big/noise"], 0, "noise is stored");
    assert_eq!(m["d/rand1048577"], 0, "noise is stored");
    assert_eq!(m["d/text1048577"], 8);
    assert_eq!(m["rel_link"], 0);
    assert!(!m.contains_key("fifo") && !m.contains_key("socket"));
    assert!(m.contains_key("d/e/f/"), "directories have entries");
    // Order: each directory before its contents, names sorted.
    let names: Vec<&String> = m.keys().collect();
    let order = run(Command::new("python3")
        .arg("-c")
        .arg("import sys, zipfile\nprint('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))")
        .arg(&zip));
    let order: Vec<&str> = order.lines().collect();
    assert_eq!(order.len(), names.len());
    for (i, n) in order.iter().enumerate() {
        if let Some((parent, _)) = n.trim_end_matches('/').rsplit_once('/') {
            let p = format!("{parent}/");
            let at = order.iter().position(|x| *x == p).unwrap();
            assert!(at < i, "{p} after {n}");
        }
    }
    assert!(order.windows(2).any(|w| w[0] == "d/" && w[1] == "d/e/"));

    let got = unzip_extract(&zip, &work.path().join("x"));
    assert_same("unzip -X extraction vs source", &got, &want);
}

#[test]
fn output_is_identical_for_any_thread_count() {
    let work = scratch();
    let src = work.path().join("src");
    fixture_tree(&src, false);
    add_big_files(&src);
    for (name, o1, o2) in [
        ("deflate", deflate(1), deflate(2)),
        ("zstd", zstd(1), zstd(2)),
    ] {
        let a = work.path().join(format!("{name}-1.zip"));
        let b = work.path().join(format!("{name}-2.zip"));
        pack_zip(&src, &a, &o1).unwrap();
        pack_zip(&src, &b, &o2).unwrap();
        assert!(
            fs::read(&a).unwrap() == fs::read(&b).unwrap(),
            "{name}: 1 and 2 threads differ"
        );
    }
}

#[test]
fn zstd_archive_reads_back_through_packfs_mount() {
    let work = scratch();
    let src = work.path().join("src");
    fixture_tree(&src, false);
    add_big_files(&src);
    let zip = work.path().join("z.zip");
    pack_zip(&src, &zip, &zstd(0)).unwrap();
    let want = expected(&src);
    assert_eq!(python_check(&zip, false), want.len());
    let m = methods(&zip);
    assert_eq!(m["big/text"], 93);
    assert_eq!(m["d/text4097"], 93);
    assert_eq!(m["big/noise"], 0);
    assert_eq!(m["big/near-noise"], 0, "zstd could not shrink it: stored");
    let mnt = PackfsMount::new(&zip, &[]);
    assert_same(
        "packfs mount of a zstd zip vs source",
        &zip_view(manifest(mnt.path(), &mopts())),
        &want,
    );
}

#[test]
fn level_0_stores_every_entry() {
    let work = scratch();
    let src = work.path().join("src");
    fixture_tree(&src, false);
    add_big_files(&src);
    let zip = work.path().join("stored.zip");
    let o = PackOptions {
        level: Some(0),
        ..deflate(0)
    };
    pack_zip(&src, &zip, &o).unwrap();
    unzip_test(&zip);
    assert!(methods(&zip).values().all(|&m| m == 0));
    let got = unzip_extract(&zip, &work.path().join("x"));
    assert_same("stored archive vs source", &got, &expected(&src));
}

#[test]
fn more_than_65535_entries_switch_zip64_on() {
    let work = scratch();
    let src = work.path().join("src");
    let (dirs, per_dir) = (66, 1000);
    for d in 0..dirs {
        let dir = src.join(format!("d{d:02}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            fs::write(dir.join(format!("{f:03}")), [b'a' + (f % 26) as u8]).unwrap();
        }
    }
    let zip = work.path().join("many.zip");
    let s = pack_zip(&src, &zip, &deflate(0)).unwrap();
    let n = dirs + dirs * per_dir;
    assert!(n > 65_535);
    assert_eq!(s.entries as usize, n);
    assert!(has_zip64_end(&zip), "no zip64 end records for {n} entries");
    unzip_test(&zip);
    assert_eq!(python_check(&zip, true), n);
    assert_eq!(bsdtar_count(&zip), n);
    // unzip finds the last entry through the zip64 records; extracting only
    // it (to stdout) keeps the test from writing 66k files again.
    let last = Command::new("unzip")
        .arg("-p")
        .arg(&zip)
        .arg("d65/999")
        .output()
        .unwrap();
    assert!(last.status.success(), "unzip -p: {last:?}");
    assert_eq!(last.stdout, b"l");
    // packfs's own reader: a ~5 MB central directory, read through its
    // 1 MiB window, gives every entry and the last one's bytes.
    let img = mountfs::open::AnyImage::open(&zip, 16 << 20).unwrap();
    let mountfs::open::AnyImage::Zip(z) = &img else {
        panic!("not read as a ZIP")
    };
    assert_eq!(z.info().entries as usize, n);
    let fs = mountfs::fs::PackFs::new(img, 0, 0);
    let last = fs.resolve(b"d65/999").unwrap();
    assert_eq!(fs.read(last.node, 0, 10).unwrap(), b"l");
}

#[test]
fn options_exclude_all_root_mtime_and_progress() {
    let work = scratch();
    let src = work.path().join("src");
    fixture_tree(&src, false);
    #[derive(Default)]
    struct Count {
        total: AtomicU64,
        entries: AtomicU64,
        advanced: AtomicU64,
        finished: AtomicU64,
    }
    impl packer::Progress for Count {
        fn start(&self, total: u64, entries: u64) {
            self.total.store(total, Ordering::SeqCst);
            self.entries.store(entries, Ordering::SeqCst);
        }
        fn advance(&self, b: u64) {
            self.advanced.fetch_add(b, Ordering::SeqCst);
        }
        fn finish(&self) {
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }
    let count = Arc::new(Count::default());
    let o = PackOptions {
        excludes: vec!["*.txt".into(), "d/e".into()],
        all_root: true,
        mtime: Some(1_234_567_890),
        progress: Some(count.clone()),
        ..deflate(2)
    };
    let zip = work.path().join("o.zip");
    let s = pack_zip(&src, &zip, &o).unwrap();
    let got = unzip_extract(&zip, &work.path().join("x"));
    assert!(!got.is_empty());
    for (p, e) in &got {
        let name = p.to_string_lossy();
        assert!(
            !name.ends_with(".txt") && !name.starts_with("d/e"),
            "{name}"
        );
        assert_eq!((e.uid, e.gid), (0, 0), "{name}");
        if e.kind != "symlink" {
            assert_eq!(e.mtime, 1_234_567_890, "{name}");
        }
    }
    assert_eq!(count.total.load(Ordering::SeqCst), s.bytes_in);
    assert_eq!(count.advanced.load(Ordering::SeqCst), s.bytes_in);
    assert_eq!(count.entries.load(Ordering::SeqCst), s.entries);
    assert_eq!(count.finished.load(Ordering::SeqCst), 1);
}

#[test]
fn bad_input_is_reported_and_leaves_nothing_behind() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    let o = deflate(0);

    let exists = work.path().join("exists.zip");
    fs::write(&exists, b"old").unwrap();
    let e = pack_zip(&src, &exists, &o).unwrap_err();
    assert!(matches!(e, PackError::OutputExists { .. }), "{e}");
    assert!(e.to_string().contains("exists.zip"), "{e}");
    assert_eq!(fs::read(&exists).unwrap(), b"old");
    let forced = PackOptions {
        force: true,
        ..deflate(0)
    };
    pack_zip(&src, &exists, &forced).unwrap();
    assert_eq!(&fs::read(&exists).unwrap()[..4], b"PK\x03\x04");

    let e = pack_zip(&src, &src.join("inside.zip"), &o).unwrap_err();
    assert!(matches!(e, PackError::OutputInsideSource { .. }), "{e}");
    assert!(!src.join("inside.zip").exists());

    let e = pack_zip(&src, &work.path().join("no-dir/x.zip"), &o).unwrap_err();
    assert!(matches!(e, PackError::OutputDirMissing { .. }), "{e}");

    let xz = PackOptions {
        compressor: Compressor::Xz,
        ..Default::default()
    };
    let e = pack_zip(&src, &work.path().join("xz.zip"), &xz).unwrap_err();
    assert!(matches!(e, PackError::InvalidOption(_)), "{e}");
    assert!(!work.path().join("xz.zip").exists());

    let outdir = work.path().join("outdir");
    fs::create_dir(&outdir).unwrap();
    let cancel = PackOptions {
        cancel: Some(Arc::new(AtomicBool::new(true))),
        ..deflate(0)
    };
    let e = pack_zip(&src, &outdir.join("c.zip"), &cancel).unwrap_err();
    assert!(matches!(e, PackError::Interrupted), "{e}");
    assert_eq!(
        fs::read_dir(&outdir).unwrap().count(),
        0,
        "output after cancel"
    );

    // A file that grows between the walk and the data pass (progress start
    // runs in between): an error naming it, and no output.
    struct Grow(PathBuf);
    impl packer::Progress for Grow {
        fn start(&self, _: u64, _: u64) {
            let mut f = fs::OpenOptions::new().append(true).open(&self.0).unwrap();
            f.write_all(b"more").unwrap();
        }
        fn advance(&self, _: u64) {}
        fn finish(&self) {}
    }
    let grow = PackOptions {
        progress: Some(Arc::new(Grow(src.join("a")))),
        ..deflate(0)
    };
    let e = pack_zip(&src, &outdir.join("g.zip"), &grow).unwrap_err();
    assert!(
        matches!(&e, PackError::FileChanged { path, .. } if path.ends_with("a")),
        "{e}"
    );
    assert_eq!(
        fs::read_dir(&outdir).unwrap().count(),
        0,
        "output after error"
    );
}

#[test]
fn cli_packs_zip() {
    let work = scratch();
    let src = work.path().join("src");
    fixture_tree(&src, false);
    let want = expected(&src);

    let zip = work.path().join("cli.zip");
    run(Command::new(packfs_bin())
        .args(["pack", "-q", "-c", "gzip"])
        .arg(&src)
        .arg("-o")
        .arg(&zip));
    unzip_test(&zip);
    let got = unzip_extract(&zip, &work.path().join("x"));
    assert_same("CLI deflate zip vs source", &got, &want);

    let zip = work.path().join("default.zip");
    run(Command::new(packfs_bin())
        .args(["pack", "-q"])
        .arg(&src)
        .arg("-o")
        .arg(&zip));
    let mnt = PackfsMount::new(&zip, &[]);
    assert_same(
        "CLI default zip, mounted, vs source",
        &zip_view(manifest(mnt.path(), &mopts())),
        &want,
    );
}

/// Zip64 for sizes and offsets: a sparse 4.5 GiB file, stored (so the
/// entry after it lies beyond 4 GiB, as does the central directory) and
/// deflated (sizes only). Ignored by default: it reads 9 GiB and writes
/// 4.5 GiB; run with `cargo test --release --test tests suite::pack_zip -- --ignored`.
#[test]
#[ignore]
fn entries_and_offsets_over_4_gib_use_zip64() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let huge = fs::File::create(src.join("a-huge")).unwrap();
    huge.set_len(9 << 29).unwrap();
    drop(huge);
    fs::write(src.join("b-after"), b"after the huge one\n").unwrap();
    for (name, level) in [("stored", Some(0)), ("deflate", None)] {
        let zip = work.path().join(format!("{name}.zip"));
        let o = PackOptions {
            level,
            ..deflate(0)
        };
        pack_zip(&src, &zip, &o).unwrap();
        unzip_test(&zip);
        assert_eq!(python_check(&zip, true), 2);
        let out = run(Command::new("unzip").arg("-p").arg(&zip).arg("b-after"));
        assert_eq!(out, "after the huge one\n");
        let sizes = run(Command::new("python3")
            .arg("-c")
            .arg("import sys, zipfile\nfor i in zipfile.ZipFile(sys.argv[1]).infolist(): print(i.file_size, i.header_offset)")
            .arg(&zip));
        assert!(sizes.starts_with(&format!("{} 0\n", 9u64 << 29)), "{sizes}");
        assert_eq!(has_zip64_end(&zip), level == Some(0), "{name}");
        fs::remove_file(&zip).unwrap();
    }
}

/// ZIP has no place for extended attributes; packing a tree that has some
/// said nothing (special files it cannot hold get a warning). It says once
/// how many entries lose theirs.
#[test]
fn extended_attributes_left_out_of_a_zip_are_said_once() {
    let t = scratch();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    for n in ["a", "b", "plain"] {
        fs::write(src.join(n), n).unwrap();
    }
    for n in ["a", "b"] {
        let p = std::ffi::CString::new(src.join(n).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: valid C strings and value buffer.
        let r =
            unsafe { libc::lsetxattr(p.as_ptr(), c"user.k".as_ptr(), b"v".as_ptr().cast(), 1, 0) };
        if !require(r == 0, "user xattrs on the scratch filesystem") {
            return;
        }
    }
    let out = Command::new(packfs_bin())
        .args(["pack", "-q", "--format", "zip", "-o"])
        .arg(t.path().join("x.zip"))
        .arg(&src)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("2 entries have extended attributes, which ZIP cannot store")
            .count(),
        1,
        "{err}"
    );
}
