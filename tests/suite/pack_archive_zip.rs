//! Packing straight from ZIP archives, proven against unzip. One tree of
//! every kind of entry a ZIP holds (files from empty to over a block,
//! compressible and not, nested and empty directories, relative and
//! dangling symlinks, odd modes, owners, a non-ASCII name) is archived by
//! Info-ZIP's zip, 7-Zip and Python's zipfile, with each compression method
//! they write and with Zip64 records; each archive is packed, the image is
//! mounted by the kernel and compared entry by entry with what `unzip` as
//! root extracts from the same archive (`-X` for owners, `-K` to keep
//! setuid bits, as the ZIP mount shows them).
//!
//! Also proven: damaged archives (a flipped data byte, a cut-off end, a
//! bad local header) and hostile ones (`..` members, encrypted members, a
//! ZIP on stdin) fail with status 1, one message naming the archive and
//! the member, and no image; a ZIP merges with a tar at the image root.

use super::pack_archive::{needs, pack_cmd, refused, walk};
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

type Manifest = std::collections::BTreeMap<std::path::PathBuf, Entry>;

/// The tree the writers archive. Owners only where the writer stores them
/// (`owners`): Info-ZIP's uid/gid extra; 7-Zip and zipfile store none.
fn fixture(root: &Path, owners: bool) {
    let put = |rel: &str, data: &[u8]| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
    };
    put("empty", b"");
    put("small.txt", b"hello\n");
    let mut text = Vec::new();
    for i in 0..200_000 {
        text.extend_from_slice(format!("line {i}\n").as_bytes());
    }
    put("deep/er/text.txt", &text);
    let mut noise = vec![0u8; 1_500_000];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    put("deep/noise.bin", &noise);
    put("caf\u{e9}/\u{e9}t\u{e9}.txt", b"unicode\n");
    std::fs::create_dir_all(root.join("void")).unwrap();
    std::os::unix::fs::symlink("../small.txt", root.join("deep/link")).unwrap();
    std::os::unix::fs::symlink("nowhere/at/all", root.join("dangling")).unwrap();
    for (rel, mode) in [
        ("small.txt", 0o600),
        ("deep/er/text.txt", 0o444),
        ("empty", 0o4755),
    ] {
        std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    if owners {
        let c =
            std::ffi::CString::new(root.join("small.txt").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::lchown(c.as_ptr(), 1234, 5678) }, 0);
    }
    // Times a ZIP stores to the second (Info-ZIP's extra) or two (DOS).
    // Deepest first: setting a child's time does not move its parent's after.
    let mut paths = walk(root);
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for e in paths {
        let c = std::ffi::CString::new(e.as_os_str().as_encoded_bytes()).unwrap();
        let t = libc::timespec {
            tv_sec: 1_600_000_000,
            tv_nsec: 0,
        };
        let ts = [t, t];
        unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                ts.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
    }
}

/// What the kernel shows of the image packed from `archive`.
fn image_of(archive: &Path) -> Option<Manifest> {
    let name = archive.file_name().unwrap().to_string_lossy();
    let img = archive.with_file_name(format!("{name}.sqfs"));
    run(&mut pack_cmd(&[archive], &img, &[]));
    let m = KernelMount::new(&img)?;
    Some(without_link_times(manifest(
        m.path(),
        &ManifestOptions::default(),
    )))
}

/// Symlinks' own times aside: unzip does not set them.
fn without_link_times(mut m: Manifest) -> Manifest {
    for e in m.values_mut() {
        if e.kind == "symlink" {
            e.mtime = 0;
        }
    }
    m
}

/// What `unzip -X -K` extracts from `archive`.
fn unzip(archive: &Path) -> Manifest {
    let name = archive.file_name().unwrap().to_string_lossy();
    let reference = archive.with_file_name(format!("{name}.x"));
    if !reference.exists() {
        std::fs::create_dir_all(&reference).unwrap();
        run(Command::new("unzip")
            .args(["-q", "-X", "-K"])
            .arg(archive)
            .arg("-d")
            .arg(&reference));
    }
    let m = without_link_times(manifest(&reference, &ManifestOptions::default()));
    assert!(m.len() >= 8, "{name}: unzip extracted only {m:?}");
    m
}

