//! Packing straight from tar archives, proven against GNU tar. One tree
//! holding every kind of entry is archived by each common writer (GNU tar
//! in its v7, ustar, oldgnu, gnu and posix formats, bsdtar, Python's
//! tarfile, `git archive`, busybox); each archive is packed, the image is
//! mounted by the kernel's squashfs driver (a reader packfs did not write)
//! and compared entry by entry with what `tar -x` as root extracts from the
//! same archive: type, content, mode, owner, mtime, hard links, link
//! counts, symlink target, device number and xattrs. The extraction is in
//! turn compared with the tree the archive was made from, so a writer that
//! dropped something cannot let the image match on less.
//!
//! Also proven: an archive compressed with gzip, zstd, xz, bzip2 or lz4
//! (in one stream or several), given on stdin, or packed with any thread
//! count gives the plain archive's image byte for byte; archives and
//! directories merge at the image root, where a path two sources give is
//! an error naming both unless `--on-conflict` picks one; members that
//! would land outside the tree, under a symlink or link to nothing, and
//! damaged archives (built byte by byte here), fail with status 1, a
//! message naming the archive and the member, and nothing left where the
//! image was to be; `--strip-components`, `--exclude`, `--all-root` and
//! leading `./` and `/` act as they do for `tar -x`.

use crate::common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

type Manifest = BTreeMap<PathBuf, Entry>;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn long(c: char, n: usize) -> String {
    c.to_string().repeat(n)
}

fn put(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

fn lchown(p: &Path, uid: u32, gid: u32) {
    // SAFETY: a valid C string.
    let r = unsafe { libc::lchown(cstr(p).as_ptr(), uid, gid) };
    assert_eq!(r, 0, "lchown {}", p.display());
}

/// A fifo (`kind` S_IFIFO) or a device node, then its mode set exactly
/// (mknod applies the umask).
fn mknod(p: &Path, kind: libc::mode_t, mode: u32, major: u32, minor: u32) {
    // SAFETY: a valid C string.
    let r = unsafe { libc::mknod(cstr(p).as_ptr(), kind | 0o600, libc::makedev(major, minor)) };
    assert_eq!(r, 0, "mknod {}", p.display());
    chmod(p, mode);
}

/// A file of `len` bytes holding data at `extents` (offset, length) and
/// holes everywhere else.
fn sparse(p: &Path, len: u64, extents: &[(u64, usize)]) {
    let mut f = File::create(p).unwrap();
    f.set_len(len).unwrap();
    for (i, &(at, n)) in extents.iter().enumerate() {
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&bytes(50 + i as u64, n, i % 2 == 0)).unwrap();
    }
}

/// Every path under `root` (not `root` itself), sorted.
pub(super) fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The tree every writer archives, in parts by what a format can hold:
///
/// - `basic/`, what even v7 holds: files of 0 bytes to over 1 MiB, nested
///   directories, relative, absolute and dangling symlinks, a hard link
///   pair, setuid, 0444, 0600, sticky and setgid modes, owners (of a file,
///   a directory and a symlink), a non-ASCII name, mtimes from 1 to 2096;
/// - `ustar/`, what ustar adds: a fifo, a char and a block device, a path
///   over 100 bytes that splits into ustar's prefix and name;
/// - the rest, needing GNU or PAX records: a 120-byte name, a 150-byte
///   symlink target, a hard link pair with 110-byte names, ids beyond
///   ustar's 7 octal digits, sparse files (a 4 MiB hole in the middle, a
///   hole first, a hole last, six data extents), xattrs on a file and on a
///   directory.
///
/// As root only: owners, devices (the writer tests all need root).
fn fixture(root: &Path) {
    let root_user = is_root();
    // basic/
    put(root, "basic/empty", b"");
    put(root, "basic/small.txt", b"hello, tar\n");
    put(root, "basic/text131073", &bytes(1, 131_073, true));
    put(root, "basic/rand1048577", &bytes(2, 1_048_577, false));
    put(root, "basic/d/e/f/deep.txt", b"deep\n");
    put(root, "basic/d/ünïcødé-名前.txt", "unicode ✓\n".as_bytes());
    let b = root.join("basic");
    std::os::unix::fs::symlink("small.txt", b.join("link_rel")).unwrap();
    std::os::unix::fs::symlink("../small.txt", b.join("d/link_up")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", b.join("link_abs")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", b.join("dangling")).unwrap();
    put(root, "basic/hard_a", b"two names, one inode\n");
    std::fs::hard_link(b.join("hard_a"), b.join("d/hard_b")).unwrap();
    put(root, "basic/suid", b"#!/bin/sh\n");
    chmod(&b.join("suid"), 0o4755);
    put(root, "basic/readonly", b"read only\n");
    chmod(&b.join("readonly"), 0o444);
    put(root, "basic/d/private", b"secret\n");
    chmod(&b.join("d/private"), 0o600);
    std::fs::create_dir(b.join("sticky")).unwrap();
    chmod(&b.join("sticky"), 0o1777);
    put(root, "basic/sgid/file", b"in a setgid directory\n");
    chmod(&b.join("sgid"), 0o2755);
    if root_user {
        lchown(&b.join("small.txt"), 1000, 2000);
        lchown(&b.join("d/private"), 65534, 65534);
        lchown(&b.join("link_rel"), 42, 43);
        lchown(&b.join("d"), 123, 456);
        lchown(&b.join("hard_a"), 7, 8);
    }
    // ustar/
    let u = root.join("ustar");
    std::fs::create_dir(&u).unwrap();
    mknod(&u.join("fifo"), libc::S_IFIFO, 0o640, 0, 0);
    if root_user {
        mknod(&u.join("chardev"), libc::S_IFCHR, 0o600, 1, 3);
        mknod(&u.join("blockdev"), libc::S_IFBLK, 0o660, 259, 70000);
    }
    put(
        root,
        &format!("ustar/{}/{}/file.dat", long('p', 60), long('q', 50)),
        b"a path split into prefix and name\n",
    );
    // The rest.
    put(root, &long('n', 120), b"a name longer than 100 bytes\n");
    std::os::unix::fs::symlink(long('t', 150), root.join("long_target")).unwrap();
    put(root, &long('L', 110), b"a hard link pair with long names\n");
    std::fs::hard_link(root.join(long('L', 110)), root.join(long('M', 110))).unwrap();
    put(root, "big_ids", b"ids beyond ustar's octal fields\n");
    if root_user {
        lchown(&root.join("big_ids"), 3_000_000, 4_000_000);
    }
    sparse(
        &root.join("sparse"),
        6 << 20,
        &[(0, 1 << 20), (5 << 20, 1 << 20)],
    );
    sparse(
        &root.join("sparse_head"),
        (3 << 20) + 4096,
        &[(3 << 20, 4096)],
    );
    sparse(&root.join("sparse_tail"), 2 << 20, &[(0, 65536)]);
    sparse(
        &root.join("sparse_many"),
        8 << 20,
        &(1..7u64).map(|i| (i << 20, 4096usize)).collect::<Vec<_>>(),
    );
    put(root, "xattr.txt", b"has an xattr\n");
    xattr::set(root.join("xattr.txt"), "user.foo", b"bar").expect("user.* xattrs on /var/tmp");
    std::fs::create_dir(root.join("xdir")).unwrap();
    xattr::set(root.join("xdir"), "user.dir", b"on a directory").unwrap();
    // Times last (creating an entry changes its directory's mtime).
    for (i, p) in walk(root).iter().enumerate() {
        set_mtime(p, 1_500_000_000 + 1000 * i as i64);
    }
    set_mtime(&b.join("small.txt"), 1);
    set_mtime(&b.join("readonly"), 4_000_000_000);
    set_mtime(root, 1_400_000_000);
}

