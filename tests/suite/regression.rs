//! One test per past bug, each named for the behaviour it keeps and
//! documented with the commit that fixed it, so that a failure here reads
//! as "this bug is back".
//!
//! Elsewhere, because they need what only their home provides:
//! - the three corrupt-image bugs of cf28e83 (a block list allocated from a
//!   file's claimed size, xattr and block-position arithmetic overflowing)
//!   are cases of `tests/corrupt_corpus.rs`, whose allocator guard is what
//!   catches an allocation out of proportion;
//! - crashes the fuzzer found are replayed from `tests/fuzz_regressions/`
//!   by `fuzz_regressions`.

use super::reader_core::{misses, read_fragment_file as read, settle, Fragments};
use super::shards::{open_fs, pack_shards, shard_files, wide_tree};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bug (191e66c): the watcher of a daemon stopped by `packfs umount`
/// unmounted the *next* mount of the same image at the same
/// place when that came first (it recognised "its" mount by image and
/// mountpoint), so `umount; mount` left nothing mounted now and then. Made
/// certain here by holding the old daemon (SIGSTOP) until the new mount is
/// up.
#[test]
fn a_remount_at_the_same_place_survives_the_previous_daemon() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let img = t.path().join("s.sqfs");
    mksquashfs(&src, &img, &[]);
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let mount = || run(Command::new(packfs_bin()).arg("mount").arg(&img).arg(&mp));
    let umount = || run(Command::new(packfs_bin()).arg("umount").arg(&mp));
    mount();
    for i in 0..3 {
        let old = daemon_pid(&mp);
        signal("-STOP", old);
        umount();
        mount();
        signal("-CONT", old);
        // The old daemon finds its mount gone and exits; its watcher looks.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{old}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "old daemon still running"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let read = std::fs::read(mp.join("f"));
        assert!(
            matches!(&read, Ok(b) if b == b"x"),
            "remount {i}: {read:?} (the previous daemon's watcher took the new mount)"
        );
    }
    umount();
}

/// Bug (9a45dd8): a shard's failed first open was cached forever (a
/// OnceLock held the Err). A shard that cannot be opened on first use (not yet copied back, a
/// storage error) gives an error for the paths it holds, and is opened on a
/// later access once it is there: a transient failure is not remembered.
#[test]
fn a_shard_that_failed_to_open_is_opened_once_it_is_back() {
    let t = scratch();
    let src = t.path().join("src");
    wide_tree(&src);
    let m = pack_shards(&src, &t.path().join("out"), "sqfs", 16, &[]);
    let last = shard_files(&m).pop().unwrap();
    let fs = open_fs(&m);
    let away = last.with_extension("away");
    std::fs::rename(&last, &away).unwrap();
    assert!(fs.resolve(b"zz-last").is_err(), "the last shard is gone");
    std::fs::rename(&away, &last).unwrap();
    let a = fs.resolve(b"zz-last").expect("opened now that it is back");
    let mut data = Vec::new();
    fs.read_all(a.node, |b| {
        data.extend_from_slice(b);
        Ok(())
    })
    .unwrap();
    assert_eq!(data, b"last");
}

/// Bug (49e6e5e): `info`, `ls` and `cat` writing into a closed pipe
/// printed 'Broken pipe' errors, and `info` panicked in println!.
#[test]
fn a_listing_piped_into_head_ends_quietly() {
    // More listing than a pipe buffer holds (64 KiB), so writes after
    // `head` has gone fail with EPIPE.
    let dir = scratch();
    let src = dir.path().join("many");
    std::fs::create_dir(&src).unwrap();
    for i in 0..3000 {
        std::fs::write(src.join(format!("file-with-a-longish-name-{i:05}")), b"x").unwrap();
    }
    let img = dir.path().join("many.sqfs");
    pack(&src, &img, &[]);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} ls -l {} / | head -c 1 >/dev/null; echo done",
            packfs_bin().display(),
            img.display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
}

/// Bug: `ls`, `cat` and `extract --path` took the path in the image as a
/// UTF-8 string, so a name that is not UTF-8 could not be given (clap
/// refused the argument), and `ls` printed such names with U+FFFD instead
/// of their bytes. They are bytes now, as in the mount.
#[test]
fn paths_and_names_that_are_not_utf8_keep_their_bytes_on_the_command_line() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch();
    let src = dir.path().join("src");
    let d = src.join(OsStr::from_bytes(b"d\xe9"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(OsStr::from_bytes(b"f\xff")), b"bytes").unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"f\xff"), d.join("link")).unwrap();
    let img = dir.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let packfs = |args: &[&OsStr]| {
        let out = Command::new(packfs_bin()).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let i = img.as_os_str();
    let p = |b: &'static [u8]| OsStr::from_bytes(b);
    assert_eq!(packfs(&[p(b"cat"), i, p(b"d\xe9/f\xff")]), b"bytes");
    assert_eq!(packfs(&[p(b"ls"), i, p(b"/")]), b"d\xe9\n");
    assert_eq!(packfs(&[p(b"ls"), i, p(b"d\xe9")]), b"f\xff\nlink\n");
    let long = packfs(&[p(b"ls"), p(b"-l"), i, p(b"d\xe9")]);
    assert!(
        long.ends_with(b" link -> f\xff\n"),
        "{}",
        String::from_utf8_lossy(&long)
    );
    let out = dir.path().join("out");
    packfs(&[
        p(b"extract"),
        i,
        p(b"-o"),
        out.as_os_str(),
        p(b"--path"),
        p(b"d\xe9"),
    ]);
    assert_eq!(
        std::fs::read(out.join(OsStr::from_bytes(b"f\xff"))).unwrap(),
        b"bytes"
    );
}

/// Bug (adf1fe3): image-order readahead kept one global high-water mark, so
/// a second sequential reader lower in the image than the first got no
/// window at all. It gets its own, whatever the first one was handed.
#[test]
fn a_second_sequential_reader_lower_in_the_image_gets_its_own_window() {
    let files = Fragments::new();
    let (fs, n) = files.open();
    read(&fs, &n, 16 * 10);
    let base = misses(&fs);
    read(&fs, &n, 16 * 11); // 11 on demand, window 12..=19 in the background
    assert_eq!(settle(&fs, base + 9, 10.0), base + 9);
    let base = base + 9;
    read(&fs, &n, 16 * 2);
    read(&fs, &n, 16 * 3); // 2 and 3 on demand, 4..=9 decoded ahead (10, 11 cached)
    assert_eq!(settle(&fs, base + 8, 10.0), base + 8);
}

/// Bug: a damaged data block made `packfs cat` print the cause
/// twice, once as an `[ERROR mountfs::fs]` log line from the filesystem
/// core and once as the command's own error. The core now only counts
/// failures; the FUSE edge logs what it answers, the CLI says it once.
#[test]
fn a_corrupt_block_is_reported_once_by_cat() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // Compressible and larger than a block: the block is stored compressed.
    std::fs::write(src.join("f"), bytes(3, 300_000, true)).unwrap();
    let img = t.path().join("c.sqfs");
    pack(&src, &img, &["-c", "gzip"]);
    let mut data = std::fs::read(&img).unwrap();
    // The first data block starts right after the superblock (96 bytes).
    for b in &mut data[120..400] {
        *b ^= 0x5a;
    }
    std::fs::write(&img, &data).unwrap();
    let out = Command::new(packfs_bin())
        .arg("cat")
        .arg(&img)
        .arg("f")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("[ERROR"), "said twice: {err}");
    assert_eq!(err.matches("data block at offset").count(), 1, "{err}");
}

/// The fixture tree at `dir/src` packed to `dir/i.sqfs`: (source, image).
fn fixture_image(dir: &Path) -> (PathBuf, PathBuf) {
    let (src, img) = (dir.join("src"), dir.join("i.sqfs"));
    fixture_tree(&src, false);
    pack(&src, &img, &[]);
    (src, img)
}