/// A writer's test: the fixture archived by `write(src, archive, method)`
/// with each of `methods`; each image as the kernel mounts it equals what
/// unzip extracts from the same archive. unzip 6.0 does not decode LZMA
/// (method 14): an LZMA archive's image is compared with the extraction of
/// the same writer's archive in `methods[0]`.
fn zip_case(tool: &str, owners: bool, methods: &[&str], write: impl Fn(&Path, &Path, &str)) {
    if !needs(&[tool, "unzip"]) {
        return;
    }
    let t = scratch();
    let src = t.path().join("tree");
    fixture(&src, owners);
    let mut first: Option<std::path::PathBuf> = None;
    for method in methods {
        let archive = t.path().join(format!("{method}.zip"));
        write(&src, &archive, method);
        let Some(got) = image_of(&archive) else {
            return;
        };
        let lzma = method.eq_ignore_ascii_case("lzma") || *method == "ZIP_LZMA";
        let (want, of) = match (lzma, &first) {
            (true, Some(f)) => (unzip(f), f.clone()),
            _ => (unzip(&archive), archive.clone()),
        };
        assert_same(
            &format!(
                "{tool}: kernel mount of the image packed from {} vs unzip -X -K {}",
                archive.display(),
                of.display()
            ),
            &got,
            &want,
        );
        first.get_or_insert(archive);
    }
}

/// Info-ZIP: deflate (its default, with the time and uid/gid extras),
/// stored, and bzip2.
#[test]
fn info_zip_archives_match_unzip() {
    zip_case(
        "zip",
        true,
        &["deflate", "store", "bzip2"],
        |src, archive, method| {
            run(Command::new("zip")
                .args(["-q", "-r", "-y", "-Z", method])
                .arg(archive)
                .arg(".")
                .current_dir(src));
        },
    );
}

/// 7-Zip: deflate, deflate64, bzip2 and LZMA members, symlinks kept.
#[test]
fn seven_zip_archives_match_unzip() {
    zip_case(
        "7z",
        false,
        &["Deflate", "Deflate64", "BZip2", "LZMA"],
        |src, archive, method| {
            run(Command::new("7z")
                .args(["a", "-tzip", "-snl", "-bd", "-bso0"])
                .arg(format!("-mm={method}"))
                .arg(archive)
                .arg(".")
                .current_dir(src));
        },
    );
}

/// Python's zipfile: every method it writes, and Zip64 records forced on
/// every member (`ZIP_DEFLATED` here).
#[test]
fn python_zipfile_archives_match_unzip() {
    zip_case(
        "python3",
        false,
        &["ZIP_DEFLATED", "ZIP_STORED", "ZIP_BZIP2", "ZIP_LZMA"],
        |src, archive, method| {
            let zip64 = if method == "ZIP_DEFLATED" {
                "True"
            } else {
                "False"
            };
            let script = format!(
                r#"
import os, sys, time, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out, "w", zipfile.{method}) as z:
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for n in sorted(dirs + files):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, src)
            st = os.lstat(p)
            if os.path.islink(p):
                info = zipfile.ZipInfo(rel, time.localtime(st.st_mtime)[:6])
                info.create_system = 3
                info.external_attr = st.st_mode << 16
                z.writestr(info, os.readlink(p))
            elif os.path.isdir(p):
                z.write(p, rel)
            else:
                info = zipfile.ZipInfo.from_file(p, rel)
                info.compress_type = zipfile.{method}
                with open(p, "rb") as f, z.open(info, "w", force_zip64={zip64}) as w:
                    w.write(f.read())
"#
            );
            run(Command::new("python3")
                .arg("-c")
                .arg(script)
                .arg(src)
                .arg(archive));
        },
    );
}

