//! The `grouped` workload's order: the locality order of
//! `packfs.torch.ShuffleSampler`, for readers that go through a mount.
//!
//! Files are grouped by where their data lies in the image (those whose
//! data starts in one aligned span of `group_bytes` of one part); the
//! groups are shuffled and read by `window` slots at once, each slot taking
//! the next group when its own is done, one file of every slot per round,
//! the slots in a random order each round. Any `window` consecutive files
//! then come from `window` different regions of the image while each
//! region is read forward: what a data loader using the sampler asks of
//! the storage. The construction is the sampler's; the random numbers are
//! the bench's own generator, so the order for a seed is not the sampler's.
//!
//! The layout is read from the image's metadata in this process (the
//! mount under test reads the image by itself): where each raw file lies
//! in the image is what a sampler asks the image before an epoch.

use super::error::BenchError;
use super::rng::Rng;
use mountfs::image::Extent;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

/// Where each of `files` (relative paths in the tree) lies in `image` (a
/// local path or a remote location, as `--image` takes it).
pub fn extents(image: &Path, files: &[PathBuf]) -> Result<Vec<Extent>, BenchError> {
    let loc = mountfs::location::ImageLocation::from_path(image)
        .map_err(|e| BenchError::Usage(format!("--image {}: {e}", image.display())))?;
    let opener = mountfs::open::Opener::new(mountfs::open::OpenOptions::new(64 << 20));
    let opened = opener.open(&loc).map_err(|e| BenchError::Context {
        what: format!(
            "workload grouped: reading the layout of {}",
            image.display()
        ),
        source: Box::new(BenchError::Refused(e.to_string())),
    })?;
    let fs = mountfs::fs::PackFs::new(opened.image, 0, 0);
    files
        .iter()
        .map(|rel| {
            let path = rel.as_os_str().as_encoded_bytes();
            fs.resolve(path)
                .and_then(|a| fs.extent(a.node))
                .map_err(|e| {
                    BenchError::Refused(format!(
                        "workload grouped: {} in {}: {e}",
                        rel.display(),
                        image.display()
                    ))
                })
        })
        .collect()
}

/// `files` in the locality order (see the module doc) of their `extents`.
pub fn order(
    files: Vec<PathBuf>,
    extents: &[Extent],
    group_bytes: u64,
    window: usize,
    rng: &mut Rng,
) -> Vec<PathBuf> {
    debug_assert_eq!(files.len(), extents.len());
    let group_bytes = group_bytes.max(1);
    // Files by position; a group is a run of one (part, aligned span).
    let mut by_pos: Vec<usize> = (0..files.len()).collect();
    by_pos.sort_by_key(|&i| (extents[i].part, extents[i].offset, i));
    let span = |i: usize| (extents[i].part, extents[i].offset / group_bytes);
    let mut bounds = vec![0];
    for k in 1..by_pos.len() {
        if span(by_pos[k]) != span(by_pos[k - 1]) {
            bounds.push(k);
        }
    }
    bounds.push(by_pos.len());
    let groups = bounds.len() - 1;
    let mut shuffled: Vec<usize> = (0..groups).collect();
    rng.shuffle(&mut shuffled);
    // Each group goes to the slot that frees first; its k-th file is read
    // in round start + k.
    let mut free: BinaryHeap<Reverse<(usize, usize)>> = (0..window.max(1).min(groups))
        .map(|s| Reverse((0, s)))
        .collect();
    let mut start = vec![0; groups];
    for g in shuffled {
        let Some(Reverse((at, slot))) = free.pop() else {
            break;
        };
        start[g] = at;
        free.push(Reverse((at + bounds[g + 1] - bounds[g], slot)));
    }
    // (round, random tiebreak, file): each round's files in random order.
    let mut keyed: Vec<(usize, u64, usize)> = Vec::with_capacity(by_pos.len());
    for g in 0..groups {
        for (k, &i) in by_pos[bounds[g]..bounds[g + 1]].iter().enumerate() {
            keyed.push((start[g] + k, rng.next_u64(), i));
        }
    }
    keyed.sort_unstable();
    let mut slots: Vec<Option<PathBuf>> = files.into_iter().map(Some).collect();
    keyed
        .into_iter()
        .filter_map(|(_, _, i)| slots[i].take())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(offset: u64) -> Extent {
        Extent {
            part: 0,
            offset,
            len: 100,
        }
    }

    #[test]
    fn every_round_holds_one_file_of_each_slot_and_regions_are_read_forward() {
        // 40 groups of 10 files, 100 bytes apart, groups of 1,000 bytes.
        let n = 400;
        let files: Vec<PathBuf> = (0..n).map(|i| PathBuf::from(format!("f{i:03}"))).collect();
        let extents: Vec<Extent> = (0..n).map(|i| ext(i as u64 * 100)).collect();
        let window = 8;
        let got = order(files.clone(), &extents, 1000, window, &mut Rng::new(3));
        let idx: Vec<usize> = got
            .iter()
            .map(|p| p.to_str().unwrap()[1..].parse().unwrap())
            .collect();
        let mut sorted = idx.clone();
        sorted.sort();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "a permutation");
        assert_ne!(idx, (0..n).collect::<Vec<_>>());
        let group = |i: usize| i / 10;
        // Every file of a group comes after the file before it in the image.
        let mut last = vec![None; 40];
        for &i in &idx {
            assert!(last[group(i)] < Some(i));
            last[group(i)] = Some(i);
        }
        // With groups of one size, each round of `window` files takes one
        // file of `window` different groups.
        for round in idx.chunks(window) {
            let mut g: Vec<usize> = round.iter().map(|&i| group(i)).collect();
            g.sort();
            g.dedup();
            assert_eq!(g.len(), window, "{round:?}");
        }
        // The same seed gives the same order; another seed another one.
        assert_eq!(
            got,
            order(files.clone(), &extents, 1000, window, &mut Rng::new(3))
        );
        assert_ne!(got, order(files, &extents, 1000, window, &mut Rng::new(4)));
    }

    #[test]
    fn parts_never_share_a_group() {
        // Two parts with the same offsets: 4 groups, not 2.
        let files: Vec<PathBuf> = (0..8).map(|i| PathBuf::from(i.to_string())).collect();
        let extents: Vec<Extent> = (0..8)
            .map(|i| Extent {
                part: (i / 4) as u32,
                offset: (i % 4) as u64 * 500,
                len: 10,
            })
            .collect();
        let got = order(files, &extents, 1000, 4, &mut Rng::new(1));
        let first_round: Vec<u32> = got[..4]
            .iter()
            .map(|p| extents[p.to_str().unwrap().parse::<usize>().unwrap()].part)
            .collect();
        // The first round takes one file of each of the four groups.
        assert_eq!(first_round.iter().filter(|&&p| p == 0).count(), 2);
    }
}