/// What of the fixture an archive holds.
#[derive(Clone, Copy)]
enum Holds {
    /// `basic/` (v7).
    Basic,
    /// `basic/` and `ustar/` (ustar).
    Ustar,
    /// Everything.
    All,
}

impl Holds {
    fn has(self, p: &Path) -> bool {
        match self {
            Holds::Basic => p.starts_with("basic"),
            Holds::Ustar => p.starts_with("basic") || p.starts_with("ustar"),
            Holds::All => true,
        }
    }
}

/// `packfs pack SOURCES... -o IMG -q EXTRA...`, unrun. SOURCE_DATE_EPOCH
/// is removed: the image must depend on the input alone.
pub(super) fn pack_cmd(sources: &[&Path], img: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(packfs_bin());
    c.arg("pack")
        .args(sources)
        .arg("-o")
        .arg(img)
        .arg("-q")
        .args(extra)
        .env_remove("SOURCE_DATE_EPOCH");
    c
}

/// `packfs cat IMG PATH`.
fn cat(img: &Path, path: &str) -> String {
    run(Command::new(packfs_bin()).arg("cat").arg(img).arg(path))
}

/// GNU tar writing `members` of `src` to `archive` with `args`.
fn gnu_tar(args: &[&str], src: &Path, archive: &Path, members: &[&str]) {
    run(Command::new("tar")
        .args(args)
        .arg("--sort=name")
        .arg("-cf")
        .arg(archive)
        .arg("-C")
        .arg(src)
        .args(members));
}

/// The reference reader: GNU tar extracting `archive` into `dest` as root
/// does (numeric owners, every xattr, exact modes), with `extra`. A
/// directory's time is set once the whole archive is out: bsdtar writes a
/// directory's members after members outside it, which by default makes
/// GNU tar set the directory's time early, and the later members then
/// change it.
fn tar_x(archive: &Path, dest: &Path, extra: &[&str]) {
    std::fs::create_dir_all(dest).unwrap();
    run(Command::new("tar")
        .args([
            "-x",
            "--numeric-owner",
            "--xattrs",
            "--xattrs-include=*",
            "--delay-directory-restore",
            "-p",
        ])
        .args(extra)
        .arg("-f")
        .arg(archive)
        .arg("-C")
        .arg(dest));
}

/// Packs `archive` with `pack_args`, mounts the image with the kernel and
/// compares it with what `tar -x` with `tar_args` extracts from the same
/// archive. `tag` names this pair's image and extraction beside the
/// archive. Returns the manifest they share; None when no kernel mount can
/// be had here (and the test may skip).
fn matches_tar_x(
    archive: &Path,
    tag: &str,
    pack_args: &[&str],
    tar_args: &[&str],
) -> Option<Manifest> {
    let dir = archive.parent().unwrap();
    let name = archive.file_name().unwrap().to_string_lossy();
    let img = dir.join(format!("{name}.{tag}.sqfs"));
    run(&mut pack_cmd(&[archive], &img, pack_args));
    let reference = dir.join(format!("{name}.{tag}.x"));
    tar_x(archive, &reference, tar_args);
    let want = manifest(&reference, &ManifestOptions::default());
    let m = KernelMount::new(&img)?;
    let got = manifest(m.path(), &ManifestOptions::default());
    assert_same(
        &format!("kernel mount of {name} packed with {pack_args:?} vs tar -x {tar_args:?}"),
        &got,
        &want,
    );
    Some(want)
}

/// What `tar -x` gave (and so the image) vs the tree the archive was made
/// from: every path of the part `holds` names, each with all its
/// attributes, xattrs only when the writer stores them (`xattrs`).
fn carried(got: &Manifest, src: &Path, holds: Holds, xattrs: bool, writer: &str) {
    let mut want = manifest(src, &ManifestOptions::default());
    want.retain(|p, _| holds.has(p));
    if !xattrs {
        for e in want.values_mut() {
            e.xattrs.clear();
        }
    }
    assert_same(
        &format!("tar -x of the {writer} archive vs the tree it was made from"),
        got,
        &want,
    );
}

/// A writer's test: the fixture, the archive `write(src, archive)` makes,
/// the image vs `tar -x`, then what the archive carried.
fn writer_case(writer: &str, holds: Holds, xattrs: bool, write: impl FnOnce(&Path, &Path)) {
    let t = scratch();
    let src = t.path().join("tree");
    fixture(&src);
    let archive = t.path().join(format!("{writer}.tar"));
    write(&src, &archive);
    if let Some(got) = matches_tar_x(&archive, "plain", &[], &[]) {
        carried(&got, &src, holds, xattrs, writer);
    }
}

/// Root (owners and devices in the fixture, the kernel mount) and `tools`.
pub(super) fn needs(tools: &[&str]) -> bool {
    require_root("chown, mknod and a kernel loop mount") && tools.iter().all(|t| require_tool(t))
}

/// v7, the oldest format (no magic, no devices or fifos, names under 100
/// bytes), is still what some old tools write; `basic/` is what it holds.
#[test]
fn gnu_tar_v7_archive_matches_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    writer_case("v7", Holds::Basic, false, |src, a| {
        gnu_tar(&["--format=v7"], src, a, &["basic"])
    });
}

/// ustar: magic, owner names, devices and fifos, and a long path split
/// into the prefix and name fields, which a reader must join.
#[test]
fn gnu_tar_ustar_archive_matches_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    writer_case("ustar", Holds::Ustar, false, |src, a| {
        gnu_tar(&["--format=ustar"], src, a, &["basic", "ustar"])
    });
}

/// oldgnu: long names and link targets in 'L'/'K' records, ids in
/// base-256, sparse files as old GNU sparse headers (with extension
/// headers for more than four extents).
#[test]
fn gnu_tar_oldgnu_sparse_archive_matches_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    writer_case("oldgnu", Holds::All, false, |src, a| {
        gnu_tar(&["--format=oldgnu", "--sparse"], src, a, &["."])
    });
}

/// gnu, GNU tar's own format: as oldgnu, with ustar's layout.
#[test]
fn gnu_tar_gnu_sparse_archive_matches_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    writer_case("gnu", Holds::All, false, |src, a| {
        gnu_tar(&["--format=gnu", "--sparse"], src, a, &["."])
    });
}

/// posix (PAX): names, link targets and ids in 'x' records, xattrs as
/// SCHILY.xattr.*, and sparse files in each of the three PAX sparse
/// versions GNU tar writes (0.0: offset/numbytes records; 0.1: one map
/// record; 1.0, the default: the map in the data, the real name in
/// GNU.sparse.name).
#[test]
fn gnu_tar_posix_archives_with_each_sparse_version_and_xattrs_match_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    for version in ["1.0", "0.1", "0.0"] {
        let sparse_version = format!("--sparse-version={version}");
        let args = [
            "--format=posix",
            "--sparse",
            sparse_version.as_str(),
            "--xattrs",
        ];
        writer_case(
            &format!("posix-sparse-{version}"),
            Holds::All,
            true,
            |src, a| gnu_tar(&args, src, a, &["."]),
        );
    }
}

/// bsdtar (libarchive) writes "restricted pax" by default (PAX records only
/// where ustar cannot hold a value) and full pax on request, with xattrs
/// in both LIBARCHIVE.xattr.* and SCHILY.xattr.* records and its own
/// sparse files.
#[test]
fn bsdtar_archives_match_tar_x() {
    if !needs(&["tar", "bsdtar"]) {
        return;
    }
    for (writer, format) in [
        ("bsdtar", &[][..]),
        ("bsdtar-pax", &["--format", "pax"][..]),
    ] {
        writer_case(writer, Holds::All, true, |src, a| {
            run(Command::new("bsdtar")
                .args(format)
                .arg("-cf")
                .arg(a)
                .arg("-C")
                .arg(src)
                .arg("."));
        });
    }
}