/// Whether a running process has `arg` among its command-line arguments.
fn a_process_has_arg(arg: &[u8]) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg))
    })
}

/// On drop, lazily unmounts a mountpoint and kills any process named with
/// it, so that a failed assertion does not leave a daemon and a mount to
/// disturb the tests after it.
struct LeftMount(PathBuf);

impl Drop for LeftMount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
        let arg = self.0.as_os_str().as_encoded_bytes();
        for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let named = std::fs::read(p.path().join("cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg));
            let pid = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok());
            if let (true, Some(pid)) = (named, pid) {
                // SAFETY: kill(2) with a pid read from /proc; no memory is shared.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// `packfs extract IMG -o DIR/out`, asserting success; returns the output.
fn extracted(img: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("out");
    run(Command::new(packfs_bin())
        .arg("extract")
        .arg(img)
        .arg("-o")
        .arg(&out));
    out
}

/// `lgetxattr(p, name)`, `None` when absent.
fn xattr_of(p: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| {
        buf.truncate(r as usize);
        buf
    })
}

/// Bugs (found against unsquashfs and the kernel mount): `packfs extract`
/// set a file's extended attributes before its owner, and the kernel takes
/// `security.capability` off a file whose owner is set, so an extracted
/// `ping` lost `cap_net_raw`; it wrote sparse files out in full (a 5 GiB
/// file with a few bytes of data took 5 GiB); it left sockets out.
#[test]
fn extract_keeps_capabilities_holes_and_sockets() {
    if !require_root("setting security.capability and owners") {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let ping = src.join("ping");
    std::fs::write(&ping, b"#!/bin/sh\n").unwrap();
    // The owner first: setting it takes the capability off.
    std::os::unix::fs::chown(&ping, Some(1234), Some(1234)).unwrap();
    // vfs_cap_data, revision 2, effective: cap_net_raw (13) permitted.
    let mut cap = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        cap.extend_from_slice(&w.to_le_bytes());
    }
    let c = std::ffi::CString::new(ping.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            cap.as_ptr().cast(),
            cap.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let sparse = src.join("sparse.img");
    {
        let f = std::fs::File::create(&sparse).unwrap();
        f.set_len(256 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"middle", 100 << 20).unwrap();
    }
    let _listener = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let sqfs = t.path().join("i.sqfs");
    pack(&src, &sqfs, &[]);
    let out = extracted(&sqfs, t.path());
    assert_eq!(
        xattr_of(&out.join("ping"), "security.capability"),
        Some(cap)
    );
    let m = std::fs::metadata(out.join("ping")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 1234));
    let m = std::fs::metadata(out.join("sparse.img")).unwrap();
    assert_eq!(m.len(), 256 << 20);
    assert!(
        m.blocks() * 512 < 8 << 20,
        "the extracted sparse file takes {} bytes",
        m.blocks() * 512
    );
    let data = std::fs::read(out.join("sparse.img")).unwrap();
    assert_eq!(&data[100 << 20..(100 << 20) + 6], b"middle");
    assert!(data[..100 << 20].iter().all(|&b| b == 0));
    assert!(std::fs::symlink_metadata(out.join("sock"))
        .unwrap()
        .file_type()
        .is_socket());
}

/// Bug: an image on a block device (a partition, a logical volume, a loop
/// device) could not be opened: its length was taken from its metadata,
/// which says 0 for a device, and 0 is an empty file.
#[test]
fn an_image_on_a_block_device_is_read_and_mounted() {
    if !require_root("a loop device") || !require_tool("losetup") {
        return;
    }
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    let dev = run(Command::new("losetup")
        .args(["-f", "--show", "-r"])
        .arg(&img));
    let dev = PathBuf::from(dev.trim());
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }
    let _detach = Detach(dev.clone());
    let o = ManifestOptions::default();
    for io in ["pread", "mmap"] {
        let m = PackfsMount::new(&dev, &["--io", io]);
        assert_same(
            &format!("mount of {} ({io})", dev.display()),
            &manifest(m.path(), &o),
            &manifest(&src, &o),
        );
    }
    let out = extracted(&dev, t.path());
    assert_same("extract", &manifest(&out, &o), &manifest(&src, &o));
}

/// Bug: looking up a name longer than SquashFS allows (256 bytes) said
/// ENOENT; the kernel's driver says ENAMETOOLONG, and so does packfs now.
#[test]
fn a_name_longer_than_squashfs_allows_is_enametoolong() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d").join("f"), b"x").unwrap();
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let m = PackfsMount::new(&img, &[]);
    let errno = |name: &str| {
        std::fs::symlink_metadata(m.path().join("d").join(name))
            .unwrap_err()
            .raw_os_error()
    };
    assert_eq!(errno(&"b".repeat(300)), Some(libc::ENAMETOOLONG));
    assert_eq!(errno(&"b".repeat(256)), Some(libc::ENOENT));
    let out = Command::new(packfs_bin())
        .arg("cat")
        .arg(&img)
        .arg(format!("d/{}", "b".repeat(300)))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("too long"), "{err}");
}