/// A ZIP built here from its records, member by member (stored data).
fn stored_zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let at = out.len() as u32;
        let crc = crc32fast::hash(data);
        let fixed = |sig: u32, central: bool| {
            let mut h = Vec::new();
            h.extend_from_slice(&sig.to_le_bytes());
            if central {
                h.extend_from_slice(&(3u16 << 8 | 20).to_le_bytes());
            }
            h.extend_from_slice(&20u16.to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // flags
            h.extend_from_slice(&0u16.to_le_bytes()); // stored
            h.extend_from_slice(&0u32.to_le_bytes()); // DOS time and date
            h.extend_from_slice(&crc.to_le_bytes());
            h.extend_from_slice(&(data.len() as u32).to_le_bytes());
            h.extend_from_slice(&(data.len() as u32).to_le_bytes());
            h.extend_from_slice(&(name.len() as u16).to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // extra
            if central {
                h.extend_from_slice(&[0; 6]); // comment, disk, internal
                h.extend_from_slice(&(0o100644u32 << 16).to_le_bytes());
                h.extend_from_slice(&at.to_le_bytes());
            }
            h.extend_from_slice(name.as_bytes());
            h
        };
        out.extend(fixed(0x0403_4b50, false));
        out.extend_from_slice(data);
        central.extend(fixed(0x0201_4b50, true));
    }
    let cd_at = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_at.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// A flipped byte of a member's data, an archive cut short, a local header
/// that is not there, a `..` member and an encrypted one: each is status 1,
/// one message naming the archive and the member, and no image. A ZIP on
/// stdin is refused with the reason.
#[test]
fn damaged_and_hostile_zips_are_refused_and_leave_no_image() {
    let t = scratch();
    let good = stored_zip(&[("ok.txt", b"fine\n"), ("data.bin", b"0123456789abcdef")]);
    let at = |needle: &[u8]| {
        good.windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
    };
    let mut flipped = good.clone();
    flipped[at(b"0123456789") + 3] ^= 1;
    let mut no_local = good.clone();
    let second = at(b"fine\n") + 5;
    assert_eq!(&good[second..second + 4], b"PK\x03\x04");
    no_local[second] = b'X';
    let cut = good[..good.len() - 30].to_vec();
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("flipped.zip", flipped, vec!["data.bin", "CRC-32"]),
        ("no_local.zip", no_local, vec!["data.bin", "local header"]),
        ("cut.zip", cut, vec!["end of central directory"]),
        (
            "dotdot.zip",
            stored_zip(&[("ok", b"x"), ("a/../../evil", b"evil")]),
            vec!["a/../../evil", ".."],
        ),
    ];
    for (name, bytes, names) in cases {
        let p = t.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        refused(&p, &names);
    }
    if require_tool("zip") {
        let src = t.path().join("secret");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("s.txt"), b"secret\n").unwrap();
        let p = t.path().join("encrypted.zip");
        run(Command::new("zip")
            .args(["-q", "-P", "pw"])
            .arg(&p)
            .arg("s.txt")
            .current_dir(&src));
        refused(&p, &["s.txt", "encrypted"]);
    }
    // On stdin: refused, saying why.
    let img = t.path().join("stdin.sqfs");
    let mut child = pack_cmd(&[Path::new("-")], &img, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&good).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ZIP") && err.contains("stdin"), "{err}");
    assert!(!img.exists());
}

/// A ZIP and a tar merge at the image root; a path both give is a conflict
/// naming both unless `--on-conflict` picks one.
#[test]
fn a_zip_and_a_tar_merge_at_the_root() {
    if !require_tool("tar") {
        return;
    }
    let t = scratch();
    let z = t.path().join("a.zip");
    std::fs::write(&z, stored_zip(&[("z/one", b"1\n"), ("same", b"zip\n")])).unwrap();
    let src = t.path().join("tree");
    std::fs::create_dir_all(src.join("t")).unwrap();
    std::fs::write(src.join("t/two"), b"2\n").unwrap();
    std::fs::write(src.join("same"), b"tar\n").unwrap();
    let tar = t.path().join("b.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&src)
        .args(["t", "same"]));
    let img = t.path().join("both.sqfs");
    let err = error_of(&mut pack_cmd(&[&z, &tar], &img, &[]));
    assert!(
        err.contains("same") && err.contains("a.zip") && err.contains("b.tar"),
        "{err}"
    );
    assert!(!img.exists());
    run(&mut pack_cmd(&[&z, &tar], &img, &["--on-conflict", "last"]));
    let cat = |p: &str| run(Command::new(packfs_bin()).arg("cat").arg(&img).arg(p));
    assert_eq!(cat("z/one"), "1\n");
    assert_eq!(cat("t/two"), "2\n");
    assert_eq!(cat("same"), "tar\n");
}

/// Regression: a member a later record of its path replaced was still
/// read, so damage in it failed the pack (and its bytes went into the
/// image unreferenced). As `unzip -o` leaves it, the later one is the file.
#[test]
fn a_replaced_member_is_not_read() {
    let t = scratch();
    let mut z = stored_zip(&[("x", b"first, damaged"), ("x", b"second\n")]);
    let at = z.windows(5).position(|w| w == b"first").unwrap();
    z[at] ^= 1;
    let p = t.path().join("twice.zip");
    std::fs::write(&p, z).unwrap();
    let img = t.path().join("twice.sqfs");
    run(&mut pack_cmd(&[&p], &img, &[]));
    let got = run(Command::new(packfs_bin()).arg("cat").arg(&img).arg("x"));
    assert_eq!(got, "second\n");
}