/// Python's tarfile, how many data pipelines write archives: GNU_FORMAT
/// (long names as 'L'/'K', base-256 ids) and PAX_FORMAT; it writes hard
/// links to the first name it met and sparse files in full.
#[test]
fn python_tarfile_archives_match_tar_x() {
    if !needs(&["tar", "python3"]) {
        return;
    }
    const WRITE: &str = r#"
import sys, tarfile
src, out, fmt = sys.argv[1:4]
with tarfile.open(out, "w", format=getattr(tarfile, fmt)) as t:
    t.add(src, arcname=".")
"#;
    for format in ["GNU_FORMAT", "PAX_FORMAT"] {
        writer_case(&format!("python-{format}"), Holds::All, false, |src, a| {
            run(Command::new("python3")
                .arg("-c")
                .arg(WRITE)
                .arg(src)
                .arg(a)
                .arg(format));
        });
    }
}

/// busybox tar, what minimal containers carry: ustar with GNU 'L'/'K'
/// long-name records.
#[test]
fn busybox_tar_archive_matches_tar_x() {
    if !needs(&["tar", "busybox"]) {
        return;
    }
    writer_case("busybox", Holds::All, false, |src, a| {
        run(Command::new("busybox")
            .args(["tar", "-cf"])
            .arg(a)
            .arg("-C")
            .arg(src)
            .arg("."));
    });
}

/// `git archive`, how source releases are made: a PAX global header
/// (the commit id) that is no member, long paths in PAX records, every
/// entry owned by root with the commit's time, modes from git's umask.
#[test]
fn git_archive_matches_tar_x() {
    if !needs(&["tar", "git"]) {
        return;
    }
    let t = scratch();
    let repo = t.path().join("repo");
    put(&repo, "README.md", b"# a repository\n");
    put(&repo, "bin/tool.sh", b"#!/bin/sh\necho tool\n");
    chmod(&repo.join("bin/tool.sh"), 0o755);
    put(&repo, "src/deep/nested/mod.rs", b"pub fn f() {}\n");
    put(&repo, "big.bin", &bytes(5, 1_200_000, false));
    put(&repo, "empty", b"");
    put(&repo, "ünïcødé.txt", "unicode ✓\n".as_bytes());
    let long_path = format!("long/{}.txt", long('g', 110));
    put(&repo, &long_path, b"a path longer than 100 bytes\n");
    std::os::unix::fs::symlink("README.md", repo.join("link")).unwrap();
    let git = |args: &[&str]| {
        run(Command::new("git")
            .args([
                "-c",
                "user.name=packfs",
                "-c",
                "user.email=packfs@example.invalid",
            ])
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", t.path())
            .env("GIT_AUTHOR_DATE", "1600000000 +0000")
            .env("GIT_COMMITTER_DATE", "1600000000 +0000"));
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "fixture"]);
    let archive = t.path().join("git.tar");
    git(&[
        "archive",
        "--format=tar",
        "-o",
        archive.to_str().unwrap(),
        "HEAD",
    ]);
    let Some(got) = matches_tar_x(&archive, "plain", &[], &[]) else {
        return;
    };
    let paths: BTreeSet<String> = got.keys().map(|p| p.display().to_string()).collect();
    let mut want = BTreeSet::from(
        [
            "README.md",
            "big.bin",
            "bin",
            "bin/tool.sh",
            "empty",
            "link",
            "long",
            "src",
            "src/deep",
            "src/deep/nested",
            "src/deep/nested/mod.rs",
            "ünïcødé.txt",
        ]
        .map(String::from),
    );
    want.insert(long_path.clone());
    assert_eq!(paths, want);
    for (p, e) in &got {
        assert_eq!(
            (e.mtime, e.uid, e.gid),
            (1_600_000_000, 0, 0),
            "{}",
            p.display()
        );
    }
    assert_eq!(
        got[Path::new("link")].target,
        Some(PathBuf::from("README.md"))
    );
    assert_ne!(got[Path::new("bin/tool.sh")].mode & 0o111, 0);
    assert_eq!(
        got[Path::new("big.bin")].hash,
        Some(blake3::hash(&bytes(5, 1_200_000, false)))
    );
}

/// `tool ARGS` reading `data` on stdin; its stdout.
fn filter(tool: &str, args: &[&str], data: &[u8]) -> Vec<u8> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(out.status.success(), "{tool} {args:?}: {}", out.status);
    out.stdout
}

/// The compressors and how each writes a stream to stdout.
const COMPRESSORS: [(&str, &[&str], &str); 5] = [
    ("gzip", &["-c", "-n"], "gz"),
    ("zstd", &["-q", "-c"], "zst"),
    ("xz", &["-c"], "xz"),
    ("bzip2", &["-c"], "bz2"),
    ("lz4", &["-q", "-c"], "lz4"),
];

/// A scratch directory with the fixture and GNU tar's posix archive of it
/// (sparse files, xattrs): (scratch, archive, its bytes).
fn posix_archive() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let t = scratch();
    let src = t.path().join("tree");
    fixture(&src);
    let archive = t.path().join("a.tar");
    gnu_tar(
        &["--format=posix", "--sparse", "--xattrs"],
        &src,
        &archive,
        &["."],
    );
    let data = std::fs::read(&archive).unwrap();
    (t, archive, data)
}

/// Asserts that `img` has the same bytes as `base`.
fn same_image(base: &Path, img: &Path, what: &str) {
    let (a, b) = (std::fs::read(base).unwrap(), std::fs::read(img).unwrap());
    assert!(
        a == b,
        "{what}: {} ({} bytes) differs from {} ({} bytes)",
        img.display(),
        b.len(),
        base.display(),
        a.len()
    );
}

/// The image is a function of the archive's content, not of how it was
/// wrapped: the same tar compressed with gzip, zstd, xz, bzip2 and lz4
/// (frame format), as a two-member gzip (split at a 512-byte block
/// boundary) and a two-frame zstd (split inside a block), recognised by
/// content under a name that says nothing, gives the plain tar's image
/// byte for byte.
#[test]
fn compressed_archives_give_the_plain_archives_image() {
    if !["tar", "gzip", "zstd", "xz", "bzip2", "lz4"]
        .iter()
        .all(|t| require_tool(t))
    {
        return;
    }
    let (t, archive, data) = posix_archive();
    let base = t.path().join("plain.sqfs");
    run(&mut pack_cmd(&[&archive], &base, &[]));
    assert_eq!(cat(&base, "basic/d/e/f/deep.txt"), "deep\n");
    let mut cases: Vec<(String, Vec<u8>)> = COMPRESSORS
        .iter()
        .map(|(tool, args, ext)| (ext.to_string(), filter(tool, args, &data)))
        .collect();
    let at = data.len() / 2 / 512 * 512;
    cases.push((
        "gz-2-members".into(),
        [
            filter("gzip", &["-c", "-n"], &data[..at]),
            filter("gzip", &["-c", "-n"], &data[at..]),
        ]
        .concat(),
    ));
    let odd = data.len() / 3 + 7;
    cases.push((
        "zst-2-frames".into(),
        [
            filter("zstd", &["-q", "-c"], &data[..odd]),
            filter("zstd", &["-q", "-c"], &data[odd..]),
        ]
        .concat(),
    ));
    // Parallel compressors' framings, which packfs decodes in parallel:
    // pzstd's skippable-frame-led frames, bgzip's BGZF blocks.
    if require_tool("pzstd") && require_tool("bgzip") {
        cases.push((
            "pzstd".into(),
            filter("pzstd", &["-q", "-c", "-p", "2", "-1"], &data),
        ));
        cases.push(("bgzf".into(), filter("bgzip", &["-c"], &data)));
    }
    for (name, wrapped) in cases {
        let file = t.path().join(format!("archive-{name}"));
        std::fs::write(&file, wrapped).unwrap();
        let img = t.path().join(format!("{name}.sqfs"));
        run(&mut pack_cmd(&[&file], &img, &[]));
        same_image(&base, &img, &name);
    }
}