/// Bug: `packfs cat`, `ls` and `extract --path` resolved paths without
/// `..` and without following symlinks, so `cat IMG link` said "not a
/// regular file" and `ls IMG d/../e` found nothing, where the same path
/// under a mount works. They resolve as the kernel does now, with the
/// resolver the Python package uses (moved into mountfs).
#[test]
fn command_line_paths_resolve_as_under_a_mount() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("d/sub")).unwrap();
    std::fs::create_dir_all(src.join("e")).unwrap();
    std::fs::write(src.join("d/sub/f"), b"deep").unwrap();
    std::os::unix::fs::symlink("d/sub", src.join("to_sub")).unwrap();
    std::os::unix::fs::symlink("sub/f", src.join("d/to_f")).unwrap();
    std::os::unix::fs::symlink("loop2", src.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", src.join("loop2")).unwrap();
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let packfs = |args: &[&str]| Command::new(packfs_bin()).args(args).output().unwrap();
    let i = img.to_str().unwrap();
    for path in ["d/to_f", "e/../d/sub/f", "to_sub/f", "/to_sub/../sub/f"] {
        let out = packfs(&["cat", i, path]);
        assert_eq!(
            out.stdout,
            b"deep",
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(packfs(&["ls", i, "to_sub"]).stdout, b"f\n");
    let long = String::from_utf8(packfs(&["ls", "-l", i, "to_sub"]).stdout).unwrap();
    assert!(long.trim_end().ends_with("to_sub -> d/sub"), "{long}");
    let out = packfs(&["cat", i, "loop1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("too many levels of symbolic links"),
        "{err}"
    );
    let dest = t.path().join("out");
    run(Command::new(packfs_bin())
        .args(["extract", i, "--path", "to_sub", "-o"])
        .arg(&dest));
    assert_eq!(std::fs::read(dest.join("f")).unwrap(), b"deep");
}

/// Bugs: the mount table was read as UTF-8, so one mountpoint anywhere
/// whose name is not (any user's) made it read as empty: `umount` of every
/// other mount said "not mounted" and a second mount there was not refused
/// as such; and a mountpoint given through a symlink was never found again
/// (`umount LINK` said "not mounted").
#[test]
fn mounts_are_found_past_a_non_utf8_mountpoint_and_through_a_symlink() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let odd = t.path().join(OsStr::from_bytes(b"m\xff"));
    let ok = t.path().join("ok");
    let real = t.path().join("real");
    for d in [&odd, &ok, &real] {
        std::fs::create_dir(d).unwrap();
    }
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let packfs = |args: &[&OsStr]| Command::new(packfs_bin()).args(args).output().unwrap();
    let s = |p: &Path| p.as_os_str().to_owned();
    let i = s(&img);
    // Whatever fails, no mount is left: one at a name that is not UTF-8
    // would break the mount table's readers in the other tests.
    struct Lazy(Vec<PathBuf>);
    impl Drop for Lazy {
        fn drop(&mut self) {
            for p in &self.0 {
                let _ = Command::new("umount").arg("-l").arg(p).output();
            }
        }
    }
    let _lazy = Lazy(vec![odd.clone(), ok.clone(), real.clone()]);
    for mp in [&odd, &ok, &link] {
        assert_ok(packfs(&["mount".as_ref(), &i, &s(mp)]));
    }
    let again = packfs(&["mount".as_ref(), &i, &s(&ok)]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("already mounted"),
        "{err}"
    );
    for mp in [&ok, &link, &odd] {
        assert_ok(packfs(&["umount".as_ref(), &s(mp)]));
    }
    assert!(std::fs::read_dir(&real).unwrap().next().is_none());
}

/// Bug: `pack` and `extract` panicked (exit 101) writing their summary to
/// a closed stderr (`2>&1 | head`, a dead ssh session), after the work had
/// been done: scripts saw a failure for a good image.
#[test]
fn a_closed_stderr_does_not_fail_finished_work() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let run_closed = |args: &[&std::ffi::OsStr]| {
        let mut child = Command::new(packfs_bin())
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        child.wait().unwrap()
    };
    let img = t.path().join("i.sqfs");
    let st = run_closed(&[
        "pack".as_ref(),
        src.as_os_str(),
        "-o".as_ref(),
        img.as_os_str(),
    ]);
    assert!(st.success(), "pack: {st:?}");
    assert!(img.exists());
    let out = t.path().join("out");
    let st = run_closed(&[
        "extract".as_ref(),
        img.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(st.success(), "extract: {st:?}");
}

/// Bug: an image whose path holds a comma could not be mounted by a user
/// (fusermount3: "unknown option 'b.sqfs'"): the file system name in the
/// mount options was not escaped for local images, as it was for URLs.
#[test]
fn an_image_path_with_a_comma_is_escaped_in_the_mount_options() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let img = t.path().join("a,b.sqfs");
    pack(&src, &img, &[]);
    let m = PackfsMount::new(&img, &[]);
    // The mount table's source field for this mountpoint.
    let table = std::fs::read("/proc/self/mounts").unwrap();
    let table = String::from_utf8_lossy(&table);
    let want = m.path().to_str().unwrap();
    let listed = table
        .lines()
        .find_map(|l| {
            let mut f = l.split(' ');
            let (source, mp) = (f.next()?, f.next()?);
            (mp == want).then(|| source.to_string())
        })
        .expect("listed");
    assert!(
        listed.ends_with("a%2Cb.sqfs") && !listed.contains(','),
        "{listed}"
    );
    assert!(std::fs::read_dir(m.path()).unwrap().next().is_some());
}

/// Bug: a mount whose daemon and watcher were both killed (the OOM killer,
/// the end of a job's cgroup) stayed as a dead mount (ENOTCONN), and every
/// later `packfs mount` at that place failed with "already mounted", with
/// no hint: a venv's fixed mountpoint could not be used again. A dead
/// mount is removed now, with a warning.
#[test]
fn a_dead_mount_at_the_mountpoint_is_removed_and_the_mount_goes_on() {
    if !require_root("killing a mount's processes") {
        return;
    }
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    assert_ok(
        Command::new(packfs_bin())
            .arg("mount")
            .arg(&img)
            .arg(&mp)
            .output()
            .unwrap(),
    );
    let daemon = daemon_pid(&mp);
    // The watcher first, so that nothing cleans up after the daemon.
    let watcher = Command::new("pgrep")
        .arg("-f")
        .arg(format!("unmount-watcher .* {}", mp.display()))
        .output()
        .unwrap();
    let watcher = String::from_utf8_lossy(&watcher.stdout);
    let watcher: Vec<&str> = watcher.split_whitespace().collect();
    assert!(!watcher.is_empty(), "no watcher found");
    for pid in watcher.iter().chain(&[daemon.to_string().as_str()]) {
        signal("-KILL", pid.parse().unwrap());
    }
    let dead = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::metadata(&mp).err().and_then(|e| e.raw_os_error()) == Some(libc::ENOTCONN)
    });
    assert!(dead, "the mount did not die");
    let out = Command::new(packfs_bin())
        .arg("mount")
        .arg(&img)
        .arg(&mp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("dead mount"), "{err}");
    assert_same(
        "remounted",
        &manifest(&mp, &ManifestOptions::default()),
        &manifest(&src, &ManifestOptions::default()),
    );
    assert_ok(
        Command::new(packfs_bin())
            .arg("umount")
            .arg(&mp)
            .output()
            .unwrap(),
    );
}

/// Bug: `mount --stats FILE` took a path in a missing directory (or a
/// directory) without a word, and the daemon's write at the end failed
/// where no one saw it: no statistics, no message. Refused at mount now.
#[test]
fn a_stats_path_that_cannot_be_written_is_refused_at_mount() {
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    for (stats, says) in [
        (t.path().join("nodir/st.json"), "cannot write in"),
        (src.clone(), "is a directory"),
    ] {
        let out = Command::new(packfs_bin())
            .arg("mount")
            .arg(&img)
            .arg(&mp)
            .arg("--stats")
            .arg(&stats)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(e.contains("--stats") && e.contains(says), "{e}");
        assert!(
            std::fs::read_dir(&mp).unwrap().next().is_none(),
            "nothing mounted"
        );
    }
}

/// Bug: when `packfs run`'s command left a background process with a file
/// open in the mount, the unmount at the end failed (busy) and the mount
/// and its daemon stayed for good. It is detached instead, and goes when
/// that file is closed.
#[test]
fn run_detaches_a_busy_mount_and_it_goes_when_the_file_is_closed() {
    if !require_root("mounts for `packfs run`") {
        return;
    }
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let mp = t.path().join("mp");
    let out = Command::new(packfs_bin())
        .arg("run")
        .arg(format!("{}:{}", img.display(), mp.display()))
        .args(["--", "sh", "-c"])
        // Opened before the shell starts the background job, which
        // inherits it: the file is open when `run` unmounts.
        .arg(format!(
            "exec 3< {}/f; sleep 2 > /dev/null 2>&1 & exit 0",
            mp.display()
        ))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("detached instead"), "{e}");
    let listed = || {
        String::from_utf8_lossy(&std::fs::read("/proc/self/mounts").unwrap())
            .contains(mp.to_str().unwrap())
    };
    assert!(!listed(), "still in the mount table");
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !a_process_has_arg(img.as_os_str().as_encoded_bytes())
    });
    assert!(gone, "the daemon outlived the last open file");
}

/// Bug: a mount in the background sent its log to /dev/null, so the one
/// line README promises for a read that fails (naming the image and the
/// offset) was nowhere. `--log FILE` keeps it.
#[test]
fn a_background_mount_logs_a_failed_read_to_its_log_file() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("big"), bytes(7, 3 << 20, false)).unwrap();
    let img = t.path().join("i.sqfs");
    pack(&src, &img, &[]);
    let log = t.path().join("daemon.log");
    let m = PackfsMount::new(&img, &["--log", log.to_str().unwrap()]);
    let len = std::fs::metadata(&img).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(len / 4).unwrap();
    let e = std::fs::read(m.path().join("big")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains(img.to_str().unwrap()), "log: {said:?}");
}

