//! What an installed packfs offers besides its commands:
//! `--version` names the version, the commit and the features; `packfs man
//! --out DIR` writes pages that `man -l` renders without a warning; the bash
//! completion script defines the completion when sourced by a real bash.

use crate::common::*;
use std::process::Command;

#[test]
fn version_names_the_version_the_commit_and_the_features() {
    let out = run(Command::new(packfs_bin()).arg("--version"));
    let mut lines = out.lines();
    let first = lines.next().unwrap();
    let expect = format!("packfs {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(first.starts_with(&expect), "{out}");
    // This test runs in a git checkout (or a tarball whose .git-commit was
    // expanded): the commit is known, as 12 hex digits.
    let commit = first[expect.len()..].trim_end_matches(')');
    assert!(
        commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "commit {commit:?} in {out}"
    );
    assert!(out.contains("\ntarget: x86_64-"), "{out}");
    assert!(out.contains("\nfeatures: fuse, s3, http"), "{out}");
    // -V stays one line.
    let short = run(Command::new(packfs_bin()).arg("-V"));
    assert_eq!(short.trim(), first, "{short}");
}

#[test]
fn man_renders_every_page_without_warnings() {
    if !require_tool("man") || !require_tool("groff") {
        return;
    }
    let t = scratch();
    let dir = t.path().join("man1");
    let listed = run(Command::new(packfs_bin()).args(["man", "--out"]).arg(&dir));
    let pages: Vec<&str> = listed.lines().collect();
    assert!(pages.len() >= 12, "{listed}");
    assert!(pages[0].ends_with("/packfs.1"), "{listed}");
    for page in &pages {
        let name = std::path::Path::new(page)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let out = Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "80")
            // groff's warnings on stderr: a malformed page shows here.
            .env("MANROFFOPT", "-ww")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "{page}: {stderr}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("NAME"), "{page}:\n{text}");
        assert!(text.contains(&name), "{page} does not name {name}:\n{text}");
    }
    // Without --out, packfs(1) goes to stdout.
    let page = run(Command::new(packfs_bin()).arg("man"));
    assert!(page.contains(".TH packfs 1"), "{page}");
}

#[test]
fn the_bash_completion_defines_completion_for_packfs() {
    if !require_tool("bash") {
        return;
    }
    let t = scratch();
    let script = t.path().join("packfs.bash");
    let body = run(Command::new(packfs_bin()).args(["completions", "bash"]));
    std::fs::write(&script, body).unwrap();
    let out = run(Command::new("bash").arg("-c").arg(format!(
        "source '{}' && complete -p packfs && COMP_WORDS=(packfs pa) COMP_CWORD=1 && _packfs packfs pa packfs && echo \"${{COMPREPLY[@]}}\"",
        script.display()
    )));
    assert!(
        out.contains("complete ") && out.contains(" packfs"),
        "{out}"
    );
    // Completing `packfs pa` offers `pack` (the function really runs).
    assert!(
        out.lines().last().unwrap().split(' ').any(|w| w == "pack"),
        "{out}"
    );
    let zsh = run(Command::new(packfs_bin()).args(["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef packfs"), "{zsh}");
    let fish = run(Command::new(packfs_bin()).args(["completions", "fish"]));
    assert!(fish.contains("complete -c packfs"), "{fish}");
    assert!(fish.contains("block-size"), "{fish}");
}

#[test]
fn the_easyconfig_lists_exactly_the_crates_of_cargo_lock() {
    // The committed contrib/easybuild/packfs-VERSION.eb is what
    // scripts/easyconfig.py writes from Cargo.lock now: a dependency change
    // without regenerating it fails here.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(repo.join("scripts/easyconfig.py"))
        .arg("--check")
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let eb = std::fs::read_to_string(repo.join(format!(
        "contrib/easybuild/packfs-{}.eb",
        env!("CARGO_PKG_VERSION")
    )))
    .unwrap();
    let lock = std::fs::read_to_string(repo.join("Cargo.lock")).unwrap();
    let registry = lock.matches("source = \"registry+").count();
    let crates = eb.split("\ncrates = [\n").nth(1).unwrap();
    let crates = crates.split("\n]").next().unwrap();
    assert_eq!(
        crates.lines().count(),
        registry,
        "one crates entry per registry package"
    );
    assert!(eb.contains("easyblock = 'Cargo'"));
}