/// xz, bzip2 and lz4 streams may be concatenated too (`xz -d`, `bzip2 -d`
/// and `lz4 -d` read such files whole): an archive split in two, each part
/// compressed and the two streams joined, gives the plain tar's image.
#[test]
fn concatenated_xz_bzip2_and_lz4_streams_give_the_plain_archives_image() {
    if !["tar", "xz", "bzip2", "lz4"]
        .iter()
        .all(|t| require_tool(t))
    {
        return;
    }
    let (t, archive, data) = posix_archive();
    let base = t.path().join("plain.sqfs");
    run(&mut pack_cmd(&[&archive], &base, &[]));
    let at = data.len() / 2 + 100;
    for (tool, args, ext) in COMPRESSORS
        .iter()
        .filter(|(tool, ..)| ["xz", "bzip2", "lz4"].contains(tool))
    {
        let joined = [
            filter(tool, args, &data[..at]),
            filter(tool, args, &data[at..]),
        ]
        .concat();
        let file = t.path().join(format!("archive-2-streams.{ext}"));
        std::fs::write(&file, joined).unwrap();
        let img = t.path().join(format!("{ext}-2-streams.sqfs"));
        run(&mut pack_cmd(&[&file], &img, &[]));
        same_image(&base, &img, &format!("two {tool} streams"));
    }
}

/// `-` reads the archive from stdin (a pipe from a download or another
/// tool), plain or compressed, and the thread count never changes the
/// image: all give the file's image byte for byte.
#[test]
fn stdin_and_thread_counts_give_the_same_image() {
    if !require_tool("tar") || !require_tool("zstd") {
        return;
    }
    let (t, archive, data) = posix_archive();
    let base = t.path().join("file.sqfs");
    run(&mut pack_cmd(&[&archive], &base, &[]));
    let zst = t.path().join("a.tar.zst");
    std::fs::write(&zst, filter("zstd", &["-q", "-c"], &data)).unwrap();
    for (name, input) in [("stdin", &archive), ("stdin-zst", &zst)] {
        let img = t.path().join(format!("{name}.sqfs"));
        run(pack_cmd(&[Path::new("-")], &img, &[]).stdin(Stdio::from(File::open(input).unwrap())));
        same_image(&base, &img, name);
    }
    for j in ["1", "4"] {
        let img = t.path().join(format!("j{j}.sqfs"));
        run(&mut pack_cmd(&[&archive], &img, &["-j", j]));
        same_image(&base, &img, &format!("-j {j}"));
    }
}

/// Several sources, archives (one compressed) and a directory, merge at
/// the image root; a directory all of them hold (`shared/`, and the root
/// itself: each archive has a `./` member) merges instead of conflicting.
/// The image is what extracting both archives and copying the directory
/// into one place gives.
#[test]
fn archives_and_a_directory_merge_at_the_image_root() {
    if !needs(&["tar", "zstd"]) {
        return;
    }
    let t = scratch();
    let p = t.path();
    put(&p.join("s1"), "one/a.txt", b"from the first archive\n");
    put(&p.join("s1"), "one/sub/b.bin", &bytes(11, 300_000, false));
    std::fs::hard_link(p.join("s1/one/sub/b.bin"), p.join("s1/one/b-link")).unwrap();
    put(&p.join("s1"), "shared/from_one.txt", b"one\n");
    lchown(&p.join("s1/one/a.txt"), 1001, 1002);
    put(&p.join("s2"), "two/c.txt", b"from the second archive\n");
    std::os::unix::fs::symlink("c.txt", p.join("s2/two/c-link")).unwrap();
    put(&p.join("s2"), "shared/from_two.txt", b"two\n");
    put(&p.join("s3"), "three/d.txt", b"from the directory\n");
    chmod(&p.join("s3/three/d.txt"), 0o640);
    lchown(&p.join("s3/three/d.txt"), 2001, 2002);
    put(&p.join("s3"), "shared/from_dir.txt", b"dir\n");
    for s in ["s1", "s2", "s3"] {
        for (i, f) in walk(&p.join(s)).iter().enumerate() {
            set_mtime(f, 1_600_000_000 + i as i64);
        }
    }
    let one = p.join("one.tar");
    gnu_tar(&["--format=posix"], &p.join("s1"), &one, &["."]);
    let two = p.join("two.tar");
    gnu_tar(&["--format=gnu"], &p.join("s2"), &two, &["."]);
    let two_zst = p.join("two.tar.zst");
    std::fs::write(
        &two_zst,
        filter("zstd", &["-q", "-c"], &std::fs::read(&two).unwrap()),
    )
    .unwrap();
    let img = p.join("merged.sqfs");
    run(&mut pack_cmd(&[&one, &two_zst, &p.join("s3")], &img, &[]));
    let reference = p.join("reference");
    tar_x(&one, &reference, &[]);
    tar_x(&two, &reference, &[]);
    run(Command::new("cp")
        .arg("-a")
        .arg(p.join("s3/."))
        .arg(&reference));
    let Some(m) = KernelMount::new(&img) else {
        return;
    };
    let names: BTreeSet<String> = std::fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["one", "shared", "three", "two"].map(String::from))
    );
    // The merged directory's own attributes are one source's: not compared.
    let strip = |mut m: Manifest| {
        m.remove(Path::new("shared")).expect("shared/");
        m
    };
    assert_same(
        "merged image vs both archives extracted and the directory copied",
        &strip(manifest(m.path(), &ManifestOptions::default())),
        &strip(manifest(&reference, &ManifestOptions::default())),
    );
}

/// A path that is not a directory in every source that gives it (two
/// files, or a directory and a file) is ambiguous: an error naming both
/// sources and the path, and no image. `--on-conflict first|last` takes
/// the first or the last source's entry instead, in command-line order.
#[test]
fn a_path_in_two_sources_is_an_error_unless_on_conflict_says() {
    let t = scratch();
    let p = t.path();
    let a = p.join("a.tar");
    let mut tar = Tar::default();
    tar.dir("./")
        .file("./only_a.txt", b"only in a\n")
        .file("./clash.txt", b"from a\n");
    std::fs::write(&a, tar.end()).unwrap();
    let b = p.join("b.tar");
    std::fs::write(&b, Tar::default().file("clash.txt", b"from b\n").end()).unwrap();
    let dsrc = p.join("dsrc");
    put(&dsrc, "only_d.txt", b"only in the directory\n");
    put(&dsrc, "clash.txt", b"from the directory\n");
    let e = p.join("e.tar");
    std::fs::write(&e, Tar::default().dir("nest/").file("nest/x", b"x\n").end()).unwrap();
    let fsrc = p.join("fsrc");
    put(&fsrc, "nest", b"a file where e.tar has a directory\n");

    let out = p.join("out");
    std::fs::create_dir(&out).unwrap();
    let img = out.join("image.sqfs");
    for (sources, names) in [
        (vec![&a, &dsrc], ["a.tar", "dsrc", "clash.txt"]),
        (vec![&a, &b], ["a.tar", "b.tar", "clash.txt"]),
        (vec![&dsrc, &b], ["dsrc", "b.tar", "clash.txt"]),
        (vec![&e, &fsrc], ["e.tar", "fsrc", "nest"]),
    ] {
        let srcs: Vec<&Path> = sources.iter().map(|s| s.as_path()).collect();
        let err = error_of(&mut pack_cmd(&srcs, &img, &[]));
        for n in names {
            assert!(
                err.contains(n),
                "{srcs:?}: the message does not name {n}: {err}"
            );
        }
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert!(left.is_empty(), "{srcs:?}: left behind {left:?}");
    }

    for (i, (sources, how, want)) in [
        (vec![&a, &dsrc], "first", "from a\n"),
        (vec![&a, &dsrc], "last", "from the directory\n"),
        (vec![&dsrc, &a], "last", "from a\n"),
        (vec![&dsrc, &a], "first", "from the directory\n"),
        (vec![&a, &b, &dsrc], "first", "from a\n"),
        (vec![&a, &dsrc, &b], "last", "from b\n"),
    ]
    .into_iter()
    .enumerate()
    {
        let srcs: Vec<&Path> = sources.iter().map(|s| s.as_path()).collect();
        let img = p.join(format!("on-conflict-{i}.sqfs"));
        run(&mut pack_cmd(&srcs, &img, &["--on-conflict", how]));
        assert_eq!(cat(&img, "clash.txt"), want, "{srcs:?} --on-conflict {how}");
        assert_eq!(cat(&img, "only_a.txt"), "only in a\n");
        assert_eq!(cat(&img, "only_d.txt"), "only in the directory\n");
    }
}