/// Bug: SIGINT or SIGTERM to `packfs mount` while it waited for a slow
/// open (a stalled server, a large preload) ended the command, which said
/// it was interrupted, while the daemon it had forked went on and mounted
/// later. The daemon is stopped with it now.
#[test]
fn a_mount_interrupted_while_waiting_leaves_no_daemon_and_no_mount() {
    let t = scratch();
    fixture_image(t.path());
    let server = crate::common::servers::RangeServer::start(t.path(), &[]);
    // Every request hangs, not just the next: an open whose first request
    // is not on its critical path (the hash record's trailer is read beside
    // the superblock) would otherwise finish and mount before the signal.
    server.stall();
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let _cleanup = LeftMount(mp.clone());
    let mut child = Command::new(packfs_bin())
        .arg("mount")
        .arg(server.url("i.sqfs"))
        .arg(&mp)
        .spawn()
        .unwrap();
    let held = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(25));
        server.held() > 0
    });
    assert!(held, "the open never reached the server");
    signal("-INT", child.id());
    let st = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGINT), "{st:?}");
    server.resume();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let table = String::from_utf8_lossy(&std::fs::read("/proc/self/mounts").unwrap()).into_owned();
    assert!(
        !table.contains(mp.to_str().unwrap()),
        "mounted after the interruption"
    );
    assert!(
        !a_process_has_arg(mp.as_os_str().as_encoded_bytes()),
        "a daemon for the interrupted mount is still running"
    );
}

/// Found by a new user's review: `packfs umount` returned as soon as the
/// mount was gone, while its daemon was still writing `--stats` and
/// `--record-access`; a script reading them next found them missing or
/// short. It now returns once the daemon has ended.
#[test]
fn umount_returns_once_the_daemon_has_ended() {
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    for i in 0..5 {
        let mp = t.path().join(format!("mp{i}"));
        let stats = t.path().join(format!("stats{i}.json"));
        std::fs::create_dir(&mp).unwrap();
        run(Command::new(packfs_bin())
            .arg("mount")
            .arg(&img)
            .arg(&mp)
            .arg("--stats")
            .arg(&stats));
        let pid = daemon_of(&mp).expect("no daemon found for the mount");
        std::fs::read(mp.join("small.txt")).unwrap();
        run(Command::new(packfs_bin()).arg("umount").arg(&mp));
        // Gone, or a zombie its new parent has yet to reap; a process
        // whose descriptors are closed may still be in its exit for an
        // instant (not a daemon that sleeps for 20 of them).
        let state = || {
            let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            s.rsplit(") ").next().unwrap_or("").chars().next()
        };
        let ended = (0..20).any(|_| {
            let ended = matches!(state(), None | Some('Z') | Some('X'));
            if !ended {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            ended
        });
        assert!(ended, "round {i}: the daemon is {:?}", state());
        let text = std::fs::read_to_string(&stats).unwrap();
        assert!(text.contains("\"requests\""), "round {i}: {text}");
    }
}

/// Found by a new user's review: `packfs run` killed with SIGKILL
/// (Slurm's after its grace time, the OOM killer) left its mounts, their
/// daemons and its command running. Each daemon now follows a pipe from
/// `run` and ends its mount when `run` is gone; the command gets SIGTERM.
#[test]
fn a_run_killed_with_sigkill_takes_its_mount_and_command_with_it() {
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    let marker = t.path().join("command-ran");
    let mut run = ChildGuard(
        Command::new(packfs_bin())
            .arg("run")
            .arg(format!("{}:{}", img.display(), mp.display()))
            .args(["--", "sh", "-c"])
            .arg(format!("touch {}; exec sleep 1000", marker.display()))
            // Left running by a failure, the command must not hold the
            // test harness's output open.
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _gone = PackfsMountAt(&mp);
    assert!(
        within_10s(|| marker.exists() && listed_in_mounts(&mp)),
        "not started"
    );
    let command = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()?;
            (ppid == run.0.id()).then_some(pid)
        })
        .expect("the command is run's child");
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    let unmounted = within_10s(|| !listed_in_mounts(&mp));
    let ended = within_10s(|| {
        std::fs::read_to_string(format!("/proc/{command}/stat")).map_or(true, |s| {
            s.rsplit(") ").next().is_some_and(|r| r.starts_with('Z'))
        })
    });
    let daemon_gone = within_10s(|| daemon_of(&mp).is_none());
    if !ended {
        // SAFETY: killing the command this test started.
        unsafe { libc::kill(command as i32, libc::SIGKILL) };
    }
    assert!(unmounted, "still mounted");
    assert!(ended, "the command still runs");
    assert!(daemon_gone, "the daemon still runs");
}

/// Found by a review of the fix above: `run`'s end came to its daemons as
/// a signal, and after a first one (Slurm's SIGTERM to the whole step) a
/// second ends a daemon at once, without serving the files still open or
/// writing `--stats` and `--record-access`. `run` gone now only ever
/// counts as a first stop.
#[test]
fn a_run_gone_after_its_daemon_was_stopped_lets_it_finish() {
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    let (stats, marker) = (t.path().join("stats.json"), t.path().join("open"));
    let mut run = ChildGuard(
        Command::new(packfs_bin())
            .arg("run")
            .arg(format!("{}:{}", img.display(), mp.display()))
            .arg("--stats")
            .arg(&stats)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "exec 3<{}; touch {}; exec sleep 1000",
                mp.join("small.txt").display(),
                marker.display()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _gone = PackfsMountAt(&mp);
    assert!(within_10s(|| marker.exists()), "not started");
    let daemon = daemon_of(&mp).expect("no daemon for the mount");
    signal("-TERM", daemon);
    assert!(within_10s(|| !listed_in_mounts(&mp)), "not detached");
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    // The command goes with run (SIGTERM), closing the file; only then
    // does the daemon end, stats written.
    assert!(
        within_10s(|| std::fs::read_to_string(&stats).is_ok_and(|s| s.contains("\"requests\""))),
        "--stats not written"
    );
}

/// Found by a review of the fix above: the daemon never accepted the
/// connections `umount` made, so a script retrying `umount` on a busy
/// mount filled the socket's backlog (64), and the `umount` that then
/// succeeded no longer waited. Connections are accepted now.
#[test]
fn umount_still_waits_after_many_refused_attempts() {
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let stats = t.path().join("stats.json");
    run(Command::new(packfs_bin())
        .arg("mount")
        .arg(&img)
        .arg(&mp)
        .arg("--stats")
        .arg(&stats));
    let _gone = PackfsMountAt(&mp);
    let busy = std::fs::File::open(mp.join("small.txt")).unwrap();
    for _ in 0..80 {
        let out = Command::new(packfs_bin())
            .arg("umount")
            .arg(&mp)
            .output()
            .unwrap();
        assert!(!out.status.success(), "unmounted while busy");
    }
    drop(busy);
    run(Command::new(packfs_bin()).arg("umount").arg(&mp));
    let text = std::fs::read_to_string(&stats).unwrap_or_default();
    assert!(
        text.contains("\"requests\""),
        "--stats not written when umount returned"
    );
}

/// The unmount watcher of the mount at `mp`: the process running
/// `packfs unmount-watcher FD MP ...`.
fn watcher_of(mp: &Path) -> Option<u32> {
    let mp = std::fs::canonicalize(mp).ok()?;
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        (args.get(1) == Some(&&b"unmount-watcher"[..])
            && args.get(3) == Some(&mp.as_os_str().as_encoded_bytes()))
        .then_some(pid)
    })
}

