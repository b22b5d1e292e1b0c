//! A corrupt image must give errors, never a panic or a hang: flip bytes all
//! over real mksquashfs images and walk and read everything through the same
//! core the FUSE server uses.

use crate::common::*;
use mountfs::cache::BlockCache;
use mountfs::fs::PackFs;
use mountfs::source::MemSource;
use mountfs::squashfs::SquashFs;
use packfs_testkit::{walk, Limits};
use std::sync::Arc;

/// Walks and reads the whole tree with the suite's one bounded walker,
/// returning how many requests failed. At most `nodes` nodes are visited, so
/// a corrupt cycle cannot hang the test.
fn walk_all(fs: &PackFs<SquashFs>, nodes: usize) -> usize {
    let lim = Limits {
        nodes,
        read_bytes: 64 << 20,
        ..Limits::default()
    };
    walk(fs, lim).errors
}

#[test]
fn flipped_bytes_give_errors_not_panics() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    for comp in ["gzip", "zstd", "lz4", "xz", "lzo"] {
        let img = t.path().join(format!("{comp}.sqfs"));
        mksquashfs(&src, &img, &["-comp", comp, "-b", "16K"]);
        let good = std::fs::read(&img).unwrap();
        let used = u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
        // Baseline: the intact image reads with no error at all.
        let fs = PackFs::new(
            SquashFs::open(
                Box::new(MemSource(good.clone())),
                Arc::new(BlockCache::new(1 << 20)),
            )
            .unwrap(),
            0,
            0,
        );
        assert_eq!(walk_all(&fs, 100_000), 0, "{comp}: intact image had errors");
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut opened = 0;
        for round in 0..100 {
            let mut bad = good.clone();
            for _ in 0..1 + round % 4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % used;
                bad[pos] ^= 1 << (x >> 60 & 7);
            }
            if let Ok(sq) =
                SquashFs::open(Box::new(MemSource(bad)), Arc::new(BlockCache::new(1 << 20)))
            {
                opened += 1;
                let fs = PackFs::new(sq, 0, 0);
                walk_all(&fs, 20_000);
            }
        }
        assert!(
            opened > 0,
            "{comp}: every corruption was caught at open; the walk was never exercised"
        );
    }
}

#[test]
fn truncated_images_are_refused_at_open() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    let img = t.path().join("i.sqfs");
    mksquashfs(&src, &img, &[]);
    let good = std::fs::read(&img).unwrap();
    let used = u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
    for cut in [0, 10, 95, 96, 4096, used / 2, used - 1] {
        let r = SquashFs::open(
            Box::new(MemSource(good[..cut].to_vec())),
            Arc::new(BlockCache::new(1 << 20)),
        );
        assert!(r.is_err(), "image cut at {cut} of {used} opened");
    }
}
