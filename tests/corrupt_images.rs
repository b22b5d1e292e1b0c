//! A corrupt image must give errors, never a panic or a hang: flip bytes all
//! over real mksquashfs images and walk and read everything through the same
//! core the FUSE server uses.

mod common;
use common::*;
use mountfs::cache::BlockCache;
use mountfs::fs::{FileKind, NodeId, PackFs, ROOT};
use mountfs::source::MemSource;
use mountfs::squashfs::SquashFs;
use std::process::Command;
use std::sync::Arc;

/// Walks and reads the whole tree, returning how many operations failed.
/// Bounded: at most `budget` nodes visited, so a corrupt cycle cannot hang us.
fn walk_all(fs: &PackFs<SquashFs>, budget: usize) -> usize {
    let mut errors = 0;
    let mut stack: Vec<NodeId> = vec![ROOT];
    let mut seen = 0;
    while let Some(n) = stack.pop() {
        seen += 1;
        if seen > budget {
            break;
        }
        let a = match fs.getattr(n) {
            Ok(a) => a,
            Err(_) => {
                errors += 1;
                continue;
            }
        };
        let _ = fs.listxattr(n);
        match a.kind {
            FileKind::Dir => match fs.list(n) {
                Ok(es) => {
                    for e in es {
                        if fs.lookup(n, &e.name).is_err() {
                            errors += 1;
                        }
                        stack.push(e.node);
                    }
                }
                Err(_) => errors += 1,
            },
            FileKind::File if fs.read_all(n, |_| Ok(())).is_err() => errors += 1,
            FileKind::Symlink => {
                let _ = fs.readlink(n);
            }
            _ => {}
        }
    }
    errors
}

#[test]
fn flipped_bytes_give_errors_not_panics() {
    let t = scratch();
    let src = t.path().join("src");
    fixture_tree(&src, false);
    for comp in ["gzip", "zstd", "lz4", "xz", "lzo"] {
        let img = t.path().join(format!("{comp}.sqfs"));
        run(Command::new("mksquashfs").arg(&src).arg(&img).args([
            "-noappend",
            "-quiet",
            "-no-progress",
            "-comp",
            comp,
            "-b",
            "16K",
        ]));
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
    run(Command::new("mksquashfs").arg(&src).arg(&img).args([
        "-noappend",
        "-quiet",
        "-no-progress",
    ]));
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