/// Bug: a daemon sent SIGTERM (Slurm's at a job's end or `scancel`),
/// SIGINT or SIGHUP died of it: the watcher removed the mount, but the
/// `--stats` it writes at the end were never written. It now unmounts as
/// `packfs umount` does and writes them; and it no longer holds the
/// directory `packfs mount` was started in.
#[test]
fn a_signalled_daemon_unmounts_and_writes_its_stats() {
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    for sig in ["-TERM", "-INT", "-HUP"] {
        let mp = t.path().join(format!("mp{sig}"));
        let stats = t.path().join(format!("stats{sig}.json"));
        std::fs::create_dir(&mp).unwrap();
        run(Command::new(packfs_bin())
            .arg("mount")
            .arg(&img)
            .arg(&mp)
            .arg("--stats")
            .arg(&stats)
            .current_dir(t.path()));
        let _gone = PackfsMountAt(&mp);
        assert_eq!(
            std::fs::read(mp.join("small.txt")).unwrap(),
            std::fs::read(src.join("small.txt")).unwrap()
        );
        // The watcher is forked from the daemon and then execs itself: until
        // the exec is done (a while on a loaded machine) it bears the
        // daemon's command line, and `daemon_of` could find it instead.
        assert!(
            within_10s(|| watcher_of(&mp).is_some()),
            "no unmount watcher for the mount"
        );
        let watcher = watcher_of(&mp).unwrap();
        let pid = daemon_of(&mp).expect("no daemon found for the mount");
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
        assert_eq!(
            cwd,
            Path::new("/"),
            "the daemon holds the caller's directory"
        );
        // Found by a new user's review: the unmount watcher held it.
        let cwd = std::fs::read_link(format!("/proc/{watcher}/cwd")).unwrap();
        assert_eq!(
            cwd,
            Path::new("/"),
            "the watcher holds the caller's directory"
        );
        signal(sig, pid);
        assert!(
            within_10s(|| daemon_of(&mp).is_none()),
            "{sig}: the daemon is still running"
        );
        assert!(!listed_in_mounts(&mp), "{sig}: still mounted");
        let text = std::fs::read_to_string(&stats)
            .unwrap_or_else(|e| panic!("{sig}: no stats at {}: {e}", stats.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["read_bytes"].as_u64().unwrap() > 0, "{sig}: {v}");
    }
}

/// The same for a mount in use: the first SIGTERM detaches it at once,
/// a file open through it is still served until closed, and the daemon
/// ends then; a foreground daemon stopped this way exits 0, and a second
/// signal ends one at once.
#[test]
fn a_signalled_daemon_serves_open_files_until_closed_and_a_second_signal_ends_it() {
    use std::io::Read;
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    let want = std::fs::read(src.join("small.txt")).unwrap();
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let stats = t.path().join("stats.json");
    let mut child = Command::new(packfs_bin())
        .arg("mount")
        .arg("--foreground")
        .arg(&img)
        .arg(&mp)
        .arg("--stats")
        .arg(&stats)
        .spawn()
        .unwrap();
    let _gone = PackfsMountAt(&mp);
    assert!(within_10s(|| listed_in_mounts(&mp)), "never mounted");
    let mut held = std::fs::File::open(mp.join("small.txt")).unwrap();
    signal("-TERM", child.id());
    assert!(within_10s(|| !listed_in_mounts(&mp)), "not detached");
    let mut got = Vec::new();
    held.read_to_end(&mut got).unwrap();
    assert_eq!(got, want, "an open file was not served after the signal");
    assert!(
        child.try_wait().unwrap().is_none(),
        "ended with a file open"
    );
    drop(held);
    let st = within_10s(|| child.try_wait().unwrap().is_some());
    assert!(st, "the daemon did not end once its last file was closed");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(stats.exists(), "no stats written");

    // A second signal while a file is held: gone at once, with 128+N.
    std::fs::remove_file(&stats).unwrap();
    let mut child = Command::new(packfs_bin())
        .arg("mount")
        .arg("--foreground")
        .arg(&img)
        .arg(&mp)
        .spawn()
        .unwrap();
    assert!(within_10s(|| listed_in_mounts(&mp)), "never mounted");
    let held = std::fs::File::open(mp.join("small.txt")).unwrap();
    signal("-TERM", child.id());
    assert!(within_10s(|| !listed_in_mounts(&mp)), "not detached");
    signal("-TERM", child.id());
    assert!(
        within_10s(|| child.try_wait().unwrap().is_some()),
        "a second signal did not end it"
    );
    assert_eq!(child.wait().unwrap().code(), Some(128 + libc::SIGTERM));
    drop(held);
}

/// Unmounts (lazily) whatever is still mounted at a test's mountpoint
/// when the test ends, passed or not.
struct PackfsMountAt<'a>(&'a Path);
impl Drop for PackfsMountAt<'_> {
    fn drop(&mut self) {
        if listed_in_mounts(self.0) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}

/// Bug: `packfs run` passed every SIGINT on to its command, so a Ctrl-C
/// typed at a terminal, which the kernel sends to the whole foreground
/// process group, reached the command twice, cutting short one that
/// handles the first (saving a checkpoint). A signal sent to `packfs run`
/// alone (`kill`) must still reach the command, once.
/// Runs `packfs run IMG:MP -- python3 -c SCRIPT` on a pty (the script in a
/// process group of its own with `own_group`), types Ctrl-C, then (with
/// `usr1`) kills `run` with SIGUSR1, and returns what the command counted
/// (`int N usr1 M`) and run's status.
fn ctrl_c_through_run(own_group: bool, usr1: bool) -> (String, Option<i32>) {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let (master, slave) = pty();
    // Counts SIGINT and SIGUSR1 for two seconds after saying it is ready.
    let script = "import os, signal, time\n\
        n = {signal.SIGINT: 0, signal.SIGUSR1: 0}\n\
        def h(s, f): n[s] += 1\n\
        signal.signal(signal.SIGINT, h); signal.signal(signal.SIGUSR1, h)\n\
        print('COUNTING', flush=True)\n\
        end = time.time() + 2\n\
        while time.time() < end: time.sleep(0.02)\n\
        print('int', n[signal.SIGINT], 'usr1', n[signal.SIGUSR1], 'end', flush=True)\n";
    let mut cmd = Command::new(packfs_bin());
    cmd.arg("run")
        .arg(format!("{}:{}", img.display(), mp.display()))
        .args(["--", "python3", "-c"])
        .arg(match own_group {
            true => format!("import os\nos.setpgid(0, 0)\n{script}"),
            false => script.to_string(),
        })
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe; the child's stdin is
    // the pty, which becomes its controlling terminal.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    // Read the terminal on a thread: what the command prints, until it ends.
    let mut reader = master.try_clone().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n) = reader.read(&mut b) {
            if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let wait_for = |what: &str, said: &mut Vec<u8>| {
        while !String::from_utf8_lossy(said).contains(what) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(b) => said.extend(b),
                Err(_) => panic!(
                    "no {what:?} from the command: {}",
                    String::from_utf8_lossy(said)
                ),
            }
        }
    };
    // A token no message of packfs holds ("ready" is in "already").
    wait_for("COUNTING", &mut said);
    // The terminal's Ctrl-C, then a kill of `packfs run` alone.
    (&master).write_all(b"\x03").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    if usr1 {
        signal("-USR1", child.id());
    }
    wait_for(" end", &mut said);
    let st = child.wait().unwrap();
    assert!(!listed_in_mounts(&mp), "still mounted after run");
    (String::from_utf8_lossy(&said).into_owned(), st.code())
}

#[test]
fn run_passes_a_killed_signal_on_but_not_a_terminal_ctrl_c() {
    let (text, code) = ctrl_c_through_run(false, true);
    assert!(text.contains("int 1 usr1 1"), "{code:?}: {text}");
    assert_eq!(code, Some(0), "{text}");
}

/// A command in a process group of its own (as under coreutils `timeout`
/// or `setsid`) does not get the terminal's Ctrl-C from the kernel: `run`
/// must pass it on (a first fix of the double Ctrl-C dropped it).
#[test]
fn run_passes_a_terminal_ctrl_c_to_a_command_in_its_own_process_group() {
    let (text, code) = ctrl_c_through_run(true, false);
    assert!(text.contains("int 1 usr1 0"), "{code:?}: {text}");
    assert_eq!(code, Some(0), "{text}");
}

