//! `pack --stripe-count` off Lustre: the test machine has no
//! Lustre, so what can be checked is that on another filesystem nothing is
//! attempted and nothing fails, whatever the flag says, and that `info`
//! shows no striping. A fake `lfs` first on PATH records any call. The
//! layouts and the ioctl's arguments themselves are unit tests in
//! packer/src/lustre.rs; docs/HPC.md says what is left to check on Lustre.

use crate::common::*;
use std::process::Command;

#[test]
fn off_lustre_no_striping_is_attempted_and_every_value_packs() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), bytes(3, 200_000, false)).unwrap();
    let bin = t.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let called = t.path().join("lfs-called");
    let lfs = bin.join("lfs");
    std::fs::write(
        &lfs,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 0\n", called.display()),
    )
    .unwrap();
    std::fs::set_permissions(&lfs, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (i, v) in ["auto", "none", "8", "-1"].into_iter().enumerate() {
        for ext in ["sqfs", "zip"] {
            let img = t.path().join(format!("img{i}.{ext}"));
            run(Command::new(packfs_bin())
                .env("PATH", &path)
                .args(["pack", "-q", "--stripe-count", v])
                .arg(&src)
                .arg("-o")
                .arg(&img));
            let info = run(Command::new(packfs_bin())
                .env("PATH", &path)
                .arg("info")
                .arg(&img));
            assert!(!info.contains("striping"), "{info}");
            let cat = Command::new(packfs_bin())
                .arg("cat")
                .arg(&img)
                .arg("a")
                .output()
                .unwrap();
            assert_eq!(cat.stdout, bytes(3, 200_000, false));
        }
    }
    assert!(
        !called.exists(),
        "lfs was called off Lustre: {:?}",
        std::fs::read_to_string(&called)
    );
    // A value that is no stripe count is a usage error, before any work.
    let bad = Command::new(packfs_bin())
        .args(["pack", "--stripe-count", "0"])
        .arg(&src)
        .arg("-o")
        .arg(t.path().join("bad.sqfs"))
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("stripe count"));
    assert!(!t.path().join("bad.sqfs").exists());
}