/// One ustar header's fields (the ones a test sets).
struct Hdr<'a> {
    name: &'a [u8],
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: u64,
    kind: u8,
    link: &'a [u8],
}

impl<'a> Hdr<'a> {
    fn new(name: &'a str, kind: u8, mode: u32, size: u64) -> Self {
        Hdr {
            name: name.as_bytes(),
            mode,
            uid: 0,
            gid: 0,
            size,
            mtime: 1_600_000_000,
            kind,
            link: b"",
        }
    }
}

/// A zero-padded octal number filling `field` but its closing NUL.
fn octal(field: &mut [u8], v: u64) {
    let s = format!("{v:0w$o}\0", w = field.len() - 1);
    assert_eq!(
        s.len(),
        field.len(),
        "{v} does not fit {} bytes",
        field.len()
    );
    field.copy_from_slice(s.as_bytes());
}

/// Sets a header's checksum: the sum of its bytes, the checksum field
/// counted as spaces, in six octal digits, a NUL and a space.
fn seal(b: &mut [u8; 512]) {
    b[148..156].fill(b' ');
    let sum: u32 = b.iter().map(|&x| x as u32).sum();
    b[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// A ustar header block. Owner names are "root" whatever the ids: the
/// numeric ids are what `tar -x --numeric-owner` and packfs use.
fn header(h: &Hdr) -> [u8; 512] {
    let mut b = [0u8; 512];
    assert!(h.name.len() <= 100 && h.link.len() <= 100);
    b[..h.name.len()].copy_from_slice(h.name);
    octal(&mut b[100..108], h.mode.into());
    octal(&mut b[108..116], h.uid.into());
    octal(&mut b[116..124], h.gid.into());
    octal(&mut b[124..136], h.size);
    octal(&mut b[136..148], h.mtime);
    b[156] = h.kind;
    b[157..157 + h.link.len()].copy_from_slice(h.link);
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    b[265..269].copy_from_slice(b"root");
    b[297..301].copy_from_slice(b"root");
    octal(&mut b[329..337], 0);
    octal(&mut b[337..345], 0);
    seal(&mut b);
    b
}

/// One PAX record: "LEN KEY=VALUE\n", LEN counting its own digits.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let rest = format!(" {key}={value}\n");
    let mut n = rest.len() + 1;
    while n.to_string().len() + rest.len() != n {
        n = n.to_string().len() + rest.len();
    }
    format!("{n}{rest}").into_bytes()
}

/// A tar archive built byte by byte, for what no writer would make.
#[derive(Default)]
struct Tar(Vec<u8>);

impl Tar {
    /// A header, then `data` padded to whole blocks.
    fn entry(&mut self, h: &Hdr, data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&header(h));
        self.raw(data)
    }
    /// Bytes as they are, then zeros to the next block.
    fn raw(&mut self, data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(data);
        let pad = (512 - self.0.len() % 512) % 512;
        self.0.resize(self.0.len() + pad, 0);
        self
    }
    fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(&Hdr::new(name, b'0', 0o644, data.len() as u64), data)
    }
    fn dir(&mut self, name: &str) -> &mut Self {
        self.entry(&Hdr::new(name, b'5', 0o755, 0), b"")
    }
    fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        let h = Hdr {
            link: target.as_bytes(),
            ..Hdr::new(name, b'2', 0o777, 0)
        };
        self.entry(&h, b"")
    }
    fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
        let h = Hdr {
            link: target.as_bytes(),
            ..Hdr::new(name, b'1', 0o644, 0)
        };
        self.entry(&h, b"")
    }
    /// A PAX 'x' header: `records` apply to the next member.
    fn pax(&mut self, records: &[(&str, &str)]) -> &mut Self {
        let body: Vec<u8> = records.iter().flat_map(|(k, v)| pax_record(k, v)).collect();
        self.entry(
            &Hdr::new("PaxHeaders/next", b'x', 0o644, body.len() as u64),
            &body,
        )
    }
    /// A GNU 'L' record: `name` is the next member's name.
    fn gnu_long_name(&mut self, name: &str) -> &mut Self {
        let mut body = name.as_bytes().to_vec();
        body.push(0);
        let mut h = header(&Hdr::new("././@LongLink", b'L', 0o644, body.len() as u64));
        h[257..265].copy_from_slice(b"ustar  \0");
        seal(&mut h);
        self.0.extend_from_slice(&h);
        self.raw(&body)
    }
    /// The archive, closed by its two zero blocks.
    fn end(&mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0; 1024]);
        std::mem::take(&mut self.0)
    }
}

/// `packfs pack ARCHIVE` for an archive that must be refused: status 1, a
/// message naming the archive and each of `names`, and nothing left in the
/// image's directory (no image, no temporary file). Returns the message.
pub(super) fn refused(archive: &Path, names: &[&str]) -> String {
    let file = archive.file_name().unwrap().to_str().unwrap();
    let out = archive.parent().unwrap().join(format!("{file}.out"));
    std::fs::create_dir(&out).unwrap();
    let img = out.join("image.sqfs");
    let err = error_of(&mut pack_cmd(&[archive], &img, &[]));
    assert!(
        err.contains(file),
        "the message does not name {file}: {err}"
    );
    for n in names {
        assert!(
            err.contains(n),
            "{file}: the message does not name {n}: {err}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{file}: left behind {left:?}");
    err
}

/// An archive is data from anywhere: a member that would land outside the
/// tree (a `..` component, however it is spelled or wherever the name
/// comes from: the header, a PAX path record, a GNU long name), under a
/// symlink the archive made (an absolute one or one inside the tree), or a
/// hard link to a path the archive never held, is refused, not skipped:
/// status 1, the archive and the member named, no image.
#[test]
fn members_that_would_escape_are_refused_and_leave_no_image() {
    let t = scratch();
    let long_evil = format!("../{}", long('l', 120));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dotdot.tar",
            Tar::default()
                .file("ok", b"fine\n")
                .file("../evil", b"evil\n")
                .end(),
            "../evil",
        ),
        (
            "inner_dotdot.tar",
            Tar::default()
                .dir("a/")
                .file("a/../../evil", b"evil\n")
                .end(),
            "a/../../evil",
        ),
        (
            "harmless_dotdot.tar",
            Tar::default()
                .dir("x/")
                .file("x/../inside", b"a .. that stays inside\n")
                .end(),
            "x/../inside",
        ),
        (
            "pax_dotdot.tar",
            Tar::default()
                .pax(&[("path", "../pax_evil")])
                .file("innocent", b"evil\n")
                .end(),
            "../pax_evil",
        ),
        (
            "longname_dotdot.tar",
            Tar::default()
                .gnu_long_name(&long_evil)
                .file("innocent", b"evil\n")
                .end(),
            long_evil.as_str(),
        ),
        (
            "under_symlink.tar",
            Tar::default()
                .symlink("etc_link", "/etc")
                .file("etc_link/passwd", b"root::0:0::/:/bin/sh\n")
                .end(),
            "etc_link/passwd",
        ),
        (
            "under_inner_symlink.tar",
            Tar::default()
                .dir("sub/")
                .symlink("inner", "sub")
                .file("inner/x", b"through a symlink\n")
                .end(),
            "inner/x",
        ),
        (
            "hardlink_nowhere.tar",
            Tar::default()
                .file("present", b"present\n")
                .hardlink("link_to_nowhere", "never/held")
                .end(),
            "link_to_nowhere",
        ),
    ];
    for (name, data, member) in cases {
        let archive = t.path().join(name);
        std::fs::write(&archive, data).unwrap();
        refused(&archive, &[member]);
    }
    assert!(!t.path().join("evil").exists());
}

