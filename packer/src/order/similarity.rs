//! The similarity order: tails that look alike end up in the same fragment
//! block, where one compression window covers them.
//!
//! Each file gets a 128-bit SimHash of the bytes that become its fragment
//! tail (the whole file when it is smaller than a block): a rolling hash
//! over 16-byte shingles, sampled by content (a shingle counts when the top
//! bits of its hash are zero, so two files sample the same shingles where
//! they share text), about [`SAMPLES`] shingles per file whatever its size.
//! Files close in Hamming distance share many shingles.
//!
//! Clustering is a greedy chain, bounded so it stays linear in the file
//! count: the files with a tail are cut, in path order, into buckets of at
//! most [`BUCKET`] files, and each bucket becomes a chain that starts at its
//! first file and moves on to the next file in path order, unless another
//! file of the bucket is clearly closer (within [`NEAR`] bits, and [`MARGIN`]
//! bits closer than the next one). Path order is the baseline because it is
//! already good (a directory's files share names, headers and vocabulary):
//! a chain that always took the nearest fingerprint, or grouped files by
//! name suffix first, gave larger images (docs/benchmarks/order.md);
//! a 128-bit SimHash only separates files that share much of their text,
//! so only those are pulled out of path order.
//!
//! Fingerprints and buckets run in parallel; every step depends on the
//! data and the path order only, so the result is the same on any number
//! of threads. The tails are read [`FP_CHUNK`] files at a time, the next
//! chunks' asked of the kernel ahead on the I/O pool (`crate::prefetch`), so
//! that a cold tree is not read one file per compression thread at a time.

use crate::prefetch::{Hint, Prefetcher, PREFETCH_BATCHES};
use crate::source_check::open_source;
use crate::tree::Tree;
use rayon::prelude::*;
use std::os::unix::fs::FileExt;

/// Shingles sampled per file, about: enough for a stable fingerprint, few
/// enough that fingerprinting costs far less than compressing.
const SAMPLES: u64 = 256;
/// Bytes of a tail read for its fingerprint at most.
const READ_MAX: u64 = 128 << 10;
/// Files fingerprinted per step, their tails prefetched a step or more
/// ahead: enough requests in flight for a disk, few enough that the page
/// cache filled ahead stays small (at most [`READ_MAX`] per file).
const FP_CHUNK: usize = 512;
/// Files per bucket at most: the chain's cost is quadratic in it.
const BUCKET: usize = 2048;
/// Hamming distance (of 128 bits) within which a file counts as near.
const NEAR: u32 = 35;
/// How much nearer than the next file in path order a file must be to be
/// taken first.
const MARGIN: u32 = 10;

type Fingerprint = [u64; 2];

/// Random 64-bit values per byte for the rolling (gear) hash, fixed so that
/// fingerprints never change between builds.
const GEAR: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut i = 0;
    while i < 256 {
        t[i] = splitmix(&mut s);
        i += 1;
    }
    t
};

const fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn mix(x: u64) -> u64 {
    let mut s = x;
    splitmix(&mut s)
}

/// The SimHash of `data`'s sampled 16-byte shingles.
fn fingerprint(data: &[u8]) -> Fingerprint {
    // Sample one shingle in 2^k: nested over k, so a long file's samples
    // are a subset of what a short file with the same text would take.
    let k = (data.len() as u64 / SAMPLES).max(1).ilog2();
    let mut counts = [0i32; 128];
    let mut h = 0u64;
    for (i, &b) in data.iter().enumerate() {
        // Shift 4: the hash depends on the last 16 bytes only.
        h = (h << 4).wrapping_add(GEAR[b as usize]);
        if i < 15 || (k > 0 && h >> (64 - k) != 0) {
            continue;
        }
        let words = [mix(h), mix(h ^ 0xA5A5_A5A5_A5A5_A5A5)];
        for (w, word) in words.iter().enumerate() {
            for (bit, c) in counts[w * 64..w * 64 + 64].iter_mut().enumerate() {
                *c += ((word >> bit) & 1) as i32 * 2 - 1;
            }
        }
    }
    let mut fp = [0u64; 2];
    for (i, &c) in counts.iter().enumerate() {
        if c > 0 {
            fp[i / 64] |= 1 << (i % 64);
        }
    }
    fp
}

fn distance(a: &Fingerprint, b: &Fingerprint) -> u32 {
    (a[0] ^ b[0]).count_ones() + (a[1] ^ b[1]).count_ones()
}

/// Bytes of a file's tail (what becomes a fragment), 0 when none.
fn tail_len(tree: &Tree, ino: u32, block_size: u32, fragments: bool) -> u64 {
    if fragments {
        tree.inodes[ino as usize].size % block_size as u64
    } else {
        0
    }
}

/// The bytes of a file that become its fragment tail (at most [`READ_MAX`]
/// of them), or None when it has no tail or cannot be read now (the data
/// pass reports the error).
fn tail_fingerprint(
    tree: &Tree,
    ino: u32,
    block_size: u32,
    fragments: bool,
) -> Option<Fingerprint> {
    let size = tree.inodes[ino as usize].size;
    let tail = tail_len(tree, ino, block_size, fragments);
    if tail == 0 {
        return None;
    }
    let file = open_source(&tree.data_path(ino), 0).ok()?;
    let mut buf = vec![0u8; tail.min(READ_MAX) as usize];
    file.read_exact_at(&mut buf, size - tail).ok()?;
    Some(fingerprint(&buf))
}

