//! Mounting where a mount already is, unmounting where none is, and a
//! mountpoint with contents: each refused with a message that says which,
//! and names an option the command takes (`--nonempty`, for `mount` and
//! `run` alike), never a FUSE tool's raw errno.

use crate::common::{pack, packfs_bin, require_root, scratch, KernelMount};
use std::path::Path;
use std::process::{Command, Output};

fn packfs(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(packfs_bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// How many mounts /proc/self/mountinfo shows at `mp`.
fn mounts_at(mp: &Path) -> usize {
    let want = format!(" {} ", mp.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&want))
        .count()
}

fn image(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("in-image.txt"), b"from the image").unwrap();
    let img = dir.join("img.sqfs");
    pack(&src, &img, &[]);
    img
}

#[test]
fn a_second_mount_on_the_same_mountpoint_is_refused_as_such() {
    if !require_root("mounts") {
        return;
    }
    let t = scratch();
    let img = image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let mount = |extra: &[&str]| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["mount".as_ref(), img.as_os_str(), mp.as_os_str()];
        a.extend(extra.iter().map(std::ffi::OsStr::new));
        packfs(&a)
    };
    assert!(mount(&[]).status.success());
    for extra in [&[][..], &["--nonempty"][..], &["-o", "nonempty"][..]] {
        let o = mount(extra);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {e}");
        assert!(
            e.contains("already mounted") && e.contains("packfs umount"),
            "{extra:?}: {e}"
        );
        assert!(!e.contains("not empty"), "{extra:?}: {e}");
    }
    assert_eq!(mounts_at(&mp), 1, "a second mount was stacked");
    let o = packfs(&["umount".as_ref(), mp.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(mounts_at(&mp), 0);
}

/// Found by a new user's review: two mounts started at the same instant
/// on one mountpoint (array tasks on one node) both passed the "already
/// mounted" check and stacked, and each job read the other's image. Now
/// the check and the mount are made under a lock: one mounts, the other
/// is refused, every time.
#[test]
fn two_mounts_started_at_once_on_one_mountpoint_do_not_stack() {
    if !require_root("mounts") {
        return;
    }
    let t = scratch();
    let img = image(t.path());
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    for round in 0..6 {
        let start = || {
            Command::new(packfs_bin())
                .arg("mount")
                .arg(&img)
                .arg(&mp)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(), start());
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let mounted = outs.iter().filter(|o| o.status.success()).count();
        let stacked = mounts_at(&mp);
        let _ = packfs(&["umount".as_ref(), mp.as_os_str()]);
        let _ = packfs(&["umount".as_ref(), mp.as_os_str()]);
        assert_eq!((mounted, stacked), (1, 1), "round {round}");
        let refused = outs.iter().find(|o| !o.status.success()).unwrap();
        assert!(
            stderr(refused).contains("already mounted"),
            "{}",
            stderr(refused)
        );
    }
    // The lock files go with their mounts: none is left to pile up.
    let key = std::fs::canonicalize(&mp)
        .unwrap()
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    for dir in ["/run/user/0/packfs", "/tmp/packfs-0"] {
        let file = Path::new(dir).join(format!("mount-{key:016x}.lock"));
        assert!(!file.exists(), "{} left", file.display());
    }
}

#[test]
fn umount_of_what_is_not_mounted_says_so() {
    let t = scratch();
    let o = packfs(&["umount".as_ref(), t.path().as_os_str()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("{}: not mounted", t.path().display())),
        "{e}"
    );
    assert!(!e.contains("Invalid argument"), "{e}");
    let missing = t.path().join("missing");
    let o = packfs(&["umount".as_ref(), missing.as_os_str()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("missing: no such file or directory"), "{e}");
}

#[test]
fn a_mountpoint_with_contents_needs_nonempty_in_mount_and_in_run() {
    if !require_root("mounts") {
        return;
    }
    let t = scratch();
    let img = image(t.path());
    let mp = t.path().join("full");
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(mp.join("mine.txt"), b"mine").unwrap();
    let spec = format!("{}:{}", img.display(), mp.display());
    // Refused, naming the option this very command takes.
    let o = packfs(&["mount".as_ref(), img.as_os_str(), mp.as_os_str()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("not empty") && e.contains("--nonempty"), "{e}");
    assert!(!e.contains("-o nonempty"), "{e}");
    let o = packfs(&[
        "run".as_ref(),
        spec.as_ref(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("not empty") && e.contains("--nonempty"), "{e}");
    // With it: the image is seen there, and the directory's own file again
    // afterwards.
    let o = packfs(&[
        "run".as_ref(),
        "--nonempty".as_ref(),
        spec.as_ref(),
        "--".as_ref(),
        "cat".as_ref(),
        mp.join("in-image.txt").as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, b"from the image");
    let o = packfs(&[
        "mount".as_ref(),
        "--nonempty".as_ref(),
        img.as_os_str(),
        mp.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(mp.join("in-image.txt").exists() && !mp.join("mine.txt").exists());
    assert!(packfs(&["umount".as_ref(), mp.as_os_str()])
        .status
        .success());
    assert_eq!(std::fs::read(mp.join("mine.txt")).unwrap(), b"mine");
}

// Regression: a `--preload` that met a corrupt block failed the mount with
// the reader's message alone ("corrupt image: …"), naming no image.
#[test]
fn a_preload_that_meets_a_corrupt_block_names_the_image() {
    let t = scratch();
    let src = t.path().join("src");
    for d in 0..20 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..50 {
            std::fs::write(dir.join(format!("file{i}")), format!("{d} {i}")).unwrap();
        }
    }
    let img = t.path().join("img.sqfs");
    pack(&src, &img, &[]);
    // The inode table's first metadata block claims 32,767 stored bytes.
    // Opening reads only the root inode, in the table's last block, so the
    // mount gets as far as the preload.
    let mut b = std::fs::read(&img).unwrap();
    let table = u64::from_le_bytes(b[64..72].try_into().unwrap()) as usize;
    let end = u64::from_le_bytes(b[72..80].try_into().unwrap()) as usize;
    let first = (u16::from_le_bytes([b[table], b[table + 1]]) & 0x7fff) as usize;
    assert!(table + 2 + first < end, "the inode table fits one block");
    b[table..table + 2].copy_from_slice(&0x7fffu16.to_le_bytes());
    std::fs::write(&img, &b).unwrap();
    let mp = t.path().join("mp");
    std::fs::create_dir(&mp).unwrap();
    let o = packfs(&[
        "mount".as_ref(),
        "--preload".as_ref(),
        img.as_os_str(),
        mp.as_os_str(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("--preload of {}: corrupt image", img.display())),
        "{e}"
    );
    assert_eq!(mounts_at(&mp), 0);
}

// A kernel mount at the mountpoint is not refused (mounting over it with
// --nonempty is a choice), but the refusal for contents names it: the
// message said only "not empty".
#[test]
fn a_kernel_mount_at_the_mountpoint_is_named_in_the_refusal() {
    let t = scratch();
    let img = image(t.path());
    let Some(k) = KernelMount::new(&img) else {
        return;
    };
    let o = packfs(&["mount".as_ref(), img.as_os_str(), k.path().as_os_str()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("not empty") && e.contains("squashfs from") && e.contains("--nonempty"),
        "{e}"
    );
    assert_eq!(mounts_at(k.path()), 1, "a mount was stacked");
}

/// `packfs mount` as user `nobody`, in a mount namespace whose `/dev/fuse`
/// is a plain file of mode `fuse_mode` (so the test neither depends on nor
/// changes the machine's): its exit code and stderr.
fn mount_as_nobody(img: &Path, mp: &Path, fuse_mode: u32) -> (Option<i32>, String) {
    use std::os::unix::fs::PermissionsExt;
    let fake = mp.parent().unwrap().join(format!("fuse-{fuse_mode:o}"));
    std::fs::write(&fake, b"").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(fuse_mode)).unwrap();
    let script = r#"mount --bind "$1" /dev/fuse && shift && exec setpriv --reuid=65534 --regid=65534 --clear-groups "$@""#;
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&fake)
        .arg(packfs_bin())
        .arg("mount")
        .arg(img)
        .arg(mp)
        .env_remove("PACKFS_TRANSPORT")
        .output()
        .unwrap();
    (out.status.code(), stderr(&out))
}

/// Bug: a user's mount that FUSE or fusermount3 refuses said only
/// "permission denied", twice (once as a warning that it would retry
/// without io_uring). Each cause is named now, before anything is tried:
/// a `/dev/fuse` the user may not open, a mountpoint they cannot write
/// to, another user's sticky directory; and a mount that fails is
/// reported once.
#[test]
fn a_users_mount_that_fuse_would_refuse_says_why_once() {
    use std::os::unix::fs::PermissionsExt;
    if !require_root("a user's mount made in a mount namespace") {
        return;
    }
    let t = scratch();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let img = image(t.path());
    std::fs::set_permissions(&img, std::fs::Permissions::from_mode(0o644)).unwrap();
    let theirs = t.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();

    let (code, err) = mount_as_nobody(&img, &theirs, 0o600);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("/dev/fuse: permission denied") && err.contains("0666"),
        "{err}"
    );

    let roots = t.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    let (code, err) = mount_as_nobody(&img, &roots, 0o666);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "mountpoint {}: you cannot write to it",
            roots.display()
        )),
        "{err}"
    );

    let sticky = t.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (code, err) = mount_as_nobody(&img, &sticky, 0o666);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("a sticky directory of another user"), "{err}");

    // Past every check, the mount itself fails (the fake /dev/fuse is no
    // device): one message, and no retry.
    let (code, err) = mount_as_nobody(&img, &theirs, 0o666);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("packfs:")).count(),
        1,
        "{err}"
    );
    assert!(!err.contains("serving through"), "{err}");
    assert_eq!(mounts_at(&theirs), 0);
}