/// A damaged archive is an error, never an image of what happened to be
/// readable: a stream cut inside a member's data, a header whose checksum
/// does not match (named by its byte offset), a base-256 size of 8 EiB, a
/// gzip or zstd stream with a flipped byte, a gzip stream cut short. Each
/// gives status 1, one message naming the archive (and the member where
/// there is one), and no image.
#[test]
fn damaged_archives_are_refused_with_one_message_and_leave_no_image() {
    if !require_tool("gzip") || !require_tool("zstd") {
        return;
    }
    let t = scratch();
    let mut cases: Vec<(&str, Vec<u8>, Vec<&str>)> = Vec::new();

    let mut tar = Tar::default();
    tar.file("first", &bytes(1, 600, true));
    let cut_at = tar.0.len() + 512 + 5000;
    tar.file("cut_member", &bytes(2, 10_000, false));
    let mut truncated = tar.end();
    truncated.truncate(cut_at);
    cases.push(("truncated.tar", truncated, vec!["cut_member"]));

    let mut checksum = Tar::default()
        .file("first", b"first member\n")
        .file("second", b"second member\n")
        .end();
    // The second header starts at 1024; the last of its checksum's digits
    // moves by one (still an octal digit).
    let digit = &mut checksum[1024 + 153];
    *digit = if *digit == b'7' { b'0' } else { *digit + 1 };
    cases.push(("checksum.tar", checksum, vec!["1024"]));

    let mut huge = header(&Hdr::new("huge_member", b'0', 0o644, 0));
    huge[124] = 0x80;
    huge[125..128].fill(0);
    huge[128..136].copy_from_slice(&(1u64 << 63).to_be_bytes());
    seal(&mut huge);
    let mut tar = Tar(huge.to_vec());
    tar.raw(&bytes(3, 4096, false));
    cases.push(("huge.tar", tar.end(), vec!["huge_member"]));

    let payload = Tar::default()
        .file("payload.txt", &bytes(4, 300_000, true))
        .end();
    let flip = |mut z: Vec<u8>, tool: &str| {
        let mid = z.len() / 2;
        z[mid] ^= 0xff;
        let ok = filter_ok(tool, &["-t"], &z);
        assert!(!ok, "{tool} -t accepts the damaged stream");
        z
    };
    cases.push((
        "corrupt.tgz",
        flip(filter("gzip", &["-c", "-n"], &payload), "gzip"),
        vec![],
    ));
    cases.push((
        "corrupt.tar.zst",
        flip(filter("zstd", &["-q", "-c"], &payload), "zstd"),
        vec![],
    ));
    let mut cut_gz = filter("gzip", &["-c", "-n"], &payload);
    cut_gz.truncate(cut_gz.len() * 3 / 5);
    cases.push(("cut.tgz", cut_gz, vec![]));

    for (name, data, members) in cases {
        let archive = t.path().join(name);
        std::fs::write(&archive, data).unwrap();
        let err = refused(&archive, &members);
        assert_eq!(
            err.lines().filter(|l| l.starts_with("packfs:")).count(),
            1,
            "{name}: not one message: {err}"
        );
    }
}

/// Whether `tool ARGS` accepts `data` on stdin (its exit status).
fn filter_ok(tool: &str, args: &[&str], data: &[u8]) -> bool {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    status.success()
}

/// As `tar -x` does, a later member of a path replaces the earlier one: a
/// longer or shorter file, a file by a symlink; a hard link made after the
/// replacement shares the later file. Duplicates are legitimate (appended
/// archives, `tar -r`), so they are no error.
#[test]
fn a_later_member_replaces_an_earlier_one() {
    let t = scratch();
    let archive = t.path().join("dups.tar");
    std::fs::write(
        &archive,
        Tar::default()
            .file("dup", b"first\n")
            .file("other", b"other\n")
            .file("shrink", &bytes(6, 200_000, true))
            .file("dup", b"second, and longer\n")
            .file("shrink", b"short\n")
            .file("kind", b"a file first\n")
            .symlink("kind", "dup")
            .hardlink("hl", "dup")
            .end(),
    )
    .unwrap();
    let img = t.path().join("dups.sqfs");
    run(&mut pack_cmd(&[&archive], &img, &[]));
    assert_eq!(cat(&img, "dup"), "second, and longer\n");
    assert_eq!(cat(&img, "shrink"), "short\n");
    assert_eq!(cat(&img, "hl"), "second, and longer\n");
    assert_eq!(cat(&img, "other"), "other\n");
    let Some(m) = KernelMount::new(&img) else {
        return;
    };
    let names: BTreeSet<String> = std::fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["dup", "hl", "kind", "other", "shrink"].map(String::from))
    );
    assert_eq!(
        std::fs::read_link(m.path().join("kind")).unwrap(),
        Path::new("dup")
    );
    let (dup, hl) = (
        std::fs::metadata(m.path().join("dup")).unwrap(),
        std::fs::metadata(m.path().join("hl")).unwrap(),
    );
    assert_eq!(dup.ino(), hl.ino());
    assert_eq!((dup.nlink(), hl.nlink()), (2, 2));
}

