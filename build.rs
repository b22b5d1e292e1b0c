//! Records the commit the binary is built from, for `packfs --version`.
//!
//! In a git checkout (or worktree) the commit is `git rev-parse HEAD`. A
//! source tarball made by `git archive` has no .git, but `.git-commit` is
//! marked `export-subst` (.gitattributes), so the archive carries the commit
//! there. Anything else (no git, a copied tree) builds with "unknown": the
//! version must never fail a build. `PACKFS_COMMIT` in the environment wins,
//! for packagers who know the commit by other means.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// A full or abbreviated hex commit id, nothing else (an unexpanded
/// `$Format:%H$` is not one).
fn is_commit(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn main() {
    println!("cargo:rerun-if-env-changed=PACKFS_COMMIT");
    println!("cargo:rerun-if-changed=.git-commit");
    let from_env = std::env::var("PACKFS_COMMIT").ok().filter(|c| is_commit(c));
    let from_git = || {
        // Only this repository's own checkout: a tarball unpacked inside
        // some other repository must not take that one's commit.
        let top = git(&["rev-parse", "--show-toplevel"])?;
        let here = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).ok()?;
        if std::fs::canonicalize(top).ok()? != here {
            return None;
        }
        let commit = git(&["rev-parse", "HEAD"]).filter(|c| is_commit(c))?;
        // Rebuild when HEAD moves: HEAD itself, and the branch it names.
        for p in ["HEAD", "refs/heads"] {
            if let Some(path) = git(&["rev-parse", "--git-path", p]) {
                let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
        Some(commit)
    };
    let from_archive = || {
        let s = std::fs::read_to_string(".git-commit").ok()?;
        let s = s.trim().to_string();
        is_commit(&s).then_some(s)
    };
    let commit = from_env
        .or_else(from_git)
        .or_else(from_archive)
        .map(|c| c[..c.len().min(12)].to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PACKFS_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=PACKFS_TARGET={target}");
    // Static when the C runtime is linked in: glibc with `-C
    // target-feature=+crt-static` (then in the target's cfg), or musl, whose
    // default it is (and which cargo does not always list in the cfg), unless
    // the flags turn it off.
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let features = env("CARGO_CFG_TARGET_FEATURE");
    let musl_static = env("CARGO_CFG_TARGET_ENV") == "musl"
        && !env("CARGO_ENCODED_RUSTFLAGS").contains("-crt-static");
    let link = if musl_static || features.split(',').any(|f| f == "crt-static") {
        "static"
    } else {
        "dynamic"
    };
    println!("cargo:rustc-env=PACKFS_LINK={link}");
}