/// Bug: `extract` of an image whose member cannot be read (encrypted)
/// said "a.txt: encrypted: permission denied" without naming the image,
/// and left behind the empty output directory it had made.
#[test]
fn extract_names_the_image_and_leaves_no_empty_directory_of_its_own() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a.txt"), b"secret").unwrap();
    let zip = t.path().join("enc.zip");
    run(Command::new("zip")
        .args(["-q", "-e", "-P", "pw"])
        .arg(&zip)
        .arg("a.txt")
        .current_dir(&src));
    let out_dir = t.path().join("out");
    let out = Command::new(packfs_bin())
        .arg("extract")
        .arg(&zip)
        .arg("-o")
        .arg(&out_dir)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("packfs: {}: a.txt: encrypted", zip.display())),
        "{e}"
    );
    assert!(!out_dir.exists(), "the output directory was left behind");
}

/// Bug: a `--disk-cache` directory that cannot be used was warned about
/// twice (the options were built once to check them, once to use them).
#[test]
fn an_unusable_disk_cache_is_warned_about_once() {
    let t = scratch();
    fixture_image(t.path());
    let server = crate::common::servers::RangeServer::start(t.path(), &[]);
    let out = Command::new(packfs_bin())
        .arg("ls")
        .arg(server.url("i.sqfs"))
        .args(["--disk-cache", "/proc/no-such-dir"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert_eq!(
        e.matches("--disk-cache /proc/no-such-dir").count(),
        1,
        "{e}"
    );
}

/// A cancelled Slurm step signals every process in it: `packfs run`, its
/// command and the mount's daemon alike. The daemon now unmounts itself on
/// SIGTERM; `run` then finds the mount gone and must clean up quietly (it
/// warned "not mounted") and still remove the mountpoint it made.
#[test]
fn run_cancelled_with_its_daemon_cleans_up_without_warnings() {
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("made/mp");
    let mut child = Command::new(packfs_bin())
        .arg("run")
        .arg(format!("{}:{}", img.display(), mp.display()))
        .args(["--", "sleep", "30"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(within_10s(|| listed_in_mounts(&mp)), "never mounted");
    let daemon = daemon_of(&mp).expect("no daemon for the mount");
    let sleeper = within_10s(|| {
        std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            std::fs::read(p.path().join("cmdline")).is_ok_and(|c| c.starts_with(b"sleep\x0030"))
        })
    });
    assert!(sleeper, "the command never started");
    // As Slurm does: every process of the step, the daemon first.
    signal("-TERM", daemon);
    signal("-TERM", child.id());
    let st = child.wait().unwrap();
    let mut e = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e).unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{e}");
    assert!(!e.contains("warning"), "{e}");
    assert!(!listed_in_mounts(&mp), "still mounted");
    assert!(
        !t.path().join("made").exists(),
        "the mountpoint run made is left"
    );
}

/// Bug: closing, fsyncing or seeking (SEEK_DATA) a file of a mount served
/// by `fuser`'s threads logged "[Not Implemented] flush(...)" and the like
/// in the mount's --log, which reads like a failure; the answers
/// (ENOSYS, which the kernel remembers) are unchanged, and quiet.
#[test]
fn closing_syncing_and_seeking_files_log_nothing() {
    use std::os::fd::AsRawFd;
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    for transport in ["dev", "auto"] {
        let mp = t.path().join(format!("mp-{transport}"));
        let log = t.path().join(format!("log-{transport}"));
        std::fs::create_dir(&mp).unwrap();
        run(Command::new(packfs_bin())
            .arg("mount")
            .arg(&img)
            .arg(&mp)
            .args(["--transport", transport, "--log"])
            .arg(&log));
        let _gone = PackfsMountAt(&mp);
        let f = std::fs::File::open(mp.join("small.txt")).unwrap();
        f.sync_all().unwrap();
        // SAFETY: lseek on a descriptor this test owns.
        let at = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
        assert_eq!(at, 0, "{transport}");
        drop(f);
        std::fs::File::open(&mp).unwrap().sync_all().unwrap();
        assert_eq!(
            std::fs::read(mp.join("small.txt")).unwrap(),
            std::fs::read(src.join("small.txt")).unwrap()
        );
        run(Command::new(packfs_bin()).arg("umount").arg(&mp));
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!said.contains("Not Implemented"), "{transport}: {said}");
    }
}

