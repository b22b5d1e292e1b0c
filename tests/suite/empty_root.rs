//! The binary in an empty root: bubblewrap builds a root that
//! holds only the packfs binary, `/dev/fuse` (with bwrap's minimal /dev and
//! a /proc), `fusermount3` with the libraries it links, a scratch directory
//! and an `/etc/hosts` naming the test's web server. In it: pack, info, ls,
//! cat, then `packfs run` (mount, read every file by packing the mounted
//! tree again, unmount), and the same for an `http://` image addressed by
//! the host name from that /etc/hosts, so a resolver that needs anything
//! the root lacks (glibc's NSS modules, a resolv.conf) fails here.
//!
//! The binary is `$PACKFS_EMPTY_ROOT_BIN` when set (`scripts/release.sh`
//! points it at the static release binary), else the test build's own. A
//! dynamically linked one gets the libraries `ldd` names bound in too: the
//! test then checks everything but the linking, which `release.sh` checks
//! with `file` and `ldd` on the release binary.
//!
//! Needs root (fusermount3 is setuid, and bwrap mounts nosuid), bwrap and
//! fusermount3.

use crate::common::servers::RangeServer;
use crate::common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The name the sandbox's /etc/hosts gives 127.0.0.1; `.test` is reserved
/// (RFC 2606), so no real resolver could answer it.
const HOST: &str = "packfs-range.test";

fn binary() -> PathBuf {
    std::env::var_os("PACKFS_EMPTY_ROOT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(packfs_bin)
}

/// The shared libraries `ldd` says `bin` loads (none for a static binary).
fn libraries(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .map(PathBuf::from)
        .collect()
}

fn which(tool: &str) -> PathBuf {
    let out = run(Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}")));
    std::fs::canonicalize(out.trim()).unwrap()
}

/// The sandbox: `bwrap` with the empty root described above, running
/// `/bin/packfs ARGS` with `/scratch` as its working directory.
struct Root {
    binds: Vec<String>,
}

impl Root {
    fn new(bin: &Path, scratch: &Path, hosts: &Path) -> Root {
        let fusermount = which("fusermount3");
        let mut libs = libraries(bin);
        libs.extend(libraries(&fusermount));
        libs.sort();
        libs.dedup();
        let mut binds: Vec<String> = vec![
            "--unshare-ipc".into(),
            "--unshare-uts".into(),
            "--unshare-pid".into(),
            "--die-with-parent".into(),
            "--dev".into(),
            "/dev".into(),
            "--dev-bind".into(),
            "/dev/fuse".into(),
            "/dev/fuse".into(),
            "--proc".into(),
            "/proc".into(),
            "--ro-bind".into(),
            bin.display().to_string(),
            "/bin/packfs".into(),
            "--ro-bind".into(),
            fusermount.display().to_string(),
            "/usr/bin/fusermount3".into(),
            "--ro-bind".into(),
            hosts.display().to_string(),
            "/etc/hosts".into(),
            "--bind".into(),
            scratch.display().to_string(),
            "/scratch".into(),
        ];
        for l in libs {
            let real = std::fs::canonicalize(&l).unwrap();
            binds.extend([
                "--ro-bind".into(),
                real.display().to_string(),
                l.display().to_string(),
            ]);
        }
        binds.extend(
            [
                "--clearenv",
                "--setenv",
                "PATH",
                "/bin:/usr/bin",
                "--setenv",
                "HOME",
                "/scratch",
            ]
            .map(String::from),
        );
        binds.extend(["--chdir", "/scratch"].map(String::from));
        Root { binds }
    }

    fn packfs(&self, args: &[&str]) -> String {
        run(Command::new("bwrap")
            .args(&self.binds)
            .arg("/bin/packfs")
            .args(args))
    }
}

/// Regular files and symlinks under `root`: path -> content or target.
fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_dir() {
                todo.push(p);
                m.insert(rel, b"<dir>".to_vec());
            } else if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                m.insert(rel, t.into_os_string().into_encoded_bytes());
            } else {
                m.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    m
}

fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("hello.txt"), b"hello from an empty root\n").unwrap();
    std::fs::write(root.join("a/rand.bin"), bytes(7, 700_000, false)).unwrap();
    std::fs::write(root.join("a/b/text.txt"), bytes(8, 50_000, true)).unwrap();
    std::fs::write(root.join("a/b/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../hello.txt", root.join("a/link")).unwrap();
}

/// Extracts `image` outside the sandbox and checks it holds `src`'s tree.
fn assert_holds(image: &Path, src: &Path, what: &str) {
    let out = image.with_extension("extracted");
    run(Command::new(packfs_bin())
        .arg("extract")
        .arg(image)
        .arg("-o")
        .arg(&out));
    assert!(
        contents(src) == contents(&out),
        "{what}: the tree differs from the source"
    );
}

#[test]
fn pack_inspect_mount_and_http_work_in_an_empty_root() {
    if !require_root("fusermount3 is setuid and bwrap mounts nosuid")
        || !require_tool("bwrap")
        || !require_tool("fusermount3")
        || !require_tool("ldd")
    {
        return;
    }
    let bin = binary();
    let t = scratch();
    let scratch_dir = t.path().join("scratch");
    tree(&scratch_dir.join("src"));
    let server_root = t.path().join("served");
    std::fs::create_dir_all(&server_root).unwrap();
    let server = RangeServer::start(&server_root, &[]);
    let hosts = t.path().join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 {HOST}\n")).unwrap();
    let root = Root::new(&bin, &scratch_dir, &hosts);

    root.packfs(&["pack", "src", "-o", "img.sqfs", "-q"]);
    root.packfs(&["pack", "src", "-o", "img.zip", "-q"]);
    let info = root.packfs(&["info", "img.sqfs"]);
    assert!(info.to_lowercase().contains("squashfs"), "{info}");
    let ls = root.packfs(&["ls", "-R", "img.zip"]);
    assert!(ls.contains("text.txt") && ls.contains("rand.bin"), "{ls}");
    let cat = root.packfs(&["cat", "img.sqfs", "hello.txt"]);
    assert_eq!(cat, "hello from an empty root\n");

    // Mount, read every file (by packing the mounted tree), unmount.
    for img in ["img.sqfs", "img.zip"] {
        let back = format!("back-{img}.sqfs");
        root.packfs(&[
            "run",
            &format!("{img}:/scratch/mnt"),
            "--",
            "/bin/packfs",
            "pack",
            "/scratch/mnt",
            "-o",
            &back,
            "-q",
        ]);
        assert_holds(&scratch_dir.join(&back), &scratch_dir.join("src"), img);
        assert!(!scratch_dir.join("mnt").exists(), "run left its mountpoint");
    }

    // The same over http://, the server named by /etc/hosts only.
    std::fs::copy(scratch_dir.join("img.sqfs"), server_root.join("img.sqfs")).unwrap();
    let url = format!("http://{HOST}:{}/img.sqfs", server.port);
    let info = root.packfs(&["info", &url]);
    assert!(info.to_lowercase().contains("squashfs"), "{info}");
    let ls = root.packfs(&["ls", &url, "/a"]);
    assert!(ls.contains("rand.bin"), "{ls}");
    root.packfs(&[
        "run",
        &format!("{url}:/scratch/mnt"),
        "--",
        "/bin/packfs",
        "pack",
        "/scratch/mnt",
        "-o",
        "back-http.sqfs",
        "-q",
    ]);
    assert_holds(
        &scratch_dir.join("back-http.sqfs"),
        &scratch_dir.join("src"),
        "http image",
    );
    let (gets, _) = server.stats();
    assert!(gets > 0, "the server saw no request");
}
