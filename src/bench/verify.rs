//! Checking that a mount shows the same tree as the raw directory before
//! any speed is compared: a benchmark of an image built from other data (or
//! a stale one) would report a meaningless speed-up.
//!
//! Every entry's path, type and size are compared (cheap: one walk), and
//! the contents of [`SAMPLED`] files chosen by the seed are compared byte
//! for byte (all files when there are fewer).

use super::rng::Rng;
use super::tree::{Kind, Tree};
use anyhow::Context;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const SAMPLED: usize = 64;

/// Differences between the raw tree and the tree under `side`, described
/// for a person; empty when they match.
pub fn differences(
    raw: &Tree,
    raw_root: &Path,
    side: &Path,
    seed: u64,
) -> anyhow::Result<Vec<String>> {
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

fn same_content(a: &Path, b: &Path) -> anyhow::Result<bool> {
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