/// `files` (in path order) in the similarity order: files without a tail
/// first, in path order (where their full blocks sit does not change their
/// size), then the chained buckets. Runs on the current rayon pool.
pub(super) fn order(tree: &Tree, files: &[u32], block_size: u32, fragments: bool) -> Vec<u32> {
    let hints = |chunk: &[u32]| -> Vec<Hint> {
        chunk
            .iter()
            .filter_map(|&ino| {
                let tail = tail_len(tree, ino, block_size, fragments);
                (tail > 0).then(|| Hint {
                    path: tree.data_path(ino).into(),
                    offset: tree.inodes[ino as usize].size - tail,
                    len: tail.min(READ_MAX),
                })
            })
            .collect()
    };
    // Without an I/O pool the tails are only read without hints.
    let prefetch = Prefetcher::new().ok();
    let chunks: Vec<&[u32]> = files.chunks(FP_CHUNK).collect();
    let mut fps: Vec<Option<Fingerprint>> = Vec::with_capacity(files.len());
    for (k, chunk) in chunks.iter().enumerate() {
        if let Some(p) = &prefetch {
            p.advance(k as u64);
            let first = if k == 0 { 0 } else { k + PREFETCH_BATCHES };
            let upto = k + PREFETCH_BATCHES + 1;
            for (ahead, c) in chunks.iter().enumerate().take(upto).skip(first) {
                p.issue(ahead as u64, hints(c));
            }
        }
        fps.par_extend(
            chunk
                .par_iter()
                .map(|&ino| tail_fingerprint(tree, ino, block_size, fragments)),
        );
    }
    let mut out = Vec::with_capacity(files.len());
    let mut tails = Vec::new();
    for (&ino, fp) in files.iter().zip(fps) {
        match fp {
            None => out.push(ino),
            Some(fp) => tails.push((ino, fp)),
        }
    }
    let chains: Vec<Vec<u32>> = tails.par_chunks(BUCKET).map(chain).collect();
    out.extend(chains.into_iter().flatten());
    out
}

/// The chain through `bucket` (in path order), from its first file: the
/// next file in path order, unless one is near and clearly nearer (ties go
/// to the file earlier in `bucket`).
fn chain(bucket: &[(u32, Fingerprint)]) -> Vec<u32> {
    let mut left: Vec<usize> = (1..bucket.len()).collect();
    let mut out = Vec::with_capacity(bucket.len());
    let Some(first) = bucket.first() else {
        return out;
    };
    out.push(first.0);
    let mut at = 0usize;
    while !left.is_empty() {
        let here = &bucket[at].1;
        let mut best = 0usize;
        let mut best_d = u32::MAX;
        for (k, &j) in left.iter().enumerate() {
            let d = distance(here, &bucket[j].1);
            // `left` stays in bucket order (see the `remove` below), so
            // the first minimum is the earliest file.
            if d < best_d {
                (best, best_d) = (k, d);
            }
        }
        let d_next = distance(here, &bucket[left[0]].1);
        if !(best_d <= NEAR && best_d + MARGIN < d_next) {
            best = 0;
        }
        at = left.remove(best);
        out.push(bucket[at].0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_data::noise;

    fn text(seed: u64, n: usize) -> Vec<u8> {
        let words = [
            "alpha", "beta", "gamma", "delta", "struct", "return", "static", "int", "void", "if",
        ];
        let mut s = seed;
        (0..n)
            .flat_map(|_| {
                let w = words[(splitmix(&mut s) % words.len() as u64) as usize];
                format!("{w} ").into_bytes()
            })
            .collect()
    }

    #[test]
    fn fingerprints_are_close_for_edited_copies_and_far_for_unrelated_data() {
        let a = text(1, 4000);
        let mut edited = a.clone();
        edited.splice(5000..5000, b"an inserted line\n".iter().copied());
        edited.truncate(edited.len() - 300);
        // Same word statistics, no shared bytes.
        let other = text(2, 4000).to_ascii_uppercase();
        let (fa, fe, fo) = (fingerprint(&a), fingerprint(&edited), fingerprint(&other));
        let fn_ = fingerprint(&noise(20_000, 3));
        assert!(distance(&fa, &fe) < 20, "edited: {}", distance(&fa, &fe));
        assert!(distance(&fa, &fo) > 40, "other: {}", distance(&fa, &fo));
        assert!(distance(&fa, &fn_) > 40, "noise: {}", distance(&fa, &fn_));
        assert_eq!(fingerprint(&a), fa);
    }

    #[test]
    fn the_chain_visits_each_file_once_and_pulls_neighbours_together() {
        let (a, b) = (text(1, 2000), text(2, 2000));
        let mut a2 = a.clone();
        a2.extend_from_slice(b"tail");
        let mut b2 = b.clone();
        b2.extend_from_slice(b"tail");
        // Path order a, b, a2, b2: the chain must go a, a2, b, b2.
        let bucket: Vec<(u32, Fingerprint)> = [&a, &b, &a2, &b2]
            .iter()
            .enumerate()
            .map(|(i, d)| (i as u32, fingerprint(d)))
            .collect();
        assert_eq!(chain(&bucket), vec![0, 2, 1, 3]);
        assert!(chain(&[]).is_empty());
    }
}