/// Bug: `kill -USR1` (how a mount is asked for its `--stats`) killed a
/// daemon mounted without `--stats`: SIGUSR1's default action ends a
/// process. It is ignored there now.
#[test]
fn sigusr1_to_a_mount_without_stats_does_not_end_it() {
    let t = scratch();
    let (src, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    run(Command::new(packfs_bin()).arg("mount").arg(&img).arg(&mp));
    let _gone = PackfsMountAt(&mp);
    let pid = daemon_of(&mp).expect("no daemon for the mount");
    signal("-USR1", pid);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(daemon_of(&mp), Some(pid), "the daemon ended");
    assert_eq!(
        std::fs::read(mp.join("small.txt")).unwrap(),
        std::fs::read(src.join("small.txt")).unwrap()
    );
    run(Command::new(packfs_bin()).arg("umount").arg(&mp));
}

/// A daemon started with SIGHUP ignored (`nohup packfs mount -f ... &`)
/// keeps its mount when the terminal closes; SIGTERM still ends it. (The
/// daemon's signal thread first waited for every stop signal, ignored or
/// not.)
#[test]
fn a_signal_the_caller_ignores_does_not_unmount() {
    use std::os::unix::process::CommandExt;
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let mut cmd = Command::new(packfs_bin());
    cmd.arg("mount").arg("--foreground").arg(&img).arg(&mp);
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let _gone = PackfsMountAt(&mp);
    assert!(within_10s(|| listed_in_mounts(&mp)), "never mounted");
    signal("-HUP", child.id());
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(listed_in_mounts(&mp), "an ignored SIGHUP unmounted");
    assert!(child.try_wait().unwrap().is_none());
    signal("-TERM", child.id());
    assert!(
        within_10s(|| child.try_wait().unwrap().is_some()),
        "SIGTERM did not end it"
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!listed_in_mounts(&mp));
}

/// An image by mksquashfs of `src` with every table stored raw, edited by
/// `edit` (names and directory entries are then plain bytes to change).
fn edited_raw_image(src: &Path, img: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    mksquashfs(src, img, &["-noI", "-noD", "-noF", "-noX"]);
    let mut b = std::fs::read(img).unwrap();
    edit(&mut b);
    std::fs::write(img, b).unwrap();
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("name in the image")
}

/// Bug: a damaged image that lists a name twice, first as a symlink to a
/// file outside the output directory and then as a file, made `extract`
/// write the file's bytes through the link: anywhere, run as root. Every
/// entry is now created new, and the name met twice is the image's error.
#[test]
fn extract_never_writes_through_a_name_listed_twice() {
    let t = scratch();
    let (src, outside) = (t.path().join("tree"), t.path().join("outside"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, "original").unwrap();
    std::os::unix::fs::symlink(&victim, src.join("zzzzzzzzzzzz0")).unwrap();
    std::fs::write(src.join("zzzzzzzzzzzz1"), "from the image").unwrap();
    let img = t.path().join("dup.sqfs");
    edited_raw_image(&src, &img, |b| {
        let at = find(b, b"zzzzzzzzzzzz1");
        b[at + 12] = b'0';
    });
    let e = error_of(
        Command::new(packfs_bin())
            .arg("extract")
            .arg(&img)
            .arg("-o")
            .arg(t.path().join("out")),
    );
    assert!(
        e.contains(&format!(
            "{}: zzzzzzzzzzzz0: corrupt image: the directory lists this name twice",
            img.display()
        )),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
}

/// Bug: a damaged image whose directory lists itself (one bit flipped in
/// a directory entry does it) sent `ls -R` into endless output and made
/// `extract` nest directories until the path was too long, blaming the
/// output ("file name too long"). Both now stop at the cycle, naming it.
#[test]
fn a_directory_listed_inside_itself_ends_ls_and_extract_with_an_error() {
    let t = scratch();
    let src = t.path().join("tree");
    std::fs::create_dir_all(src.join("loopdirAAAA/childBBBB")).unwrap();
    std::fs::write(src.join("loopdirAAAA/fileCCCC"), "hi").unwrap();
    let img = t.path().join("cycle.sqfs");
    // A directory entry starts with the u16 offset of its inode, 8 bytes
    // before its name: the child's entry is pointed at its parent's inode.
    edited_raw_image(&src, &img, |b| {
        let parent = find(b, b"loopdirAAAA") - 8;
        let child = find(b, b"childBBBB") - 8;
        let at = [b[parent], b[parent + 1]];
        b[child..child + 2].copy_from_slice(&at);
    });
    let bounded = |args: &[&str]| {
        let out = Command::new("timeout")
            .arg("20")
            .arg(packfs_bin())
            .args(args)
            .arg(&img)
            .args(if args[0] == "extract" {
                vec!["-o".to_string(), t.path().join("out").display().to_string()]
            } else {
                vec![]
            })
            .output()
            .unwrap();
        assert!(
            out.stdout.len() < 4096,
            "{} bytes of output",
            out.stdout.len()
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let want = format!(
        "{}: loopdirAAAA/childBBBB: corrupt image: a directory listed inside itself",
        img.display()
    );
    for args in [&["ls", "-R"][..], &["extract"]] {
        let (code, e) = bounded(args);
        assert_eq!(code, Some(1), "{args:?}: {e}");
        assert!(e.contains(&want), "{args:?}: {e}");
    }
}

/// Found by a review: damage met while opening (a metadata block that
/// does not decode) and while listing a directory under `ls -R` was
/// reported without the image's name ("corrupt image: metadata block at
/// offset N: ..."), which says nothing in a job that reads several.
#[test]
fn damage_found_at_open_or_in_a_listing_names_the_image() {
    let t = scratch();
    let src = t.path().join("tree");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/fileCCCC"), "hi").unwrap();
    std::fs::write(src.join("top.txt"), "top").unwrap();
    let gz = t.path().join("gz.sqfs");
    mksquashfs(&src, &gz, &["-comp", "gzip"]);
    let mut b = std::fs::read(&gz).unwrap();
    let inodes = u64::from_le_bytes(b[64..72].try_into().unwrap()) as usize;
    // Past the block's length word and the zlib header: a deflate block
    // of the reserved type, which no decoder takes.
    b[inodes + 4] = 0xff;
    std::fs::write(&gz, b).unwrap();
    let raw = t.path().join("raw.sqfs");
    // The directory header (count, start, inode number) before the
    // entry (offset, inode delta, type, size) of `sub`'s only file.
    edited_raw_image(&src, &raw, |b| {
        let count = find(b, b"fileCCCC") - 8 - 12;
        b[count..count + 4].copy_from_slice(&0x0404_0404u32.to_le_bytes());
    });
    for (img, args, want) in [
        (
            &gz,
            &["info"][..],
            format!("{}: metadata block", gz.display()),
        ),
        (
            &raw,
            &["ls", "-R"],
            format!("{}: sub: corrupt image", raw.display()),
        ),
    ] {
        let e = error_of(Command::new(packfs_bin()).args(args).arg(img));
        assert!(e.contains(&want), "{args:?}: {e}");
    }
}

/// Found by a review: a symlink whose target is empty (SquashFS) or holds
/// a NUL byte (ZIP), and an extended attribute name that holds one, are
/// damage, but `extract` blamed its output ("x/s: file name contained an
/// unexpected NUL byte", "no such file or directory", "no such
/// attribute") and a mount answered listxattr EIO without a word. Each is
/// now the image's error, naming the entry. (A ZIP's empty link is an
/// empty file, as unzip makes it.)
#[test]
fn damaged_symlink_targets_and_xattr_names_are_the_images_errors() {
    let t = scratch();
    let zip = t.path().join("nul.zip");
    let script = "import sys, zipfile\n\
        with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
        \x20   i = zipfile.ZipInfo('nul')\n\
        \x20   i.external_attr = (0o120777 << 16)\n\
        \x20   i.create_system = 3\n\
        \x20   z.writestr(i, b'a\\0b')\n";
    run(Command::new("python3").args(["-c", script]).arg(&zip));
    let src = t.path().join("tree");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "a").unwrap();
    std::os::unix::fs::symlink("TTTTTTTT", src.join("s")).unwrap();
    let link = t.path().join("link.sqfs");
    // A symlink inode's target length (u32) comes right before the target.
    edited_raw_image(&src, &link, |b| {
        let at = find(b, b"TTTTTTTT") - 4;
        b[at..at + 4].fill(0);
    });
    xattr::set(src.join("a.txt"), "user.k", b"v").unwrap();
    std::fs::remove_file(src.join("s")).unwrap();
    let xa = t.path().join("xattr.sqfs");
    // The name is stored without its "user." prefix, then its value's
    // length (u32) and the value.
    edited_raw_image(&src, &xa, |b| {
        let at = find(b, b"k\x01\0\0\0v");
        b[at] = 0;
    });
    let cases = [
        (
            &zip,
            "nul: corrupt image: the symlink's target holds a NUL byte",
        ),
        (&link, "s: corrupt image: the symlink's target is empty"),
        (&xa, "a.txt: corrupt image: extended attribute name"),
    ];
    for (i, (img, want)) in cases.into_iter().enumerate() {
        let e = error_of(
            Command::new(packfs_bin())
                .arg("extract")
                .arg(img)
                .arg("-o")
                .arg(t.path().join(format!("out{i}"))),
        );
        assert!(e.contains(&format!("{}: {want}", img.display())), "{e}");
    }
}

/// Found by a review: the ZIP reader logged every damaged member it met
/// ("[ERROR mountfs::zip::decoders] zip: x: CRC-32 mismatch ...") and returned
/// the error too, so `cat` and `extract` printed the damage twice and a
/// mount's log had it twice. The error is said once, by whoever gets it.
#[test]
fn a_damaged_zip_member_is_reported_once() {
    let t = scratch();
    let zip = t.path().join("z.zip");
    let script = "import sys, zipfile\n\
        with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_STORED) as z:\n\
        \x20   z.writestr('text.txt', b'stored text that will be damaged ' * 10)\n";
    run(Command::new("python3").args(["-c", script]).arg(&zip));
    let mut b = std::fs::read(&zip).unwrap();
    let at = find(&b, b"stored text");
    b[at] ^= 0x20;
    std::fs::write(&zip, b).unwrap();
    for args in [&["cat"][..], &["extract"]] {
        let mut cmd = Command::new(packfs_bin());
        cmd.args(args).arg(&zip);
        if args[0] == "cat" {
            cmd.arg("text.txt");
        } else {
            cmd.arg("-o").arg(t.path().join("out"));
        }
        let e = error_of(&mut cmd);
        assert_eq!(e.matches("CRC-32 mismatch").count(), 1, "{args:?}: {e}");
        assert!(
            e.contains("text.txt: CRC-32 mismatch") && !e.contains("[ERROR"),
            "{e}"
        );
    }
}

/// Found by a review: a mount's log line for a read it failed said
/// "corrupt image: data block at ...: gzip stream is corrupt" with no
/// image, so a `run --log` file that several mounts share could not say
/// which image was damaged.
#[test]
fn a_mounts_log_names_the_image_of_a_failed_read() {
    let t = scratch();
    let src = t.path().join("tree");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.txt"), bytes(7, 300_000, true)).unwrap();
    let img = t.path().join("damaged.sqfs");
    mksquashfs(&src, &img, &["-comp", "gzip"]);
    let mut b = std::fs::read(&img).unwrap();
    // The first data block follows the 96-byte superblock; past its zlib
    // header, a deflate block of the reserved type.
    b[96 + 2] = 0xff;
    std::fs::write(&img, b).unwrap();
    let (mp, log) = (t.path().join("mp"), t.path().join("log"));
    std::fs::create_dir(&mp).unwrap();
    run(Command::new(packfs_bin())
        .arg("mount")
        .arg(&img)
        .arg(&mp)
        .arg("--log")
        .arg(&log));
    let _gone = PackfsMountAt(&mp);
    let e = std::fs::read(mp.join("big.txt")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    run(Command::new(packfs_bin()).arg("umount").arg(&mp));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.lines()
            .any(|l| l.contains("[ERROR")
                && l.contains(&format!("{}: corrupt image", img.display()))),
        "{said}"
    );
}

/// Found by a review: `ls` wrote names as their bytes to a terminal too,
/// so a damaged or hostile image could send the terminal escape sequences
/// or fake entries with a newline. On a terminal a control character is
/// now `?`, as `ls -q` shows it; to a pipe the bytes are unchanged.
#[test]
fn ls_on_a_terminal_shows_control_characters_as_question_marks() {
    let t = scratch();
    let src = t.path().join("tree");
    std::fs::create_dir_all(&src).unwrap();
    use std::os::unix::ffi::OsStrExt;
    // ESC, a newline and CSI (U+009B, C1) in one name.
    let name = std::ffi::OsStr::from_bytes(b"a\x1b[31mred\nfake\xc2\x9bx");
    std::fs::write(src.join(name), "x").unwrap();
    let img = t.path().join("names.sqfs");
    mksquashfs(&src, &img, &[]);
    let (mut master, slave) = pty();
    let st = Command::new(packfs_bin())
        .arg("ls")
        .arg(&img)
        .stdout(slave)
        .status()
        .unwrap();
    assert!(st.success());
    let said = to_line_end(&mut master);
    assert_eq!(said, b"a?[31mred?fake?x\r\n");
    let piped = Command::new(packfs_bin())
        .arg("ls")
        .arg(&img)
        .output()
        .unwrap();
    assert_eq!(piped.stdout, b"a\x1b[31mred\nfake\xc2\x9bx\n");
}

/// Found by a review: one damaged entry (here a symlink whose target is
/// empty) ended `ls -l` there, and the entries after it were never listed.
/// As `ls` does, the damage is said and the rest listed, with status 1.
#[test]
fn ls_lists_past_a_damaged_entry() {
    let t = scratch();
    let src = t.path().join("tree");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "a").unwrap();
    std::os::unix::fs::symlink("TTTTTTTT", src.join("s")).unwrap();
    std::fs::write(src.join("z.txt"), "z").unwrap();
    let img = t.path().join("link.sqfs");
    edited_raw_image(&src, &img, |b| {
        let at = find(b, b"TTTTTTTT") - 4;
        b[at..at + 4].fill(0);
    });
    let out = Command::new(packfs_bin())
        .args(["ls", "-l"])
        .arg(&img)
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{o}{e}");
    let names: Vec<&str> = o.lines().filter_map(|l| l.split(' ').next_back()).collect();
    assert_eq!(names, ["a.txt", "z.txt"], "{o}");
    assert!(
        e.contains(&format!(
            "{}: s: corrupt image: the symlink's target is empty",
            img.display()
        )),
        "{e}"
    );
}

/// Found by a review: an error quotes names from the command line or the
/// image as they are, so on a terminal a name could send it escape
/// sequences, as `ls` could before. On a terminal, control characters in
/// an error are `?`; piped, they are unchanged.
#[test]
fn errors_on_a_terminal_show_control_characters_as_question_marks() {
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let (mut master, slave) = pty();
    let name = "no\x1b[2Jsuch";
    let st = Command::new(packfs_bin())
        .arg("cat")
        .arg(&img)
        .arg(name)
        .stderr(slave)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(1));
    let said = String::from_utf8_lossy(&to_line_end(&mut master)).into_owned();
    assert!(
        said.contains("no?[2Jsuch") && !said.contains('\x1b'),
        "{said:?}"
    );
    let piped = error_of(Command::new(packfs_bin()).arg("cat").arg(&img).arg(name));
    assert!(piped.contains(name), "{piped}");
}

/// Found by a review of the fix above: warnings (the logger's
/// `packfs: warning: ...` lines and the commands' own) still quoted names
/// as they are. They are shown as errors are now.
#[test]
fn warnings_on_a_terminal_show_control_characters_as_question_marks() {
    let t = scratch();
    let src = t.path().join("s\x1b]0;owned\x07rc");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    let (mut master, slave) = pty();
    let st = Command::new(packfs_bin())
        .args(["pack", "-q", "--exclude", "nothing"])
        .arg(&src)
        .arg(t.path().join("i.sqfs"))
        .stderr(slave)
        .status()
        .unwrap();
    assert!(st.success());
    let said = String::from_utf8_lossy(&to_line_end(&mut master)).into_owned();
    assert!(
        said.contains("warning: ") && said.contains("s?]0;owned?rc") && !said.contains('\x1b'),
        "{said:?}"
    );
}

/// A new pseudo-terminal: its master, and its slave to give a command.
fn pty() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors; no name, termios or size.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here only.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// What the terminal shows up to the end of a line: it may hand over the
/// line and its end apart (it turns "\n" into "\r\n").
fn to_line_end(master: &mut std::fs::File) -> Vec<u8> {
    use std::io::Read;
    let mut said = Vec::new();
    let mut b = [0u8; 4096];
    while !said.ends_with(b"\r\n") {
        let n = master.read(&mut b).unwrap();
        assert!(n > 0, "{said:?}");
        said.extend_from_slice(&b[..n]);
    }
    said
}

/// Bug: as root, fuser mounts with mount(2) directly, where `-o suid,dev`
/// was honoured (fusermount3 strips both from a user's mount): a
/// setuid-root program in an image anyone made would have run as root for
/// every user. Both are refused now with the reason, every mount is
/// nosuid,nodev, and `--allow-other` as root says who can then read.
#[test]
fn a_root_mount_is_nosuid_and_nodev_and_says_what_allow_other_opens() {
    if !require_root("a mount made by root directly, not through fusermount3") {
        return;
    }
    let t = scratch();
    let (_, img) = fixture_image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let _cleanup = LeftMount(mp.clone());
    for o in ["suid", "dev"] {
        let out = Command::new(packfs_bin())
            .arg("mount")
            .arg(&img)
            .arg(&mp)
            .args(["-o", o])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && e.contains(o) && e.contains("setuid"),
            "{e}"
        );
        assert!(!listed_in_mounts(&mp), "-o {o} mounted");
    }
    let out = Command::new(packfs_bin())
        .arg("mount")
        .arg(&img)
        .arg(&mp)
        .arg("--allow-other")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    let _gone = PackfsMountAt(&mp);
    assert!(
        e.contains("packfs: warning: --allow-other as root") && e.contains("every user"),
        "{e}"
    );
    let table = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = table
        .lines()
        .find(|l| l.split(' ').nth(1) == mp.to_str())
        .expect("the mount is not in /proc/self/mounts");
    let flags: Vec<&str> = line.split(' ').nth(3).unwrap().split(',').collect();
    assert!(
        flags.contains(&"nosuid") && flags.contains(&"nodev"),
        "{line}"
    );
}