/// The header fields as `tar -x` as root applies them, on an archive made
/// byte by byte: a leading `./` or `/` dropped; numeric ids used, not the
/// owner names (every header here says "root"); a hard link (its target
/// spelled with `./`) sharing its target's inode; directories only implied
/// by a member's path made 0755 and owned by root; PAX records overriding
/// the header (a 160-byte path, an mtime with a fraction, a uid beyond
/// octal, an xattr).
#[test]
fn hand_made_archive_has_tar_x_semantics() {
    if !require_root("a kernel loop mount") {
        return;
    }
    let t = scratch();
    let long_dir = format!("pax/{}", long('p', 150));
    let long_path = format!("{long_dir}/file");
    let archive = t.path().join("hand.tar");
    let mut tar = Tar::default();
    tar.entry(
        &Hdr {
            uid: 1234,
            gid: 5678,
            ..Hdr::new("./dot/", b'5', 0o750, 0)
        },
        b"",
    )
    .entry(
        &Hdr {
            uid: 1234,
            gid: 5678,
            mtime: 1_600_000_001,
            ..Hdr::new("./dot/file", b'0', 0o640, 9)
        },
        b"dot file\n",
    )
    .file("/abs/file", b"absolute\n")
    .file("plain", b"plain\n")
    .file("deep/a/b/c/file", b"deep\n")
    .hardlink("hl", "./dot/file")
    .pax(&[
        ("path", long_path.as_str()),
        ("mtime", "1700000000.75"),
        ("uid", "3000000"),
        ("SCHILY.xattr.user.foo", "bar"),
    ])
    .file("placeholder", b"named by its PAX record\n");
    std::fs::write(&archive, tar.end()).unwrap();
    let img = t.path().join("hand.sqfs");
    run(&mut pack_cmd(&[&archive], &img, &[]));
    let Some(m) = KernelMount::new(&img) else {
        return;
    };
    let md = |p: &str| {
        std::fs::symlink_metadata(m.path().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let read = |p: &str| std::fs::read(m.path().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let names: BTreeSet<String> = std::fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["abs", "deep", "dot", "hl", "pax", "plain"].map(String::from))
    );
    let dot = md("dot");
    assert!(dot.is_dir());
    assert_eq!(
        (dot.mode() & 0o7777, dot.uid(), dot.gid(), dot.mtime()),
        (0o750, 1234, 5678, 1_600_000_000)
    );
    let file = md("dot/file");
    assert_eq!(
        (file.mode(), file.uid(), file.gid(), file.mtime()),
        (0o100640, 1234, 5678, 1_600_000_001)
    );
    assert_eq!(read("dot/file"), b"dot file\n");
    let hl = md("hl");
    assert_eq!(hl.ino(), file.ino());
    assert_eq!((hl.nlink(), file.nlink()), (2, 2));
    assert_eq!(read("abs/file"), b"absolute\n");
    assert_eq!(read("plain"), b"plain\n");
    assert_eq!(read("deep/a/b/c/file"), b"deep\n");
    for d in [
        "abs",
        "deep",
        "deep/a",
        "deep/a/b",
        "deep/a/b/c",
        "pax",
        long_dir.as_str(),
    ] {
        let e = md(d);
        assert!(e.is_dir(), "{d}");
        assert_eq!((e.mode() & 0o7777, e.uid(), e.gid()), (0o755, 0, 0), "{d}");
    }
    let pax = md(long_path.as_str());
    assert_eq!(
        (pax.mtime(), pax.uid(), pax.gid()),
        (1_700_000_000, 3_000_000, 0)
    );
    assert_eq!(read(long_path.as_str()), b"named by its PAX record\n");
    assert_eq!(
        xattr::get(m.path().join(&long_path), "user.foo").unwrap(),
        Some(b"bar".to_vec())
    );
}

/// The gnu archive of the fixture, made from its parent directory so that
/// every member starts with `tree/`: (scratch, source, archive).
fn gnu_archive_of_tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = scratch();
    let src = t.path().join("tree");
    fixture(&src);
    let archive = t.path().join("tree.tar");
    gnu_tar(&["--format=gnu", "--sparse"], t.path(), &archive, &["tree"]);
    (t, src, archive)
}

/// `--strip-components N` drops N leading components from member names
/// and hard-link targets and leaves out members with no more than N, as
/// `tar -x --strip-components N` does (N = 2 merges `basic/` and
/// `ustar/` at the root and drops the files beside them).
#[test]
fn strip_components_matches_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    let (_t, src, archive) = gnu_archive_of_tree();
    for (n, present) in [("1", "basic/hard_a"), ("2", "hard_a")] {
        let args = ["--strip-components", n];
        let Some(got) = matches_tar_x(&archive, &format!("strip{n}"), &args, &args) else {
            return;
        };
        assert!(
            got.contains_key(Path::new(present)),
            "--strip-components {n}"
        );
        if n == "1" {
            carried(&got, &src, Holds::All, false, "gnu");
        }
    }
}

/// `--exclude GLOB` leaves out the members it matches, a directory with
/// everything under it, as `tar -x --exclude` does.
#[test]
fn exclude_matches_tar_x() {
    if !needs(&["tar"]) {
        return;
    }
    let (_t, _src, archive) = gnu_archive_of_tree();
    let args = ["--exclude", "*.txt", "--exclude", "ustar"];
    let Some(got) = matches_tar_x(&archive, "exclude", &args, &args) else {
        return;
    };
    assert!(got.contains_key(Path::new("tree/basic/hard_a")));
    for p in got.keys() {
        let s = p.display().to_string();
        assert!(
            !s.ends_with(".txt") && !s.contains("ustar"),
            "{s} was not left out"
        );
    }
}

/// `--all-root` makes every entry owned by 0:0 and changes nothing else:
/// the image is the archive's extraction but for owners.
#[test]
fn all_root_makes_every_owner_root() {
    if !needs(&["tar"]) {
        return;
    }
    let (t, _src, archive) = gnu_archive_of_tree();
    let img = t.path().join("all-root.sqfs");
    run(&mut pack_cmd(&[&archive], &img, &["--all-root"]));
    let reference = t.path().join("reference");
    tar_x(&archive, &reference, &[]);
    let owned = manifest(&reference, &ManifestOptions::default());
    assert!(owned.values().any(|e| e.uid != 0 && e.gid != 0));
    let Some(m) = KernelMount::new(&img) else {
        return;
    };
    for (p, e) in manifest(m.path(), &ManifestOptions::default()) {
        assert_eq!((e.uid, e.gid), (0, 0), "{}", p.display());
    }
    let no_owners = ManifestOptions {
        owners: false,
        ..ManifestOptions::default()
    };
    assert_same(
        "--all-root image vs tar -x but for owners",
        &manifest(m.path(), &no_owners),
        &manifest(&reference, &no_owners),
    );
}

/// GNU tar -P keeps absolute member names (and absolute hard-link
/// targets); packing drops the leading `/` of both, as `tar -x` does, and
/// the directories above the archived one, which the archive does not
/// hold, are made 0755 and owned by root.
#[test]
fn absolute_member_names_lose_their_leading_slash() {
    if !needs(&["tar"]) {
        return;
    }
    let t = scratch();
    let src = t.path().join("tree");
    fixture(&src);
    let archive = t.path().join("abs.tar");
    run(Command::new("tar")
        .args(["--format=gnu", "-P", "--sort=name", "-cf"])
        .arg(&archive)
        .arg(src.join("basic")));
    let img = t.path().join("abs.sqfs");
    run(&mut pack_cmd(&[&archive], &img, &[]));
    let reference = t.path().join("reference");
    tar_x(&archive, &reference, &[]);
    let Some(m) = KernelMount::new(&img) else {
        return;
    };
    let rel = src.strip_prefix("/").unwrap();
    assert_same(
        "image of a tar -P archive vs tar -x",
        &manifest(&m.path().join(rel), &ManifestOptions::default()),
        &manifest(&reference.join(rel), &ManifestOptions::default()),
    );
    let top: Vec<String> = std::fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let first = rel.components().next().unwrap();
    assert_eq!(top, [first.as_os_str().to_string_lossy().into_owned()]);
    let mut implied = PathBuf::new();
    for c in rel.components() {
        implied.push(c);
        let e = std::fs::symlink_metadata(m.path().join(&implied)).unwrap();
        assert!(e.is_dir(), "{}", implied.display());
        assert_eq!(
            (e.mode() & 0o7777, e.uid(), e.gid()),
            (0o755, 0, 0),
            "{}",
            implied.display()
        );
    }
}

