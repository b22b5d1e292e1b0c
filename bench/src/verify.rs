//! Checking that a mount shows the same tree as the raw directory before
//! any speed is compared: a benchmark of an image built from other data (or
//! a stale one) would report a meaningless speed-up.
//!
//! Every entry's path, type and size are compared (cheap: one walk), and
//! the contents of [`SAMPLED`] files chosen by the seed are compared byte
//! for byte (all files when there are fewer).

use super::error::{BenchError, Context};
use super::plan::Ctx;
use super::rng::Rng;
use super::sides::Side;
use super::tree::{Kind, Tree};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const SAMPLED: usize = 64;

/// Phase 3: refuses to measure unless every side after the raw one holds
/// the raw tree's files; with --no-verify, says that nothing was checked.
/// Hands nothing on: the run either goes on to measuring or ends here.
pub fn check_sides(
    ctx: &Ctx,
    sides: &[Side],
    no_verify: bool,
    seed: u64,
) -> Result<(), BenchError> {
    if no_verify {
        eprintln!("packfs: warning: --no-verify: not checking that the sides hold the same files");
        return Ok(());
    }
    for s in sides
        .iter()
        .filter(|s| !matches!(s.kind, super::sides::SideKind::Raw { .. }))
    {
        let root = s.root(&ctx.raw);
        let diffs = differences(&ctx.tree, &ctx.raw, root, seed)
            .with_context(|| format!("verifying side {}", s.label))?;
        if !diffs.is_empty() {
            return Err(BenchError::Refused(refusal(
                &ctx.raw, &s.label, root, &diffs,
            )));
        }
    }
    Ok(())
}

/// The refusal, naming the first few differences: enough to see whether the
/// image is stale or of another tree without flooding the terminal.
fn refusal(raw: &Path, label: &str, root: &Path, diffs: &[String]) -> String {
    let shown: Vec<&str> = diffs.iter().take(8).map(String::as_str).collect();
    format!(
        "the raw tree {} and side {:?} ({}) do not hold the same files ({} difference{}):\n    {}{}\nrefusing to report a speed-up; rebuild the image from this tree, or pass --no-verify to measure anyway",
        raw.display(),
        label,
        root.display(),
        diffs.len(),
        if diffs.len() == 1 { "" } else { "s" },
        shown.join("\n    "),
        if diffs.len() > shown.len() { "\n    ..." } else { "" }
    )
}

/// Differences between the raw tree and the tree under `side`, described
/// for a person; empty when they match.
fn differences(
    raw: &Tree,
    raw_root: &Path,
    side: &Path,
    seed: u64,
) -> Result<Vec<String>, BenchError> {
    let other = Tree::scan(side).with_context(|| format!("listing {}", side.display()))?;
    let mut diffs = Vec::new();
    for kind in [Kind::File, Kind::Dir, Kind::Symlink] {
        let (a, b) = (raw.count(kind), other.count(kind));
        if a != b {
            diffs.push(format!("{a} {kind:?}s in the raw tree, {b} in the image"));
        }
    }
    let theirs: HashMap<&Path, (Kind, u64)> = other
        .entries
        .iter()
        .map(|e| (e.rel.as_path(), (e.kind, e.size)))
        .collect();
    for e in &raw.entries {
        match theirs.get(e.rel.as_path()) {
            None => diffs.push(format!("{}: missing from the image", e.rel.display())),
            Some((k, _)) if *k != e.kind => diffs.push(format!(
                "{}: {:?} in the raw tree, {k:?} in the image",
                e.rel.display(),
                e.kind
            )),
            Some((_, s)) if *s != e.size => diffs.push(format!(
                "{}: {} bytes in the raw tree, {s} in the image",
                e.rel.display(),
                e.size
            )),
            _ => {}
        }
    }
    let ours: std::collections::HashSet<&Path> =
        raw.entries.iter().map(|e| e.rel.as_path()).collect();
    for e in &other.entries {
        if !ours.contains(e.rel.as_path()) {
            diffs.push(format!("{}: only in the image", e.rel.display()));
        }
    }
    let mut files: Vec<&PathBuf> = raw.files().map(|e| &e.rel).collect();
    Rng::new(seed).shuffle(&mut files);
    files.truncate(SAMPLED);
    for rel in files {
        if !theirs.contains_key(rel.as_path()) {
            continue;
        }
        if !same_content(&raw_root.join(rel), &side.join(rel))? {
            diffs.push(format!("{}: contents differ", rel.display()));
        }
    }
    Ok(diffs)
}

fn same_content(a: &Path, b: &Path) -> Result<bool, BenchError> {
    let mut fa = std::fs::File::open(a).with_context(|| format!("{}", a.display()))?;
    let mut fb = std::fs::File::open(b).with_context(|| format!("{}", b.display()))?;
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let na = read_full(&mut fa, &mut ba).with_context(|| format!("{}", a.display()))?;
        let nb = read_full(&mut fb, &mut bb).with_context(|| format!("{}", b.display()))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::super::sides::SideKind;
    use super::*;

    fn diffs(n: usize) -> Vec<String> {
        (1..=n)
            .map(|i| format!("f{i}: missing from the image"))
            .collect()
    }

    #[test]
    fn refusal_names_at_most_eight_differences() {
        let (raw, root) = (Path::new("/r"), Path::new("/m"));
        assert_eq!(
            refusal(raw, "kernel", root, &diffs(1)),
            "the raw tree /r and side \"kernel\" (/m) do not hold the same files (1 difference):\n    \
             f1: missing from the image\nrefusing to report a speed-up; rebuild the image from this \
             tree, or pass --no-verify to measure anyway"
        );
        let text = refusal(raw, "kernel", root, &diffs(9));
        assert!(text.contains("(9 differences):\n    f1: "), "{text}");
        assert!(
            text.contains("f8: missing from the image\n    ...\nrefusing"),
            "{text}"
        );
        assert!(!text.contains("f9"), "{text}");
    }

    #[test]
    fn a_side_with_other_contents_is_refused_unless_no_verify() {
        let (raw, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(raw.path().join("a"), "raw").unwrap();
        std::fs::write(other.path().join("a"), "RAW").unwrap();
        let mut ctx = Ctx::for_test(None);
        ctx.raw = raw.path().to_path_buf();
        ctx.tree = Tree::scan(raw.path()).unwrap();
        let side = |path: &Path| Side {
            label: "other".into(),
            kind: SideKind::External {
                path: path.to_path_buf(),
            },
        };
        let raw_side = Side {
            label: "raw".into(),
            kind: SideKind::Raw { emu: None },
        };
        let sides = [raw_side, side(other.path())];
        let e = check_sides(&ctx, &sides, false, 1).unwrap_err().to_string();
        assert!(
            e.contains("(1 difference):\n    a: contents differ\n"),
            "{e}"
        );
        assert!(check_sides(&ctx, &sides, true, 1).is_ok());
        std::fs::write(other.path().join("a"), "raw").unwrap();
        assert!(check_sides(&ctx, &sides, false, 1).is_ok());
    }
}
