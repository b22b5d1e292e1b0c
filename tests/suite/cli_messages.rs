//! What the CLI says besides errors: `--exclude` patterns doing what
//! `pack --help` says (anchored `/` and `./`, directory-only trailing `/`,
//! a directory leaving with its contents) with a warning for a pattern that
//! matched nothing, and every warning in one form, `packfs: warning: `
//! followed by the file or image it concerns.

use crate::common::{pack, packfs_bin, run, scratch};
use std::path::Path;
use std::process::Command;

/// `packfs pack SRC -o IMG EXTRA...`, asserting success; returns stderr.
fn pack_stderr(src: &Path, img: &Path, extra: &[&str]) -> String {
    let out = Command::new(packfs_bin())
        .arg("pack")
        .arg(src)
        .arg("-o")
        .arg(img)
        .arg("-q")
        .args(extra)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{extra:?}: {e}");
    e
}

/// Every path in the image, sorted.
fn listing(img: &Path) -> Vec<String> {
    let out = run(Command::new(packfs_bin())
        .arg("ls")
        .arg("-R")
        .arg(img)
        .arg("/"));
    let mut v: Vec<String> = out
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

#[test]
fn exclude_patterns_anchor_and_match_directories_as_documented() {
    let t = scratch();
    let src = t.path().join("src");
    for d in ["d0/inner", "keep/d0", "other"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    std::fs::write(src.join("d0/inner/f"), b"f").unwrap();
    std::fs::write(src.join("keep/d0/g"), b"g").unwrap();
    std::fs::write(src.join("other/d0"), b"a file named d0").unwrap();
    let base = t.path().join("all.sqfs");
    pack(&src, &base, &[]);
    let all = listing(&base);
    let has = |l: &[String], needle: &str| l.iter().any(|p| p.contains(needle));
    assert!(
        has(&all, "inner") && has(&all, "keep/d0") && has(&all, "other/d0"),
        "{all:?}"
    );
    for (k, pattern) in ["/d0", "./d0", "/d0/", "./d0/"].iter().enumerate() {
        let img = t.path().join(format!("a{k}.sqfs"));
        let e = pack_stderr(&src, &img, &["--exclude", pattern]);
        let l = listing(&img);
        // The root's d0 and everything in it; not the d0s further down.
        assert!(
            !has(&l, "inner") && !has(&l, "d0/inner/f"),
            "{pattern}: {l:?}"
        );
        assert!(
            has(&l, "keep/d0") && has(&l, "other/d0"),
            "{pattern}: {l:?}"
        );
        assert!(!e.contains("warning"), "{pattern}: {e}");
    }
    // A trailing / alone: directories of that name at any depth, not files.
    let img = t.path().join("dirs.sqfs");
    pack_stderr(&src, &img, &["--exclude", "d0/"]);
    let l = listing(&img);
    assert!(
        !has(&l, "inner") && !has(&l, "keep/d0") && has(&l, "other/d0"),
        "{l:?}"
    );
    // A pattern that matched nothing is named in a warning.
    let img = t.path().join("none.sqfs");
    let e = pack_stderr(&src, &img, &["--exclude", "/nothing/", "--exclude", "/d0"]);
    assert!(
        e.contains("packfs: warning: ") && e.contains("--exclude \"/nothing/\" matched nothing"),
        "{e}"
    );
    assert!(!e.contains("\"/d0\""), "{e}");
}

#[test]
fn warnings_have_one_form_and_name_their_file_or_image() {
    let t = scratch();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a.txt"), b"a").unwrap();
    let fifo = src.join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path; mkfifo has no memory effects.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    // The ZIP writer skips the fifo (it has no ZIP form).
    let zip = t.path().join("x.zip");
    let e = pack_stderr(&src, &zip, &[]);
    assert!(
        e.contains(&format!(
            "packfs: warning: {}: fifo skipped",
            fifo.display()
        )),
        "{e}"
    );
    assert!(!e.contains("[WARN"), "{e}");
    // The ZIP reader's warning names the image, not "zip:".
    let mut bytes = b"prefix!".to_vec();
    bytes.extend(std::fs::read(&zip).unwrap());
    let shifted = t.path().join("shifted.zip");
    std::fs::write(&shifted, bytes).unwrap();
    let out = Command::new(packfs_bin())
        .arg("ls")
        .arg(&shifted)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(
        e.contains(&format!(
            "packfs: warning: {}: 7 extra bytes before the archive",
            shifted.display()
        )),
        "{e}"
    );
    assert!(!e.contains("warning: zip:") && !e.contains("[WARN"), "{e}");
}