/// ImageNet's shape: one tar of class tars, each class tar compressed a
/// different way or not at all. With `--expand-nested '*.tar*'` each class
/// archive becomes the directory of its name without the extension, read
/// from the outer stream: the image equals the outer archive extracted,
/// then each class archive extracted into its directory and removed.
/// Without the option the class archives are packed as files.
#[test]
fn nested_class_archives_expand_into_directories() {
    if !needs(&["zstd", "gzip"]) {
        return;
    }
    let t = scratch();
    let classes = t.path().join("classes");
    let outer_src = t.path().join("outer");
    std::fs::create_dir_all(&outer_src).unwrap();
    for (k, ext) in [(0, "tar"), (1, "tar.gz"), (2, "tar.zst"), (3, "tar")] {
        let class = format!("n0{k}");
        let dir = classes.join(&class);
        for i in 0..20 {
            put(
                &dir,
                &format!("{class}_{i}.JPEG"),
                &bytes(k * 100 + i, 5_000 + 997 * i as usize, false),
            );
        }
        let plain = t.path().join(format!("{class}.tar"));
        gnu_tar(&["--format=gnu"], &dir, &plain, &["."]);
        let dest = outer_src.join(format!("{class}.{ext}"));
        match ext {
            "tar" => {
                std::fs::rename(&plain, &dest).unwrap();
            }
            "tar.gz" => std::fs::write(
                &dest,
                filter("gzip", &["-c"], &std::fs::read(&plain).unwrap()),
            )
            .unwrap(),
            _ => std::fs::write(
                &dest,
                filter("zstd", &["-q", "-c"], &std::fs::read(&plain).unwrap()),
            )
            .unwrap(),
        }
    }
    put(&outer_src, "README.txt", b"not an archive\n");
    let outer = t.path().join("train.tar");
    gnu_tar(&["--format=gnu"], &outer_src, &outer, &["."]);

    // The reference: extract the outer archive, then each class archive
    // into the directory of its name (tar tells the compression itself).
    let reference = t.path().join("reference");
    tar_x(&outer, &reference, &[]);
    for (k, ext) in [(0, "tar"), (1, "tar.gz"), (2, "tar.zst"), (3, "tar")] {
        let archive = reference.join(format!("n0{k}.{ext}"));
        let dir = reference.join(format!("n0{k}"));
        tar_x(&archive, &dir, &[]);
        std::fs::remove_file(&archive).unwrap();
    }
    let img = t.path().join("train.sqfs");
    run(&mut pack_cmd(
        &[&outer],
        &img,
        &["--expand-nested", "*.tar*"],
    ));
    let Some(m) = KernelMount::new(&img) else {
        return;
    };
    let got = manifest(m.path(), &ManifestOptions::default());
    let mut want = manifest(&reference, &ManifestOptions::default());
    // A class directory is made from its archive member: 0755, the
    // member's owner and mtime; its own "./" member (GNU tar writes one)
    // then sets them as extraction does.
    for k in 0..4 {
        let p = PathBuf::from(format!("n0{k}"));
        assert!(got.contains_key(&p), "no directory {}", p.display());
        want.insert(p.clone(), got[&p].clone());
    }
    assert_same("expanded image vs nested extraction", &got, &want);
    assert_eq!(
        got.keys().filter(|p| p.components().count() == 2).count(),
        80
    );
    drop(m);

    // Without the option the class archives are files.
    let plain_img = t.path().join("plain.sqfs");
    run(&mut pack_cmd(&[&outer], &plain_img, &[]));
    let out = Command::new(packfs_bin())
        .arg("cat")
        .arg(&plain_img)
        .arg("n01.tar.gz")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        std::fs::read(outer_src.join("n01.tar.gz")).unwrap(),
        out.stdout
    );
}

/// A damaged class archive inside the outer one is named by both.
#[test]
fn a_damaged_nested_archive_is_named_with_its_outer_archive() {
    let t = scratch();
    let inner_src = t.path().join("inner");
    put(&inner_src, "a.JPEG", &bytes(1, 100_000, false));
    let inner = t.path().join("n07.tar");
    gnu_tar(&["--format=gnu"], &inner_src, &inner, &["."]);
    let mut gz = filter("gzip", &["-c"], &std::fs::read(&inner).unwrap());
    let n = gz.len();
    gz[n / 2] ^= 0x55;
    let outer_src = t.path().join("outer");
    put(&outer_src, "n07.tar.gz", &gz);
    let outer = t.path().join("train.tar");
    gnu_tar(&["--format=gnu"], &outer_src, &outer, &["."]);
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let err = error_of(&mut pack_cmd(
        &[&outer],
        &out.join("x.sqfs"),
        &["--expand-nested", "*.tar.gz"],
    ));
    assert!(
        err.contains("train.tar:") && err.contains("n07.tar.gz"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(&out).unwrap().next().is_none(),
        "something left behind"
    );
}

/// WebDataset's notation: a quoted brace range names the shards in order,
/// with the range's zero padding, and packs them as the shell's list would.
#[test]
fn a_brace_range_names_the_shards_in_order() {
    let t = scratch();
    let shards = t.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    for k in 0..12 {
        let src = t.path().join(format!("s{k}"));
        put(
            &src,
            &format!("{k:06}.jpg"),
            &bytes(k, 3000 + k as usize, false),
        );
        put(&src, &format!("{k:06}.cls"), format!("{k}\n").as_bytes());
        gnu_tar(
            &["--format=posix"],
            &src,
            &shards.join(format!("train-{k:06}.tar")),
            &["."],
        );
    }
    let listed: Vec<PathBuf> = (3..=10)
        .map(|k| shards.join(format!("train-{k:06}.tar")))
        .collect();
    let listed: Vec<&Path> = listed.iter().map(PathBuf::as_path).collect();
    let by_list = t.path().join("list.sqfs");
    run(&mut pack_cmd(&listed, &by_list, &[]));
    let by_range = t.path().join("range.sqfs");
    let range = shards.join("train-{000003..000010}.tar");
    run(&mut pack_cmd(&[&range], &by_range, &[]));
    assert_eq!(
        std::fs::read(&by_list).unwrap(),
        std::fs::read(&by_range).unwrap()
    );
    assert_eq!(cat(&by_range, "000010.cls"), "10\n");
    // A backwards range is a usage error (status 2).
    let out = pack_cmd(
        &[&shards.join("train-{000010..000003}.tar")],
        &t.path().join("x.sqfs"),
        &[],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("backwards"), "{err}");
}

/// `--strip-components` counts a leading `./` as tar does: an archive made
/// with `tar -C DIR -cf A .` stripped of 1 keeps the top directories
/// (`./top/f` becomes `top/f`). It once dropped the `.` first and so
/// stripped one component too many.
#[test]
fn strip_components_counts_a_leading_dot_as_tar_does() {
    if !needs(&["tar"]) {
        return;
    }
    let t = scratch();
    let src = t.path().join("src");
    put(&src, "top/f", b"f\n");
    put(&src, "top/sub/g", b"g\n");
    let archive = t.path().join("dot.tar");
    gnu_tar(&["--format=gnu"], &src, &archive, &["."]);
    let args = ["--strip-components", "1"];
    if let Some(got) = matches_tar_x(&archive, "strip1", &args, &args) {
        assert!(got.contains_key(Path::new("top/f")), "{:?}", got.keys());
    }
}

/// `--shards N` with archive sources cuts them into N contiguous groups in
/// the order given (5 sources into 2: the first two, then the other three),
/// each shard an image of its group alone; a manifest mounts them as one
/// tree; more shards than sources is an error.
#[test]
fn archive_sources_split_into_contiguous_groups_of_shards() {
    if !require_tool("tar") {
        return;
    }
    let t = scratch();
    let mut tars = Vec::new();
    for i in 0..5 {
        let src = t.path().join(format!("src{i}"));
        put(
            &src,
            &format!("train/{i:06}.txt"),
            format!("sample {i}\n").as_bytes(),
        );
        let tar = t.path().join(format!("train-{i:06}.tar"));
        gnu_tar(&[], &src, &tar, &["train"]);
        tars.push(tar);
    }
    let sources: Vec<&Path> = tars.iter().map(PathBuf::as_path).collect();
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let template = out.join("train-{shard}.sqfs");
    run(&mut pack_cmd(&sources, &template, &["--shards", "2"]));
    let ls = |img: &Path, dir: &str| {
        run(Command::new(packfs_bin()).arg("ls").arg(img).arg(dir))
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ls(&out.join("train-0.sqfs"), "train"),
        ["000000.txt", "000001.txt"]
    );
    assert_eq!(
        ls(&out.join("train-1.sqfs"), "train"),
        ["000002.txt", "000003.txt", "000004.txt"]
    );
    let manifest = out.join("train.manifest.json");
    assert_eq!(ls(&manifest, "train").len(), 5);
    assert_eq!(cat(&manifest, "train/000003.txt"), "sample 3\n");
    // A usage error: status 2.
    let o = pack_cmd(&sources, &out.join("more-{shard}.sqfs"), &["--shards", "6"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("more shards than the 5 sources"), "{err}");
}
