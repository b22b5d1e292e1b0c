//! Shared test support: fixture trees built in code, a manifest of a tree as
//! `lstat` and the xattr syscalls see it, and mount guards that always
//! unmount. Readers nobody here wrote (the kernel, unsquashfs) are compared
//! through the same manifest.

pub mod servers;
mod tools;

pub use tools::*;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn write(p: &Path, data: &[u8]) {
    std::fs::write(p, data).unwrap();
}

fn lchown(p: &Path, uid: u32, gid: u32) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid path.
    unsafe { libc::lchown(c.as_ptr(), uid, gid) };
}

/// Sets `p`'s mtime (not following a symlink) to `secs` since the epoch.
pub fn set_mtime(p: &Path, secs: i64) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = libc::timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    // SAFETY: valid path and array of two timespecs.
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [ts, ts].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
}

/// Deterministic pseudo-random bytes (xorshift), compressible when `text`.
pub fn bytes(seed: u64, n: usize, text: bool) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if text {
                b"abcdefgh ijklmnop\n"[(x % 18) as usize]
            } else {
                x as u8
            }
        })
        .collect()
}

/// A tree with every entry type a user's dataset or venv may hold.
/// `big_dir` adds a directory of 10,000 entries (forces directory indexes).
pub fn fixture_tree(root: &Path, big_dir: bool) {
    std::fs::create_dir_all(root.join("d/e/f")).unwrap();
    write(&root.join("empty"), b"");
    write(&root.join("small.txt"), b"hello, packfs\n");
    for (i, n) in [
        1usize, 4095, 4096, 4097, 131071, 131072, 131073, 300_000, 1_048_577,
    ]
    .into_iter()
    .enumerate()
    {
        write(&root.join(format!("d/text{n}")), &bytes(i as u64, n, true));
        write(
            &root.join(format!("d/rand{n}")),
            &bytes(100 + i as u64, n, false),
        );
    }
    // Duplicates, small and large.
    write(&root.join("d/e/dup_small_a"), b"same small content");
    write(&root.join("d/e/dup_small_b"), b"same small content");
    write(&root.join("d/e/dup_big_a"), &bytes(7, 400_000, true));
    write(&root.join("d/e/dup_big_b"), &bytes(7, 400_000, true));
    // Names.
    write(&root.join("d/e/f/ünïcødé-名前.txt"), b"unicode");
    write(
        &root.join(format!("d/e/f/{}", "n".repeat(255))),
        b"long name",
    );
    write(&root.join("d/e/f/with space"), b"space");
    // Links.
    std::os::unix::fs::symlink("small.txt", root.join("rel_link")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("abs_link")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", root.join("dangling")).unwrap();
    write(&root.join("hard1"), b"hard linked twice");
    std::fs::hard_link(root.join("hard1"), root.join("d/hard2")).unwrap();
    write(&root.join("tri1"), b"hard linked three times");
    std::fs::hard_link(root.join("tri1"), root.join("d/e/tri2")).unwrap();
    std::fs::hard_link(root.join("tri1"), root.join("d/e/f/tri3")).unwrap();
    // Modes and owners.
    write(&root.join("suid"), b"#!/bin/sh\n");
    std::fs::set_permissions(root.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::create_dir(root.join("sticky")).unwrap();
    std::fs::set_permissions(root.join("sticky"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    write(&root.join("private"), b"secret");
    std::fs::set_permissions(root.join("private"), std::fs::Permissions::from_mode(0o600)).unwrap();
    if is_root() {
        lchown(&root.join("private"), 1234, 5678);
        lchown(&root.join("rel_link"), 42, 43);
    }
    // Special files.
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid paths.
    unsafe {
        libc::mkfifo(c(&root.join("fifo")).as_ptr(), 0o644);
        if is_root() {
            libc::mknod(
                c(&root.join("chardev")).as_ptr(),
                libc::S_IFCHR | 0o600,
                libc::makedev(1, 3),
            );
            libc::mknod(
                c(&root.join("blockdev")).as_ptr(),
                libc::S_IFBLK | 0o660,
                libc::makedev(259, 70000),
            );
        }
    }
    let _ = std::os::unix::net::UnixListener::bind(root.join("socket"));
    // Sparse file: holes around two data regions.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(root.join("sparse")).unwrap();
        f.set_len(3 << 20).unwrap();
        f.seek(SeekFrom::Start(1 << 20)).unwrap();
        f.write_all(&bytes(9, 5000, true)).unwrap();
    }
    // Xattrs (user.* and security.*), where the filesystem allows.
    let _ = xattr::set(root.join("small.txt"), "user.comment", b"a value");
    let _ = xattr::set(root.join("small.txt"), "user.empty", b"");
    let _ = xattr::set(root.join("d"), "user.dir", b"on a directory");
    let _ = xattr::set(
        root.join("d/text4096"),
        "security.test",
        &bytes(3, 300, false),
    );
    // Deep tree.
    let mut deep = root.join("deep");
    for i in 0..40 {
        deep = deep.join(format!("level{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    write(&deep.join("bottom"), b"deep");
    if big_dir {
        let big = root.join("big");
        std::fs::create_dir(&big).unwrap();
        for i in 0..10_000 {
            write(
                &big.join(format!("entry-{i:05}")),
                format!("{i}\n").as_bytes(),
            );
        }
    }
    // Times: old, future, and everything else fixed for reproducibility.
    set_mtime(&root.join("small.txt"), 1);
    set_mtime(&root.join("d/e/dup_small_a"), 4_000_000_000);
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: i64,
    pub nlink: u64,
    /// First path (in sorted order) that shares this entry's inode.
    pub link_group: PathBuf,
    pub target: Option<PathBuf>,
    pub rdev: u64,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    pub hash: Option<blake3::Hash>,
    /// `st_blocks`, when asked for (0 otherwise).
    pub blocks: u64,
}

pub struct ManifestOptions {
    pub nlink: bool,
    pub xattrs: bool,
    pub dir_size: bool,
    pub owners: bool,
    /// `st_blocks` (allocation differs between filesystems, so only for
    /// comparing two readers of one image).
    pub blocks: bool,
}

impl Default for ManifestOptions {
    fn default() -> Self {
        ManifestOptions {
            nlink: true,
            xattrs: true,
            dir_size: false,
            owners: true,
            blocks: false,
        }
    }
}

/// Everything observable about a tree, keyed by relative path.
pub fn manifest(root: &Path, o: &ManifestOptions) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut groups: BTreeMap<(u64, u64), PathBuf> = BTreeMap::new();
    let mut paths = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p.clone());
            }
            paths.push(p);
        }
    }
    paths.sort();
    for p in paths {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        let ft = m.file_type();
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_dir() {
            "dir"
        } else if ft.is_file() {
            "file"
        } else if ft.is_symlink() {
            "symlink"
        } else if ft.is_fifo() {
            "fifo"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_char_device() {
            "chardev"
        } else {
            "blockdev"
        };
        let group = groups
            .entry((m.dev(), m.ino()))
            .or_insert_with(|| rel.clone())
            .clone();
        let hash = ft.is_file().then(|| {
            let mut h = blake3::Hasher::new();
            let mut f = std::fs::File::open(&p).unwrap();
            std::io::copy(&mut f, &mut h).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            h.finalize()
        });
        let mut xattrs = BTreeMap::new();
        if o.xattrs && !ft.is_symlink() {
            if let Ok(names) = xattr::list(&p) {
                for n in names {
                    let name = n.to_string_lossy().into_owned();
                    if name.starts_with("user.")
                        || name.starts_with("security.")
                        || name.starts_with("trusted.")
                    {
                        xattrs.insert(name, xattr::get(&p, &n).unwrap().unwrap_or_default());
                    }
                }
            }
        }
        out.insert(
            rel,
            Entry {
                kind,
                mode: m.mode(),
                uid: if o.owners { m.uid() } else { 0 },
                gid: if o.owners { m.gid() } else { 0 },
                size: if ft.is_dir() && !o.dir_size {
                    0
                } else {
                    m.size()
                },
                mtime: m.mtime(),
                nlink: if o.nlink || !ft.is_dir() {
                    m.nlink()
                } else {
                    0
                },
                link_group: group,
                target: ft.is_symlink().then(|| std::fs::read_link(&p).unwrap()),
                rdev: m.rdev(),
                xattrs,
                hash,
                blocks: if o.blocks { m.blocks() } else { 0 },
            },
        );
    }
    out
}

/// Panics with a readable list of differences.
pub fn assert_same(what: &str, a: &BTreeMap<PathBuf, Entry>, b: &BTreeMap<PathBuf, Entry>) {
    let mut diffs = Vec::new();
    for (p, ea) in a {
        match b.get(p) {
            None => diffs.push(format!("only in first: {}", p.display())),
            Some(eb) if ea != eb => diffs.push(format!("{}:\n   {ea:?}\n   {eb:?}", p.display())),
            _ => {}
        }
    }
    for p in b.keys().filter(|p| !a.contains_key(*p)) {
        diffs.push(format!("only in second: {}", p.display()));
    }
    assert!(
        diffs.is_empty(),
        "{what}: {} differences:\n{}",
        diffs.len(),
        diffs[..diffs.len().min(20)].join("\n")
    );
}

/// A kernel loop mount of a SquashFS image, unmounted on drop.
pub struct KernelMount {
    pub dir: tempfile::TempDir,
}

impl KernelMount {
    /// None when the kernel mount is not possible here (not root, no loop
    /// device) and the test may go on without it (see [`require`]).
    pub fn new(image: &Path) -> Option<Self> {
        if !require_root("a kernel loop mount") {
            return None;
        }
        let dir = scratch();
        let out = Command::new("mount")
            .args(["-t", "squashfs", "-o", "loop,ro"])
            .arg(image)
            .arg(dir.path())
            .output()
            .expect("run mount");
        let why = String::from_utf8_lossy(&out.stderr);
        require(
            out.status.success(),
            &format!(
                "a kernel squashfs loop mount of {} ({why})",
                image.display()
            ),
        )
        .then_some(KernelMount { dir })
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A `packfs mount` (daemonised), unmounted on drop.
pub struct PackfsMount {
    pub dir: tempfile::TempDir,
}

impl PackfsMount {
    pub fn new(image: &Path, extra: &[&str]) -> Self {
        let dir = scratch();
        run(Command::new(packfs_bin())
            .arg("mount")
            .arg(image)
            .arg(dir.path())
            .args(extra));
        PackfsMount { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PackfsMount {
    fn drop(&mut self) {
        let _ = Command::new(packfs_bin())
            .arg("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// Mounts `img` with `args` and `--stats`, runs `work`, unmounts and
/// returns the stats the daemon wrote.
pub fn with_stats(img: &Path, args: &[&str], work: impl FnOnce(&Path)) -> serde_json::Value {
    with_stats_env(img, args, &[], work)
}

/// [`with_stats`] with `env` set for the daemon, over the test's own
/// environment (so the suite's rerun with `PACKFS_TRANSPORT=uring` serves
/// these mounts through the queues). The mount goes away even when `work`
/// panics, so a failed check leaves no mount behind.
pub fn with_stats_env(
    img: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    work: impl FnOnce(&Path),
) -> serde_json::Value {
    let dir = scratch();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let stats = dir.path().join("stats.json");
    run(Command::new(packfs_bin())
        .arg("mount")
        .arg(img)
        .arg(&mnt)
        .arg("--stats")
        .arg(&stats)
        .args(args)
        .envs(env.iter().copied()));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new(packfs_bin())
                .arg("umount")
                .arg(self.0)
                .status();
        }
    }
    let mounted = Unmount(&mnt);
    work(&mnt);
    std::mem::forget(mounted);
    run(Command::new(packfs_bin()).arg("umount").arg(&mnt));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(&stats) {
            return serde_json::from_str(&text).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stats at {}",
            stats.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `packfs mount IMG DIR ARGS` on a fresh directory with `env` set (and
/// the test's `PACKFS_TRANSPORT` and `PACKFS_DEV_SPIN_US` removed first),
/// for a mount that should be refused: checks that nothing was mounted and
/// returns its exit code and stderr.
pub fn refused_mount(img: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = scratch();
    let out = Command::new(packfs_bin())
        .arg("mount")
        .arg(img)
        .arg(dir.path())
        .args(args)
        .env_remove("PACKFS_TRANSPORT")
        .env_remove("PACKFS_DEV_SPIN_US")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(dir.path().to_str().unwrap());
    if mounted {
        let _ = Command::new(packfs_bin())
            .arg("umount")
            .arg(dir.path())
            .status();
    }
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !mounted,
        "a refused mount ({args:?} {env:?}) left a mount: {err}"
    );
    (out.status.code(), err)
}

/// Sends `sig` (as `kill` takes it, e.g. "-USR1") to `pid`.
pub fn signal(sig: &str, pid: u32) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill {sig} {pid}: {st}");
}

/// The pid of the `packfs mount` daemon serving `mountpoint`.
pub fn daemon_pid(mountpoint: &Path) -> u32 {
    daemon_of(mountpoint).unwrap_or_else(|| panic!("no daemon for {}", mountpoint.display()))
}

/// The pid of the `packfs mount` daemon serving `mountpoint`, if one runs.
///
/// Until it reports the mount ready, the daemon's parent (the command the
/// caller ran, waiting for it) has the same command line; the daemon is the
/// one of them that is no other's parent. Picking the waiter instead made a
/// test signal a process that had just exited.
pub fn daemon_of(mountpoint: &Path) -> Option<u32> {
    let want = mountpoint.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        // One that exited meanwhile has no stat to read, and is not it.
        if let (true, Some(parent)) = (
            args.contains(&b"mount".as_slice()) && args.contains(&want),
            parent_pid(pid),
        ) {
            found.push((pid, parent));
        }
    }
    found
        .iter()
        .find(|(pid, _)| !found.iter().any(|(_, parent)| parent == pid))
        .map(|(pid, _)| *pid)
}

/// `pid`'s parent, from /proc (`None` once it has exited).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A process's anonymous RSS (heap, cache, buffers; not file pages), in kB.
pub fn anon_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether the mount table lists `mp`.
pub fn listed_in_mounts(mp: &Path) -> bool {
    String::from_utf8_lossy(&std::fs::read("/proc/self/mounts").unwrap())
        .contains(mp.to_str().unwrap())
}

/// Waits up to 10 s for `done`.
pub fn within_10s(mut done: impl FnMut() -> bool) -> bool {
    (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        done()
    })
}

/// Kills a child left running when a test fails before it is done with it.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The file inode at `path` ('/'-separated, from the root) in a SquashFS image.
pub fn file_inode(
    fs: &mountfs::squashfs::SquashFs,
    path: &str,
) -> mountfs::squashfs::inode::FileInode {
    use mountfs::squashfs::inode::InodeKind;
    let mut inode = fs.inode(fs.root_ref(), false).unwrap();
    for part in path.split('/') {
        let InodeKind::Dir(d) = &inode.kind else {
            panic!("{path}: {part}'s parent is not a directory")
        };
        let e = fs
            .lookup_raw(d, part.as_bytes())
            .unwrap()
            .unwrap_or_else(|| panic!("{path}: no {part}"));
        inode = fs.inode(e.inode_ref, true).unwrap();
    }
    match inode.kind {
        InodeKind::File(f) => f,
        k => panic!("{path}: not a file: {k:?}"),
    }
}
